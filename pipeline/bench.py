"""The pipeline's throughput: messages per second from the broker into the
durable ingest log and through a committed Spark batch (local[2]), next to a
naive peer measured in the same run.

    python -m pipeline.bench [--messages 40000] [--rounds 2] [--progress]
        [--only naive,ingest,noop,job,latency] [--min-rows N] [--max-delay S]
        [--conf KEY=VALUE]

Every measurement is the same: two publisher processes put N firmware-format
readings (50 nodes) at QoS 1 into our broker while the consumer's persistent
session is offline, so the broker holds the backlog; the clock runs from the
consumer's (re)start until it has them all:
- naive: paho-mqtt writes each message to a file with an fsync before
  returning from on_message (paho acknowledges after it returns), the usual
  "durable before ack" subscriber;
- ingest: the umqtt3 ingest has every message in its log (group fsync; each
  acknowledgement leaves only after the fsync that covers it);
- source only: the stream reader into Spark's noop sink has committed the
  batch holding the last message (the clock includes the ingest);
- telemetry job: the same through the job (dedup, windows, Parquet).
For the two Spark rows the query first runs on 1,000 readings (JVM and
Python workers warm), stops, and is restarted from its checkpoint when the
clock starts: a catch-up after a restart.

latency: readings at a steady 400/s with their publish time, the job
running (1 s windows and watermark); from a reading's publish to the first
Parquet file holding its window, beside the naive subscriber's publish to
fsync (latency()).
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
    t0 = time.perf_counter()
    c.connect("127.0.0.1", broker.port, 30)
    c.loop_start()
    if not done.wait(600):
        raise SystemExit("naive: only %d of %d messages" % (count[0], n))
    dt = time.perf_counter() - t0
    c.loop_stop()
    c.disconnect()
    f.close()
    drop_session(broker, cid)
    return n / dt


def ingest(broker, msgs, tmp):
    """The umqtt3 ingest alone: broker to durable log."""
    from umqtt3_pipeline.ingest import Ingest
    cid = "bench-ingest"
    prefix = cid
    n = len(msgs)
    ensure_session("127.0.0.1:%d" % broker.port, prefix + "/+/+", 1, cid)
    join(publish(broker, n, prefix))  # the backlog, queued by the broker
    t0 = time.perf_counter()
    ing = Ingest(os.path.join(tmp, "ingest-log"), "127.0.0.1:%d" % broker.port,
                 [prefix + "/+/+"], cid).start()
    end = time.monotonic() + 600
    while ing.log.durable()[1] < n:
        ing.check()
        if time.monotonic() > end:
            raise SystemExit("ingest: only %d of %d messages" % (ing.log.durable()[1], n))
        time.sleep(0.002)
    dt = time.perf_counter() - t0
    syncs = ing.log.syncs
    ing.stop()
    shutil.rmtree(os.path.join(tmp, "ingest-log"))
    drop_session(broker, cid)
    return n / dt, n / max(syncs, 1)


def _end_n(progress):
    end = progress["sources"][0]["endOffset"]
    if isinstance(end, str):
        end = json.loads(end)
    return end["n"] if end else 0


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
        state = ["%s %d rows %d ms" % (s["operatorName"], s["numRowsTotal"],
                                       s.get("allUpdatesTimeMs", 0) + s.get("allRemovalsTimeMs", 0)
                                       + s.get("commitTimeMs", 0))
                 for s in p.get("stateOperators", [])]
        print("    batch %d at %+.2f s: %d rows  %s  %s" % (
            p["batchId"], ts - (time.time() - (time.perf_counter() - t0)), p["numInputRows"],
            " ".join("%d" % d.get(k, 0) for k in PHASES), "; ".join(state)))


def spark_run(spark, broker, msgs, tmp, k, sink="job", show=False, batch=()):
    """broker -> ingest log -> committed batch of the telemetry job (sink
    "job"), or of the bare source into Spark's noop sink ("noop"). The warm
    run of the job stops the way the job does (job.drain: the no-data batch
    that writes the windows its watermark closed runs before the stop), so
    the restart does not begin with that batch."""
    from umqtt3_pipeline import job
    from umqtt3_pipeline import log as L
    cid = "bench-spark-%s-%d" % (sink, k)
    prefix = cid
    topics = prefix + "/+/+"
    n = len(msgs)
    warm = 1000
    d = os.path.join(tmp, "spark-%s-%d" % (sink, k))
    a = job.parser().parse_args(["--broker", "127.0.0.1:%d" % broker.port, "--log", d + "/log",
                                 "--out", d + "/out", "--checkpoint", d + "/ckpt",
                                 "--client-id", cid, "--trigger", "0.001", "--max-rows", "0",
                                 "--topics", topics] + list(batch))
    def start():
        if sink == "job":
            return job.start(spark, a)
        job.ensure_session(a.broker, topics, 1, cid)
        return (job.readings(spark, a.broker, topics, a.log, 1, cid, min_rows=a.min_rows,
                             max_delay=a.max_delay).writeStream.format("noop")
                .option("checkpointLocation", a.checkpoint).trigger(processingTime="0 seconds")
                .start())

    def committed(k):
        end = time.monotonic() + 600
        while True:
            if q.exception() is not None:
                raise SystemExit("query failed: %s" % q.exception())
            prog = q.recentProgress
            if any(_end_n(p) >= k for p in prog):
                return prog
            if time.monotonic() > end:
                raise SystemExit("spark: %d of %d messages committed, %d in the log"
                                 % (max([_end_n(p) for p in prog] or [0]), k,
                                    L.count(d + "/log")))
            time.sleep(0.01)
    # a first run of the query warms the JVM and the Python workers, then
    # stops; the backlog queues for its session; the clock runs from the
    # restart (from the same checkpoint) until the backlog is committed
    q = start()
    try:
        c = publisher(broker.port, "bench-warm")
        publish_all(c, backlog(warm, prefix, boot=6), 1)  # other keys than the backlog's
        c.disconnect()
        committed(warm)
        if sink == "job":
            job.drain(q, a.log, 10, settle=3)  # stopped as the job stops: see spark_run's doc
    finally:
        q.stop()
    join(publish(broker, n, prefix))
    t0 = time.perf_counter()
    q = start()
    try:
        prog = committed(warm + n)
        dt = time.perf_counter() - t0
        batches = sum(1 for p in prog if p["numInputRows"])
        if show:
            show_progress(sink, t0, prog)
    finally:
        q.stop()
    drop_session(broker, cid)
    shutil.rmtree(d, ignore_errors=True)
    return n / dt, batches


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def latency(spark, broker, tmp, seconds=20.0, rate=400, nodes=20):
    """End to end at a steady rate: each reading carries its publish time
    "t"; the job runs with 1 s windows and a 1 s watermark; a reading's
    latency is when the first file holding its window appears in the output,
    minus t. In the same run the naive paho subscriber: after its fsync,
    minus t. The last 3 s of readings are left out (their windows wait for
    the close). Returns ((p50, p95) job, (p50, p95) naive, readings)."""
    import paho.mqtt.client as mqtt
    import pyarrow.parquet as pq
    from umqtt3_pipeline import job
    from umqtt3_pipeline.output import files
    cid = "bench-latency"
    topics = cid + "/+/+"
    d = os.path.join(tmp, cid)
    a = job.parser().parse_args(["--broker", "127.0.0.1:%d" % broker.port, "--log", d + "/log",
                                 "--out", d + "/out", "--checkpoint", d + "/ckpt",
                                 "--client-id", cid, "--topics", topics, "--window", "1 seconds",
                                 "--watermark", "1 seconds", "--trigger", "0.1",
                                 "--min-rows", "0"])
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


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=40000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--min-rows", type=int, help="the job's --min-rows for both Spark runs "
                    "(default: the job's)")
    ap.add_argument("--max-delay", type=float, help="the job's --max-delay (default: the job's)")
    ap.add_argument("--progress", action="store_true",
                    help="print Spark's durations per batch and phase for each Spark run")
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                    help="a Spark setting for the session (repeatable)")
    ap.add_argument("--only", help="comma-separated subset of naive,ingest,noop,job,latency")
    ap.add_argument("--publish", nargs=4, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.publish:
        return publish_main(int(a.publish[0]), a.publish[1], int(a.publish[2]), int(a.publish[3]))
    t_start = time.perf_counter()
    tmp = tempfile.mkdtemp(prefix="umqtt3-bench-pipeline-")
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    broker = Broker(store=None).start()  # its offline queue holds up to 60,000
    try:
        import pyspark
        from umqtt3_pipeline import job
        from umqtt3_pipeline.job import session, spark_conf
        conf = spark_conf()  # the job's
        conf.update(kv.split("=", 1) for kv in a.conf)
        spark = session("local[2]", app="umqtt3-bench", conf=conf)
        spark.sparkContext.setLogLevel("ERROR")
        msgs = backlog(a.messages, "bench")
        print("umqtt3 pipeline benchmark: our broker on 127.0.0.1:%d, a backlog of %d messages "
              "a round, %d round(s)" % (broker.port, a.messages, a.rounds))
        print("  python: %s" % python_version())
        print("  pyspark %s (local[2]), paho-mqtt %s, %d cores"
              % (pyspark.__version__, dist_version("paho-mqtt"), os.cpu_count()))
        batch = [] if a.min_rows is None else ["--min-rows", str(a.min_rows)]
        batch += [] if a.max_delay is None else ["--max-delay", str(a.max_delay)]
        ja = job.parser().parse_args(["--log", "-", "--out", "-", "--checkpoint", "-"] + batch)
        print("  spark.sql.shuffle.partitions %s, batches of at least %d rows while the log "
              "grows (at most %g s wait)" % (conf["spark.sql.shuffle.partitions"], ja.min_rows,
                                            ja.max_delay))
        only = set((a.only or "naive,ingest,noop,job,latency").split(","))
        rows = {"naive": [], "ingest": [], "noop": [], "job": []}
        per_sync = []
        for k in range(a.rounds):
            line, nb = [], {}
            for key in ("naive", "ingest", "noop", "job"):
                if key not in only:
                    continue
                if key == "naive":
                    r = naive(broker, msgs, tmp)
                elif key == "ingest":
                    r, ps = ingest(broker, msgs, tmp)
                    per_sync.append(ps)
                else:
                    r, nb[key] = spark_run(spark, broker, msgs, tmp, k, key, a.progress, batch)
                rows[key].append(r)
                line.append("%s %7.0f%s" % (key, r, " (%d batches)" % nb[key] if key in nb else ""))
            if line:
                print("  round %d: %s msg/s" % (k + 1, "  ".join(line)), flush=True)
        med = {k: median(v) for k, v in rows.items() if v}
        base = med.get("naive")
        print()
        if med:
            print("  %-46s %10s %8s" % ("path", "msg/s", "x naive"))
        for key, label in (("naive", "naive: paho-mqtt, fsync per message"),
                           ("ingest", "umqtt3 ingest: broker -> durable log"),
                           ("noop", "-> committed batch, source only (noop sink)"),
                           ("job", "-> committed batch of the telemetry job")):
            if key in med:
                print("  %-46s %10.0f %8s" % (label, med[key],
                                              "%.1fx" % (med[key] / base) if base else "-"))
        print()
        if per_sync:
            print("  messages per fsync in the ingest log: %.1f (median)" % median(per_sync))
        if "noop" in med or "job" in med:
            print("  goal: >= 20,000 msg/s to a committed batch: %s" % ", ".join(
                "%s %s" % (label, "met" if med[key] >= 20000 else "NOT met")
                for key, label in (("noop", "source only"), ("job", "telemetry job"))
                if key in med))
        if "latency" in only:
            lats = [latency(spark, broker, tmp) for _ in range(a.rounds)]
            for k, (j, nv, n) in enumerate(lats):
                print("  latency round %d: job p50 %.2f s p95 %.2f s (%d readings); naive p50 "
                      "%.1f ms p95 %.1f ms" % (k + 1, j[0], j[1], n, nv[0] * 1e3, nv[1] * 1e3))
            print("  end to end, reading published -> its window in Parquet (1 s windows, "
                  "1 s watermark): p50 %.2f s, p95 %.2f s (medians); naive subscriber to its "
                  "fsync: p50 %.1f ms, p95 %.1f ms" % (
                      median([x[0][0] for x in lats]), median([x[0][1] for x in lats]),
                      median([x[1][0] for x in lats]) * 1e3,
                      median([x[1][1] for x in lats]) * 1e3))
        print("  total run time %.1f s" % (time.perf_counter() - t_start))
        spark.stop()
    finally:
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
