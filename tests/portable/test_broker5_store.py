# MQTT 5.0 through the broker's store and a restart: subscription
# identifiers, delayed wills, and the time that passes while the broker is
# down (session expiry, message expiry). The store counts time on the wall
# clock where the platform has one set (broker_store.wall; the tests set
# it), and resumes its count where it stopped where it has none.
#
# The same bodies run over pipes (pytest, and tests/mp/testrunner.py under
# the WebAssembly MicroPython) and over sockets (tests/test_broker5.py).
from broker_harness import running, Raw, advance, wait_for, tempdir, rmtree
from test_broker5_connect import (props_of, connect5, sub5, pub5, disconnect5, next_publish,
                                  resume_with_expiry_zero)
from umqtt3 import props as P
from umqtt3 import broker_store
from umqtt3.codec import encode_ack, PUBACK

T0 = 1800000000  # a wall-clock time (2027)


class wall_clock:
    """with wall_clock(t) as w: the store reads w.t as the wall clock (None:
    a device whose clock was never set); w.t moves as the test says."""

    def __init__(self, t):
        self.t = t

    def __enter__(self):
        self.old = broker_store.wall
        broker_store.wall = lambda: self.t
        return self

    def __exit__(self, *exc):
        broker_store.wall = self.old
        return False


class store:
    def __enter__(self):
        self.d = tempdir("b5st")
        return self.d

    def __exit__(self, *exc):
        rmtree(self.d)
        return False


def _persistent(b, cid, expiry, filters, sid=0):
    with Raw(b) as c:
        connect5(c, cid, clean=False, props={P.SESSION_EXPIRY: expiry})
        sub5(c, 1, filters, {P.SUBSCRIPTION_ID: sid} if sid else None)
        disconnect5(c)
    assert wait_for(lambda: b.sessions()[cid.encode()].client is None)


def test_subscription_identifiers_kept_through_a_restart():
    # [MQTT-3.3.4-3] [MQTT-3.3.4-4]: a persistent session restored from the
    # store still tags what matches its subscriptions with their identifiers
    with wall_clock(T0), store() as d:
        with running(store=d) as b:
            _persistent(b, "ids", 100, [("t/#", 1)], sid=7)
            with Raw(b) as c:
                connect5(c, "ids", clean=False, props={P.SESSION_EXPIRY: 100})
                sub5(c, 2, [("t/x", 1)], {P.SUBSCRIPTION_ID: 300000})
                sub5(c, 3, [("u", 0)])  # no identifier
                disconnect5(c)
            assert wait_for(lambda: b.sessions()[b"ids"].client is None)
        with running(store=d) as b:
            with Raw(b) as p:
                connect5(p, "p")
                pub5(p, "t/x", b"queued", 1, 1)
                p.expect(PUBACK, 1)
            with Raw(b) as c:
                assert connect5(c, "ids", clean=False,
                                props={P.SESSION_EXPIRY: 100}).session_present
                m = next_publish(c)
                assert bytes(m.payload) == b"queued"
                assert props_of(m)[P.SUBSCRIPTION_ID] in ([7, 300000], [300000, 7])
                c.put(encode_ack, PUBACK, m.pid)
                with Raw(b) as p:
                    connect5(p, "p")
                    pub5(p, "u", b"plain")
                m = next_publish(c)
                assert bytes(m.payload) == b"plain" and P.SUBSCRIPTION_ID not in props_of(m)


def test_session_expiry_counts_the_time_the_broker_was_down():
    # [MQTT-3.1.2-23 (5.0)]: the interval runs from the disconnect, also
    # while the broker is stopped: down longer than it, the session is gone
    with wall_clock(T0) as w, store() as d:
        with running(store=d) as b:
            _persistent(b, "short", 10, [("t", 1)])
            _persistent(b, "long", 1000, [("t", 1)])
        w.t += 60
        with running(store=d) as b:
            assert b"short" not in b.sessions()
            assert b"long" in b.sessions()
            with Raw(b) as c:
                assert not connect5(c, "short", clean=False).session_present


def test_session_expiry_left_after_a_restart_is_what_remained():
    # down for part of the interval: the session ends when the rest of it
    # has passed, not a whole interval after the restart
    with wall_clock(T0) as w, store() as d:
        with running(store=d) as b:
            _persistent(b, "s", 5, [("t", 1)])
        w.t += 3
        with running(store=d) as b:
            assert b"s" in b.sessions()
            advance(3500)  # 2 s left (+ up to 1: never early); a whole interval would be 5
            assert b"s" not in b.sessions()


def test_session_of_a_connected_client_counts_from_the_restart():
    # a client connected when the broker stopped never disconnected: its
    # session's interval counts from the restart (the broker cannot know
    # when the connection was lost)
    with wall_clock(T0) as w, store() as d:
        with running(store=d) as b:
            c = Raw(b)
            connect5(c, "on", clean=False, props={P.SESSION_EXPIRY: 4})
            sub5(c, 1, [("t", 1)])
        c.close()
        w.t += 100
        with running(store=d) as b:
            assert b"on" in b.sessions()
            advance(4500)
            assert b"on" not in b.sessions()


def test_session_resumed_then_the_broker_restarts():
    # a session resumed before the stop has no end on disk any more: its
    # client was connected, so it is there after a late restart
    with wall_clock(T0) as w, store() as d:
        with running(store=d) as b:
            _persistent(b, "back", 5, [("t", 1)])
            c = Raw(b)
            assert connect5(c, "back", clean=False,
                            props={P.SESSION_EXPIRY: 5}).session_present
        c.close()
        w.t += 60
        with running(store=d) as b:
            assert b"back" in b.sessions()


def test_message_expiry_counts_the_time_the_broker_was_down():
    # [MQTT-3.3.2-5 (5.0)] [MQTT-3.3.2-6 (5.0)]: a queued message whose
    # interval passed while the broker was down is not delivered; one
    # with time left goes with what is left; a retained one expires too
    with wall_clock(T0) as w, store() as d:
        with running(store=d) as b:
            _persistent(b, "sub", 1000, [("q/#", 1)])
            with Raw(b) as p:
                connect5(p, "p")
                pub5(p, "q/short", b"gone", 1, 1, props={P.MESSAGE_EXPIRY: 10})
                p.expect(PUBACK, 1)
                pub5(p, "q/long", b"kept", 1, 2, props={P.MESSAGE_EXPIRY: 100})
                p.expect(PUBACK, 2)
                pub5(p, "r/short", b"gone", 1, 3, retain=True, props={P.MESSAGE_EXPIRY: 10})
                p.expect(PUBACK, 3)
                pub5(p, "r/long", b"kept", 1, 4, retain=True, props={P.MESSAGE_EXPIRY: 100})
                p.expect(PUBACK, 4)
        w.t += 30
        with running(store=d) as b:
            with Raw(b) as c:
                assert connect5(c, "sub", clean=False,
                                props={P.SESSION_EXPIRY: 1000}).session_present
                m = next_publish(c)
                assert bytes(m.topic) == b"q/long"
                assert 60 <= props_of(m)[P.MESSAGE_EXPIRY] <= 70
                c.put(encode_ack, PUBACK, m.pid)
                assert c.nothing()
            with Raw(b) as c:
                connect5(c, "r")
                sub5(c, 1, [("r/#", 0)])
                m = next_publish(c)
                assert bytes(m.topic) == b"r/long"
                assert 60 <= props_of(m)[P.MESSAGE_EXPIRY] <= 70
                assert c.nothing()


def test_message_in_flight_at_a_restart_counts_down_from_it():
    # [MQTT-3.3.2-5 (5.0)] [MQTT-3.3.2-6 (5.0)]: a message sent but not
    # acknowledged when the broker stopped is sent again with what was
    # left of its interval when it was sent, less the time the new run has
    # had (the time down is not known for it), as a queued one restored is;
    # with 0 once that has passed, as its onward delivery started
    # [MQTT-4.3.3-7] (5.0), where the queued one is dropped. (It went with
    # its whole interval, however long the new run had been up.)
    sp = {P.SESSION_EXPIRY: 600, P.RECEIVE_MAXIMUM: 1}
    for exp, kept in ((5, False), (100, True)):
        with wall_clock(None), store() as d:
            with running(store=d) as b:
                with Raw(b) as p, Raw(b) as c:
                    connect5(c, "sub", clean=False, props=sp)
                    sub5(c, 1, [("x/#", 1)])
                    connect5(p, "p")
                    pub5(p, "x/a", b"a", 1, 1, props={P.MESSAGE_EXPIRY: exp})  # in flight
                    pub5(p, "x/b", b"b", 1, 2, props={P.MESSAGE_EXPIRY: exp})  # queued
                    p.expect(PUBACK, 1)
                    p.expect(PUBACK, 2)
                    assert bytes(next_publish(c).topic) == b"x/a"
            with running(store=d) as b:
                advance(10000)
                with Raw(b) as c:
                    assert connect5(c, "sub", clean=False, props=sp).session_present
                    got = []
                    for _ in range(2 if kept else 1):
                        m = next_publish(c)
                        got.append((bytes(m.topic), props_of(m)[P.MESSAGE_EXPIRY]))
                        c.put(encode_ack, PUBACK, m.pid)
                    assert c.nothing()
                    if kept:
                        assert [t for t, _ in got] == [b"x/a", b"x/b"]
                        assert all(89 <= x <= 91 for _, x in got), got  # (whole seconds)
                    else:
                        assert got == [(b"x/a", 0)], got
                        assert b.dropped == 1


def test_without_a_wall_clock_the_time_down_does_not_count():
    # a device whose clock was never set cannot tell how long it was off:
    # the store's count resumes where it stopped, so nothing ends early
    with wall_clock(None), store() as d:
        with running(store=d) as b:
            _persistent(b, "s", 3, [("t", 1)])
        with running(store=d) as b:
            assert b"s" in b.sessions()
            advance(4500)  # its 3 s (+ up to 1: never early)
            assert b"s" not in b.sessions()


def _watcher(b):
    # a persistent watcher of will/#: what is published while it is away
    # waits for it
    _persistent(b, "watch", 1000, [("will/#", 1)])


def _vanish(b, cid, delay):
    # a client with a delayed will and a session of 60 s, gone without
    # DISCONNECT
    with Raw(b) as c:
        connect5(c, cid, clean=False, props={P.SESSION_EXPIRY: 60}, will_topic="will/" + cid,
                 will_msg=b"bye", will_qos=1, will_props={P.WILL_DELAY: delay})
    assert wait_for(lambda: b.wills)


def _watched(b):
    c = Raw(b)
    assert connect5(c, "watch", clean=False, props={P.SESSION_EXPIRY: 1000}).session_present
    return c


def test_delayed_will_sent_when_due_after_a_restart():
    # 3.1.2.5 Will Delay Interval: the will kept in the store goes when its
    # delay has passed, counted across the restart
    with wall_clock(T0) as w, store() as d:
        with running(store=d) as b:
            _watcher(b)
            _vanish(b, "late", 4)
        w.t += 2
        with running(store=d) as b:
            with _watched(b) as c:
                assert c.nothing()
                advance(2500)
                m = next_publish(c)
                assert bytes(m.topic) == b"will/late" and bytes(m.payload) == b"bye"
                assert P.WILL_DELAY not in props_of(m)


def test_delayed_will_overdue_at_restart_is_sent():
    with wall_clock(T0) as w, store() as d:
        with running(store=d) as b:
            _watcher(b)
            _vanish(b, "over", 4)
        w.t += 30
        with running(store=d) as b:
            with _watched(b) as c:
                m = next_publish(c)
                assert bytes(m.topic) == b"will/over"


def test_delayed_will_not_sent_when_the_session_resumes_after_a_restart():
    # [MQTT-3.1.3-9]: the session resumed within the delay: no will, now
    # or after another restart
    with wall_clock(T0) as w, store() as d:
        with running(store=d) as b:
            _watcher(b)
            _vanish(b, "flaky", 4)
        w.t += 1
        with running(store=d) as b:
            with Raw(b) as c:
                assert connect5(c, "flaky", clean=False,
                                props={P.SESSION_EXPIRY: 60}).session_present
                disconnect5(c)  # reason 0x00: no will
            assert wait_for(lambda: b.sessions()[b"flaky"].client is None)
        w.t += 30
        with running(store=d) as b:
            advance(1500)
            with _watched(b) as c:
                assert c.nothing()


def test_session_resumed_with_expiry_zero_keeps_what_was_stored():
    # [MQTT-3.1.2-4 (5.0)] [MQTT-4.4.0-1]: the stored session ends on disk
    # (expiry 0 from now on) but its queued messages are still sent
    with wall_clock(T0), store() as d:
        with running(store=d) as b:
            resume_with_expiry_zero(b)
