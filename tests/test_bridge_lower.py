# What the bridge's upstream client already holds when an MQTT 5 upstream
# lowers its limits between two connections (AWS IoT Core's Maximum QoS 1,
# a mosquitto reconfigured with `max_qos`, `retain_available false`,
# `max_packet_size`): the client's resend hands each message the new limits
# refuse to the bridge (Core.lower, Bridge._lower), which sends it lowered
# under its packet id (QoS down to the upstream's maximum
# [MQTT-3.2.2-11], the retain flag cleared [MQTT-3.2.2-14]) or drops it as
# too large [MQTT-3.2.2-15], counted in too_large. Nothing the gateway
# acknowledged to a node is lost on the way.
#
# First against a scripted upstream over in-memory pipes (it withholds its
# acks, so the messages stay in flight, and it shows the packet ids), the
# gateway with and without a store; then against Debian's mosquitto,
# stopped while a node publishes and started again with the limits in its
# configuration.
import subprocess
import time

import pytest

import mosq
from test_bridge import World
from tools.procs import free_port, start, stop, umqtt3_broker_cmd
from umqtt3.broker import Broker
from umqtt3.bridge import install
from umqtt3.client import MQTTClient
from umqtt3.codec import PUBACK, PUBREC, PUBREL, PUBCOMP
from umqtt3.transport import Pipe, Closed
from paho_peer import Watch  # tests/paho_peer.py
from relay import Relay

MAX_QOS1 = b"\x24\x01"  # CONNACK properties: Maximum QoS 1
MAX_QOS0 = b"\x24\x00"
NO_RETAIN = b"\x25\x00"  # Retain Available 0
MAX_200 = b"\x27\x00\x00\x00\xc8"  # Maximum Packet Size 200
STATUS = b"umqtt3/bridge/umqtt3-up/state"


def _varint(b, i):
    n = sh = 0
    while True:
        x = b[i]
        i += 1
        n |= (x & 0x7F) << sh
        if not x & 0x80:
            return n, i
        sh += 7


class Upstream:
    """A scripted MQTT 5 upstream broker: each connection gets a CONNACK
    with Session Present 1 and the properties of the moment (props); every
    PUBLISH is recorded as (qos, retain, dup, pid, topic, payload) and
    acknowledged only while ack is True; a PUBREL gets its PUBCOMP."""

    def __init__(self):
        self.props = b""
        self.ack = False
        self.down = False
        self.end = None
        self.rx = bytearray()
        self.got = []
        self.connects = 0

    def link(self):
        if self.down:
            raise OSError(111)
        a, self.end = Pipe.pair(8192)
        self.rx = bytearray()
        return a

    def cut(self):
        self.down = True
        if self.end is not None:
            self.end.close()
            self.end = None

    def send(self, b):
        assert self.end.write(b) == len(b)

    def answer(self, t, pid):
        self.send(bytes((t << 4 | (2 if t == PUBREL else 0), 2, pid >> 8, pid & 255)))

    def poll(self):
        e = self.end
        if e is None:
            return 0
        buf = bytearray(4096)
        try:
            n = e.readinto(buf, len(buf))
        except Closed:
            n = None
        if n:
            self.rx += buf[:n]
        work = 0
        while len(self.rx) >= 2:
            rl, i = _varint(self.rx, 1)
            if len(self.rx) < i + rl:
                break
            h = self.rx[0]
            body = bytes(self.rx[i:i + rl])
            self.rx = self.rx[i + rl:]
            work += 1
            self.packet(h, body)
        return work

    def packet(self, h, body):
        t = h >> 4
        if t == 1:  # CONNECT
            self.connects += 1
            p = self.props
            self.send(bytes((0x20, 3 + len(p), 1, 0, len(p))) + p)
        elif t == 3:  # PUBLISH
            q = (h >> 1) & 3
            tn = (body[0] << 8) | body[1]
            topic = body[2:2 + tn]
            i = 2 + tn
            pid = None
            if q:
                pid = (body[i] << 8) | body[i + 1]
                i += 2
            pn, i = _varint(body, i)  # the properties' length
            self.got.append((q, h & 1, h >> 3 & 1, pid, topic, body[i + pn:]))
            if q and self.ack:
                self.answer(PUBACK if q == 1 else PUBREC, pid)
        elif t == 6:  # PUBREL
            self.answer(PUBCOMP, (body[0] << 8) | body[1])
        elif t == 8:  # SUBSCRIBE: granted as asked
            self.send(bytes((0x90, 4, body[0], body[1], 0, 1)))
        elif t == 12:  # PINGREQ
            self.send(b"\xd0\x00")


class Gateway(World):
    """test_bridge's gateway, its upstream the script."""

    def __init__(self, store=None, **cfg):
        self.script = Upstream()
        World.__init__(self, ["s/# out 2"], gw_kw={"store": store} if store else None,
                       level=5, **cfg)

    def uplink(self):
        return self.script.link()

    def poll_once(self, t=0):
        return self.gw.poll_once(0) + self.script.poll()


def _node_sends(w, msgs, pid=1):
    node = w.open_on(w.gw)
    node.connect("n%d" % pid)
    for topic, payload, q, retain in msgs:
        node.publish(topic, payload, q, pid=pid, retain=retain)
        if q == 1:
            node.expect(PUBACK, pid)
        elif q == 2:
            node.expect(PUBREC, pid)
            node.ack(PUBREL, pid)
            node.expect(PUBCOMP, pid)
        pid += 1
    return node


HELD = [("s/r2", b"ret2", 2, True), ("s/q2", b"two", 2, False), ("s/r1", b"ret1", 1, True),
        ("s/big", b"x" * 300, 1, False), ("s/q1", b"one", 1, False)]


def _held_in_flight(store):
    # the node's messages reach the upstream, which acknowledges none: the
    # upstream client holds them all when the link breaks
    w = Gateway(store)
    w.run(50)
    assert w.bridge.up and w.script.connects == 1
    _node_sends(w, HELD)
    w.run(100)
    first = w.script.got
    ours = [m for m in first if m[4] != STATUS]
    assert [(m[0], m[1], m[5]) for m in ours] == [(q, int(r), p) for t, p, q, r in HELD]
    assert w.bridge.client.inflight() == 6  # and the status message
    w.script.cut()
    w.run(20)
    assert not w.bridge.up
    w.script.got = []
    return w, {m[4]: m[3] for m in first}


@pytest.mark.parametrize("durable", [False, True])
def test_held_messages_go_up_lowered_and_the_too_large_one_is_counted(durable, tmp_path):
    # the upstream comes back with Maximum QoS 1, no retain and a Maximum
    # Packet Size of 200: every held message goes again under its packet
    # id, with DUP [MQTT-4.4.0-1, MQTT-3.3.1-1], at QoS 1 and without the
    # retain flag; the 300-byte one is dropped and counted, never sent
    w, pids = _held_in_flight(str(tmp_path / "gw") if durable else None)
    w.script.props = MAX_QOS1 + NO_RETAIN + MAX_200
    w.script.down = False
    w.run(100)
    assert w.bridge.up and w.script.connects == 2
    got = [m for m in w.script.got if m[4] != STATUS]
    assert [(m[4], m[5]) for m in got] == [(b"s/r2", b"ret2"), (b"s/q2", b"two"),
                                           (b"s/r1", b"ret1"), (b"s/q1", b"one")], got
    assert all(m[:3] == (1, 0, 1) for m in got), got  # QoS 1, not retained, DUP
    assert [m[3] for m in got] == [pids[m[4]] for m in got]  # the same packet ids
    b = w.bridge
    assert b.too_large == 1
    figures = {}
    w.hub.sys(lambda k, v: figures.__setitem__(k, v))
    assert figures["bridge/up/too_large"] == 1
    # the upstream acknowledges them (PUBACK: QoS 1): the client holds none
    for m in w.script.got:
        w.script.answer(PUBACK, m[3])
    w.run(50)
    assert b.client.inflight() == 0 and not b.q.keys


def test_a_retained_qos2_message_stays_qos2_under_its_packet_id():
    # the upstream keeps QoS 2 but no longer retained messages: the message
    # goes again at QoS 2 with DUP, without the retain flag, under the id
    # the upstream already holds, so it takes it once [MQTT-4.3.3-2]; the
    # flow ends with PUBREC, PUBREL, PUBCOMP
    w, pids = _held_in_flight(None)
    w.script.props = NO_RETAIN
    w.script.down = False
    w.script.ack = True
    w.run(100)
    got = [m for m in w.script.got if m[4] != STATUS]
    assert [(m[4], m[:4]) for m in got] == [
        (b"s/r2", (2, 0, 1, pids[b"s/r2"])), (b"s/q2", (2, 0, 1, pids[b"s/q2"])),
        (b"s/r1", (1, 0, 1, pids[b"s/r1"])), (b"s/big", (1, 0, 1, pids[b"s/big"])),
        (b"s/q1", (1, 0, 1, pids[b"s/q1"]))], got
    assert w.bridge.client.inflight() == 0 and w.bridge.too_large == 0


def test_an_upstream_of_maximum_qos_0_gets_them_once_at_qos_0():
    # Maximum QoS 0: each held message goes at QoS 0, without a packet id
    # and without DUP [MQTT-2.2.1-2, MQTT-3.3.1-2], and the client forgets
    # it once it is handed to the link (QoS 0 has no ack); a message
    # queued behind them follows, lowered as well
    w, pids = _held_in_flight(None)
    w.script.props = MAX_QOS0 + MAX_200
    w.script.down = False
    w.run(100)
    node = _node_sends(w, [("s/after", b"later", 2, False)], pid=9)
    w.run(100)
    got = [m for m in w.script.got if m[4] != STATUS]
    assert [(m[4], m[5]) for m in got] == [(b"s/r2", b"ret2"), (b"s/q2", b"two"),
                                           (b"s/r1", b"ret1"), (b"s/q1", b"one"),
                                           (b"s/after", b"later")], got
    assert all(m[:4] == (0, 1 if m[4][2:3] == b"r" else 0, 0, None) for m in got), got
    assert w.bridge.client.inflight() == 0 and w.bridge.too_large == 1
    node.close()


def test_after_a_restart_of_the_gateway_too(tmp_path):
    # held by the client's store across a gateway restart (its records on
    # the broker's store), then an upstream with lower limits: the same
    d = str(tmp_path / "gw")
    w, pids = _held_in_flight(d)
    w.gw.close()
    script = w.script
    script.props = MAX_QOS1 + NO_RETAIN
    script.down = False
    gw = Broker(port=None, sys_interval=0, store=d)
    hub = install(gw, [{"name": "up", "rules": ["s/# out 2"], "link": script.link,
                        "backoff_ms": (1, 1), "level": 5}])
    for _ in range(100):
        gw.poll_once(0)
        script.poll()
    got = [m for m in script.got if m[4] != STATUS]
    assert [(m[4], m[:4]) for m in got] == [
        (b"s/r2", (1, 0, 1, pids[b"s/r2"])), (b"s/q2", (1, 0, 1, pids[b"s/q2"])),
        (b"s/r1", (1, 0, 1, pids[b"s/r1"])), (b"s/big", (1, 0, 1, pids[b"s/big"])),
        (b"s/q1", (1, 0, 1, pids[b"s/q1"]))], got
    assert hub.all[0].too_large == 0
    gw.close()


# ------------------------------------------------ a real mosquitto upstream

try:
    import paho.mqtt.client as mqtt
except ImportError:
    mqtt = None


def _sys(port, name, want, seconds=10):
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


def _gateway(tmp_path, up_port):
    """Our broker with a store, bridging `s/# out 2` at MQTT 5 to
    127.0.0.1:up_port; (process, port)."""
    port = free_port()
    conf = tmp_path / "bridge.conf"
    conf.write_text("connection up\naddress 127.0.0.1:%d\ntopic s/# out 2\n"
                    "restart_timeout 1 2\nbridge_protocol_version mqttv50\n" % up_port)
    gw = start(umqtt3_broker_cmd(port, "--store", str(tmp_path / "gw"), "--sys-interval", "1",
                                 "--bridge-config", str(conf)),
               port, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return gw, port


@pytest.mark.slow
@pytest.mark.skipif(not mosq.MOSQUITTO or mqtt is None, reason="no mosquitto or paho-mqtt")
@pytest.mark.parametrize("limits,qos", [
    (["max_qos 1", "retain_available false", "max_packet_size 300"], (1, 1, 1, 1)),
    (["retain_available false"], (2, 2, 1, 1)),
])
def test_mosquitto_restarted_with_lower_limits_gets_what_was_held(broker_factory, tmp_path,
                                                                  limits, qos):
    # mosquitto (persistence on) is stopped while a node publishes through
    # the gateway: the bridge's client takes the messages (stored, for the
    # next link). mosquitto comes back with the limits in its configuration:
    # each message reaches the upstream's subscriber once, lowered, and the
    # one larger than max_packet_size is counted in too_large
    up = broker_factory(persistence=True)
    watch = Watch(up.port, "s/#", "watch", 3600)
    gw, port = _gateway(tmp_path, up.port)
    again = None
    node = MQTTClient("node", "127.0.0.1", port)
    try:
        assert _sys(port, "connected", 1) == 1
        up.stop()
        assert _sys(port, "connected", 0) == 0
        node.connect()
        sent = [("s/r2", b"ret2", 2, True), ("s/q2", b"two", 2, False),
                ("s/r1", b"ret1", 1, True), ("s/big", b"x" * 400, 1, False),
                ("s/q1", b"one", 1, False)]
        for t, m, q, r in sent:
            node.publish(t, m, r, q)  # acknowledged: on the gateway's store
        assert _sys(port, "queued", 0) == 0  # all of them with the bridge's client
        again = mosq.Broker(up.dir, port=up.port, persistence=True, extra=limits).start()
        want = [("s/r2", b"ret2", qos[0], False), ("s/q2", b"two", qos[1], False),
                ("s/r1", b"ret1", qos[2], False), ("s/q1", b"one", qos[3], False)]
        big = 1 if "max_packet_size 300" in limits else 0
        if not big:
            want.insert(3, ("s/big", b"x" * 400, 1, False))
        got = watch.take(len(want))
        time.sleep(0.5)
        while not watch.got.empty():
            got.append(watch.got.get())
        # each once (mosquitto hands a QoS 2 message on at PUBREL, so the
        # order holds per QoS)
        assert sorted(got) == sorted(want), got
        for q in (1, 2):
            assert [m for m in got if m[2] == q] == [m for m in want if m[2] == q], got
        assert _sys(port, "too_large", big) == big
        assert _sys(port, "connects", 2) == 2
    finally:
        node.disconnect()
        watch.close()
        stop(gw)
        if again is not None:
            again.stop()
            again.kill()


@pytest.mark.slow
@pytest.mark.skipif(not mosq.MOSQUITTO or mqtt is None, reason="no mosquitto or paho-mqtt")
def test_mosquitto_that_holds_the_id_takes_the_lowered_qos2_message_once(broker_factory,
                                                                          tmp_path):
    # mosquitto has taken the bridge's retained QoS 2 PUBLISH (its PUBREC
    # never reaches the bridge), stops, and comes back with
    # `retain_available false`: the bridge's client resends the message at
    # QoS 2 under the same packet id without the retain flag, mosquitto
    # holds the id in its session (persistence) and takes it as the same
    # message, and its subscriber gets it once [MQTT-4.3.3-2]; refused, as
    # before, it never would. (mosquitto hands a QoS 2 message on at PUBREL,
    # so a new id would not show here as a second copy: the crash world's
    # upstream, which hands on at PUBLISH, does show it,
    # tests/test_bridge_crash_lower.py.)
    up = broker_factory(persistence=True)
    watch = Watch(up.port, "s/#", "watch", 3600)
    relay = Relay(up.port)
    gw, port = _gateway(tmp_path, relay.port)
    again = None
    node = MQTTClient("node", "127.0.0.1", port)
    try:
        assert _sys(port, "connected", 1) == 1
        relay.mute()
        node.connect()
        node.publish("s/r2", b"ret2", True, 2)
        node.publish("s/q2", b"two", False, 2)
        node.publish("s/q1", b"one", False, 1)
        assert _sys(port, "queued", 0) == 0
        time.sleep(1.5)  # mosquitto has them (and its subscriber the QoS 1 one)
        up.stop()
        again = mosq.Broker(up.dir, port=up.port, persistence=True,
                            extra=["retain_available false"]).start()
        relay.unmute()
        assert _sys(port, "connects", 2, 15) == 2
        got = watch.take(3)
        time.sleep(1.0)
        while not watch.got.empty():
            got.append(watch.got.get())
        twos = sorted(m for m in got if m[2] == 2)
        assert twos == [("s/q2", b"two", 2, False), ("s/r2", b"ret2", 2, False)], got
        assert ("s/q1", b"one", 1, False) in got, got  # QoS 1: at least once
        assert "Reused message ID" not in again.log_text()
    finally:
        node.disconnect()
        watch.close()
        stop(gw)
        relay.close()
        if again is not None:
            again.stop()
            again.kill()
