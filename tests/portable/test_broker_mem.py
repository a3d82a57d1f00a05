# The broker and its clients in one process over in-memory pipes: the
# behaviour that must hold on a device, the proof that forwarding QoS 0 and
# QoS 1 messages to a subscriber that keeps up allocates nothing under
# MicroPython (heap_lock), and the RAM one connected client costs.
#
# Runs under pytest on CPython and under MicroPython with
#     node tests/mp/run.mjs tests/mp/testrunner.py test_broker_mem
# Plain functions and assert; no pytest, no sockets (the WebAssembly
# MicroPython has none).
import gc
import sys

from support import locked, answer_qos, collect, tempdir, rmtree
from umqtt3.broker import Broker
from umqtt3.transport import Pipe, Conn
from umqtt3.codec import (Packet, decode, encode_connect, encode_publish, encode_ack,
                          encode_subscribe, encode_simple, CONNACK, PUBLISH, PUBACK, PUBREC,
                          PUBREL, PUBCOMP, SUBACK, DISCONNECT)

try:
    from unittest import SkipTest  # pytest reports it as a skip
except ImportError:
    class SkipTest(Exception):
        pass

MICROPYTHON = sys.implementation.name == "micropython"


class Peer:
    """A raw MQTT client on one end of a Pipe; the broker serves the other.
    Packets are encoded with the codec into the peer's send buffer, replies
    decoded into one reusable Packet. Counts packets by type; records
    PUBLISHes while `record` is set (recording allocates)."""

    def __init__(self, broker, size=4096):
        self.link, end = Pipe.pair(size)
        self.b = broker
        self.client = broker.attach(end)
        self.conn = Conn(self.link, 2048, 2048)
        self.p = Packet(4)
        self.got = [0] * 16
        self.msgs = []  # (topic, payload, qos, retain, dup)
        self.record = True
        self.ack = True  # answer QoS 1/2 PUBLISHes
        self.rc = -1
        self.sp = None
        self.codes = None

    def send(self):
        self.conn.flush()

    def connect(self, cid, clean=True, keepalive=0, **kw):
        c = self.conn
        c.tlen = encode_connect(c.tx, c.tlen, cid, 4 if "level" not in kw else kw.pop("level"),
                                clean, keepalive, **kw)
        self.send()
        run(self.b, [self])
        return self.rc

    def publish(self, topic, payload, qos=0, pid=0, retain=False, dup=False):
        c = self.conn
        c.tlen = encode_publish(c.tx, c.tlen, topic, payload, qos, pid, retain, dup)
        self.send()

    def subscribe(self, pid, topics):
        c = self.conn
        c.tlen = encode_subscribe(c.tx, c.tlen, pid, topics)
        self.send()

    def ack_(self, t, pid):
        c = self.conn
        c.tlen = encode_ack(c.tx, c.tlen, t, pid)
        self.send()

    def disconnect(self):
        c = self.conn
        c.tlen = encode_simple(c.tx, c.tlen, DISCONNECT)
        self.send()

    def read(self):
        """Handle every whole packet waiting; return how many."""
        c = self.conn
        p = self.p
        k = 0
        while True:
            n = c.recv()
            if not n:
                return k
            decode(p, c.rx, 0, n)
            t = p.type
            self.got[t] += 1
            answer_qos(c, p, self.ack)
            if t == PUBLISH:
                if self.record:
                    self.msgs.append((bytes(p.topic), bytes(p.payload), p.qos, p.retain, p.dup))
            elif t == CONNACK:
                self.rc = p.rc
                self.sp = p.session_present
            elif t == SUBACK and self.record:
                self.codes = bytes(p.payload)
            c.done()
            if c.tlen:
                c.flush()
            k += 1

    def closed(self):
        return self.link.closed or self.link.peer.closed


def run(b, peers, rounds=6):
    """Let the broker and the peers exchange until nothing moves."""
    for _ in range(rounds):
        b.poll_once(0)
        moved = 0
        for pe in peers:
            if not pe.closed() or pe.link.n:
                try:
                    moved += pe.read()
                except OSError:
                    pass
        if not moved:
            b.poll_once(0)


def _broker(**kw):
    kw.setdefault("sys_interval", 0)
    return Broker(port=None, **kw)


# ---------------------------------------------------------------- behaviour

def test_pubsub_qos_levels():
    b = _broker()
    sub = Peer(b)
    pub = Peer(b)
    assert sub.connect("sub") == 0
    assert pub.connect("pub") == 0
    sub.subscribe(1, [("a/+/c", 2), ("#", 1)])
    run(b, [sub, pub])
    assert sub.codes == b"\x02\x01"
    pub.publish("a/b/c", b"q0", 0)
    pub.publish("a/b/c", b"q1", 1, pid=1)
    pub.publish("a/b/c", b"q2", 2, pid=2)
    run(b, [sub, pub])
    # once each, at min(published, highest granted) [MQTT-3.3.5-1]
    assert sub.msgs == [(b"a/b/c", b"q0", 0, False, False), (b"a/b/c", b"q1", 1, False, False),
                        (b"a/b/c", b"q2", 2, False, False)], sub.msgs
    assert pub.got[PUBACK] == 1 and pub.got[PUBREC] == 1 and pub.got[PUBCOMP] == 1
    assert b.errors == 0


def test_qos2_inbound_exactly_once():
    b = _broker()
    sub = Peer(b)
    pub = Peer(b)
    sub.connect("s")
    pub.connect("p")
    sub.subscribe(1, "t")
    run(b, [sub, pub])
    pub.publish("t", b"once", 2, pid=7)
    b.poll_once(0)
    # sent again before PUBREL: answered with PUBREC, not forwarded again
    pub.publish("t", b"once", 2, pid=7, dup=True)
    b.poll_once(0)
    pub.ack = False
    c = pub.conn
    k = 0
    while True:
        n = c.recv()
        if not n:
            break
        decode(pub.p, c.rx, 0, n)
        assert pub.p.type == PUBREC and pub.p.pid == 7
        c.done()
        k += 1
    assert k == 2
    run(b, [sub])
    pub.ack_(PUBREL, 7)
    run(b, [sub, pub])
    assert pub.got[PUBCOMP] == 1
    assert [m[1] for m in sub.msgs] == [b"once"]


def test_retained_and_will():
    b = _broker()
    pub = Peer(b)
    pub.connect("p", will_topic="w/p", will_msg=b"gone", will_qos=1)
    pub.publish("r/1", b"kept", 1, pid=1, retain=True)
    pub.publish("r/2", b"x", 0, retain=True)
    pub.publish("r/2", b"", 0, retain=True)  # clears r/2 [MQTT-3.3.1-10]
    run(b, [pub])
    sub = Peer(b)
    sub.connect("s")
    sub.subscribe(1, [("r/#", 0), ("w/#", 1)])
    run(b, [sub, pub])
    assert sub.msgs == [(b"r/1", b"kept", 0, True, False)], sub.msgs
    pub.link.close()  # lost without DISCONNECT: the will goes out
    run(b, [sub, pub])
    assert sub.msgs[-1] == (b"w/p", b"gone", 1, False, False), sub.msgs


def test_persistent_session_resume():
    b = _broker()
    sub = Peer(b)
    sub.connect("keep", clean=False)
    sub.subscribe(1, [("q/#", 1)])
    run(b, [sub])
    sub.ack = False  # the first message stays unacknowledged
    pub = Peer(b)
    pub.connect("p")
    pub.publish("q/1", b"one", 1, pid=1)
    run(b, [sub, pub])
    sub.link.close()
    run(b, [pub])
    pub.publish("q/2", b"two", 1, pid=2)
    pub.publish("q/3", b"three", 2, pid=3)
    run(b, [pub])
    again = Peer(b)
    assert again.connect("keep", clean=False) == 0
    run(b, [again, pub])
    assert again.sp
    # the unacknowledged one again with DUP, then the queue in order
    assert again.msgs == [(b"q/1", b"one", 1, False, True), (b"q/2", b"two", 1, False, False),
                          (b"q/3", b"three", 1, False, False)], again.msgs
    assert b.errors == 0


def test_takeover_and_store():
    try:
        import os
    except ImportError:
        raise SkipTest("needs os")
    d = "/tmp/umqtt3-broker-mem" if MICROPYTHON else None
    if d is None:
        import tempfile
        d = tempfile.mkdtemp()
    else:
        try:
            os.mkdir("/tmp")
        except OSError:
            pass
    b = _broker(store=d)
    one = Peer(b)
    one.connect("dev", clean=False)
    one.subscribe(1, [("cmd/#", 1)])
    one.publish("cfg", b"v1", 1, pid=1, retain=True)
    run(b, [one])
    two = Peer(b)
    assert two.connect("dev", clean=False) == 0 and two.sp  # [MQTT-3.1.4-2]
    assert one.closed()
    two.disconnect()
    run(b, [two])
    pub = Peer(b)
    pub.connect("p")
    pub.publish("cmd/x", b"queued", 1, pid=5)
    run(b, [pub])
    b.close()
    b2 = _broker(store=d)
    three = Peer(b2)
    assert three.connect("dev", clean=False) == 0 and three.sp
    three.subscribe(2, [("cfg", 1)])
    run(b2, [three])
    # it may have gone out before the restart as far as the broker can tell:
    # sent again with DUP=1 [MQTT-3.3.1-1]
    assert (b"cmd/x", b"queued", 1, False, True) in three.msgs, three.msgs
    assert (b"cfg", b"v1", 1, True, False) in three.msgs, three.msgs
    b2.close()


def test_store_written_before_the_ack():
    # no close(): what was acknowledged is on disk already, as after a crash
    # (one file per record, as on littlefs: a files layer that cannot append)
    from umqtt3.store import OSFiles
    d = tempdir("umqtt3-broker-crash")
    b = _broker(store=d, files=OSFiles())
    sub = Peer(b)
    sub.connect("dev", clean=False)
    sub.subscribe(1, [("cmd/#", 2)])
    sub.disconnect()
    pub = Peer(b)
    pub.connect("p")
    pub.publish("cfg", b"v1", 1, pid=1, retain=True)
    pub.publish("cmd/a", b"q2", 2, pid=2)
    run(b, [sub, pub])
    assert pub.got[PUBACK] == 1 and pub.got[PUBREC] == 1, pub.got
    with open(d + "/r0", "rb") as f:
        data = f.read()
    with open(d + "/r1", "wb") as f:
        f.write(data[:-2])  # a torn write: dropped at start-up
    b2 = _broker(store=d)
    assert list(b2.retained) == [b"cfg"], list(b2.retained)
    two = Peer(b2)
    assert two.connect("dev", clean=False) == 0 and two.sp  # [MQTT-3.1.2-4]
    run(b2, [two])
    assert [m[:3] for m in two.msgs] == [(b"cmd/a", b"q2", 2)], two.msgs
    b2.close()
    rmtree(d)


# ---------------------------------------------------------------- memory

class _Steady:
    """A publisher and a subscriber over pipes; go(k) moves k messages
    publisher -> broker -> subscriber, with all acknowledgements, from
    buffers prepared here. (A method, not a closure: calling a MicroPython
    closure with more than 5 cells and arguments allocates.)"""

    def __init__(self, qos):
        self.qos = qos
        b = self.b = _broker(max_inflight=4)
        sub = self.sub = Peer(b)
        pub = self.pub = Peer(b)
        sub.connect("sub")
        pub.connect("pub")
        sub.subscribe(1, [("sensors/+/temp", qos)])
        run(b, [sub, pub])
        # the publisher's frame, encoded once; only its packet id changes
        self.frame = bytearray(64)
        self.n = encode_publish(self.frame, 0, "sensors/n1/temp", b"21.5", qos, 1 if qos else 0)
        self.pid_at = self.n - 4 - 2
        self.pid = 1
        sub.record = False
        pub.record = False

    def go(self, k):
        b = self.b
        frame = self.frame
        plink = self.pub.link
        while k:
            if self.qos:
                pid = self.pid
                frame[self.pid_at] = pid >> 8
                frame[self.pid_at + 1] = pid & 255
                self.pid = pid + 1 if pid < 60000 else 1
            plink.write(frame, 0, self.n)
            b.poll_once(0)
            self.sub.read()
            b.poll_once(0)
            self.pub.read()
            k -= 1


def _check_zero_alloc(qos, steady=None):
    """steady: the _Steady (or a subclass) to move the messages; the
    publisher's and subscriber's level are its."""
    st = steady or _Steady(qos)
    st.go(20)  # warm up: the in-flight ring, lists at their size
    b = st.b
    sub = st.sub
    pub = st.pub
    go = st.go
    before = sub.got[PUBLISH]
    if MICROPYTHON:
        locked(go, 200)
        gc.collect()
        a0 = gc.mem_alloc()
        go(200)
        grew = gc.mem_alloc() - a0
        assert grew == 0, grew
    else:
        go(200)
    if qos == 2:
        run(b, [sub, pub])  # the last flows' PUBREL / PUBCOMP
    assert sub.got[PUBLISH] - before == 200 * (2 if MICROPYTHON else 1), sub.got[PUBLISH]
    if qos:
        assert pub.got[PUBACK if qos == 1 else PUBCOMP] >= 200
        assert b.sessions()[b"sub"].inflight() == 0 and not b.sessions()[b"pub"].nipids
    assert b.errors == 0 and b.dropped == 0


def test_forward_qos0_allocates_nothing():
    _check_zero_alloc(0)


def test_forward_qos1_allocates_nothing():
    _check_zero_alloc(1)


def test_forward_qos2_allocates_nothing():
    # both QoS 2 flows through flow.py: the publisher's (PUBREC, PUBREL,
    # PUBCOMP) and the subscriber's, with PUBREL recorded in the ring
    _check_zero_alloc(2)


async def clients_ram(b, n, level):
    """Attach n clients at protocol level `level`, each connected and
    subscribed at QoS 1 to its own topic; (heap each took on MicroPython,
    their Conns)."""
    links = []
    conns = []
    for _ in range(n):
        a, e = Pipe.pair(512)
        links.append((a, e))
        conns.append(Conn(a, 256, 256))
    await collect()
    m0 = gc.mem_alloc() if MICROPYTHON else 0
    for i in range(n):
        b.attach(links[i][1])
        c = conns[i]
        c.tlen = encode_connect(c.tx, 0, "node%02d" % i, level, True, 60)
        c.tlen = encode_subscribe(c.tx, c.tlen, 1, "cmd/node%02d" % i, 1, level)
        c.flush()
    for _ in range(3):
        b.poll_once(0)
    await collect()
    m1 = gc.mem_alloc() if MICROPYTHON else 0
    return (m1 - m0) // n, conns


async def test_ram_per_client():
    # what one connected client costs the broker: connection buffers,
    # session, client id; and the in-flight ring a QoS 1/2 subscriber adds
    n = 8
    b = _broker(max_clients=n, max_packet=1024, max_inflight=8)
    p = Packet(4)
    per, conns = await clients_ram(b, n, 4)
    await collect()
    m1 = gc.mem_alloc() if MICROPYTHON else 0
    assert b.connected == n
    # one QoS 1 message to each allocates each subscriber's ring
    for i in range(n):
        t = ("cmd/node%02d" % i).encode()
        b.publish(t, b"x", 1)
    for _ in range(2):
        b.poll_once(0)
    for c in conns:
        k = c.recv()
        if k:
            decode(p, c.rx, 0, k)
            c.done()
    await collect()
    m2 = gc.mem_alloc() if MICROPYTHON else 0
    if MICROPYTHON:
        ring = (m2 - m1) // n
        print("RAM per connected client (MicroPython, max_packet=1024, tx=%d): %d bytes;"
              " + %d bytes once it receives QoS 1/2 (in-flight ring of %d bytes, 8 slots)"
              % (b.limits.tx, per, ring, b.limits.ring))
        # rx + tx buffers are 2136 bytes (broker_limits.grow); the rest must stay small
        assert 2048 <= per < 4096, per
        assert ring < 1600, ring
