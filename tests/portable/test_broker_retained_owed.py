# A new subscription's retained messages, more than a session's queue
# holds (device defaults: 8 in flight + 32 queued, 128 retained topics):
# [MQTT-3.3.1-6] "the last retained message, if any, on each matching topic
# name MUST be sent to the subscriber". They are handed over as the queue
# drains (Core.owed), never pushed in one step and dropped.
#
#     node tests/mp/run.mjs --heap 2m tests/mp/testrunner.py test_broker_retained_owed
from broker_harness import running, Raw, settle, Timeout
from umqtt3.codec import PUBACK, PUBLISH, SUBACK, UNSUBACK, encode_subscribe, encode_unsubscribe

N = 80  # retained topics: within max_retained (128) and mem_budget, twice max_inflight + max_queued (40)


def _retain(b, n=N, qos=1):
    pub = Raw(b)
    pub.connect("pub")
    for i in range(n):
        pub.publish("r/%03d" % i, b"v%03d" % i, qos, i + 1 if qos else 0, retain=True)
        if qos:
            p = pub.recv()
            assert p.type == PUBACK and p.pid == i + 1, p
    settle()
    assert len(b.retained) == n
    return pub


def _read_all(sub, ack=True):
    # every PUBLISH until nothing more comes: [(topic, payload, retain)]
    got = []
    while True:
        try:
            p = sub.recv()
        except Timeout:
            return got
        assert p is not None, "closed"
        if p.type == PUBLISH:
            got.append((bytes(p.topic), bytes(p.payload), p.retain))
            if p.qos and ack:
                sub.ack(PUBACK, p.pid)


def _all(got, n=N):
    return sorted(got) == [(b"r/%03d" % i, b"v%03d" % i, 1) for i in range(n)]


def _late(b, qos=1, clean=True):
    # a new session subscribing to every retained topic; its SUBACK is left
    # unread, so that the test reads in the order it needs
    sub = Raw(b)
    sub.connect("late", clean=clean)
    sub.put(encode_subscribe, 1, [("r/#", qos)])
    settle()
    return sub


def _every_retained_message(qos):
    with running() as b:
        _retain(b, qos=qos)
        d0 = b.dropped
        sub = Raw(b)
        sub.connect("late")
        assert sub.subscribe(1, [("r/#", qos)]) == bytes((qos,))
        got = _read_all(sub)
        assert len(got) == N and _all(got), len(got)
        assert b.dropped == d0
        assert not b.owed


def test_a_new_subscription_gets_every_retained_message_at_qos1():
    _every_retained_message(1)


def test_and_at_qos0():
    _every_retained_message(0)


def test_the_queue_stays_within_its_limits_while_the_subscriber_does_not_read():
    with running() as b:
        _retain(b)
        sub = _late(b)  # nothing acknowledged: 8 in flight, the queue full, the rest owed
        s = b.sess.by_id[b"late"]
        lim = b.limits
        assert 0 < s.queued() <= lim.max_queued and s.qb <= lim.max_queued_bytes, s.queued()
        # (full: max_queued, max_queued_bytes or mem_budget, which the retained count in)
        assert not b.over(0)
        assert b.owed and b.owed[0][0] is s
        got = _read_all(sub)
        assert len(got) == N and _all(got)


def test_an_offline_persistent_session_gets_the_rest_when_it_comes_back():
    with running() as b:
        _retain(b)
        d0 = b.dropped
        _late(b, clean=False).close()  # gone with nothing acknowledged
        settle()
        sub = Raw(b)
        assert sub.connect("late", clean=False).payload is not None
        got = _read_all(sub)
        assert len(set(got)) == N and _all(set(got)), len(set(got))
        assert b.dropped == d0


def test_unsubscribe_stops_what_is_still_owed():
    # [MQTT-3.10.4-2]: no new messages for the filter once it is removed
    with running() as b:
        _retain(b)
        sub = _late(b)
        sub.put(encode_unsubscribe, 2, ["r/#"])
        got = []
        seen_unsuback = False
        while True:
            try:
                p = sub.recv()
            except Timeout:
                break
            if p.type == UNSUBACK:
                seen_unsuback = True
            elif p.type == PUBLISH:
                got.append(bytes(p.topic))
                sub.ack(PUBACK, p.pid)
            else:
                assert p.type == SUBACK, p.type
        assert seen_unsuback
        assert len(got) < N  # what was in flight or queued, no more
        assert not b.owed


def test_a_clean_session_that_ends_is_owed_nothing():
    with running() as b:
        _retain(b)
        sub = _late(b)
        assert b.owed
        sub.close()
        settle()
        assert not b.owed
