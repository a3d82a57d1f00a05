# Three MQTT 5 behaviours of the broker next to mosquitto 2.0's, the same
# bytes sent to each over 127.0.0.1 (tests/portable has them on the core):
# - a retained message sent because of a SUBSCRIBE carries its
#   subscription identifier [MQTT-3.3.4-3];
# - a message in flight whose expiry interval passed while its client was
#   away is sent again with 0 left here, its onward delivery begun
#   [MQTT-3.3.2-5] [MQTT-4.3.3-7], where mosquitto drops it; one with time
#   left goes with what is left at both [MQTT-3.3.2-6];
# - a property its packet does not define gets DISCONNECT 0x81 (section
#   2.2.2.2); one given twice is a Protocol Error: 0x82 here, mosquitto
#   closes the connection without a DISCONNECT.
import time

import pytest

from broker_harness import Timeout
from test_broker_harness import running, Raw
from test_broker5_connect import props_of, connect5, sub5, pub5, next_publish
from umqtt3 import props as P
from umqtt3.codec import encode_subscribe, encode_ack, PUBACK, DISCONNECT

pytestmark = pytest.mark.interop


def _both(broker_factory, body):
    """body(port) on this broker and on mosquitto: (ours, mosquitto's)."""
    with running() as b:
        ours = body(b.port)
    return ours, body(broker_factory().port)


def _retained_ids(port):
    with Raw(port) as pub, Raw(port) as c:
        connect5(pub, "rid-p")
        pub5(pub, "rid/t", b"kept", 1, 1, retain=True, props={P.CONTENT_TYPE: "c"})
        pub.expect(PUBACK, 1)
        connect5(c, "rid-s")
        sub5(c, 1, [("rid/+", 1)], {P.SUBSCRIPTION_ID: 42})
        m = next_publish(c)
        c.put(encode_ack, PUBACK, m.pid)
        return m.retain, props_of(m)


def test_retained_message_carries_the_subscription_identifier(broker_factory):
    ours, theirs = _both(broker_factory, _retained_ids)
    assert theirs == (True, {P.CONTENT_TYPE: "c", P.SUBSCRIPTION_ID: [42]})
    assert ours == theirs


def _resent(port):
    # two QoS 1 messages sent, not acknowledged, the client away 2.5 s:
    # what comes of the one valid 1 s and the one valid 100 s
    sp = {P.SESSION_EXPIRY: 600}
    with Raw(port) as pub:
        connect5(pub, "exp-p")
        with Raw(port) as s:
            connect5(s, "exp-s", clean=False, props=sp)
            sub5(s, 1, [("exp/#", 1)])
            pub5(pub, "exp/short", b"s", 1, 1, props={P.MESSAGE_EXPIRY: 1})
            pub5(pub, "exp/long", b"l", 1, 2, props={P.MESSAGE_EXPIRY: 100})
            first = [bytes(next_publish(s).topic) for _ in range(2)]
        time.sleep(2.5)
        with Raw(port) as s:
            assert connect5(s, "exp-s", clean=False, props=sp).session_present
            got = []
            while True:
                try:
                    m = s.recv(1.0)
                except Timeout:
                    break
                if m is None:
                    break
                got.append((bytes(m.topic), m.dup, props_of(m).get(P.MESSAGE_EXPIRY)))
                s.put(encode_ack, PUBACK, m.pid)
    return first, got


@pytest.mark.slow
def test_expired_message_in_flight_is_resent_here_and_dropped_by_mosquitto(broker_factory):
    ours, theirs = _both(broker_factory, _resent)
    for first, got in (ours, theirs):
        assert first == [b"exp/short", b"exp/long"]
        assert got[-1][:2] == (b"exp/long", True) and 95 <= got[-1][2] <= 98, got
    assert [g[:3] for g in ours[1][:-1]] == [(b"exp/short", True, 0)], ours
    assert [g[:2] for g in theirs[1]] == [(b"exp/long", True)], theirs


def _closed_with(port):
    out = []
    for send in (lambda c: pub5(c, "t", b"x", props=bytes([0x11, 0, 0, 0, 5])),
                 lambda c: c.put(encode_subscribe, 1, [("t", 0)], 0, 5, bytes([0x02, 0, 0, 0, 9])),
                 lambda c: pub5(c, "t", b"x", props=bytes([0x02, 0, 0, 0, 9] * 2))):
        with Raw(port) as c:
            connect5(c, "bad-props")
            send(c)
            p = c.recv()
            out.append("closed" if p is None else p.rc if p.type == DISCONNECT else p.type)
    return out


def test_property_not_allowed_in_its_packet_gets_0x81(broker_factory):
    ours, theirs = _both(broker_factory, _closed_with)
    assert theirs == [0x81, 0x81, "closed"]
    assert ours == [0x81, 0x81, 0x82]
