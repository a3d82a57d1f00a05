# The asyncio client's link at its ends, on an in-memory link (CPython and
# the WebAssembly MicroPython): ping() calls do not hide a silent server
# (the deadline counts from the first unanswered PINGREQ); disconnect()
# during a reconnect's resend sends nothing after DISCONNECT
# [MQTT-3.14.4-1]; run() before the first connect() raises OSError(107)
# instead of dialling with a clean session nobody asked for.
from test_client_mem import Peer
from test_aio_callback import _Link, _until
from umqtt3.aio import AsyncClient
from umqtt3.compat import asleep_ms, ticks_ms, ticks_diff


class SlowLink:
    """A link whose socket takes at most 64 bytes a write and would block
    every other one (a device's small TCP send buffer after an outage);
    answers CONNECT with CONNACK, session present. wire: what it took.
    """

    def __init__(self, wire):
        self.wire = wire
        self.writes = 0
        self.acked = False

    def readinto(self, buf, n):
        if not self.acked and self.wire and self.wire[0] >> 4 == 1:
            self.acked = True
            buf[0:4] = b"\x20\x02\x01\x00"
            return 4
        return None

    def write(self, buf, off=0, n=-1):
        if n < 0:
            n = len(buf) - off
        self.writes += 1
        if self.writes % 2 == 0:
            return None
        k = min(n, 64)
        self.wire.extend(bytes(buf[off:off + k]))
        return k

    def close(self):
        pass


def packet_types(wire):
    # the type of each packet in wire, in order
    out = []
    i = 0
    while i < len(wire):
        j = i + 1
        m = s = 0
        while True:
            b = wire[j]
            m |= (b & 127) << s
            s += 7
            j += 1
            if b < 128:
                break
        out.append(wire[i] >> 4)
        i = j + m
    return out



def _own_task(coro):
    # in a task of its own, as under asyncio.run()
    import asyncio
    return asyncio.create_task(coro)


async def test_ping_calls_do_not_keep_a_silent_link_up():
    await _own_task(_pinging())


async def _pinging():
    import asyncio
    peer = Peer()
    c = AsyncClient("dev1", "peer", interval_ms=1, timeout_ms=2000, keepalive=1,
                    connect_link=lambda: _Link(peer))
    c.set_callback(lambda t, m: None)
    await c.connect()
    loop = asyncio.get_event_loop()
    loop.set_exception_handler(lambda lp, ctx: None)  # run()'s end is awaited below
    try:
        await _silent(c, peer, asyncio.create_task(c.run()))
    finally:
        loop.set_exception_handler(None)


async def _silent(c, peer, server):
    peer.step = lambda: False  # silent from now on: no PINGRESP
    start = ticks_ms()
    while c.is_connected() and ticks_diff(ticks_ms(), start) < 5000:
        await asleep_ms(200)
        try:
            await c.ping()  # umqtt.simple's keepalive idiom
        except OSError:
            pass
    up = c.is_connected()
    if up:
        await c.disconnect()  # (ends run())
    err = None
    try:
        await server
    except OSError as e:
        err = e
    assert not up  # found dead (MQTT 3.1.1 3.1.2.10)
    assert err is not None and err.args[0] == 110  # reconnect=False: run() ends with it


async def test_run_before_the_first_connect_raises_and_never_dials():
    await _own_task(_run_first())


async def _run_first():
    # a program that starts its tasks, then waits for Wi-Fi: run() must not
    # dial by itself with the default clean session, which would make the
    # broker discard the persistent session the later connect() asks for
    # [MQTT-3.1.2-6]; it raises OSError(107) as on a client that is down
    import asyncio
    from umqtt3.codec import CONNECT, PUBLISH
    peer = Peer()
    peer.session = True
    c = AsyncClient("dev1", "peer", interval_ms=1, timeout_ms=2000, reconnect=True,
                    connect_link=lambda: _Link(peer))
    c.set_callback(lambda t, m: None)
    c.queue(b"t", b"kept", False, 1)  # stored while down, for the first connection
    err = None
    try:
        await asyncio.wait_for(c.run(), 2)  # (before, it dialled and served on)
    except Exception as e:
        err = e
    assert isinstance(err, OSError) and err.args[:1] == (107,)
    err = None
    try:
        await c.publish(b"t", b"also kept", qos=1)  # stored; nothing to send it yet
    except OSError as e:
        err = e
    assert err is not None and err.args[0] == 107 and c.inflight() == 2
    assert peer.got[CONNECT] == 0  # never dialled
    assert await c.connect(clean_session=False)  # the session the application asked for
    assert peer.got[CONNECT] == 1
    server = asyncio.create_task(c.run())
    assert await _until(lambda: peer.got[PUBLISH] == 2 and not c.inflight())
    await c.disconnect()
    await server


async def test_disconnect_during_a_resend_sends_nothing_after_disconnect():
    await _own_task(_resending())


async def _resending():
    # 8 QoS 1 messages stored while down, resent after connect() through a
    # slow socket: disconnect() comes while the resend still waits for room.
    # DISCONNECT is the last packet on the link [MQTT-3.14.4-1]; the rest
    # stays stored for the next connect()
    wire = bytearray()
    c = AsyncClient("dev1", "x", reconnect=True, interval_ms=1,
                    connect_link=lambda: SlowLink(wire))
    for i in range(8):
        c.queue(b"t/backlog", b"%02d" % i + b"." * 100, False, 1)
    await c.connect(clean_session=False)
    assert c.backlog is not None  # the resend waits for room
    await c.disconnect()
    t = packet_types(wire)
    assert t[0] == 1 and t[-1] == 14 and t.count(14) == 1, t  # CONNECT ... DISCONNECT
    assert 0 < t.count(3) < 8 and c.inflight() == 8  # nothing acknowledged: all stored
