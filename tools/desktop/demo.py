"""The desktop demo: a broker on 127.0.0.1, simulated sensor nodes, the Spark
pipeline, and a live console view of what arrives. Each node is the real
firmware (firmware/node.py) with the desktop board profile
(boards/desktop.py), run in a thread against the CPython stand-ins for
machine/network/esp32 in tools/desktop/shim/.

`make demo` runs it (DEMO_ARGS="..." for the options below). The broker is
umqtt3's own (python -m umqtt3.broker) when it is available, else Debian's
mosquitto; the view prints the mosquitto_sub command that watches it from
another terminal.

The pipeline (pipeline/umqtt3_pipeline) runs as `python -m umqtt3_pipeline.job`
on Spark local[2]: its ingest takes every reading into a durable log under
--out, Spark de-duplicates them and writes per-node, per-metric windows to
Parquet, and at the end each node's series goes to --out/telemetry.png. A
window is written once the watermark has passed its end, so the last few
seconds of a run stay unwritten. --no-spark leaves it out (no Java needed).
--out is emptied first, so it must be new, empty or one an earlier demo
wrote (it leaves a .demo-out file there; the default, build/demo, is its
own); any other directory is refused, untouched.

Ctrl-C (or --seconds) stops it: the nodes, then the pipeline (Spark first
processes what the log holds, up to 90 s; a second Ctrl-C cuts that short),
then the broker, and a summary is printed. If the output goes to a pipe that
closes (`make demo | head`), everything it started is stopped at once.
"""
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from tools import args, outdir, procs
# the firmware on the desktop and its broker, shared with tools/desktop/simulate.py
from tools.desktop.sim import (PREFIX, broker_kind, check_config, node_config, run_node,
                               start_broker)
from umqtt3.client import MQTTClient
from umqtt3_pipeline.job import spark_missing

RATE_SPAN = 5.0  # seconds the live view's msg/s is measured over
MARKER = ".demo-out"  # in --out: the demo wrote it, and may empty it
DEFAULT_OUT = os.path.join("build", "demo")  # the demo's own (a run before MARKER has none)


class Out:
    """The demo's console. Once it is gone (`make demo | head` has read
    enough, `| tee log` was stopped) say() stays silent and gone is set,
    so the demo stops everything it started and exits quietly."""

    def __init__(self):
        self.gone = threading.Event()

    def say(self, text, clear=False):
        if self.gone.is_set():
            return
        try:
            if clear:
                sys.stdout.write("\x1b[H\x1b[2J")
            sys.stdout.write(text + "\n")
            sys.stdout.flush()
        except (BrokenPipeError, ValueError, OSError):
            self.gone.set()
            # nothing more reaches the pipe, not even at interpreter exit
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)


def node(name, port, stop, period, nodes):
    """One simulated sensor node: firmware/node.py's Node, until stop."""
    run_node(name, node_config(name, port, period), stop, nodes)


class Pipeline:
    """The telemetry job as a subprocess, and what it has written so far."""

    def __init__(self, port, out, window):
        from umqtt3_pipeline.job import ensure_session
        renew_out(out)
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
        self.killed = False  # stopped without waiting: its exit status is ours
        self.t0 = time.monotonic()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.said.append(line.rstrip())

    def status(self):
        from umqtt3_pipeline import log as L
        from umqtt3_pipeline.output import files as parquet_files
        n = L.count(self.log) if os.path.isdir(self.log) else 0
        try:
            files = len(parquet_files(self.parquet))
        except (OSError, ValueError):
            files = 0
        if self.proc.poll() is not None:
            state = "exited %d (its log: %s)" % (self.proc.returncode, self.stderr.name)
        elif not any(line.startswith("umqtt3 telemetry:") for line in self.said):
            state = "starting Spark (a JVM, %ds so far; the log keeps every reading meanwhile)" % (
                time.monotonic() - self.t0)
        else:
            state = "running"
        return "pipeline: %s; %d readings in the durable log; %d Parquet files" % (state, n, files)

    def windows(self):
        from umqtt3_pipeline.plot import load
        try:
            return load(self.parquet)
        except (OSError, ValueError) as e:
            print("pipeline: cannot read %s: %s" % (self.parquet, e), file=sys.stderr)
            return load(os.path.join(self.out, "none"))

    def stop(self, timeout=150):
        """SIGTERM: the job lets Spark process what the log holds (up to 90 s
        on a slow machine), stops its query, writes the plot and exits."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        finally:
            self.kill()
        self.stderr.close()
        return self.proc.returncode

    def kill(self):
        """SIGKILL whatever is left of the job's process group (Spark's JVM)."""
        self.killed = self.killed or self.proc.poll() is None
        procs.kill_group(self.proc)
        self.proc.wait()


def renew_out(path):
    """Empty --out (parse() made sure it is the demo's) for a new run."""
    outdir.renew(path, MARKER, "written by the umqtt3 demo; emptied by the next one")


def rates(history, counts, now):
    """msg/s per node over the last RATE_SPAN seconds. history holds
    (time, {node: count}) snapshots, the first one taken when the view
    subscribed (every count 0), so the first frame's rates (a second after
    that) are right too."""
    history.append((now, dict(counts)))
    while len(history) > 2 and now - history[1][0] >= RATE_SPAN:
        history.popleft()
    t, then = history[0]
    dt = max(now - t, 1e-3)
    return {name: (n - then.get(name, 0)) / dt for name, n in counts.items()}


def frame(rows, rate, nodes, pipeline, watch):
    lines = [watch, "", "%-10s %-8s %8s %6s %8s %8s" % (
        "node", "status", "temp", "seq", "msg/s", "inflight")]
    for name in sorted(rows):
        r = rows[name]
        last = r["last"] or {}
        n = (nodes or {}).get(name)
        inflight = n.client.inflight() if n is not None and n.client else "-"
        lines.append("%-10s %-8s %8s %6s %8.1f %8s" % (
            name, r["status"], last.get("v", "-"), last.get("seq", "-"), rate.get(name, 0.0),
            inflight))
    if pipeline is not None:
        lines.append("")
        lines.append(pipeline.status())
    return "\n".join(lines)


def view(port, stop, seconds, out, nodes=None, pipeline=None, rows=None):
    """Subscribe to everything the nodes send; redraw a table once a second.
    rows: {node: what arrived}, filled as it goes (still there after Ctrl-C)."""
    rows = {} if rows is None else rows
    counts = {}
    c = MQTTClient("demo-view", "127.0.0.1", port, keepalive=10)

    def on_msg(topic, msg):
        parts = topic.decode("utf-8", "replace").split("/")
        if len(parts) != 3:
            return
        r = rows.setdefault(parts[1], {"status": "?", "last": None, "n": 0})
        if parts[2] == "status":
            r["status"] = msg.decode("utf-8", "replace")
        else:
            if parts[2] == "temp":
                # anyone may publish there: what is no node's reading shows as "-"
                try:
                    last = json.loads(msg)
                except ValueError:
                    last = None
                r["last"] = last if isinstance(last, dict) else None
            r["n"] += 1
            counts[parts[1]] = r["n"]

    c.set_callback(on_msg)
    c.connect()
    c.subscribe(PREFIX + "/#", 1)
    history = collections.deque([(time.monotonic(), {})])
    watch = "watch the broker: mosquitto_sub -h 127.0.0.1 -p %d -t '#' -v" % port
    t_end = time.monotonic() + seconds if seconds else None
    next_draw = history[0][0] + 1  # the first frame's rates cover a whole second
    while not stop.is_set() and not out.gone.is_set():
        c.poll(50)
        now = time.monotonic()
        if now >= next_draw:
            next_draw = now + 1
            out.say(frame(rows, rates(history, counts, now), nodes, pipeline, watch),
                    clear=sys.stdout.isatty())
        if t_end and now >= t_end:
            stop.set()
    c.disconnect()
    return rows


def parser():
    ap = args.parser("python -m tools.desktop.demo", __doc__)
    ap.add_argument("--nodes", type=args.count, default=3, help="simulated sensor nodes")
    ap.add_argument("--seconds", type=args.not_negative, default=0,
                    help="stop after this long (0: until Ctrl-C)")
    ap.add_argument("--period", type=args.positive, default=0.5, help="seconds between readings")
    ap.add_argument("--port", type=args.port_or_zero, default=0,
                    help="the broker's port on 127.0.0.1 (0: a free one)")
    ap.add_argument("--broker", choices=("umqtt3", "mosquitto"),
                    help="which broker (default: umqtt3's own, else mosquitto)")
    ap.add_argument("--no-spark", action="store_true", help="leave the Spark pipeline out")
    ap.add_argument("--out", default=DEFAULT_OUT,
                    help="the pipeline's log, checkpoint, Parquet and plot (emptied first: "
                         "only a new or empty directory, or one the demo wrote)")
    ap.add_argument("--window", type=args.positive, default=5, help="window length, seconds")
    return ap


def parse(argv=None):
    ap = parser()
    a = ap.parse_args(argv)
    if a.port:
        args.check_free(ap, a.port)
    if not a.no_spark:
        args.check_dir(ap, a.out, "--out")
        if a.out != DEFAULT_OUT and not outdir.ours(a.out, MARKER):
            ap.error("--out %s: not a directory the demo made (no %s in it): not emptying it; "
                     "name an empty or new directory" % (a.out, MARKER))
    if a.broker == "mosquitto" and not shutil.which("mosquitto"):
        ap.error("--broker mosquitto: mosquitto is not installed (apt-get install mosquitto)")
    check_config(ap, node_config("node%d" % a.nodes, a.port or 1883, a.period))
    return a


def main(argv=None):
    a = parse(argv)
    out = Out()
    stop = threading.Event()
    procs.stop_on_signals(stop)
    port = a.port or procs.free_port()
    kind = broker_kind(a.broker)
    tmp = tempfile.mkdtemp(prefix="umqtt3-demo-")
    broker = pipeline = None
    nodes, rows, threads = {}, {}, []
    rc = None
    try:
        broker = start_broker(kind, port, tmp)
        out.say("broker: %s on 127.0.0.1:%d; %d nodes" % (kind, port, a.nodes))
        out.say("watch the broker: mosquitto_sub -h 127.0.0.1 -p %d -t '#' -v" % port)
        why = "--no-spark" if a.no_spark else spark_missing()
        if why:
            out.say("pipeline: off (%s)" % why)
        else:
            out.say("pipeline: starting Spark local[2] -> %s" % a.out)
            pipeline = Pipeline(port, a.out, a.window)
        threads = [threading.Thread(target=node, args=("node%d" % i, port, stop, a.period, nodes),
                                    daemon=True)
                   for i in range(1, a.nodes + 1)]
        for t in threads:
            t.start()
        view(port, stop, a.seconds, out, nodes, pipeline, rows)
    except KeyboardInterrupt:
        pass
    except OSError as e:  # the view's connection to our own broker, a directory
        print("demo: %s" % e, file=sys.stderr)
        rc = 1
    finally:
        stop.set()
        try:
            for t in threads:
                t.join(5)
            if pipeline is not None:
                out.say("stopping: Spark processes what the log holds, then writes the plot "
                        "(Ctrl-C again to cut it short) ...")
                if not out.gone.is_set():
                    prc = pipeline.stop()
                else:
                    pipeline.kill()  # nobody is reading: no reason to wait for Spark
                    prc = None
                rc = rc or (1 if prc else None)
        except KeyboardInterrupt:
            if pipeline is not None:
                pipeline.kill()
            out.say("stopped without waiting for the pipeline")
        finally:
            procs.stop(broker, 5)
            shutil.rmtree(tmp, ignore_errors=True)
    return summary(a, out, rows, pipeline, rc)


def summary(a, out, rows, pipeline, rc):
    got = sum(r["n"] for r in rows.values())
    out.say("readings received: %d from %d nodes" % (got, len(rows)))
    ok = rc is None and (not a.seconds or got or out.gone.is_set())
    if pipeline is not None and not out.gone.is_set():
        for line in pipeline.said:
            out.say(line)
        w = pipeline.windows()
        out.say("windows in Parquet: %d from %d nodes (%s)" % (len(w), w["node"].nunique(),
                                                              pipeline.parquet))
        if os.path.exists(pipeline.png):
            out.say("plot: %s" % pipeline.png)
        if pipeline.proc.returncode and not pipeline.killed:
            out.say("the pipeline failed (exit %s); its log: %s"
                    % (pipeline.proc.returncode, os.path.join(a.out, "spark.log")))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
