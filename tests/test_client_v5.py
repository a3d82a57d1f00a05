"""MQTT 5 for the application, against mosquitto 2.0 (which speaks MQTT 5)
and paho-mqtt's MQTT 5 client: properties both ways, reason codes,
subscription options, topic aliases, the broker's limits, session expiry,
will properties and delay, assigned client ids, request/response."""
import os
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))

from umqtt3.codec import MQTTError  # noqa: E402
from umqtt3.flow import Busy  # noqa: E402
from umqtt3 import client5, props  # noqa: E402
import paho_peer  # noqa: E402  (tests/paho_peer.py)

pytestmark = pytest.mark.interop
HOST = "127.0.0.1"


class Paho:
    """A paho-mqtt MQTT 5 client with its network thread; keeps what it gets."""

    def __init__(self, port, cid, sub=None, will=None):
        import paho.mqtt.client as mqtt
        from paho.mqtt.properties import Properties
        from paho.mqtt.packettypes import PacketTypes
        self.mqtt = mqtt
        self.Properties = Properties
        self.PacketTypes = PacketTypes
        self.msgs = []
        self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=cid,
                             protocol=mqtt.MQTTv5)
        self.c.on_message = lambda c, u, m: self.msgs.append(m)
        subscribed = threading.Event()
        self.c.on_subscribe = lambda *a: subscribed.set()
        if will:
            self.c.will_set(*will)
        self.c.connect(HOST, port)
        self.c.loop_start()
        if sub:
            r = self.c.subscribe(sub, qos=1)
            assert r[0] == 0
            # a message published before the broker has the subscription
            # reaches no one: its SUBACK first
            assert subscribed.wait(10), "no SUBACK"

    def wait(self, n, timeout=5):
        end = time.monotonic() + timeout
        while len(self.msgs) < n and time.monotonic() < end:
            time.sleep(0.02)
        return self.msgs

    def publish(self, topic, payload, qos=1, **pr):
        p = self.Properties(self.PacketTypes.PUBLISH)
        for k, v in pr.items():
            setattr(p, k, v)
        self.c.publish(topic, payload, qos=qos, properties=p).wait_for_publish(5)

    def close(self):
        self.c.disconnect()
        self.c.loop_stop()


def _poll_until(c, cond, timeout=5):
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        c.poll(10)


def test_publish_properties_reach_paho(broker, v5):
    # payload format, message expiry, content type, response topic,
    # correlation data, user properties [MQTT-3.3.2-*] are forwarded as sent
    p = Paho(broker.port, "paho-v5-sub", sub="v5/p")
    try:
        c = v5(broker.port, "v5-pub")
        c.connect()
        c.publish(b"v5/p", b"{}", qos=1, props={
            0x01: 1, 0x02: 60, 0x03: "application/json", 0x08: "v5/reply",
            0x09: b"\x00corr", 0x26: [("k", "v"), ("k", "w")]})
        m = p.wait(1)[0]
        pr = m.properties
        assert m.payload == b"{}"
        assert pr.PayloadFormatIndicator == 1 and pr.ContentType == "application/json"
        assert 0 < pr.MessageExpiryInterval <= 60
        assert pr.ResponseTopic == "v5/reply" and pr.CorrelationData == b"\x00corr"
        assert pr.UserProperty == [("k", "v"), ("k", "w")]
    finally:
        p.close()


def test_properties_in_the_callback(broker, v5):
    # plain callback: msg_props(); raw callback: value_at() and props.get()
    got = []
    raw = []
    c = v5(broker.port, "v5-sub")

    def cb(topic, msg):
        got.append((topic, msg, c.msg_props()))

    c.set_callback(cb)
    c.connect()
    c.subscribe(b"v5/cb", 1, props={0x0B: 7})  # Subscription Identifier 7
    p = Paho(broker.port, "paho-v5-pub")
    try:
        p.publish("v5/cb", b"one", ContentType="text/plain", CorrelationData=b"id-1",
                  UserProperty=[("a", "b")], MessageExpiryInterval=30, PayloadFormatIndicator=1,
                  ResponseTopic="v5/answers")
        _poll_until(c, lambda: got)
        topic, msg, pr = got[0]
        assert (topic, msg) == (b"v5/cb", b"one")
        assert pr[0x03] == "text/plain" and pr[0x09] == b"id-1"
        assert pr[0x26] == [("a", "b")] and pr[0x0B] == [7] and pr[0x01] == 1
        assert pr[0x08] == "v5/answers" and 0 < pr[0x02] <= 30

        def rawcb(pkt, redelivered):
            o = client5.value_at(pkt, 0x09)
            b = pkt.buf
            n = (b[o] << 8) | b[o + 1]
            raw.append((bytes(b[o + 2:o + 2 + n]),
                        props.get(b, pkt.props_off, pkt.props_len, 0x0B),
                        client5.value_at(pkt, 0x24)))

        c.set_callback(rawcb, raw=True)
        p.publish("v5/cb", b"two", CorrelationData=b"id-2")
        _poll_until(c, lambda: raw)
        assert raw[0] == (b"id-2", 7, -1)  # absent property: -1
    finally:
        p.close()


def test_reason_codes_of_puback_suback_unsuback(broker_factory, v5, tmp_path):
    acl = tmp_path / "acl"
    acl.write_text("topic readwrite open/#\n")
    b = broker_factory(extra=["acl_file %s" % acl, "max_qos 1"])
    c = v5(b.port, "v5-rc")
    c.set_callback(lambda t, m: None)
    acks = []
    c.set_ack_callback(lambda pid, rc: acks.append((pid, rc)))
    c.connect()
    # nobody subscribes: PUBACK 0x10 "no matching subscribers" [MQTT-3.4.2-1]
    pid = c.publish(b"open/x", b"m", qos=1)
    assert acks == [(pid, 0x10)]
    # refused by the ACL: PUBACK 0x87, raised with wait=True, and the
    # message is no longer in flight
    with pytest.raises(MQTTError) as e:
        c.publish(b"closed/x", b"m", qos=1)
    assert e.value.code == 0x87 and acks[-1][1] == 0x87 and c.inflight() == 0
    pid = c.publish(b"closed/x", b"m", qos=1, wait=False)
    _poll_until(c, lambda: acks[-1] == (pid, 0x87))
    # SUBACK's code for the filter: the QoS granted, lowered by max_qos
    assert c.subscribe(b"open/#", 2) == 1
    assert c.unsubscribe(b"open/#") == 0
    assert c.unsubscribe(b"never/#") == 0x11  # no subscription existed


def test_reason_codes_of_pubrec(broker_factory, v5, tmp_path):
    # QoS 2: a PUBREC below 0x80 goes on with PUBREL [MQTT-4.3.3-4] and the
    # message completes at PUBCOMP; a PUBREC of 0x80 or more ends the flow
    # there: the publish is refused (raised with wait=True, reported to the
    # ack callback) and no longer in flight
    acl = tmp_path / "acl"
    acl.write_text("topic readwrite open/#\n")
    b = broker_factory(extra=["acl_file %s" % acl])
    c = v5(b.port, "v5-pubrec")
    acks = []
    c.set_ack_callback(lambda pid, rc: acks.append((pid, rc)))
    c.connect()
    pid = c.publish(b"open/x", b"m", qos=2)  # PUBREC 0x10: no subscribers
    assert acks == [(pid, 0)] and c.inflight() == 0
    with pytest.raises(MQTTError) as e:
        c.publish(b"closed/x", b"m", qos=2)  # PUBREC 0x87
    assert e.value.code == 0x87 and acks[-1][1] == 0x87 and c.inflight() == 0
    pid = c.publish(b"open/y", b"m", qos=2)  # the connection goes on
    assert acks[-1] == (pid, 0)


def test_server_disconnect_reason(broker_factory, v5):
    # a packet over the server's maximum (our own check switched off for the
    # test): the server closes with DISCONNECT 0x95 (the rule the client keeps: [MQTT-3.2.2-15]), and the
    # client reports the reason code
    b = broker_factory(extra=["max_packet_size 200"])
    c = v5(b.port, "v5-too-big")
    c.connect()
    c.max_packet = 0
    c.publish(b"v5/big", b"x" * 300)
    with pytest.raises(OSError):
        for _ in range(300):
            c.poll(10)
    assert c.disconnect_rc == 0x95


def test_subscription_options(broker, v5):
    got = []
    c = v5(broker.port, "v5-opts")
    c.set_callback(lambda t, m: got.append((t, m)))
    c.connect()
    c.publish(b"v5/ret", b"kept", retain=True, qos=1)
    # retain handling 2: no retained message at subscribe [MQTT-3.3.1-11]
    c.subscribe(b"v5/ret", 1, retain_handling=2)
    # no local: our own publications are not sent back [MQTT-3.8.3-3]
    c.subscribe(b"v5/nl", 1, no_local=True)
    c.publish(b"v5/nl", b"mine", qos=1)
    for _ in range(30):
        c.poll(10)
    assert got == []
    # retain as published: the RETAIN flag of a forwarded message kept
    raw = []
    c.set_callback(lambda p, r: raw.append((bytes(p.topic), p.retain)), raw=True)
    c.subscribe(b"v5/rap", 1, retain_as_published=True)
    p = Paho(broker.port, "paho-v5-rap")
    try:
        p.c.publish("v5/rap", b"r", qos=1, retain=True).wait_for_publish(5)
        _poll_until(c, lambda: raw)
        assert raw == [(b"v5/rap", True)]
    finally:
        p.close()


def test_topic_aliases_for_repeated_topics(broker, v5):
    # mosquitto allows 10 aliases by default: the client sends the topic once
    # and then only the alias; the subscriber sees full topics
    p = Paho(broker.port, "paho-v5-alias", sub="v5/alias/#")
    try:
        c = v5(broker.port, "v5-alias")
        c.connect()
        assert c.alias_max > 0
        sent = []
        real = c.conn.flush

        def flush():
            sent.append(bytes(c.conn.tx[:c.conn.tlen]))
            return real()

        c.conn.flush = flush
        for i in range(3):
            c.publish(b"v5/alias/temperature", b"%d" % i)
        c.publish(b"v5/alias/other", b"x")
        msgs = p.wait(4)
        assert [(m.topic, m.payload) for m in msgs] == [
            ("v5/alias/temperature", b"0"), ("v5/alias/temperature", b"1"),
            ("v5/alias/temperature", b"2"), ("v5/alias/other", b"x")]
        first, second = sent[0], sent[1]
        assert b"temperature" in first and b"temperature" not in second
        assert len(second) < len(first)
    finally:
        p.close()


def test_receive_maximum_and_maximum_packet_size(broker_factory, v5):
    b = broker_factory(extra=["max_inflight_messages 2", "max_packet_size 200"])
    c = v5(b.port, "v5-limits")
    c.connect()
    assert c.window == 2 and c.max_packet == 200
    with pytest.raises(MQTTError) as e:
        c.publish(b"v5/big", b"x" * 300, qos=0)  # never sent [MQTT-3.2.2-15]
    assert e.value.code == 0x95
    assert c.is_connected()
    c.publish(b"v5/l", b"1", qos=1, wait=False)
    c.publish(b"v5/l", b"2", qos=1, wait=False)
    with pytest.raises(Busy):
        c.publish(b"v5/l", b"3", qos=1, wait=False)  # receive maximum [MQTT-3.3.4-7]
    _poll_until(c, lambda: c.inflight() == 0)


def test_session_expiry(broker, v5):
    # the default for a persistent session: it never expires
    c = v5(broker.port, "v5-sess")
    c.connect(clean_session=False)
    c.disconnect()
    assert c.connect(clean_session=False) is True
    c.disconnect()
    # Session Expiry Interval 0: the session ends with the connection
    d = v5(broker.port, "v5-sess0", session_expiry=0)
    d.connect(clean_session=False)
    d.disconnect()
    assert d.connect(clean_session=False) is False


def test_will_properties_and_delay(broker, v5):
    p = Paho(broker.port, "paho-v5-will", sub="v5/will")
    try:
        c = v5(broker.port, "v5-will", keepalive=10)
        c.set_last_will(b"v5/will", b"gone", qos=1,
                        props={0x18: 1, 0x03: "text/plain", 0x26: [("why", "lost")]})
        c.connect()
        c.sock.close()  # no DISCONNECT: the will goes out after its delay
        c.reconnect = False
        msgs = p.wait(1, timeout=10)
        assert msgs and msgs[0].payload == b"gone"
        pr = msgs[0].properties
        assert pr.ContentType == "text/plain" and pr.UserProperty == [("why", "lost")]
    finally:
        p.close()


def test_assigned_client_id(broker, v5):
    c = v5(broker.port, "")
    c.connect()
    assert c.client_id and c.client_id != ""  # [MQTT-3.2.2-16]


def test_request_response_with_paho_responder(broker, v5):
    r = paho_peer.responder(broker.port, "v5/req", "paho-responder")
    try:
        other = []
        c = v5(broker.port, "v5-requester")
        c.set_callback(lambda t, m: other.append(t))
        c.connect()
        assert client5.request(c, b"v5/req", b"q1", b"v5/resp/me") == b"answer to q1"
        assert client5.request(c, b"v5/req", b"q2", b"v5/resp/me") == b"answer to q2"
        assert other == []  # the answers did not reach the callback
        # a client with no message callback at all: request() brings its own
        c2 = v5(broker.port, "v5-requester-nocb")
        c2.connect()
        assert client5.request(c2, b"v5/req", b"q3", b"v5/resp/nocb") == b"answer to q3"
        # put back as it was, or (none) the one that takes late answers
        assert c2.cb is client5.late_answers
    finally:
        r.disconnect()
        r.loop_stop()


def test_enhanced_auth_method_is_sent(broker, v5):
    # mosquitto without an auth plugin refuses any method: CONNACK 0x8C
    # "bad authentication method" shows the method was sent [MQTT-3.1.2-*]
    c = v5(broker.port, "v5-auth", auth=("SCRAM-SHA-1", b"client-first", lambda d: None))
    with pytest.raises(MQTTError) as e:
        c.connect()
    assert e.value.code == 0x8C
