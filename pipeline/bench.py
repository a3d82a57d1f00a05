"""The pipeline's throughput: messages per second from the broker into the
durable ingest log and through a committed Spark batch (local[2]), with one
ingest and with several under one shared subscription, next to a naive peer
measured in the same run; and the end-to-end latency.

    python -m pipeline.bench [--messages 40000] [--naive-messages N] [--rounds 2]
        [--only naive,ingest,ingest2,noop,job,job2,run,run2,spark,latency,latency2]
        [--parts 2] [--broker-inflight 32] [--broker-inflight-v5 1024] [--ingest-level 5]
        [--min-rows N] [--max-delay S]
        [--conf KEY=VALUE] [--progress] [--profile FILE]

Every throughput measurement is the same: two publisher processes put N
firmware-format readings (50 nodes) at QoS 1 into our broker while the
consumer's persistent session(s) are offline, so the broker holds the
backlog; the clock runs from the consumer's (re)start until it has them all:
- naive: paho-mqtt writes each message to a file with an fsync before
  returning from on_message (paho acknowledges after it returns), the usual
  "durable before ack" subscriber;
- ingest: the umqtt3 ingest has every message in its log (group fsync; each
  acknowledgement leaves only after the fsync that covers it); ingest2:
  --parts ingest processes under one MQTT 5 shared subscription, each into
  its own log;
- noop: the stream reader into Spark's noop sink has committed the batch
  holding the last message (the clock includes the ingest);
- job: the same through the telemetry job (dedup, windows, Parquet): a
  catch-up after a restart of the job (its query and its ingest); job2: the
  job reading the logs of --parts ingest processes (--ingest external),
  restarted with them;
- run, run2: the job up and warm (--ingest external), only its one or
  --parts ingest processes restart: a running job's throughput;
- spark: the job's Spark side alone, running, on a log that gets the whole
  backlog at once (no broker, no ingest, no fsync waits).
For job and job2 the query first runs on 1,000 readings (JVM and Python
workers warm), stops (and closes: the backlog is published once the close's
watermark is past, so that no reading of it is late), and is restarted from
its checkpoint when the clock starts. Every job row then closes and checks
that the windows count every reading, once.

latency, latency2: readings at a steady 400/s with their publish time, the
job running (1 s windows and watermark) with one ingest or --parts; from a
reading's publish to the first Parquet file holding its window, beside the
naive subscriber's publish to fsync (latency()).

The header and the last line give the load average and the disk's fdatasync
time: one ingest makes at most one in-flight window of messages per fsync, so a
slow fsync caps it: at MQTT 3.1.1 (--ingest-level 4) our broker's window for
every client (--broker-inflight, 32), at MQTT 5 the ingest's Receive Maximum up
to --broker-inflight-v5 (1024).
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time

from pipeline.tests.pipeline_support import Broker, publish_all, publisher, reading
from tools import args
from tools.measure.common import dist_version, median, python_version
from umqtt3_pipeline.job import ensure_session

def backlog(n, prefix, boot=7):
    return [reading("node%02d" % (i % 50), "temp", 20 + (i % 100) / 10, boot, i // 50,
                    prefix=prefix) for i in range(n)]


def drop_session(broker, cid):
    """Connect with a clean session: the broker forgets cid's session, which
    would otherwise queue every later message of its topics."""
    from umqtt3.client import MQTTClient
    c = MQTTClient(cid, "127.0.0.1", broker.port)
    c.connect(clean_session=True)
    c.disconnect()


def publish_main(port, prefix, first, count):
    """A publisher process: its share of the readings, then exit."""
    msgs = backlog(first + count, prefix)[first:]
    c = publisher(port, "bench-pub-%d" % first)
    c.window = 32
    publish_all(c, msgs, 1, timeout=600)
    c.disconnect()


def publish(broker, n, prefix, procs=2):
    """Start the publisher processes; returns them (the clock starts now)."""
    import subprocess
    share = n // procs
    return [subprocess.Popen([sys.executable, "-m", "pipeline.bench", "--publish",
                              str(broker.port), prefix, str(i * share),
                              str(share if i < procs - 1 else n - i * share)])
            for i in range(procs)]


def join(pubs):
    for p in pubs:
        if p.wait(600):
            raise SystemExit("a publisher failed")


_used = [None]  # CPU µs per message of the last measurement (metered), None without psutil


def metered(broker):
    """Start counting the CPU of this process, its children and the broker;
    the function returned stops and keeps the CPU per message in _used."""
    c0 = cpu(broker)

    def done(n):
        c1 = cpu(broker)
        _used[0] = 1e6 * sum(c1[k] - c0.get(k, 0) for k in c1) / n if c1 else None
        return c0, c1
    return done


def naive(broker, msgs, tmp):
    """paho-mqtt, fsync per message in on_message."""
    import paho.mqtt.client as mqtt
    cid = "bench-naive"
    prefix = cid
    ensure_session("127.0.0.1:%d" % broker.port, prefix + "/+/+", 1, cid)
    f = open(os.path.join(tmp, "naive.log"), "ab")
    done = threading.Event()
    count = [0]
    n = len(msgs)

    def on_message(client, userdata, m):
        f.write(m.payload)
        f.flush()
        os.fsync(f.fileno())
        count[0] += 1
        if count[0] >= n:
            done.set()

    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=cid, clean_session=False)
    c.on_message = on_message
    join(publish(broker, n, prefix))  # the backlog, queued by the broker
    m = metered(broker)
    t0 = time.perf_counter()
    c.connect("127.0.0.1", broker.port, 30)
    c.loop_start()
    if not done.wait(600):
        raise SystemExit("naive: only %d of %d messages" % (count[0], n))
    dt = time.perf_counter() - t0
    m(n)
    c.loop_stop()
    c.disconnect()
    f.close()
    drop_session(broker, cid)
    return n / dt


class Ingests:
    """k ingest processes (python -m umqtt3_pipeline.ingest) under one MQTT 5
    shared subscription $share/<group>/<topics> (k > 1), each into
    root/<name>: the scale-out of docs/pipeline.md."""

    def __init__(self, broker, root, k, cid, topics, level=4):
        self.broker, self.root, self.cid, self.topics = broker, root, cid, topics
        self.level = level  # of one ingest alone; several share at MQTT 5
        self.names = ["p%d" % i for i in range(k)]
        self.procs = []
        self.at = {}

    def start(self):
        import subprocess
        from tools import procs
        # one alone subscribes plainly, at --ingest-level; a shared
        # subscription needs MQTT 5
        share = (["--share", self.cid] if len(self.names) > 1
                 else ["--level", str(self.level)])
        self.procs = [subprocess.Popen(
            [sys.executable, "-m", "umqtt3_pipeline.ingest", "--log",
             os.path.join(self.root, name), "--broker", "127.0.0.1:%d" % self.broker.port,
             "--client-id", "%s-%s" % (self.cid, name), "--topics", self.topics] + share,
            env=procs.python_env(), stdout=subprocess.PIPE, text=True)
            for name in self.names]
        for p in self.procs:
            if p.stdout.readline().strip() != "ready":
                raise SystemExit("an ingest process did not start")
        return self

    def stop(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.wait(30)
        self.procs = []

    def count(self):
        """Messages in the logs so far (whole records, read as the job does)."""
        from umqtt3_pipeline import log as L
        total = 0
        for name in self.names:
            d = os.path.join(self.root, name)
            if name not in self.at:
                first = L.first(d) if L.segments(d) else None
                if first is None:
                    continue
                self.at[name] = first
            self.at[name] = L.tail(d, *self.at[name])
            total += self.at[name][1]
        return total

    def drop(self):
        for name in self.names:
            drop_session(self.broker, "%s-%s" % (self.cid, name))


def ingest(broker, msgs, tmp, parts=1, level=4, show=False, profile=None):
    """The umqtt3 ingest alone: broker to durable log; with parts > 1 that
    many ingest processes under one shared subscription. Returns msg/s and
    messages per fsync (one ingest only, else None). show: print the CPU of
    the broker and of the ingest (one: a thread of this process, which only
    polls the log's durable end beside it; several: their processes).
    profile: a cProfile.Profile that the one ingest's thread runs under."""
    from umqtt3_pipeline.ingest import Ingest
    cid = "bench-ingest%d" % parts
    prefix = cid
    n = len(msgs)
    if parts > 1:
        ings = Ingests(broker, os.path.join(tmp, cid), parts, cid, prefix + "/+/+")
        ings.start().stop()  # the group's sessions: the broker queues for them
        join(publish(broker, n, prefix))
        m = metered(broker)
        t0 = time.perf_counter()
        ings.start()
        end = time.monotonic() + 600
        while ings.count() < n:
            if time.monotonic() > end:
                raise SystemExit("ingest: only %d of %d messages" % (ings.count(), n))
            time.sleep(0.002)
        dt = time.perf_counter() - t0
        c0, c1 = m(n)
        if show:
            show_cpu(c0, c1, dt)
        ings.stop()
        ings.drop()
        shutil.rmtree(os.path.join(tmp, cid))
        return n / dt, None
    ensure_session("127.0.0.1:%d" % broker.port, prefix + "/+/+", 1, cid, level)
    join(publish(broker, n, prefix))  # the backlog, queued by the broker
    m = metered(broker)
    t0 = time.perf_counter()
    if profile is not None:
        # the profiler of the thread the ingest starts (threading's hook
        # runs in each new thread before its target)
        threading.setprofile(lambda *_: (sys.setprofile(None), profile.enable()))
    try:
        ing = Ingest(os.path.join(tmp, "ingest-log"), "127.0.0.1:%d" % broker.port,
                     [prefix + "/+/+"], cid, level=level).start()
    finally:
        threading.setprofile(None)
    end = time.monotonic() + 600
    while ing.log.durable()[1] < n:
        ing.check()
        if time.monotonic() > end:
            raise SystemExit("ingest: only %d of %d messages" % (ing.log.durable()[1], n))
        time.sleep(0.002)
    dt = time.perf_counter() - t0
    c0, c1 = m(n)
    if show:
        show_cpu(c0, c1, dt)
    syncs = ing.log.syncs
    ing.stop()
    shutil.rmtree(os.path.join(tmp, "ingest-log"))
    drop_session(broker, cid)
    return n / dt, n / max(syncs, 1)


def _end_n(progress):
    end = progress["sources"][0]["endOffset"]
    if isinstance(end, str):
        end = json.loads(end)
    if not end:
        return 0
    if "parts" in end:  # several ingest logs: the messages of them all
        return sum(p["n"] for p in end["parts"].values())
    return end["n"]


PHASES = ("latestOffset", "walCommit", "queryPlanning", "getBatch", "addBatch",
          "commitOffsets", "triggerExecution")


def show_progress(sink, t0, prog):
    """Where a run's time went: per batch, Spark's durations (ms) by phase."""
    from datetime import datetime, timezone
    print("    %s: %s" % (sink, "  ".join(PHASES)))
    for p in prog:
        ts = datetime.strptime(p["timestamp"], "%Y-%m-%dT%H:%M:%S.%fZ")
        ts = ts.replace(tzinfo=timezone.utc).timestamp()
        d = p["durationMs"]
        # per state store: rows held, ms spent on updates, removals and commit
        state = ["%s %d rows %d ms, %d late" % (s["operatorName"], s["numRowsTotal"],
                                       s.get("allUpdatesTimeMs", 0) + s.get("allRemovalsTimeMs", 0)
                                       + s.get("commitTimeMs", 0), s.get("numRowsDroppedByWatermark", 0))
                 for s in p.get("stateOperators", [])]
        print("    batch %d at %+.2f s: %d rows  %s  %s" % (
            p["batchId"], ts - (time.time() - (time.perf_counter() - t0)), p["numInputRows"],
            " ".join("%d" % d.get(k, 0) for k in PHASES), "; ".join(state)))


def _kind(cmd, pid, broker_pid):
    if pid == broker_pid:
        return "broker"
    if pid == os.getpid():
        return "bench (Spark's driver in Python)"
    if "java" in os.path.basename(cmd[0]) if cmd else False:
        return "Spark's JVM"
    line = " ".join(cmd)
    if "umqtt3_pipeline.ingest" in line:
        return "ingest processes"
    if "pipeline.bench" in line:
        return "publishers"
    return "Spark's Python workers (reader, ingest)"


def cpu(broker):
    """CPU seconds so far per kind of process (this one, its children, the
    broker), counting children that have exited into their parent; by
    process with BENCH_CPU_PIDS=1. Empty without psutil."""
    try:
        import psutil
    except ImportError:
        return {}
    me = psutil.Process(os.getpid())
    got = {}
    bpid = broker.proc.pid if broker is not None else None
    for p in [me] + me.children(recursive=True) + ([psutil.Process(bpid)] if bpid else []):
        try:
            t = p.cpu_times()
            k = _kind(p.cmdline(), p.pid, bpid)
            if os.environ.get("BENCH_CPU_PIDS"):
                k = "%s [%d %s]" % (k, p.pid, " ".join(p.cmdline())[-60:])
        except psutil.Error:
            continue
        got[k] = got.get(k, 0) + t.user + t.system + t.children_user + t.children_system
    return got


def show_cpu(before, after, dt):
    """Where the machine's CPU went between two cpu() snapshots."""
    if not after:
        print("    (CPU per process: pip install psutil)")
        return
    total = sum(after.get(k, 0) - before.get(k, 0) for k in after)
    print("    CPU in %.2f s of wall time (2 cores: %.2f s available): %s" % (
        dt, 2 * dt, ", ".join("%s %.2f s" % (k, after[k] - before.get(k, 0))
                              for k in sorted(after, key=lambda k: before.get(k, 0) - after[k])
                              if after[k] - before.get(k, 0) >= 0.005)))
    print("    total %.2f s, %.0f %% of the 2 cores" % (total, 50 * total / dt))


def _end_time(p):
    """When the batch of progress p ended (time.time())."""
    from datetime import datetime, timezone
    ts = datetime.strptime(p["timestamp"], "%Y-%m-%dT%H:%M:%S.%fZ")
    return ts.replace(tzinfo=timezone.utc).timestamp() + p["durationMs"]["triggerExecution"] / 1e3


def _done_at(prog, k):
    """When the first batch that committed message k ended (time.time())."""
    return min(_end_time(p) for p in prog if _end_n(p) >= k)


# how often the bench asks the query for its progress: each ask costs the
# JVM a progress serialized to JSON and this process its parse, on the cores
# the pipeline runs on; the time is taken from the progress itself
# (_done_at), so a slower poll loses no precision
POLL = 0.05


def steady(prog, t0, n0):
    """msg/s after the first batch with rows: the rows of the later batches
    over the time from the end of that batch to the end of the last (the
    restart and the first batch left out); None with one batch."""
    end = _end_time
    data = [p for p in prog if p["numInputRows"] and _end_n(p) > n0]
    if len(data) < 2:
        return None
    return sum(p["numInputRows"] for p in data[1:]) / (end(data[-1]) - end(data[0]))


def wait_past_close(q, a):
    """Wait until the watermark the warm run's close set is in the past: a
    reading that arrives before it is late for the restarted query and
    dropped (docs/pipeline.md, "Every window written"), and the figure
    would time a job that windows nothing."""
    from umqtt3_pipeline import job
    closes = [json.loads(e) if isinstance(e, str) else e
              for e in (p["sources"][0]["endOffset"] for p in q.recentProgress)]
    at = max([e.get("close", 0) for e in closes if e] or [0]) / 1000
    wm = job.close_watermark(at, a.window)
    while time.time() < wm + 0.2:
        time.sleep(0.05)


def counted(out):
    """Readings counted in the windows written to out."""
    from umqtt3_pipeline.output import load
    df = load(out)
    return int(df["count"].sum()) if len(df) else 0


def spark_run(spark, broker, msgs, tmp, k, sink="job", show=False, batch=(), parts=1,
              running=False, level=4):
    """broker -> ingest log -> committed batch of the telemetry job (sink
    "job"), or of the bare source into Spark's noop sink ("noop"). parts 1:
    the job's own ingest (on the driver); more, or running: that many ingest
    processes under one shared subscription, the job reading their logs
    (--ingest external). A catch-up after a restart: the warm run of the
    job stops the way the job does (job.drain: the no-data batch that
    writes the windows its watermark closed runs before the stop), so the
    restart does not begin with that batch; the clock runs from the restart
    of the query and the ingests. running: the query keeps running, warm,
    and only the ingests restart (the clock runs from their start): what a
    job that is up does with a burst. Returns (msg/s, batches, msg/s after
    the first batch)."""
    from umqtt3_pipeline import job
    cid = "bench-spark-%s%d%s-%d" % (sink, parts, "r" if running else "", k)
    prefix = cid
    topics = prefix + "/+/+"
    n = len(msgs)
    warm = 1000
    d = os.path.join(tmp, cid)
    external = parts > 1 or running
    a = job.parser().parse_args(["--broker", "127.0.0.1:%d" % broker.port, "--log", d + "/log",
                                 "--out", d + "/out", "--checkpoint", d + "/ckpt",
                                 "--client-id", cid, "--trigger", "0.001", "--max-rows", "0",
                                 "--topics", topics, "--level", str(level)] + list(batch)
                                + (["--ingest", "external"] if external else []))
    ings = Ingests(broker, a.log, parts, cid, topics, level) if external else None

    def start():
        if ings is not None:
            ings.start()
        if sink == "job":
            return job.start(spark, a)
        if not external:
            job.ensure_session(a.broker, topics, 1, cid, a.level)
        return (job.readings(spark, a.broker, topics, a.log, 1, cid, min_rows=a.min_rows,
                             max_delay=a.max_delay, external=external, level=a.level)
                .writeStream.format("noop")
                .option("checkpointLocation", a.checkpoint).trigger(processingTime="0 seconds")
                .start())

    def stop(q):
        q.stop()
        if ings is not None:
            ings.stop()

    def committed(k):
        end = time.monotonic() + 600
        while True:
            # the last progress only (the whole list, parsed each time, would
            # cost the machine's CPU the pipeline needs)
            last = q.lastProgress
            if last is not None and _end_n(last) >= k:
                return q.recentProgress
            if q.exception() is not None:
                raise SystemExit("query failed: %s" % q.exception())
            if time.monotonic() > end:
                prog = q.recentProgress
                raise SystemExit("spark: %d of %d messages committed"
                                 % (max([_end_n(p) for p in prog] or [0]), k))
            time.sleep(POLL)
    # a first run of the query warms the JVM and the Python workers, then
    # stops (running: only the ingests stop); the backlog queues for the
    # session(s); the clock runs from the restart (from the same checkpoint)
    # until the backlog is committed
    q = start()
    try:
        c = publisher(broker.port, "bench-warm")
        publish_all(c, backlog(warm, prefix, boot=6), 1)  # other keys than the backlog's
        c.disconnect()
        committed(warm)
        if running:
            ings.stop()
        elif sink == "job":
            job.drain(q, a.log, 10, settle=3)  # stopped as the job stops: see the doc above
            wait_past_close(q, a)
    finally:
        if not running:
            stop(q)
    try:
        join(publish(broker, n, prefix))
        m = metered(broker)
        t0, w0 = time.perf_counter(), time.time()
        if running:
            ings.start()
        else:
            q = start()
        prog = committed(warm + n)
        dt = _done_at(prog, warm + n) - w0
        c0, c1 = m(n)
        batches = sum(1 for p in prog if p["numInputRows"] and _end_n(p) > warm)
        if show:
            show_cpu(c0, c1, dt)
            show_progress("%s, %d ingest%s%s" % (sink, parts, "s" if parts > 1 else "",
                                                 ", running" if running else ""), t0, prog)
        if sink == "job":  # untimed: close, and check that the windows count every reading
            job.drain(q, a.log, 60, settle=5)
            got = counted(a.out)
            if got != warm + n:
                raise SystemExit("%s: the windows count %d readings of %d" % (cid, got, warm + n))
    finally:
        stop(q)
    if ings is not None:
        ings.drop()
    else:
        drop_session(broker, cid)
    shutil.rmtree(d, ignore_errors=True)
    return n / dt, batches, steady(prog, t0, warm)


def spark_only(spark, msgs, tmp, k, show=False, batch=()):
    """The job's Spark side alone: the query running (warm), a log (one
    partition, --ingest external) gets the whole backlog at once, durable;
    the clock runs until the batch holding its last reading is committed.
    No broker, no ingest, no fsync waits: what Spark does with the job's
    de-duplication and windows on this machine."""
    from umqtt3_pipeline import job
    from umqtt3_pipeline.log import Log
    d = os.path.join(tmp, "bench-spark-only-%d" % k)
    a = job.parser().parse_args(["--log", d + "/log", "--out", d + "/out", "--checkpoint",
                                 d + "/ckpt", "--trigger", "0.001", "--ingest", "external"]
                                + list(batch))
    log = Log(os.path.join(a.log, "p0"), publish_synced=True)

    def put(readings):
        at = int(time.time() * 1000)
        for topic, payload in readings:
            log.append_msg(topic, payload, 1, False, False, 0, at)
        log.sync()
    warm, n = 1000, len(msgs)
    put(backlog(warm, "bench", boot=6))
    q = job.start(spark, a)
    try:
        while sum(_end_n(p) for p in q.recentProgress[-1:]) < warm:
            if q.exception() is not None:
                raise SystemExit("query failed: %s" % q.exception())
            time.sleep(0.01)
        time.sleep(1)  # and its batch without data
        m = metered(None)
        t0, w0 = time.perf_counter(), time.time()
        put(msgs)
        while q.lastProgress is None or _end_n(q.lastProgress) < warm + n:
            if q.exception() is not None:
                raise SystemExit("query failed: %s" % q.exception())
            time.sleep(POLL)
        c0, c1 = m(n)
        prog = q.recentProgress
        dt = _done_at(prog, warm + n) - w0
        batches = sum(1 for p in prog if p["numInputRows"] and _end_n(p) > warm)
        if show:
            show_cpu(c0, c1, dt)
            show_progress("Spark alone, the log filled at once", t0, prog)
        job.drain(q, a.log, 60, settle=5)
        got = counted(a.out)
        if got != warm + n:
            raise SystemExit("spark: the windows count %d readings of %d" % (got, warm + n))
    finally:
        q.stop()
        log.close()
    shutil.rmtree(d, ignore_errors=True)
    return n / dt, batches, None


def fsync_ms(d, n=50):
    """The median time of an fdatasync of a 1.4 kB append in d, in ms: what
    the disk gives every durable subscriber (the ingest syncs once per burst
    of up to the broker's in-flight window, the naive peer once a message)."""
    path = os.path.join(d, "fsync-probe")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    ts = []
    try:
        for _ in range(n):
            os.write(fd, b"x" * 1400)
            t = time.perf_counter()
            os.fdatasync(fd)
            ts.append(time.perf_counter() - t)
    finally:
        os.close(fd)
        os.remove(path)
    return median(ts) * 1e3


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def latency(spark, broker, tmp, seconds=20.0, rate=400, nodes=20, parts=1):
    """End to end at a steady rate: each reading carries its publish time
    "t"; the job runs with 1 s windows and a 1 s watermark; a reading's
    latency is when the first file holding its window appears in the output,
    minus t. In the same run the naive paho subscriber: after its fsync,
    minus t. The last 3 s of readings are left out (their windows wait for
    the close). parts > 1: that many ingest processes under a shared
    subscription (spark_run). Returns ((p50, p95) job, (p50, p95) naive,
    readings)."""
    import paho.mqtt.client as mqtt
    import pyarrow.parquet as pq
    from umqtt3_pipeline import job
    from umqtt3_pipeline.output import files
    cid = "bench-latency%d" % parts
    topics = cid + "/+/+"
    d = os.path.join(tmp, cid)
    a = job.parser().parse_args(["--broker", "127.0.0.1:%d" % broker.port, "--log", d + "/log",
                                 "--out", d + "/out", "--checkpoint", d + "/ckpt",
                                 "--client-id", cid, "--topics", topics, "--window", "1 seconds",
                                 "--watermark", "1 seconds", "--trigger", "0.1",
                                 "--min-rows", "0"]
                                + (["--ingest", "external"] if parts > 1 else []))
    ings = Ingests(broker, a.log, parts, cid, topics).start() if parts > 1 else None
    q = job.start(spark, a)
    naive_lat, seen, stop = [], {}, threading.Event()
    f = open(os.path.join(tmp, "latency-naive.log"), "ab")

    def on_message(client, userdata, m):
        f.write(m.payload)
        f.flush()
        os.fsync(f.fileno())
        naive_lat.append(time.time() - json.loads(m.payload)["t"])

    def watch():  # when each window first shows up in Parquet
        known = set()
        while not stop.is_set():
            for path in files(a.out):
                if path in known:
                    continue
                known.add(path)
                now = time.time()
                try:
                    t = pq.read_table(path, columns=["window_start", "node"]).to_pylist()
                except OSError:
                    continue
                for r in t:
                    seen.setdefault((r["window_start"].timestamp(), r["node"]), now)
            stop.wait(0.01)
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=cid + "-naive")
    c.on_message = on_message
    c.connect("127.0.0.1", broker.port, 30)
    c.subscribe(topics, 1)
    c.loop_start()
    w = threading.Thread(target=watch, daemon=True)
    w.start()
    pub = publisher(broker.port, cid + "-pub")
    while not q.recentProgress:  # the query's first batch: the ingest is in
        time.sleep(0.1)
    sent = []
    t0 = time.time()
    for i in range(int(seconds * rate)):
        wait = t0 + i / rate - time.time()
        if wait > 0:
            time.sleep(wait)
        t = round(time.time(), 3)
        node = "n%02d" % (i % nodes)
        topic, payload = reading(node, "temp", 20.0, 1, i, t, prefix=cid)
        publish_all(pub, [(topic, payload)])
        sent.append((node, t))
    pub.disconnect()
    job.drain(q, a.log, 30)
    q.stop()
    if ings is not None:
        ings.stop()
        ings.drop()
    stop.set()
    w.join()
    c.loop_stop()
    c.disconnect()
    f.close()
    last = t0 + seconds - 3
    lat = [seen[(float(int(t)), node)] - t for node, t in sent
           if t < last and (float(int(t)), node) in seen]
    shutil.rmtree(d, ignore_errors=True)
    return ((percentile(lat, 0.5), percentile(lat, 0.95)),
            (percentile(naive_lat, 0.5), percentile(naive_lat, 0.95)), len(lat))


ROWS = (("naive", "naive: paho-mqtt, fsync per message"),
        ("ingest", "umqtt3 ingest: broker -> durable log"),
        ("ingest2", "%d ingests, one shared subscription -> logs"),
        ("noop", "-> committed batch, source only (noop sink)"),
        ("job", "-> committed batch of the telemetry job"),
        ("job2", "the same from %d ingests' logs"),
        ("run", "the job running, 1 ingest process restarts"),
        ("run2", "the job running, %d ingest processes restart"),
        ("spark", "Spark alone: the job on a log filled at once"))


def main():
    ap = args.parser("python -m pipeline.bench", __doc__)
    ap.add_argument("--messages", type=args.count, default=40000,
                    help="the backlog of a round (our broker queues at most 65,000 a session)")
    ap.add_argument("--naive-messages", type=args.count,
                    help="the naive peer's backlog (default: --messages); its rate is an fsync "
                    "per message, so on a disk with slow fsyncs a smaller backlog measures it in "
                    "less time")
    ap.add_argument("--rounds", type=args.count, default=2)
    ap.add_argument("--parts", type=args.count, default=2,
                    help="ingest processes under one shared subscription for the ingest2, job2 "
                    "and latency2 rows")
    ap.add_argument("--broker-inflight", type=args.count, default=32,
                    help="our broker's --max-inflight: messages it sends an MQTT 3.1.1 "
                    "subscriber before it waits for acknowledgements (its default: 32)")
    ap.add_argument("--broker-inflight-v5", type=args.count, default=1024,
                    help="our broker's --max-inflight-v5: the same for an MQTT 5 subscriber, "
                    "whose Receive Maximum (the ingest's: 65535) it honours up to this "
                    "(its default: 1024)")
    ap.add_argument("--ingest-level", type=int, choices=(4, 5), default=5,
                    help="MQTT level of the ingest in the one-ingest rows (ingest, job, run); "
                    "several ingests share a subscription at 5")
    ap.add_argument("--min-rows", type=int, help="the job's --min-rows for the Spark runs "
                    "(default: the job's)")
    ap.add_argument("--max-delay", type=float, help="the job's --max-delay (default: the job's)")
    ap.add_argument("--progress", action="store_true",
                    help="print the CPU each kind of process used (every row but naive) and "
                    "Spark's durations per batch and phase, for each Spark run")
    ap.add_argument("--profile", metavar="FILE",
                    help="run the one ingest of the ingest row under cProfile (every round), "
                    "write the statistics to FILE (pstats) and print the top 20 by own time")
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                    help="a Spark setting for the session (repeatable)")
    ap.add_argument("--only", help="comma-separated subset of naive,ingest,ingest2,noop,job,"
                    "job2,run,run2,spark,latency,latency2 (default: all but noop)")
    ap.add_argument("--publish", nargs=4, help=argparse.SUPPRESS)
    a = ap.parse_args()
    known = [k for k, _ in ROWS] + ["latency", "latency2"]
    a.only = ",".join(args.names(ap, "--only", a.only, known, "measurement")) if a.only else None
    if a.publish:
        return publish_main(int(a.publish[0]), a.publish[1], int(a.publish[2]), int(a.publish[3]))
    if a.naive_messages is not None and not 0 < a.naive_messages <= a.messages:
        ap.error("--naive-messages %d: 1 to --messages" % a.naive_messages)
    if not 0 < a.messages <= 60000:
        ap.error("--messages %d: 1 to 60,000 (what our broker queues for a session)"
                 % a.messages)
    t_start = time.perf_counter()
    tmp = tempfile.mkdtemp(prefix="umqtt3-bench-pipeline-")
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    # its offline queue per session: the largest it takes (max_inflight and
    # max_inflight_v5 + max_queued < 65535), bounded by count alone: 40,000
    # readings cost more than the desktop's 16 MB of queued bytes per client
    window = max(a.broker_inflight, a.broker_inflight_v5)
    broker = Broker(store=None, max_queued=65535 - window - 1,
                    args=["--max-inflight", str(a.broker_inflight), "--max-inflight-v5",
                          str(a.broker_inflight_v5), "--max-queued-bytes", "0"]).start()
    try:
        import pyspark
        from umqtt3_pipeline import job
        from umqtt3_pipeline.job import session, spark_conf
        conf = spark_conf()  # the job's
        conf.update(kv.split("=", 1) for kv in a.conf)
        spark = session("local[2]", app="umqtt3-bench", conf=conf)
        spark.sparkContext.setLogLevel("ERROR")
        msgs = backlog(a.messages, "bench")
        print("umqtt3 pipeline benchmark: our broker on 127.0.0.1:%d (--max-inflight %d, "
              "--max-inflight-v5 %d), a backlog of %d messages a round, %d round(s); one "
              "ingest at MQTT %s" % (broker.port, a.broker_inflight, a.broker_inflight_v5,
                                     a.messages, a.rounds, "5" if a.ingest_level == 5
                                     else "3.1.1"))
        print("  python: %s" % python_version())
        print("  pyspark %s (local[2]), paho-mqtt %s, %d cores, load average %s, fdatasync "
              "%.2f ms (median)" % (pyspark.__version__, dist_version("paho-mqtt"),
                                    os.cpu_count(), " ".join("%.2f" % x for x in os.getloadavg()),
                                    fsync_ms(tmp)))
        batch = [] if a.min_rows is None else ["--min-rows", str(a.min_rows)]
        batch += [] if a.max_delay is None else ["--max-delay", str(a.max_delay)]
        ja = job.parser().parse_args(["--log", "-", "--out", "-", "--checkpoint", "-"] + batch)
        print("  spark.sql.shuffle.partitions %s, JVM options %r, batches of at least %d rows "
              "while the log grows (at most %g s wait)"
              % (conf["spark.sql.shuffle.partitions"],
                 conf.get("spark.driver.extraJavaOptions", ""), ja.min_rows, ja.max_delay))
        only = set((a.only or "naive,ingest,ingest2,job,job2,run,run2,spark,latency,latency2")
                   .split(","))
        rows = {k: [] for k, _ in ROWS}
        after = {"noop": [], "job": [], "job2": [], "run": [], "run2": []}
        used = {k: [] for k, _ in ROWS}
        per_sync = []
        prof = None
        if a.profile:
            import cProfile
            prof = cProfile.Profile()
        for k in range(a.rounds):
            line = []
            for key, _ in ROWS:
                if key not in only:
                    continue
                nb = None
                if key == "naive":
                    r = naive(broker, msgs[:a.naive_messages or len(msgs)], tmp)
                elif key.startswith("ingest"):
                    r, ps = ingest(broker, msgs, tmp, a.parts if key == "ingest2" else 1,
                                   a.ingest_level, a.progress,
                                   prof if key == "ingest" else None)
                    if ps:
                        per_sync.append(ps)
                elif key == "spark":
                    r, nb, st = spark_only(spark, msgs, tmp, k, a.progress, batch)
                elif key.startswith("run"):
                    r, nb, st = spark_run(spark, broker, msgs, tmp, k, "job", a.progress, batch,
                                          a.parts if key == "run2" else 1, running=True,
                                          level=a.ingest_level)
                else:
                    r, nb, st = spark_run(spark, broker, msgs, tmp, k, key.rstrip("2"),
                                          a.progress, batch, a.parts if key == "job2" else 1,
                                          level=a.ingest_level)
                    if st:
                        after[key].append(st)
                rows[key].append(r)
                if _used[0] is not None:
                    used[key].append(_used[0])
                line.append("%s %7.0f%s" % (key, r, "" if nb is None else " (%d batches)" % nb))
            if line:
                print("  round %d: %s msg/s (load %.1f)" % (k + 1, "  ".join(line),
                                                         os.getloadavg()[0]), flush=True)
        med = {k: median(v) for k, v in rows.items() if v}
        base = med.get("naive")
        print()
        if med:
            print("  %-46s %10s %8s %12s %11s" % ("path", "msg/s", "x naive", "after batch 1",
                                                  "CPU us/msg"))
        for key, label in ROWS:
            if key in med:
                print("  %-46s %10.0f %8s %12s %11s" % (
                    label.replace("%d", str(a.parts)), med[key],
                    "%.1fx" % (med[key] / base) if base else "-",
                    "%.0f" % median(after[key]) if after.get(key) else "",
                    "%.0f" % median(used[key]) if used[key] else ""))
        if any(used.values()):
            print("  CPU us/msg: CPU time of the bench's processes (Spark's included) and the "
                  "broker while the clock ran, per message; 2 cores give 2,000,000 us a second")
        print()
        if per_sync:
            print("  messages per fsync in the ingest log: %.1f (median)" % median(per_sync))
        spark_rows = [(key, label) for key, label in (
            ("noop", "source only"), ("job", "telemetry job, 1 ingest, from a restart"),
            ("job2", "telemetry job, %d ingests, from a restart" % a.parts),
            ("run", "telemetry job running, 1 ingest"),
            ("run2", "telemetry job running, %d ingests" % a.parts),
            ("spark", "Spark alone")) if key in med]
        if spark_rows:
            print("  goal: >= 20,000 msg/s to a committed batch: %s" % ", ".join(
                "%s %s" % (label, "met" if med[key] >= 20000 else "NOT met")
                for key, label in spark_rows))
        for key, parts in (("latency", 1), ("latency2", a.parts)):
            if key not in only:
                continue
            lats = [latency(spark, broker, tmp, parts=parts) for _ in range(a.rounds)]
            for k, (j, nv, n) in enumerate(lats):
                print("  %s round %d: job p50 %.2f s p95 %.2f s (%d readings); naive p50 "
                      "%.1f ms p95 %.1f ms" % (key, k + 1, j[0], j[1], n, nv[0] * 1e3,
                                               nv[1] * 1e3))
            print("  end to end with %d ingest%s, reading published -> its window in Parquet "
                  "(1 s windows, 1 s watermark): p50 %.2f s, p95 %.2f s (medians); naive "
                  "subscriber to its fsync: p50 %.1f ms, p95 %.1f ms" % (
                      parts, "s" if parts > 1 else "",
                      median([x[0][0] for x in lats]), median([x[0][1] for x in lats]),
                      median([x[1][0] for x in lats]) * 1e3,
                      median([x[1][1] for x in lats]) * 1e3), flush=True)
        if prof is not None and rows["ingest"]:
            import pstats
            prof.dump_stats(a.profile)
            print("  the ingest's thread under cProfile, %d round(s) (%s):" % (a.rounds, a.profile))
            pstats.Stats(a.profile).sort_stats("tottime").print_stats(20)
        print("  total run time %.1f s, load average %s, fdatasync %.2f ms (median)" % (
            time.perf_counter() - t_start, " ".join("%.2f" % x for x in os.getloadavg()),
            fsync_ms(tmp)))
        spark.stop()
    finally:
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
