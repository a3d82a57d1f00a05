# Back-pressure on a node while the bridge's uplink is up, against Debian's
# mosquitto 2.0.11 as the upstream and paho-mqtt as the node: a relay
# (tests/relay.py) holds back everything mosquitto sends the bridge, so its
# acks wait on a link that stays up, while the node sends a burst of QoS 1
# messages (and one QoS 2) far larger than bridge_queue_size. The node's
# PUBLISH that finds the queue full is held, not refused: its connection is
# never closed, and once the acks come every message reaches mosquitto's
# subscriber in order, QoS 1 at least once [MQTT-4.3.2-1], QoS 2 exactly
# once [MQTT-4.3.3-2]. The portable tests (tests/portable/test_bridge_hold.py)
# hold the rules one by one; this is the whole path over real sockets. And
# the CPython driver's own case, in process: a held PUBLISH cut between two
# of its 16 KB gulps of the socket.
import threading
import time

import pytest

from mosq import MOSQUITTO
from gateway_process import start_gateway
from relay import Relay
from test_bridge_failover import Sub
from tools.procs import stop

need_mosquitto = pytest.mark.skipif(not MOSQUITTO, reason="no mosquitto")

QUEUE = 5  # bridge_queue_size
BURST = 60  # the node's messages: 59 at QoS 1, one at QoS 2


def _gateway(tmp_path, relay_port, store):
    conf = ("connection up\naddress 127.0.0.1:%d\ntopic s/# out 2\n"
            "restart_timeout 1\nremote_clientid gw\nbridge_queue_size %d\n"
            "bridge_window 4\n" % (relay_port, QUEUE))
    args = ["--store", str(tmp_path / "store")] if store else []
    return start_gateway(tmp_path, conf, *args, sys_interval=1)


class Node:
    """paho-mqtt on the gateway, MQTT 3.1.1, 20 in flight: what it was
    acknowledged, and whether it was ever disconnected."""

    def __init__(self, port):
        import paho.mqtt.client as mqtt
        self.acked = set()
        self.lost = []
        self.ready = threading.Event()
        c = self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="node",
                                 clean_session=False)
        c.max_inflight_messages_set(20)
        c.on_connect = lambda *a: self.ready.set()
        c.on_publish = lambda c, u, mid, rc, p: self.acked.add(mid)
        c.on_disconnect = lambda c, u, f, rc, p: self.lost.append(str(rc))
        c.connect("127.0.0.1", port, keepalive=10)
        c.loop_start()
        assert self.ready.wait(10), "the node did not connect"

    def publish(self, topic, payload, qos):
        return self.c.publish(topic, payload, qos).mid

    def close(self):
        self.c.disconnect()
        self.c.loop_stop()


def _until(cond, seconds):
    end = time.monotonic() + seconds
    while not cond() and time.monotonic() < end:
        time.sleep(0.05)
    return cond()


@pytest.mark.slow
@need_mosquitto
@pytest.mark.parametrize("store", [False, True])
def test_a_burst_past_the_queue_is_held_not_refused_while_the_uplink_is_up(
        broker_factory, tmp_path, store):
    up = broker_factory()
    relay = Relay(up.port)
    sub = Sub(up.port, "far")
    gw, gport, log = _gateway(tmp_path, relay.port, store)
    node = Node(gport)
    try:
        node.publish("s/probe", b"probe", 1)
        assert _until(lambda: b"probe" in sub.payloads(), 30), log.read_text()  # the bridge is up
        relay.hold()  # mosquitto's acks wait from here on: the link stays up
        sent = [b"m%02d" % i for i in range(BURST)]
        mids = [node.publish("s/t", p, 2 if i == BURST // 2 else 1) for i, p in enumerate(sent)]
        # the node is acknowledged what the bridge's window and queue hold,
        # then its PUBLISH waits: nothing more is acknowledged, nothing refused
        assert _until(lambda: _sys_held(gport) > 0, 30), log.read_text()
        acked = len([m for m in mids if m in node.acked])
        assert acked < BURST // 2, acked
        assert not node.lost
        relay.release()  # the acks come: the queue drains, the node is read again
        assert _until(lambda: all(m in node.acked for m in mids), 60), \
            (len(node.acked), log.read_text())
        assert _until(lambda: set(sent) <= set(sub.payloads()), 30)
        got = [p for p in sub.payloads() if p in set(sent)]
        two = sent[BURST // 2]
        first = []
        for p in got:
            if p not in first and p != two:
                first.append(p)
        # the QoS 1 ones in order, each at least once (the QoS 2 one goes on
        # on at its PUBREL, as mosquitto releases it: 4.6 orders per QoS)
        assert first == [p for p in sent if p != two]
        assert got.count(two) == 1  # the QoS 2 one exactly once
        assert not node.lost, node.lost  # never disconnected
        text = log.read_text()
        assert "disconnect node" not in text and "queue full" not in text, text
    finally:
        node.close()
        sub.close()
        relay.close()
        stop(gw)


def _sys_held(gport):
    """The gateway's $SYS/broker/bridge/up/held, retained."""
    import paho.mqtt.client as mqtt
    got = []
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="sys")
    c.on_connect = lambda c, u, f, rc, p: c.subscribe("$SYS/broker/bridge/up/held", 0)
    c.on_message = lambda c, u, m: got.append(int(m.payload))
    c.connect("127.0.0.1", gport, keepalive=10)
    c.loop_start()
    try:
        _until(lambda: got, 10)
    finally:
        c.disconnect()
        c.loop_stop()
    return got[-1] if got else -1


# ------------------------------------------------------------ over a socket, in process
class _Gulps:
    """A gateway on a 127.0.0.1 socket (its driver reads 16 KB gulps,
    compat.server_link) bridging `s/# out 1` over an in-memory pipe to an
    upstream Broker that is frozen (not polled) while `frozen`; a raw node
    socket. Everything is polled in this thread."""

    def __init__(self):
        from umqtt3.broker import Broker
        from umqtt3.bridge import install
        self.up = Broker(port=None, sys_interval=0, max_packet=65536)
        self.gw = Broker(host="127.0.0.1", port=0, sys_interval=0, max_packet=65536)
        self.frozen = False
        self.hub = install(self.gw, [{"name": "up", "rules": ["s/# out 1"], "link": self._uplink,
                                      "backoff_ms": (1, 1), "queue_size": 2, "window": 1}])
        self.run(lambda: self.hub.all[0].up)
        import socket
        self.node = socket.create_connection(("127.0.0.1", self.gw.port))
        self.node.setblocking(False)
        self.got = b""

    def _uplink(self):
        from umqtt3.transport import Pipe
        a, b = Pipe.pair(4096)
        self.up.attach(b)
        return a

    def run(self, cond, seconds=10):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.gw.poll_once(1)
            if not self.frozen:
                self.up.poll_once(0)
            try:
                self.got += self.node.recv(4096)
            except (BlockingIOError, AttributeError):
                pass
            if cond():
                return True
        return False

    def send(self, fn, *args):
        buf = bytearray(70000)
        self.node.setblocking(True)
        self.node.sendall(buf[:fn(buf, 0, *args)])
        self.node.setblocking(False)

    def acks(self):
        # the packet ids of the PUBACKs the node got (40 02 id id)
        g = self.got
        return [(g[i + 2] << 8) | g[i + 3] for i in range(len(g) - 3)
                if g[i] == 0x40 and g[i + 1] == 2 and i % 4 == 0]

    def close(self):
        self.node.close()
        self.gw.close()
        self.up.close()


def test_a_held_packet_cut_between_two_gulps_goes_on_without_more_bytes():
    # The held PUBLISH is larger than a gulp: it waits whole in the
    # connection's receive buffer, the socket drained. When the bridge has
    # room it is handed over from there, though no byte more comes.
    from umqtt3.codec import encode_connect, encode_publish
    w = _Gulps()
    try:
        w.send(encode_connect, "node")
        assert w.run(lambda: w.got[:1] == b"\x20")  # CONNACK
        w.got = b""
        w.frozen = True  # the upstream's acks wait: the queue fills
        for i in range(3):  # one with the upstream client, two on the queue
            w.send(encode_publish, "s/a", b"m%d" % i, 1, i + 1)
            assert w.run(lambda: len(w.acks()) == i + 1), w.got
        w.send(encode_publish, "s/a", b"x" * 20000, 1, 4)  # 20 KB: two gulps
        assert w.run(lambda: len(w.gw.holds) == 1)
        assert w.acks() == [1, 2, 3]  # held: not acknowledged
        w.frozen = False
        assert w.run(lambda: w.acks() == [1, 2, 3, 4]), w.acks()
        assert len(w.gw.holds) == 0 and w.hub.all[0].held == 1
    finally:
        w.close()
