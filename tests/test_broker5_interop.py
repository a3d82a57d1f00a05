"""Real MQTT 5 clients against umqtt3's broker: paho-mqtt's MQTT 5 client
and mosquitto_pub / mosquitto_sub -V 5, on 127.0.0.1 only.

Properties, reason codes, topic aliases, session expiry, will delay,
subscription options. Every wait and every subprocess has a timeout.
"""
import queue
import threading

import pytest

from test_broker_interop import env, lines, need_mosq, TIMEOUT
from test_broker_harness import wait_for

mqtt = pytest.importorskip("paho.mqtt.client")
from paho.mqtt.properties import Properties  # noqa: E402
from paho.mqtt.packettypes import PacketTypes  # noqa: E402


class Paho5:
    """paho's MQTT 5 client on its own network thread."""

    def __init__(self, port, cid, clean=True, props=None, will=None, will_props=None,
                 keepalive=30):
        self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=cid,
                             protocol=mqtt.MQTTv5)
        self.q = queue.Queue()
        self.up = threading.Event()
        self.subbed = queue.Queue()
        self.gone = queue.Queue()
        self.c.on_connect = self._on_connect
        self.c.on_message = lambda c, u, m: self.q.put(m)
        self.c.on_subscribe = lambda c, u, mid, codes, props: self.subbed.put([x.value for x in codes])
        self.c.on_disconnect = lambda c, u, flags, rc, props: self.gone.put(rc.value)
        if will:
            self.c.will_set(*will, properties=will_props)
        self.c.connect("127.0.0.1", port, keepalive=keepalive, clean_start=clean, properties=props)
        self.c.loop_start()
        assert self.up.wait(TIMEOUT), "no CONNACK"

    def _on_connect(self, c, u, flags, rc, props):
        self.flags = flags
        self.rc = rc
        self.props = props
        self.up.set()

    def sub(self, topic, **opts):
        self.c.subscribe(topic, options=mqtt.SubscribeOptions(**opts))
        return self.subbed.get(timeout=TIMEOUT)

    def pub(self, topic, payload, qos=0, retain=False, props=None):
        info = self.c.publish(topic, payload, qos, retain, properties=props)
        info.wait_for_publish(TIMEOUT)
        return info

    def get(self, timeout=TIMEOUT):
        return self.q.get(timeout=timeout)

    def close(self, props=None):
        try:
            self.c.disconnect(properties=props)
        finally:
            self.c.loop_stop()


def paho5(c, b, cid, **kw):
    p = Paho5(b.port, cid, **kw)
    c.made.append(p)
    return p


def connect_props(**kw):
    p = Properties(PacketTypes.CONNECT)
    for k, v in kw.items():
        setattr(p, k, v)
    return p


def test_paho5_properties_reason_codes_and_aliases():
    with env() as (b, c):
        sub = paho5(c, b, "s5")
        assert sub.rc.value == 0
        assert sub.props.ReceiveMaximum == b.limits.max_qos2_in
        assert sub.sub("p/#", qos=1) == [1]
        pub = paho5(c, b, "p5")
        pp = Properties(PacketTypes.PUBLISH)
        pp.ContentType = "text/plain"
        pp.ResponseTopic = "reply"
        pp.CorrelationData = b"c1"
        pp.UserProperty = [("a", "1"), ("b", "2")]
        pp.TopicAlias = 1
        pub.pub("p/1", b"one", 1, props=pp)
        pa = Properties(PacketTypes.PUBLISH)
        pa.TopicAlias = 1
        pub.pub("", b"two", 1, props=pa)  # by alias only
        m = sub.get()
        assert (m.topic, m.payload) == ("p/1", b"one")
        assert m.properties.ContentType == "text/plain"
        assert m.properties.ResponseTopic == "reply"
        assert m.properties.CorrelationData == b"c1"
        assert m.properties.UserProperty == [("a", "1"), ("b", "2")]
        m = sub.get()
        assert (m.topic, m.payload) == ("p/1", b"two")


def test_paho5_session_expiry_and_no_local():
    with env() as (b, c):
        s = paho5(c, b, "keep5", clean=False, props=connect_props(SessionExpiryInterval=60))
        s.sub("k", qos=1, noLocal=True)
        s.pub("k", b"own", 1)
        s.close()
        pub = paho5(c, b, "pk")
        pub.pub("k", b"queued", 1)
        s2 = paho5(c, b, "keep5", clean=False, props=connect_props(SessionExpiryInterval=60))
        assert s2.flags.session_present
        assert s2.get().payload == b"queued"


def test_paho5_will_delay_not_sent_on_resume():
    with env() as (b, c):
        w = paho5(c, b, "watch")
        w.sub("will/#", qos=0)
        wp = Properties(PacketTypes.WILLMESSAGE)
        wp.WillDelayInterval = 30
        d = paho5(c, b, "dev5", clean=False, props=connect_props(SessionExpiryInterval=60),
                  will=("will/dev5", b"gone"), will_props=wp)
        d.c.loop_stop()
        d.c.socket().close()  # lost, not a DISCONNECT
        assert wait_for(lambda: b.sessions()[b"dev5"].client is None)
        d2 = paho5(c, b, "dev5", clean=False, props=connect_props(SessionExpiryInterval=60))
        assert d2.flags.session_present
        with pytest.raises(queue.Empty):
            w.get(timeout=0.5)
        assert not b.wills


def test_paho5_shared_subscription_and_ids():
    with env() as (b, c):
        m1 = paho5(c, b, "m1")
        m2 = paho5(c, b, "m2")
        p1 = Properties(PacketTypes.SUBSCRIBE)
        p1.SubscriptionIdentifier = 42
        m1.c.subscribe("$share/g/w/#", options=mqtt.SubscribeOptions(qos=1), properties=p1)
        assert m1.subbed.get(timeout=TIMEOUT) == [1]
        assert m2.sub("$share/g/w/#", qos=1) == [1]
        pub = paho5(c, b, "pw")
        for i in range(4):
            pub.pub("w/x", b"%d" % i, 1)
        got = [m1.get(), m1.get(), m2.get(), m2.get()]
        assert sorted(m.payload for m in got) == [b"0", b"1", b"2", b"3"]
        assert got[0].properties.SubscriptionIdentifier == [42]


@need_mosq
def test_mosquitto_v5_pub_sub_with_properties():
    with env() as (b, c):
        sp = c.sub_proc("-V", "5", "-t", "m/#", "-q", "1", "-C", "2", "-W", str(TIMEOUT),
                        "-F", "%t|%p|%q|%P")
        assert wait_for(lambda: any(s.filters for s in b.sessions().values()))
        c.pub_cmd("-V", "5", "-t", "m/a", "-m", "v1", "-q", "1",
                  "-D", "publish", "user-property", "k", "v")
        c.pub_cmd("-V", "5", "-t", "m/b", "-m", "v2", "-q", "2")
        out = lines(sp, 2)
        assert out[0][:3] == ["m/a", "v1", "1"] and "k:v" in out[0][3]
        assert out[1][:3] == ["m/b", "v2", "1"]


def test_paho5_resolves_the_brokers_topic_aliases():
    # paho-mqtt with a Topic Alias Maximum decodes the broker's aliases
    # (3.3.2.3.4; it hands them over as they came, so the test maps them
    # as a receiver must): every message has its topic back
    with env() as (b, c):
        sub = paho5(c, b, "alias5", props=connect_props(TopicAliasMaximum=2))
        assert sub.sub("a/#", qos=2) == [2]
        pub = paho5(c, b, "pa")
        topics = ["a/one", "a/one", "a/two", "a/one", "a/three", "a/three", "a/two"]
        got = []
        for i, t in enumerate(topics):
            # one at a time: paho hands a QoS 2 message over at PUBREL, so a
            # QoS 0 one sent after it could overtake it in the callback
            pub.pub(t, b"%d" % i, i % 3)
            got.append(sub.get())
        seen = {}
        resolved = []
        for m in got:
            a = getattr(m.properties, "TopicAlias", 0)
            assert 0 < a <= 2 or not a  # [MQTT-3.3.2-8] [MQTT-3.3.2-11]
            if m.topic and a:
                seen[a] = m.topic
            resolved.append((m.topic or seen[a], m.payload))
        assert resolved == [(t, b"%d" % i) for i, t in enumerate(topics)]
        assert [m.topic for m in got].count("") == 3  # repeats of a/one and a/two: by alias
        assert b.sessions()[b"alias5"].oal == [b"a/one", b"a/two"]  # a/three went whole


def test_paho5_puback_no_matching_subscribers():
    # PUBACK reason code 0x10 (3.4.2.1) as paho-mqtt reads it
    with env() as (b, c):
        pub = paho5(c, b, "lonely")
        codes = queue.Queue()
        pub.c.on_publish = lambda cl, u, mid, rc, props: codes.put(rc.value)
        pub.pub("nobody/listens", b"x", 1)
        assert codes.get(timeout=TIMEOUT) == 0x10
        s = paho5(c, b, "listener")
        s.sub("nobody/#", qos=1)
        pub.pub("nobody/listens", b"y", 1)
        assert codes.get(timeout=TIMEOUT) == 0
