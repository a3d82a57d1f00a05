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
