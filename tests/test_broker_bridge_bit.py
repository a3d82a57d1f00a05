"""The broker serves a broker's bridge as mosquitto does: the bridge bit.

mosquitto's bridges (try_private true, its default) connect at MQTT 3.1 or
3.1.1 with the protocol level's high bit set (0x83, 0x84). mosquitto, as
the broker, makes that client's subscriptions No Local and Retain As
Published: the bridge never gets its own messages back, and live messages
keep their RETAIN flag. Ours does the same (codec_server.decode_connect,
Core._subscribe), and closes a 0x85 CONNECT without a CONNACK, as
mosquitto 2.0.11 does.

Raw sockets against the broker first, then a real mosquitto 2.0.11 bridged
into it, then a bridge's persistent session across a restart (--store).
"""
import queue
import threading

import pytest

from test_broker_harness import running, Raw, wait_for, connect_bytes
from umqtt3.codec import (encode_subscribe, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP, SUBACK,
                          PINGREQ, PINGRESP)

TIMEOUT = 10


def _connect(c, cid, level_byte, clean=True):
    """CONNECT as cid at protocol level byte level_byte (0x80 | level: the
    bridge bit); returns the CONNACK, or None when the broker closed."""
    name = b"MQIsdp" if level_byte & 0x7F == 3 else b"MQTT"
    data = connect_bytes(cid, level=level_byte & 0x7F, clean=clean, keepalive=60)
    i = data.find(name) + len(name)
    data[i] = level_byte
    c.send(bytes(data))
    return c.recv()


def _subscribe(c, pid, topic, qos):
    c.put(encode_subscribe, pid, [(topic, qos)])
    got = []
    while True:
        p = c.recv()
        assert p is not None, "closed before SUBACK"
        if p.type == SUBACK:
            return bytes(p.payload), got
        got.append(p)


def _publish_own(c, topic, payload, qos, pid):
    """c publishes and finishes the flow of its publish; returns the
    PUBLISHes that came meanwhile, and after it until a PINGRESP (the
    broker answers in order: anything routed back to c came before)."""
    came = []
    c.publish(topic, payload, qos, pid)

    def until(ptype):
        while True:
            p = c.recv()
            assert p is not None, "closed"
            if p.type == ptype:
                return
            if p.type == PUBLISH:
                came.append((bytes(p.topic), bytes(p.payload), p.qos, p.retain))
                if p.qos == 1:
                    c.ack(PUBACK, p.pid)
                elif p.qos == 2:
                    c.ack(PUBREC, p.pid)
            elif p.type == PUBREL:
                c.ack(PUBCOMP, p.pid)

    if qos == 1:
        until(PUBACK)
    elif qos == 2:
        until(PUBREC)
        c.ack(PUBREL, pid)
        until(PUBCOMP)
    c.simple(PINGREQ)  # its PINGRESP comes after whatever was due
    until(PINGRESP)
    return came


# ---------------------------------------------------------------- raw sockets

@pytest.mark.parametrize("level_byte", [0x84, 0x83])
def test_a_bridge_gets_none_of_its_own_messages_back_MQTT_3_8_3_3(level_byte):
    # No Local for a bridge's subscriptions [MQTT-3.8.3-3 (5.0)]: at each QoS
    # what it publishes on a topic it subscribes to does not come back
    log = []
    with running(log=log.append) as b, Raw(b) as br:
        assert _connect(br, "up.br", level_byte).rc == 0
        assert _subscribe(br, 1, "a/#", 2)[0] == b"\x02"
        for q in (0, 1, 2):
            assert _publish_own(br, "a/b", b"m%d" % q, q, 10 + q) == [], "echoed at QoS %d" % q
        assert any(x.startswith("connect up.br from ") and "(bridge, " in x for x in log), log


def test_a_plain_client_gets_its_own_messages_back():
    # 3.1.1 has no No Local: a client without the bit gets what it publishes
    # on a topic it subscribes to, once per message
    log = []
    with running(log=log.append) as b, Raw(b) as c:
        assert _connect(c, "plain", 4).rc == 0
        assert _subscribe(c, 1, "a/#", 2)[0] == b"\x02"
        for q in (0, 1, 2):
            assert _publish_own(c, "a/b", b"m%d" % q, q, 10 + q) == [(b"a/b", b"m%d" % q, q, False)]
        assert not any("bridge" in x for x in log), log


@pytest.mark.parametrize("level_byte", [0x84, 0x83])
def test_a_bridge_gets_live_retained_messages_retained_MQTT_3_3_1_9(level_byte):
    # Retain As Published for a bridge [MQTT-3.3.1-13 (5.0)]: another
    # client's live retained message reaches the bridge with RETAIN 1, a
    # plain subscriber with RETAIN 0 [MQTT-3.3.1-9], at each QoS
    with running() as b, Raw(b) as br, Raw(b) as plain, Raw(b) as pub:
        assert _connect(br, "up.br", level_byte).rc == 0
        assert _connect(plain, "plain", 4).rc == 0
        assert _connect(pub, "pub", 4).rc == 0
        assert _subscribe(br, 1, "a/#", 2)[0] == b"\x02"
        assert _subscribe(plain, 1, "a/#", 2)[0] == b"\x02"
        for q in (0, 1, 2):
            pub.publish("a/r%d" % q, b"v", q, 20 + q if q else 0, retain=True)
            want = (b"a/r%d" % q, b"v", q)
            assert [m[:4] for m in br.messages(1)] == [want + (True,)]
            assert [m[:4] for m in plain.messages(1)] == [want + (False,)]
        # and a message that is not retained stays so
        pub.publish("a/n", b"v", 1, 30)
        assert [m[:4] for m in br.messages(1)] == [(b"a/n", b"v", 1, False)]
        # a new subscription's retained messages are retained, as for
        # anyone [MQTT-3.3.1-8]
        assert _subscribe(br, 2, "a/r1", 1) == (b"\x01", [])
        assert [m[:4] for m in br.messages(1)] == [(b"a/r1", b"v", 1, True)]


def test_a_bridge_leaves_the_topic_memo_on_and_no_local_holds():
    # CPython remembers what a topic matched (Subs.memo): a bridge's No
    # Local subscriptions do not turn that off for every topic; what the
    # bridge publishes itself is matched again, without its own copy
    with running() as b, Raw(b) as br, Raw(b) as plain, Raw(b) as pub:
        if b.subs.memo is None:
            pytest.skip("no topic memo here")
        assert _connect(br, "up.br", 0x84).rc == 0
        assert _connect(plain, "plain", 4).rc == 0
        assert _connect(pub, "pub", 4).rc == 0
        assert _subscribe(br, 1, "a/#", 0)[0] == b"\x00"
        assert _subscribe(plain, 1, "a/#", 0)[0] == b"\x00"
        for payload in (b"1", b"2"):
            pub.publish("a/t", payload)
            assert [m[:2] for m in br.messages(1)] == [(b"a/t", payload)]
            assert [m[:2] for m in plain.messages(1)] == [(b"a/t", payload)]
            assert b"a/t" in b.subs.memo
        assert _publish_own(br, "a/t", b"own", 0, 0) == []
        assert [m[:2] for m in plain.messages(1)] == [(b"a/t", b"own")]
        pub.publish("a/t", b"3")
        assert [m[:2] for m in br.messages(1)] == [(b"a/t", b"3")]


def test_bridge_bit_at_mqtt5_closes_without_connack_as_mosquitto_MQTT_3_1_2_2():
    # 0x85 is no protocol level [MQTT-3.1.2-2]: mosquitto 2.0.11 closes a
    # well-formed MQTT 5 CONNECT at 0x85 without a CONNACK (a protocol
    # error), and so does the broker
    log = []
    with running(log=log.append) as b, Raw(b) as c:
        assert _connect(c, "five", 0x85) is None
        assert b.connected == 0 and "five".encode() not in b.sessions()
        assert wait_for(lambda: any("bridge bit at MQTT 5" in x for x in log)), log


def test_bridge_bit_with_the_other_protocol_name_is_refused_as_mosquitto():
    # "MQIsdp" at 0x84 and "MQTT" at 0x83: CONNACK 1, then closed
    # [MQTT-3.1.2-2], as mosquitto 2.0.11 answers both
    for name, level_byte in ((b"MQIsdp", 0x84), (b"MQTT", 0x83)):
        with running() as b, Raw(b) as c:
            data = connect_bytes("x", level=4 if name == b"MQTT" else 3, keepalive=60)
            data[data.find(name) + len(name)] = level_byte
            c.send(bytes(data))
            p = c.recv()
            assert p is not None and p.rc == 1, p
            assert c.recv() is None


# ---------------------------------------------------------------- a real mosquitto bridge

def _mosquitto_bridge(tmp_path, port):
    """mosquitto 2.0.11 with a bridge into the broker on port (try_private
    left at its default, true); started, and its bridge's session known to
    the broker once the caller waits for it."""
    from mosq import Broker as Mosquitto, MOSQUITTO
    if MOSQUITTO is None:
        pytest.skip("mosquitto is not installed")
    m = Mosquitto(tmp_path / "mosq", extra=[
        "connection edge", "address 127.0.0.1:%d" % port, "clientid edge.bridge",
        "topic a/# both 1", "restart_timeout 1"])
    return m.start()


class _Paho:
    """A paho 3.1.1 client on its own thread; messages in a queue."""

    def __init__(self, port, cid):
        import paho.mqtt.client as mqtt
        self.q = queue.Queue()
        self.subbed = threading.Event()
        c = self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=cid)
        c.on_message = lambda cl, u, m: self.q.put((m.topic, bytes(m.payload), bool(m.retain)))
        c.on_subscribe = lambda *a: self.subbed.set()
        c.connect("127.0.0.1", port)
        c.loop_start()

    def sub(self, topic):
        self.subbed.clear()
        self.c.subscribe(topic, 1)
        assert self.subbed.wait(TIMEOUT), "no SUBACK"

    def pub(self, topic, payload, retain=False):
        info = self.c.publish(topic, payload, 1, retain)
        info.wait_for_publish(TIMEOUT)

    def until(self, payload):
        """What came, up to and with the message whose payload is payload."""
        out = []
        while not out or out[-1][1] != payload:
            out.append(self.q.get(timeout=TIMEOUT))
        return out

    def close(self):
        self.c.disconnect()
        self.c.loop_stop()


def _bridged(b):
    s = b.sessions().get(b"edge.bridge")
    return s is not None and s.client is not None and b"a/#" in s.filters


@pytest.mark.interop
def test_a_mosquitto_bridge_does_not_get_its_messages_back(tmp_path):
    # a message published on mosquitto reaches mosquitto's subscriber once:
    # the bridge's copy in our broker is not sent back up to it (the echo
    # was a second copy), and our broker's own subscriber gets it
    pytest.importorskip("paho.mqtt.client")
    log = []
    with running(log=log.append) as b, Raw(b) as local:
        m = _mosquitto_bridge(tmp_path, b.port)
        try:
            assert wait_for(lambda: _bridged(b), TIMEOUT), m.log_text()
            assert any("connect edge.bridge" in x and "(bridge, " in x for x in log), log
            assert _connect(local, "local", 4).rc == 0
            assert _subscribe(local, 1, "a/#", 1)[0] == b"\x01"
            s = _Paho(m.port, "mq-sub")
            try:
                s.sub("a/#")
                s.pub("a/up", b"one")
                # in our broker: then anything sent back up is on the bridge's
                # connection before "two", which comes down after it
                assert [x[:2] for x in local.messages(1)] == [(b"a/up", b"one")]
                local.publish("a/down", b"two", 0)
                assert [x[:2] for x in s.until(b"two")] == [("a/up", b"one"), ("a/down", b"two")]
            finally:
                s.close()
        finally:
            m.stop()
            m.kill()


@pytest.mark.interop
def test_a_live_retained_message_reaches_mosquitto_retained(tmp_path):
    # a retained message published on our broker while the bridge is up
    # reaches the bridge with RETAIN 1, so mosquitto keeps it: a later
    # subscriber there gets it as retained
    pytest.importorskip("paho.mqtt.client")
    with running() as b, Raw(b) as local:
        m = _mosquitto_bridge(tmp_path, b.port)
        try:
            assert wait_for(lambda: _bridged(b), TIMEOUT), m.log_text()
            assert _connect(local, "local", 4).rc == 0
            first = _Paho(m.port, "mq-first")
            try:
                first.sub("a/#")
                local.publish("a/state", b"on", 1, 7, retain=True)
                local.expect(PUBACK, 7)
                # live: mosquitto's subscriber has it (RETAIN 0 there, live)
                assert first.until(b"on") == [("a/state", b"on", False)]
            finally:
                first.close()
            later = _Paho(m.port, "mq-later")
            try:
                later.sub("a/state")
                assert later.until(b"on") == [("a/state", b"on", True)]
            finally:
                later.close()
        finally:
            m.stop()
            m.kill()


# ---------------------------------------------------------------- --store

def test_a_bridge_session_restored_from_the_store_keeps_its_options(tmp_path):
    # the options are in the subscription's options byte, which the store
    # keeps: after a restart the bridge's session, resumed without a new
    # SUBSCRIBE, still gets none of its own messages back and live retained
    # messages retained
    store = str(tmp_path / "store")
    with running(store=store) as b, Raw(b) as br:
        assert _connect(br, "up.br", 0x84, clean=False).rc == 0
        assert _subscribe(br, 1, "a/#", 1)[0] == b"\x01"
    with running(store=store) as b, Raw(b) as br, Raw(b) as pub:
        p = _connect(br, "up.br", 0x84, clean=False)
        assert p.rc == 0 and p.session_present
        for q in (0, 1, 2):
            assert _publish_own(br, "a/b", b"m%d" % q, q, 10 + q) == [], "echoed at QoS %d" % q
        assert _connect(pub, "pub", 4).rc == 0
        pub.publish("a/r", b"v", 1, 3, retain=True)
        assert [m[:4] for m in br.messages(1)] == [(b"a/r", b"v", 1, True)]
