"""The pipeline's throughput: messages per second from the broker into the
durable ingest log and through a committed Spark batch (local[2]), next to a
naive peer measured in the same run.

    python tools/bench/pipeline.py [--messages 60000] [--rounds 2]

Every measurement is the same: two publisher processes send N firmware-format
readings (50 nodes) at QoS 1 to our broker as fast as they can, and the clock
runs from their first message until the consumer has them all:
- naive: paho-mqtt writes each message to a file with an fsync before
  returning from on_message (paho acknowledges after it returns), the usual
  "durable before ack" subscriber;
- ingest: the umqtt3 ingest has every message in its log (group fsync; each
  acknowledgement leaves only after the fsync that covers it);
- spark: the telemetry job (dedup, windows, Parquet) has committed the batch
  holding the last message. The query runs and has processed a first batch
  before the clock starts (Spark's start-up is not counted).
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
for p in (os.path.join(REPO, "lib"), os.path.join(REPO, "tools"), os.path.join(REPO, "tests")):
    if p not in sys.path:
        sys.path.insert(0, p)

from _common import dist_version, median, python_version  # noqa: E402
from pipeline_support import Broker, publish_all, publisher, reading  # noqa: E402
from umqtt3_pipeline.job import ensure_session  # noqa: E402

TOPICS = "umqtt3/+/+"


def backlog(n):
    return [reading("node%02d" % (i % 50), "temp", 20 + (i % 100) / 10, 7, i // 50)
            for i in range(n)]


def publish_main(port, first, count):
    """A publisher process: its share of the readings, then exit."""
    msgs = backlog(first + count)[first:]
    c = publisher(port, "bench-pub-%d" % first)
    c.window = 32
    publish_all(c, msgs, 1, timeout=600)
    c.disconnect()


def publish(broker, n, procs=2):
    """Start the publisher processes; returns them (the clock starts now)."""
    import subprocess
    share = n // procs
    return [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--publish",
                              str(broker.port), str(i * share),
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
    ensure_session("127.0.0.1:%d" % broker.port, TOPICS, 1, cid)
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
    c.connect("127.0.0.1", broker.port, 30)
    c.loop_start()
    t0 = time.perf_counter()
    pubs = publish(broker, n)
    if not done.wait(600):
        raise SystemExit("naive: only %d of %d messages" % (count[0], n))
    dt = time.perf_counter() - t0
    join(pubs)
    c.loop_stop()
    c.disconnect()
    f.close()
    return n / dt


def ingest(broker, msgs, tmp):
    """The umqtt3 ingest alone: broker to durable log."""
    from umqtt3_pipeline.ingest import Ingest
    cid = "bench-ingest"
    n = len(msgs)
    ing = Ingest(os.path.join(tmp, "ingest-log"), "127.0.0.1:%d" % broker.port, [TOPICS], cid).start()
    ing.connected.wait(30)
    t0 = time.perf_counter()
    pubs = publish(broker, n)
    end = time.monotonic() + 600
    while ing.log.durable()[1] < n:
        ing.check()
        if time.monotonic() > end:
            raise SystemExit("ingest: only %d of %d messages" % (ing.log.durable()[1], n))
        time.sleep(0.002)
    dt = time.perf_counter() - t0
    join(pubs)
    syncs = ing.log.syncs
    ing.stop()
    return n / dt, n / max(syncs, 1)


def _end_n(progress):
    end = progress["sources"][0]["endOffset"]
    if isinstance(end, str):
        end = json.loads(end)
    return end["n"] if end else 0


def spark_run(spark, broker, msgs, tmp, k):
    """broker -> ingest log -> committed batch of the telemetry job."""
    from umqtt3_pipeline import job
    from umqtt3_pipeline import log as L
    cid = "bench-spark-%d" % k
    n = len(msgs)
    warm = 1000
    d = os.path.join(tmp, "spark%d" % k)
    a = job.parser().parse_args(["--broker", "127.0.0.1:%d" % broker.port, "--log", d + "/log",
                                 "--out", d + "/out", "--checkpoint", d + "/ckpt",
                                 "--client-id", cid, "--trigger", "0", "--max-rows", "0",
                                 "--topics", TOPICS])
    q = job.start(spark, a)

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
    try:
        c = publisher(broker.port, "bench-warm")
        publish_all(c, backlog(warm), 1)
        c.disconnect()
        before = len(committed(warm))
        t0 = time.perf_counter()
        pubs = publish(broker, n)
        prog = committed(warm + n)
        dt = time.perf_counter() - t0
        join(pubs)
        batches = sum(1 for p in prog[before:] if p["numInputRows"])
    finally:
        q.stop()
    return n / dt, batches


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=60000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--publish", nargs=3, type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.publish:
        return publish_main(*a.publish)
    t_start = time.perf_counter()
    tmp = tempfile.mkdtemp(prefix="umqtt3-bench-pipeline-")
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    broker = Broker(store=None).start()  # its offline queue holds up to 60,000
    try:
        import pyspark
        from umqtt3_pipeline.job import session
        spark = session("local[2]", app="umqtt3-bench", conf={
            "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2",
            "spark.ui.showConsoleProgress": "false"})
        spark.sparkContext.setLogLevel("ERROR")
        msgs = backlog(a.messages)
        print("umqtt3 pipeline benchmark: our broker on 127.0.0.1:%d, %d messages a round "
              "from 2 publisher processes, %d round(s)" % (broker.port, a.messages, a.rounds))
        print("  python: %s" % python_version())
        print("  pyspark %s (local[2]), paho-mqtt %s, %d cores"
              % (pyspark.__version__, dist_version("paho-mqtt"), os.cpu_count()))
        rows = {"naive": [], "ingest": [], "spark": []}
        per_sync = []
        for k in range(a.rounds):
            rows["naive"].append(naive(broker, msgs, tmp))
            r, ps = ingest(broker, msgs, tmp)
            rows["ingest"].append(r)
            per_sync.append(ps)
            r, batches = spark_run(spark, broker, msgs, tmp, k)
            rows["spark"].append(r)
            print("  round %d: naive %8.0f  ingest %8.0f  spark %8.0f msg/s  (%d batches)"
                  % (k + 1, rows["naive"][-1], rows["ingest"][-1], r, batches), flush=True)
        med = {k: median(v) for k, v in rows.items()}
        print()
        print("  %-46s %10s %8s" % ("path", "msg/s", "x naive"))
        for key, label in (("naive", "naive: paho-mqtt, fsync per message"),
                           ("ingest", "umqtt3 ingest: broker -> durable log"),
                           ("spark", "umqtt3 pipeline: -> committed Spark batch")):
            print("  %-46s %10.0f %7.1fx" % (label, med[key], med[key] / med["naive"]))
        print()
        print("  messages per fsync in the ingest log: %.1f (median)" % median(per_sync))
        print("  goal: >= 10,000 msg/s to a committed batch: %s"
              % ("met" if med["spark"] >= 10000 else "NOT met"))
        print("  total run time %.1f s" % (time.perf_counter() - t_start))
        spark.stop()
    finally:
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
