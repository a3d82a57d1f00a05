# A broker's bridge as the broker's subscriber: a 3.1.1 client whose
# CONNECT has the level's 0x80 bit (mosquitto's try_private) gets No Local
# and Retain As Published on its subscriptions (Core._subscribe), as
# mosquitto gives them. Forwarding to it allocates nothing under
# MicroPython's heap_lock, as to any level-4 subscriber
# (test_broker_mem.py), and neither does what it publishes on its own
# topics, which does not come back to it.
#
# Runs under pytest on CPython and under the WebAssembly MicroPython
# (node tests/mp/run.mjs tests/mp/testrunner.py test_broker_bridge_mem).
from test_broker_mem import Peer, run, _broker, _Steady, _check_zero_alloc
from umqtt3.codec import encode_connect, encode_publish


def _connect_bridge(peer, cid):
    """CONNECT at 0x84: level 4 with the bridge bit; the CONNACK's code."""
    c = peer.conn
    start = c.tlen
    c.tlen = encode_connect(c.tx, start, cid, 4, True, 60)
    # the level: after the first byte, a one-byte length and "\x00\x04MQTT"
    assert c.tx[start + 8] == 4
    c.tx[start + 8] = 0x84
    peer.send()
    run(peer.b, [peer])
    return peer.rc


class _BridgeSteady(_Steady):
    """_Steady with a bridge as the subscriber (to sensors/#), which also
    publishes on a topic of its own subscription with every message it is
    sent: it gets the publisher's messages, never its own."""

    def __init__(self, qos):
        self.qos = qos
        b = self.b = _broker(max_inflight=4)
        sub = self.sub = Peer(b)
        pub = self.pub = Peer(b)
        assert _connect_bridge(sub, "sub") == 0
        pub.connect("pub")
        sub.subscribe(1, [("sensors/#", qos)])
        run(b, [sub, pub])
        assert sub.codes == bytes([qos])
        self.frame = bytearray(64)
        self.n = encode_publish(self.frame, 0, "sensors/n1/temp", b"21.5", qos, 1 if qos else 0)
        self.own = bytearray(64)
        self.on = encode_publish(self.own, 0, "sensors/up/temp", b"9", qos, 1 if qos else 0)
        self.pid_at = self.n - 4 - 2
        self.own_pid_at = self.on - 1 - 2
        self.pid = 1
        sub.record = False
        pub.record = False

    def go(self, k):
        b = self.b
        frame = self.frame
        own = self.own
        plink = self.pub.link
        slink = self.sub.link
        while k:
            if self.qos:
                pid = self.pid
                frame[self.pid_at] = own[self.own_pid_at] = pid >> 8
                frame[self.pid_at + 1] = own[self.own_pid_at + 1] = pid & 255
                self.pid = pid + 1 if pid < 60000 else 1
            plink.write(frame, 0, self.n)
            slink.write(own, 0, self.on)
            b.poll_once(0)
            self.sub.read()
            b.poll_once(0)
            self.pub.read()
            self.sub.read()
            k -= 1


def _check_bridge(qos):
    st = _BridgeSteady(qos)
    # _check_zero_alloc counts the PUBLISHes the subscriber got: the
    # publisher's alone, none of the bridge's own [MQTT-3.8.3-3 (5.0)]
    _check_zero_alloc(qos, st)
    run(st.b, [st.sub, st.pub])
    if qos:
        own = st.b.sessions()[b"sub"]
        assert own.inflight() == 0 and not own.nipids  # its own flows ended too


def test_forward_to_a_bridge_qos0_allocates_nothing():
    _check_bridge(0)


def test_forward_to_a_bridge_qos1_allocates_nothing():
    _check_bridge(1)


def test_forward_to_a_bridge_qos2_allocates_nothing():
    _check_bridge(2)


def test_a_bridge_gets_live_retained_messages_retained():
    # Retain As Published [MQTT-3.3.1-13 (5.0)]: a live retained message
    # reaches the bridge with RETAIN 1, a plain 3.1.1 subscriber with
    # RETAIN 0 [MQTT-3.3.1-9]; the bridge's own does not come back
    b = _broker()
    br = Peer(b)
    plain = Peer(b)
    pub = Peer(b)
    assert _connect_bridge(br, "up") == 0
    plain.connect("plain")
    pub.connect("pub")
    br.subscribe(1, [("a/#", 1)])
    plain.subscribe(1, [("a/#", 1)])
    run(b, [br, plain, pub])
    for q in (0, 1):
        pub.publish("a/r%d" % q, b"v", q, 5 if q else 0, retain=True)
        run(b, [br, plain, pub])
    br.publish("a/own", b"x", 1, 7, retain=True)
    run(b, [br, plain, pub])
    assert [m[:4] for m in br.msgs] == [(b"a/r0", b"v", 0, True), (b"a/r1", b"v", 1, True)]
    assert [m[:4] for m in plain.msgs] == [(b"a/r0", b"v", 0, False), (b"a/r1", b"v", 1, False),
                                          (b"a/own", b"x", 1, False)]
