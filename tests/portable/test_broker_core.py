# broker_core.Core driven without sockets, pipes or sleeping: bytes in with
# broker_bytes.feed(), bytes out with take(), time passed in. Runs under MicroPython too.
from umqtt3.broker_core import Core, CLOSED
from umqtt3.broker_bytes import feed, take
from umqtt3.broker_limits import Limits
from umqtt3.transport import Conn
from umqtt3 import qos_state as Q
from umqtt3.codec import (encode_publish, encode_ack, encode_subscribe, encode_simple,
                          encode_unsubscribe,
                          PUBACK, PUBREC, PUBREL, PUBCOMP, PINGREQ, DISCONNECT)
from broker_harness import build, connect_bytes


def core(**kw):
    kw.setdefault("sys_interval", 0)
    return Core(Limits(**kw))


def opened(b, now=0):
    lim = b.limits
    return b.open(Conn(None, lim.max_packet, lim.tx), "test", now)


def connected(b, cid, now=0, **kw):
    c = opened(b, now)
    feed(b, c, connect_bytes(cid, **kw), now)
    assert take(b, c) == b"\x20\x02\x00\x00"  # CONNACK, accepted [MQTT-3.2.2-1]
    return c


def pub(topic, payload, qos=0, pid=0, retain=False, dup=False):
    return build(encode_publish, topic, payload, qos, pid, retain, dup)


def test_connect_subscribe_publish_bytes_in_bytes_out():
    b = core()
    sub = connected(b, "sub")
    feed(b, sub, build(encode_subscribe, 1, [("a/+", 1)]), 0)
    assert take(b, sub) == b"\x90\x03\x00\x01\x01"  # SUBACK, granted 1 [MQTT-3.8.4-5]
    p = connected(b, "pub")
    feed(b, p, pub("a/b", b"hi", 1, 7), 0)
    assert take(b, p) == build(encode_ack, PUBACK, 7)
    # the subscriber's copy: its own packet id (1), QoS min(1, 1) [MQTT-3.3.5-1]
    assert take(b, sub) == pub("a/b", b"hi", 1, 1)
    feed(b, sub, build(encode_ack, PUBACK, 1), 0)
    assert b.sessions()[b"sub"].inflight() == 0
    assert take(b, sub) == b""


def test_bytes_one_at_a_time_are_the_same_stream():
    b = core()
    c = opened(b)
    data = connect_bytes("x") + build(encode_simple, PINGREQ)
    n = 0
    for i in range(len(data)):
        n += feed(b, c, data[i:i + 1], 0)
    assert n == 2
    assert take(b, c) == b"\x20\x02\x00\x00\xd0\x00"  # CONNACK, PINGRESP


def test_time_passed_in_runs_keepalive_and_will():
    # keepalive 10 s: closed after 1.5 times that with no packet
    # [MQTT-3.1.2-24], and the will goes out [MQTT-3.1.2-8]
    b = core()
    w = connected(b, "w")
    feed(b, w, build(encode_subscribe, 1, [("wills/#", 0)]), 0)
    take(b, w)
    dev = connected(b, "dev", keepalive=10, will_topic="wills/dev", will_msg=b"gone")
    assert b.tick(14000) == 14100  # the next check, 100 ms on
    feed(b, w, build(encode_simple, PINGREQ), 14000)
    take(b, w)
    assert dev.state != CLOSED
    b.tick(15001)
    assert dev.state == CLOSED and dev.why == "keepalive expired"
    assert take(b, w) == pub("wills/dev", b"gone")


def test_connect_timeout_from_the_time_given():
    b = core(connect_timeout_ms=500)
    c = opened(b, 1000)
    assert b.tick(1500) == 1600  # timers run every 100 ms of the time given
    assert c.state != CLOSED
    assert b.tick(1599) == 1600  # not due: nothing runs
    b.tick(1600)
    assert c.state == CLOSED and c.why == "no CONNECT in time"


def test_routing_queues_when_the_send_buffer_is_full():
    # the core never writes to a socket: a subscriber whose buffer is full
    # gets the message queued, in order, and take() refills as it drains
    b = core(max_packet=128)
    sub = connected(b, "sub")
    feed(b, sub, build(encode_subscribe, 1, [("t", 0)]), 0)
    take(b, sub)
    p = connected(b, "pub")
    frames = [pub("t", bytes([65 + i]) * 50) for i in range(5)]
    for f in frames:
        feed(b, p, f, 0)
    assert b.sessions()[b"sub"].backlog()  # 5 x 55 bytes > 128
    assert b.wants_send(sub)
    assert take(b, sub) == b"".join(frames)
    assert not b.wants_send(sub)


def test_same_topic_follows_every_subscription_change():
    # what a topic matched is remembered on CPython (Subs.memo): each change
    # of a subscription (a new one, a replaced QoS, an unsubscribe, a
    # session that ends) shows in the next routing of the same topic
    b = core()
    a = connected(b, "a")
    p = connected(b, "p")
    t = pub("s/t", b"1")

    def route():
        feed(b, p, t, 0)
        return take(b, a)

    assert route() == b""
    feed(b, a, build(encode_subscribe, 1, [("s/+", 0)]), 0)
    take(b, a)
    assert route() == t
    c = connected(b, "c")
    feed(b, c, build(encode_subscribe, 1, [("s/t", 1)]), 0)
    take(b, c)
    feed(b, p, pub("s/t", b"2", 1, 5), 0)
    assert take(b, a) == pub("s/t", b"2")
    assert take(b, c) == pub("s/t", b"2", 1, 1)  # [MQTT-3.3.5-1]
    feed(b, a, build(encode_subscribe, 2, [("s/+", 1)]), 0)  # replaced [MQTT-3.8.4-3]
    take(b, a)
    feed(b, p, pub("s/t", b"3", 1, 6), 0)
    assert take(b, a) == pub("s/t", b"3", 1, 1)
    feed(b, a, build(encode_unsubscribe, 3, ["s/+"]), 0)
    take(b, a)
    feed(b, c, build(encode_simple, DISCONNECT), 0)  # a clean session ends [MQTT-3.1.2-6]
    assert route() == b""
    assert b.subs.match(b"s/t", 0, 3) == 0


def _raw_publish(first, topic, rest):
    # a PUBLISH of any first byte, topic bytes and what follows the topic
    body = bytes((len(topic) >> 8, len(topic) & 255)) + topic + rest
    return bytes((first, len(body))) + body


def test_publish_rules_hold_once_a_topic_was_routed():
    # a level-4 PUBLISH is decoded in one pass, its topic name checked once
    # per name on CPython (broker_bytes.publish4): every rule of the decoder and
    # the broker's own still closes the connection, before and after the
    # same bytes routed well, and nothing of a refused PUBLISH is routed
    b = core(max_levels=3)
    sub = connected(b, "sub")
    feed(b, sub, build(encode_subscribe, 1, [("#", 1), ("$SYS/#", 1)]), 0)
    take(b, sub)
    p = connected(b, "p")
    big = b"x" * 200  # a two-byte remaining length
    for i in range(2):  # the second time, the name is known
        feed(b, p, pub("a/b", big, 1, 7 + i, retain=not i), 0)
        assert take(b, p) == build(encode_ack, PUBACK, 7 + i)  # [MQTT-4.3.2-2]
        assert take(b, sub) == pub("a/b", big, 1, 1 + i)
        feed(b, sub, build(encode_ack, PUBACK, 1 + i), 0)
    feed(b, p, pub("a/b", b"0", 0, dup=False), 0)
    assert take(b, sub) == pub("a/b", b"0")
    for dup in (False, True):  # QoS 2: a known id is answered, not routed [MQTT-4.3.3-2]
        feed(b, p, pub("a/b", b"2", 2, 20, dup=dup), 0)
        assert take(b, p) == build(encode_ack, PUBREC, 20)
        assert take(b, sub) == (b"" if dup else pub("a/b", b"2", 1, 3))
    feed(b, sub, build(encode_ack, PUBACK, 3), 0)
    feed(b, p, build(encode_ack, PUBREL, 20), 0)
    assert take(b, p) == build(encode_ack, PUBCOMP, 20)
    assert b.sessions()[b"p"].nipids == 0
    bad = [
        _raw_publish(0x36, b"a/b", b"\x00\x01x"),  # QoS 3 [MQTT-3.3.1-4]
        _raw_publish(0x38, b"a/b", b"x"),  # DUP on QoS 0 [MQTT-3.3.1-2]
        _raw_publish(0x32, b"a/b", b"\x00\x00x"),  # packet id 0 [MQTT-2.3.1-1]
        _raw_publish(0x32, b"", b"\x00\x01x"),  # empty topic name [MQTT-4.7.3-1]
        _raw_publish(0x32, b"a/+", b"\x00\x01x"),  # wildcard [MQTT-3.3.2-2]
        _raw_publish(0x30, b"a/#", b"x"),
        _raw_publish(0x32, b"a\x00b", b"\x00\x01x"),  # U+0000 [MQTT-1.5.3-2]
        _raw_publish(0x32, b"a\x01b", b"\x00\x01x"),  # a control character
        _raw_publish(0x32, b"a\xffb", b"\x00\x01x"),  # not UTF-8 [MQTT-1.5.3-1]
        _raw_publish(0x32, b"a/b/c/d", b"\x00\x01x"),  # past max_levels
        b"\x32\x04\x00\x05a/b",  # the topic runs past the packet
        b"\x32\x05\x00\x03a/b",  # the packet id cut
    ]
    for k in range(2):  # the refused names are not remembered either
        for f in bad:
            c = connected(b, "bad")
            feed(b, c, f, 0)
            assert c.state == CLOSED, (k, f)  # [MQTT-4.8.0-1]
            assert take(b, c) == b"", f  # no PUBACK
    assert take(b, sub) == b""
    # in one gulp (a run, broker_bytes.publishes): what comes before a refused
    # PUBLISH is routed, nothing after it
    c = connected(b, "run")
    feed(b, c, pub("a/b", b"r1", 1, 1) + pub("a/b", b"r2", 0) + bad[4] + pub("a/b", b"r4"), 0)
    assert c.state == CLOSED
    assert take(b, sub) == pub("a/b", b"r1", 1, 4) + pub("a/b", b"r2")
    feed(b, sub, build(encode_ack, PUBACK, 4), 0)
    # a client does not publish into $SYS: acknowledged, not routed
    feed(b, p, pub("$SYS/x", b"1", 1, 9), 0)
    assert take(b, p) == build(encode_ack, PUBACK, 9)
    assert take(b, sub) == b""
    # the retained one went through the same path
    late = connected(b, "late")
    feed(b, late, build(encode_subscribe, 1, [("a/b", 0)]), 0)
    assert take(b, late) == b"\x90\x03\x00\x01\x00" + pub("a/b", big, retain=True)


def test_a_run_of_pubacks_in_any_order():
    # PUBACKs that come in one gulp are ended in one call (Core.pubacks):
    # in order or not, each ends its message's flow [MQTT-4.3.2-1], the
    # ring's oldest slot moves past every acknowledged one, and a PUBACK
    # for no message in flight closes the connection
    b = core()
    sub = connected(b, "sub")
    feed(b, sub, build(encode_subscribe, 1, [("t", 1)]), 0)
    take(b, sub)
    p = connected(b, "p")
    for i in range(6):
        feed(b, p, pub("t", b"%d" % i, 1, i + 1), 0)
    take(b, p)
    assert take(b, sub) == b"".join(pub("t", b"%d" % i, 1, i + 1) for i in range(6))
    s = b.sessions()[b"sub"]

    def acks(ids):
        return b"".join(build(encode_ack, PUBACK, i) for i in ids)

    feed(b, sub, acks([2, 3, 1]), 0)
    assert (s.inflight(), s.rcount) == (3, 3)
    feed(b, sub, acks([6, 4]), 0)
    assert (s.inflight(), s.rcount) == (1, 2)  # 5, and 6 behind it
    feed(b, sub, acks([5]), 0)
    assert (s.inflight(), s.rcount) == (0, 0)
    assert sub.state != CLOSED
    feed(b, sub, acks([5]), 0)  # its flow is over [MQTT-4.3.2-1]
    assert sub.state == CLOSED


def test_protocol_error_closes_only_that_connection():
    b = core()
    good = connected(b, "good")
    bad = connected(b, "bad")
    feed(b, bad, b"\xf0\x00", 0)  # reserved packet type [MQTT-4.8.0-1]
    assert bad.state == CLOSED and good.state != CLOSED
    feed(b, good, build(encode_simple, DISCONNECT), 0)
    assert good.state == CLOSED and good.why == "DISCONNECT"


def _states(s):
    return bytes(s.s_st) if s.s_st is not None else bytes(8)


class Watch:
    """Feeds bytes and checks every slot change of session s."""

    def __init__(self, b, s):
        self.b = b
        self.s = s
        self.seen = []

    def step(self, c, data):
        before = _states(self.s)
        feed(self.b, c, data, 0)
        out = take(self.b, c)
        after = _states(self.s)
        for i in range(len(after)):
            if after[i] != before[i]:
                self.seen.append((before[i], after[i]))
                assert Q.allowed(before[i], after[i]), (before[i], after[i])
        return out


def test_qos2_slot_transitions_are_all_allowed():
    # every change of a session's in-flight slots through QoS 1 and 2
    # flows, a reconnect and a resend is one qos_state.allowed() accepts
    b = core()
    sub = connected(b, "sub", clean=False)
    feed(b, sub, build(encode_subscribe, 1, [("t", 2)]), 0)
    take(b, sub)
    w = Watch(b, b.sessions()[b"sub"])
    p = connected(b, "pub")
    w.step(p, pub("t", b"1", 2, 1))  # FREE -> PUB_SENT
    w.step(p, build(encode_ack, PUBREL, 1))
    w.step(sub, build(encode_ack, PUBREC, 1))  # -> REL_SENT
    w.step(sub, build(encode_ack, PUBCOMP, 1))  # -> FREE
    w.step(p, pub("t", b"2", 1, 2))  # FREE -> PUB_SENT
    b.disconnect(sub, "test", False)  # the session stays, its slot too
    again = opened(b)
    # on attach the PUBLISH is due again, with DUP [MQTT-4.4.0-1]
    out = w.step(again, connect_bytes("sub", clean=False))  # PUB_SENT -> PUB -> PUB_SENT
    assert out == b"\x20\x02\x01\x00" + pub("t", b"2", 1, 2, dup=True)
    w.step(again, build(encode_ack, PUBACK, 2))
    assert _states(w.s) == bytes(8)
    for t in ((Q.FREE, Q.PUB_SENT), (Q.PUB_SENT, Q.REL_SENT), (Q.REL_SENT, Q.FREE),
              (Q.PUB_SENT, Q.FREE)):
        assert t in w.seen, t


def test_qos_state_vocabulary():
    assert Q.allowed(Q.FREE, Q.PUB_SENT) and Q.allowed(Q.PUB_SENT, Q.REL_SENT)
    assert not Q.allowed(Q.REL_SENT, Q.PUB_SENT)  # a PUBREL never turns back into a PUBLISH
    assert not Q.allowed(Q.FREE, Q.REL)
    assert not Q.allowed(Q.PUB, 9)
    for st in (Q.PUB, Q.PUB_SENT):
        assert Q.to_stored(st) == Q.STORED_PUB and Q.from_stored(Q.to_stored(st)) == Q.PUB_SENT
    for st in (Q.REL, Q.REL_SENT):
        assert Q.to_stored(st) == Q.STORED_REL and Q.from_stored(Q.to_stored(st)) == Q.REL_SENT
