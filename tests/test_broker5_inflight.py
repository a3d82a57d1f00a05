"""The in-flight window of an MQTT 5 client: the bodies of
tests/portable/test_broker5_window.py over sockets, and paho-mqtt's MQTT 5
and 3.1.1 clients, which acknowledge only when told, against our broker and
against Debian's mosquitto: both keep as many QoS 1 messages in flight to an
MQTT 5 client as its Receive Maximum allows [MQTT-3.3.4-9], and their
in-flight setting to a 3.1.1 client.
"""
import threading
import time

import pytest

from test_broker5_window import *  # noqa: F401,F403

import broker_harness  # noqa: E402
import mosq  # noqa: E402
from test_broker_harness import SOCKETS  # noqa: E402
from tools import procs  # noqa: E402

mqtt = pytest.importorskip("paho.mqtt.client")
from paho.mqtt.properties import Properties  # noqa: E402
from paho.mqtt.packettypes import PacketTypes  # noqa: E402

TIMEOUT = 10


@pytest.fixture(autouse=True)
def _over_sockets():
    old = broker_harness.use(SOCKETS)
    yield
    broker_harness.use(old)


class Holder:
    """A paho subscriber that acknowledges nothing until ack_all()."""

    def __init__(self, port, cid, level, receive_max=None):
        self.got = []
        self.lock = threading.Lock()
        self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=cid, protocol=level,
                             manual_ack=True)
        self.c.on_message = self._on_message
        subbed = threading.Event()
        self.c.on_subscribe = lambda *a: subbed.set()
        props = None
        if receive_max is not None:
            props = Properties(PacketTypes.CONNECT)
            props.ReceiveMaximum = receive_max
        if level == mqtt.MQTTv5:
            self.c.connect("127.0.0.1", port, properties=props)
        else:
            self.c.connect("127.0.0.1", port)
        self.c.loop_start()
        self.c.subscribe("w/%s" % cid, qos=1)
        assert subbed.wait(TIMEOUT), "no SUBACK"

    def _on_message(self, c, u, m):
        with self.lock:
            self.got.append(m)

    def settled(self, quiet=0.5):
        """How many arrived once none has for `quiet` seconds."""
        n, end = -1, time.monotonic() + TIMEOUT
        while time.monotonic() < end:
            with self.lock:
                m = len(self.got)
            if m == n:
                return n
            n = m
            time.sleep(quiet)
        return n

    def ack_all(self):
        with self.lock:
            got, self.got = self.got, []
        for m in got:
            self.c.ack(m.mid, m.qos)
        return len(got)

    def close(self):
        self.c.disconnect()
        self.c.loop_stop()


def _publish(port, topic, n):
    p = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="pub-" + topic.replace("/", "-"))
    p.connect("127.0.0.1", port)
    p.loop_start()
    for i in range(n):
        p.publish(topic, b"%d" % i, qos=1).wait_for_publish(TIMEOUT)
    p.disconnect()
    p.loop_stop()


def _windows(port):
    """(in flight to a v5 client with Receive Maximum 30, to a 3.1.1
    client, after acknowledging those: the rest) for 60 messages each."""
    out = []
    for cid, level, rm in (("v5", mqtt.MQTTv5, 30), ("v311", mqtt.MQTTv311, None)):
        h = Holder(port, cid, level, rm)
        try:
            _publish(port, "w/" + cid, 60)
            first = h.settled()
            total = first
            while total < 60:
                if not h.ack_all():
                    break
                total += h.settled()
            out += [first, total]
        finally:
            h.close()
    return out


def test_paho_v5_receive_maximum_is_the_window_as_with_mosquitto(tmp_path):
    port = procs.free_port()
    p = procs.start(procs.umqtt3_broker_cmd(port, "--max-inflight", "4",
                                            "--max-inflight-v5", "50"), port)
    try:
        ours = _windows(port)
    finally:
        procs.stop(p)
    if not mosq.MOSQUITTO:
        pytest.skip("no mosquitto")
    m = mosq.Broker(tmp_path / "mosq", extra=["max_inflight_messages 4"])
    m.start()
    try:
        theirs = _windows(m.port)
    finally:
        m.stop()
    assert ours == [30, 60, 4, 60], ours
    assert theirs == ours, theirs


def test_paho_v5_without_receive_maximum_gets_max_inflight_v5():
    # no Receive Maximum: 65535 allowed (3.1.2.11.3), the broker's cap holds
    port = procs.free_port()
    p = procs.start(procs.umqtt3_broker_cmd(port, "--max-inflight", "4",
                                            "--max-inflight-v5", "50"), port)
    try:
        h = Holder(port, "nocap", mqtt.MQTTv5)
        try:
            _publish(port, "w/nocap", 80)
            assert h.settled() == 50
        finally:
            h.close()
    finally:
        procs.stop(p)
