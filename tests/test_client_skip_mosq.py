# A message larger than the client's buffer, from Debian's mosquitto 2.0.11 at
# MQTT 3.1.1, which has no Maximum Packet Size to tell the broker our buffer:
# the client discards it as an MQTT 5 server would have [MQTT-3.1.2-25] and
# acknowledges it [MQTT-4.3.2-2], so a persistent session is not stuck behind
# it (before, the client dropped the link on it, and mosquitto sent it again on
# every connection). Also through our broker's bridge (an `in` rule at 3.1.1),
# whose upstream client is the same client.
import subprocess
import time

import pytest

import mosq
from tools.procs import free_port, start, stop, umqtt3_broker_cmd
from umqtt3.client import MQTTClient

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not mosq.MOSQUITTO_PUB, reason="no mosquitto")]

HOST = "127.0.0.1"
BIG = b"B" * 4096


def _pub(port, topic, payload, qos=1):
    r = subprocess.run([mosq.MOSQUITTO_PUB, "-h", HOST, "-p", str(port), "-t", topic,
                        "-q", str(qos), "-s"], input=payload, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=10)
    assert r.returncode == 0, r.stdout


def _until(c, cond, seconds=5.0):
    end = time.monotonic() + seconds
    while not cond() and time.monotonic() < end:
        c.poll(10)
    return cond()


def test_a_large_message_no_longer_stalls_a_persistent_session(broker):
    got = []
    acks = []
    c = MQTTClient("skip-node", HOST, broker.port, bufsize=512, timeout_ms=3000)
    c.set_callback(lambda t, m: got.append((t, m)))
    c.set_ack_callback(lambda pid, rc: acks.append((pid, rc)))
    try:
        c.connect(clean_session=False)
        c.subscribe(b"n/cmd", 1)
        _pub(broker.port, "n/cmd", BIG)
        _pub(broker.port, "n/cmd", b"small")
        assert _until(c, lambda: got), "the small message never came"
        assert got == [(b"n/cmd", b"small")] and c.too_large == 1
        assert acks == [(0, 0x195)] and c.is_connected()
        # offline: mosquitto keeps both for the session; the reconnect gets them
        c.disconnect()
        _pub(broker.port, "n/cmd", BIG)
        _pub(broker.port, "n/cmd", b"queued")
        assert c.connect(clean_session=False) is True
        assert _until(c, lambda: len(got) == 2), "the queued message never came"
        assert got[1] == (b"n/cmd", b"queued") and c.too_large == 2 and c.is_connected()
        # acknowledged, so not sent again on the next connection
        c.disconnect()
        c.connect(clean_session=False)
        _pub(broker.port, "n/cmd", b"marker")
        assert _until(c, lambda: len(got) == 3)
        assert got[2] == (b"n/cmd", b"marker") and c.too_large == 2
    finally:
        c.disconnect()


def test_a_large_upstream_message_no_longer_stops_the_bridge_in_direction(broker_factory,
                                                                           tmp_path):
    # the gateway takes packets of up to 1024 bytes: its upstream client's
    # buffer is 1024 + 64; the upstream's message is 4 KB
    up = broker_factory()
    conf = tmp_path / "bridge.conf"
    conf.write_text("connection up\naddress 127.0.0.1:%d\ntopic d/# in 1 \"\" site/\n"
                    "bridge_protocol_version mqttv311\nrestart_timeout 1\n" % up.port)
    port = free_port()
    gw = start(umqtt3_broker_cmd(port, "--max-packet", "1024", "--bridge-config", str(conf),
                                 "--sys-interval", "1"),
               port, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    got = []
    node = MQTTClient("skip-local", HOST, port, timeout_ms=3000)
    node.set_callback(lambda t, m: got.append((t, m)))
    try:
        node.connect()
        node.subscribe(b"d/#", 1)
        # the bridge is up once a probe from upstream comes through
        end = time.monotonic() + 10
        while not got and time.monotonic() < end:
            _pub(up.port, "site/d/probe", b"p")
            _until(node, lambda: got, 0.5)
        assert got, "the bridge never came up"
        del got[:]
        _pub(up.port, "site/d/big", BIG)
        _pub(up.port, "site/d/after", b"after")
        assert _until(node, lambda: got, 10), "the in direction stopped at the large message"
        assert got == [(b"d/after", b"after")]
        # counted where a gateway's operator looks: $SYS
        node.subscribe(b"$SYS/broker/bridge/up/too_large_in", 0)
        assert _until(node, lambda: (b"$SYS/broker/bridge/up/too_large_in", b"1") in got, 5), got
    finally:
        node.disconnect()
        stop(gw)
