# The bridge against a real upstream: Debian's mosquitto (with persistence)
# on 127.0.0.1 and a free port, our broker as the gateway process
# (python -m umqtt3.broker --store DIR --bridge ...), nodes publishing
# readings at QoS 1 and 2 through it: our client (FileStore, persistent
# session, reconnect) and mosquitto_pub. Meanwhile the upstream broker is
# stopped and started again, and the gateway is SIGKILLed and restarted on
# its store. A paho subscriber on the upstream (persistent session, QoS 2)
# must get every QoS 2 reading exactly once and every QoS 1 reading at
# least once, in order per publisher [MQTT-4.3.2-*, MQTT-4.3.3-*, MQTT-4.6.0-*].
import os
import queue
import signal
import subprocess
import threading
import time

import pytest

from certs import self_signed
from mosq import MOSQUITTO, MOSQUITTO_PUB, Broker as Mosquitto
from tools.procs import free_port, start, stop, umqtt3_broker_cmd
from umqtt3.client import MQTTClient
from umqtt3.store import FileStore

mqtt = pytest.importorskip("paho.mqtt.client")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not (MOSQUITTO and MOSQUITTO_PUB), reason="no mosquitto")]


class Watch:
    """The upstream subscriber: paho, persistent session, reconnecting."""

    def __init__(self, port):
        self.got = queue.Queue()
        c = self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="watch",
                                 clean_session=False)
        c.on_connect = lambda c, u, f, rc, p: c.subscribe("site/#", 2)
        c.on_message = lambda c, u, m: self.got.put((m.topic, bytes(m.payload), m.qos))
        c.reconnect_delay_set(0.05, 0.3)
        c.connect("127.0.0.1", port, keepalive=5)
        c.loop_start()

    def close(self):
        self.c.disconnect()
        self.c.loop_stop()


def _gateway(port, up, store):
    return start(umqtt3_broker_cmd(port, "--quiet", "--store", store, "--sys-interval", "0",
                                   "--bridge", "127.0.0.1:%d" % up,
                                   "--bridge-topic", "r/# out 2 gw/ site/"),
                 port, stdout=subprocess.DEVNULL)


def _mpub(port, topic, qos, msg):
    # one reading per run; refused or cut short: that run fails and the
    # test gives up on the gateway being up (it is, whenever this is called)
    r = subprocess.run([MOSQUITTO_PUB, "-h", "127.0.0.1", "-p", str(port), "-t", topic,
                        "-q", str(qos), "-m", msg, "-i", "mp%d" % qos], timeout=20,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert r.returncode == 0, r.stderr


def test_readings_reach_mosquitto_across_outages_and_gateway_kills(tmp_path):
    up = Mosquitto(tmp_path / "up", persistence=True)
    up.start()
    gport = free_port()
    store = str(tmp_path / "gw")
    gw = _gateway(gport, up.port, store)
    watch = Watch(up.port)
    node = MQTTClient("node1", "127.0.0.1", gport, store=FileStore(str(tmp_path / "node")),
                      reconnect=True, backoff_ms=(20, 200), window=16, timeout_ms=3000)
    node.connect(clean_session=False)
    sent = {"c/q1": 0, "c/q2": 0, "m/q1": 0, "m/q2": 0}

    def client_batch(n):
        for _ in range(n):
            for q in (1, 2):
                t = "c/q%d" % q
                end = time.monotonic() + 30
                while True:
                    try:
                        node.publish("gw/r/" + t, b"%d" % sent[t], qos=q, wait=False)
                        break
                    except Exception:  # Busy, or the gateway is down: poll and retry
                        assert time.monotonic() < end, "the node could not publish"
                        try:
                            node.poll(10)
                        except OSError:
                            time.sleep(0.01)
                sent[t] += 1
                node.poll(0)

    def mpub_batch(n):
        for _ in range(n):
            for q in (1, 2):
                t = "m/q%d" % q
                _mpub(gport, "gw/r/" + t, q, "%d" % sent[t])
                sent[t] += 1

    def drain(s):
        end = time.monotonic() + s
        while time.monotonic() < end:
            try:
                node.poll(10)
            except OSError:
                time.sleep(0.01)

    try:
        client_batch(5)
        mpub_batch(2)
        up.stop()  # the uplink goes down: the gateway queues
        client_batch(5)
        mpub_batch(2)
        drain(0.3)
        up.start()
        client_batch(5)
        gw.send_signal(signal.SIGKILL)  # power loss, as far as a process can tell
        gw.wait()
        client_batch(2)  # stored by the node, resent once the gateway is back
        gw = _gateway(gport, up.port, store)
        drain(0.5)
        mpub_batch(2)
        up.stop()
        client_batch(5)
        gw.send_signal(signal.SIGKILL)
        gw.wait()
        gw = _gateway(gport, up.port, store)  # on its store, uplink still down
        drain(0.5)
        mpub_batch(2)
        up.start()
        client_batch(5)
        deadline = time.monotonic() + 60
        while node.inflight() and time.monotonic() < deadline:
            node.poll(10)
        assert not node.inflight(), "the gateway did not acknowledge every reading"
        want = sum(sent.values())
        got = []
        seen = set()
        while time.monotonic() < deadline:
            try:
                m = watch.got.get(timeout=0.5)
            except queue.Empty:
                if all(("site/r/" + t, str(i)) in seen for t in sent for i in range(sent[t])):
                    break
                continue
            got.append(m)
            seen.add((m[0], m[1].decode()))
        time.sleep(1.0)  # and nothing more comes (no late duplicate)
        while not watch.got.empty():
            got.append(watch.got.get())
    finally:
        node.disconnect()
        watch.close()
        stop(gw)
        up.stop()
    assert want == sum(sent.values())
    for t, n in sent.items():
        vals = [int(m[1]) for m in got if m[0] == "site/r/" + t]
        first = []
        for v in vals:
            if v not in first:
                first.append(v)
        assert first == list(range(n)), (t, vals)  # every reading, in order
        if t.endswith("q2"):
            assert vals == list(range(n)), (t, vals)  # exactly once


def _gateway_pump(b, cond, seconds=10):
    end = time.monotonic() + seconds
    while not cond() and time.monotonic() < end:
        b.poll_once(5)
    return cond()


def _upstream_watch(port, ssl_ctx=None, user=None, password=None):
    got = []
    c = MQTTClient("w%d" % free_port(), "127.0.0.1", port, ssl=ssl_ctx, user=user,
                   password=password)
    c.set_callback(lambda t, m: got.append((t, m)))
    c.connect()
    c.subscribe("site/#", 1)
    return c, got


def test_tls_to_mosquitto_with_a_context_of_our_own(broker_factory, tmp_path):
    import ssl
    from umqtt3.broker import Broker
    from umqtt3.bridge import install
    cert, key = self_signed(tmp_path)
    up = broker_factory(tls=(cert, key))
    ctx = ssl.create_default_context(cafile=cert)  # trusts only this certificate
    w, got = _upstream_watch(up.port, ctx)
    b = Broker(port=None, sys_interval=0, store=str(tmp_path / "gw"))
    hub = install(b, [{"name": "tls", "port": up.port, "tls": ctx,
                       "rules": ['s/# out 1 "" site/']}])
    try:
        assert _gateway_pump(b, lambda: hub.all[0].up), "no TLS connection upstream"
        b.publish("s/x", b"over tls", 1)
        assert _gateway_pump(b, lambda: (w.poll(5), got)[1])
        assert got == [(b"site/s/x", b"over tls")]
    finally:
        b.close()
        w.disconnect()
    # a context that does not trust the certificate: no connection, nothing sent
    b = Broker(port=None, sys_interval=0)
    hub = install(b, [{"name": "bad", "port": up.port, "tls": ssl.create_default_context(),
                       "rules": ['s/# out 1 "" site/'], "backoff_ms": (50, 100)}])
    try:
        assert not _gateway_pump(b, lambda: hub.all[0].up, 1.5)
    finally:
        b.close()


def test_bridge_cafile_in_the_configuration_file(broker_factory, tmp_path):
    # `bridge_cafile FILE`: TLS that trusts that CA alone; a certificate it
    # did not sign fails the handshake, and nothing is sent
    import ssl
    from umqtt3.broker import Broker
    from umqtt3.bridge import install
    from umqtt3.bridge_config import parse
    cert, key = self_signed(tmp_path)
    other, _ = self_signed(tmp_path, "other")
    up = broker_factory(tls=(cert, key))
    w, got = _upstream_watch(up.port, ssl.create_default_context(cafile=cert))
    conf = ("connection %s\naddress 127.0.0.1:%d\ntopic s/# out 1 \"\" site/\n"
            "restart_timeout 1 1\nbridge_cafile %s\n")
    b = Broker(port=None, sys_interval=0)
    hub = install(b, parse(conf % ("good", up.port, cert)))
    try:
        assert _gateway_pump(b, lambda: hub.all[0].up), "no TLS connection upstream"
        b.publish("s/c", b"checked", 1)
        assert _gateway_pump(b, lambda: (w.poll(5), got)[1])
        assert got == [(b"site/s/c", b"checked")]
    finally:
        b.close()
        w.disconnect()
    b = Broker(port=None, sys_interval=0)
    hub = install(b, parse(conf % ("bad", up.port, other)))
    try:
        b.publish("s/c", b"must not go", 1)
        assert not _gateway_pump(b, lambda: hub.all[0].up, 2.5)
        assert hub.all[0].tries >= 2  # the handshake failed, and was tried again
        br = hub.all[0]
        assert len(br.q.keys) + br.client.inflight() == 1  # still held, not lost
    finally:
        b.close()


def test_client_certificate_to_an_upstream_that_requires_one(broker_factory, tmp_path):
    # mosquitto's TLS listener with require_certificate true, trusting the
    # gateway's (self-signed) certificate: `bridge_certfile` and
    # `bridge_keyfile` get the messages up; without them the handshake
    # fails, the bridge tries again after its backoff, and the message
    # stays held, neither lost nor sent
    import ssl
    from umqtt3.broker import Broker
    from umqtt3.bridge import install
    from umqtt3.bridge_config import parse
    cert, key = self_signed(tmp_path)
    gcert, gkey = self_signed(tmp_path, "gateway")
    up = broker_factory(tls=(cert, key), extra=["cafile %s" % gcert, "require_certificate true"])
    wctx = ssl.create_default_context(cafile=cert)
    wctx.load_cert_chain(gcert, gkey)
    w, got = _upstream_watch(up.port, wctx)
    conf = ("connection %s\naddress 127.0.0.1:%d\ntopic s/# out 1 \"\" site/\n"
            "restart_timeout 1 1\nbridge_protocol_version mqttv50\nbridge_cafile %s\n")
    b = Broker(port=None, sys_interval=0)
    hub = install(b, parse(conf % ("cert", up.port, cert) +
                           "bridge_certfile %s\nbridge_keyfile %s\n" % (gcert, gkey)))
    try:
        assert _gateway_pump(b, lambda: hub.all[0].up), "no TLS connection upstream"
        b.publish("s/x", b"with a certificate", 1)
        assert _gateway_pump(b, lambda: (w.poll(5), got)[1])
        assert got == [(b"site/s/x", b"with a certificate")]
    finally:
        b.close()
        w.disconnect()
    b = Broker(port=None, sys_interval=0)
    hub = install(b, parse(conf % ("nocert", up.port, cert)))
    try:
        b.publish("s/x", b"must not go", 1)
        assert not _gateway_pump(b, lambda: hub.all[0].up, 2.5)
        br = hub.all[0]
        assert br.tries >= 2 and br.connects == 0  # refused, and tried again
        assert len(br.q.keys) + br.client.inflight() == 1  # still held, not lost
    finally:
        b.close()


def test_user_and_password_to_the_upstream(tmp_path):
    from umqtt3.broker import Broker
    from umqtt3.bridge import install
    users = tmp_path / "users"
    users.write_text("gw:s3cret\nwatch:w\n")
    port = free_port()
    upstream = start(umqtt3_broker_cmd(port, "--quiet", "--users", str(users)), port,
                     stdout=subprocess.DEVNULL)
    try:
        w, got = _upstream_watch(port, user="watch", password="w")
        # the right password first: after wrong ones the upstream's login
        # backoff refuses this address for a while, whatever the password
        for pw, ok in (("s3cret", True), ("wrong", False)):
            b = Broker(port=None, sys_interval=0)
            hub = install(b, [{"name": "auth", "port": port, "user": "gw", "password": pw,
                               "rules": ['s/# out 1 "" site/'], "backoff_ms": (50, 100)}])
            try:
                assert _gateway_pump(b, lambda: hub.all[0].up, 1.5 if not ok else 10) == ok
                assert (hub.all[0].refusals > 1) == (not ok)  # refused, and asked again
                if ok:
                    b.publish("s/y", b"logged in", 1)
                    assert _gateway_pump(b, lambda: (w.poll(5), got)[1])
                    assert got == [(b"site/s/y", b"logged in")]
            finally:
                b.close()
        w.disconnect()
    finally:
        stop(upstream)


def test_qos2_from_mosquitto_reaches_local_subscribers_once_across_gateway_kills(tmp_path):
    # an `in` rule: paho publishes QoS 2 readings to the upstream mosquitto,
    # the bridge's persistent session takes them, the gateway routes them to
    # a local subscriber (our client, FileStore, persistent session) while
    # the gateway process is SIGKILLed and restarted on its store, with
    # messages on their way each time: every one exactly once, in order
    # [MQTT-4.3.3-2, MQTT-4.6.0-6]
    up = Mosquitto(tmp_path / "up", persistence=True)
    up.start()
    gport = free_port()
    store = str(tmp_path / "gw")

    def gateway():
        return start(umqtt3_broker_cmd(gport, "--quiet", "--store", store, "--sys-interval", "0",
                                       "--bridge", "127.0.0.1:%d" % up.port,
                                       "--bridge-topic", "cmd/# in 2 dev/ site/"),
                     gport, stdout=subprocess.DEVNULL)
    gw = gateway()
    got = []
    sub = MQTTClient("lsub", "127.0.0.1", gport, store=FileStore(str(tmp_path / "lsub")),
                     reconnect=True, backoff_ms=(20, 200), timeout_ms=3000)
    sub.set_callback(lambda t, m: got.append((t, m)))
    sub.connect(clean_session=False)
    sub.subscribe("dev/#", 2)
    pub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="upub", clean_session=False)
    pub.connect("127.0.0.1", up.port, keepalive=10)
    pub.loop_start()

    def pump(s, cond=lambda: False):
        end = time.monotonic() + s
        while time.monotonic() < end and not cond():
            try:
                sub.poll(10)
            except OSError:
                time.sleep(0.01)

    sent = 0
    try:
        # the bridge has subscribed upstream once a probe comes through
        for _ in range(100):
            pub.publish("site/cmd/probe", b"p", 1)
            pump(0.1, lambda: got)
            if got:
                break
        assert got, "nothing came in over the bridge"
        del got[:]
        infos = []
        for i, pause in enumerate((0.0, 0.02, 0.05, 0.1, 0.2)):
            for _ in range(8):
                infos.append(pub.publish("site/cmd/n", b"%d" % sent, 2))
                sent += 1
            pump(pause)
            gw.send_signal(signal.SIGKILL)  # with readings on their way in
            gw.wait()
            if i == 2:
                time.sleep(0.3)  # mosquitto queues for the bridge's session meanwhile
            gw = gateway()
        for info in infos:
            info.wait_for_publish(20)
        pump(60, lambda: len([m for m in got if m[0] == b"dev/cmd/n"]) >= sent)
        pump(1.0)  # and nothing more comes (no late duplicate)
    finally:
        pub.loop_stop()
        pub.disconnect()
        sub.disconnect()
        stop(gw)
        up.stop()
    vals = [int(m) for t, m in got if t == b"dev/cmd/n"]
    assert vals == list(range(sent)), vals  # every one, once, in order
