"""The client keeps the limits a real server sets (mosquitto 2.0 at MQTT 5):
what the server would close the connection on is refused at the call, and
the connection stays up."""
import time

import pytest

from umqtt3.client import MQTTClient
from umqtt3.codec import MQTTError

pytestmark = pytest.mark.interop
HOST = "127.0.0.1"


def _refused(f, *args, **kw):
    with pytest.raises(MQTTError) as e:
        f(*args, **kw)
    return e.value.code


def test_maximum_qos_and_retain_available_of_mosquitto(broker_factory):
    # mosquitto with max_qos 1 and retain_available false says so in
    # CONNACK (Maximum QoS 1, Retain Available 0) and closes with DISCONNECT
    # 0x9B / 0x9A on a PUBLISH beyond them. The client refuses such a
    # publish itself [MQTT-3.2.2-11, MQTT-3.2.2-14]: nothing is stored or
    # resent, no reconnect, and what the server takes still goes.
    b = broker_factory(extra=["max_qos 1", "retain_available false"])
    c = MQTTClient("rules-maxqos", HOST, b.port, level=5, reconnect=True, timeout_ms=3000,
                   backoff_ms=(50, 100))
    got = []
    c.set_callback(lambda t, m: got.append(m))
    try:
        c.connect()
        assert c.subscribe(b"rules/t", 1) == 1
        assert _refused(c.publish, b"rules/t", b"two", qos=2) == 0x9B
        assert _refused(c.publish, b"rules/t", b"kept", retain=True, qos=1) == 0x9A
        assert c.inflight() == 0
        c.publish(b"rules/t", b"one", qos=1)
        for _ in range(100):
            if got:
                break
            c.poll(10)
        assert got == [b"one"]
        assert c.is_connected() and c.disconnect_rc is None
    finally:
        c.reconnect = False
        c.disconnect()


def test_mosquitto_sends_nothing_larger_than_the_receive_buffer(broker_factory):
    # The level-5 CONNECT declares the receive buffer as Maximum Packet Size
    # [MQTT-3.1.2-24]: mosquitto drops a larger message for this client
    # [MQTT-3.1.2-25] instead of sending it (which would close the link, and
    # with a kept session again on every reconnect); the next one arrives.
    b = broker_factory()
    sub = MQTTClient("rules-small", HOST, b.port, level=5, bufsize=256, timeout_ms=3000)
    pub = MQTTClient("rules-pub", HOST, b.port, level=5, bufsize=2048, timeout_ms=3000)
    got = []
    sub.set_callback(lambda t, m: got.append(len(m)))
    try:
        sub.connect(clean_session=False)
        sub.subscribe(b"rules/big", 1)
        pub.connect()
        pub.publish(b"rules/big", b"x" * 600, qos=1)
        pub.publish(b"rules/big", b"y" * 100, qos=1)
        for _ in range(100):
            if got:
                break
            sub.poll(10)
        assert got == [100]
        assert sub.is_connected()
    finally:
        for c in (sub, pub):
            c.disconnect()


def test_no_local_on_a_shared_subscription(broker_factory):
    # mosquitto closes on No Local with a $share filter [MQTT-3.8.3-4]: the
    # client refuses it at the call and stays connected; the same filter
    # without No Local is granted
    b = broker_factory()
    c = MQTTClient("rules-share", HOST, b.port, level=5, timeout_ms=3000)
    c.set_callback(lambda t, m: None)
    try:
        c.connect()
        assert _refused(c.subscribe, b"$share/g/rules", 1, no_local=True) == 0x82
        assert c.subscribe(b"$share/g/rules", 1) == 1
        assert c.is_connected()
    finally:
        c.disconnect()


def test_resend_keeps_mosquittos_receive_maximum(broker_factory):
    # Five QoS 2 messages stored while the broker was away; the broker that
    # comes back says Receive Maximum 2 (max_inflight_messages 2) and closes
    # with DISCONNECT 0x93 on a third unreleased PUBLISH. The resend keeps
    # the quota [MQTT-3.3.4-7], sends the rest as PUBCOMPs come, and every
    # message completes on the first connection.
    b = broker_factory()
    c = MQTTClient("rules-recvmax", HOST, b.port, level=5, reconnect=True, timeout_ms=3000,
                   backoff_ms=(20, 40))
    acks = []
    c.set_ack_callback(lambda pid, rc: acks.append(rc))
    try:
        c.connect(clean_session=False)
        b.stop(5)
        for i in range(5):
            c.publish(b"rules/rm", b"m%d" % i, qos=2, wait=False)
        assert c.inflight() == 5
        opened = []
        real = c.open_link

        def counting(sock=None):
            opened.append(1)
            return real(sock)

        c.open_link = counting
        broker_factory(port=b.port, extra=["max_inflight_messages 2"])
        end = time.monotonic() + 10
        while c.inflight() and time.monotonic() < end:
            c.poll(10)
        assert c.inflight() == 0 and acks == [0] * 5, acks
        assert c.disconnect_rc is None and len(opened) == 1, (c.disconnect_rc, opened)
    finally:
        c.reconnect = False
        c.disconnect()
