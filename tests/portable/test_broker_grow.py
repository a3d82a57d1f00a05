# A PUBLISH the broker acknowledges is one it can forward and keep: its
# outgoing form may grow (a property length for an MQTT 5 subscriber,
# subscription identifiers, the broker's own topic alias), and a topic
# alias may stand for a long topic. And the bytes a peer can make the
# broker hold for filters and topic aliases are bounded per session.
from broker_harness import running, Raw, build, settle, Timeout
from test_broker5_connect import connect5, sub5, pub5, next_publish, props_of
from umqtt3 import props as P
from umqtt3.codec import encode_publish, PUBACK, PUBREC, DISCONNECT


def _deliver(sub):
    try:
        q = next_publish(sub)
    except Timeout:
        return None
    if q.qos:
        sub.ack(PUBACK, q.pid)
    return q


def test_full_size_311_publish_reaches_an_mqtt5_subscriber():
    # [MQTT-3.3.1-5] [MQTT-4.3.3-9]: a 3.1.1 PUBLISH of exactly max_packet
    # is acknowledged, so it is delivered to an MQTT 5 subscriber whose
    # copy gains a property length, and one with subscription
    # identifiers on two overlapping subscriptions [MQTT-3.3.4-3 (5.0)];
    # retained, it is kept [MQTT-3.3.1-5]
    for sids in (None, (300, 268435455)):
        with running() as b:  # device defaults: max_packet 1024
            sub = Raw(b)
            connect5(sub, "s5")
            if sids:
                sub5(sub, 1, [("t", 1)], props={P.SUBSCRIPTION_ID: sids[0]})
                sub5(sub, 2, [("#", 1)], props={P.SUBSCRIPTION_ID: sids[1]})
            else:
                sub5(sub, 1, [("t", 1)])
            pub = Raw(b)
            pub.connect("p4")
            data = build(encode_publish, "t", b"x" * 1016, 1, 7, True)  # retained
            assert len(data) == b.limits.max_packet
            pub.send(data)
            assert pub.expect(PUBACK, 7)
            q = _deliver(sub)
            assert q is not None, "acknowledged, never delivered"
            assert len(q.payload) == 1016
            if sids:
                got = props_of(q)[P.SUBSCRIPTION_ID]
                assert sorted(got if isinstance(got, list) else [got]) == list(sids)
            # kept, and sent whole to a new MQTT 5 subscriber [MQTT-3.3.1-6]
            late = Raw(b)
            connect5(late, "late")
            sub5(late, 1, [("t", 1)], props={P.SUBSCRIPTION_ID: 268435455} if sids else None)
            q = _deliver(late)
            assert q is not None and len(q.payload) == 1016 and q.retain
            assert b.dropped == 0


def test_alias_publish_too_long_written_out_is_refused_0x83():
    # [MQTT-3.3.1-5] [MQTT-3.3.2-12]: a topic alias for a 500-byte topic,
    # then an 800-byte retained QoS 1 / 2 payload with the alias alone:
    # about 815 bytes in, about 1310 written out, more than the broker can
    # send or keep; refused in its PUBACK / PUBREC (0x83 implementation
    # specific error: 0x95 is no PUBACK code, 3.4.2.1), nothing delivered
    # or retained; the next one still goes through
    T = b"big/" + b"t" * 496
    for qos, ack in ((1, PUBACK), (2, PUBREC)):
        with running() as b:
            sub = Raw(b)
            sub.connect("sub")
            sub.subscribe(1, [("big/#", 1)])
            pub = Raw(b)
            connect5(pub, "pub")
            pub5(pub, T, b"first", 1, 1, props={P.TOPIC_ALIAS: 1})
            assert pub.expect(PUBACK, 1).rc == 0
            assert sub.messages(1)[0][1] == b"first"
            pub5(pub, b"", b"A" * 800, qos, 2, retain=True, props={P.TOPIC_ALIAS: 1})
            assert pub.expect(ack, 2).rc == 0x83
            pub5(pub, b"", b"small-after", 1, 3, props={P.TOPIC_ALIAS: 1})
            assert pub.expect(PUBACK, 3).rc == 0
            assert [m[1] for m in sub.messages(1)] == [b"small-after"]
            assert sub.nothing()
            late = Raw(b)
            late.connect("late")
            late.subscribe(1, [("big/#", 1)])
            assert late.nothing()  # nothing retained: it was refused


def test_alias_publish_that_fits_written_out_is_retained():
    # the same alias with a payload whose written-out form fits: accepted,
    # delivered and retained [MQTT-3.3.1-5]
    T = b"big/" + b"t" * 496
    with running() as b:
        pub = Raw(b)
        connect5(pub, "pub")
        pub5(pub, T, b"first", 0, 0, props={P.TOPIC_ALIAS: 1})
        pub5(pub, b"", b"B" * 480, 1, 2, retain=True, props={P.TOPIC_ALIAS: 1})
        assert pub.expect(PUBACK, 2).rc in (0, 0x10)  # 0x10: no subscriber yet
        late = Raw(b)
        late.connect("late")
        late.subscribe(1, [("big/#", 1)])
        assert [len(m[1]) for m in late.messages(1)] == [480]


def test_filter_bytes_per_session_are_bounded():
    # [MQTT-3.9.3-1]: past max_sub_bytes a new filter is refused, 0x80 at
    # 3.1.1, 0x97 quota exceeded at 5.0 [MQTT-3.9.3-2 (5.0)]; one that
    # replaces a granted filter costs nothing more [MQTT-3.8.4-3]
    long = "f/" + "x" * 398  # 400 bytes
    with running(max_sub_bytes=1000, max_packet=2048) as b, Raw(b) as c:
        c.connect("s")
        assert c.subscribe(1, [(long + "1", 1), (long + "2", 1), (long + "3", 1)]) == \
            b"\x01\x01\x80"
        assert c.subscribe(2, [(long + "1", 0)]) == b"\x00"
        assert c.subscribe(3, [("short", 1)]) == b"\x01"
        c.unsubscribe(4, [long + "2"])
        assert c.subscribe(5, [(long + "3", 1)]) == b"\x01"
    with running(max_sub_bytes=1000, max_packet=2048) as b, Raw(b) as c:
        connect5(c, "s5")
        assert sub5(c, 1, [(long + "1", 1), (long + "2", 1), (long + "3", 1)]) == \
            b"\x01\x01\x97"


def test_inbound_alias_topic_bytes_are_bounded():
    # an MQTT 5 client's topic aliases hold at most max_alias_bytes of
    # topics: one more is DISCONNECT 0x97 (quota exceeded); an alias set
    # again to another topic gives its old topic's bytes back
    with running(max_alias_bytes=1000) as b, Raw(b) as c:
        connect5(c, "a")
        pub5(c, "a/" + "x" * 398, b"1", props={P.TOPIC_ALIAS: 1})
        pub5(c, "b/" + "x" * 398, b"2", props={P.TOPIC_ALIAS: 2})
        pub5(c, "c/" + "x" * 398, b"3", props={P.TOPIC_ALIAS: 2})  # replaces b/...
        pub5(c, "d/" + "x" * 98, b"4", props={P.TOPIC_ALIAS: 3})
        pub5(c, "t", b"ping", 1, 9)
        assert c.expect(PUBACK, 9).rc == 0x10  # taken (no matching subscribers)
        pub5(c, "e/" + "x" * 398, b"5", props={P.TOPIC_ALIAS: 4})
        assert c.expect(DISCONNECT).rc == 0x97
        assert c.closed()


def test_outbound_alias_topic_bytes_are_bounded():
    # the broker's own topic aliases towards a subscriber [MQTT-3.3.2-8]:
    # past max_alias_bytes of their topics it sets no more, and sends the
    # topic written out
    with running(max_alias_bytes=1000) as b:
        sub = Raw(b)
        connect5(sub, "s", props={P.TOPIC_ALIAS_MAXIMUM: 8})
        sub5(sub, 1, [("#", 0)])
        pub = Raw(b)
        pub.connect("p")
        topics = [(c + "/" + "x" * 398).encode() for c in "abc"]
        seen = []
        for t in topics + topics:
            pub.publish(t, b"m")  # one at a time: a queued one goes whole
            q = next_publish(sub)
            seen.append((bytes(q.topic), props_of(q).get(P.TOPIC_ALIAS)))
        assert seen[:3] == [(topics[0], 1), (topics[1], 2), (topics[2], None)]
        assert seen[3:] == [(b"", 1), (b"", 2), (topics[2], None)]
