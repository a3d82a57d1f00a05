# MQTT 3.1.1 conformance of umqtt3's broker: sessions (CleanSession, session
# present, the queue of an offline session, what is resent on resume;
# sections 3.1.2.4, 3.2.2, 4.1, 4.4 of the OASIS text) and the store that
# keeps them, with retained messages, across a restart. One test per
# normative statement, cited as [MQTT-x.x.x-y].
#
# The same bodies run over pipes with the broker in this thread (pytest and
# tests/mp/testrunner.py under MicroPython, on its own filesystem) and over
# real sockets (tests/test_broker.py); tests/portable/broker_harness.py is
# the harness.
from umqtt3.store import OSFiles  # one file per record, as on littlefs: these tests read the files
from broker_harness import (running, Raw, wait_for, pub_sub, tempdir, rmtree, listdir,
                            read_file, write_file, os)
from umqtt3.broker import Broker
from umqtt3.codec import PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP, DISCONNECT


def _broker_on(store):
    # a second broker on the same store, to see what is on disk
    b = Broker(port=None, store=store, sys_interval=0, files=OSFiles())
    b.close()
    return b


def test_persistent_session_queues_and_resumes():
    # [MQTT-3.1.2-4] [MQTT-3.1.2-5] subscriptions kept, QoS 1/2 queued while
    # offline and delivered in order, after CONNACK [MQTT-3.2.0-1], which has
    # session present [MQTT-3.2.2-2]
    with running() as b:
        with Raw(b) as sub:
            assert not sub.connect("keep", clean=False).session_present  # [MQTT-3.2.2-3]
            sub.subscribe(1, [("s/#", 2)])
            sub.simple(DISCONNECT)
        with Raw(b) as pub:
            pub.connect("p")
            pub.publish("s/1", b"a", 1, pid=1)
            pub.publish("s/2", b"zero", 0)
            pub.publish("s/3", b"b", 2, pid=2)
            pub.expect(PUBACK, 1)
            pub.expect(PUBREC, 2)
            pub.publish("s/4", b"c", 1, pid=3)
            pub.expect(PUBACK, 3)
        with Raw(b) as sub:
            assert sub.connect("keep", clean=False).session_present
            got = sub.messages(3)
            assert [(m[0], m[1], m[2]) for m in got] == [(b"s/1", b"a", 1), (b"s/3", b"b", 2),
                                                         (b"s/4", b"c", 1)]
            assert sub.nothing()  # QoS 0 was not queued for the offline session
        with Raw(b) as sub:
            # CleanSession 1 discards it [MQTT-3.1.2-6] [MQTT-3.2.2-1]
            assert not sub.connect("keep", clean=True).session_present
        with Raw(b) as sub:
            assert not sub.connect("keep", clean=False).session_present


def test_unacknowledged_resent_with_dup_on_resume():
    # [MQTT-4.4.0-1] PUBLISH again with DUP=1 [MQTT-3.3.1-1] and the same
    # id; after PUBREC, PUBREL and not the PUBLISH [MQTT-4.3.3-1]; in the
    # order first sent [MQTT-4.6.0-1], then what was queued meanwhile
    with running() as b:
        sub, pub = pub_sub(b, sub_id="r", clean=False, filters=[("t/#", 2)])
        pub.publish("t/1", b"q1", 1, pid=1)
        pub.publish("t/2", b"q2", 2, pid=2)
        pub.expect(PUBACK, 1)
        pub.expect(PUBREC, 2)
        pub.ack(PUBREL, 2)
        pub.expect(PUBCOMP, 2)
        p1 = sub.expect(PUBLISH)
        p2 = sub.expect(PUBLISH)
        sub.ack(PUBREC, p2.pid)
        sub.expect(PUBREL, p2.pid)
        sub.close()  # no PUBACK, no PUBCOMP
        pub.publish("t/3", b"q3", 1, pid=3)
        pub.expect(PUBACK, 3)
        with Raw(b) as again:
            assert again.connect("r", clean=False).session_present
            a = again.expect(PUBLISH)
            assert (bytes(a.payload), a.pid, a.dup) == (b"q1", p1.pid, True)
            again.expect(PUBREL, p2.pid)
            c = again.expect(PUBLISH)
            assert (bytes(c.payload), c.dup) == (b"q3", False)
            again.ack(PUBACK, a.pid)
            again.ack(PUBCOMP, p2.pid)
            again.ack(PUBACK, c.pid)
            assert wait_for(lambda: b.sessions()[b"r"].inflight() == 0)


def test_qos2_inbound_state_survives_reconnect():
    # the held packet id is part of the session: after reconnecting, the
    # publisher's resend before PUBREL is not delivered again
    with running() as b:
        sub, _ = pub_sub(b, filters=[("t", 2)])
        with Raw(b) as pub:
            pub.connect("qp", clean=False)
            pub.publish("t", b"x", 2, pid=9)
            pub.expect(PUBREC, 9)
        with Raw(b) as pub:
            assert pub.connect("qp", clean=False).session_present
            pub.publish("t", b"x", 2, pid=9, dup=True)
            pub.expect(PUBREC, 9)
            pub.ack(PUBREL, 9)
            pub.expect(PUBCOMP, 9)
        assert len(sub.messages(1)) == 1
        assert sub.nothing()


def test_clean_session_state_is_not_reused():
    # [MQTT-3.1.2-6] CleanSession 1 starts afresh: the old subscriptions and
    # queued messages are gone, also for the persistent session that follows
    with running() as b:
        with Raw(b) as c:
            c.connect("dev", clean=False)
            c.subscribe(1, "q", 1)
        with Raw(b) as p:
            p.connect("p")
            p.publish("q", b"queued", 1, pid=1)
            p.expect(PUBACK, 1)
        with Raw(b) as c:
            assert not c.connect("dev", clean=True).session_present
            assert c.nothing()
            assert b.sessions()[b"dev"].filters == []
        with Raw(b) as c, Raw(b) as p:
            assert not c.connect("dev", clean=False).session_present
            p.connect("p")
            p.publish("q", b"new", 1, pid=2)
            p.expect(PUBACK, 2)
            assert c.nothing()


# ---------------------------------------------------------------- the store

def test_store_survives_restart():
    # retained messages, the session, its subscription and its queued QoS 1
    # message are on disk before the acks [MQTT-3.1.2-4, MQTT-3.1.2-5]
    store = tempdir("umqtt3-conf-restart")
    with running(store=store, files=OSFiles()) as b:
        with Raw(b) as c:
            c.connect("dev", clean=False)
            c.subscribe(1, [("cmd/#", 1)])
            c.publish("cfg/rate", b"10", 1, pid=1, retain=True)
            c.expect(PUBACK, 1)
            c.simple(DISCONNECT)
        with Raw(b) as p:
            p.connect("p")
            p.publish("cmd/reboot", b"now", 1, pid=1)
            p.expect(PUBACK, 1)
        # written already, not at close
        names = listdir(store + "/s0")
        assert names[-1] == "sess" and names[0].endswith(".p")
        assert listdir(store).count("r0") == 1
    with running(store=store, files=OSFiles()) as b:
        assert b"cfg/rate" in b.retained
        with Raw(b) as c:
            assert c.connect("dev", clean=False).session_present
            assert c.messages(1)[0][:3] == (b"cmd/reboot", b"now", 1)
            c.subscribe(2, "cfg/#", 1)
            assert c.messages(1)[0][:4] == (b"cfg/rate", b"10", 1, True)
    rmtree(store)


def test_store_clean_session_removes_it_from_disk():
    # CleanSession 1 discards the old session [MQTT-3.1.2-6], on disk too,
    # before CONNACK; a restart then finds none [MQTT-3.2.2-1]
    store = tempdir("umqtt3-conf-clean")
    with running(store=store, files=OSFiles()) as b:
        with Raw(b) as c:
            c.connect("dev", clean=False)
            c.subscribe(1, [("a", 1)])
        with Raw(b) as c:
            assert not c.connect("dev", clean=True).session_present
        assert listdir(store + "/s0") == []
    assert _broker_on(store).sessions() == {}
    rmtree(store)


def test_store_retained_clear_is_durable():
    # an empty retained payload clears the topic [MQTT-3.3.1-10]: the file
    # goes before PUBACK, and the slot is reused
    store = tempdir("umqtt3-conf-clear")
    with running(store=store, files=OSFiles()) as b, Raw(b) as c:
        c.connect("p")
        c.publish("r/a", b"1", 1, pid=1, retain=True)
        c.expect(PUBACK, 1)
        c.publish("r/a", b"2", 1, pid=2, retain=True)  # replaced [MQTT-3.3.1-5]
        c.expect(PUBACK, 2)
        assert _broker_on(store).retained == {b"r/a": (1, b"2")}
        c.publish("r/a", b"", 1, pid=3, retain=True)
        c.expect(PUBACK, 3)
        assert not _broker_on(store).retained
        c.publish("r/b", b"3", 0, retain=True)
        c.publish("r/c", b"4", 1, pid=4, retain=True)
        c.expect(PUBACK, 4)
    assert listdir(store) == ["r0", "r1"]
    rmtree(store)


def test_store_ignores_a_torn_file():
    store = tempdir("umqtt3-conf-torn")
    with running(store=store, files=OSFiles()) as b, Raw(b) as c:
        c.connect("p")
        for i in range(3):
            c.publish("r/%d" % i, b"v%d" % i, 1, pid=i + 1, retain=True)
            c.expect(PUBACK, i + 1)
    data = read_file(store + "/r2")
    write_file(store + "/r2", data[:-3])  # torn by a power cut: never acked
    write_file(store + "/r1.t", b"\x55")  # a replacement that never took place
    b2 = _broker_on(store)
    assert sorted(b2.retained) == [b"r/0", b"r/1"]
    assert listdir(store) == ["r0", "r1"]
    rmtree(store)


def test_store_failure_refuses_the_ack_not_the_broker():
    # a write that fails is not acknowledged: the publisher's connection
    # closes without PUBACK, so it sends again; the broker goes on
    store = tempdir("umqtt3-conf-fail")
    with running(store=store) as b:
        rmtree(store)  # the store directory goes away
        with Raw(b) as c:
            c.connect("p")
            c.publish("r", b"v", 1, pid=1, retain=True)
            assert c.closed()
        assert b.store_errors == 1 and b.errors == 0
        os.mkdir(store)
        with Raw(b) as c:
            c.connect("p")
            c.publish("r", b"v", 1, pid=1, retain=True)
            c.expect(PUBACK, 1)
    assert sorted(_broker_on(store).retained) == [b"r"]
    rmtree(store)


def test_max_sessions_connack_3():
    store = tempdir("umqtt3-conf-max")
    with running(max_sessions=1, store=store) as b:
        with Raw(b) as a, Raw(b) as c, Raw(b) as d:
            assert a.connect("a", clean=False).rc == 0
            assert c.connect("c", clean=False).rc == 3  # server unavailable
            assert d.connect("d", clean=True).rc == 0  # not kept: not counted
        with Raw(b) as a:
            assert a.connect("a", clean=False).session_present
    rmtree(store)
