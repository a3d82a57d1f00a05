# MQTT 5 in the broker's memory: forwarding a level-5 PUBLISH with
# properties to a level-5 subscriber allocates nothing under MicroPython's
# heap_lock (as at 3.1.1, tests/portable/test_broker_mem.py), a broker
# serving 3.1.1 clients only never imports the MQTT 5 modules, and the RAM
# one connected MQTT 5 client costs.
#
# Runs under pytest on CPython and under the WebAssembly MicroPython
# (node tests/mp/run.mjs tests/mp/testrunner.py test_broker5_mem).
import gc
import sys

from support import locked, collect
from test_broker_mem import Peer, run, _broker, MICROPYTHON
from umqtt3 import props as P
from umqtt3.codec import (Packet, decode, encode_connect, encode_publish, encode_subscribe,
                          PUBLISH, PUBACK, PUBCOMP)
from umqtt3.transport import Pipe, Conn

PROPS = P.encode({P.CONTENT_TYPE: "text/plain", P.USER_PROPERTY: [("unit", "C")]})


class _Steady5:
    """A level-5 publisher and subscriber; go(k) moves k messages with
    properties publisher -> broker -> subscriber, with every ack."""

    def __init__(self, qos):
        self.qos = qos
        b = self.b = _broker(max_inflight=4)
        sub = self.sub = Peer(b)
        pub = self.pub = Peer(b)
        sub.p = Packet(5)
        pub.p = Packet(5)
        sub.connect("sub", level=5)
        pub.connect("pub", level=5)
        c = sub.conn
        c.tlen = encode_subscribe(c.tx, c.tlen, 1, [("sensors/+/temp", qos)], 0, 5)
        sub.send()
        run(b, [sub, pub])
        self.frame = bytearray(128)
        self.n = encode_publish(self.frame, 0, "sensors/n1/temp", b"21.5", qos, 1 if qos else 0,
                                False, False, 5, PROPS)
        self.pid_at = 2 + 2 + len("sensors/n1/temp")
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


def _check_zero_alloc(qos):
    st = _Steady5(qos)
    st.sub.record = True
    st.go(1)
    assert st.sub.msgs[-1][:2] == (b"sensors/n1/temp", b"21.5")
    p = st.sub.p
    st.sub.record = False
    st.go(20)
    b = st.b
    sub = st.sub
    before = sub.got[PUBLISH]
    if MICROPYTHON:
        locked(st.go, 200)
        gc.collect()
        a0 = gc.mem_alloc()
        st.go(200)
        grew = gc.mem_alloc() - a0
        assert grew == 0, grew
    else:
        st.go(200)
    if qos == 2:
        run(b, [sub, st.pub])
    assert sub.got[PUBLISH] - before == 200 * (2 if MICROPYTHON else 1), sub.got[PUBLISH]
    # the last one as the subscriber saw it: the properties came through
    assert bytes(p.buf[p.props_off:p.props_off + p.props_len]) == PROPS or p.type != PUBLISH
    if qos:
        assert st.pub.got[PUBACK if qos == 1 else PUBCOMP] >= 200
    assert b.errors == 0 and b.dropped == 0


def test_forward_v5_qos0_allocates_nothing():
    _check_zero_alloc(0)


def test_forward_v5_qos1_allocates_nothing():
    _check_zero_alloc(1)


def test_forward_v5_qos2_allocates_nothing():
    _check_zero_alloc(2)


def test_v311_only_broker_never_loads_mqtt5():
    # a gateway serving 3.1.1 clients does not pay for MQTT 5: broker5 (and
    # props) stay unimported until a level-5 CONNECT
    for m in ("umqtt3.broker5",):
        if m in sys.modules:
            del sys.modules[m]
    b = _broker()
    a = Peer(b)
    a.connect("old")
    assert b.b5 is None and "umqtt3.broker5" not in sys.modules
    n = Peer(b)
    n.p = Packet(5)
    n.connect("new", level=5)
    assert b.b5 is not None


async def test_ram_per_mqtt5_client():
    # what one connected level-5 client costs, next to test_broker_mem's
    # 3.1.1 figure: the same buffers, plus its broker5.V5
    n = 8
    b = _broker(max_clients=n + 1, max_packet=1024, max_inflight=8)
    # the first level-5 client loads broker5 and props: not a per-client cost
    first = Peer(b)
    first.p = Packet(5)
    first.connect("warm", level=5)
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
        c.tlen = encode_connect(c.tx, 0, "node%02d" % i, 5, True, 60)
        c.tlen = encode_subscribe(c.tx, c.tlen, 1, "cmd/node%02d" % i, 1, 5)
        c.flush()
    for _ in range(3):
        b.poll_once(0)
    await collect()
    m1 = gc.mem_alloc() if MICROPYTHON else 0
    assert b.connected == n + 1
    p = Packet(5)
    for c in conns:
        k = c.recv()
        if k:
            decode(p, c.rx, 0, k)
            c.done()
    if MICROPYTHON:
        per = (m1 - m0) // n
        print("RAM per connected MQTT 5 client (MicroPython, max_packet=1024, tx=1024): %d bytes"
              % per)
        assert 2048 <= per < 4608, per
