# An inbound PUBLISH larger than the client's receive buffer at 3.1/3.1.1
# (umqtt3.client_skip): discarded as an MQTT 5 server would have discarded it
# for us (the server's rule [MQTT-3.1.2-25]; at 5 it is a Protocol Error, the
# server having been told the size [MQTT-3.1.2-24]), and answered as a delivered one
# (PUBACK [MQTT-4.3.2-2]; PUBREC with the id kept until PUBREL [MQTT-4.3.3-2]),
# so that a persistent session is not stuck behind it. The core is driven with
# bytes and a number for the time (as in test_client_core), the blocking and
# the asyncio drivers with a fake clock (as in test_client_bounds). Runs under
# pytest and under MicroPython (tests/mp/testrunner.py), where the last test
# also proves that skipping allocates nothing under heap_lock.
import sys

from support import locked, tempdir, rmtree
from umqtt3.client_core import Core
from umqtt3.client_codec import MQTTError
from umqtt3.conn import Closed

try:
    from unittest import SkipTest  # pytest reports it as a skip
except ImportError:
    class SkipTest(Exception):
        pass

UP = 2  # Core.state
BUF = 128  # the client's bufsize in these tests
CONNACK = b"\x20\x02\x00\x00"
DISCARDED = 0x195  # the ack callback's code for such a message


def publish(topic, qos, pid=0, size=0, dup=False, msg=b""):
    """A PUBLISH of `size` bytes after its fixed header (or with `msg`)."""
    var = bytes((0, len(topic))) + topic + (bytes((pid >> 8, pid & 255)) if qos else b"")
    body = var + (msg or b"x" * (size - len(var)))
    n = len(body)
    rl = bytearray()
    while True:
        b = n & 127
        n >>= 7
        rl.append(b | (128 if n else 0))
        if not n:
            break
    return bytes((0x30 | dup << 3 | qos << 1,)) + bytes(rl) + body


def ack(t, pid):
    return bytes((t << 4 | (2 if t == 6 else 0), 2, pid >> 8, pid & 255))


class Stream:
    """A link handing out bytes added to it, at most `piece` a read; reads
    allocate nothing (the heap_lock test reads through it)."""

    def __init__(self, size=4096, piece=1 << 30):
        self.data = bytearray(size)
        self.pos = self.end = 0
        self.piece = piece
        self.reads = 0

    def add(self, b):
        if self.pos == self.end:
            self.pos = self.end = 0
        self.data[self.end:self.end + len(b)] = b
        self.end += len(b)

    def readinto(self, buf, n):
        k = min(n, self.end - self.pos, self.piece)
        if not k:
            return None
        d = self.data
        p = self.pos
        for i in range(k):
            buf[i] = d[p + i]
        self.pos = p + k
        self.reads += 1
        return k


class Log:
    def __init__(self):
        self.msgs = []
        self.acks = []

    def cb(self, topic, msg):
        self.msgs.append((bytes(topic), bytes(msg)))

    def ack(self, pid, rc):
        self.acks.append((pid, rc))


def client(piece=1 << 30, **kw):
    c = Core("dev1", bufsize=BUF, **kw)
    c.conn.link = Stream(piece=piece)
    log = Log()
    c.set_callback(log.cb)
    c.start(0)
    c.conn.tlen = c.conn.sent = 0  # (CONNECT: written)
    feed(c, CONNACK)
    assert c.state == UP
    return c, log


def feed(c, data):
    """Bytes received, handed to the core as a driver does; returns the
    number of recv() results handed over."""
    c.conn.link.add(data)
    n = 0
    k = c.conn.recv()
    while k:
        c.packet(k, 0)
        n += 1
        k = c.conn.recv()
    return n


def sent(c):
    conn = c.conn
    out = bytes(conn.tx[conn.sent:conn.tlen])
    conn.tlen = conn.sent = 0
    return out


def test_a_publish_larger_than_the_buffer_is_discarded_and_acknowledged():
    for piece in (7, 1 << 30):  # in small reads, and in one
        for q in (0, 1, 2):
            c, log = client(piece)
            c.set_ack_callback(log.ack)
            big = publish(b"t/big", q, 7, 3 * BUF)
            assert len(big) > 3 * BUF
            n = feed(c, big + publish(b"t/small", q, 8, msg=b"hi"))
            # the large one: not handed over, answered, counted, reported
            assert log.msgs == [(b"t/small", b"hi")], (piece, q, log.msgs)
            assert c.too_large == 1 and log.acks == [(0, DISCARDED)]
            t = (0, 4, 5)[q]  # nothing, PUBACK, PUBREC
            assert sent(c) == (ack(t, 7) + ack(t, 8) if q else b"")
            assert c.is_connected() and c.conn.need == 2  # back to whole packets
            assert n > 3  # the header and the pieces of the rest, each a recv() result
            if q == 2:
                feed(c, ack(6, 7) + ack(6, 8))  # PUBREL
                assert sent(c) == ack(7, 7) + ack(7, 8)  # PUBCOMP
                assert not c.store.in_has(7)


def test_a_resent_qos2_id_is_not_delivered_nor_counted_twice():
    # [MQTT-4.3.3-2]: until PUBREL, a PUBLISH with the same id is a resend
    c, log = client()
    big = publish(b"t/big", 2, 9, 3 * BUF)
    feed(c, big)
    assert sent(c) == ack(5, 9) and c.too_large == 1 and c.store.in_has(9)
    feed(c, publish(b"t/big", 2, 9, 3 * BUF, dup=True))
    assert sent(c) == ack(5, 9) and c.too_large == 1
    # a small resend with that id (the broker cannot send a different
    # message under it before PUBREL) is not delivered either
    feed(c, publish(b"t/big", 2, 9, dup=True, msg=b"x"))
    assert sent(c) == ack(5, 9) and log.msgs == []
    feed(c, ack(6, 9))
    assert sent(c) == ack(7, 9)
    feed(c, publish(b"t/new", 2, 9, msg=b"y"))  # the id is free again
    assert log.msgs == [(b"t/new", b"y")]


def test_other_packets_larger_than_the_buffer_still_drop_the_link():
    c, log = client()
    c.pid = 4
    c.wait_pid = 5
    suback = bytes((0x90, 0x82, 0x01, 0, 5)) + b"\x00" * 128  # 5 + 128 bytes
    c.conn.link.add(suback)
    try:
        c.conn.recv()
    except MQTTError as e:
        assert e.code == 0x95
    else:
        raise AssertionError("a SUBACK larger than the buffer was taken")
    # a PUBLISH whose topic alone does not fit the buffer: refused as before
    c, log = client()
    c.conn.link.add(publish(b"t/" + b"a" * BUF, 1, 3, 3 * BUF))
    try:
        c.conn.recv()
    except MQTTError as e:
        assert e.code == 0x95
    else:
        raise AssertionError("a header larger than the buffer was taken")
    assert c.too_large == 0


def test_at_mqtt5_a_publish_larger_than_the_declared_size_is_a_protocol_error():
    # At 5 the client told the server its Maximum Packet Size in CONNECT:
    # the server must not send more [MQTT-3.1.2-24], and one larger is a
    # Protocol Error (MQTT 5.0 section 3.1.2.11.4, 0x95), not a message to
    # discard and acknowledge
    c = Core("dev1", bufsize=BUF, level=5)
    c.conn.link = Stream()
    c.start(0)
    c.conn.tlen = c.conn.sent = 0
    feed(c, b"\x20\x03\x00\x00\x00")  # CONNACK, no properties
    assert c.state == UP
    body = b"\x00\x03t/x\x00\x07\x00" + b"x" * (3 * BUF)  # topic, id 7, no properties
    n = len(body)
    c.conn.link.add(bytes((0x32, (n & 0x7F) | 0x80, n >> 7)) + body)
    try:
        c.conn.recv()
    except MQTTError as e:
        assert e.code == 0x95
    else:
        raise AssertionError("an MQTT 5 PUBLISH over the declared size was taken")
    assert c.too_large == 0 and c.conn.tlen == 0  # nothing acknowledged


def test_a_malformed_or_early_large_publish_is_a_protocol_error():
    for bad in (publish(b"t/+", 1, 3, 3 * BUF),  # a wildcard [MQTT-3.3.2-2]
                publish(b"t/x", 1, 0, 3 * BUF),  # packet id 0 [MQTT-2.3.1-1]
                publish(b"", 0, 0, 3 * BUF),  # no topic [MQTT-4.7.3-1]
                b"\x36" + publish(b"t/x", 1, 3, 3 * BUF)[1:]):  # QoS 3 [MQTT-3.3.1-4]
        c, log = client()
        c.conn.link.add(bad)
        try:
            feed(c, b"")
        except MQTTError:
            pass
        else:
            raise AssertionError("taken: %r" % bad[:12])
        assert c.too_large == 0 and c.conn.tlen == 0  # nothing answered
    c = Core("dev1", bufsize=BUF)
    c.conn.link = Stream()
    c.start(0)
    try:
        feed(c, publish(b"t/x", 1, 3, 3 * BUF))  # before CONNACK
    except MQTTError as e:
        assert e.code == 0x82
    else:
        raise AssertionError("a PUBLISH before CONNACK was taken")


def test_a_new_link_forgets_what_was_left_to_skip():
    c, log = client()
    c.conn.link.add(publish(b"t/big", 1, 7, 3 * BUF)[:BUF])  # cut off mid-message
    feed(c, b"")
    assert c.conn.need < 0 and c.too_large == 1
    c.lost(0)  # the link broke
    assert c.conn.need == 2
    c.conn.link = Stream()
    c.start(0)
    sent(c)
    feed(c, CONNACK + publish(b"t/a", 0, msg=b"z"))
    assert log.msgs == [(b"t/a", b"z")] and c.is_connected()


def test_the_link_closing_mid_skip_is_a_closed_link():
    class Ends(Stream):
        def readinto(self, buf, n):
            r = Stream.readinto(self, buf, n)
            return 0 if r is None else r  # end of stream
    c, log = client()
    c.conn.link = Ends()
    c.conn.link.add(publish(b"t/big", 0, 0, 3 * BUF)[:BUF])
    try:
        feed(c, b"")
    except Closed as e:
        assert e.args[0] == 104
    else:
        raise AssertionError("end of stream while skipping went unnoticed")



def test_a_discarded_qos2_id_in_a_filestore_hands_nothing_over_after_a_reset():
    # with a FileStore the id is on disk before PUBREC, without a body; a
    # reset before it is marked delivered leaves it undelivered on disk: the
    # next start hands nothing over (there is no message), and the id still
    # answers PUBREL with PUBCOMP
    from umqtt3.store import FileStore
    d = tempdir("skipstore")
    try:
        c, log = client(store=FileStore(d))
        feed(c, publish(b"t/big", 2, 5, 3 * BUF))
        assert sent(c) == ack(5, 5) and c.too_large == 1
        st = FileStore(d)  # as after a reset between in_add and in_done:
        st.in_add(6, b"", 0, 0)  # an id stored without a body, not yet delivered
        c = Core("dev1", bufsize=BUF, store=FileStore(d))
        log = Log()
        c.set_callback(log.cb)
        c.conn.link = Stream()
        c.clean = False
        c.start(0)
        sent(c)
        feed(c, b"\x20\x02\x01\x00")  # CONNACK, session present
        sent(c)
        assert log.msgs == [] and c.store.in_has(5) and c.store.in_has(6)
        feed(c, ack(6, 5) + ack(6, 6))
        assert sent(c) == ack(7, 5) + ack(7, 6) and not c.store.in_has(6)
    finally:
        rmtree(d)

# ------------------------------------------------------------ the drivers

class Clock:
    def __init__(self):
        self.now = 1000

    def __call__(self):
        return self.now


class Broker:
    """The driver's link: CONNACK, then a QoS 1 PUBLISH of `size` bytes and a
    small one; every read takes the clock 1 ms further. Records what the
    client writes."""

    def __init__(self, clock, size):
        self.clock = clock
        self.out = CONNACK + publish(b"t/big", 1, 1, size) + publish(b"t/s", 1, 2, msg=b"ok")
        self.pos = 0
        self.connected = False
        self.written = bytearray()

    def readinto(self, buf, n):
        if not self.connected or self.pos == len(self.out):
            return None
        self.clock.now += 1
        k = min(n, len(self.out) - self.pos)
        buf[0:k] = self.out[self.pos:self.pos + k]
        self.pos += k
        return k

    def write(self, buf, off=0, n=-1):
        if n < 0:
            n = len(buf) - off
        if buf[off] >> 4 == 1:
            self.connected = True
        else:
            self.written += buf[off:off + n]
        return n

    def close(self):
        pass


def test_poll_keeps_its_time_bound_while_skipping():
    from umqtt3 import client as client_mod
    from umqtt3.client import MQTTClient
    saved = client_mod.ticks_ms
    clock = Clock()
    client_mod.ticks_ms = clock
    try:
        peer = Broker(clock, 200 * BUF)  # 200 reads of the buffer
        c = MQTTClient("dev1", "peer", connect_link=lambda: peer, timeout_ms=50, bufsize=BUF)
        log = Log()
        c.set_callback(log.cb)
        c.connect()
        calls = 0
        while not log.msgs:
            t0 = clock.now
            c.poll(5)
            # the piece that crossed the deadline is the last one
            assert clock.now - t0 <= 5 + 1, clock.now - t0
            calls += 1
            assert calls < 100, "the skip does not end"
        assert calls > 10  # it went on over many calls
        assert log.msgs == [(b"t/s", b"ok")] and c.too_large == 1 and c.is_connected()
        assert bytes(peer.written) == ack(4, 1) + ack(4, 2)
    finally:
        client_mod.ticks_ms = saved


async def test_the_asyncio_client_skips_too():
    from umqtt3 import aio as aio_mod
    from umqtt3.aio import AsyncClient
    saved = aio_mod.ticks_ms
    clock = Clock()
    aio_mod.ticks_ms = clock
    try:
        peer = Broker(clock, 20 * BUF)
        c = AsyncClient("dev1", "peer", connect_link=lambda: peer, timeout_ms=50,
                        interval_ms=1, bufsize=BUF)
        log = Log()
        c.set_callback(log.cb)
        await c.connect()
        steps = 0
        while not log.msgs:
            t0 = clock.now
            await c._step(1000)
            # a millisecond of reads a step, and the recv() that crossed it:
            # at most three reads (the fixed header, the rest of the header)
            assert clock.now - t0 <= 1 + 3, clock.now - t0
            steps += 1
            assert steps < 100, "the skip does not end"
        assert log.msgs == [(b"t/s", b"ok")] and c.too_large == 1 and c.is_connected()
        assert bytes(peer.written) == ack(4, 1) + ack(4, 2)
    finally:
        aio_mod.ticks_ms = saved


# ------------------------------------------------------------ no allocation

def _skip_all(c):
    k = c.conn.recv()
    while k:
        c.packet(k, 0)
        k = c.conn.recv()


def test_skipping_allocates_nothing():
    if sys.implementation.name != "micropython":
        raise SkipTest("needs micropython.heap_lock")
    c = Core("dev1", bufsize=BUF)
    c.conn.link = Stream(piece=50)
    got = [0, 0]

    def cb(pkt, redelivered):
        got[0] += 1

    def acked(pid, rc):
        got[1] += 1

    c.set_callback(cb, True)
    c.set_ack_callback(acked)
    c.start(0)
    sent(c)
    feed(c, CONNACK)
    for i in range(4):
        q = 1 + i % 2
        c.conn.link.add(publish(b"t/big", q, 7, 3 * BUF) + publish(b"t/s", q, 8, msg=b"m"))
        if i < 2:
            _skip_all(c)  # the first of each loads client_skip, sets too_large
        else:
            locked(_skip_all, c)
        assert c.conn.tlen == 8  # the two acks
        c.conn.tlen = 0
        if q == 2:
            c.conn.link.add(ack(6, 7) + ack(6, 8))  # PUBREL: PUBCOMP
            locked(_skip_all, c)
            c.conn.tlen = 0
    assert c.too_large == 4 and got == [4, 4]
