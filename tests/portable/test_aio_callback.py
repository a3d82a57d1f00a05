# The asyncio client when the message callback raises, on an in-memory link
# (CPython and the WebAssembly MicroPython): run() goes on serving the
# connection and the exception goes to the event loop's exception handler
# (printed by default). The message counts as not taken: no acknowledgement,
# and for QoS 1/2 the connection drops, because a broker resends only on a
# new connection [MQTT-4.4.0-1]. Busy from a publish() inside the callback
# (window full) is such a refusal too.
from test_client_mem import Peer, Link
from umqtt3.aio import AsyncClient
from umqtt3.client_codec import Busy
from umqtt3.codec import CONNECT, PUBACK
from umqtt3.compat import asleep_ms


async def _until(f, ms=400):
    for _ in range(ms // 2):
        if f():
            return True
        await asleep_ms(2)
    return f()


async def _served(peer, cb, body, **kw):
    # run() as a task, in a task of its own (as under asyncio.run())
    import asyncio
    loop = asyncio.get_event_loop()
    reported = []
    loop.set_exception_handler(lambda lp, ctx: reported.append(ctx["exception"]))
    c = AsyncClient("dev1", "peer", interval_ms=1, timeout_ms=2000,
                    connect_link=lambda: _Link(peer), **kw)
    c.set_callback(lambda t, m: cb(c, m))
    try:
        await c.connect()
        server = asyncio.create_task(c.run())
        await body(c, server, reported)
        await c.disconnect()
    finally:
        loop.set_exception_handler(None)


class _Link(Link):
    # test_client_mem's link, on a new connection when the last one closed
    def __init__(self, peer):
        if peer.client_end.closed:
            peer.drop()  # a new connection
        Link.__init__(self, peer.client_end, peer)


def _run(coro):
    import asyncio
    return asyncio.create_task(coro)


async def _qos0_error_keeps_the_link(exc):
    # a QoS 0 message whose callback raises exc: reported to the loop's
    # exception handler, run() reads on, the link stays (nothing to resend)
    peer = Peer()
    got = []

    def cb(c, m):
        got.append(m)
        if m == b"bad":
            raise exc

    async def body(c, server, reported):
        peer.publish(b"cmd/a", b"bad", 0)
        assert await _until(lambda: reported)
        peer.publish(b"cmd/a", b"good", 0)
        assert await _until(lambda: len(got) == 2)
        assert got == [b"bad", b"good"]  # run() still reads
        assert reported == [exc]
        assert c.is_connected() and peer.got[CONNECT] == 1 and c.err is None
        assert not server.done()
    await _run(_served(peer, cb, body, reconnect=True, backoff_ms=(1, 1)))


async def test_a_raising_callback_does_not_end_run():
    await _qos0_error_keeps_the_link(ValueError("application bug"))


async def test_a_raising_callback_drops_the_link_for_qos1():
    peer = Peer()
    got = []

    def cb(c, m):
        got.append(m)
        raise ValueError("not taken")

    async def body(c, server, reported):
        peer.publish(b"cmd/a", b"m1", 1)
        assert await _until(lambda: peer.got[CONNECT] == 2)  # dropped, reconnected
        assert peer.got[PUBACK] == 0  # never acknowledged [MQTT-4.4.0-1]
        assert not server.done()
        assert [type(e) for e in reported] == [ValueError]
    await _run(_served(peer, cb, body, reconnect=True, backoff_ms=(1, 1)))


async def test_busy_in_the_callback_drops_the_link_for_qos1():
    peer = Peer()
    peer.ack = False  # our own QoS 1 publish stays in flight: the window (1) is full

    def cb(c, m):
        c.queue(b"echo", m, False, 1)  # raises Busy

    async def body(c, server, reported):
        c.queue(b"out", b"1", False, 1)
        await asleep_ms(5)
        peer.publish(b"cmd/a", b"m1", 1)
        assert await _until(lambda: peer.got[CONNECT] == 2)  # dropped, reconnected
        assert peer.got[PUBACK] == 0  # not acknowledged on the live link [MQTT-4.4.0-1]
        assert not server.done()
        assert [type(e) for e in reported] == [Busy]
    await _run(_served(peer, cb, body, window=1, reconnect=True, backoff_ms=(1, 1)))


async def test_a_callback_raising_oserror_for_qos1_backs_off_once():
    # the core drops the link for a QoS 1/2 message the callback refused;
    # run(), which drops it for an OSError too, does not count the same
    # loss a second time (the next attempt waits one backoff step)
    peer = Peer()

    def cb(c, m):
        raise OSError(5)

    async def body(c, server, reported):
        peer.publish(b"cmd/a", b"m1", 1)
        assert await _until(lambda: not c.is_connected())
        await asleep_ms(5)
        assert c.tries == 1 and peer.got[PUBACK] == 0
        assert not server.done()
    await _run(_served(peer, cb, body, reconnect=True, backoff_ms=(1000, 60000)))


async def test_an_oserror_from_the_callback_is_reported_and_the_qos0_link_stays():
    # a sensor's OSError (machine.I2C raises one) is the application's, not
    # the link's: reported as any exception from the callback, and for QoS
    # 0 the link stays (before, run() dropped it and redialled)
    await _qos0_error_keeps_the_link(OSError(19))


async def test_an_oserror_from_the_callback_without_reconnect_leaves_run_going():
    # reconnect=False: the QoS 0 link stays, so run() goes on too
    peer = Peer()

    def cb(c, m):
        raise OSError(19)

    async def body(c, server, reported):
        peer.publish(b"cmd/a", b"bad", 0)
        assert await _until(lambda: reported)
        await asleep_ms(5)
        assert c.is_connected() and not server.done()
    await _run(_served(peer, cb, body))


async def test_an_async_callback_is_reported_and_its_message_not_acknowledged():
    # the client cannot await an async def: its QoS 1 message counts as not
    # taken (no PUBACK [MQTT-4.3.2-2]; the link drops, the broker resends it
    # on the next), and the loop's exception handler gets a TypeError saying
    # why. (Start a task from a plain callback for async work.)
    peer = Peer()
    ran = []

    async def on_msg(t, m):
        ran.append(m)

    async def body(c, server, reported):
        c.set_callback(on_msg)
        peer.publish(b"cmd/a", b"m1", 1)
        assert await _until(lambda: reported)
        assert [type(e) for e in reported] == [TypeError] and "async" in str(reported[0])
        assert peer.got[PUBACK] == 0 and not ran
        assert await _until(lambda: peer.got[CONNECT] == 2)  # dropped, reconnected
        assert not server.done()
    await _run(_served(peer, lambda c, m: None, body, reconnect=True, backoff_ms=(1, 1)))
