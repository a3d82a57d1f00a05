# The broker's in-flight window per client: an MQTT 5 client's Receive
# Maximum, at most Limits.max_inflight_v5 [MQTT-3.3.4-9], whatever
# max_inflight (the window of an MQTT 3.1.1 client) says; the window follows
# the client across reconnections of one session. Bytes in, bytes out.
#
# The same bodies run over pipes (pytest, and tests/mp/testrunner.py under
# the WebAssembly MicroPython) and over sockets (tests/test_broker5_inflight.py).
from broker_harness import running, Raw
from test_broker5_connect import connect5, sub5, pub5, next_publish, disconnect5
from umqtt3 import props as P
from umqtt3.broker_limits import Limits
from umqtt3.codec import encode_ack, PUBACK


def backlog(b, n, topic="w"):
    """n QoS 1 messages published and acknowledged by the broker."""
    with Raw(b) as pub:
        connect5(pub, "pub")
        for i in range(n):
            pub5(pub, topic, b"%d" % i, 1, i + 1)
            pub.expect(PUBACK, i + 1)


def take(c, n):
    """n PUBLISHes, then none more until an acknowledgement."""
    got = [next_publish(c) for _ in range(n)]
    assert c.nothing(), "more than %d in flight" % n
    return got


def test_receive_maximum_above_max_inflight_is_the_window():
    # [MQTT-3.3.4-9] the client's Receive Maximum is how many QoS 1/2
    # PUBLISHes may wait for its acknowledgement; max_inflight (4) is the
    # window of MQTT 3.1.1 clients only
    with running(max_inflight=4, max_inflight_v5=20) as b, Raw(b) as c:
        connect5(c, "s", props={P.RECEIVE_MAXIMUM: 12})
        sub5(c, 1, [("w", 1)])
        backlog(b, 15)
        got = take(c, 12)
        assert [bytes(m.payload) for m in got] == [b"%d" % i for i in range(12)]
        c.put(encode_ack, PUBACK, got[0].pid)
        assert bytes(next_publish(c).payload) == b"12"  # one acked, one more
        assert c.nothing()


def test_receive_maximum_capped_at_max_inflight_v5():
    # 4.9: a sender may keep fewer in flight than the receiver allows; a
    # client without the property allows 65535 (3.1.2.11.3)
    with running(max_inflight=2, max_inflight_v5=6) as b, Raw(b) as c:
        connect5(c, "s")
        sub5(c, 1, [("w", 1)])
        backlog(b, 10)
        take(c, 6)


def test_mqtt311_client_keeps_max_inflight():
    with running(max_inflight=3, max_inflight_v5=20) as b, Raw(b) as c:
        c.connect("s3", True, 0)
        c.subscribe(1, [("w", 1)], 1)
        backlog(b, 8)
        take(c, 3)


def test_window_follows_the_client_across_reconnections():
    # A persistent session whose client comes back with a larger Receive
    # Maximum: what was in flight is sent again first, in order, with DUP
    # [MQTT-4.4.0-1], then more up to the new window; back at MQTT 3.1.1,
    # the window is max_inflight again.
    with running(max_inflight=2, max_inflight_v5=10) as b:
        with Raw(b) as c:
            connect5(c, "p", clean=False, props={P.SESSION_EXPIRY: 600, P.RECEIVE_MAXIMUM: 3})
            sub5(c, 1, [("w", 1)])
            backlog(b, 12)
            first = take(c, 3)
            disconnect5(c)
        with Raw(b) as c:
            connect5(c, "p", clean=False, props={P.SESSION_EXPIRY: 600, P.RECEIVE_MAXIMUM: 8})
            got = take(c, 8)
            assert [m.pid for m in got[:3]] == [m.pid for m in first]
            assert all(m.dup for m in got[:3]) and not any(m.dup for m in got[3:])
            assert [bytes(m.payload) for m in got] == [b"%d" % i for i in range(8)]
            for m in got[:6]:
                c.put(encode_ack, PUBACK, m.pid)  # 2 still in flight, 4 more may go
            more = take(c, 4)
            assert [bytes(m.payload) for m in more] == [b"%d" % i for i in range(8, 12)]
            for m in got[6:] + more:
                c.put(encode_ack, PUBACK, m.pid)
            assert c.nothing()
            disconnect5(c)
        backlog(b, 4)
        with Raw(b) as c:
            c.connect("p", False, 0)  # MQTT 3.1.1: the window is max_inflight again
            again = take(c, 2)
            assert [bytes(m.payload) for m in again] == [b"0", b"1"]
            c.put(encode_ack, PUBACK, again[0].pid)
            assert bytes(take(c, 1)[0].payload) == b"2"


def test_smaller_window_holds_for_the_resend_at_resume():
    # [MQTT-3.3.4-9] [MQTT-4.9.0-2]: a client back with a smaller Receive
    # Maximum than what was left in flight gets no more than that many
    # PUBLISHes at once, resends included, in order [MQTT-4.6.0-1]; each
    # acknowledgement lets one more go
    with running(max_inflight_v5=10) as b:
        with Raw(b) as c:
            connect5(c, "p", clean=False, props={P.SESSION_EXPIRY: 600, P.RECEIVE_MAXIMUM: 6})
            sub5(c, 1, [("w", 1)])
            backlog(b, 8)
            first = take(c, 6)
            disconnect5(c)
        with Raw(b) as c:
            connect5(c, "p", clean=False, props={P.SESSION_EXPIRY: 600, P.RECEIVE_MAXIMUM: 2})
            got = take(c, 2)
            assert [m.pid for m in got] == [m.pid for m in first[:2]]
            assert all(m.dup for m in got)
            c.put(encode_ack, PUBACK, got[1].pid)  # out of order
            c.put(encode_ack, PUBACK, got[0].pid)
            got = take(c, 2)
            assert [m.pid for m in got] == [m.pid for m in first[2:4]]
            for i in range(4, 8, 2):
                for m in got:
                    c.put(encode_ack, PUBACK, m.pid)
                got = take(c, 2)
                assert [bytes(m.payload) for m in got] == [b"%d" % i, b"%d" % (i + 1)]
            for m in got:
                c.put(encode_ack, PUBACK, m.pid)
            assert c.nothing()


def test_limits_refuse_a_window_the_packet_ids_cannot_hold():
    # queued QoS 1/2 messages hold packet ids too: the window and the queue
    # together stay below 65535 ids [MQTT-2.3.1-4]
    try:
        Limits(max_inflight_v5=60000, max_queued=6000)
    except ValueError as e:
        assert "max_inflight_v5 + max_queued" in str(e)
    else:
        assert False, "accepted"
    assert Limits(max_inflight_v5=1024, max_queued=1000).max_inflight_v5 == 1024
