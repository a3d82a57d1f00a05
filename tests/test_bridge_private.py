# The bridge bit against Debian's mosquitto 2.0.11 at MQTT 3.1.1
# (try_private, mosquitto's bridge protocol): the gateway's CONNECT carries
# level 0x84, and mosquitto then treats the bridge's subscriptions as No
# Local and Retain As Published. So a `both` rule no longer brings a node's
# message back (3.1.1 has no No Local [MQTT-3.8.3-3]), two `both` bridges no
# longer make copies, and a retained message published upstream while the
# bridge is up stays retained on the gateway (else cleared on the way
# [MQTT-3.3.1-9]). Each case also runs with `try_private false`, where the
# plain 3.1.1 behaviour (documented in docs/bridge.md) still holds.
# The gateways are our broker's process (--bridge-config); the refusal of
# the bit (CONNACK 0x01 [MQTT-3.1.2-2]) comes from a stand-in in front of
# mosquitto (tests/relay.py) that passes every other connection on.
import subprocess
import time

import pytest

from mosq import MOSQUITTO
from paho_peer import Watch  # tests/paho_peer.py
from gateway_process import start_gateway
from relay import Relay
from tools.procs import free_port, start, stop, umqtt3_broker_cmd, python_env
from umqtt3.client import MQTTClient

pytest.importorskip("paho.mqtt.client")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not MOSQUITTO, reason="no mosquitto")]

FALLBACK = ("bridge up: the upstream does not take the bridge protocol (try_private); "
            "connecting as a plain client")


def _gateway(tmp_path, name, sections):
    """Our broker with the bridges of sections (the text after each
    `connection NAME` line, {NAME: text}); (process, port, its log file)."""
    d = tmp_path / name
    d.mkdir()
    return start_gateway(d, "".join("connection %s\n%srestart_timeout 1\n" % (n, t)
                                    for n, t in sections.items()), log_name="log")


def _up(port, private, rules, cid):
    return "address 127.0.0.1:%d\n%sremote_clientid %s\ntry_private %s\n" % (
        port, "".join("topic %s\n" % r for r in rules), cid, "true" if private else "false")


def _publish(port, topic, msg, qos=1, retain=False, cid="pub"):
    c = MQTTClient(cid, "127.0.0.1", port)
    c.connect()
    c.publish(topic, msg, retain, qos)
    c.disconnect()


def _bridged(src, dst, topic):
    # a message published on src reaches dst: the bridge between them is
    # up and subscribed (the probes are not retained, and go on a topic no
    # test looks at)
    w = Watch(dst, topic, "probe%d" % dst)
    try:
        for _ in range(100):
            _publish(src, topic, b"probe", 0, cid="prober")
            if w.take(1, 0.2):
                return
        raise AssertionError("nothing from %d reached %d on %s" % (src, dst, topic))
    finally:
        w.close()


def _exactly(w, n):
    # the payloads of what w got: n of them, then nothing more for a second
    got = w.take(n)
    got += w.take(1, 1.0)
    return [m[1] for m in got]


@pytest.mark.parametrize("private,copies", [(True, 1), (False, 2)])
def test_a_both_rule_gives_local_subscribers_a_node_qos2_message_once(broker_factory, tmp_path,
                                                                       private, copies):
    # G21: with the bridge bit mosquitto does not send the bridge its own
    # message back (No Local): each local subscriber gets a node's QoS 2
    # message once [MQTT-4.3.3-2]; plain 3.1.1 brings the echo (two)
    up = broker_factory()
    gw, gport, _ = _gateway(tmp_path, "gw", {"up": _up(up.port, private, ["x/# both 2"], "g1")})
    try:
        _bridged(up.port, gport, "x/probe")
        local = [Watch(gport, "x/a", "l1"), Watch(gport, "x/a", "l2")]
        far = Watch(up.port, "x/a", "far")
        _publish(gport, "x/a", b"m", 2, cid="node")
        for w in local:
            assert _exactly(w, copies) == [b"m"] * copies, private
        assert _exactly(far, 1) == [b"m"]
        for w in local + [far]:
            w.close()
    finally:
        stop(gw)


@pytest.mark.parametrize("private", [True, False])
def test_a_value_retained_upstream_while_up_is_retained_on_the_gateway(broker_factory, tmp_path,
                                                                       private):
    # Retain As Published through the bridge bit: what an upstream client
    # publishes retained while the bridge is up arrives with the flag, so
    # the gateway keeps it, each new value replacing the last, and a node
    # that subscribes later gets the last one retained [MQTT-3.3.1-5]
    # [MQTT-3.3.1-6]. Plain 3.1.1: the flag is cleared on live messages
    # [MQTT-3.3.1-9] and the gateway keeps nothing
    up = broker_factory()
    gw, gport, _ = _gateway(tmp_path, "gw", {"up": _up(up.port, private, ["cfg/# in 1"], "g1")})
    try:
        _bridged(up.port, gport, "cfg/probe")
        live = Watch(gport, "cfg/a", "live")
        for v in (b"v1", b"v2"):
            _publish(up.port, "cfg/a", v, 1, True, cid="ctl")
            assert [m[1] for m in live.take(1)] == [v]
        live.close()
        late = Watch(gport, "cfg/a", "late")
        got = late.take(1, 1.0)
        late.close()
        if private:
            assert got == [("cfg/a", b"v2", 1, True)]
        else:
            assert got == []
    finally:
        stop(gw)


@pytest.mark.parametrize("private,copies", [(True, [1, 1, 1]), (False, [2, 1, 1])])
def test_two_gateways_with_both_bridges_to_one_mosquitto(broker_factory, tmp_path, private,
                                                         copies):
    # a node's message on gateway 1: its local subscriber, gateway 2's and
    # the upstream's each get it once (plain 3.1.1: gateway 1's twice, the
    # upstream's echo)
    up = broker_factory()
    gws = [_gateway(tmp_path, "gw%d" % i, {"up": _up(up.port, private, ["x/# both 1"], "g%d" % i)})
           for i in (1, 2)]
    try:
        for gw, gport, _ in gws:
            _bridged(up.port, gport, "x/probe")
        subs = [Watch(gws[0][1], "x/a", "s1"), Watch(gws[1][1], "x/a", "s2"),
                Watch(up.port, "x/a", "far")]
        _publish(gws[0][1], "x/a", b"m", 1, cid="node")
        assert [len(_exactly(w, n)) for w, n in zip(subs, copies)] == copies, private
        for w in subs:
            w.close()
    finally:
        for gw, _, _ in gws:
            stop(gw)


@pytest.mark.parametrize("private", [True, False])
def test_one_gateway_with_both_bridges_to_two_mosquittos(broker_factory, tmp_path, private):
    # The "3 copies" of plain 3.1.1: a node's message reaches the gateway's
    # subscriber from the node and as each upstream's echo. With the bit no
    # upstream echoes, so a local subscriber gets it once, and a message
    # from upstream A on a topic bridge a also sends up is a genuine one
    # (never an echo): it goes on up bridge b (plain 3.1.1 keeps it on the
    # gateway, as it may be an echo)
    ups = [broker_factory(), broker_factory()]
    gw, gport, _ = _gateway(tmp_path, "gw", {
        "a": _up(ups[0].port, private, ["x/# both 1"], "ga"),
        "b": _up(ups[1].port, private, ["x/# both 1"], "gb")})
    try:
        for u in ups:
            _bridged(u.port, gport, "x/probe")
        local = Watch(gport, "x/#", "local")
        far = [Watch(u.port, "x/#", "far") for u in ups]
        _publish(gport, "x/n", b"node", 1, cid="node")
        assert _exactly(local, 3 - 2 * private) == [b"node"] * (3 - 2 * private)
        assert [_exactly(f, 1) for f in far] == [[b"node"], [b"node"]]
        _publish(ups[0].port, "x/u", b"fromA", 1, cid="ctl")
        assert _exactly(local, 1) == [b"fromA"]
        assert _exactly(far[1], 1) == ([b"fromA"] if private else [])
        for w in [local] + far:
            w.close()
    finally:
        stop(gw)


def _stand_in(up_port, refuse=True):
    """A broker that does not know the bridge bit, in front of mosquitto: a
    relay that reads each connection's CONNECT (its level into levels),
    answers CONNACK 0x01 (unacceptable protocol version [MQTT-3.1.2-2]) to
    one with the bit when refuse is set, and passes every other connection
    on to mosquitto. (relay, levels)"""
    levels = []

    def answer(connect):
        i = 1
        while connect[i] & 0x80:  # the Remaining Length
            i += 1
        lv = connect[i + 1 + 6]  # past the name's length and "MQTT"
        levels.append(lv)
        if lv & 0x80 and refuse:
            return bytes([0x20, 2, 0, 1])
        return None
    return Relay(up_port, answer=answer), levels


def _until(cond, seconds=20):
    end = time.monotonic() + seconds
    while not cond() and time.monotonic() < end:
        time.sleep(0.05)
    return cond()


def test_an_upstream_that_refuses_the_bit_gets_plain_connects_from_then_on(broker_factory,
                                                                           tmp_path):
    up = broker_factory()
    si, levels = _stand_in(up.port)
    gw, gport, log = _gateway(tmp_path, "gw", {"up": "address 127.0.0.1:%d\ntopic x/# out 1\n"
                                                     "remote_clientid g1\n" % si.port})
    try:
        _bridged(gport, up.port, "x/probe")
        assert levels[:2] == [0x84, 4]
        si.break_links()  # a lost link: the next attempt goes without the bit too
        assert _until(lambda: len(levels) >= 3)
        _bridged(gport, up.port, "x/probe")
        assert levels == [0x84, 4, 4]
    finally:
        stop(gw)
        si.close()
    lines = log.read_text().splitlines()
    assert [s for s in lines if "bridge protocol" in s] == [FALLBACK], lines
    assert not [s for s in lines if "refused the connection" in s], lines


@pytest.mark.parametrize("extra,level", [("", 0x84), ("try_private true\n", 0x84),
                                         ("try_private false\n", 4),
                                         ("bridge_protocol_version mqttv50\n", 5),
                                         ("bridge_protocol_version mqttv50\ntry_private true\n",
                                          5)])
def test_the_connect_level_byte(broker_factory, tmp_path, extra, level):
    # the bit at 3.1.1 unless try_private false; at MQTT 5 never (No Local
    # and Retain As Published go on each subscription instead)
    up = broker_factory()
    si, levels = _stand_in(up.port, refuse=False)
    gw, gport, _ = _gateway(tmp_path, "gw", {"up": "address 127.0.0.1:%d\ntopic x/# out 1\n"
                                                     "remote_clientid g1\n%s" % (si.port, extra)})
    try:
        _bridged(gport, up.port, "x/probe")
        assert levels == [level]
    finally:
        stop(gw)
        si.close()


@pytest.mark.parametrize("value,ok", [("true", True), ("false", False), ("on", True),
                                      ("maybe", None), ("", None)])
def test_try_private_in_the_file(tmp_path, value, ok):
    # the file's line as the other booleans: accepted, or refused in one
    # line with a non-zero exit and no traceback
    conf = tmp_path / "b.conf"
    conf.write_text("connection up\ntopic x/# out 1\ntry_private %s\n" % value)
    from umqtt3.bridge_config import parse
    if ok is not None:
        (c,) = parse(conf.read_text())
        assert c["try_private"] is ok
        return
    p = subprocess.run(umqtt3_broker_cmd(free_port(), "--bridge-config", str(conf)),
                       capture_output=True, text=True, timeout=60, env=python_env())
    err = p.stderr.strip().splitlines()
    assert p.returncode != 0 and len(err) == 1 and "Traceback" not in p.stderr, p.stderr
    assert "line 3: try_private" in err[0], err


@pytest.mark.parametrize("value,ok", [(True, True), (False, True), ("true", False), (1, False),
                                      (None, False)])
def test_try_private_in_the_dict(value, ok):
    from umqtt3.bridge import settings
    cfg = {"name": "up", "host": "10.0.0.2", "rules": ["x/# out 1"], "try_private": value}
    if ok:
        assert settings(cfg)["try_private"] is value
    else:
        with pytest.raises(ValueError) as e:
            settings(cfg)
        assert str(e.value) == "bridge up: try_private must be true or false"



@pytest.mark.parametrize("private,copies", [(True, 1), (False, 2)])
def test_our_own_broker_as_the_upstream_honours_the_bit(tmp_path, private, copies):
    # A gateway bridged into our desktop broker at 3.1.1: the broker serves
    # the bridge bit as mosquitto does (its subscriptions No Local and
    # Retain As Published), so a `both` rule brings a node's QoS 2 message
    # back no more [MQTT-4.3.3-2], and a value retained upstream while the
    # bridge is up stays retained on the gateway; plain 3.1.1 gets the echo
    # and the flag cleared [MQTT-3.3.1-9]
    uport = free_port()
    up = start(umqtt3_broker_cmd(uport, "--sys-interval", "0"), uport)
    gw, gport, _ = _gateway(tmp_path, "gw", {"up": _up(uport, private, ["x/# both 2"], "g1")})
    try:
        _bridged(uport, gport, "x/probe")
        local = Watch(gport, "x/a", "l1")
        far = Watch(uport, "x/a", "far")
        _publish(gport, "x/a", b"m", 2, cid="node")
        assert _exactly(local, copies) == [b"m"] * copies, private
        assert _exactly(far, 1) == [b"m"]
        live = Watch(gport, "x/cfg", "live")
        _publish(uport, "x/cfg", b"v1", 1, True, cid="ctl")
        assert [m[1] for m in live.take(1)] == [b"v1"]  # on the gateway now
        late = Watch(gport, "x/cfg", "late")
        got = late.take(1, 1.5)
        assert [m[1] for m in got] == ([b"v1"] if private else []), private
        for w in (local, far, live, late):
            w.close()
    finally:
        stop(gw)
        stop(up)
