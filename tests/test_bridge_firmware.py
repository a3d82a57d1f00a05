# The gateway firmware (firmware/gateway.py) with a bridge, under CPython
# through the desktop stand-ins: config.json's "bridge" setting makes the
# board's broker keep a store (the board's GATEWAY_STORE) and carry a
# sensor node's readings to the upstream broker (our own broker here, on a
# free loopback port), with the board's BRIDGE_QUEUE and BRIDGE_WINDOW.
import socket
import subprocess
import threading
import time

import collector  # tests/collector.py
from tools import procs
from tools.desktop.sim import fw
from tools.procs import free_port

fw_config, fw_node = fw["config"], fw["node"]
DESKTOP = fw_config.board("desktop")


def _wait_port(p):
    end = time.monotonic() + 5
    while True:
        try:
            socket.create_connection(("127.0.0.1", p), 0.2).close()
            return
        except OSError:
            assert time.monotonic() < end
            time.sleep(0.05)


def test_bridge_settings_take_the_boards_defaults():
    gw = fw["gateway"]
    assert gw.bridge_settings({}, DESKTOP, {}) == []
    c = fw_config.merge({"bridge": {"host": "h", "rules": ["a/# out 1"]}})
    (b,) = gw.bridge_settings(c, DESKTOP, {"bridge_user": "u", "bridge_password": "p"})
    assert (b["queue_size"], b["window"], b["user"], b["password"]) == (
        DESKTOP.BRIDGE_QUEUE, DESKTOP.BRIDGE_WINDOW, "u", "p")
    try:
        fw_config.merge({"bridge": "h"})
        raise AssertionError("a bridge that is not a dict was taken")
    except ValueError as e:
        assert "bridge" in str(e)


def test_gateway_bridges_a_nodes_readings_upstream(tmp_path):
    gateway = fw["gateway"]
    up = free_port()
    upstream = procs.start(procs.umqtt3_broker_cmd(up, "--quiet"), up,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    p = free_port()
    stop = threading.Event()
    cfg = {"port": p, "gateway_store": str(tmp_path / "gw"),
           "bridge": {"host": "127.0.0.1", "port": up, "rules": ["fwb/# out 1 \"\" site/"]}}
    t = threading.Thread(target=gateway.run, args=(cfg, DESKTOP, {"ssid": "lab"}),
                         kwargs={"stop": stop.is_set, "host": "127.0.0.1"}, daemon=True)
    t.start()
    try:
        _wait_port(p)
        col = collector.Collector(up, "site/fwb")
        n = fw_node.Node({"node_id": "g1", "prefix": "fwb", "broker": "127.0.0.1", "port": p,
                          "period_s": 0.05, "keepalive": 10}, DESKTOP, {"ssid": "lab"})
        assert n.run(3) == 3
        col.wait(lambda: len([m for m in col.msgs if m[0].endswith("/temp")]) == 3)
        col.close()
    finally:
        stop.set()
        t.join(5)
        procs.stop(upstream, 5)
    assert not t.is_alive()
    assert (tmp_path / "gw" / "log").exists()  # the broker kept a store for the queue


def test_a_wrongly_typed_bridge_setting_stops_the_gateway_at_boot():
    # /config.json is typed by hand: what bridge.settings() refuses, main.py
    # prints in one line and the board does not start (never a raise in the
    # broker's loop, and a reset loop, later)
    gw = fw["gateway"]
    for b, what in (({"host": "h", "rules": "sensors/#"}, "rules must be a list of rule lines"),
                    ({"host": "h", "rules": ["a out 1"], "backoff_ms": [1000]},
                     "backoff_ms must be two whole numbers"),
                    ({"host": "h", "rules": ["a out 1"], "keepalive": "60"},
                     "keepalive must be a whole number 0-65535"),
                    ({"host": "h", "rules": ["a out 1"], "keepalive": 70000},
                     "keepalive must be a whole number 0-65535"),
                    ([{"host": "h", "rules": ["a out 1"]}, {"host": "i", "rules": ["b out 1"]}],
                     "bridge bridge: a second bridge of that name")):
        try:
            gw.bridge_settings(fw_config.merge({"bridge": b}), DESKTOP, {})
            raise AssertionError("taken: %r" % (b,))
        except ValueError as e:
            assert what in str(e), e
    # a user without a password from /secrets.json, and two names: taken
    two = [{"name": "a", "host": "h", "rules": ["a out 1"]}, {"name": "b", "host": "i",
                                                              "rules": ["b out 1"]}]
    assert [c["name"] for c in gw.bridge_settings(fw_config.merge({"bridge": two}), DESKTOP,
                                                    {"bridge_user": "u"})] == ["a", "b"]
