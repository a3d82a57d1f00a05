"""The desktop demo: a broker on 127.0.0.1, simulated sensor nodes, the Spark
pipeline, and a live console view of what arrives. Each node is the real
firmware (firmware/node.py) with the desktop board profile
(boards/desktop.py), run in a thread against the CPython stand-ins for
machine/network/esp32 in tools/desktop/shim/.

    python -m tools.desktop.demo [--nodes 3] [--seconds 0] [--port 0] [--broker umqtt3|mosquitto]
                                     [--no-spark] [--out build/demo] [--window 5]

--seconds 0 runs until Ctrl-C. The broker is umqtt3's own (python -m
umqtt3.broker) when it is available, else Debian's mosquitto.

The pipeline (pipeline/umqtt3_pipeline) runs as `python -m umqtt3_pipeline.job`
on Spark local[2]: its ingest takes every reading into a durable log under
--out, Spark de-duplicates them and writes per-node, per-metric windows to
Parquet, and at the end each node's series goes to --out/telemetry.png. A
window is written once the watermark has passed its end, so the last few
seconds of a run stay unwritten. --no-spark leaves it out (no Java needed).
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from tools import procs
# the firmware on the desktop and its broker, shared with tools/desktop/simulate.py
from tools.desktop.sim import PREFIX, broker_kind, node_config, run_node, start_broker
from umqtt3.client import MQTTClient

ROOT = procs.ROOT


def node(name, port, stop, period, nodes):
    """One simulated sensor node: firmware/node.py's Node, until stop."""
    run_node(name, node_config(name, port, period), stop, nodes)


def spark_missing():
    """Why the Spark pipeline cannot run here, or None."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "pyspark is not installed (pip install .[spark])"
    if not shutil.which("java") and not os.environ.get("JAVA_HOME"):
        return "no Java runtime"
    return None


class Pipeline:
    """The telemetry job as a subprocess, and what it has written so far."""

    def __init__(self, port, out, window):
        from umqtt3_pipeline.job import ensure_session
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        self.out = out
        self.log = os.path.join(out, "log")
        self.parquet = os.path.join(out, "parquet")
        self.png = os.path.join(out, "telemetry.png")
        topics = PREFIX + "/+/+"
        # the session exists before the first reading: the broker keeps
        # everything for the ingest while Spark starts
        ensure_session("127.0.0.1:%d" % port, topics, 1, "demo-pipeline")
        env = dict(procs.python_env(), SPARK_LOCAL_IP="127.0.0.1")
        self.stderr = open(os.path.join(out, "spark.log"), "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "umqtt3_pipeline.job", "--master", "local[2]",
             "--broker", "127.0.0.1:%d" % port, "--topics", topics,
             "--client-id", "demo-pipeline", "--log", self.log, "--out", self.parquet,
             "--checkpoint", os.path.join(out, "checkpoint"), "--window", "%g seconds" % window,
             "--watermark", "%g seconds" % (window / 2), "--trigger", "1", "--plot", self.png,
             "--drain", "90"],
            env=env, stdout=subprocess.PIPE, stderr=self.stderr, text=True,
            start_new_session=True)  # Ctrl-C goes to the demo, which stops the job itself
        self.said = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.said.append(line.rstrip())

    def status(self):
        from umqtt3_pipeline import log as L
        from umqtt3_pipeline.plot import committed_files
        n = L.count(self.log) if os.path.isdir(self.log) else 0
        try:
            files = len(committed_files(self.parquet))
        except (OSError, ValueError):
            files = 0
        state = "running" if self.proc.poll() is None else "exited %d" % self.proc.returncode
        return "pipeline: %s; %d readings in the durable log; %d Parquet files" % (state, n, files)

    def windows(self):
        from umqtt3_pipeline.plot import load
        return load(self.parquet)

    def stop(self, timeout=150):
        """SIGTERM: the job lets Spark process what the log holds (up to 90 s
        on a slow machine), stops its query, writes the plot and exits."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.stderr.close()
        return self.proc.returncode


def view(port, stop, seconds, nodes=None, pipeline=None, rows=None):
    """Subscribe to everything the nodes send; redraw a table once a second.
    rows: {node: what arrived}, filled as it goes (still there after Ctrl-C)."""
    rows = {} if rows is None else rows
    c = MQTTClient("demo-view", "127.0.0.1", port, keepalive=10)

    def on_msg(topic, msg):
        parts = topic.decode().split("/")
        if len(parts) != 3:
            return
        r = rows.setdefault(parts[1], {"status": "?", "last": None, "n": 0, "t0": time.monotonic()})
        if parts[2] == "status":
            r["status"] = msg.decode()
        else:
            if parts[2] == "temp":
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
            lines = ["%-10s %-8s %8s %6s %8s %8s" % ("node", "status", "temp", "seq", "msg/s",
                                                     "inflight")]
            for name in sorted(rows):
                r = rows[name]
                last = r["last"] or {}
                rate = r["n"] / max(now - r["t0"], 1e-3)
                n = (nodes or {}).get(name)
                inflight = n.client.inflight() if n is not None and n.client else "-"
                lines.append("%-10s %-8s %8s %6s %8.1f %8s" % (
                    name, r["status"], last.get("v", "-"), last.get("seq", "-"), rate, inflight))
            if pipeline is not None:
                lines.append("")
                lines.append(pipeline.status())
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
    ap.add_argument("--no-spark", action="store_true", help="leave the Spark pipeline out")
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "demo"),
                    help="the pipeline's log, checkpoint, Parquet and plot (emptied first)")
    ap.add_argument("--window", type=float, default=5, help="window length, seconds")
    a = ap.parse_args()
    port = a.port or procs.free_port()
    kind = broker_kind(a.broker)
    tmp = tempfile.mkdtemp(prefix="umqtt3-demo-")
    broker = start_broker(kind, port, tmp)
    print("broker: %s on 127.0.0.1:%d; %d nodes" % (kind, port, a.nodes), flush=True)
    pipeline = None
    why = "--no-spark" if a.no_spark else spark_missing()
    if why:
        print("pipeline: off (%s)" % why, flush=True)
    else:
        pipeline = Pipeline(port, a.out, a.window)
        print("pipeline: Spark local[2] -> %s" % a.out, flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    nodes = {}
    threads = [threading.Thread(target=node, args=("node%d" % i, port, stop, a.period, nodes),
                                daemon=True)
               for i in range(1, a.nodes + 1)]
    for t in threads:
        t.start()
    rows = {}
    try:
        view(port, stop, a.seconds, nodes, pipeline, rows)
    except KeyboardInterrupt:
        stop.set()
    finally:
        stop.set()
        for t in threads:
            t.join(5)
        rc = None
        if pipeline is not None:
            print("stopping the pipeline ...", flush=True)
            try:
                rc = pipeline.stop()
            except KeyboardInterrupt:
                os.killpg(pipeline.proc.pid, signal.SIGKILL)
        broker.terminate()
        broker.wait(5)
        shutil.rmtree(tmp, ignore_errors=True)
    got = sum(r["n"] for r in rows.values())
    print("readings received: %d from %d nodes" % (got, len(rows)))
    ok = not a.seconds or got
    if pipeline is not None:
        for line in pipeline.said:
            print(line)
        w = pipeline.windows()
        print("windows in Parquet: %d from %d nodes (%s)" % (len(w), w["node"].nunique(),
                                                             pipeline.parquet))
        if os.path.exists(pipeline.png):
            print("plot: %s" % pipeline.png)
        if rc:
            print("the pipeline failed (exit %s); its log: %s"
                  % (rc, os.path.join(a.out, "spark.log")))
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
