"""The firmware on the desktop, shared by tools/desktop/demo.py and
tools/desktop/simulate.py: the real sensor-node code (firmware/node.py) with a
board profile from boards/, run under CPython through the stand-ins for
machine, network, esp32 and rp2 in tools/desktop/shim/, and a broker on a
loopback port to run it against.

On a board the firmware's modules are top-level (`import config`, `import
machine`); load_firmware() loads them from their files under those names, so
neither the firmware nor this checkout's sys.path changes. boards/ is the
package `boards` of the repository root (tools run as `python -m tools...`
from there).
"""
import importlib.util
import os
import shutil
import subprocess
import sys

from tools import procs

ROOT = procs.ROOT
SHIM = os.path.join(ROOT, "tools", "desktop", "shim")
FIRMWARE = os.path.join(ROOT, "firmware")
# In import order: the shims first, then each firmware module after those it imports.
MODULES = [(n, os.path.join(SHIM, n + ".py")) for n in ("machine", "network", "esp32", "rp2", "ntptime")] + [
    (n, os.path.join(FIRMWARE, n + ".py")) for n in ("config", "sensors", "node", "gateway")]

PREFIX = "umqtt3"


def load_firmware():
    """The shims and firmware/ as the top-level modules a board has; returns
    {name: module}. Modules already loaded stay as they are."""
    for name, path in MODULES:
        if name not in sys.modules:
            spec = importlib.util.spec_from_file_location(name, path)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[name] = mod
            try:
                spec.loader.exec_module(mod)
            except BaseException:
                del sys.modules[name]
                raise
    return {name: sys.modules[name] for name, _ in MODULES}


fw = load_firmware()
fw_config = fw["config"]
fw_node = fw["node"]


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
    if kind == "umqtt3":
        cmd = procs.umqtt3_broker_cmd(port, "--quiet")
    else:
        conf = os.path.join(tmp, "mosquitto.conf")
        with open(conf, "w") as f:
            f.write("listener %d 127.0.0.1\nallow_anonymous true\n" % port)
        cmd = [shutil.which("mosquitto") or "mosquitto", "-c", conf]
    try:
        return procs.start(cmd, port, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except (OSError, RuntimeError) as e:
        raise SystemExit("broker: %s" % e)


def node_config(name, port, period, host="127.0.0.1", prefix=PREFIX, **kw):
    """The config.json a simulated node gets."""
    cfg = {"node_id": name, "prefix": prefix, "broker": host, "port": port,
           "period_s": period, "keepalive": 10, "qos": 1}
    cfg.update(kw)
    return cfg


def check_config(ap, cfg):
    """Refuse (ap.error, one line) a node config the node itself would
    refuse (firmware/config.py), before any broker or node starts."""
    try:
        fw_config.merge(cfg)
    except ValueError as e:
        ap.error("the nodes' config: %s" % e)


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
