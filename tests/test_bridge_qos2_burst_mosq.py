# A QoS 2 burst from Debian's mosquitto 2.0.11 upstream larger than the
# bridge's inflight_in (the QoS 2 ids its upstream client holds from PUBREC
# to PUBREL [MQTT-4.3.3-2]). The client leaves the message that finds its
# table full unanswered, and those behind it [MQTT-4.6.0-2]; once the
# PUBRELs have freed the table it closes the link itself, and mosquitto
# sends the rest again on the next one [MQTT-4.4.0-1]. Nothing failed: the
# bridge dials again at once, counting no failed try and logging why, not
# after its backoff (restart_timeout here: 5 s, doubling to 60 s, as if the
# upstream had gone).
import time

import pytest

import mosq
from gateway_process import start_gateway
from tools.procs import stop
from umqtt3.client import MQTTClient

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not mosq.MOSQUITTO, reason="no mosquitto")]

HOST = "127.0.0.1"
N = 60  # mosquitto sends up to 20 at a time (max_inflight_messages): table of 4
BOUND_S = 30  # a failure bound, not a speed claim (before: minutes of backoff)
CONF = """connection burst
address 127.0.0.1:%d
topic cmd/# in 2
restart_timeout 5 60
bridge_inflight_in 4
"""


def _until(cond, clients, seconds):
    end = time.monotonic() + seconds
    while not cond() and time.monotonic() < end:
        for c in clients:
            c.poll(20)
    return cond()


def test_a_qos2_burst_larger_than_inflight_in_relinks_at_once(broker, tmp_path):
    gw, gport, log = start_gateway(tmp_path, CONF % broker.port)
    got = []
    node = MQTTClient("node", HOST, gport, reconnect=True)
    node.set_callback(lambda t, m: got.append((bytes(t), bytes(m))))
    pub = MQTTClient("burst-tx", HOST, broker.port)
    try:
        node.connect()
        node.subscribe(b"cmd/#", 2)
        pub.connect()
        # the bridge is up and subscribed upstream once a probe comes through
        assert _until(lambda: (pub.publish(b"cmd/probe", b"", qos=0), got)[1], [node], 20)

        def burst():
            return [m for t, m in got if t == b"cmd/x"]  # (late probes aside)

        for i in range(N):
            pub.publish(b"cmd/x", b"%d" % i, qos=2)
        assert _until(lambda: len(burst()) >= N, [node], BOUND_S), len(burst())
        assert burst() == [b"%d" % i for i in range(N)]  # once each, in order
        text = log.read_text(errors="replace")
        relinks = text.count("bridge burst: more QoS 2 messages from the upstream than "
                             "inflight_in (4) holds: linking again at once")
        assert relinks >= 1, text
        assert "lost the link" not in text and "cannot connect" not in text, text
        # one connection per relink, and the first
        assert text.count("bridge burst: connected to") == relinks + 1, text
    finally:
        pub.disconnect()
        node.disconnect()
        stop(gw)
