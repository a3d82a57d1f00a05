# The bridge's failover between several upstream addresses, as mosquitto's
# (`address H1:P1 H2:P2`, `round_robin`): the upstreams are Debian's
# mosquitto 2.0.11, the gateway our broker's process (--bridge-config). The
# main address down at start: the secondary carries the traffic; the main
# one back: the bridge goes back to it (round_robin false) or stays
# (round_robin true). A stream of QoS 1 and QoS 2 messages from a node
# through the switch: each QoS 1 message reaches the two upstreams'
# subscribers at least once [MQTT-4.3.2-1], each QoS 2 message exactly once
# [MQTT-4.3.3-2]. The settings, in the file and the device's dict, and
# install() refusing two bridges of one name, run without mosquitto.
import threading
import time

import pytest

from mosq import MOSQUITTO
from gateway_process import start_gateway
from relay import Relay
from tools.procs import free_port, stop
from umqtt3.bridge import install, settings
from umqtt3.bridge_config import parse
from umqtt3.client import MQTTClient
from umqtt3.client_codec import Busy

need_mosquitto = pytest.mark.skipif(not MOSQUITTO, reason="no mosquitto")


# ------------------------------------------------------------ the settings
def test_several_addresses_and_round_robin_in_the_file():
    (c,) = parse("connection up\naddress 10.0.0.2:1884 10.0.0.3 [fe80::1]:1885\n"
                 "round_robin true\ntopic a out 1\n")
    assert c["addresses"] == ["10.0.0.2:1884", "10.0.0.3", "[fe80::1]:1885"]
    assert "host" not in c and c["round_robin"] is True
    (c,) = parse("connection up\naddresses 10.0.0.2 10.0.0.3\ntopic a out 1\n")
    assert settings(c)["round_robin"] is False  # mosquitto's default
    # one address: host and port, as before
    (c,) = parse("connection up\naddress 10.0.0.2:1884\ntopic a out 1\n")
    assert (c["host"], c["port"], settings(c)["addresses"]) == ("10.0.0.2", 1884, None)


@pytest.mark.parametrize("lines,what", [
    ("address h1 h2:0", "line 2: address h2:0: port outside 1-65535"),
    ("addresses h1 h2:70000", "line 2: address h2:70000: port outside 1-65535"),
    ("address h1 ::1", "line 2: address ::1: an IPv6 address needs its port: [ADDR]:PORT"),
    ("address h1 h2:p", "line 2: address h2:p: port 'p' is not a whole number"),
    ("address h1 h2\nround_robin sometimes",
     "line 3: round_robin: 'sometimes' is not true or false"),
])
def test_bad_addresses_in_the_file_are_refused_in_one_line(lines, what):
    with pytest.raises(ValueError) as e:
        parse("connection up\n%s\ntopic a out 1\n" % lines)
    assert str(e.value) == what


def test_several_addresses_in_the_devices_dict():
    c = settings({"name": "up", "addresses": ["10.0.0.2", "10.0.0.3:1884", "[::1]:1885"],
                  "round_robin": True, "rules": ["a out 1"]})
    assert c["addresses"] == ["10.0.0.2", "10.0.0.3:1884", "[::1]:1885"] and c["round_robin"]
    assert settings(c) == c  # a checked dict checks again the same


@pytest.mark.parametrize("kw,what", [
    ({"addresses": "10.0.0.2 10.0.0.3"},
     "bridge up: addresses must be a list of \"HOST[:PORT]\", not '10.0.0.2 10.0.0.3'"),
    ({"addresses": []}, "addresses must be a list of \"HOST[:PORT]\", not []"),
    ({"addresses": [["10.0.0.2", 1883]]}, "addresses must be a list of \"HOST[:PORT]\""),
    ({"addresses": ["10.0.0.2", "10.0.0.3:99999"]},
     "bridge up: address 10.0.0.3:99999: port outside 1-65535"),
    ({"addresses": ["10.0.0.2"], "host": "10.0.0.9"},
     "bridge up: addresses or host and port, not both"),
    ({"addresses": ["10.0.0.2"], "port": 1884}, "addresses or host and port, not both"),
    ({"addresses": ["10.0.0.2", "10.0.0.3"], "round_robin": "true"},
     "bridge up: round_robin must be true or false"),
])
def test_bad_addresses_in_the_dict_are_refused_in_one_line(kw, what):
    cfg = {"name": "up", "rules": ["a out 1"]}
    cfg.update(kw)
    with pytest.raises(ValueError) as e:
        settings(cfg)
    assert what in str(e.value) and "\n" not in str(e.value)


def test_install_refuses_two_bridges_of_one_name():
    # one queue and one upstream session per name, as the file refuses it
    from umqtt3.broker import Broker
    b = Broker(port=None, sys_interval=0)
    try:
        with pytest.raises(ValueError) as e:
            install(b, [{"name": "up", "rules": ["a out 1"]},
                        {"name": "up", "host": "10.0.0.3", "rules": ["b out 1"]}])
        assert str(e.value) == "bridge up: a second bridge of that name"
        assert b.bridge is None
    finally:
        b.close()


def test_a_failed_attempt_moves_to_the_next_address_in_turn():
    # nothing listens on either port: the attempts go to each in turn, each
    # after the backoff (mosquitto's restart_timeout, per attempt), each
    # logged with its address
    from umqtt3.broker import Broker
    said = []
    p1, p2 = free_port(), free_port()
    b = Broker(port=None, sys_interval=0, log=said.append)
    install(b, [{"name": "up", "addresses": ["127.0.0.1:%d" % p1, "127.0.0.1:%d" % p2],
                 "rules": ["a out 1"], "backoff_ms": (10, 20)}])
    try:
        end = time.monotonic() + 10
        while len([x for x in said if "cannot connect" in x]) < 4 and time.monotonic() < end:
            b.poll_once(5)
        tried = [x.split(": ")[1] for x in said if "cannot connect" in x][:4]
        assert tried == ["cannot connect to 127.0.0.1:%d" % p for p in (p1, p2, p1, p2)], said
    finally:
        b.close()


# ------------------------------------------------------------ with mosquittos
def _gateway(tmp_path, addresses, round_robin, store=False):
    """Our broker bridging `s/# out 2` to the addresses; (process, port, log)."""
    conf = ("connection up\naddress %s\nround_robin %s\ntopic s/# out 2\n"
            "topic c/# in 1\n"
            "restart_timeout 1\nremote_clientid gw\nbridge_queue_size 5000\n"
            % (" ".join("127.0.0.1:%d" % p for p in addresses),
               "true" if round_robin else "false"))
    args = ["--store", str(tmp_path / "store")] if store else []
    return start_gateway(tmp_path, conf, *args)


class Sub:
    """A subscriber to s/# at QoS 2 on one upstream (paho, MQTT 3.1.1,
    persistent session): every (payload, qos) it got."""

    def __init__(self, port, cid):
        import paho.mqtt.client as mqtt
        self.got = []
        self.ready = threading.Event()
        c = self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=cid,
                                 clean_session=False)
        c.on_connect = lambda c, u, f, rc, p: c.subscribe("s/#", 2)
        c.on_subscribe = lambda *a: self.ready.set()
        c.on_message = lambda c, u, m: self.got.append((bytes(m.payload), m.qos))
        c.reconnect_delay_set(0.1, 0.5)
        c.connect("127.0.0.1", port, keepalive=10)
        c.loop_start()
        assert self.ready.wait(10), "not subscribed"

    def payloads(self):
        return [m[0] for m in list(self.got)]

    def close(self):
        self.c.disconnect()
        self.c.loop_stop()


def _node(gport):
    c = MQTTClient("node", "127.0.0.1", gport, timeout_ms=10000, window=32)
    c.connect()
    return c


def _reaches(node, sub, others=(), seconds=30):
    """Publish probes (QoS 1) on the gateway until one reaches sub: the
    bridge is connected to sub's upstream. None of them reaches others."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        _reaches.n += 1
        p = b"probe-%d" % _reaches.n
        node.publish("s/probe", p, qos=1)
        for _ in range(10):
            if p in sub.payloads():
                for o in others:
                    assert p not in o.payloads(), "a probe reached the other upstream too"
                return True
            time.sleep(0.05)
    return False


_reaches.n = 0


def _end(node, gw, subs):
    """A test's end: the node gone, the gateway stopped, the upstreams'
    subscribers made (None for one not made) closed."""
    node.disconnect()
    stop(gw)
    for s in subs:
        if s is not None:
            s.close()


def _comes_down(up, gport):
    """A message published on the upstream at up reaches a subscriber on
    the gateway (the bridge's `c/# in 1`)."""
    from paho_peer import Watch  # tests/paho_peer.py
    w = Watch(gport, "c/#", "local")
    try:
        for i in range(50):
            c = MQTTClient("ctl", "127.0.0.1", up)
            c.connect()
            c.publish("c/x", b"down%d" % i, qos=1)
            c.disconnect()
            if w.take(1, 0.2):
                return True
        return False
    finally:
        w.close()


@pytest.mark.slow
@need_mosquitto
@pytest.mark.parametrize("round_robin", [False, True])
def test_the_secondary_carries_the_traffic_then_the_main_one_again(broker_factory, tmp_path,
                                                                     round_robin):
    a = broker_factory()  # the main address
    b = broker_factory()
    a.stop()
    sa = None
    sb = Sub(b.port, "sb")
    gw, gport, log = _gateway(tmp_path, [a.port, b.port], round_robin)
    node = _node(gport)
    try:
        assert _reaches(node, sb), log.read_text()
        a.start()  # same port
        sa = Sub(a.port, "sa")
        if not round_robin:
            # within the probe's 5 s and a reconnect: back on the main address
            assert _reaches(node, sa, seconds=30), log.read_text()
            text = log.read_text()
            assert ("bridge up: the main address 127.0.0.1:%d takes connections again: "
                    "leaving 127.0.0.1:%d" % (a.port, b.port)) in text, text
            assert "bridge up: connected to 127.0.0.1:%d\n" % a.port in text, text
            # a clean goodbye to the secondary: DISCONNECT, no will
            assert "Client gw disconnected." in open(b.log).read()
            # the `in` rule's subscription is made on the main address too
            # (a new session there)
            assert _comes_down(a.port, gport), log.read_text()
        else:
            # all equals: it stays where it is while that works (two probe
            # periods and more)
            end = time.monotonic() + 12
            while time.monotonic() < end:
                assert _reaches(node, sb, [sa], 5), "left the secondary"
            assert "takes connections again" not in log.read_text()
            # the secondary fails: the next address in turn, the first one
            b.stop()
            assert _reaches(node, sa, seconds=30), log.read_text()
    finally:
        _end(node, gw, (sa, sb))


@pytest.mark.slow
@need_mosquitto
@pytest.mark.parametrize("store", [False, True])
def test_nothing_is_lost_or_doubled_at_qos2_across_the_switch(broker_factory, tmp_path, store):
    # a node publishes a stream of QoS 1 and 2 messages on the gateway
    # while the bridge is on the secondary, the main address comes back,
    # and the bridge switches: each QoS 1 message reaches the union of the
    # two upstreams' subscribers at least once, each QoS 2 message exactly
    # once (what the secondary acknowledged it delivers; what it did not
    # goes to the main address)
    a = broker_factory()
    b = broker_factory()
    a.stop()
    sb = Sub(b.port, "sb")
    gw, gport, log = _gateway(tmp_path, [a.port, b.port], False, store)
    node = _node(gport)
    sa = None
    sent = {1: [], 2: []}
    try:
        assert _reaches(node, sb), log.read_text()
        a.start()
        sa = Sub(a.port, "sa")
        n = 0
        switched = False
        end = time.monotonic() + 40
        while time.monotonic() < end:
            q = 1 + n % 2
            p = b"m%d-%d" % (q, n)
            node.publish("s/m", p, qos=q)
            sent[q].append(p)
            n += 1
            time.sleep(0.005)
            if not switched and "connected to 127.0.0.1:%d\n" % a.port in log.read_text():
                switched = True
                end = time.monotonic() + 1  # a second more on the main address
        assert switched, log.read_text()
        want = set(sent[1] + sent[2])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            got = sa.payloads() + sb.payloads()
            if want <= set(got):
                break
            time.sleep(0.1)
        time.sleep(1)  # a duplicate would come now
        on_a, on_b = sa.payloads(), sb.payloads()
        got = on_a + on_b
        missing = [p for p in sent[1] + sent[2] if p not in got]
        assert not missing, (len(missing), missing[:5])
        doubled = [p for p in sent[2] if got.count(p) != 1]
        assert not doubled, doubled
        # the stream went through both
        assert any(p.startswith(b"m") for p in on_a) and any(p.startswith(b"m") for p in on_b)
    finally:
        _end(node, gw, (sa, sb))


class Burst:
    """node's publishes on s/m, QoS 1 and 2 in turn, each payload new;
    sent[q]: what went at QoS q, in order."""

    def __init__(self, node):
        self.node = node
        self.sent = {1: [], 2: []}
        self.n = 0

    def __call__(self, k):
        node = self.node
        for _ in range(k):
            q = 1 + self.n % 2
            p = b"m%d-%d" % (q, self.n)
            while True:
                try:
                    node.publish("s/m", p, qos=q, wait=False)
                    break
                except Busy:  # its window is full: the acks first
                    node.poll(10)
            self.sent[q].append(p)
            self.n += 1
        node.poll(0)


def _back_on_then_each_once(port, log, burst, node, subs, bursts):
    # once the bridge is connected to 127.0.0.1:port again, more bursts;
    # then every message is in the union of the upstreams' subscribers, the
    # QoS 2 ones exactly once [MQTT-4.3.3-2], QoS 1 at least once [MQTT-4.3.2-1]
    end = time.monotonic() + 30
    while "connected to 127.0.0.1:%d\n" % port not in log.read_text():
        assert time.monotonic() < end, log.read_text()
        burst(1)
        time.sleep(0.05)
    for _ in range(bursts):
        burst(20)
    end = time.monotonic() + 20
    while node.inflight() and time.monotonic() < end:
        node.poll(10)
    sent = burst.sent
    want = sent[1] + sent[2]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if set(want) <= set(p for s in subs for p in s.payloads()):
            break
        time.sleep(0.1)
    time.sleep(1)  # a duplicate would come now
    got = [p for s in subs for p in s.payloads()]
    missing = [p for p in want if p not in got]
    assert not missing, (len(missing), missing[:5], log.read_text())
    doubled = [p for p in sent[2] if got.count(p) != 1]
    assert not doubled, doubled


@pytest.mark.slow
@need_mosquitto
def test_the_switch_waits_for_what_the_secondary_was_sent(broker_factory, tmp_path):
    # The secondary stops answering (SIGSTOP) while messages are in flight
    # to it, and the main address comes back: the bridge sends the
    # secondary nothing more and waits for its acknowledgements before the
    # goodbye. A QoS 2 message past PUBREC is the secondary's to deliver
    # [MQTT-4.3.3-1], and mosquitto delivers it when the PUBREL comes; the
    # main address, which has no session of the bridge, would never get it
    # (the client does not send it again on a new session): leaving before
    # the PUBCOMP could lose it. Once the secondary answers again, the
    # bridge goes to the main address, and every QoS 2 message arrives
    # once [MQTT-4.3.3-2], every QoS 1 message at least once [MQTT-4.3.2-1].
    import signal
    a = broker_factory(extra=["log_type all"])
    b = broker_factory(extra=["log_type all"])
    a.stop()
    sb = Sub(b.port, "sb")
    gw, gport, log = _gateway(tmp_path, [a.port, b.port], False)
    node = _node(gport)
    sa = None
    burst = Burst(node)

    try:
        assert _reaches(node, sb), log.read_text()
        for _ in range(20):
            burst(20)
        b.proc.send_signal(signal.SIGSTOP)  # mid-stream: some PUBRECs in, some not
        try:
            burst(20)
            a.start()
            sa = Sub(a.port, "sa")
            end = time.monotonic() + 30
            while "takes connections again" not in log.read_text():
                assert time.monotonic() < end, log.read_text()
                burst(1)
                time.sleep(0.05)
            time.sleep(4)  # longer than timeout_ms (3 s)
            assert "connected to 127.0.0.1:%d\n" % a.port not in log.read_text()
        finally:
            b.proc.send_signal(signal.SIGCONT)
        _back_on_then_each_once(a.port, log, burst, node, (sa, sb), 10)
    finally:
        _end(node, gw, (sa, sb))


@pytest.mark.slow
@need_mosquitto
def test_a_qos2_message_past_pubrec_is_not_sent_to_the_next_address(broker_factory, tmp_path):
    # The link to the secondary breaks while QoS 2 messages are past PUBREC
    # there: the secondary got their PUBREL and delivered them, but their
    # PUBCOMP never came back (the relay loses what it sends). The bridge
    # goes to the next address, whose broker has no session of the bridge:
    # such a message is the secondary's [MQTT-4.3.3-1] and is not sent
    # again (the client's rule on a new session), so it arrives once
    # [MQTT-4.3.3-2]; one the secondary never answered goes to the next
    # address; QoS 1 arrives at least once [MQTT-4.3.2-1].
    a = broker_factory()
    b = broker_factory()
    a.stop()
    relay = Relay(b.port)
    sb = Sub(b.port, "sb")
    # round_robin true: no probe of the main address, the switch is the loss
    gw, gport, log = _gateway(tmp_path, [a.port, relay.port], True)
    node = _node(gport)
    sa = None
    burst = Burst(node)

    try:
        assert _reaches(node, sb), log.read_text()
        for _ in range(20):
            burst(20)
        relay.mute(only=(0x70,))  # every QoS 2 message from now on stops past PUBREC
        burst(20)
        time.sleep(1)  # the secondary takes the PUBRELs that were on their way
        a.start()
        sa = Sub(a.port, "sa")
        relay.close()
        # the case the test is about happened: the secondary's PUBCOMPs, for
        # messages it had delivered, never reached the bridge
        assert 0x70 in relay.lost, relay.lost
        _back_on_then_each_once(a.port, log, burst, node, (sa, sb), 5)
        assert "lost the link to 127.0.0.1:%d" % relay.port in log.read_text()
    finally:
        _end(node, gw, (sa, sb))
        relay.close()
