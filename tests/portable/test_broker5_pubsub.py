# MQTT 5.0 conformance of umqtt3's broker: PUBLISH properties, topic
# aliases, subscription options, flow control, maximum packet size,
# SUBACK / UNSUBACK reason codes (sections 3.3, 3.8-3.11, 4.9 of the OASIS
# MQTT 5.0 text). One test per normative statement, cited [MQTT-x.x.x-y].
#
# The same bodies run over pipes (pytest, and tests/mp/testrunner.py under
# the WebAssembly MicroPython) and over sockets (tests/test_broker5.py).
from broker_harness import running, Raw, advance, build, clock, connect_bytes, Timeout
from test_broker5_connect import props_of, connect5, sub5, pub5, next_publish, leave
from umqtt3 import props as P
from umqtt3.compat import ticks_diff
from umqtt3.codec import (encode_subscribe, encode_unsubscribe, encode_ack, encode_publish, UNSUBACK,
                          PUBACK, PUBREC, PUBREL, PUBCOMP, DISCONNECT, PINGREQ, PINGRESP)

# every property a PUBLISH may carry to a subscriber, user properties twice
# to see that their order is kept [MQTT-3.3.2-18]
ALL = {P.PAYLOAD_FORMAT: 1, P.CONTENT_TYPE: "application/json",
       P.RESPONSE_TOPIC: "reply/here", P.CORRELATION_DATA: b"\x00\x01id",
       P.USER_PROPERTY: [("a", "1"), ("b", "2"), ("a", "3")]}


def test_properties_forwarded_intact_and_in_order():
    # [MQTT-3.3.2-17] [MQTT-3.3.2-18] [MQTT-3.3.2-19] [MQTT-3.3.2-20]: the
    # broker passes every property on unchanged, in the same order, the
    # Response Topic and Correlation Data too [MQTT-3.3.2-15] [MQTT-3.3.2-16]
    with running() as b, Raw(b) as sub, Raw(b) as pub:
        connect5(sub, "s")
        sub5(sub, 1, [("t/#", 1)])
        connect5(pub, "p")
        raw = P.encode(ALL)
        pub5(pub, "t/1", b'{"v": 1}', 1, 1, props=raw)
        pub.expect(PUBACK, 1)
        m = next_publish(sub)
        assert bytes(m.buf[m.props_off:m.props_off + m.props_len]) == raw
        assert bytes(m.payload) == b'{"v": 1}'


def test_v311_subscriber_gets_no_properties_and_v5_gets_an_empty_list():
    # a 3.1.1 subscriber of a 5.0 publisher gets a 3.1.1 PUBLISH, and the
    # other way round an empty property list
    with running() as b, Raw(b) as old, Raw(b) as new, Raw(b) as p5, Raw(b) as p4:
        old.connect("old")
        old.subscribe(1, [("t", 0)])
        connect5(new, "new")
        sub5(new, 1, [("t", 0)])
        connect5(p5, "p5")
        p4.connect("p4")
        pub5(p5, "t", b"from5", props={P.CONTENT_TYPE: "x"})
        assert old.messages(1)[0][:2] == (b"t", b"from5")
        assert props_of(next_publish(new)) == {P.CONTENT_TYPE: "x"}
        p4.publish("t", b"from4")
        m = next_publish(new)
        assert bytes(m.payload) == b"from4" and m.props_len == 0


def test_retained_message_keeps_its_properties():
    # [MQTT-3.3.1-5 (5.0)] the retained message is the PUBLISH as sent,
    # its properties too
    with running() as b, Raw(b) as pub, Raw(b) as sub:
        connect5(pub, "p")
        pub5(pub, "r", b"kept", retain=True, props={P.USER_PROPERTY: [("k", "v")]})
        connect5(sub, "s")
        sub5(sub, 1, [("r", 0)])
        m = next_publish(sub)
        assert m.retain and props_of(m) == {P.USER_PROPERTY: [("k", "v")]}


def test_topic_alias_from_client():
    # [MQTT-3.3.2-12]: an alias set with a topic stands for it later; the
    # alias is the sender's, not forwarded
    with running() as b, Raw(b) as sub, Raw(b) as pub:
        connect5(sub, "s")
        sub5(sub, 1, [("long/topic/name", 0)])
        connect5(pub, "p")
        pub5(pub, "long/topic/name", b"1", props={P.TOPIC_ALIAS: 1, P.CONTENT_TYPE: "c"})
        pub5(pub, "", b"2", props={P.TOPIC_ALIAS: 1})
        for want in (b"1", b"2"):
            m = next_publish(sub)
            assert bytes(m.topic) == b"long/topic/name" and bytes(m.payload) == want
            assert P.TOPIC_ALIAS not in props_of(m)


def test_topic_alias_above_maximum_gets_0x94():
    # [MQTT-3.3.2-8] [MQTT-3.3.2-9] [MQTT-3.3.2-10]: 0, or above CONNACK's
    # maximum: DISCONNECT 0x94
    for alias in (0, 3):
        with running(max_aliases=2) as b, Raw(b) as c:
            connect5(c, "a")
            raw = bytearray(P.encode({P.TOPIC_ALIAS: 1}))
            raw[2] = alias  # the encoder refuses 0: by hand
            pub5(c, "t", b"x", props=bytes(raw))
            assert c.expect(DISCONNECT).rc == 0x94
            assert c.closed()


def test_unknown_topic_alias_is_a_protocol_error():
    # 3.3.2.3.4: an empty topic with an alias never set
    with running() as b, Raw(b) as c:
        connect5(c, "a")
        pub5(c, "", b"x", props={P.TOPIC_ALIAS: 1})
        assert c.expect(DISCONNECT).rc == 0x82


def test_payload_format_utf8_checked():
    # [MQTT-3.3.2-4 (5.0)]: payload format 1 and not UTF-8: PUBACK 0x99,
    # not forwarded
    with running() as b, Raw(b) as sub, Raw(b) as pub:
        connect5(sub, "s")
        sub5(sub, 1, [("t", 1)])
        connect5(pub, "p")
        pub5(pub, "t", b"\xff\xfe", 1, 1, props={P.PAYLOAD_FORMAT: 1})
        assert pub.expect(PUBACK, 1).rc == 0x99
        pub5(pub, "t", b"fine", 2, 2, props={P.PAYLOAD_FORMAT: 1})
        assert pub.expect(PUBREC, 2).rc == 0
        m = next_publish(sub)
        assert bytes(m.payload) == b"fine"


def test_response_topic_with_a_wildcard_is_a_protocol_error():
    # [MQTT-3.3.2-14] (5.0): a Response Topic is a topic name, so without
    # wildcards: a PUBLISH with one gets DISCONNECT 0x82 and is not
    # forwarded; a CONNECT whose will has one (3.1.3.2.5: the same
    # property) gets CONNACK 0x82, then the close [MQTT-4.13.1-1], and the
    # will is never published. (Built with a plain topic, then the bytes
    # changed: the encoder refuses it.)
    for bad in (b"reply/#", b"reply/+", b"+"):
        with running() as b, Raw(b) as sub, Raw(b) as pub:
            connect5(sub, "s")
            sub5(sub, 1, [("#", 1)])
            connect5(pub, "p")
            ok = build(encode_publish, "t", b"x", 1, 1, False, False, 5,
                       {P.RESPONSE_TOPIC: "r" * len(bad)})
            pub.send(ok.replace(b"r" * len(bad), bad))
            assert pub.expect(DISCONNECT).rc == 0x82
            assert pub.closed()
            assert sub.nothing()
        with running() as b, Raw(b) as sub, Raw(b) as c:
            connect5(sub, "s")
            sub5(sub, 1, [("#", 1)])
            ok = connect_bytes("w", level=5, will_topic="will/w", will_msg=b"bye",
                               will_props={P.RESPONSE_TOPIC: "r" * len(bad)})
            c.send(bytes(ok).replace(b"r" * len(bad), bad))
            c.level = 5
            assert c.recv().rc == 0x82
            assert c.recv() is None
            assert sub.nothing()


def test_no_local():
    # [MQTT-3.8.3-3]: no local: not sent to the connection that published
    with running() as b, Raw(b) as c, Raw(b) as other:
        connect5(c, "self")
        sub5(c, 1, [("t", 0x04)])
        connect5(other, "o")
        pub5(c, "t", b"mine")
        pub5(other, "t", b"theirs")
        assert bytes(next_publish(c).payload) == b"theirs"


def test_retain_as_published():
    # [MQTT-3.3.1-12] [MQTT-3.3.1-13]: RETAIN forwarded as published only
    # for a subscription that asked for it
    with running() as b, Raw(b) as rap, Raw(b) as plain, Raw(b) as pub:
        connect5(rap, "rap")
        sub5(rap, 1, [("t", 0x08)])
        connect5(plain, "plain")
        sub5(plain, 1, [("t", 0)])
        connect5(pub, "p")
        pub5(pub, "t", b"r", retain=True)
        assert next_publish(rap).retain
        assert not next_publish(plain).retain


def test_retain_handling():
    # [MQTT-3.3.1-9] [MQTT-3.3.1-10] [MQTT-3.3.1-11]: 0 always, 1 only for a
    # new subscription, 2 never
    with running() as b, Raw(b) as pub, Raw(b) as c:
        connect5(pub, "p")
        pub5(pub, "r", b"kept", retain=True)
        connect5(c, "s")
        sub5(c, 1, [("r", 0x20)])  # 2: none
        sub5(c, 2, [("q", 0x10)])
        assert c.nothing()
        sub5(c, 3, [("r", 0x10)])  # 1 on an existing one: none
        assert c.nothing()
        c.put(encode_unsubscribe, 4, ["r"], 5)
        c.expect(UNSUBACK, 4)
        sub5(c, 5, [("r", 0x10)])  # 1, new: sent
        assert bytes(next_publish(c).payload) == b"kept"
        sub5(c, 6, [("r", 0x00)])  # 0: sent again
        assert bytes(next_publish(c).payload) == b"kept"


def test_unsuback_reason_codes():
    # [MQTT-3.11.3-1] [MQTT-3.11.3-2]: one per filter, 0x11 where none existed
    with running() as b, Raw(b) as c:
        connect5(c, "u")
        sub5(c, 1, [("a", 0)])
        c.put(encode_unsubscribe, 2, ["a", "b"], 5)
        p = c.expect(UNSUBACK, 2)
        assert bytes(p.payload) == b"\x00\x11"


def test_shared_subscription_one_delivery_per_group_spread():
    # [MQTT-4.8.2-3 (5.0)]: one member of each group gets each message, in
    # turn; a plain subscription gets its own copy
    with running() as b, Raw(b) as m1, Raw(b) as m2, Raw(b) as other, Raw(b) as pub:
        for c, cid in ((m1, "m1"), (m2, "m2")):
            connect5(c, cid)
            assert sub5(c, 1, [("$share/g/s/#", 1)]) == b"\x01"
        connect5(other, "o")
        sub5(other, 1, [("s/#", 0)])
        connect5(pub, "p")
        for i in range(4):
            pub5(pub, "s/x", b"%d" % i)
        got1 = [bytes(next_publish(m1).payload) for _ in range(2)]
        got2 = [bytes(next_publish(m2).payload) for _ in range(2)]
        assert sorted(got1 + got2) == [b"0", b"1", b"2", b"3"]
        assert [bytes(next_publish(other).payload) for _ in range(4)] == [b"0", b"1", b"2", b"3"]
        assert m1.nothing() and m2.nothing()


def test_shared_subscription_gets_no_retained_and_bad_ones_refused():
    # 4.8.2: no retained messages for a new shared subscription; a group
    # with a wildcard or no filter is refused [MQTT-4.8.2-1, MQTT-4.8.2-2]
    with running() as b, Raw(b) as pub, Raw(b) as c:
        connect5(pub, "p")
        pub5(pub, "r", b"kept", retain=True)
        connect5(c, "s")
        assert sub5(c, 1, [("$share/g/r", 0), ("$share/+/r", 0), ("$share/g", 0)]) == \
            b"\x00\x8f\x8f"
        assert c.nothing()


def test_no_local_on_shared_subscription_is_a_protocol_error():
    # [MQTT-3.8.3-4]
    with running() as b, Raw(b) as c:
        connect5(c, "nl")
        c.put(encode_subscribe, 1, [("$share/g/t", 0x04)], 0, 5)
        assert c.expect(DISCONNECT).rc == 0x82


def test_subscription_identifiers_of_every_matching_subscription():
    # [MQTT-3.3.4-3] [MQTT-3.3.4-4] (5.0): the identifiers of each matching
    # subscription go with the message; none for a subscription without one
    with running() as b, Raw(b) as c, Raw(b) as pub:
        connect5(c, "ids")
        sub5(c, 1, [("a/#", 0)], {P.SUBSCRIPTION_ID: 7})
        sub5(c, 2, [("a/+", 1)], {P.SUBSCRIPTION_ID: 300})
        sub5(c, 3, [("a/b", 0)])
        connect5(pub, "p")
        pub5(pub, "a/b", b"x", props={P.CONTENT_TYPE: "c"})
        d = props_of(next_publish(c))
        assert d[P.CONTENT_TYPE] == "c" and sorted(d[P.SUBSCRIPTION_ID]) == [7, 300]
        pub5(pub, "a/b/c", b"y")
        assert props_of(next_publish(c))[P.SUBSCRIPTION_ID] == [7]


def test_no_local_subscription_gives_no_identifier_to_the_publishers_copy():
    # [MQTT-3.8.3-3] [MQTT-3.3.4-4] (5.0): a no local subscription delivers
    # nothing of the session's own, so its identifier is not on the copy
    # the session's plain subscription brings it; another publisher's
    # message carries both
    with running() as b, Raw(b) as c, Raw(b) as pub:
        connect5(c, "self")
        sub5(c, 1, [("a/#", 0x04)], {P.SUBSCRIPTION_ID: 1})
        sub5(c, 2, [("a/b", 0)], {P.SUBSCRIPTION_ID: 2})
        pub5(c, "a/b", b"own")
        m = next_publish(c)
        assert (bytes(m.payload), props_of(m)[P.SUBSCRIPTION_ID]) == (b"own", [2])
        connect5(pub, "p")
        pub5(pub, "a/b", b"other")
        m = next_publish(c)
        assert bytes(m.payload) == b"other" and sorted(props_of(m)[P.SUBSCRIPTION_ID]) == [1, 2]


def test_subscription_identifier_of_the_subscription_each_copy_came_by():
    # [MQTT-3.3.4-5] (5.0): a session with a plain and a shared
    # subscription on the topic gets a copy for each; each carries the
    # identifier of its own subscription, and the copy another member of
    # the group gets carries none of this session's
    with running() as b, Raw(b) as c, Raw(b) as other, Raw(b) as pub:
        connect5(c, "ids")
        sub5(c, 1, [("t/#", 1)], {P.SUBSCRIPTION_ID: 1})
        sub5(c, 2, [("$share/g/t/#", 1)], {P.SUBSCRIPTION_ID: 2})
        connect5(other, "o")
        sub5(other, 1, [("$share/g/t/#", 1)])
        connect5(pub, "p")
        pub5(pub, "t/x", b"a", 1, 1)
        pub5(pub, "t/x", b"b", 1, 2)
        got = []
        for _ in range(3):
            m = next_publish(c)
            got.append((bytes(m.payload), props_of(m)[P.SUBSCRIPTION_ID]))
            c.put(encode_ack, PUBACK, m.pid)
        assert c.nothing()
        assert sorted(got) == [(b"a", [1]), (b"a", [2]), (b"b", [1])] or \
            sorted(got) == [(b"a", [1]), (b"b", [1]), (b"b", [2])], got
        m = next_publish(other)
        assert P.SUBSCRIPTION_ID not in props_of(m)


def test_retained_message_carries_the_identifier_of_its_subscribe():
    # [MQTT-3.3.4-3] (5.0): a retained message sent because of a SUBSCRIBE
    # [MQTT-3.3.1-6] carries that SUBSCRIBE's subscription identifier, as a
    # routed one does, after its own properties; none without one
    with running() as b, Raw(b) as p5, Raw(b) as p4, Raw(b) as c:
        connect5(p5, "p5")
        pub5(p5, "sid/a", b"a", 1, 1, retain=True, props={P.CONTENT_TYPE: "c"})
        p5.expect(PUBACK, 1)
        p4.connect("p4")
        p4.publish("sid/b", b"b", 1, 1, retain=True)  # (no properties at all)
        p4.expect(PUBACK, 1)
        connect5(c, "s")
        sub5(c, 1, [("sid/+", 1)], {P.SUBSCRIPTION_ID: 42})
        got = {}
        for _ in range(2):
            m = next_publish(c)
            assert m.retain
            got[bytes(m.topic)] = props_of(m)
            c.put(encode_ack, PUBACK, m.pid)
        assert got == {b"sid/a": {P.CONTENT_TYPE: "c", P.SUBSCRIPTION_ID: [42]},
                       b"sid/b": {P.SUBSCRIPTION_ID: [42]}}, got
        sub5(c, 2, [("sid/a", 0)])
        m = next_publish(c)
        assert m.retain and props_of(m) == {P.CONTENT_TYPE: "c"}


def test_suback_has_a_code_per_filter_and_delivery_takes_the_lower_qos():
    # [MQTT-3.8.4-6] [MQTT-3.8.4-7] (5.0): a reason code per filter, in
    # order, the QoS granted or a failure (0x8F: a shared filter without
    # a name); [MQTT-3.8.4-8]: a message goes at the lower of its QoS and
    # the one granted
    with running() as b, Raw(b) as c, Raw(b) as pub:
        connect5(c, "s")
        assert sub5(c, 1, [("q/0", 0), ("q/1", 1), ("$share//x", 1), ("q/2", 2)]) == \
            b"\x00\x01\x8f\x02"
        connect5(pub, "p")
        for pid, (t, q) in enumerate((("q/0", 2), ("q/1", 2), ("q/2", 2), ("q/2", 1)), 1):
            pub5(pub, t, b"x", q, pid)
        got = []
        for _ in range(4):
            m = next_publish(c)
            got.append((bytes(m.topic), m.qos))
            if m.qos:
                c.put(encode_ack, PUBACK if m.qos == 1 else PUBREC, m.pid)
        assert got == [(b"q/0", 0), (b"q/1", 1), (b"q/2", 2), (b"q/2", 1)]


def _silent(c, timeout=0.5):
    # True when nothing at all arrives (a PUBREL neither)
    try:
        c.recv(timeout)
    except Timeout:
        return True
    return False


def test_publish_refused_by_the_client_is_not_sent_again():
    # [MQTT-4.4.0-2]: a PUBLISH the client answers with PUBACK / PUBREC
    # 0x80 or more is acknowledged: no PUBREL, no resend on the session's
    # next connection; [MQTT-4.8.2-6]: a shared copy so refused goes to no
    # other member of the group
    sp = {P.SESSION_EXPIRY: 600}
    with running() as b, Raw(b) as pub:
        connect5(pub, "p")
        with Raw(b) as s:
            connect5(s, "s", clean=False, props=sp)
            sub5(s, 1, [("x/#", 2)])
            pub5(pub, "x/1", b"1", 1, 1)
            pub5(pub, "x/2", b"2", 2, 2)
            for _ in range(2):
                m = next_publish(s)
                s.put(encode_ack, PUBACK if m.qos == 1 else PUBREC, m.pid, 0x80, 5)
            assert _silent(s)
        with Raw(b) as s:
            assert connect5(s, "s", clean=False, props=sp).session_present
            assert _silent(s)
    with running() as b, Raw(b) as m1, Raw(b) as m2, Raw(b) as pub:
        for m in (m1, m2):
            connect5(m, "m%d" % (m is m2))
            sub5(m, 1, [("$share/g/s/#", 1)])
        connect5(pub, "p")
        pub5(pub, "s/x", b"1", 1, 1)
        got = []
        for m in (m1, m2):
            try:
                got.append((m, m.recv(0.5)))
            except Timeout:
                pass
        assert len(got) == 1, got  # the group's turn: one member
        m, p = got[0]
        assert bytes(p.topic) == b"s/x"
        m.put(encode_ack, PUBACK, p.pid, 0x80, 5)  # refused: not sent to the other
        assert _silent(m1) and _silent(m2)


def test_client_receive_maximum_honoured():
    # [MQTT-3.3.4-9]: no more unacknowledged QoS 1/2 PUBLISHes than the
    # client's receive maximum; the next goes after an ack
    with running() as b, Raw(b) as sub, Raw(b) as pub:
        connect5(sub, "s", props={P.RECEIVE_MAXIMUM: 1})
        sub5(sub, 1, [("t", 1)])
        connect5(pub, "p")
        pub5(pub, "t", b"1", 1, 1)
        pub5(pub, "t", b"2", 1, 2)
        m = next_publish(sub)
        assert bytes(m.payload) == b"1"
        assert sub.nothing()
        sub.simple(PINGREQ)  # quota 0: other packets still answered [MQTT-3.3.4-10] [MQTT-4.9.0-3]
        sub.expect(PINGRESP)
        sub.put(encode_ack, PUBACK, m.pid)
        assert bytes(next_publish(sub).payload) == b"2"


def test_broker_receive_maximum_enforced_0x93():
    # [MQTT-3.3.4-7] 4.9: more QoS 2 in flight than CONNACK's receive
    # maximum: DISCONNECT 0x93
    with running(max_qos2_in=2) as b, Raw(b) as c:
        connect5(c, "greedy")
        for pid in (1, 2, 3):
            pub5(c, "t", b"x", 2, pid)
        c.expect(PUBREC, 1)
        c.expect(PUBREC, 2)
        assert c.expect(DISCONNECT).rc == 0x93


def test_client_maximum_packet_size_honoured():
    # [MQTT-3.1.2-25]: a message larger than the client takes is dropped
    # for it (not sent), the next one that fits is
    with running() as b, Raw(b) as sub, Raw(b) as pub:
        connect5(sub, "small", props={P.MAXIMUM_PACKET_SIZE: 64})
        sub5(sub, 1, [("t", 1)])
        connect5(pub, "p")
        pub5(pub, "t", b"x" * 100, 1, 1)
        pub5(pub, "t", b"fits", 1, 2)
        m = next_publish(sub)
        assert bytes(m.payload) == b"fits"
        assert b.dropped == 1


def test_suback_or_unsuback_over_the_clients_maximum_packet_size_closes_0x95():
    # [MQTT-3.1.2-24] (5.0): the server sends no packet over the client's
    # Maximum Packet Size, and a SUBACK / UNSUBACK holds a reason code per
    # filter [MQTT-3.8.4-6] [MQTT-3.11.3-1] with nothing to leave out: one
    # that would be larger closes the connection with DISCONNECT 0x95
    # (Packet too large) before any filter is taken (mosquitto 2.0.11
    # sends it all the same). One of exactly the maximum is sent.
    small = {P.SESSION_EXPIRY: 60, P.MAXIMUM_PACKET_SIZE: 20}
    a = ["a/%d" % k for k in range(16)]
    with running() as b, Raw(b) as pub:
        connect5(pub, "p")
        with Raw(b) as c:
            connect5(c, "s", clean=False, props=small)
            assert len(sub5(c, 1, [(f, 0) for f in a[:15]])) == 15  # a SUBACK of 20 bytes
            c.put(encode_subscribe, 2, [("b/%d" % k, 0) for k in range(16)], 0, 5)
            assert c.expect(DISCONNECT).rc == 0x95
            assert c.closed()
        with Raw(b) as c:
            connect5(c, "s", clean=False, props=small)
            c.put(encode_unsubscribe, 3, a, 5)
            assert c.expect(DISCONNECT).rc == 0x95
            assert c.closed()
        with Raw(b) as c:
            assert connect5(c, "s", clean=False, props=small).session_present
            pub5(pub, "b/0", b"no")
            pub5(pub, "a/0", b"yes")  # (within the 20 bytes)
            assert bytes(next_publish(c).payload) == b"yes"
            c.put(encode_unsubscribe, 4, a[:15], 5)
            assert len(c.expect(UNSUBACK, 4).payload) == 15


def test_message_expiry_decremented_and_expired_dropped_from_the_queue():
    # [MQTT-3.3.2-5] [MQTT-3.3.2-6] (5.0): a queued message goes out with
    # what is left of its interval, or not at all once it has passed
    with running() as b:
        leave(b, "off", 600, [("e/#", 1)])
        with Raw(b) as pub:
            connect5(pub, "p")
            pub5(pub, "e/short", b"s", 1, 1, props={P.MESSAGE_EXPIRY: 2})
            pub5(pub, "e/long", b"l", 1, 2, props={P.MESSAGE_EXPIRY: 100})
            pub.expect(PUBACK, 1)
            pub.expect(PUBACK, 2)
        advance(5000)
        with Raw(b) as s:
            connect5(s, "off", clean=False, props={P.SESSION_EXPIRY: 600})
            m = next_publish(s)
            assert bytes(m.topic) == b"e/long"
            left = props_of(m)[P.MESSAGE_EXPIRY]
            assert 94 <= left <= 96, left
            s.put(encode_ack, PUBACK, m.pid)
            assert s.nothing()
        assert b.dropped == 1


def test_message_in_flight_resent_with_what_is_left_of_its_expiry():
    # [MQTT-3.3.2-6] (5.0): a QoS 1/2 message sent and not acknowledged
    # goes again on the session's next connection [MQTT-4.4.0-1] with what
    # is left of its interval; once that has passed it goes again all the
    # same, with 0: its onward delivery started [MQTT-3.3.2-5]
    # [MQTT-4.3.3-7] (5.0) (mosquitto drops it). a and b go at once; c
    # and d wait (Receive Maximum 2), and c goes once a is acknowledged,
    # into the ring slot a had.
    sp = {P.SESSION_EXPIRY: 600, P.RECEIVE_MAXIMUM: 2}
    with running() as b, Raw(b) as pub:
        connect5(pub, "p")
        with Raw(b) as s:
            connect5(s, "s", clean=False, props=sp)
            sub5(s, 1, [("x/#", 2)])
            pub5(pub, "x/a", b"a", 1, 1, props={P.MESSAGE_EXPIRY: 50})
            pub5(pub, "x/b", b"b", 2, 2, props={P.MESSAGE_EXPIRY: 3})
            t0 = clock()  # c's interval counts from when the broker took it
            pub5(pub, "x/c", b"c", 1, 3, props={P.MESSAGE_EXPIRY: 100})
            pub5(pub, "x/d", b"d", 1, 4)
            got = [next_publish(s) for _ in range(2)]
            assert [props_of(m)[P.MESSAGE_EXPIRY] for m in got] == [50, 3]
            s.put(encode_ack, PUBACK, got[0].pid)
            m = next_publish(s)  # b and c in flight, neither acknowledged
            assert bytes(m.topic) == b"x/c" and props_of(m)[P.MESSAGE_EXPIRY] == 100
        advance(4500)
        with Raw(b) as s:
            assert connect5(s, "s", clean=False, props=sp).session_present
            m = next_publish(s)
            assert (bytes(m.topic), m.qos, m.dup) == (b"x/b", 2, True)
            assert props_of(m)[P.MESSAGE_EXPIRY] == 0
            mb = m
            m = next_publish(s)
            waited = ticks_diff(clock(), t0)  # 4.5 s; over sockets on a busy machine, more
            assert (bytes(m.topic), m.dup) == (b"x/c", True)
            # what is left: at most 100 less the whole seconds it waited, rounded up
            assert 100 - (waited + 999) // 1000 <= props_of(m)[P.MESSAGE_EXPIRY] <= 96, (
                props_of(m), waited)
            s.put(encode_ack, PUBACK, m.pid)
            s.put(encode_ack, PUBREC, mb.pid)
            s.expect(PUBREL, mb.pid)
            s.put(encode_ack, PUBCOMP, mb.pid)
            m = next_publish(s)
            assert (bytes(m.topic), m.dup) == (b"x/d", False)
            assert P.MESSAGE_EXPIRY not in props_of(m)
            s.put(encode_ack, PUBACK, m.pid)
            assert s.nothing()
        assert b.dropped == 0


def test_qos1_in_flight_past_its_expiry_is_sent_again():
    # [MQTT-3.3.2-5] [MQTT-4.4.0-1] (5.0): a QoS 1 copy written to the
    # client and not acknowledged is resent on the next connection even
    # when its interval has passed meanwhile, with 0 left
    sp = {P.SESSION_EXPIRY: 600}
    with running() as b, Raw(b) as pub:
        connect5(pub, "p")
        with Raw(b) as s:
            connect5(s, "s", clean=False, props=sp)
            sub5(s, 1, [("x/#", 1)])
            pub5(pub, "x/a", b"a", 1, 1, props={P.MESSAGE_EXPIRY: 1})
            m = next_publish(s)
            assert props_of(m)[P.MESSAGE_EXPIRY] == 1
        advance(2500)
        with Raw(b) as s:
            assert connect5(s, "s", clean=False, props=sp).session_present
            m = next_publish(s)
            assert (bytes(m.topic), m.dup, props_of(m)[P.MESSAGE_EXPIRY]) == (b"x/a", True, 0)
            s.put(encode_ack, PUBACK, m.pid)
            assert s.nothing()
        assert b.dropped == 0


def test_aliased_message_within_the_maximum_packet_size_is_sent():
    # [MQTT-3.1.2-25]: only a packet too large to send is dropped. Once an
    # alias stands for its topic, a message over the client's maximum
    # packet size with the whole topic but within it with the alias is
    # sent, at QoS 0 and 1. On the next connection aliases start afresh
    # [MQTT-3.3.2-7]: the QoS 1 one would go again whole, too large: dropped
    # as if sent.
    t = "m/" + "x" * 18  # 20 bytes: whole, a 20-byte payload makes 45 and 47 bytes
    cp = {P.MAXIMUM_PACKET_SIZE: 40, P.TOPIC_ALIAS_MAXIMUM: 3, P.SESSION_EXPIRY: 60}
    with running() as b, Raw(b) as pub:
        connect5(pub, "p")
        with Raw(b) as s:
            connect5(s, "s", clean=False, props=cp)
            sub5(s, 1, [("m/#", 1)])
            pub5(pub, t, b"a")
            m = next_publish(s)
            assert bytes(m.topic) == t.encode() and props_of(m)[P.TOPIC_ALIAS] == 1
            pub5(pub, t, b"0" * 20)
            pub5(pub, t, b"1" * 20, 1, 1)
            for q in (0, 1):
                m = next_publish(s)
                assert (bytes(m.topic), bytes(m.payload), m.qos) == (b"", b"%d" % q * 20, q)
                assert props_of(m)[P.TOPIC_ALIAS] == 1
            assert b.dropped == 0
        with Raw(b) as s:
            assert connect5(s, "s", clean=False, props=cp).session_present
            assert s.nothing()
        assert b.dropped == 1


def test_aliased_message_within_the_maximum_packet_size_is_sent_when_queued():
    # [MQTT-3.1.2-25] as above, for messages that wait: the client's
    # Receive Maximum (1) is in use, so a QoS 1 message and the QoS 0 one
    # behind it (their order [MQTT-4.6.0-6]) are queued; each goes, with
    # the alias, once the window frees. One still queued when the client
    # goes is sent on the next connection, whose aliases start afresh
    # [MQTT-3.3.2-7]: whole, too large, so dropped as if sent.
    t = "m/" + "x" * 18  # as above: 45 and 47 bytes whole, within 40 with the alias
    cp = {P.MAXIMUM_PACKET_SIZE: 40, P.TOPIC_ALIAS_MAXIMUM: 3, P.RECEIVE_MAXIMUM: 1,
          P.SESSION_EXPIRY: 60}
    with running() as b, Raw(b) as pub:
        connect5(pub, "p")
        with Raw(b) as s:
            connect5(s, "s", clean=False, props=cp)
            sub5(s, 1, [("m/#", 1)])
            pub5(pub, t, b"a", 1, 1)
            pub.expect(PUBACK, 1)
            m = next_publish(s)  # sets alias 1; the window is full
            assert props_of(m)[P.TOPIC_ALIAS] == 1
            pub5(pub, t, b"1" * 20, 1, 2)
            pub5(pub, t, b"0" * 20)
            pub.expect(PUBACK, 2)
            assert s.nothing()
            s.put(encode_ack, PUBACK, m.pid)
            for q in (1, 0):
                m = next_publish(s)
                assert (bytes(m.topic), bytes(m.payload), m.qos) == (b"", b"%d" % q * 20, q)
                assert props_of(m)[P.TOPIC_ALIAS] == 1
                if q:
                    s.put(encode_ack, PUBACK, m.pid)
            assert b.dropped == 0
            pub5(pub, t, b"b", 1, 3)
            pub.expect(PUBACK, 3)
            m = next_publish(s)  # the window is full again
            pub5(pub, t, b"2" * 20, 1, 4)  # queued while the alias stands
            pub.expect(PUBACK, 4)
            assert b.dropped == 0
        with Raw(b) as s:
            assert connect5(s, "s", clean=False, props=cp).session_present
            m = next_publish(s)  # the one in flight, again: it fits whole
            assert (bytes(m.topic), bytes(m.payload), m.dup) == (t.encode(), b"b", 1)
            s.put(encode_ack, PUBACK, m.pid)
            assert s.nothing()
        assert b.dropped == 1


def test_message_expiry_of_a_retained_message():
    # [MQTT-3.3.2-5] (5.0): a retained message whose interval has passed
    # is no longer sent, and is gone
    with running() as b, Raw(b) as pub:
        connect5(pub, "p")
        pub5(pub, "r/a", b"a", retain=True, props={P.MESSAGE_EXPIRY: 2})
        pub5(pub, "r/b", b"b", retain=True, props={P.MESSAGE_EXPIRY: 50})
        advance(3000)
        with Raw(b) as s:
            connect5(s, "s")
            sub5(s, 1, [("r/#", 0)])
            m = next_publish(s)
            assert bytes(m.topic) == b"r/b"
            assert 46 <= props_of(m)[P.MESSAGE_EXPIRY] <= 48
            assert s.nothing()
        assert b"r/a" not in b.retained


def test_no_matching_subscribers_acknowledged_with_0x10():
    # PUBACK and PUBREC reason code tables (3.4.2.1, 3.5.2.1): 0x10 "no
    # matching subscribers" when the message is accepted but nobody gets
    # it; 0x00 once a subscription matches
    with running() as b, Raw(b) as pub, Raw(b) as sub:
        connect5(pub, "p")
        pub5(pub, "nobody/here", b"x", 1, 1)
        assert pub.expect(PUBACK, 1).rc == 0x10
        pub5(pub, "nobody/here", b"x", 2, 2)
        assert pub.expect(PUBREC, 2).rc == 0x10
        pub.put(encode_ack, PUBREL, 2)
        assert pub.expect(PUBCOMP, 2).rc == 0
        connect5(sub, "s")
        sub5(sub, 1, [("nobody/#", 1)])
        pub5(pub, "nobody/here", b"y", 1, 3)
        assert pub.expect(PUBACK, 3).rc == 0
        pub5(pub, "nobody/here", b"y", 2, 4)
        assert pub.expect(PUBREC, 4).rc == 0


def test_no_matching_subscribers_is_not_said_at_311():
    # 3.1.1 has no reason codes: its PUBACK stays 2 bytes long
    with running() as b, Raw(b) as pub:
        pub.connect("p")
        pub.publish("nobody", b"x", 1, 1)
        p = pub.expect(PUBACK, 1)
        assert p.end == 4 and bytes(p.buf) == b"\x40\x02\x00\x01"


def test_qos2_sent_again_before_pubrel_is_routed_once():
    # [MQTT-4.3.3-2] at MQTT 5 (a decoded PUBLISH, Core._packet's way): a
    # QoS 2 PUBLISH sent again (DUP) before PUBREL gets PUBREC again and
    # reaches the subscriber once
    with running() as b, Raw(b) as sub, Raw(b) as pub:
        connect5(sub, "s")
        sub5(sub, 1, [("t", 2)])
        connect5(pub, "p")
        pub5(pub, "t", b"once", 2, 9)
        assert pub.expect(PUBREC, 9).rc == 0
        pub.put(encode_publish, "t", b"once", 2, 9, False, True, 5, None)
        assert pub.expect(PUBREC, 9).rc == 0
        pub.put(encode_ack, PUBREL, 9)
        assert pub.expect(PUBCOMP, 9).rc == 0
        assert bytes(next_publish(sub).payload) == b"once"
        assert sub.nothing()


def test_pubrel_for_an_unknown_id_gets_pubcomp_0x92():
    # PUBCOMP reason codes (3.7.2.1): 0x92 packet identifier not found, for
    # a PUBREL whose id the broker does not hold
    with running() as b, Raw(b) as c:
        connect5(c, "c")
        c.put(encode_ack, PUBREL, 77)
        assert c.expect(PUBCOMP, 77).rc == 0x92


def test_broker_assigns_topic_aliases_to_a_client_that_allows_them():
    # 3.3.2.3.4: a client's Topic Alias Maximum lets the broker send an
    # alias for a topic it repeats: the first PUBLISH carries topic and
    # alias, the next ones the alias and an empty topic, at every QoS;
    # never an alias above the client's maximum [MQTT-3.3.2-11] [MQTT-3.1.2-26] nor 0
    # [MQTT-3.3.2-8]; a topic beyond the aliases goes whole
    with running(max_aliases=8) as b, Raw(b) as sub, Raw(b) as pub:
        connect5(sub, "s", props={P.TOPIC_ALIAS_MAXIMUM: 2})
        sub5(sub, 1, [("a/#", 2)])
        connect5(pub, "p")
        sent = [("a/one", 0), ("a/one", 1), ("a/one", 2), ("a/two", 0), ("a/three", 1),
                ("a/two", 1), ("a/three", 0)]
        pid = 1
        for t, q in sent:
            pub5(pub, t, t.encode(), q, pid if q else 0, props={P.CONTENT_TYPE: "c"})
            pid += 1
        got = []
        for _ in sent:
            m = next_publish(sub)
            d = props_of(m)
            assert d[P.CONTENT_TYPE] == "c"
            got.append((bytes(m.topic), d.get(P.TOPIC_ALIAS), bytes(m.payload)))
            if m.qos == 1:
                sub.put(encode_ack, PUBACK, m.pid)
            elif m.qos == 2:
                sub.put(encode_ack, PUBREC, m.pid)
        assert got == [(b"a/one", 1, b"a/one"), (b"", 1, b"a/one"), (b"", 1, b"a/one"),
                       (b"a/two", 2, b"a/two"), (b"a/three", None, b"a/three"),
                       (b"", 2, b"a/two"), (b"a/three", None, b"a/three")]


def test_broker_topic_aliases_start_afresh_on_a_new_connection():
    # [MQTT-3.3.2-7]: alias mappings end with the network connection: on
    # the next one the topic comes again with its alias; a message resent
    # from the session goes whole, with its topic and no alias
    with running() as b, Raw(b) as pub:
        connect5(pub, "p")
        props = {P.TOPIC_ALIAS_MAXIMUM: 4, P.SESSION_EXPIRY: 60}
        with Raw(b) as sub:
            connect5(sub, "s", clean=False, props=props)
            sub5(sub, 1, [("t", 1)])
            for k in range(2):
                pub5(pub, "t", b"%d" % k, 1, k + 1)
                m = next_publish(sub)
                assert props_of(m)[P.TOPIC_ALIAS] == 1
                assert bytes(m.topic) == (b"t" if not k else b"")
            sub.put(encode_ack, PUBACK, 1)  # the second stays unacknowledged
        with Raw(b) as sub:
            assert connect5(sub, "s", clean=False, props=props).session_present
            m = next_publish(sub)
            assert m.dup and bytes(m.topic) == b"t" and bytes(m.payload) == b"1"
            assert P.TOPIC_ALIAS not in props_of(m)
            sub.put(encode_ack, PUBACK, m.pid)
            for k in range(2):
                pub5(pub, "t", b"x", 1, k + 3)
                m = next_publish(sub)
                assert props_of(m)[P.TOPIC_ALIAS] == 1
                assert bytes(m.topic) == (b"t" if not k else b"")
                sub.put(encode_ack, PUBACK, m.pid)


def test_no_broker_topic_aliases_without_the_clients_maximum():
    # a client that gives no Topic Alias Maximum gets none [MQTT-3.3.2-11]
    with running() as b, Raw(b) as sub, Raw(b) as pub:
        connect5(sub, "s")
        sub5(sub, 1, [("t", 0)])
        connect5(pub, "p")
        for _ in range(2):
            pub5(pub, "t", b"x")
            m = next_publish(sub)
            assert bytes(m.topic) == b"t" and P.TOPIC_ALIAS not in props_of(m)


def test_full_queue_refuses_qos1_and_qos2_with_0x97():
    # PUBACK and PUBREC reason code tables (3.4.2.1, 3.5.2.1): 0x97 "quota
    # exceeded" when a subscriber's queue is full of QoS 1/2 messages: the
    # message is neither routed nor retained, the connection stays, and a
    # QoS 0 message is dropped as before. A PUBREC >= 0x80 ends the flow
    # [MQTT-4.3.3-9 (5.0)]: the packet id serves a new message.
    with running(max_queued=2) as b:
        leave(b, "off", 600, [("t/#", 2)])
        with Raw(b) as pub:
            connect5(pub, "p")
            pub5(pub, "t/a", b"A", 1, 1)
            assert pub.expect(PUBACK, 1).rc == 0
            pub5(pub, "t/b", b"B", 2, 2)
            assert pub.expect(PUBREC, 2).rc == 0
            pub.put(encode_ack, PUBREL, 2)
            pub.expect(PUBCOMP, 2)
            pub5(pub, "t/c", b"C", 1, 3, retain=True)
            assert pub.expect(PUBACK, 3).rc == 0x97
            pub5(pub, "t/d", b"D", 2, 4)
            assert pub.expect(PUBREC, 4).rc == 0x97
            assert b.queue_full == 2 and b.dropped == 0
            assert b"t/c" not in b.retained
            with Raw(b) as s:
                connect5(s, "off", clean=False, props={P.SESSION_EXPIRY: 600})
                for want in (b"A", b"B"):
                    m = next_publish(s)
                    assert bytes(m.payload) == want
                    s.put(encode_ack, PUBACK if m.qos == 1 else PUBREC, m.pid)
                    if m.qos == 2:
                        s.expect(PUBREL, m.pid)
                        s.put(encode_ack, PUBCOMP, m.pid)
                pub5(pub, "t/d", b"D", 2, 4)
                assert pub.expect(PUBREC, 4).rc == 0
                assert bytes(next_publish(s).payload) == b"D"


def test_full_queue_checked_on_the_shared_member_that_gets_it():
    # [MQTT-4.8.2-3 (5.0)]: a connected member of the group gets the message,
    # so an offline member's full queue refuses nothing
    with running(max_queued=1) as b:
        leave(b, "m1", 600, [("$share/g/s/#", 1)])
        with Raw(b) as pub, Raw(b) as m2:
            connect5(pub, "p")
            pub5(pub, "s/x", b"0", 1, 1)  # the only member: m1 queues it
            assert pub.expect(PUBACK, 1).rc == 0
            pub5(pub, "s/x", b"1", 1, 2)
            assert pub.expect(PUBACK, 2).rc == 0x97
            connect5(m2, "m2")
            assert sub5(m2, 1, [("$share/g/s/#", 1)]) == b"\x01"
            pub5(pub, "s/x", b"2", 1, 3)
            assert pub.expect(PUBACK, 3).rc == 0
            assert bytes(next_publish(m2).payload) == b"2"
            assert b.queue_full == 1


def test_max_retained_refuses_qos1_and_qos2_with_0x97():
    # [MQTT-3.3.1-5]: past max_retained a retained QoS 1/2 message for a
    # new topic would be acknowledged and not kept: PUBACK / PUBREC 0x97
    # "quota exceeded" (3.4.2.1, 3.5.2.1), as for mem_budget, counted in
    # messages/refused/max_retained; nothing is routed, the connection stays
    with running(max_retained=2) as b, Raw(b) as sub, Raw(b) as pub:
        connect5(sub, "s")
        sub5(sub, 1, [("r/#", 1)])
        connect5(pub, "p")
        for i in range(2):
            pub5(pub, "r/%d" % i, b"%d" % i, 1, i + 1, retain=True)
            assert pub.expect(PUBACK, i + 1).rc == 0
        pub5(pub, "r/2", b"two", 1, 3, retain=True)
        assert pub.expect(PUBACK, 3).rc == 0x97
        pub5(pub, "r/3", b"three", 2, 4, retain=True)
        assert pub.expect(PUBREC, 4).rc == 0x97
        pub5(pub, "r/1", b"new", 1, 5, retain=True)  # replaces a kept one
        assert pub.expect(PUBACK, 5).rc == 0
        got = [bytes(next_publish(sub).payload) for _ in range(3)]
        assert got == [b"0", b"1", b"new"]
        assert sub.nothing()
        assert b.refused_retained == 2 and b.refused_mem == 0
        assert sorted(b.retained) == [b"r/0", b"r/1"]


def test_mem_budget_refuses_qos1_with_0x97():
    # the broker's mem_budget spent: PUBACK 0x97 "quota exceeded" (3.4.2.1),
    # counted in messages/refused/mem_budget; the connection stays
    with running(max_queued_bytes=0, mem_budget=1500) as b:
        leave(b, "off", 600, [("t/#", 1)])
        with Raw(b) as pub:
            connect5(pub, "p")
            pub5(pub, "t/a", b"A" * 1000, 1, 1)
            assert pub.expect(PUBACK, 1).rc == 0
            pub5(pub, "t/b", b"B" * 1000, 1, 2)
            assert pub.expect(PUBACK, 2).rc == 0x97
            assert b.refused_mem == 1 and b.queue_full == 0
            pub5(pub, "u", b"C", 1, 3)  # nobody would hold it: not refused
            assert pub.expect(PUBACK, 3).rc == 0x10
