# The bridge against an upstream that takes less than a node sends: Debian's
# mosquitto at MQTT 5 with `max_qos 1`, `retain_available false` and
# `max_packet_size`, as AWS IoT Core (Maximum QoS 1) or a locked-down
# mosquitto says in its CONNACK [MQTT-3.2.2-9, MQTT-3.2.2-11, MQTT-3.2.2-14,
# MQTT-3.2.2-15]. Nodes publish through the gateway process (our broker
# with --bridge-config and --store); a paho subscriber on the upstream
# must get every message at most at QoS 1, without the retain flag, and
# never one larger than the upstream takes; what is too large is dropped,
# counted in $SYS/broker/bridge/NAME/too_large and logged, and never holds
# up the messages behind it.
import subprocess
import time

import pytest

from mosq import MOSQUITTO
from tools.procs import free_port, start, stop, umqtt3_broker_cmd
from umqtt3.client import MQTTClient
from paho_peer import Watch  # tests/paho_peer.py

mqtt = pytest.importorskip("paho.mqtt.client")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not MOSQUITTO, reason="no mosquitto")]

LIMITS = ["max_qos 1", "retain_available false", "max_packet_size 300"]


def _conf(tmp_path, up_port, extra="bridge_protocol_version mqttv50\n"):
    p = tmp_path / "bridge.conf"
    p.write_text("connection up\naddress 127.0.0.1:%d\ntopic s/# out 2 \"\" site/\n"
                 "restart_timeout 1 2\n%s" % (up_port, extra))
    return str(p)


def _gateway(tmp_path, up_port, extra="bridge_protocol_version mqttv50\n"):
    port = free_port()
    gw = start(umqtt3_broker_cmd(port, "--store", str(tmp_path / "gw"), "--sys-interval", "1",
                                 "--bridge-config", _conf(tmp_path, up_port, extra)),
               port, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return gw, port


def _sys(port, name, want, seconds=10):
    # the gateway's $SYS figure, once it equals want (or the last seen)
    got = []
    c = MQTTClient("sys%d" % free_port(), "127.0.0.1", port)
    c.set_callback(lambda t, m: got.append(int(m)))
    c.connect()
    c.subscribe("$SYS/broker/bridge/up/" + name, 0)
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end and not (got and got[-1] == want):
            c.check_msg()
            time.sleep(0.02)
    finally:
        c.disconnect()
    return got[-1] if got else None


def test_an_upstream_that_takes_less_never_stops_the_bridge(broker_factory, tmp_path):
    up = broker_factory(extra=LIMITS)
    watch = Watch(up.port)
    gw, gport = _gateway(tmp_path, up.port)
    node = MQTTClient("node", "127.0.0.1", gport)
    try:
        node.connect()
        big = b"x" * 400  # the upstream takes packets of up to 300 bytes
        sent = [("s/ret1", b"r1", 1, True), ("s/q2", b"q2", 2, False),
                ("s/big1", big, 1, False), ("s/ret2", b"r2", 2, True),
                ("s/big0", big, 0, False), ("s/ret0", b"r0", 0, True),
                ("s/big2", big, 2, True), ("s/after", b"after", 1, False)]
        for t, m, q, r in sent:
            node.publish(t, m, r, q)
        got = watch.take(5)
        time.sleep(0.3)
        while not watch.got.empty():
            got.append(watch.got.get())
        # every message the upstream can take, once, at most at QoS 1, none
        # retained [MQTT-3.2.2-11, MQTT-3.2.2-14]; none too large; in order
        # per QoS (QoS 0 waits apart, in RAM)
        assert sorted(got) == [("site/s/after", b"after", 1, False),
                               ("site/s/q2", b"q2", 1, False),
                               ("site/s/ret0", b"r0", 0, False),
                               ("site/s/ret1", b"r1", 1, False),
                               ("site/s/ret2", b"r2", 1, False)], got
        assert [m for t, m, q, r in got if q] == [b"r1", b"q2", b"r2", b"after"]
        assert _sys(gport, "too_large", 3) == 3
        assert _sys(gport, "connects", 1) == 1  # never thrown off by the upstream
        # a new subscriber gets nothing retained: the upstream stored none
        late = Watch(up.port, "site/s/ret1")
        try:
            assert late.take(1, 0.5) == []
        finally:
            late.close()
    finally:
        node.disconnect()
        watch.close()
        stop(gw)


def test_too_large_is_logged(broker_factory, tmp_path):
    up = broker_factory(extra=LIMITS)
    gw, gport = _gateway(tmp_path, up.port)
    try:
        node = MQTTClient("node", "127.0.0.1", gport)
        node.connect()
        node.publish("s/big", b"y" * 400, False, 1)
        node.publish("s/small", b"ok", False, 1)
        node.disconnect()
        assert _sys(gport, "too_large", 1) == 1
    finally:
        stop(gw)
    log = gw.stdout.read().decode()
    assert "bridge up: dropped site/s/big" in log, log


def test_a_copied_mosquitto_section_starts_and_outgoing_retain_false_holds(broker_factory,
                                                                           tmp_path):
    # the lines a mosquitto bridge section carries that say what this bridge
    # does anyway start it; bridge_outgoing_retain false (mosquitto's
    # meaning, for a 3.1.1 upstream that keeps no retained messages): a
    # retained message goes up without the flag, and so does the status
    up = broker_factory()
    watch = Watch(up.port)
    gw, gport = _gateway(tmp_path, up.port, "try_private false\nbridge_insecure false\n"
                         "start_type automatic\nbridge_attempt_unsubscribe false\n"
                         "bridge_outgoing_retain false\ncleansession false\n")
    node = MQTTClient("node", "127.0.0.1", gport)
    try:
        node.connect()
        node.publish("s/keep", b"k", True, 1)
        assert watch.take(1) == [("site/s/keep", b"k", 1, False)]
        late = Watch(up.port, "#")  # what the upstream retained: nothing of ours
        try:
            assert late.take(1, 1.0) == []
        finally:
            late.close()
    finally:
        node.disconnect()
        watch.close()
        stop(gw)
