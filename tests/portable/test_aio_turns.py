# The asyncio client's calls from several tasks, its constructor and its
# errors, on an in-memory link (CPython and the WebAssembly MicroPython):
# subscribe()/unsubscribe() from two tasks at once each get the answer with
# their own packet id [MQTT-3.8.4-2] (the core awaits one at a time: they
# take turns); connect() that times out or is cancelled leaves no link
# open (timed out, reconnect=True stays: run() dials again, as MQTTClient's
# poll(); cancelled, it is cleared); run() with reconnect=False raises when a callback's refusal dropped
# the link; the errors carry their errno; MQTTClient's argument order.
from test_client_mem import Peer, Link
from umqtt3.aio import AsyncClient
from umqtt3.compat import asleep_ms


def _client(peer, **kw):
    return AsyncClient("dev1", "peer", interval_ms=1, timeout_ms=2000,
                       connect_link=lambda: Link(peer.client_end, peer), **kw)


def _own_task(coro):
    # in a task of its own, as under asyncio.run() (the WebAssembly port
    # awaits a test from JavaScript, which a timed-out wait cannot cancel)
    import asyncio
    return asyncio.create_task(coro)


async def test_two_tasks_subscribing_at_once_get_their_own_answers():
    await _own_task(_two_subscribers())


async def _two_subscribers():
    import asyncio
    peer = Peer()
    c = _client(peer)
    c.set_callback(lambda t, m: None)
    await c.connect()
    got = await asyncio.gather(c.subscribe(b"a/1", 1), c.subscribe(b"a/2", 2),
                               c.subscribe(b"a/0", 0))
    assert got == [1, 2, 0]
    # an UNSUBACK (MQTT 3.1.1: no code, 0) does not answer a SUBSCRIBE
    got = await asyncio.gather(c.unsubscribe(b"a/1"), c.subscribe(b"a/3", 2))
    assert got == [0, 2]
    assert sorted(c.subs) == [b"a/0", b"a/2", b"a/3"]
    await c.disconnect()


async def _silent_connect(bound, keeps):
    # a peer that never answers CONNECT: bound(c) gives up on connect();
    # keeps: reconnect=True stays, and run() dials again
    import asyncio
    peer = Peer()
    links = []

    def dial():
        links.append(1)
        peer.drop()  # a fresh pipe, silent too
        return peer.client_end
    c = AsyncClient("dev1", "peer", interval_ms=1, timeout_ms=2000, reconnect=True,
                    connect_link=dial)
    err = None
    try:
        await bound(c)
    except Exception as e:
        err = e
    assert peer.client_end.closed  # no half-open link left behind
    assert c.conn.link is None and c.state == 0 and c.reconnect == keeps
    await asleep_ms(5)
    assert links == [1]  # no dial until run() steps the client
    server = asyncio.create_task(c.run())
    for _ in range(100):
        if len(links) > 1 or server.done():
            break
        await asleep_ms(1)
    assert len(links) == (2 if keeps else 1)
    await c.disconnect()
    if keeps:
        await server  # ends after disconnect()
    else:
        try:
            await server
            assert False, "run() on a client with no reconnect returned"
        except OSError as e:
            assert e.errno == 107
    return err


async def test_connect_that_times_out_leaves_no_link_open():
    e = await _silent_connect(lambda c: c.connect(timeout_ms=20), True)
    assert isinstance(e, OSError) and e.errno == 110  # (CPython: a TimeoutError)


async def test_connect_cancelled_leaves_no_link_open():
    import asyncio
    e = await _own_task(_silent_connect(lambda c: asyncio.wait_for(c.connect(), 0.02), False))
    assert isinstance(e, asyncio.TimeoutError)


async def test_run_on_a_client_that_is_down_raises_errno_107():
    c = AsyncClient("dev1", "peer")
    try:
        await c.run()
        assert False, "no error"
    except OSError as e:
        assert e.errno == 107  # ENOTCONN, on CPython too


async def test_run_raises_when_a_refused_message_dropped_the_link():
    await _own_task(_refused())


async def _refused():
    # reconnect=False: the link is gone for good, so run() does not end as
    # after disconnect() (returning None) but raises the callback's error
    import asyncio
    peer = Peer()
    c = _client(peer)

    def cb(t, m):
        raise ValueError("not taken")
    c.set_callback(cb)
    await c.connect()
    server = asyncio.create_task(c.run())
    await asleep_ms(2)
    peer.publish(b"cmd/a", b"m1", 1)
    try:
        await asyncio.wait_for(server, 1)
        assert False, "run() returned"
    except ValueError:
        pass
    assert not c.is_connected() and peer.got[4] == 0  # no PUBACK [MQTT-4.4.0-1]


def test_constructor_takes_mqttclients_arguments_in_order():
    c = AsyncClient("dev1", "broker.lan", 1884, "user", b"pw", 30)
    assert (c.port, c.user, c.password, c.keepalive) == (1884, "user", b"pw", 30)
    assert AsyncClient("dev1", "h", 0, None, None, 0, True).port == 8883  # ssl
    assert AsyncClient("dev1", "h", interval_ms=7).interval == 7
    try:
        AsyncClient("dev1", "h", 0, None, None, 0, None, None, None, 7)
        assert False, "interval_ms taken by position"
    except TypeError:
        pass


async def test_a_link_closed_by_another_task_wakes_the_task_waiting_on_it():
    await _own_task(_closed_under_the_waiter())


async def _closed_under_the_waiter():
    # run() waits to read; a publisher's write meets a reset and closes the
    # link. A socket wait does not end because the socket was closed (epoll
    # forgets a closed file): the client wakes run() itself, so the
    # reconnect and the resend come at once, not after run()'s wait
    import asyncio
    import umqtt3.aio as aio
    from umqtt3.compat import ticks_ms, ticks_diff
    peer = Peer()
    broken = []

    class Breaking(Link):
        def write(self, buf, off=0, n=-1):
            if broken:
                raise OSError(104, "")
            return Link.write(self, buf, off, n)

    def dial():
        if peer.client_end.closed:
            peer.drop()  # a new connection
        del broken[:]
        return Breaking(peer.client_end, peer)

    async def wait_sock(sock, write, ev, timeout_ms):
        start = ticks_ms()
        while ticks_diff(ticks_ms(), start) < timeout_ms and not ev.is_set():
            if write or (sock.n and not sock.closed):
                break
            await asleep_ms(1)
        ev.set()

    real = aio.wait_sock
    aio.wait_sock = wait_sock
    try:
        c = AsyncClient("dev1", "peer", interval_ms=1, timeout_ms=1000, reconnect=True,
                        backoff_ms=(1, 1), connect_link=dial)
        await c.connect()
        c.sock = peer.client_end  # wait on the pipe as on a socket
        server = asyncio.create_task(c.run())
        await asleep_ms(5)  # run() waits to read
        broken.append(1)
        await asyncio.wait_for(c.publish(b"dev/x", b"m", qos=1), 0.5)
        assert c.is_connected() and peer.got[1] == 2  # reconnected, resent, acknowledged
        assert not server.done()
        await c.disconnect()
    finally:
        aio.wait_sock = real


async def test_queue_wakes_the_task_waiting_to_read():
    await _own_task(_queued_while_run_reads())


async def _queued_while_run_reads():
    # queue() does not wait; run(), waiting to read with nothing to send
    # when it began, is woken to write the message now, not when its own
    # wait (up to a minute) ends
    import asyncio
    import umqtt3.aio as aio
    from umqtt3.codec import PUBLISH
    from umqtt3.compat import ticks_ms, ticks_diff
    peer = Peer()

    async def wait_sock(sock, write, ev, timeout_ms):
        start = ticks_ms()
        while ticks_diff(ticks_ms(), start) < timeout_ms and not ev.is_set():
            if write or sock.n:
                break
            await asleep_ms(1)
        ev.set()

    real = aio.wait_sock
    aio.wait_sock = wait_sock
    try:
        c = _client(peer)
        await c.connect()
        c.sock = peer.client_end  # wait on the pipe as on a socket
        server = asyncio.create_task(c.run())
        await asleep_ms(5)  # run() waits to read
        c.queue(b"dev/x", b"m")
        for _ in range(100):
            peer.step()
            if peer.got[PUBLISH]:
                break
            await asleep_ms(2)
        assert peer.got[PUBLISH] == 1
        assert not server.done()
        await c.disconnect()
    finally:
        aio.wait_sock = real


async def test_run_started_after_disconnect_returns():
    await _own_task(_run_after_disconnect())


async def _run_after_disconnect():
    # run() as a task that had not started when disconnect() came: it
    # returns, as after any disconnect(), instead of raising 107
    import asyncio
    peer = Peer()
    c = _client(peer)
    await c.connect()
    server = asyncio.create_task(c.run())
    await c.disconnect()
    assert await asyncio.wait_for(server, 1) is None
