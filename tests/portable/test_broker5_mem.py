# MQTT 5 in the broker's memory: forwarding a level-5 PUBLISH with
# properties to a level-5 subscriber allocates nothing under MicroPython's
# heap_lock (as at 3.1.1, tests/portable/test_broker_mem.py), a broker
# serving 3.1.1 clients only never imports the MQTT 5 modules, and the RAM
# one connected MQTT 5 client costs.
#
# Runs under pytest on CPython and under the WebAssembly MicroPython
# (node tests/mp/run.mjs tests/mp/testrunner.py test_broker5_mem).
import sys

from test_broker_mem import (Peer, run, _broker, _Steady, _check_zero_alloc, clients_ram,
                             MICROPYTHON)
from umqtt3 import props as P
from umqtt3.codec import Packet, encode_publish, encode_subscribe

PROPS = P.encode({P.CONTENT_TYPE: "text/plain", P.USER_PROPERTY: [("unit", "C")]})


class _Steady5(_Steady):
    """_Steady at level 5: the publisher's frame carries properties, and
    both peers decode at level 5."""

    def __init__(self, qos, tam=0, props=PROPS):
        self.qos = qos
        b = self.b = _broker(max_inflight=4)
        sub = self.sub = Peer(b)
        pub = self.pub = Peer(b)
        sub.p = Packet(5)
        pub.p = Packet(5)
        # tam: the subscriber's Topic Alias Maximum, aliases the broker may set
        sub.connect("sub", level=5, props={P.TOPIC_ALIAS_MAXIMUM: tam} if tam else None)
        pub.connect("pub", level=5)
        c = sub.conn
        c.tlen = encode_subscribe(c.tx, c.tlen, 1, [("sensors/+/temp", qos)], 0, 5)
        sub.send()
        run(b, [sub, pub])
        self.frame = bytearray(128)
        self.n = encode_publish(self.frame, 0, "sensors/n1/temp", b"21.5", qos, 1 if qos else 0,
                                False, False, 5, props)
        self.pid_at = 2 + 2 + len("sensors/n1/temp")
        self.pid = 1
        # one message, recorded: the properties come through
        sub.record = True
        self.go(1)
        assert sub.msgs[-1][:2] == (b"sensors/n1/temp", b"21.5")
        p = sub.p
        alias = b"\x23\x00\x01" if tam else b""  # set with the first message
        assert bytes(p.buf[p.props_off:p.props_off + p.props_len]) == alias + props
        sub.record = False
        pub.record = False


def test_forward_v5_qos0_allocates_nothing():
    _check_zero_alloc(0, _Steady5(0))


def test_forward_v5_qos1_allocates_nothing():
    _check_zero_alloc(1, _Steady5(1))


def test_forward_v5_qos2_allocates_nothing():
    _check_zero_alloc(2, _Steady5(2))


def test_forward_v5_with_broker_topic_aliases_allocates_nothing():
    # the broker's own topic alias for a repeated topic (3.3.2.3.4): found
    # and written without allocating, at QoS 0 and 1 (QoS 1 keeps the whole
    # frame in the ring and sends the aliased one)
    for qos in (0, 1):
        st = _Steady5(qos, tam=4)
        _check_zero_alloc(qos, st)
        st.sub.record = True
        st.go(1)
        assert st.sub.msgs[-1][:2] == (b"", b"21.5")  # the alias stands for the topic


def test_forward_v5_with_message_expiry_allocates_nothing():
    # a QoS 1/2 message with a Message Expiry Interval: the moment it
    # expires is kept per ring slot (for a resend's time left,
    # [MQTT-3.3.2-6]) without allocating, once the slots are made
    ex = P.encode({P.MESSAGE_EXPIRY: 3600, P.CONTENT_TYPE: "text/plain"})
    for qos in (1, 2):
        _check_zero_alloc(qos, _Steady5(qos, props=ex))


def test_forward_v5_with_a_far_message_expiry_allocates_nothing():
    # an interval of 2**30 s or more would make a big int on MicroPython
    # (its small ints end at 2**30 - 1 on 32-bit ports), which allocates:
    # such a message counts as never expiring (broker_session.END_UP) and
    # goes on with its interval as it came [MQTT-3.3.2-6]
    for exp in (1 << 30, 0xFFFFFFFF):
        ex = P.encode({P.MESSAGE_EXPIRY: exp})
        for qos in (1, 2):
            st = _Steady5(qos, props=ex)
            _check_zero_alloc(qos, st)
            assert st.b.sessions()[b"sub"].s_exp is None  # no deadline kept


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
    per, conns = await clients_ram(b, n, 5)
    assert b.connected == n + 1
    if MICROPYTHON:
        print("RAM per connected MQTT 5 client (MicroPython, max_packet=1024, tx=1024): %d bytes"
              % per)
        assert 2048 <= per < 4608, per
