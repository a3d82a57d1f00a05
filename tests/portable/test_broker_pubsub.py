# MQTT 3.1.1 conformance of umqtt3's broker: PUBLISH and its QoS flows,
# SUBSCRIBE / UNSUBSCRIBE, topic names and filters, retained messages, $SYS
# (sections 2.2-2.3, 3.3-3.10, 4.3, 4.6, 4.7 of the OASIS text), one test per
# normative statement, cited as [MQTT-x.x.x-y].
#
# The same bodies run over pipes with the broker in this thread (pytest and
# tests/mp/testrunner.py under MicroPython) and over real sockets
# (tests/test_broker.py); tests/portable/broker_harness.py is the harness.
from broker_harness import running, Raw, advance, wait_for, pub_sub, Timeout, string, frame
from umqtt3.broker import Broker
from umqtt3.codec import PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP, PINGREQ, PINGRESP


# ---------------------------------------------------------------- topics and filters

def test_wildcards():
    # + one level, # any number including the parent [MQTT-4.7.1-2]
    # [MQTT-4.7.1-3]; each topic sent matches the filter [MQTT-3.3.2-3]
    with running() as b:
        sub, pub = pub_sub(b, filters=[("a/+/c", 0), ("x/#", 0)])
        for t in ("a/b/c", "a/b/d", "a/c", "x", "x/y/z", "a//c"):
            pub.publish(t, t.encode())
        pub.publish("end", b"")
        got = [m[0] for m in sub.messages(4)]
        assert got == [b"a/b/c", b"x", b"x/y/z", b"a//c"]
        assert sub.nothing()


def test_invalid_filter_closes():
    # '#' must be last and fill its level [MQTT-4.7.1-2], '+' must fill its
    # level [MQTT-4.7.1-3], a filter is at least one character long
    # [MQTT-4.7.3-1] and holds no U+0000 [MQTT-4.7.3-2]: the connection is
    # closed (built by hand: the client's encoder refuses such filters)
    with running() as b:
        for f in (b"a/#/b", b"a/b#", b"a/b+", b"+a/b", b"", b"a\x00b"):
            with Raw(b) as c:
                c.connect("inv")
                c.send(frame(0x82, b"\x00\x01" + string(f) + b"\x00"))
                assert c.recv() is None, f


def test_dollar_topics_not_matched_by_leading_wildcard():
    # [MQTT-4.7.2-1]: '#' and '+/...' do not match $SYS; '$SYS/#' does
    with running(sys_interval=60) as b, Raw(b) as c:
        c.connect("sys")
        assert wait_for(lambda: b"$SYS/broker/uptime" in b.retained)
        c.subscribe(1, [("#", 0), ("+/broker/uptime", 0)])
        assert c.nothing()
        c.subscribe(2, "$SYS/broker/uptime", 0)
        assert c.messages(1)[0][0] == b"$SYS/broker/uptime"


def test_topic_matching_does_not_normalize():
    # [MQTT-4.7.3-4] no case folding, no trimming of '/', no Unicode
    # normalization: a filter matches the same bytes only; a leading
    # U+FEFF is a character like any other [MQTT-1.5.3-3] ([MQTT-1.5.4-3] in 5.0)
    bom = b"\xef\xbb\xbfz"
    with running() as b:
        sub, pub = pub_sub(b, filters=[("a/b", 0), ("/x", 0), (b"caf\xc3\xa9", 0), (bom, 0)])
        for t in (b"a/B", b"A/b", b"a/b/", b"a//b", b"x", b"cafe\xcc\x81", b"CAF\xc3\x89", b"z",
                  b"/x", b"caf\xc3\xa9", b"a/b", bom):
            pub.publish(t, t)
        assert [m[0] for m in sub.messages(4)] == [b"/x", b"caf\xc3\xa9", b"a/b", bom]
        assert sub.nothing()


# ---------------------------------------------------------------- malformed packets

def test_malformed_publish_closes_only_that_connection():
    # each closes the publisher's connection; nothing is delivered or
    # retained, and the subscriber is not disturbed [MQTT-4.8.0-1]
    bad = (
        frame(0x36, string(b"t") + b"\x00\x01x"),  # both QoS bits set [MQTT-3.3.1-4]
        frame(0x38, string(b"t") + b"x"),  # DUP on QoS 0 [MQTT-3.3.1-2]
        frame(0x31, string(b"t/+") + b"x"),  # wildcard in a topic name [MQTT-3.3.2-2] [MQTT-4.7.1-1]
        frame(0x31, string(b"t/#") + b"x"),
        frame(0x31, string(b"") + b"x"),  # empty topic name [MQTT-4.7.3-1]
        frame(0x31, string(b"t\x00") + b"x"),  # U+0000 [MQTT-4.7.3-2] [MQTT-1.5.3-2]
        frame(0x31, string(b"t\xff") + b"x"),  # ill-formed UTF-8 [MQTT-3.3.2-1] [MQTT-1.5.3-1]
        frame(0x31, string(b"t\xed\xa0\x80") + b"x"),  # a UTF-16 surrogate [MQTT-1.5.3-1]
        frame(0x32, string(b"t") + b"\x00\x00x"),  # QoS 1 with packet id 0 [MQTT-2.3.1-1]
    )
    with running() as b:
        sub, pub = pub_sub(b, filters=[("#", 2)])
        for raw in bad:
            with Raw(b) as c:
                c.connect("bad")
                c.send(raw)
                assert c.recv() is None, raw
        pub.publish("t", b"fine", 1, pid=1)
        pub.expect(PUBACK, 1)
        assert [m[:2] for m in sub.messages(1)] == [(b"t", b"fine")]
        assert sub.nothing()
        assert not b.retained


def test_malformed_subscribe_and_unsubscribe_close():
    bad = (
        frame(0x80, b"\x00\x01" + string(b"a") + b"\x00"),  # flags 0000 [MQTT-3.8.1-1]
        frame(0x82, b"\x00\x01"),  # no filter [MQTT-3.8.3-3]
        frame(0x82, b"\x00\x01" + string(b"a") + b"\x03"),  # QoS 3 [MQTT-3.8.3-4]
        frame(0x82, b"\x00\x01" + string(b"a") + b"\x04"),  # a reserved bit [MQTT-3.8.3-4]
        frame(0x82, b"\x00\x01" + string(b"a")),  # no options byte
        frame(0x82, b"\x00\x00" + string(b"a") + b"\x00"),  # packet id 0 [MQTT-2.3.1-1]
        frame(0x82, b"\x00\x01" + string(b"a\xc3") + b"\x00"),  # bad UTF-8 [MQTT-3.8.3-1]
        frame(0xA0, b"\x00\x01" + string(b"a")),  # flags 0000 [MQTT-3.10.1-1]
        frame(0xA2, b"\x00\x01"),  # no filter [MQTT-3.10.3-2]
        frame(0xA2, b"\x00\x01" + string(b"a\xc3")),  # bad UTF-8 [MQTT-3.10.3-1]
        frame(0xA2, b"\x00\x00" + string(b"a")),  # packet id 0 [MQTT-2.3.1-1]
    )
    with running() as b:
        for raw in bad:
            with Raw(b) as c:
                c.connect("bad")
                c.send(raw)
                assert c.recv() is None, raw
        assert b.connected == 0


def test_reserved_fixed_header_flags_close():
    # [MQTT-2.2.2-1] [MQTT-2.2.2-2] flags other than the table's close the
    # connection: PUBREL must carry 0010 [MQTT-3.6.1-1]; PUBACK, PUBREC,
    # PUBCOMP, PINGREQ 0000; a well-formed PUBREL is answered
    with running() as b:
        with Raw(b) as c:
            c.connect("g")
            c.send(b"\x62\x02\x00\x01")
            c.expect(PUBCOMP, 1)
        for raw in (b"\x60\x02\x00\x01", b"\x63\x02\x00\x01", b"\x42\x02\x00\x01",
                    b"\x52\x02\x00\x01", b"\x72\x02\x00\x01", b"\xc2\x00", b"\x00\x00",
                    b"\xf0\x00"):
            with Raw(b) as c:
                c.connect("g")
                c.send(raw)
                assert c.recv() is None, raw


# ---------------------------------------------------------------- $SYS

def test_sys_topics():
    with running(sys_interval=60) as b, Raw(b) as c:
        c.connect("sys")
        assert wait_for(lambda: b"$SYS/broker/uptime" in b.retained)
        c.subscribe(1, "$SYS/broker/#", 0)
        got = {}
        while True:  # all of them: on MicroPython heap/free comes too
            try:
                p = c.recv(0.5) if got else c.recv()
            except Timeout:
                break
            got[bytes(p.topic)] = bytes(p.payload)
        assert len(got) >= 9, got
        assert got[b"$SYS/broker/version"].startswith(b"umqtt3")
        assert got[b"$SYS/broker/uptime"].endswith(b"seconds")
        for k in (b"clients/connected", b"clients/total", b"messages/received",
                  b"messages/sent", b"messages/dropped", b"clients/maximum",
                  b"publish/messages/received", b"publish/messages/sent"):
            assert got[b"$SYS/broker/" + k].isdigit(), k


def test_sys_counts_what_mosquitto_counts():
    # as mosquitto(8): messages/received and messages/sent count packets of
    # every type, publish/messages/received and publish/messages/sent the
    # PUBLISHes alone, clients/maximum the most clients connected at once
    with running(sys_interval=1) as b, Raw(b) as a, Raw(b) as c:
        a.connect("a")  # in CONNECT, out CONNACK
        a.subscribe(1, "t", 2)  # SUBSCRIBE, SUBACK
        c.connect("c")  # CONNECT, CONNACK
        c.publish("t", b"one", 1, pid=1)  # PUBLISH, PUBACK (and PUBLISH to a)
        c.expect(PUBACK, 1)
        assert a.messages(1)[0][1] == b"one"  # a: PUBACK
        c.publish("t", b"two", 2, pid=2)  # PUBLISH, PUBREC (and PUBLISH to a)
        c.expect(PUBREC, 2)
        c.ack(PUBREL, 2)  # PUBREL, PUBCOMP
        c.expect(PUBCOMP, 2)
        p = a.recv()  # a: PUBREC, then PUBREL to a, a: PUBCOMP
        assert p.type == PUBLISH and p.qos == 2
        a.ack(PUBREC, p.pid)
        a.expect(PUBREL, p.pid)
        a.ack(PUBCOMP, p.pid)
        a.simple(PINGREQ)  # PINGREQ, PINGRESP
        a.expect(PINGRESP)
        c.send(b"\xe0\x00")  # DISCONNECT
        assert c.closed()
        advance(1100)

        def sys(name):
            m = b.retained.get(b"$SYS/broker/" + name)
            return m and int(m[1])
        assert wait_for(lambda: sys(b"clients/connected") == 1)
        assert sys(b"clients/maximum") == 2
        assert sys(b"publish/messages/received") == 2
        assert sys(b"publish/messages/sent") == 2
        assert sys(b"messages/received") == 11
        assert sys(b"messages/sent") == 10


def test_sys_topics_are_published_every_interval():
    # again every sys_interval seconds, to an established subscription with
    # RETAIN 0 [MQTT-3.3.1-9]
    with running(sys_interval=1) as b, Raw(b) as c:
        c.connect("sys")
        assert wait_for(lambda: b"$SYS/broker/uptime" in b.retained)
        c.subscribe(1, "$SYS/broker/uptime", 0)
        assert c.messages(1)[0][1:4] == (b"0 seconds", 0, True)
        advance(1100)
        assert c.messages(1)[0][1:4] == (b"1 seconds", 0, False)


def test_clients_cannot_publish_into_sys():
    # [MQTT-3.3.5-2] a PUBLISH the broker does not authorize is acknowledged
    # by the QoS rules, then neither forwarded nor retained
    with running(sys_interval=60) as b, Raw(b) as c:
        c.connect("sys")
        assert wait_for(lambda: b"$SYS/broker/uptime" in b.retained)
        c.subscribe(1, "$SYS/broker/uptime", 0)
        c.messages(1)  # the broker's own figure
        c.publish("$SYS/broker/uptime", b"forged", 1, pid=4, retain=True)
        c.expect(PUBACK, 4)
        assert c.nothing()
        assert b.retained[b"$SYS/broker/uptime"][1] != b"forged"


def test_clients_cannot_write_into_sys_through_a_will():
    # [MQTT-4.7.2-1] [MQTT-3.3.5-2]: a will's topic in $SYS/ is accepted at
    # CONNECT, as a PUBLISH to it is acknowledged, and then neither
    # forwarded nor retained (mosquitto does the same); other $ topics are
    # ordinary ones
    with running(sys_interval=60, max_retained=2) as b, Raw(b) as c:
        c.connect("sys")
        assert wait_for(lambda: b"$SYS/broker/uptime" in b.retained)
        c.subscribe(1, [("$SYS/#", 1), ("$SYSX/#", 1)])
        while True:  # the broker's own figures first
            try:
                c.recv(0.5)
            except Timeout:
                break
        for i in range(3):
            with Raw(b) as w:
                assert w.connect("w%d" % i, will_topic="$SYS/broker/w%d" % i, will_msg=b"forged",
                                 will_qos=1, will_retain=True).rc == 0
        assert c.nothing()
        assert not [t for t in b.retained if t.startswith(b"$SYS/broker/w")]
        with Raw(b) as w:
            w.connect("x", will_topic="$SYSX/w", will_msg=b"plain", will_qos=1)
        assert c.messages(1)[0][:3] == (b"$SYSX/w", b"plain", 1)


def test_sysx_topics_are_not_sys():
    # only "$SYS/..." is the broker's; "$SYSX" is an ordinary $ topic
    with running() as b, Raw(b) as c, Raw(b) as p:
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
    b.close()


# ---------------------------------------------------------------- subscriptions

def test_overlapping_subscriptions_delivered_once_at_highest_qos():
    # [MQTT-3.3.5-1] ([MQTT-3.3.4-2] in 5.0); the QoS 0 copy of a QoS 2 PUBLISH carries no packet
    # id [MQTT-2.3.1-5] (its payload would show it)
    with running() as b:
        sub, pub = pub_sub(b, filters=[("a/#", 0), ("a/b", 2), ("+/b", 1)])
        pub.publish("a/b", b"two", 2, pid=1)
        pub.publish("a/b", b"one", 1, pid=2)
        pub.publish("a/c", b"zero", 2, pid=3)
        got = [m[1:3] for m in sub.messages(3)]
        assert got == [(b"two", 2), (b"one", 1), (b"zero", 0)]
        assert sub.nothing()


def test_outbound_qos_is_min_of_published_and_granted():
    # [MQTT-3.8.4-6] delivered at min(published QoS, granted QoS)
    with running() as b:
        sub, pub = pub_sub(b, filters=[("q", 1)])
        for q in (0, 1, 2):
            pub.publish("q", b"%d" % q, q, pid=q or 0)
        assert [m[2] for m in sub.messages(3)] == [0, 1, 1]


def test_suback_codes_in_order():
    # [MQTT-3.8.4-1] SUBSCRIBE is answered with SUBACK, with its packet id
    # [MQTT-3.8.4-2] [MQTT-2.3.1-7]; one return code per filter, in order
    # [MQTT-3.8.4-5] [MQTT-3.9.3-1], each a granted QoS or 0x80 [MQTT-3.9.3-2]
    # (the decoder refuses any other); granted as asked [MQTT-3.8.4-6]
    with running() as b, Raw(b) as c:
        c.connect("s")
        assert c.subscribe(7, [("a", 2), ("b", 0), ("c", 1)]) == b"\x02\x00\x01"
        assert c.subscribe(65535, "d", 0) == b"\x00"


def test_one_subscribe_with_many_filters_is_a_sequence():
    # [MQTT-3.8.4-4] handled as SUBSCRIBEs one after another: the same filter
    # twice leaves one subscription, with the later QoS, and each entry
    # gets the retained message again
    with running() as b:
        sub, pub = pub_sub(b, filters=[("other", 0)])
        pub.publish("t", b"kept", 2, pid=1, retain=True)
        pub.expect(PUBREC, 1)
        pub.ack(PUBREL, 1)
        pub.expect(PUBCOMP, 1)
        assert sub.subscribe(2, [("t", 0), ("t", 2)]) == b"\x00\x02"
        assert [m[1:4] for m in sub.messages(2)] == [(b"kept", 0, True), (b"kept", 2, True)]
        assert b.sessions()[b"sub"].filters.count(b"t") == 1
        pub.publish("t", b"live", 2, pid=2)
        assert [m[1:3] for m in sub.messages(1)] == [(b"live", 2)]
        assert sub.nothing()


def test_resubscribe_replaces_and_resends_retained():
    # [MQTT-3.8.4-3] the subscription is replaced (new QoS), the retained
    # message is sent again, and the flow of publications goes on
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
    # that was not subscribed [MQTT-3.10.4-5]; one UNSUBACK for several
    # filters, each handled [MQTT-3.10.4-6]; then no more delivery
    # [MQTT-3.10.4-2]
    with running() as b:
        sub, pub = pub_sub(b, filters=[("u/#", 0), ("v", 0), ("w", 0)])
        sub.unsubscribe(9, ["u/#", "never", "v"])
        sub.simple(PINGREQ)
        sub.expect(PINGRESP)  # one UNSUBACK only: the next packet is this
        assert b.sessions()[b"sub"].filters == [b"w"]
        pub.publish("u/1", b"x")
        pub.publish("v", b"x")
        assert sub.nothing()


def test_unsubscribe_compares_filters_character_by_character():
    # [MQTT-3.10.4-1] only the identical filter is deleted: not one that
    # matches more, nor one that differs in case, nor one that is longer or
    # shorter with the same start
    with running() as b:
        sub, pub = pub_sub(b, filters=[("u/+", 0)])
        sub.unsubscribe(2, ["u/#", "+/+", "U/+", "u/+/x", "u/", "u"])
        pub.publish("u/1", b"still")
        assert sub.messages(1)[0][:2] == (b"u/1", b"still")
        sub.unsubscribe(3, ["u/+"])
        pub.publish("u/2", b"gone")
        assert sub.nothing()


def test_unsubscribe_completes_deliveries_in_flight():
    # [MQTT-3.10.4-3] QoS 1 and 2 messages already sent are still
    # delivered after UNSUBSCRIBE: resent on resume, acknowledged to the end
    with running() as b:
        sub, pub = pub_sub(b, filters=[("u/#", 2)], clean=False)
        pub.publish("u/1", b"one", 1, pid=1)
        pub.expect(PUBACK, 1)
        pub.publish("u/2", b"two", 2, pid=2)
        pub.expect(PUBREC, 2)
        pub.ack(PUBREL, 2)
        pub.expect(PUBCOMP, 2)
        first = sub.messages(2, ack=False)
        sub.unsubscribe(3, ["u/#"])
        sub.close()
        with Raw(b) as again:
            assert again.connect("sub", clean=False).session_present
            got = again.messages(2)
            assert [m[1:3] for m in got] == [(b"one", 1), (b"two", 2)]
            assert all(m[4] for m in got) and [m[5] for m in got] == [m[5] for m in first]
            again.expect(PUBREL, got[1][5])
            again.ack(PUBCOMP, got[1][5])
            assert wait_for(lambda: b.sessions()[b"sub"].inflight() == 0)
            pub.publish("u/3", b"after")
            assert again.nothing()


# ---------------------------------------------------------------- QoS flows

def test_qos1_inbound_puback_same_packet_id():
    # [MQTT-3.3.4-1] [MQTT-4.3.2-2] PUBACK carries the PUBLISH's packet id
    # [MQTT-2.3.1-6]; after it, a PUBLISH with that id is a new message,
    # DUP or not
    with running() as b:
        sub, pub = pub_sub(b, filters=[("t", 1)])
        pub.publish("t", b"m", 1, pid=321)
        pub.expect(PUBACK, 321)
        assert sub.messages(1)[0][:3] == (b"t", b"m", 1)
        pub.publish("t", b"m2", 1, pid=321, dup=True)
        pub.expect(PUBACK, 321)
        assert sub.messages(1)[0][:3] == (b"t", b"m2", 1)


def test_acknowledgements_in_order():
    # the ordering rules of 4.6, kept by the broker on both sides: PUBACKs in
    # the order of the QoS 1 PUBLISHes [MQTT-4.6.0-2], PUBRECs in the order
    # of the QoS 2 PUBLISHes [MQTT-4.6.0-3], PUBRELs in the order of the
    # PUBRECs received [MQTT-4.6.0-4]
    with running() as b:
        sub, pub = pub_sub(b, filters=[("t", 2)])
        for pid in (5, 3, 9, 1):
            pub.publish("t", b"x", 1, pid=pid)
        assert [pub.expect(PUBACK).pid for _ in range(4)] == [5, 3, 9, 1]
        for pid in (8, 2, 7):
            pub.publish("t", b"y", 2, pid=pid)
        assert [pub.expect(PUBREC).pid for _ in range(3)] == [8, 2, 7]
        q2 = [m[5] for m in sub.messages(7, ack=False) if m[2] == 2]
        assert len(q2) == 3
        q2.reverse()
        for pid in q2:
            sub.ack(PUBREC, pid)
        assert [sub.expect(PUBREL).pid for _ in q2] == q2


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
    # [MQTT-4.3.3-1] the broker as QoS 2 sender: PUBLISH with a packet id,
    # PUBREC -> PUBREL with the same id, PUBCOMP ends it
    with running() as b:
        sub, pub = pub_sub(b, filters=[("t", 2)])
        pub.publish("t", b"x", 2, pid=1)
        p = sub.expect(PUBLISH)
        assert p.qos == 2 and p.pid and not p.dup
        sub.ack(PUBREC, p.pid)
        sub.expect(PUBREL, p.pid)
        sub.ack(PUBCOMP, p.pid)
        assert wait_for(lambda: b.sessions()[b"sub"].inflight() == 0)


def test_outbound_packet_ids_distinct_while_in_flight():
    # [MQTT-2.3.1-4] [MQTT-4.3.2-1] a new QoS 1/2 PUBLISH uses an id not in
    # use, with DUP 0
    with running() as b:
        sub, pub = pub_sub(b, filters=[("t", 1)])
        for i in range(5):
            pub.publish("t", b"%d" % i, 1, pid=i + 1)
        msgs = sub.messages(5, ack=False)
        pids = [m[5] for m in msgs]
        assert len(set(pids)) == 5 and 0 not in pids
        assert not any(m[4] for m in msgs)


def test_dup_is_set_by_each_sender_not_forwarded():
    # [MQTT-3.3.1-3] the DUP of an incoming PUBLISH is not passed on: it says
    # whether the outgoing PUBLISH is a resend; and a QoS 0 PUBLISH has DUP 0
    # [MQTT-3.3.1-2]
    with running() as b:
        sub, pub = pub_sub(b, filters=[("d/1", 1), ("d/0", 0)])
        pub.publish("d/1", b"a", 1, pid=1, dup=True)
        pub.expect(PUBACK, 1)
        pub.publish("d/0", b"b", 1, pid=2, dup=True)
        pub.expect(PUBACK, 2)
        got = sub.messages(2)
        assert [(m[0], m[2], m[4]) for m in got] == [(b"d/1", 1, False), (b"d/0", 0, False)]


def test_ordered_topic():
    # [MQTT-4.6.0-5] every topic is an ordered topic: [MQTT-4.6.0-6] the
    # PUBLISHes one client sent on one topic at one QoS reach a subscriber
    # in the order they were received, though most wait behind max_inflight
    with running(max_inflight=2, max_queued=40, max_queued_bytes=0) as b:
        sub, pub = pub_sub(b, filters=[("o/#", 2)])
        for i in range(15):
            pub.publish("o/1", b"%d" % i, 1, pid=i + 1)
        for i in range(10):
            pub.publish("o/2", b"%d" % i, 2, pid=100 + i)
        got = sub.messages(25)
        assert [m[1] for m in got if m[0] == b"o/1"] == [b"%d" % i for i in range(15)]
        assert [m[1] for m in got if m[0] == b"o/2"] == [b"%d" % i for i in range(10)]
        assert sub.nothing()


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
        with Raw(b) as late:
            late.connect("late")
            late.subscribe(1, "r/#", 2)
            got = late.messages(1)
            assert got[0][:4] == (b"r/a", b"second", 1, True)
            assert late.nothing()
        assert b"r/b" not in b.retained


def test_qos0_retained_replaces_the_retained_message():
    # [MQTT-3.3.1-7] a QoS 0 PUBLISH with RETAIN discards the message
    # retained before (here a QoS 1 one); it is kept in its place
    with running() as b, Raw(b) as pub:
        pub.connect("p")
        pub.publish("r", b"one", 1, pid=1, retain=True)
        pub.expect(PUBACK, 1)
        pub.publish("r", b"zero", 0, retain=True)
        with Raw(b) as late:
            late.connect("late")
            late.subscribe(1, "r", 2)
            assert late.messages(1)[0][:4] == (b"r", b"zero", 0, True)
            assert late.nothing()


def test_retained_qos_capped_by_granted():
    with running() as b, Raw(b) as pub, Raw(b) as sub:
        pub.connect("p")
        pub.publish("r", b"x", 2, pid=1, retain=True)
        pub.expect(PUBREC, 1)
        pub.ack(PUBREL, 1)
        pub.expect(PUBCOMP, 1)
        sub.connect("s")
        sub.subscribe(1, "r", 1)
        assert sub.messages(1)[0][2:4] == (1, True)
