"""The firmware on the desktop, shared by tools/demo.py and tools/simulate.py:
the real sensor-node code (firmware/node.py) with a board profile from
boards/, run under CPython through the stand-ins for machine, network, esp32
and rp2 in tools/shim/, and a broker on a loopback port to run it against.

Importing this module puts lib/, firmware/, tools/shim/ and the repository
root (for boards/) at the front of sys.path, as the firmware expects.
"""
import os
import shutil
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _p in (ROOT, os.path.join(ROOT, "tools", "shim"), os.path.join(ROOT, "firmware"),
           os.path.join(ROOT, "lib")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import config as fw_config  # noqa: E402  firmware/config.py
import node as fw_node  # noqa: E402  firmware/node.py

PREFIX = "umqtt3"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def reachable(host, port, timeout=0.2):
    try:
        socket.create_connection((host, port), timeout).close()
        return True
    except OSError:
        return False


def wait_port(port, timeout=10.0, host="127.0.0.1"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if reachable(host, port):
            return
        time.sleep(0.05)
    raise SystemExit("broker did not start on port %d" % port)


def broker_kind(requested):
    """umqtt3's own broker when the library is there, else mosquitto."""
    if requested:
        return requested
    try:
        import umqtt3.broker  # noqa: F401
        return "umqtt3"
    except ImportError:
        return "mosquitto"


def start_broker(kind, port, tmp):
    """A broker process on 127.0.0.1:port, once it accepts connections."""
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "lib"))
    if kind == "umqtt3":
        cmd = [sys.executable, "-m", "umqtt3.broker", "--host", "127.0.0.1", "--port", str(port),
               "--quiet"]
    else:
        conf = os.path.join(tmp, "mosquitto.conf")
        with open(conf, "w") as f:
            f.write("listener %d 127.0.0.1\nallow_anonymous true\n" % port)
        cmd = [shutil.which("mosquitto") or "mosquitto", "-c", conf]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
    except SystemExit:
        p.kill()
        p.wait()
        raise
    return p


def node_config(name, port, period, host="127.0.0.1", prefix=PREFIX, **kw):
    """The config.json a simulated node gets."""
    cfg = {"node_id": name, "prefix": prefix, "broker": host, "port": port,
           "period_s": period, "keepalive": 10, "qos": 1}
    cfg.update(kw)
    return cfg


def run_node(name, cfg, stop, nodes, board="desktop", secrets=None, log=None):
    """One simulated sensor node, firmware/node.py's Node, until stop is set
    (a threading.Event); put in nodes[name] so callers can read its state.
    An error is printed, and the others go on."""
    secrets = dict(secrets or {})
    secrets.setdefault("ssid", "desktop")  # the shim's WLAN joins any network
    n = fw_node.Node(cfg, fw_config.board(board), secrets, stop=stop.is_set, log=log)
    nodes[name] = n
    try:
        n.run(0)
    except Exception as e:
        n.error = e
        print("%s stopped: %r" % (name, e), file=sys.stderr, flush=True)
