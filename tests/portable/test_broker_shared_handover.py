# A shared group's member whose session ends before it acknowledged a QoS
# 1/2 message: the message goes to another member of the group. MQTT 5.0
# section 4.8.2: "If the Client's Session terminates before the Client
# reconnects, the Server SHOULD send the Application Message to another
# Client that is subscribed to the same Shared Subscription."
#
# The same bodies run over pipes (pytest, and tests/mp/testrunner.py under
# the WebAssembly MicroPython) and over sockets (tests/test_broker_shared_end.py).
from broker_harness import running, Raw, advance, clock, wait_for, tempdir, rmtree
from test_broker5_connect import props_of, connect5, sub5, pub5, next_publish, leave
from umqtt3 import props as P
from umqtt3.compat import ticks_diff
from umqtt3.codec import encode_ack, PUBACK, PUBREC, PUBREL, PUBCOMP


def _members(b, *cids, qos=1, f="$share/g/t/#"):
    out = []
    for cid in cids:
        c = Raw(b)
        connect5(c, cid)
        assert sub5(c, 1, [(f, qos)]) == bytes([qos])
        out.append(c)
    return out


def test_unacknowledged_copy_goes_to_another_member():
    # the reproduction: a's clean session ends (its connection drops) with
    # job-1 sent and not acknowledged; c, the other member, gets it
    with running() as b:
        a, c = _members(b, "a", "c")
        try:
            with Raw(b) as p:
                connect5(p, "p")
                pub5(p, "t/x", b"job-1", 1, 1)
                pub5(p, "t/x", b"job-2", 1, 2)
                p.expect(PUBACK, 1)
                p.expect(PUBACK, 2)
            ma = next_publish(a)
            mc = next_publish(c)
            assert (bytes(ma.payload), bytes(mc.payload)) == (b"job-1", b"job-2")
            c.put(encode_ack, PUBACK, mc.pid)
            a.close()  # no PUBACK: its session (expiry 0) ends
            m = next_publish(c)
            assert bytes(m.payload) == b"job-1" and m.qos == 1
            c.put(encode_ack, PUBACK, m.pid)
            assert c.nothing()
            assert b.handed == 1 and b.dropped == 0
        finally:
            c.close()


def test_copy_in_flight_handed_on_with_what_is_left_of_its_expiry():
    # [MQTT-3.3.2-6] (5.0): the copy a's client did not acknowledge goes to
    # c with what is left of its message expiry interval, counted from
    # when it was sent to a, not from when it is handed on
    with running() as b:
        a, c = _members(b, "a", "c")
        try:
            with Raw(b) as p:
                connect5(p, "p")
                t0 = clock()  # its interval counts from when the broker took it
                pub5(p, "t/x", b"job-1", 1, 1, props={P.MESSAGE_EXPIRY: 10})
                p.expect(PUBACK, 1)
            assert props_of(next_publish(a))[P.MESSAGE_EXPIRY] == 10
            advance(4500)
            a.close()  # no PUBACK: its session (expiry 0) ends
            m = next_publish(c)
            waited = ticks_diff(clock(), t0)  # 4.5 s; over sockets on a busy machine, more
            assert bytes(m.payload) == b"job-1"
            # what is left: at most 10 less the whole seconds it waited, rounded up
            assert 10 - (waited + 999) // 1000 <= props_of(m)[P.MESSAGE_EXPIRY] <= 6, (
                props_of(m), waited)
            c.put(encode_ack, PUBACK, m.pid)
            assert b.handed == 1
        finally:
            c.close()


def test_queued_copies_go_too_in_order():
    # a's receive maximum is 1: job-1 is in flight, job-2 and job-3 wait in
    # its queue; all three go to c when a's session ends
    with running() as b, Raw(b) as a, Raw(b) as c, Raw(b) as p:
        connect5(a, "a", props={P.RECEIVE_MAXIMUM: 1})
        sub5(a, 1, [("$share/g/t", 1)])
        connect5(p, "p")
        for i in range(3):
            pub5(p, "t", b"job-%d" % i, 1, i + 1)
            p.expect(PUBACK, i + 1)
        assert bytes(next_publish(a).payload) == b"job-0"
        connect5(c, "c")
        sub5(c, 1, [("$share/g/t", 1)])
        a.close()
        got = []
        for _ in range(3):
            m = next_publish(c)
            got.append(bytes(m.payload))
            c.put(encode_ack, PUBACK, m.pid)
        assert got == [b"job-0", b"job-1", b"job-2"]
        assert c.nothing()


def test_qos2_in_flight_stays_queued_goes():
    # QoS 2: a copy sent to the member, PUBREC'd or not, is not sent to any
    # other client when the member's session ends [MQTT-4.8.2-4,
    # MQTT-4.8.2-5]; one still queued for it, never sent, goes to another
    # member. a's receive maximum is 2: "recd" and "open" in flight, "q" queued
    with running() as b, Raw(b) as a, Raw(b) as c, Raw(b) as p:
        connect5(a, "a", props={P.RECEIVE_MAXIMUM: 2})
        sub5(a, 1, [("$share/g/t", 2)])
        connect5(p, "p")
        for i, x in enumerate((b"recd", b"open", b"q")):
            pub5(p, "t", x, 2, i + 1)
            p.expect(PUBREC, i + 1)
        m1 = next_publish(a)
        m2 = next_publish(a)
        assert bytes(m1.payload) == b"recd" and bytes(m2.payload) == b"open"
        a.put(encode_ack, PUBREC, m1.pid)
        a.expect(PUBREL, m1.pid)
        connect5(c, "c")
        sub5(c, 1, [("$share/g/t", 2)])
        a.close()
        m = next_publish(c)
        assert bytes(m.payload) == b"q" and m.qos == 2
        c.put(encode_ack, PUBREC, m.pid)
        c.expect(PUBREL, m.pid)
        c.put(encode_ack, PUBCOMP, m.pid)
        assert c.nothing()
        assert b.handed == 1


def test_at_the_qos_the_member_was_granted():
    # the new member's copy: its granted QoS, capped by the message's
    with running() as b, Raw(b) as a, Raw(b) as c, Raw(b) as p:
        connect5(a, "a")
        sub5(a, 1, [("$share/g/t", 2)])
        connect5(c, "c")
        sub5(c, 1, [("$share/g/t", 0)])
        connect5(p, "p")
        pub5(p, "t", b"x", 1, 1)  # a's turn (the first member)
        p.expect(PUBACK, 1)
        assert next_publish(a).qos == 1
        a.close()
        m = next_publish(c)
        assert bytes(m.payload) == b"x" and m.qos == 0


def test_expired_session_hands_on_what_it_queued():
    # an offline member whose session expiry interval passes: its queued
    # copy goes to the member that is still there [MQTT-3.1.2-23 (5.0)]
    with running() as b:
        leave(b, "a", 2, [("$share/g/t", 1)])
        with Raw(b) as p, Raw(b) as c:
            connect5(p, "p")
            pub5(p, "t", b"waits", 1, 1)  # a is the only member: it queues it
            p.expect(PUBACK, 1)
            connect5(c, "c")
            sub5(c, 1, [("$share/g/t", 1)])
            assert c.nothing()
            advance(3500)
            assert wait_for(lambda: b"a" not in b.sessions())
            m = next_publish(c)
            assert bytes(m.payload) == b"waits"


def test_clean_start_replacing_the_session_hands_on():
    with running() as b:
        leave(b, "a", 600, [("$share/g/t", 1)])
        with Raw(b) as p, Raw(b) as c, Raw(b) as a:
            connect5(p, "p")
            pub5(p, "t", b"q", 1, 1)
            p.expect(PUBACK, 1)
            connect5(c, "c")
            sub5(c, 1, [("$share/g/t", 1)])
            connect5(a, "a")  # Clean Start 1: the old session ends [MQTT-3.1.2-4]
            m = next_publish(c)
            assert bytes(m.payload) == b"q"
            assert a.nothing()


def test_no_other_member_dropped_and_counted():
    with running() as b, Raw(b) as a, Raw(b) as p:
        connect5(a, "a")
        sub5(a, 1, [("$share/g/t", 1)])
        connect5(p, "p")
        pub5(p, "t", b"x", 1, 1)
        p.expect(PUBACK, 1)
        next_publish(a)
        a.close()
        assert wait_for(lambda: b"a" not in b.sessions())
        assert b.dropped == 1 and b.handed == 0


def test_only_the_shared_copy_is_handed_on():
    # a holds two copies of the message, by its own subscription and by
    # the group's turn: only the group's goes to c, with c's own
    # subscription identifier, not a's [MQTT-3.3.4-5]
    with running() as b, Raw(b) as a, Raw(b) as c, Raw(b) as p:
        connect5(a, "a")
        sub5(a, 1, [("t", 1)], {P.SUBSCRIPTION_ID: 1})
        sub5(a, 2, [("$share/g/t", 1)], {P.SUBSCRIPTION_ID: 2})
        connect5(p, "p")
        pub5(p, "t", b"x", 1, 1)
        p.expect(PUBACK, 1)
        next_publish(a)
        next_publish(a)
        connect5(c, "c")
        sub5(c, 1, [("$share/g/t", 1)], {P.SUBSCRIPTION_ID: 9})
        a.close()
        m = next_publish(c)
        assert bytes(m.payload) == b"x" and props_of(m)[P.SUBSCRIPTION_ID] == [9]
        c.put(encode_ack, PUBACK, m.pid)
        assert c.nothing()
        assert b.handed == 1


def test_unsubscribe_keeps_what_is_in_flight():
    # unsubscribing from the group does not end the session: what it holds
    # stays with it (resent on its next connection), nothing is handed on
    with running() as b, Raw(b) as c, Raw(b) as p:
        leave(b, "a", 600, [("$share/g/t", 1)])
        connect5(p, "p")
        pub5(p, "t", b"mine", 1, 1)
        p.expect(PUBACK, 1)
        connect5(c, "c")
        sub5(c, 1, [("$share/g/t", 1)])
        with Raw(b) as a:
            connect5(a, "a", clean=False, props={P.SESSION_EXPIRY: 600})
            assert bytes(next_publish(a).payload) == b"mine"
            from umqtt3.codec import encode_unsubscribe
            a.put(encode_unsubscribe, 5, ["$share/g/t"], 5)
        assert c.nothing()
        assert b.handed == 0


def test_store_restart_delivers_the_handed_copy_once():
    # with a store: the new member's record is on disk before the old
    # session's goes; after a restart the message reaches the new member
    # once
    d = tempdir("bshend")
    try:
        with running(store=d) as b:
            leave(b, "a", 600, [("$share/g/t", 1)])
            leave(b, "c", 600, [("$share/g/t", 1)])
            with Raw(b) as p:
                connect5(p, "p")
                pub5(p, "t", b"one", 1, 1)  # a's turn: queued for it
                p.expect(PUBACK, 1)
            with Raw(b) as a:
                connect5(a, "a")  # Clean Start: a's session ends, c gets it
            assert b.handed == 1
        with running(store=d) as b:
            with Raw(b) as c:
                connect5(c, "c", clean=False, props={P.SESSION_EXPIRY: 600})
                m = next_publish(c)
                assert bytes(m.payload) == b"one"
                c.put(encode_ack, PUBACK, m.pid)
                assert c.nothing()
        with running(store=d) as b:
            with Raw(b) as c:
                connect5(c, "c", clean=False, props={P.SESSION_EXPIRY: 600})
                assert c.nothing()
    finally:
        rmtree(d)


class _SharedSteady:
    """test_broker_mem's steady flow, the subscriber a shared group's
    member (two members: the other offline, persistent, so the connected
    one gets every message [MQTT-4.8.2-3 (5.0)])."""

    def __init__(self, qos):
        from test_broker_mem import _broker, Peer, run
        from umqtt3.codec import encode_publish
        self.qos = qos
        b = self.b = _broker(max_inflight=4)
        off = Peer(b)
        off.connect("off", clean=False)
        off.subscribe(1, [("$share/g/sensors/+/temp", qos)])
        run(b, [off])
        off.link.close()
        run(b, [])
        sub = self.sub = Peer(b)
        pub = self.pub = Peer(b)
        sub.connect("sub")
        pub.connect("pub")
        sub.subscribe(1, [("$share/g/sensors/+/temp", qos)])
        run(b, [sub, pub])
        self.frame = bytearray(64)
        self.n = encode_publish(self.frame, 0, "sensors/n1/temp", b"21.5", qos, 1 if qos else 0)
        self.pid_at = self.n - 4 - 2
        self.pid = 1
        sub.record = False
        pub.record = False


def test_shared_forward_qos1_allocates_nothing():
    # a shared group's copy is marked as it goes (its ring slot's byte,
    # made once): forwarding stays free of allocation
    from test_broker_mem import _Steady, _check_zero_alloc
    _SharedSteady.go = _Steady.go
    _check_zero_alloc(1, _SharedSteady(1))


def test_a_member_the_acl_denies_the_topic_is_passed_over():
    # the next member in turn may not read the topic (a deny pattern of the
    # ACL, broker_acl.Grants.may_receive): the one after it gets the copy
    acl = "topic read #\ntopic deny secret/#\nuser alice\ntopic readwrite #\n"
    with running(users={b"alice": b"pw"}, allow_anonymous=True) as b:
        b.set_acl(acl)
        with Raw(b) as a, Raw(b) as spy, Raw(b) as d, Raw(b) as w:
            a.connect("a", user="alice", password=b"pw")
            spy.connect("spy")
            d.connect("d", user="alice", password=b"pw")
            for c in (a, spy, d):
                assert c.subscribe(1, [("$share/g/+/x", 1)]) == b"\x01"
            w.connect("w", user="alice", password=b"pw")
            w.publish("secret/x", b"s", 1, pid=1)  # a's turn
            w.expect(PUBACK, 1)
            assert a.messages(1, ack=False)[0][:2] == (b"secret/x", b"s")
            a.close()  # spy's turn next, but it may not read secret/x
            assert d.messages(1)[0][:2] == (b"secret/x", b"s")
            assert spy.nothing() and d.nothing()
            assert b.handed == 1


def test_at_mqtt_311_too():
    # shared subscriptions work at every level (as mosquitto's do), and so
    # does the hand-over: a 3.1.1 clean session's connection drops
    with running() as b, Raw(b) as a, Raw(b) as c, Raw(b) as p:
        a.connect("a")
        c.connect("c")
        for m in (a, c):
            assert m.subscribe(1, [("$share/g/t", 1)]) == b"\x01"
        p.connect("p")
        p.publish("t", b"one", 1, pid=1)
        p.expect(PUBACK, 1)
        assert a.messages(1, ack=False)[0][1] == b"one"
        a.close()
        got = c.messages(1)[0]
        assert got[1:3] == (b"one", 1)
        assert c.nothing()
