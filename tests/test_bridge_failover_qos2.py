# QoS 2 across the bridge's failover: each upstream broker holds its own
# session of the bridge, so a QoS 2 message's state stays with the broker it
# was made with [MQTT-4.3.3-1] and every QoS 2 message arrives exactly once
# [MQTT-4.3.3-2], across a switch of address and the return to the main one.
# Two real mosquitto 2.0.11 upstreams; a relay (tests/relay.py) in front of
# one loses a packet. The gateway is our broker in this process.
import signal
import subprocess
import threading
import time

import paho.mqtt.client as mqtt
import pytest

from relay import Relay
from tools.procs import free_port, start, stop, umqtt3_broker_cmd
from umqtt3.bridge import install
from umqtt3.broker import Broker
from umqtt3.client import MQTTClient

pytestmark = pytest.mark.slow


def _wait(cond, s=30):
    end = time.time() + s
    while not cond() and time.time() < end:
        time.sleep(0.05)
    return cond()


class _Sub:
    # a paho subscriber on an upstream, its own persistent session
    def __init__(self, port, cid, topic):
        self.got = []
        ok = threading.Event()
        c = self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=cid,
                                 clean_session=False)
        c.on_connect = lambda c, u, f, rc, p: c.subscribe(topic, 2)
        c.on_subscribe = lambda *a: ok.set()
        c.on_message = lambda c, u, m: self.got.append(bytes(m.payload))
        c.connect("127.0.0.1", port)
        c.loop_start()
        assert ok.wait(10)

    def stop(self):
        self.c.loop_stop()
        self.c.disconnect()


@pytest.fixture
def gateway():
    """gateway(addresses, rules) -> (broker, its log lines); polled in a
    thread, closed at teardown."""
    made = []
    stop = threading.Event()

    def make(addresses, rules):
        said = []
        gw = Broker(port=free_port(), sys_interval=0, log=said.append)
        install(gw, [{"name": "up", "client_id": "gw", "addresses": addresses,
                      "round_robin": False, "rules": rules, "backoff_ms": (100, 200),
                      "timeout_ms": 2000}])
        made.append(gw)

        def loop():
            while not stop.is_set():
                gw.poll_once(10)
        threading.Thread(target=loop, daemon=True).start()
        return gw, said

    yield make
    stop.set()
    time.sleep(0.1)
    for gw in made:
        gw.close()


def _connects(said):
    return sum("connected to" in x for x in said)


def test_out_a_message_past_pubrec_is_delivered_by_its_broker_after_the_return(
        broker_factory, gateway):
    # The main upstream answered PUBREC; the bridge's PUBREL is lost with
    # the link, which stays down: the bridge carries on on the secondary.
    # The PUBREL is owed to the main broker (it delivers at PUBREL): kept
    # for it, not completed on the secondary, and sent once the bridge is
    # back there (session present 1): m1 delivered there, once.
    main = broker_factory()
    sec = broker_factory()
    r = Relay(main.port, drop_up=0x62, cut=True)
    sm, ss = _Sub(main.port, "subM", "s/#"), _Sub(sec.port, "subS", "s/#")
    gw, said = gateway(["127.0.0.1:%d" % r.port, "127.0.0.1:%d" % sec.port], ["s/# out 2"])
    node = MQTTClient("node", "127.0.0.1", gw.port, timeout_ms=10000)
    try:
        assert _wait(lambda: _connects(said) == 1)
        node.connect()
        node.publish("s/x", b"m1", qos=2)
        assert _wait(lambda: any("secondary address 1" in x for x in said)), said
        assert r.dropped and r.dropped[0][0] == 0x62
        node.publish("s/x", b"m2", qos=2)
        assert _wait(lambda: b"m2" in ss.got)
        r.open()  # the main address back: the probe takes the bridge there
        assert _wait(lambda: _connects(said) == 3), said
        node.publish("s/x", b"m3", qos=2)
        assert _wait(lambda: b"m1" in sm.got and b"m3" in sm.got)
        time.sleep(1)  # (a duplicate would come now)
        got = sm.got + ss.got
        assert [got.count(m) for m in (b"m1", b"m2", b"m3")] == [1, 1, 1], (sm.got, ss.got)
        assert b"m1" in sm.got  # from the broker that took it
        assert any("QoS 2 state of 1 message(s) kept for 127.0.0.1:%d" % r.port in x
                   for x in said), said
        assert any("QoS 2 state of 1 message(s) handed back to" in x for x in said), said
    finally:
        node.disconnect()
        sm.stop()
        ss.stop()
        r.close()


def test_in_the_secondarys_held_ids_do_not_drop_the_main_brokers_messages(
        broker_factory, gateway):
    # On the secondary the bridge answered PUBREC for a QoS 2 message whose
    # PUBREL is lost; the main address comes back (it kept the bridge's
    # session: session present 1) and numbers its ids from 1 too. The
    # secondary's id stays with the secondary: the main broker's message
    # with that id is delivered, not taken for a resend.
    main = broker_factory(persistence=True)
    sec = broker_factory()
    r = Relay(sec.port, drop_down=0x62)
    gw, said = gateway(["127.0.0.1:%d" % main.port, "127.0.0.1:%d" % r.port], ["c/# in 2"])
    got = []
    local = MQTTClient("local", "127.0.0.1", gw.port)
    local.set_callback(lambda t, m: got.append(bytes(m)))

    def pump(s):
        end = time.time() + s
        while time.time() < end:
            local.poll(50)

    def publish(port, cid, m):
        p = MQTTClient(cid, "127.0.0.1", port)
        p.connect()
        p.publish("c/x", m, qos=2)
        p.disconnect()
    try:
        assert _wait(lambda: _connects(said) == 1)
        local.connect()
        local.subscribe("c/#", 2)
        pump(0.5)
        main.stop()  # (its session of the bridge saved)
        assert _wait(lambda: any("secondary address 1" in x for x in said))
        pump(0.5)
        publish(sec.port, "pubS", b"from-S")
        pump(1)
        assert r.dropped  # the secondary's PUBREL, lost
        main.start()
        assert _wait(lambda: _connects(said) == 3), said
        pump(0.5)
        publish(main.port, "pubM", b"from-M")
        publish(main.port, "pubM", b"from-M2")
        end = time.time() + 10
        while len(got) < 3 and time.time() < end:
            local.poll(50)
        pump(0.5)
        assert sorted(got) == [b"from-M", b"from-M2", b"from-S"], got
        assert any("QoS 2 state of 1 message(s) kept for 127.0.0.1:%d" % r.port in x
                   for x in said), said
    finally:
        local.disconnect()
        r.close()


def test_out_the_state_kept_for_an_address_survives_a_restart(broker_factory, tmp_path):
    # As the first test, the gateway a process with a store (--store), and
    # killed (SIGKILL: a power loss) while the PUBREL owed to the main
    # broker is kept for it: started again, it keeps it still, and sends
    # it once the bridge is back on the main address.
    main = broker_factory()
    sec = broker_factory()
    r = Relay(main.port, drop_up=0x62, cut=True)
    sm, ss = _Sub(main.port, "subM", "s/#"), _Sub(sec.port, "subS", "s/#")
    conf = tmp_path / "bridge.conf"
    conf.write_text("connection up\naddress 127.0.0.1:%d 127.0.0.1:%d\nround_robin false\n"
                    "topic s/# out 2\nrestart_timeout 1\nremote_clientid gw\n"
                    % (r.port, sec.port))
    port = free_port()
    log = tmp_path / "gw.log"
    cmd = umqtt3_broker_cmd(port, "--sys-interval", "0", "--bridge-config", str(conf),
                            "--store", str(tmp_path / "store"))

    def run():
        with open(log, "ab") as out:
            return start(cmd, port, stdout=out, stderr=subprocess.STDOUT)
    gw = run()
    node = None
    try:
        assert _wait(lambda: "connected to" in log.read_text()), log.read_text()
        node = MQTTClient("node", "127.0.0.1", port, timeout_ms=10000)
        node.connect()
        node.publish("s/x", b"m1", qos=2)
        assert _wait(lambda: "message(s) kept for 127.0.0.1:%d" % r.port in log.read_text()), \
            log.read_text()
        assert _wait(lambda: "secondary address 1" in log.read_text()), log.read_text()
        node.publish("s/x", b"m2", qos=2)
        assert _wait(lambda: b"m2" in ss.got)
        node.disconnect()
        node = None
        gw.send_signal(signal.SIGKILL)
        gw.wait()
        gw = run()
        assert _wait(lambda: log.read_text().count("secondary address 1") == 2), log.read_text()
        r.open()  # the main address back: the probe takes the bridge there
        assert _wait(lambda: b"m1" in sm.got), (sm.got, ss.got, log.read_text())
        time.sleep(1)  # (a duplicate would come now)
        got = sm.got + ss.got
        assert [got.count(m) for m in (b"m1", b"m2")] == [1, 1], (sm.got, ss.got)
    finally:
        if node is not None:
            node.disconnect()
        stop(gw)
        sm.stop()
        ss.stop()
        r.close()
