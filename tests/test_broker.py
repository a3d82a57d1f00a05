"""MQTT 3.1.1 conformance of umqtt3's broker over real sockets on 127.0.0.1.

One test per normative statement the broker has to honour, cited as
[MQTT-x.x.x-y] from the OASIS MQTT 3.1.1 specification; packets are built
with umqtt3.codec and sent by a raw-socket client (test_broker_harness.Raw),
so the broker sees exactly the bytes a test means. Then the limits and the
abuse cases: each limit is refused the way docs/broker.md says, and a
misbehaving client never disturbs the others.
"""
import asyncio
import os
import socket
import subprocess
import sys
import time

from test_broker_harness import Raw, running, wait_for, connect_bytes, LIB
from umqtt3 import codec
from umqtt3.codec import (CONNACK, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP,
                          PINGREQ, PINGRESP, DISCONNECT)
from umqtt3.broker import Broker


def pub_sub(b, sub_id="sub", filters=(("#", 2),), **kw):
    """A connected subscriber (with its filters) and a connected publisher."""
    sub = Raw(b.port)
    sub.connect(sub_id, **kw)
    sub.subscribe(1, list(filters))
    pub = Raw(b.port)
    pub.connect("pub-" + sub_id)
    return sub, pub


# ---------------------------------------------------------------- CONNECT

def test_first_packet_must_be_connect():
    # [MQTT-3.1.0-1] anything else first closes the connection
    with running() as b, Raw(b.port) as c:
        c.simple(PINGREQ)
        assert c.recv() is None


def test_second_connect_is_a_protocol_violation():
    # [MQTT-3.1.0-2]
    with running() as b, Raw(b.port) as c:
        assert c.connect("twice").rc == 0
        c.send(connect_bytes("twice"))
        assert c.closed()


def test_no_connect_in_time_closes():
    # 3.1: a server closes a connection that sends no CONNECT in a
    # reasonable time; here the broker's connect timeout (0.3 s)
    with running(connect_timeout_ms=300) as b, Raw(b.port) as idle, Raw(b.port) as half:
        half.send(connect_bytes("half")[:7])  # half a CONNECT, then nothing
        t0 = time.monotonic()
        assert idle.closed() and half.closed()
        assert time.monotonic() - t0 < 3


def test_unsupported_protocol_level_gets_connack_1():
    # [MQTT-3.1.2-2] CONNACK 0x01, then the connection is closed
    with running() as b, Raw(b.port) as c:
        raw = connect_bytes("lv")
        raw[8] = 6  # protocol level byte of "MQTT"
        c.send(raw)
        p = c.expect(CONNACK)
        assert p.rc == 1 and not p.session_present
        assert c.closed()


def test_protocol_name_wrong_closes():
    # [MQTT-3.1.2-1] not "MQTT": closed without CONNACK
    with running() as b, Raw(b.port) as c:
        raw = connect_bytes("nm")
        raw[4:8] = b"MQTX"
        c.send(raw)
        assert c.recv() is None


def test_mqtt31_level3_accepted():
    # MQTT 3.1 ("MQIsdp", level 3) is spoken too; no session-present bit
    with running() as b, Raw(b.port) as c:
        p = c.connect("old-client", level=3)
        assert p.rc == 0 and not p.session_present
        assert c.subscribe(1, "x/y", 1) == b"\x01"


def test_mqtt5_refused_cleanly():
    # level 5 is not served yet: a 5.0 CONNACK with 0x84, then close
    with running() as b, Raw(b.port) as c:
        c.connect("v5", level=5, expect=False)
        c.level = 5
        p = c.expect(CONNACK)
        assert p.rc == 0x84
        assert c.closed()
        assert b.connected == 0


def test_reserved_connect_flag_closes():
    # [MQTT-3.1.2-3] the reserved flag must be 0
    with running() as b, Raw(b.port) as c:
        raw = connect_bytes("rf")
        raw[9] |= 1
        c.send(raw)
        assert c.recv() is None


def test_empty_client_id_with_clean_session_is_assigned():
    # [MQTT-3.1.3-6] [MQTT-3.1.3-7] accepted and given a unique id
    with running() as b, Raw(b.port) as c1, Raw(b.port) as c2:
        assert c1.connect("", clean=True).rc == 0
        assert c2.connect("", clean=True).rc == 0
        assert wait_for(lambda: b.connected == 2)
        assert c1.subscribe(1, "e/t", 1) == b"\x01"
        c2.publish("e/t", b"hi", 1, pid=3)
        c2.expect(PUBACK, 3)
        assert c1.messages(1)[0][:3] == (b"e/t", b"hi", 1)


def test_empty_client_id_without_clean_session_rejected():
    # [MQTT-3.1.3-8] CONNACK 0x02, then close
    with running() as b, Raw(b.port) as c:
        raw = connect_bytes("", clean=True)
        raw[9] &= ~2  # CleanSession 0 (the encoder refuses to build this)
        c.send(raw)
        p = c.expect(CONNACK)
        assert p.rc == 2
        assert c.closed()
        assert not b.sessions()


def test_empty_client_id_at_level_3_rejected():
    # MQTT 3.1 wants a client id of 1 to 23 characters: CONNACK 2
    with running() as b, Raw(b.port) as c:
        c.send(b"\x10\x0e\x00\x06MQIsdp\x03\x02\x00\x00\x00\x00")
        assert c.expect(CONNACK).rc == 2
        assert c.closed()


def test_takeover_closes_the_older_connection():
    # [MQTT-3.1.4-2] the existing client with the same id is disconnected
    with running() as b, Raw(b.port) as old, Raw(b.port) as new:
        assert old.connect("same").rc == 0
        assert new.connect("same").rc == 0
        assert old.closed()
        new.simple(PINGREQ)
        new.expect(PINGRESP)
        assert wait_for(lambda: b.connected == 1)


def test_takeover_publishes_the_old_will():
    # the older connection is closed without DISCONNECT, so its will goes
    with running() as b, Raw(b.port) as watch:
        watch.connect("watch")
        watch.subscribe(1, "wills/#", 0)
        with Raw(b.port) as old, Raw(b.port) as new:
            old.connect("dev", will_topic="wills/dev", will_msg=b"lost")
            new.connect("dev")
            assert watch.messages(1)[0][:2] == (b"wills/dev", b"lost")


def test_user_password_checked_before_any_state():
    # CONNACK 4 (bad user name or password), 5 (not authorized); a refused
    # client leaves no session and does not take over the id
    users = {b"alice": b"secret", b"bob": b""}
    with running(users=users) as b:
        with Raw(b.port) as c:
            assert c.connect("x", clean=False).rc == 5  # anonymous
            assert c.closed()
        with Raw(b.port) as c:
            assert c.connect("x", clean=False, user="alice", password="wrong").rc == 4
            assert c.closed()
        with Raw(b.port) as c:
            assert c.connect("x", clean=False, user="mallory", password="secret").rc == 4
        assert not b.sessions()
        with Raw(b.port) as good, Raw(b.port) as evil:
            assert good.connect("dev", user="alice", password="secret").rc == 0
            assert evil.connect("dev", user="alice", password="nope").rc == 4
            good.simple(PINGREQ)
            good.expect(PINGRESP)  # still connected: no takeover by a refused client
        with Raw(b.port) as c:
            assert c.connect("b", user="bob").rc == 0


def test_keepalive_enforced_at_one_and_a_half():
    # [MQTT-3.1.2-24] nothing within 1.5 x keepalive: disconnected, and as
    # the client did not send DISCONNECT its will is published
    with running() as b, Raw(b.port) as watch, Raw(b.port) as c:
        watch.connect("watch")
        watch.subscribe(1, "ka/#", 0)
        t0 = time.monotonic()
        c.connect("sleepy", keepalive=1, will_topic="ka/sleepy", will_msg=b"timeout")
        assert c.closed(timeout=4)
        dt = time.monotonic() - t0
        assert 1.4 <= dt < 3.0, dt
        assert watch.messages(1)[0][:2] == (b"ka/sleepy", b"timeout")


def test_keepalive_kept_by_pings():
    with running() as b, Raw(b.port) as c:
        c.connect("pinger", keepalive=1)
        for _ in range(4):
            time.sleep(0.5)
            c.simple(PINGREQ)  # [MQTT-3.12.4-1] answered with PINGRESP
            c.expect(PINGRESP)


def test_will_on_abnormal_close_not_on_disconnect():
    # [MQTT-3.1.2-8] published when the connection is lost;
    # [MQTT-3.1.2-10] [MQTT-3.14.4-3] discarded on DISCONNECT
    with running() as b, Raw(b.port) as watch:
        watch.connect("watch")
        watch.subscribe(1, "w/#", 1)
        with Raw(b.port) as polite:
            polite.connect("polite", will_topic="w/polite", will_msg=b"bye", will_qos=1)
            polite.simple(DISCONNECT)
            assert polite.closed()
        with Raw(b.port) as rude:
            rude.connect("rude", will_topic="w/rude", will_msg=b"lost", will_qos=1, will_retain=True)
        msgs = watch.messages(1)
        assert msgs[0][:3] == (b"w/rude", b"lost", 1)
        assert watch.nothing()
        # the will was retained [MQTT-3.1.2-17]
        with Raw(b.port) as late:
            late.connect("late")
            late.subscribe(1, "w/#", 1)
            assert late.messages(1)[0][:4] == (b"w/rude", b"lost", 1, True)


def test_will_on_protocol_error():
    # a server closing the connection for a protocol error publishes the will
    with running() as b, Raw(b.port) as watch, Raw(b.port) as bad:
        watch.connect("watch")
        watch.subscribe(1, "w/#", 0)
        bad.connect("bad", will_topic="w/bad", will_msg=b"x")
        bad.send(b"\x30\x02\x00\x05")  # PUBLISH whose topic runs past the packet
        assert bad.closed()
        assert watch.messages(1)[0][:2] == (b"w/bad", b"x")


# ---------------------------------------------------------------- subscriptions

def test_wildcards():
    # + one level, # any number including the parent [MQTT-4.7.1-2] [MQTT-4.7.1-3]
    with running() as b:
        sub, pub = pub_sub(b, filters=[("a/+/c", 0), ("x/#", 0)])
        for t in ("a/b/c", "a/b/d", "a/c", "x", "x/y/z", "a//c"):
            pub.publish(t, t.encode())
        pub.publish("end", b"")
        got = [m[0] for m in sub.messages(4)]
        assert got == [b"a/b/c", b"x", b"x/y/z", b"a//c"]
        assert sub.nothing()


def test_invalid_filter_closes():
    # [MQTT-4.7.1-2] '#' must be last; the connection is closed
    with running() as b, Raw(b.port) as c:
        c.connect("inv")
        # built by hand: the client's encoder refuses such a filter
        c.send(b"\x82\x0a\x00\x01\x00\x05a/#/b\x00")
        assert c.recv() is None


def test_dollar_topics_not_matched_by_leading_wildcard():
    # [MQTT-4.7.2-1]: '#' and '+/...' do not match $SYS; '$SYS/#' does
    with running(sys_interval=60) as b, Raw(b.port) as c:
        c.connect("sys")
        assert wait_for(lambda: b"$SYS/broker/uptime" in b.retained)
        c.subscribe(1, [("#", 0), ("+/broker/uptime", 0)])
        assert c.nothing()
        c.subscribe(2, "$SYS/broker/uptime", 0)
        assert c.messages(1)[0][0] == b"$SYS/broker/uptime"


def test_sys_topics():
    with running(sys_interval=60) as b, Raw(b.port) as c:
        c.connect("sys")
        assert wait_for(lambda: b"$SYS/broker/uptime" in b.retained)
        c.subscribe(1, "$SYS/broker/#", 0)
        got = {}
        while True:
            p = c.recv(0.5) if got else c.recv()
            got[bytes(p.topic)] = bytes(p.payload)
            if len(got) >= 9:
                break
        assert got[b"$SYS/broker/version"].startswith(b"umqtt3")
        assert got[b"$SYS/broker/uptime"].endswith(b"seconds")
        for k in (b"clients/connected", b"clients/total", b"messages/received",
                  b"messages/sent", b"messages/dropped", b"clients/maximum"):
            assert got[b"$SYS/broker/" + k].isdigit(), k


def test_clients_cannot_publish_into_sys():
    with running(sys_interval=60) as b, Raw(b.port) as c:
        c.connect("sys")
        c.subscribe(1, "$SYS/#", 0)
        c.messages(9)  # the broker's own figures
        c.publish("$SYS/broker/uptime", b"forged", 1, pid=4, retain=True)
        c.expect(PUBACK, 4)
        assert c.nothing()
        assert b.retained[b"$SYS/broker/uptime"][1] != b"forged"


def test_sysx_topics_are_not_sys():
    # only "$SYS/..." is the broker's; "$SYSX" is an ordinary $ topic
    with running() as b, Raw(b.port) as c, Raw(b.port) as p:
        c.connect("sysx")
        c.subscribe(1, "$SYSX/#", 0)
        p.connect("sysx-pub")
        p.publish("$SYSX/a", b"v", 1, pid=2, retain=True)
        p.expect(PUBACK, 2)
        assert c.messages(1)[0][:2] == (b"$SYSX/a", b"v")
        assert b.retained[b"$SYSX/a"][1] == b"v"


def test_sys_topics_do_not_count_against_max_retained():
    b = Broker(port=None, max_retained=2, sys_interval=1)
    b._sys()
    assert sum(1 for t in b.retained if t.startswith(b"$SYS/")) >= 8
    b.publish("a", b"1", retain=True)
    b.publish("b", b"2", retain=True)
    b.publish("c", b"3", retain=True)  # the third is over the limit
    assert b"a" in b.retained and b"b" in b.retained and b"c" not in b.retained
    assert b.dropped == 1


def test_overlapping_subscriptions_delivered_once_at_highest_qos():
    # [MQTT-3.3.5-1]
    with running() as b:
        sub, pub = pub_sub(b, filters=[("a/#", 0), ("a/b", 2), ("+/b", 1)])
        pub.publish("a/b", b"two", 2, pid=1)
        pub.publish("a/b", b"one", 1, pid=2)
        pub.publish("a/c", b"zero", 2, pid=3)
        got = [m[1:3] for m in sub.messages(3)]
        assert got == [(b"two", 2), (b"one", 1), (b"zero", 0)]
        assert sub.nothing()


def test_outbound_qos_is_min_of_published_and_granted():
    # 3.8.4: delivered at min(published QoS, granted QoS)
    with running() as b:
        sub, pub = pub_sub(b, filters=[("q", 1)])
        for q in (0, 1, 2):
            pub.publish("q", b"%d" % q, q, pid=q or 0)
        assert [m[2] for m in sub.messages(3)] == [0, 1, 1]


def test_suback_codes_in_order():
    # [MQTT-3.8.4-5] one return code per filter, in order;
    # [MQTT-3.8.4-6] granted QoS may be what was asked
    with running() as b, Raw(b.port) as c:
        c.connect("s")
        assert c.subscribe(7, [("a", 2), ("b", 0), ("c", 1)]) == b"\x02\x00\x01"


def test_resubscribe_replaces_and_resends_retained():
    # [MQTT-3.8.4-3]
    with running() as b:
        sub, pub = pub_sub(b, filters=[("r", 0)])
        pub.publish("r", b"kept", 1, pid=1, retain=True)
        assert sub.messages(1)[0][2:4] == (0, False)
        assert sub.subscribe(2, "r", 1) == b"\x01"
        assert sub.messages(1)[0][1:4] == (b"kept", 1, True)
        pub.publish("r", b"new", 1, pid=2)
        assert sub.messages(1)[0][1:3] == (b"new", 1)
        assert sub.nothing()


def test_unsubscribe():
    # [MQTT-3.10.4-4] UNSUBACK with the same packet id, even for a filter
    # that was not subscribed [MQTT-3.10.4-5]; then no more delivery
    with running() as b:
        sub, pub = pub_sub(b, filters=[("u/#", 0)])
        sub.unsubscribe(9, ["u/#", "never"])
        pub.publish("u/1", b"x")
        assert sub.nothing()


# ---------------------------------------------------------------- QoS flows

def test_qos1_inbound_puback_same_packet_id():
    # [MQTT-4.3.2-2] PUBACK carries the PUBLISH's packet id
    with running() as b:
        sub, pub = pub_sub(b, filters=[("t", 1)])
        pub.publish("t", b"m", 1, pid=321)
        pub.expect(PUBACK, 321)
        assert sub.messages(1)[0][:3] == (b"t", b"m", 1)


def test_qos2_inbound_exactly_once():
    # [MQTT-4.3.3-2]: the packet id is held until PUBREL; a PUBLISH with the
    # same id before that is answered with PUBREC and not delivered again
    with running() as b:
        sub, pub = pub_sub(b, filters=[("t", 2)])
        pub.publish("t", b"once", 2, pid=5)
        pub.expect(PUBREC, 5)
        pub.publish("t", b"once", 2, pid=5, dup=True)
        pub.expect(PUBREC, 5)
        pub.ack(PUBREL, 5)
        pub.expect(PUBCOMP, 5)
        assert [m[1] for m in sub.messages(1)] == [b"once"]
        assert sub.nothing()
        # the id is free again: a new message with it is delivered
        pub.publish("t", b"again", 2, pid=5)
        pub.expect(PUBREC, 5)
        pub.ack(PUBREL, 5)
        pub.expect(PUBCOMP, 5)
        assert [m[1] for m in sub.messages(1)] == [b"again"]


def test_qos2_outbound_flow():
    # the broker as QoS 2 sender: PUBLISH, PUBREC -> PUBREL, PUBCOMP
    with running() as b:
        sub, pub = pub_sub(b, filters=[("t", 2)])
        pub.publish("t", b"x", 2, pid=1)
        p = sub.expect(PUBLISH)
        assert p.qos == 2 and p.pid
        sub.ack(PUBREC, p.pid)
        sub.expect(PUBREL, p.pid)
        sub.ack(PUBCOMP, p.pid)
        assert wait_for(lambda: b.sessions()[b"sub"].inflight() == 0)


def test_outbound_packet_ids_distinct_while_in_flight():
    # [MQTT-2.3.1-4] a new QoS 1/2 PUBLISH uses an id not in use
    with running() as b:
        sub, pub = pub_sub(b, filters=[("t", 1)])
        for i in range(5):
            pub.publish("t", b"%d" % i, 1, pid=i + 1)
        msgs = sub.messages(5, ack=False)
        pids = [m[5] for m in msgs]
        assert len(set(pids)) == 5 and 0 not in pids


# ---------------------------------------------------------------- retained

def test_retained_messages():
    # stored [MQTT-3.3.1-5]; sent to a new subscription with RETAIN=1
    # [MQTT-3.3.1-6] [MQTT-3.3.1-8], to established ones with RETAIN=0
    # [MQTT-3.3.1-9]; RETAIN=0 leaves the stored one alone [MQTT-3.3.1-12];
    # an empty payload clears it [MQTT-3.3.1-10] and is not stored [MQTT-3.3.1-11]
    with running() as b:
        sub, pub = pub_sub(b, filters=[("r/#", 1)])
        pub.publish("r/a", b"first", 1, pid=1, retain=True)
        pub.publish("r/a", b"second", 1, pid=2, retain=True)  # replaces
        pub.publish("r/a", b"not kept", 1, pid=3, retain=False)
        pub.publish("r/b", b"gone soon", 0, retain=True)
        assert [(m[1], m[3]) for m in sub.messages(4)] == [
            (b"first", False), (b"second", False), (b"not kept", False), (b"gone soon", False)]
        pub.publish("r/b", b"", 0, retain=True)
        assert sub.messages(1)[0][1] == b""
        with Raw(b.port) as late:
            late.connect("late")
            late.subscribe(1, "r/#", 2)
            got = late.messages(1)
            assert got[0][:4] == (b"r/a", b"second", 1, True)
            assert late.nothing()
        assert b"r/b" not in b.retained


def test_retained_qos_capped_by_granted():
    with running() as b, Raw(b.port) as pub, Raw(b.port) as sub:
        pub.connect("p")
        pub.publish("r", b"x", 2, pid=1, retain=True)
        pub.expect(PUBREC, 1)
        pub.ack(PUBREL, 1)
        pub.expect(PUBCOMP, 1)
        sub.connect("s")
        sub.subscribe(1, "r", 1)
        assert sub.messages(1)[0][2:4] == (1, True)


# ---------------------------------------------------------------- sessions

def test_persistent_session_queues_and_resumes():
    # [MQTT-3.1.2-4] [MQTT-3.1.2-5] subscriptions kept, QoS 1/2 queued while
    # offline and delivered in order; CONNACK session present [MQTT-3.2.2-2]
    with running() as b:
        with Raw(b.port) as sub:
            assert not sub.connect("keep", clean=False).session_present  # [MQTT-3.2.2-3]
            sub.subscribe(1, [("s/#", 2)])
            sub.simple(DISCONNECT)
        with Raw(b.port) as pub:
            pub.connect("p")
            pub.publish("s/1", b"a", 1, pid=1)
            pub.publish("s/2", b"zero", 0)
            pub.publish("s/3", b"b", 2, pid=2)
            pub.expect(PUBACK, 1)
            pub.expect(PUBREC, 2)
            pub.publish("s/4", b"c", 1, pid=3)
            pub.expect(PUBACK, 3)
        with Raw(b.port) as sub:
            assert sub.connect("keep", clean=False).session_present
            got = sub.messages(3)
            assert [(m[0], m[1], m[2]) for m in got] == [(b"s/1", b"a", 1), (b"s/3", b"b", 2),
                                                         (b"s/4", b"c", 1)]
            assert sub.nothing()  # QoS 0 was not queued for the offline session
        with Raw(b.port) as sub:
            # CleanSession 1 discards it [MQTT-3.1.2-6] [MQTT-3.2.2-1]
            assert not sub.connect("keep", clean=True).session_present
        with Raw(b.port) as sub:
            assert not sub.connect("keep", clean=False).session_present


def test_unacknowledged_resent_with_dup_on_resume():
    # [MQTT-4.4.0-1] PUBLISH with DUP=1 and the same id; after PUBREC, PUBREL
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
        with Raw(b.port) as again:
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
        with Raw(b.port) as pub:
            pub.connect("qp", clean=False)
            pub.publish("t", b"x", 2, pid=9)
            pub.expect(PUBREC, 9)
        with Raw(b.port) as pub:
            assert pub.connect("qp", clean=False).session_present
            pub.publish("t", b"x", 2, pid=9, dup=True)
            pub.expect(PUBREC, 9)
            pub.ack(PUBREL, 9)
            pub.expect(PUBCOMP, 9)
        assert len(sub.messages(1)) == 1
        assert sub.nothing()


def test_store_survives_restart(tmp_path):
    # retained messages, the session, its subscription and its queued QoS 1
    # message are on disk before the acks [MQTT-3.1.2-4, MQTT-3.1.2-5]
    store = str(tmp_path / "store")
    with running(store=store) as b:
        with Raw(b.port) as c:
            c.connect("dev", clean=False)
            c.subscribe(1, [("cmd/#", 1)])
            c.publish("cfg/rate", b"10", 1, pid=1, retain=True)
            c.expect(PUBACK, 1)
            c.simple(DISCONNECT)
        with Raw(b.port) as p:
            p.connect("p")
            p.publish("cmd/reboot", b"now", 1, pid=1)
            p.expect(PUBACK, 1)
        # written already, not at close
        names = sorted(os.listdir(os.path.join(store, "s0")))
        assert names[-1] == "sess" and names[0].endswith(".p")
        assert os.listdir(store).count("r0") == 1
    with running(store=store) as b:
        assert b"cfg/rate" in b.retained
        with Raw(b.port) as c:
            assert c.connect("dev", clean=False).session_present
            assert c.messages(1)[0][:3] == (b"cmd/reboot", b"now", 1)
            c.subscribe(2, "cfg/#", 1)
            assert c.messages(1)[0][:4] == (b"cfg/rate", b"10", 1, True)


def test_store_clean_session_removes_it_from_disk(tmp_path):
    # CleanSession 1 discards the old session [MQTT-3.1.2-6], on disk too,
    # before CONNACK; a restart then finds none [MQTT-3.2.2-1]
    store = str(tmp_path / "store")
    with running(store=store) as b:
        with Raw(b.port) as c:
            c.connect("dev", clean=False)
            c.subscribe(1, [("a", 1)])
        with Raw(b.port) as c:
            assert not c.connect("dev", clean=True).session_present
        assert os.listdir(os.path.join(store, "s0")) == []
    b = Broker(port=None, store=store, sys_interval=0)
    assert b.sessions() == {}


def test_store_retained_clear_is_durable(tmp_path):
    # an empty retained payload clears the topic [MQTT-3.3.1-10]: the file
    # goes before PUBACK, and the slot is reused
    store = str(tmp_path / "store")
    with running(store=store) as b, Raw(b.port) as c:
        c.connect("p")
        c.publish("r/a", b"1", 1, pid=1, retain=True)
        c.expect(PUBACK, 1)
        c.publish("r/a", b"2", 1, pid=2, retain=True)  # replaced [MQTT-3.3.1-5]
        c.expect(PUBACK, 2)
        assert Broker(port=None, store=store, sys_interval=0).retained == {b"r/a": (1, b"2")}
        c.publish("r/a", b"", 1, pid=3, retain=True)
        c.expect(PUBACK, 3)
        assert not Broker(port=None, store=store, sys_interval=0).retained
        c.publish("r/b", b"3", 0, retain=True)
        c.publish("r/c", b"4", 1, pid=4, retain=True)
        c.expect(PUBACK, 4)
    assert sorted(os.listdir(store)) == ["r0", "r1"]


def test_store_ignores_a_torn_file(tmp_path):
    store = tmp_path / "store"
    with running(store=str(store)) as b, Raw(b.port) as c:
        c.connect("p")
        for i in range(3):
            c.publish("r/%d" % i, b"v%d" % i, 1, pid=i + 1, retain=True)
            c.expect(PUBACK, i + 1)
    data = (store / "r2").read_bytes()
    (store / "r2").write_bytes(data[:-3])  # torn by a power cut: never acked
    (store / "r1.t").write_bytes(b"\x55")  # a replacement that never took place
    b2 = Broker(port=None, store=str(store), sys_interval=0)
    assert sorted(b2.retained) == [b"r/0", b"r/1"]
    assert sorted(os.listdir(str(store))) == ["r0", "r1"]


def test_store_failure_refuses_the_ack_not_the_broker(tmp_path):
    # a write that fails is not acknowledged: the publisher's connection
    # closes without PUBACK, so it sends again; the broker goes on
    import shutil
    store = tmp_path / "store"
    with running(store=str(store)) as b:
        shutil.rmtree(str(store))  # the store directory goes away
        with Raw(b.port) as c:
            c.connect("p")
            c.publish("r", b"v", 1, pid=1, retain=True)
            assert c.closed()
        assert b.store_errors == 1 and b.errors == 0
        os.mkdir(str(store))
        with Raw(b.port) as c:
            c.connect("p")
            c.publish("r", b"v", 1, pid=1, retain=True)
            c.expect(PUBACK, 1)
    assert sorted(Broker(port=None, store=str(store), sys_interval=0).retained) == [b"r"]


def test_max_sessions_connack_3(tmp_path):
    with running(max_sessions=1, store=str(tmp_path / "s")) as b:
        with Raw(b.port) as a, Raw(b.port) as c, Raw(b.port) as d:
            assert a.connect("a", clean=False).rc == 0
            assert c.connect("c", clean=False).rc == 3  # server unavailable
            assert d.connect("d", clean=True).rc == 0  # not kept: not counted
        with Raw(b.port) as a:
            assert a.connect("a", clean=False).session_present


# ---------------------------------------------------------------- limits

def test_max_clients_connack_3():
    with running(max_clients=2) as b:
        with Raw(b.port) as a, Raw(b.port) as c, Raw(b.port) as d:
            assert a.connect("a").rc == 0
            assert c.connect("c").rc == 0
            assert d.connect("d").rc == 3  # server unavailable
            assert d.closed()
            c.simple(PINGREQ)
            c.expect(PINGRESP)
            # a takeover is not a new client
            with Raw(b.port) as a2:
                assert a2.connect("a").rc == 0


def test_max_packet_closes():
    with running(max_packet=256) as b:
        sub, pub = pub_sub(b, filters=[("t", 0)])
        with Raw(b.port) as big:
            big.connect("big")
            big.publish("t", b"x" * 300)
            assert big.closed()
        pub.publish("t", b"y" * 200)
        assert sub.messages(1)[0][1] == b"y" * 200


def test_header_claiming_10_mb_closes_at_once():
    with running(max_packet=1024) as b, Raw(b.port) as c:
        c.connect("liar")
        head = bytearray(5)
        head[0] = 0x30
        c.send(head[:codec.put_varint(head, 1, 10 * 1024 * 1024)])
        assert c.closed(timeout=2)


def test_max_subscriptions_suback_0x80():
    with running(max_subs=2) as b, Raw(b.port) as c:
        c.connect("s")
        assert c.subscribe(1, [("a", 1), ("b", 1), ("c", 1)]) == b"\x01\x01\x80"
        assert c.subscribe(2, "a", 2) == b"\x02"  # replacing one is fine
        assert c.subscribe(3, "d", 0) == b"\x80"


def test_max_inflight_holds_the_rest_back():
    with running(max_inflight=2) as b:
        sub, pub = pub_sub(b, filters=[("t", 1)])
        for i in range(5):
            pub.publish("t", b"%d" % i, 1, pid=i + 1)
        first = sub.messages(2, ack=False)
        assert sub.nothing()
        sub.ack(PUBACK, first[0][5])
        third = sub.messages(1, ack=False)
        assert third[0][1] == b"2"
        sub.ack(PUBACK, first[1][5])
        sub.ack(PUBACK, third[0][5])
        assert [m[1] for m in sub.messages(2)] == [b"3", b"4"]


def test_max_qos2_in_closes():
    # 3.1.1 has no receive maximum: a client holding more QoS 2 ids than
    # allowed (no PUBREL) is disconnected
    with running(max_qos2_in=3) as b, Raw(b.port) as c:
        c.connect("q2")
        for pid in (1, 2, 3):
            c.publish("t", b"x", 2, pid=pid)
            c.expect(PUBREC, pid)
        c.ack(PUBREL, 1)
        c.expect(PUBCOMP, 1)
        c.publish("t", b"x", 2, pid=4)  # 3 held again: still fine
        c.expect(PUBREC, 4)
        c.publish("t", b"x", 2, pid=5)
        assert c.closed()


def test_max_queued_drops_oldest_qos0_first():
    # offline queue of 3 with QoS 0 queueing on: the oldest QoS 0 goes first;
    # with no QoS 0 left the new message is dropped
    with running(max_queued=3, queue_qos0=True) as b:
        with Raw(b.port) as sub:
            sub.connect("q", clean=False)
            sub.subscribe(1, [("t", 1)])
            sub.simple(DISCONNECT)
        with Raw(b.port) as pub:
            pub.connect("p")
            for i, (name, q) in enumerate([("A", 0), ("B", 1), ("C", 0), ("D", 1), ("E", 1), ("F", 1)]):
                pub.publish("t", name.encode(), q, pid=i + 1 if q else 0)
                if q:
                    pub.expect(PUBACK, i + 1)
        assert b.dropped == 3
        with Raw(b.port) as sub:
            sub.connect("q", clean=False)
            assert [m[1] for m in sub.messages(3)] == [b"B", b"D", b"E"]
            assert sub.nothing()


def test_slow_consumer_does_not_stall_others():
    # a subscriber that never reads: its buffers fill, its queue stays
    # bounded, and everyone else gets every message
    with running(max_queued=50, max_packet=2048) as b:
        with Raw(b.port, rcvbuf=4096) as slow, Raw(b.port) as fast, Raw(b.port) as pub:
            slow.connect("slow")
            slow.subscribe(1, [("load/#", 1)])
            fast.connect("fast")
            fast.subscribe(1, [("load/#", 0)])
            pub.connect("pub")
            payload = b"p" * 1000
            total = 0
            for batch in range(40):
                for i in range(100):
                    pub.publish("load/x", payload, 1 if i % 2 else 0, pid=(i % 100) + 1 if i % 2 else 0)
                total += 100
                got = fast.messages(100, timeout=10)
                assert len(got) == 100
                # PUBACKs for the publisher
                for i in range(50):
                    pub.expect(PUBACK)
            s = b.sessions()[b"slow"]
            assert len(s.q) <= 50
            assert s.inflight() <= b.max_inflight
            assert b.dropped > 0
            assert wait_for(lambda: b.connected == 3)


def test_blocked_reader_resumes_when_it_drains():
    # a client whose send buffer is full is not read from (its answers would
    # not fit); once it drains, a packet already read whole is handled even
    # though nothing more arrives to wake poll
    with running(max_packet=1024, max_queued=10, sndbuf=4096) as b:
        with Raw(b.port, rcvbuf=4096) as slow, Raw(b.port) as pub:
            slow.connect("slow")
            slow.subscribe(1, "fill", 0)
            pub.connect("pub")
            s = b.sessions()[b"slow"]
            # 32-byte frames fill the 1024-byte send buffer to the last byte;
            # go on until the kernel buffers are full too and messages wait
            c = s.client
            for _ in range(200):
                for _ in range(50):
                    pub.publish("fill", b"z" * 24)
                time.sleep(0.02)
                if len(s.q) >= 5 and c.conn.space() == 0:
                    time.sleep(0.05)
                    if c.conn.space() == 0:
                        break
            assert len(s.q) >= 5 and c.conn.space() == 0
            slow.simple(PINGREQ)
            assert wait_for(lambda: c.blocked)
            seen = set()
            deadline = time.monotonic() + 10
            while PINGRESP not in seen and time.monotonic() < deadline:
                p = slow.recv()
                assert p is not None
                seen.add(p.type)
            assert PINGRESP in seen


# ---------------------------------------------------------------- abuse

def test_garbage_closes_only_that_connection():
    with running(connect_timeout_ms=500) as b:
        sub, pub = pub_sub(b, filters=[("t", 0)])
        for junk in (b"\x00\x00", b"\xff" * 64, b"GET / HTTP/1.1\r\n\r\n", os.urandom(512)):
            with Raw(b.port) as g:
                g.send(junk)
                assert g.closed()
        with Raw(b.port) as g:
            g.connect("g")
            g.send(b"\x62\x02\x00\x01")  # a well-formed PUBREL: answered
            g.expect(PUBCOMP, 1)
            g.send(b"\x60\x02\x00\x01")  # PUBREL with reserved flags 0000 [MQTT-2.2.2-2]
            assert g.closed()
        pub.publish("t", b"still here")
        assert sub.messages(1)[0][1] == b"still here"


def test_flood_of_connects():
    with running(max_clients=8, max_pending=4, backlog=64) as b:
        socks = []
        try:
            for i in range(60):
                try:
                    s = socket.create_connection(("127.0.0.1", b.port), timeout=5)
                    s.sendall(connect_bytes("flood%d" % (i % 20)))
                    socks.append(s)
                except OSError:
                    pass
            assert wait_for(lambda: len(b._clients) <= 12, timeout=10)
            assert b.connected <= 8
        finally:
            for s in socks:
                s.close()
        # the backlog may still hold flood connections the broker accepts,
        # finds closed and drops
        assert wait_for(lambda: b.connected == 0 and not b._clients, timeout=10)
        # the broker recovers: a new client is served once the flood is gone
        # (it may still be draining flood connections from the listen backlog,
        # and refusing past max_pending meanwhile is right, so try a few times)
        for attempt in range(10):
            try:
                with Raw(b.port) as c:
                    assert c.connect("after").rc == 0
                break
            except (OSError, AssertionError):
                if attempt == 9:
                    raise
                time.sleep(0.2)


def test_stalled_half_packet_after_connect_is_bounded():
    # a connected client that sends half a PUBLISH and stalls holds only its
    # own buffers; keepalive then closes it
    with running() as b:
        sub, pub = pub_sub(b, filters=[("t", 0)])
        with Raw(b.port) as st:
            st.connect("stall", keepalive=1)
            st.send(b"\x30\x7f\x00\x01t")
            pub.publish("t", b"ok")
            assert sub.messages(1)[0][1] == b"ok"
            assert st.closed(timeout=4)


# ---------------------------------------------------------------- forms of running

def test_poll_once_in_a_user_loop():
    b = Broker(port=0, sys_interval=0)
    try:
        c = socket.create_connection(("127.0.0.1", b.port), timeout=5)
        c.sendall(connect_bytes("loop"))
        data = b""
        deadline = time.monotonic() + 5
        c.setblocking(False)
        while len(data) < 4 and time.monotonic() < deadline:
            b.poll_once(20)
            try:
                data += c.recv(16)
            except BlockingIOError:
                pass
        assert data == b"\x20\x02\x00\x00"
        c.close()
    finally:
        b.close()


def test_packets_left_over_by_the_burst_limit_are_not_stranded():
    # the broker reads at most `burst` packets per connection per step; the
    # rest may already be in memory, where poll cannot see them
    b = Broker(port=0, sys_interval=0, burst=1)
    try:
        c = socket.create_connection(("127.0.0.1", b.port), timeout=5)
        c.sendall(bytes(connect_bytes("burst")) + b"\xc0\x00" * 3)  # CONNECT + 3 PINGREQ
        want = b"\x20\x02\x00\x00" + b"\xd0\x00" * 3
        data = b""
        c.setblocking(False)
        t0 = time.monotonic()
        for _ in range(20):
            if len(data) >= len(want):
                break
            b.poll_once(3000)
            try:
                data += c.recv(64)
            except BlockingIOError:
                pass
        assert data == want
        assert time.monotonic() - t0 < 2.5  # no step waited out its timeout
        c.close()
    finally:
        b.close()


def test_asyncio_task_form():
    async def main():
        b = Broker(port=0, sys_interval=0)
        task = asyncio.ensure_future(b.run())
        try:
            r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", b.port), 5)
            w.write(bytes(connect_bytes("aio")))
            await w.drain()
            assert await asyncio.wait_for(r.readexactly(4), 5) == b"\x20\x02\x00\x00"
            w.close()
        finally:
            b.stop()
            await asyncio.wait_for(task, 5)
            b.close()
    asyncio.run(main())


def test_cli_prints_where_it_listens_and_logs(tmp_path):
    users = tmp_path / "users"
    users.write_text("# who may connect\nalice:secret\n")
    env = dict(os.environ, PYTHONPATH=LIB, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "umqtt3.broker", "--host", "127.0.0.1", "--port", "0",
                             "--users", str(users), "--max-clients", "4"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("umqtt3 broker listening on 127.0.0.1:"), line
        port = int(line.rsplit(":", 1)[1])
        with Raw(port) as c:
            assert c.connect("nobody").rc == 5
        with Raw(port) as c:
            assert c.connect("alice1", user="alice", password="secret").rc == 0
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
        assert proc.returncode == 0
        assert "refused (CONNACK 5)" in out
        assert "connect alice1" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
