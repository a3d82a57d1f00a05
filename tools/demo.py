"""The desktop demo: a broker on 127.0.0.1, simulated sensor nodes publishing
readings through umqtt3's client, and a live console view of what arrives.

    python tools/demo.py [--nodes 3] [--seconds 0] [--port 0] [--broker umqtt3|mosquitto]

--seconds 0 runs until Ctrl-C. The broker is umqtt3's own (python -m
umqtt3.broker) when it is available, else Debian's mosquitto.
"""
import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "lib"))

from umqtt3.client import MQTTClient  # noqa: E402

PREFIX = "umqtt3"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit("broker did not start on port %d" % port)


def start_broker(kind, port, tmp):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "lib"))
    if kind == "umqtt3":
        cmd = [sys.executable, "-m", "umqtt3.broker", "--host", "127.0.0.1", "--port", str(port)]
    else:
        conf = os.path.join(tmp, "mosquitto.conf")
        with open(conf, "w") as f:
            f.write("listener %d 127.0.0.1\nallow_anonymous true\n" % port)
        cmd = [shutil.which("mosquitto") or "mosquitto", "-c", conf]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    return p


def broker_kind(requested):
    if requested:
        return requested
    try:
        import umqtt3.broker  # noqa: F401
        return "umqtt3"
    except ImportError:
        return "mosquitto"


def node(name, port, stop, period):
    """One simulated sensor node: birth/will, then a reading per period."""
    c = MQTTClient(name, "127.0.0.1", port, keepalive=10, reconnect=True)
    status = "%s/%s/status" % (PREFIX, name)
    c.set_last_will(status, b"offline", retain=True, qos=1)
    c.connect(clean_session=False)
    c.publish(status, b"online", retain=True, qos=1)
    boot = random.getrandbits(16)
    seq = 0
    temp = 20.0 + random.random() * 5
    while not stop.is_set():
        temp += random.uniform(-0.3, 0.3)
        seq += 1
        msg = json.dumps({"v": round(temp, 2), "boot": boot, "seq": seq}).encode()
        c.publish("%s/%s/temp" % (PREFIX, name), msg, qos=1)
        end = time.monotonic() + period
        while time.monotonic() < end and not stop.is_set():
            c.poll(20)
    c.publish(status, b"offline", retain=True, qos=1)
    c.disconnect()


def view(port, stop, seconds):
    """Subscribe to everything the nodes send; redraw a table once a second."""
    rows = {}
    c = MQTTClient("demo-view", "127.0.0.1", port, keepalive=10)

    def on_msg(topic, msg):
        parts = topic.decode().split("/")
        if len(parts) != 3:
            return
        r = rows.setdefault(parts[1], {"status": "?", "last": None, "n": 0, "t0": time.monotonic()})
        if parts[2] == "status":
            r["status"] = msg.decode()
        else:
            r["last"] = json.loads(msg)
            r["n"] += 1

    c.set_callback(on_msg)
    c.connect()
    c.subscribe(PREFIX + "/#", 1)
    t_end = time.monotonic() + seconds if seconds else None
    next_draw = 0
    while not stop.is_set():
        c.poll(50)
        now = time.monotonic()
        if now >= next_draw:
            next_draw = now + 1
            lines = ["%-10s %-8s %8s %6s %8s" % ("node", "status", "temp", "seq", "msg/s")]
            for name in sorted(rows):
                r = rows[name]
                last = r["last"] or {}
                rate = r["n"] / max(now - r["t0"], 1e-3)
                lines.append("%-10s %-8s %8s %6s %8.1f" % (
                    name, r["status"], last.get("v", "-"), last.get("seq", "-"), rate))
            out = "\n".join(lines)
            if sys.stdout.isatty():
                sys.stdout.write("\x1b[H\x1b[2J")
            print(out, flush=True)
        if t_end and now >= t_end:
            stop.set()
    c.disconnect()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=0, help="stop after this long (0: until Ctrl-C)")
    ap.add_argument("--period", type=float, default=0.5, help="seconds between readings")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--broker", choices=("umqtt3", "mosquitto"))
    a = ap.parse_args()
    port = a.port or free_port()
    kind = broker_kind(a.broker)
    tmp = tempfile.mkdtemp(prefix="umqtt3-demo-")
    broker = start_broker(kind, port, tmp)
    print("broker: %s on 127.0.0.1:%d; %d nodes" % (kind, port, a.nodes), flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threads = [threading.Thread(target=node, args=("node%d" % i, port, stop, a.period), daemon=True)
               for i in range(1, a.nodes + 1)]
    for t in threads:
        t.start()
    rows = {}
    try:
        rows = view(port, stop, a.seconds)
    except KeyboardInterrupt:
        stop.set()
    finally:
        stop.set()
        for t in threads:
            t.join(5)
        broker.terminate()
        broker.wait(5)
        shutil.rmtree(tmp, ignore_errors=True)
    got = sum(r["n"] for r in rows.values())
    print("readings received: %d from %d nodes" % (got, len(rows)))
    return 0 if (not a.seconds or got) else 1


if __name__ == "__main__":
    sys.exit(main())
