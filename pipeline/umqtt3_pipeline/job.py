"""The telemetry job: readings from the nodes, per node and metric, in
tumbling windows (count, min, max, mean), written to Parquet.

    python -m umqtt3_pipeline.job --broker 127.0.0.1:1883 --log /data/ingest \\
        --out /data/telemetry --checkpoint /data/checkpoint [--plot telemetry.png]

Event time is the reading's own time when it carries one ("t"), else when the
ingest received it. A reading sent again (a node's resend after a reset, the
broker's resend to the ingest after a crash) has the same (node, boot, seq)
and is dropped if it comes within the watermark delay of the first one. A
window is written once the watermark has passed its end (append mode), and
the checkpoint together with the log makes every batch replayable after a
crash: Spark's file sink commits each batch once.

On a cluster the same module runs under spark-submit (docs/pipeline.md):
the log directory must then be shared storage that every executor mounts.
"""
import argparse
import os
import signal
import sys
import threading
import time


def _worker_path():
    # in local mode Python workers inherit the driver's environment: let them
    # import umqtt3 and this package however the driver found them
    import umqtt3
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    lib = os.path.dirname(os.path.dirname(os.path.abspath(umqtt3.__file__)))
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    for p in (here, lib):
        if p not in parts:
            parts.insert(0, p)
    os.environ["PYTHONPATH"] = os.pathsep.join(parts)


def session(master=None, app="umqtt3-telemetry", conf=None):
    """A SparkSession with the umqtt3 data source registered. master None:
    what spark-submit gave, else local[*]."""
    from pyspark.sql import SparkSession
    _worker_path()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark import SparkConf
    b = SparkSession.builder.appName(app)
    if master or not SparkConf().contains("spark.master"):
        b = b.master(master or "local[*]")
    for k, v in (conf or {}).items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    from .source import Umqtt3DataSource
    spark.dataSource.register(Umqtt3DataSource)
    return spark


def spark_conf(shuffle_partitions=None, ui=False):
    """The job's Spark settings. Its two stateful operators each keep a state
    store per shuffle partition and commit them every batch, so on one
    machine a single partition is cheaper (measured: docs/pipeline.md);
    spark-submit's own spark.sql.shuffle.partitions is kept unless given."""
    from pyspark import SparkConf
    conf = {"spark.ui.showConsoleProgress": "false", "spark.ui.enabled": "true" if ui else "false"}
    if shuffle_partitions or not SparkConf().contains("spark.sql.shuffle.partitions"):
        conf["spark.sql.shuffle.partitions"] = str(shuffle_partitions or 1)
    return conf


def readings(spark, broker, topics, path, qos=1, client_id="umqtt3-telemetry", max_rows=0,
             trim=True, min_rows=0, max_delay=1.0):
    """The stream of parsed readings (rows with a value)."""
    r = (spark.readStream.format("umqtt3")
         .option("broker", broker).option("topics", topics).option("qos", str(qos))
         .option("clientId", client_id).option("path", path)
         .option("trim", "true" if trim else "false"))
    if max_rows:
        r = r.option("maxRowsPerBatch", str(max_rows))
    if min_rows:
        r = r.option("minRowsPerBatch", str(min_rows)).option("maxTriggerDelay", str(max_delay))
    return r.load()


def windows(df, window="10 seconds", watermark="10 seconds"):
    """Per node, metric and tumbling window: count, min, max, mean of the
    de-duplicated readings."""
    from pyspark.sql import functions as F
    from .telemetry import DEDUP_KEY
    r = (df.where(F.col("value").isNotNull())
         .withColumn("event_time", F.coalesce("sent_at", "received_at"))
         .withWatermark("event_time", watermark)
         .dropDuplicatesWithinWatermark(list(DEDUP_KEY)))
    return (r.groupBy(F.window("event_time", window), "node", "metric")
            .agg(F.count(F.lit(1)).alias("count"), F.min("value").alias("min"),
                 F.max("value").alias("max"), F.avg("value").alias("mean"))
            .select(F.col("window.start").alias("window_start"),
                    F.col("window.end").alias("window_end"),
                    "node", "metric", "count", "min", "max", "mean"))


class _Queued(Exception):
    pass


def _refuse(pkt, redelivered):
    raise _Queued()  # not taken: no acknowledgement, the broker keeps it


def ensure_session(broker, topics, qos, client_id):
    """Make sure the broker holds the persistent session of client_id, so
    that it keeps what is published from now on for the ingest, even before
    Spark has started it. A message the broker delivers meanwhile is refused
    (never acknowledged), so it stays queued for the ingest."""
    from umqtt3.client import MQTTClient
    from .ingest import parse_broker
    host, port = parse_broker(broker)
    for _ in range(5):
        c = MQTTClient(client_id, host, port, keepalive=30)
        c.set_callback(_refuse, raw=True)
        try:
            if not c.connect(clean_session=False):
                for t in topics.split(","):
                    if t.strip():
                        c.subscribe(t.strip(), qos)
            c.disconnect()
            return True
        except _Queued:
            c.disconnect()  # the session exists: it just delivered
        except OSError as e:
            c.disconnect()
            print("broker %s: %s; the ingest keeps trying" % (broker, e), file=sys.stderr)
            return False
    return True


def start(spark, a):
    """Start the query for parsed arguments a; returns the StreamingQuery."""
    ensure_session(a.broker, a.topics, a.qos, a.client_id)
    df = readings(spark, a.broker, a.topics, a.log, a.qos, a.client_id, a.max_rows,
                  not a.keep_log, a.min_rows, a.max_delay)
    w = (windows(df, a.window, a.watermark).writeStream.format("parquet")
         .option("path", a.out).option("checkpointLocation", a.checkpoint)
         .outputMode("append").queryName("umqtt3_telemetry"))
    if a.available_now:
        w = w.trigger(availableNow=True)
    else:
        w = w.trigger(processingTime="%g seconds" % a.trigger)
    return w.start()


def _committed(q):
    """The message number up to which the query has committed."""
    import json
    n = 0
    for p in q.recentProgress:
        for s in p["sources"]:
            end = s.get("endOffset")
            if isinstance(end, str):
                end = json.loads(end)
            if end:
                n = max(n, end["n"])
    return n


def drain(q, log, seconds, settle=5.0):
    """Before a stop: let the query commit everything the log holds now, and
    one batch more if it comes within `settle` seconds (the no-data batch
    that writes the windows the last watermark closed); at most `seconds`
    in all. Returns True when it got there."""
    from . import log as _log
    if seconds <= 0 or not q.isActive:
        return False
    target = _log.count(log)
    t_end = time.monotonic() + seconds
    while q.isActive and _committed(q) < target:
        if time.monotonic() > t_end:
            return False
        q.awaitTermination(0.2)
    seen = len(q.recentProgress)
    t_end = min(t_end, time.monotonic() + settle)
    while q.isActive and len(q.recentProgress) <= seen and time.monotonic() < t_end:
        q.awaitTermination(0.2)
    return True


def parser():
    ap = argparse.ArgumentParser(prog="python -m umqtt3_pipeline.job", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--broker", default="127.0.0.1:1883", help="host:port")
    ap.add_argument("--topics", default="umqtt3/+/+", help="comma-separated filters")
    ap.add_argument("--qos", type=int, default=1, choices=(1, 2))
    ap.add_argument("--client-id", default="umqtt3-telemetry",
                    help="fixed: it names the broker's persistent session")
    ap.add_argument("--log", required=True, help="ingest log directory (shared storage on a cluster)")
    ap.add_argument("--out", required=True, help="Parquet output directory")
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--window", default="10 seconds")
    ap.add_argument("--watermark", default="10 seconds")
    ap.add_argument("--trigger", type=float, default=2.0, help="seconds between batches")
    ap.add_argument("--max-rows", type=int, default=100000, help="rows per batch at most (0: all)")
    ap.add_argument("--min-rows", type=int, default=10000,
                    help="while the log grows, a batch waits for this many rows (0: never)")
    ap.add_argument("--max-delay", type=float, default=1.0,
                    help="seconds a batch waits for --min-rows at most")
    ap.add_argument("--keep-log", action="store_true", help="do not trim the log after commits")
    ap.add_argument("--available-now", action="store_true",
                    help="process what the log holds, then stop")
    ap.add_argument("--seconds", type=float, default=0, help="stop after this long (0: never)")
    ap.add_argument("--drain", type=float, default=60,
                    help="on stop, up to this many seconds to process what the log holds")
    ap.add_argument("--plot", help="write each node's windowed series to this PNG at the end")
    ap.add_argument("--master", help="default: spark-submit's, else local[*]")
    ap.add_argument("--shuffle-partitions", type=int,
                    help="default: spark-submit's, else 1 (one machine)")
    ap.add_argument("--ui", action="store_true", help="start Spark's web UI")
    return ap


def main(argv=None):
    a = parser().parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    spark = session(a.master, conf=spark_conf(a.shuffle_partitions, a.ui))
    spark.sparkContext.setLogLevel("ERROR")
    q = start(spark, a)
    print("umqtt3 telemetry: %s -> %s (log %s)" % (a.broker, a.out, a.log), flush=True)
    t_end = time.monotonic() + a.seconds if a.seconds else None
    try:
        while q.isActive and not stop.is_set():
            if t_end and time.monotonic() >= t_end:
                break
            q.awaitTermination(0.5)
        drain(q, a.log, a.drain, max(5.0, 4 * a.trigger))
    except KeyboardInterrupt:
        pass
    finally:
        if q.isActive:
            q.stop()
    if q.exception() is not None:
        print("query failed: %s" % q.exception(), file=sys.stderr)
        return 1
    if a.plot:
        from .plot import plot
        n = plot(a.out, a.plot)
        print("plot: %s (%d windows)" % (a.plot, n), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
