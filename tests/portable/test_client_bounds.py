# Time bounds under load: a broker that never stops sending must not hold
# poll(), connect() or subscribe() past the time they were given. Driven with
# bytes and a fake clock only: no sockets, no sleeping. Runs under pytest and
# under MicroPython (tests/mp/testrunner.py).
from umqtt3 import client as client_mod
from umqtt3.client import MQTTClient

CONNACK = b"\x20\x02\x00\x00"
# QoS 0 PUBLISH "t/x" with a 4-byte payload
PUBLISH = b"\x30\x09\x00\x03t/x0123"


class Clock:
    def __init__(self):
        self.now = 1000

    def __call__(self):
        return self.now


class Flood:
    """A link to a broker that answers CONNECT with CONNACK, then sends QoS 0
    PUBLISHes (each one takes the clock 1 ms further) and never answers
    anything else. It stops after `limit` of them, so that a client without
    the bound fails the assertions instead of looping for ever."""

    def __init__(self, clock, connack=True, limit=2000):
        self.clock = clock
        self.limit = limit
        self.out = bytearray(CONNACK if connack else b"")
        self.pos = 0
        self.connected = False
        self.closed = False

    def readinto(self, buf, n):
        if not self.connected:
            return None
        if self.pos == len(self.out):
            if not self.limit:
                self.clock.now += 1  # idle: time still passes
                return None
            self.limit -= 1
            self.out = bytearray(PUBLISH)  # the next one
            self.pos = 0
            self.clock.now += 1
        k = min(n, len(self.out) - self.pos)
        for i in range(k):
            buf[i] = self.out[self.pos + i]
        self.pos += k
        return k

    def write(self, buf, off=0, n=-1):
        if n < 0:
            n = len(buf) - off
        if buf[off] >> 4 == 1:
            self.connected = True  # CONNECT: the stream starts
        return n

    def close(self):
        self.closed = True


class Count:
    def __init__(self):
        self.n = 0

    def cb(self, topic, msg):
        self.n += 1


def _client(clock, **kw):
    flood = Flood(clock, **kw)
    c = MQTTClient("dev1", "peer", connect_link=lambda: flood, timeout_ms=50)
    box = Count()
    c.set_callback(box.cb)
    return c, box


def _with_clock(f):
    saved = client_mod.ticks_ms
    clock = Clock()
    client_mod.ticks_ms = clock
    try:
        f(clock)
    finally:
        client_mod.ticks_ms = saved


def test_poll_returns_within_its_timeout_under_a_flood():
    def run(clock):
        c, box = _client(clock)
        c.connect()
        for timeout in (0, 5, 20):
            t0 = clock.now
            before = box.n
            n = c.poll(timeout)
            # at least one message handled, and no more than the time allowed
            # (the packet that crossed the deadline is the last one)
            assert n >= 1 and box.n - before == n
            assert clock.now - t0 <= timeout + 1, (timeout, clock.now - t0)
    _with_clock(run)


def test_connect_returns_while_messages_keep_arriving():
    def run(clock):
        c, box = _client(clock)
        t0 = clock.now
        c.connect(timeout_ms=30)
        assert c.is_connected()
        assert clock.now - t0 <= 30 + 11, clock.now - t0
    _with_clock(run)


def test_subscribe_times_out_while_messages_keep_arriving():
    # the SUBACK never comes, the flood does: subscribe gives up after
    # timeout_ms instead of staying in one poll() for ever
    def run(clock):
        c, box = _client(clock)
        c.connect()
        t0 = clock.now
        try:
            c.subscribe(b"t/#", 0)
        except OSError as e:
            assert e.args[0] == 110
        else:
            raise AssertionError("subscribe returned without a SUBACK")
        assert 50 <= clock.now - t0 <= 50 + 11, clock.now - t0
        assert box.n > 0
    _with_clock(run)


async def test_async_step_returns_under_a_flood():
    # the asyncio driver hands the loop back after a millisecond of
    # packets, however many more keep arriving
    from umqtt3 import aio as aio_mod
    from umqtt3.aio import AsyncClient
    saved = aio_mod.ticks_ms
    clock = Clock()
    aio_mod.ticks_ms = clock
    try:
        flood = Flood(clock)
        c = AsyncClient("dev1", "peer", connect_link=lambda: flood, timeout_ms=50,
                        interval_ms=1)
        box = Count()
        c.set_callback(box.cb)
        await c.connect()
        for _ in range(3):
            t0 = clock.now
            before = box.n
            await c._step(1000)
            assert box.n > before, "nothing handled"
            assert clock.now - t0 <= 2, clock.now - t0
    finally:
        aio_mod.ticks_ms = saved


def _aio_flood(clock, connack=True):
    from umqtt3.aio import AsyncClient
    flood = Flood(clock, connack=connack)
    c = AsyncClient("dev1", "peer", connect_link=lambda: flood, timeout_ms=50, interval_ms=1)
    box = Count()
    c.set_callback(box.cb)
    return c, box


async def _with_aio_clock(f):
    from umqtt3 import aio as aio_mod
    saved = aio_mod.ticks_ms
    clock = Clock()
    aio_mod.ticks_ms = clock
    try:
        await f(clock)
    finally:
        aio_mod.ticks_ms = saved


async def test_async_connect_returns_while_messages_keep_arriving():
    # CONNACK first, then a flood that never stops: connect() returns once
    # connected, within its timeout
    async def run(clock):
        c, box = _aio_flood(clock)
        t0 = clock.now
        await c.connect(timeout_ms=30)
        assert c.is_connected()
        assert clock.now - t0 <= 30 + 2, clock.now - t0
    await _with_aio_clock(run)


async def test_async_subscribe_times_out_while_messages_keep_arriving():
    # the SUBACK never comes, the flood does: subscribe() raises OSError(110)
    # after timeout_ms, having handed the messages over meanwhile
    async def run(clock):
        c, box = _aio_flood(clock)
        await c.connect()
        t0 = clock.now
        before = box.n
        try:
            await c.subscribe(b"t/#", 0)
        except OSError as e:
            assert e.args[0] == 110
        else:
            raise AssertionError("subscribe returned without a SUBACK")
        assert 50 <= clock.now - t0 <= 50 + 2, clock.now - t0
        assert box.n > before  # the flood went on, and was handed over
    await _with_aio_clock(run)
