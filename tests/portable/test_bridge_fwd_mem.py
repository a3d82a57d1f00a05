# The messages a bridge carries allocate nothing in steady state, proven
# under micropython.heap_lock() (the project's rule for the broker's
# forwarding): from a node through an `out` rule (node -> the gateway ->
# the bridge's client -> the upstream broker -> its subscriber) and from
# upstream through an `in` rule (upstream broker -> the bridge's client ->
# the gateway -> a local subscriber), with every acknowledgement, at QoS 0,
# 1 and 2. Two brokers in one process over in-memory pipes, no store (a
# store's writes allocate; with one, an `out` message waits on the queue).
#
# Runs under pytest on CPython and under MicroPython with
#     node tests/mp/run.mjs tests/mp/testrunner.py test_bridge_fwd_mem
import sys

from support import locked
from test_broker_mem import Peer, run
from umqtt3.broker import Broker
from umqtt3.codec import encode_publish, PUBLISH, PUBACK, PUBCOMP
from umqtt3.transport import Pipe

MICROPYTHON = sys.implementation.name == "micropython"


class _In:
    """An upstream broker with a publisher, a gateway bridged to it by an
    `in` rule with prefixes, a local subscriber; go(k) moves k messages
    publisher -> upstream -> bridge -> subscriber with all acknowledgements
    (a class, not a closure: see test_broker_mem._Steady)."""

    def __init__(self, qos):
        from umqtt3.bridge import install
        self.qos = qos
        up = self.up = Broker(port=None, sys_interval=0, max_inflight=4)
        gw = self.gw = Broker(port=None, sys_interval=0, max_inflight=4)

        def link():
            a, z = Pipe.pair(4096)
            up.attach(z)
            return a
        self.hub = install(gw, [{"name": "up", "rules": ["cmd/# in 2 dev/ site/"], "link": link,
                                 "status_topic": None, "window": 4}])
        sub = self.sub = Peer(gw)
        pub = self.pub = Peer(up)
        sub.connect("sub")
        pub.connect("pub")
        sub.subscribe(1, [("dev/cmd/+", qos)])
        for _ in range(20):
            gw.poll_once(0)
            up.poll_once(0)
        run(gw, [sub])
        assert self.hub.all[0].subscribed, "the bridge did not subscribe upstream"
        self.frame = bytearray(64)
        self.n = encode_publish(self.frame, 0, "site/cmd/heat", b"on", qos, 1 if qos else 0)
        self.pid_at = self.n - 2 - 2
        self.pid = 1
        sub.record = False
        pub.record = False

    def go(self, k):
        up = self.up
        gw = self.gw
        frame = self.frame
        plink = self.pub.link
        while k:
            if self.qos:
                pid = self.pid
                frame[self.pid_at] = pid >> 8
                frame[self.pid_at + 1] = pid & 255
                self.pid = pid + 1 if pid < 60000 else 1
            plink.write(frame, 0, self.n)
            up.poll_once(0)
            gw.poll_once(0)  # the bridge's client reads it, routes it, acknowledges
            self.sub.read()
            gw.poll_once(0)
            up.poll_once(0)
            self.pub.read()
            up.poll_once(0)
            gw.poll_once(0)  # (QoS 2: PUBREL -> PUBCOMP)
            up.poll_once(0)
            k -= 1


def _in_allocates_nothing(qos):
    st = _In(qos)
    st.go(20)  # warm up
    before = st.sub.got[PUBLISH]
    if MICROPYTHON:
        locked(st.go, 200)  # raises MemoryError on any allocation
    else:
        st.go(200)
    for _ in range(4):  # the last flows' PUBREL / PUBCOMP
        st.go(0)
        st.up.poll_once(0)
        st.gw.poll_once(0)
        st.pub.read()
    run(st.gw, [st.sub])
    assert st.sub.got[PUBLISH] - before == 200, st.sub.got[PUBLISH]
    if qos:
        assert st.pub.got[PUBACK if qos == 1 else PUBCOMP] >= 220, st.pub.got
    b = st.hub.all[0]
    assert b.received == 220 and st.gw.errors == 0 and st.up.errors == 0


def test_in_qos0_allocates_nothing():
    _in_allocates_nothing(0)


def test_in_qos1_allocates_nothing():
    _in_allocates_nothing(1)


def test_in_qos2_allocates_nothing():
    _in_allocates_nothing(2)


class _Out:
    """A node on a gateway bridged to an upstream broker by an `out` rule
    with a remote prefix, a subscriber upstream; go(k) moves k messages
    node -> gateway -> bridge -> upstream -> subscriber with all
    acknowledgements."""

    def __init__(self, qos):
        from umqtt3.bridge import install
        self.qos = qos
        up = self.up = Broker(port=None, sys_interval=0, max_inflight=4)
        gw = self.gw = Broker(port=None, sys_interval=0, max_inflight=4)

        def link():
            a, z = Pipe.pair(4096)
            up.attach(z)
            return a
        self.hub = install(gw, [{"name": "up", "rules": ['sensors/# out 2 "" site/'],
                                 "link": link, "status_topic": None, "window": 4}])
        sub = self.sub = Peer(up)
        pub = self.pub = Peer(gw)
        sub.connect("sub")
        pub.connect("node")
        sub.subscribe(1, [("site/sensors/+/temp", qos)])
        for _ in range(20):
            gw.poll_once(0)
            up.poll_once(0)
        run(up, [sub])
        assert self.hub.all[0].up, "the bridge did not connect"
        self.frame = bytearray(64)
        self.n = encode_publish(self.frame, 0, "sensors/n1/temp", b"21.5", qos, 1 if qos else 0)
        self.pid_at = self.n - 4 - 2
        self.pid = 1
        sub.record = False
        pub.record = False

    def go(self, k):
        up = self.up
        gw = self.gw
        frame = self.frame
        plink = self.pub.link
        while k:
            if self.qos:
                pid = self.pid
                frame[self.pid_at] = pid >> 8
                frame[self.pid_at + 1] = pid & 255
                self.pid = pid + 1 if pid < 60000 else 1
            plink.write(frame, 0, self.n)
            gw.poll_once(0)  # routed, and handed to the bridge's client
            self.pub.read()
            gw.poll_once(0)
            up.poll_once(0)
            self.sub.read()
            up.poll_once(0)
            gw.poll_once(0)  # the client reads PUBACK / PUBREC
            up.poll_once(0)
            gw.poll_once(0)  # (QoS 2: PUBCOMP)
            self.pub.read()
            k -= 1


def _out_allocates_nothing(qos):
    st = _Out(qos)
    st.go(20)  # warm up
    before = st.sub.got[PUBLISH]
    if MICROPYTHON:
        locked(st.go, 200)  # raises MemoryError on any allocation
    else:
        st.go(200)
    for _ in range(4):
        st.go(0)
        st.gw.poll_once(0)
        st.up.poll_once(0)
        st.pub.read()
    run(st.up, [st.sub])
    assert st.sub.got[PUBLISH] - before == 200, st.sub.got[PUBLISH]
    b = st.hub.all[0]
    assert b.sent == 220 and not b.q.keys and not b.q0, (b.sent, b.q.keys, b.q0)
    if qos:
        assert st.pub.got[PUBACK if qos == 1 else PUBCOMP] >= 220, st.pub.got
        assert b.client.inflight() == 0
    assert st.gw.errors == 0 and st.up.errors == 0


def test_out_qos0_allocates_nothing():
    _out_allocates_nothing(0)


def test_out_qos1_allocates_nothing():
    _out_allocates_nothing(1)


def test_out_qos2_allocates_nothing():
    _out_allocates_nothing(2)
