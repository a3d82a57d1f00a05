# A stricter MQTT 3.1.1 (and 3.1): acknowledgements that do not fit their
# flow, control characters in names, a limit on topic levels, MQTT 3.1's
# own rules. One test per rule, cited [MQTT-x.x.x-y]. Runs over pipes
# (pytest, and tests/mp/testrunner.py under MicroPython) and over sockets
# (tests/test_broker.py).
from broker_harness import running, Raw, pub_sub, connect_bytes, string, frame
from umqtt3.codec import PUBACK, PUBREC, PUBREL, PUBCOMP, CONNACK, PUBLISH


def _qos_message(b, qos):
    # a subscriber holding one message of that QoS, not acknowledged yet
    sub, pub = pub_sub(b, filters=(("t", 2),))
    pub.publish("t", b"m", qos, pid=1)
    p = sub.recv()
    assert p.type == PUBLISH and p.qos == qos
    return sub, pub, p.pid


def _out_of_flow(qos, acks):
    # the subscriber answers its message with acks: the last is out of
    # the flow of that id, a protocol error that closes [MQTT-4.8.0-1]
    with running() as b:
        sub, pub, pid = _qos_message(b, qos)
        for t in acks:
            sub.ack(t, pid)
        assert sub.closed()


def test_pubrec_for_a_qos1_message_closes():
    # [MQTT-4.3.2-*]: a QoS 1 flow has no PUBREC
    _out_of_flow(1, (PUBREC,))


def test_puback_for_a_qos2_message_closes():
    # [MQTT-4.3.3-*]: a QoS 2 flow has no PUBACK
    _out_of_flow(2, (PUBACK,))


def test_pubcomp_before_pubrel_closes():
    # [MQTT-4.3.3-*]: PUBCOMP answers PUBREL, never comes before it
    _out_of_flow(2, (PUBCOMP,))


def test_ack_after_the_flow_ended_closes():
    # a second PUBACK: the flow of that id is over
    _out_of_flow(1, (PUBACK, PUBACK))


def test_qos2_flow_in_order_still_works():
    with running() as b:
        sub, pub, pid = _qos_message(b, 2)
        sub.ack(PUBREC, pid)
        sub.expect(PUBREL, pid)
        sub.ack(PUBREC, pid)  # again: PUBREL again
        sub.expect(PUBREL, pid)
        sub.ack(PUBCOMP, pid)
        assert sub.nothing()


def test_control_character_in_topic_closes():
    # [MQTT-1.5.3-2] lets a receiver close on U+0001-U+001F, U+007F-U+009F
    for t in (b"a\x01b", b"a\x7fb", b"a\xc2\x85b"):
        with running() as b, Raw(b) as c:
            c.connect("cc")
            c.send(frame(0x30, string(t) + b"x"))
            assert c.closed()


def test_control_character_in_filter_closes():
    with running() as b, Raw(b) as c:
        c.connect("cf")
        c.send(frame(0x82, b"\x00\x01" + string(b"a/\x1f") + b"\x00"))
        assert c.closed()


def test_control_character_in_client_id_user_will_closes():
    for kw in ({"cid": "a\tb"}, {"cid": "u", "user": "x\x02"},
               {"cid": "w", "will_topic": "w/\x10", "will_msg": b"m"}):
        with running() as b, Raw(b) as c:
            c.send(connect_bytes(kw.pop("cid"), **kw))
            assert c.recv() is None  # closed, no CONNACK


def test_topic_levels_limit():
    # max_levels: a name or filter with more levels closes the connection
    with running(max_levels=3) as b:
        with Raw(b) as c:
            c.connect("ok")
            assert c.subscribe(1, [("a/b/c", 0)]) == b"\x00"
            c.publish("a/b/c", b"x")
            assert c.messages(1)[0][0] == b"a/b/c"
        with Raw(b) as c:
            c.connect("deep")
            c.publish("a/b/c/d", b"x")
            assert c.closed()
        with Raw(b) as c:
            c.connect("deepf")
            c.send(frame(0x82, b"\x00\x01" + string(b"a/b/c/#") + b"\x00"))
            assert c.closed()


def test_mqtt31_client_id_over_23_characters_gets_connack_2():
    # MQTT 3.1 (MQIsdp), 3.1: the client id is 1 to 23 characters
    with running() as b, Raw(b) as c:
        p = c.connect("x" * 24, level=3)
        assert p.type == CONNACK and p.rc == 2


def test_mqtt31_connect_reserved_bit_is_unused():
    # MQTT 3.1 marks bit 0 of the connect flags unused, not reserved
    with running() as b, Raw(b) as c:
        raw = connect_bytes("old", level=3)
        raw[9 + 2] |= 1  # "MQIsdp" is 2 bytes longer than "MQTT"
        c.level = 3
        c.send(raw)
        assert c.expect(CONNACK).rc == 0
