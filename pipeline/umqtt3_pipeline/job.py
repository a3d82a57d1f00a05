"""The telemetry job: readings from the nodes, per node and metric, in
tumbling windows (count, min, max, mean), written to Parquet by day
(output.py: a file per batch, folded into one per day).

    python -m umqtt3_pipeline.job --broker 127.0.0.1:1883 --log /data/ingest \\
        --out /data/telemetry --checkpoint /data/checkpoint [--plot telemetry.png]

Event time is the reading's own time when it carries one ("t") and that time
is not ahead of its arrival by more than --max-early (a clock that is ahead),
else when the ingest received it. A reading sent again (a node's resend after a reset, the
broker's resend to the ingest after a crash) has the same (node, boot, seq)
and is dropped if it comes within the watermark delay of the first one. A
window is written once the watermark has passed its end (append mode), and
the checkpoint together with the log makes every batch replayable after a
crash: a replayed batch writes the same files again (output.py). A bounded run (--seconds,
SIGTERM, Ctrl-C) closes before it exits: the ingest stops, Spark processes
what the log holds, and a close row moves the watermark to the end of the
window the close is in, so every window up to it is written. Its last line
says how many readings it committed and how many messages Spark dropped as late
(each copy of a resent reading counted: they are dropped before copies merge).

On a cluster the same module runs under spark-submit (docs/pipeline.md):
the log directory must then be shared storage that every executor mounts.
"""
import argparse
import logging
import math
import os
import re
import signal
import sys
import threading
import time

if __name__ == "__main__" and not __package__:
    # run as a file (spark-submit .../umqtt3_pipeline/job.py): relative
    # imports need the package, so run this module as part of the package
    # this file is in (executors import it from --py-files or pip)
    _here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or ".") == _here:
        sys.path.pop(0)  # this package's modules are not top-level ones
    sys.path.insert(0, os.path.dirname(_here))
    from umqtt3_pipeline.job import main as _main
    sys.exit(_main())

from .cli import (PORTABLE_CLIENT_ID, Help, Parser, add_tls, broker_address, client_id,
                  client_id_note, command_name, made_dirs, needs_user, reachable, tls_checked,
                  topic_filters, usable_dir, utf8)


def _worker_path():
    # in local mode Python workers inherit the driver's environment: let them
    # import umqtt3 and this package however the driver found them, and
    # PySpark as installed (workers/sitecustomize.py)
    import umqtt3
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    lib = os.path.dirname(os.path.dirname(os.path.abspath(umqtt3.__file__)))
    workers = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers")
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    for p in (here, lib, workers):
        if p not in parts:
            parts.insert(0, p)
    os.environ["PYTHONPATH"] = os.pathsep.join(parts)


def spark_missing():
    """Why Spark cannot run here, or None: PySpark (the spark extra) and a
    Java runtime are needed."""
    import shutil
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return ("pyspark is not installed (pip install 'umqtt3[spark]', or '.[spark]' in a clone; "
                "PySpark 4 needs Python 3.11+)")
    if not shutil.which("java") and not os.environ.get("JAVA_HOME"):
        return "no Java runtime (apt-get install default-jre-headless, or make setup)"
    return None


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


# The JVM's JIT: its top tier (C2) spends more CPU compiling than the
# job's batches gain from it on a small machine (measured: docs/pipeline.md);
# the first tier alone compiles fast.
JIT = "-XX:TieredStopAtLevel=1"


def spark_conf(shuffle_partitions=None, ui=False, conf=()):
    """The job's Spark settings. Its two stateful operators each keep a state
    store per shuffle partition and commit them every batch, so on one
    machine a single partition is cheaper (measured: docs/pipeline.md);
    spark-submit's own spark.sql.shuffle.partitions is kept unless given. The
    JVM the job starts itself (not spark-submit's) compiles with C1 only
    (JIT). conf: (key, value) pairs given last (--conf)."""
    from pyspark import SparkConf
    given = SparkConf()
    c = {"spark.ui.showConsoleProgress": "false", "spark.ui.enabled": "true" if ui else "false"}
    if shuffle_partitions or not given.contains("spark.sql.shuffle.partitions"):
        c["spark.sql.shuffle.partitions"] = str(shuffle_partitions or 1)
    if not given.contains("spark.driver.extraJavaOptions"):
        c["spark.driver.extraJavaOptions"] = JIT
    c.update(conf)
    return c


# the source's columns windows() uses: the rest (the payload above all)
# would only widen the Arrow batches and the JVM's rows (docs/pipeline.md)
COLUMNS = "topic,retain,received_at,sent_at,node,metric,value,boot,seq"


def readings(spark, broker, topics, path, qos=1, client_id="umqtt3-telemetry", max_rows=0,
             trim=True, min_rows=0, max_delay=1.0, external=False, level=5, checkpoint=None,
             user=None, password_file=None, tls=None, max_packet=None):
    """The stream of parsed readings, in the columns windows() uses.
    tls: {source option: value} of TLS (tls_options()).
    external: the logs under path are written by ingest processes of their
    own. checkpoint: the query's checkpointLocation, whose new files the
    source fsyncs before it trims the log (source.sync_checkpoint)."""
    r = spark.readStream.format("umqtt3").option("columns", COLUMNS)
    if external:
        r = r.option("path", path).option("ingest", "external")
    else:
        r = (r
             .option("broker", broker).option("topics", topics).option("qos", str(qos))
             .option("clientId", client_id).option("path", path).option("level", str(level))
             .option("trim", "true" if trim else "false"))
        if checkpoint:
            r = r.option("checkpoint", checkpoint)
        if user:
            r = r.option("user", user)
        if password_file:
            r = r.option("passwordFile", os.path.abspath(password_file))
        for k, v in (tls or {}).items():
            r = r.option(k, v)
        if max_rows:
            r = r.option("maxRowsPerBatch", str(max_rows))
        if max_packet:
            r = r.option("maxPacket", str(max_packet))
    if min_rows:
        r = r.option("minRowsPerBatch", str(min_rows)).option("maxTriggerDelay", str(max_delay))
    return r.load()


# Spark's interval words and the forms it parses (window(), withWatermark()):
# whole numbers, a fraction only of seconds, in microseconds ("1.5 minutes",
# "1e-9 seconds" and "1 min" it refuses); the ranges a window and a
# watermark can sensibly take (a window of 10,000 years overflows Spark's dates)
_UNITS = {"second": 1, "seconds": 1, "minute": 60, "minutes": 60, "hour": 3600, "hours": 3600,
          "day": 86400, "days": 86400}
_WHOLE = re.compile(r"[0-9]{1,12}\Z")
_SECONDS = re.compile(r"[0-9]{1,12}(\.[0-9]{1,6})?\Z")
MIN_INTERVAL, MAX_INTERVAL = 0.001, 365 * 86400  # seconds


def seconds(text):
    """'10 seconds', '2 minutes', '1 hour', '1.5 seconds' (Spark's interval
    form) in seconds, from MIN_INTERVAL to MAX_INTERVAL; ValueError for
    anything else."""
    parts = text.split()
    if len(parts) != 2 or parts[1].lower() not in _UNITS:
        raise ValueError("%r is not '<number> seconds|minutes|hours|days'" % text)
    unit = _UNITS[parts[1].lower()]
    if not (_SECONDS if unit == 1 else _WHOLE).match(parts[0]):
        raise ValueError("%r is not in Spark's form: digits, a fraction (to microseconds) only "
                         "of seconds" % text)
    x = float(parts[0]) * unit
    if not MIN_INTERVAL <= x <= MAX_INTERVAL:
        raise ValueError("%r is outside %g seconds to %d days"
                         % (text, MIN_INTERVAL, MAX_INTERVAL // 86400))
    return x


def close_watermark(at, window="10 seconds"):
    """The watermark (seconds since 1970) a close at `at` leaves for the next
    run on the checkpoint: the end of the window holding it. A reading of
    the next run whose event time is before it is late."""
    w = seconds(window)
    return (math.floor(at / w) + 1) * w


def event_time(window="10 seconds", watermark="10 seconds", max_early=5.0):
    """The event time column: the reading's own time "t" unless it is more
    than max_early seconds ahead of its arrival (a clock that is wrong), else
    the arrival. For the close row of a bounded run: close_watermark() of its
    arrival plus the watermark delay, so the watermark passes the end of the
    window holding the close, and no further: not --max-early further, where
    the next run's readings would all be late (docs/pipeline.md, "Every
    window written")."""
    from pyspark.sql import functions as F
    from .source import CLOSE_TOPIC
    w, delay = seconds(window), seconds(watermark)
    arrival = F.unix_micros("received_at") / 1e6
    trusted = F.col("sent_at").isNotNull() & (
        F.unix_micros("sent_at") / 1e6 <= arrival + F.lit(max_early))
    closes = F.timestamp_seconds((F.floor(arrival / w) + 1) * w + F.lit(delay))
    return (F.when(F.col("topic") == CLOSE_TOPIC, closes)
            .when(trusted, F.col("sent_at")).otherwise(F.col("received_at")))


def windows(df, window="10 seconds", watermark="10 seconds", max_early=5.0):
    """Per node, metric and tumbling window: count, min, max, mean of the
    de-duplicated readings. A retained reading is left out: the broker sets
    the retain flag only on what a new subscription replays [MQTT-3.3.1-8,
    MQTT-3.3.1-9], which each run's SUBSCRIBE gets again."""
    from pyspark.sql import functions as F
    from .source import CLOSE_TOPIC
    from .telemetry import DEDUP_KEY
    r = (df.where((F.col("value").isNotNull() & ~F.col("retain"))
                  | (F.col("topic") == CLOSE_TOPIC))
         .withColumn("event_time", event_time(window, watermark, max_early))
         .withWatermark("event_time", watermark)
         # the close row only moves the watermark. The optimizer pushes a
         # condition that does not name the event time below the watermark,
         # where it would hide the close row from it: this one (a single
         # term, event_time is never null) stays above.
         .where(F.col("value").isNotNull() | F.col("event_time").isNull()))
    # a batch (history()) sees every copy at once: plain dropDuplicates
    r = (r.dropDuplicatesWithinWatermark if df.isStreaming else r.dropDuplicates)(list(DEDUP_KEY))
    return (r.groupBy(F.window("event_time", window), "node", "metric")
            .agg(F.count(F.lit(1)).alias("count"), F.min("value").alias("min"),
                 F.max("value").alias("max"), F.avg("value").alias("mean"))
            .select(F.col("window.start").alias("window_start"),
                    F.col("window.end").alias("window_end"),
                    "node", "metric", "count", "min", "max", "mean"))


def history(spark, log, window="10 seconds", watermark="10 seconds", max_early=5.0):
    """The windows of everything the log retains (--keep-log), as a batch:
    a bounded run's output again, for re-processing."""
    df = spark.read.format("umqtt3").option("path", log).option("columns", COLUMNS).load()
    return windows(df, window, watermark, max_early)


class _Queued(Exception):
    pass


def _refuse(pkt, redelivered):
    raise _Queued()  # not taken: no acknowledgement, the broker keeps it


class Refused(Exception):
    """The broker refused the job's login, or failed or refused TLS."""


def tls_context(a):
    """The ssl.SSLContext of the parsed arguments a (parse() checked
    them), or None: plain TCP."""
    from . import tls
    return tls.context(getattr(a, "cafile", None), getattr(a, "tls", False),
                       getattr(a, "cert", None), getattr(a, "key", None), tls.OPTIONS,
                       getattr(a, "capath", None), getattr(a, "key_password_file", None),
                       getattr(a, "tls_alpn", None))


def tls_options(a):
    """The source's TLS options for the parsed arguments a: file paths
    only (absolute: the source runs in Spark's Python worker), never key
    material or the key's passphrase, which would show in the query's plan."""
    o = {}
    for option, path in (("cafile", "cafile"), ("capath", "capath"), ("certfile", "cert"),
                         ("keyfile", "key"), ("keyPasswordFile", "key_password_file")):
        if getattr(a, path, None):
            o[option] = os.path.abspath(getattr(a, path))
    if getattr(a, "tls", False):
        o["tls"] = "true"
    if getattr(a, "tls_alpn", None):
        o["alpn"] = a.tls_alpn
    return o


def ensure_session(broker, topics, qos, client_id, level=5, user=None, password=None,
                   tls=None, cert=False):
    """Make sure the broker holds the persistent session of client_id, so
    that it keeps what is published from now on for the ingest, even before
    Spark has started it. A message the broker delivers meanwhile is refused
    (never acknowledged), so it stays queued for the ingest."""
    from umqtt3.client import MQTTClient
    from .cli import parse_broker
    host, port = parse_broker(broker)
    # the CONNECT carries the id and the login (the client's default buffer
    # is 512 bytes); a topic filter is no longer than --topics
    room = 512 + len(client_id.encode()) + len((user or "").encode()) + len(password or b"") \
        + len(topics.encode())
    for _ in range(5):
        # at the ingest's level (what the broker has in flight is resent
        # built for the level of the connection, whichever it is)
        c = MQTTClient(client_id, host, port, user=user, password=password, keepalive=30,
                       level=level, ssl=tls, bufsize=room)
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
            from .tls import alpn_of, plain_refused, probe, refused
            why = ((refused(e, host, port, cert, alpn_of(tls)) or probe(tls, host, port, cert))
                   if tls is not None else plain_refused(host, port))
            if why:
                raise Refused(why)
            print("broker %s: %s; the ingest keeps trying" % (broker, e), file=sys.stderr)
            return False
        except Exception as e:
            from .ingest import refused_login
            c.disconnect()
            why = refused_login(e)
            if why:
                raise Refused("the broker at %s refused the login: %s (--user, --password-file)"
                              % (broker, why))
            raise
    return True


def start(spark, a, tally=None):
    """Start the query for parsed arguments a; returns the StreamingQuery.
    tally: a list whose first item the batches add the readings of the
    windows they write to (this run's, de-duplicated), and whose second
    (if there is one) they set to the end of the latest window written."""
    from .source import cancel_close
    external = a.ingest == "external"
    if not external:
        from .ingest import read_password
        ensure_session(a.broker, a.topics, a.qos, a.client_id, a.level, a.user,
                       read_password(a.password_file), tls_context(a),
                       bool(getattr(a, "cert", None)))
    if os.path.isdir(a.log):
        cancel_close(a.log)  # a close asked by a run that died before it
    ck = a.checkpoint if "://" in a.checkpoint else os.path.abspath(a.checkpoint)
    df = readings(spark, a.broker, a.topics, a.log, a.qos, a.client_id, a.max_rows,
                  not a.keep_log, a.min_rows, a.max_delay, external, a.level, ck,
                  a.user, a.password_file, tls_options(a), a.max_packet)
    out, fold_every = a.out, a.fold_every

    def write(batch, batch_id):  # on the driver; a replayed batch writes the same files
        import pyarrow.compute as pc
        from .output import write_batch
        t = batch.toArrow()
        if write_batch(out, t, batch_id, fold_every) and tally is not None:
            tally[0] += pc.sum(t.column("count")).as_py() or 0
            end = pc.max(t.column("window_end")).as_py() if t.num_rows else None
            if len(tally) > 1 and end is not None and (tally[1] is None or end > tally[1]):
                tally[1] = end
    w = (windows(df, a.window, a.watermark, a.max_early).writeStream.foreachBatch(write)
         .option("checkpointLocation", ck)
         .outputMode("append").queryName("umqtt3_telemetry"))
    if a.available_now:
        w = w.trigger(availableNow=True)
    else:
        # in milliseconds: "%g" wrote 1e-09, a form Spark cannot parse
        w = w.trigger(processingTime="%d milliseconds" % round(a.trigger * 1000))
    return w.start()


def _ends(q):
    """The end offsets of the batches the query has committed."""
    import json
    for p in q.recentProgress:
        for s in p["sources"]:
            end = s.get("endOffset")
            if isinstance(end, str):
                end = json.loads(end)
            if end:
                yield end


def _messages(end):
    """The message number of an offset: with --ingest external, the
    messages of every log together."""
    if "parts" in end:
        return sum(p["n"] for p in end["parts"].values())
    return end["n"]


def _committed(q):
    """The message number up to which the query has committed."""
    return max((_messages(e) for e in _ends(q)), default=0)


def late(q, seen):
    """Messages the query has dropped as late (behind the watermark), by
    Spark's numRowsDroppedByWatermark. seen: {batch id: count}, kept across
    calls, since Spark holds the progress of its last 100 batches only: call
    it at least that often."""
    for p in q.recentProgress:
        n = sum(s.get("numRowsDroppedByWatermark", 0) for s in p.get("stateOperators", []))
        # once per batch, whichever of its reports Spark still holds
        seen[p["batchId"]] = max(n, seen.get(p["batchId"], 0))
    return sum(seen.values())


def _closed(q):
    """The time (ms) of the last close the query has committed, or 0."""
    return max((e.get("close", 0) for e in _ends(q)), default=0)


def drain(q, log, seconds, settle=5.0, close=True, interrupted=None, each=None):
    """Before a stop: close (source.request_close: the ingest stops and the
    stream ends with the close row once it has everything the log holds),
    then one batch more if it comes within `settle` seconds (the no-data
    batch that writes the windows the close's watermark closed); at most
    `seconds` in all (or until `interrupted`, an Event, is set). Without
    close, commit what the log holds now. each: a function called with no
    arguments every 0.2 s of waiting. Returns True when it got there."""
    from . import log as _log
    from .source import request_close
    if seconds <= 0 or not q.isActive:
        return False
    if not os.path.isdir(log):
        return True  # the ingest never started: nothing came in
    t_end = time.monotonic() + seconds
    if close:
        asked = request_close(log)
        done = lambda: _closed(q) >= asked  # noqa: E731
    else:
        target = _log.count(log)
        done = lambda: _committed(q) >= target  # noqa: E731
    def going():
        return q.isActive and not (interrupted is not None and interrupted.is_set())

    def wait():
        q.awaitTermination(0.2)
        if each is not None:
            each()
    while going() and not done():
        if time.monotonic() > t_end:
            return False
        wait()
    seen = len(q.recentProgress)
    t_end = min(t_end, time.monotonic() + settle)
    while going() and len(q.recentProgress) <= seen and time.monotonic() < t_end:
        wait()
    return done()


def _at_least(low, kind=float, high=None):
    def check(text):
        try:
            x = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError("%r is not a number" % text)
        if x != x or x in (float("inf"), float("-inf")):
            raise argparse.ArgumentTypeError("%r is not a finite number" % text)
        if x < low:
            raise argparse.ArgumentTypeError("%s is below %s" % (text, low))
        if high is not None and x > high:
            raise argparse.ArgumentTypeError("%s is above %g" % (text, high))
        return x
    return check


def _trigger(text):
    x = _at_least(0)(text)
    if x == 0:
        raise argparse.ArgumentTypeError("0 is not above 0")
    if not MIN_INTERVAL <= x <= 86400:
        raise argparse.ArgumentTypeError("%s is outside %g to 86400 seconds" % (text, MIN_INTERVAL))
    return x


# the master URLs Spark takes (spark-submit --help): anything else ends in
# 30 lines from the JVM before the job starts
_MASTER = re.compile(r"(local(\[([1-9][0-9]*|\*)(,[1-9][0-9]*)?\])?"
                     r"|local-cluster\[[1-9][0-9]*,[1-9][0-9]*,[1-9][0-9]*\]"
                     r"|yarn|(spark|k8s|mesos)://\S+)\Z")


def _master(text):
    if not _MASTER.match(text):
        raise argparse.ArgumentTypeError(
            "%r is not a master URL: local, local[N], local[*], spark://HOST:PORT, yarn, "
            "k8s://URL" % text)
    return text


def _duration(text):
    try:
        seconds(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e))
    return text


def _setting(text):
    key, eq, value = text.partition("=")
    if not eq or not key.strip():
        raise argparse.ArgumentTypeError("%r is not KEY=VALUE" % text)
    return key.strip(), value


def parser():
    from .ingest import add_max_packet
    ap = Parser(prog=command_name("umqtt3_pipeline.job"), description=__doc__, formatter_class=Help)
    ap.add_argument("--broker", type=broker_address, default="127.0.0.1:1883", help="host:port")
    ap.add_argument("--topics", default="umqtt3/+/+", type=topic_filters,
                    help="comma-separated filters")
    ap.add_argument("--qos", type=int, default=1, choices=(1, 2), help="QoS of the subscription")
    ap.add_argument("--client-id", default="umqtt3-telemetry", type=client_id,
                    help="fixed: it names the broker's persistent session (up to %d "
                    "characters: what every server takes)" % PORTABLE_CLIENT_ID)
    ap.add_argument("--user", type=utf8, help="the user name the broker wants, if any")
    ap.add_argument("--password-file", metavar="FILE",
                    help="a file whose first line is the password for --user")
    add_tls(ap)
    ap.add_argument("--log", required=True, help="ingest log directory (shared storage on a cluster)")
    ap.add_argument("--out", required=True, help="Parquet output directory")
    ap.add_argument("--checkpoint", required=True, help="Spark's checkpoint directory")
    ap.add_argument("--window", type=_duration, default="10 seconds", help="window length")
    ap.add_argument("--watermark", type=_duration, default="10 seconds",
                    help="how late a reading may come")
    # (at most a year: Spark's timestamps overflowed on the first reading past 1e13 s)
    ap.add_argument("--max-early", type=_at_least(0, float, 31536000), default=5.0,
                    help="seconds a reading's own time may be ahead of its arrival; "
                    "a reading further ahead takes its arrival time (default: 5)")
    ap.add_argument("--trigger", type=_trigger, default=2.0, help="seconds between batches")
    ap.add_argument("--max-rows", type=_at_least(0, int), default=100000,
                    help="rows per batch at most (0: all)")
    ap.add_argument("--min-rows", type=_at_least(0, int), default=10000,
                    help="while the log grows, a batch waits for this many rows (0: never)")
    ap.add_argument("--max-delay", type=_at_least(0), default=1.0,
                    help="seconds a batch waits for --min-rows at most")
    ap.add_argument("--fold-every", type=_at_least(2, int), default=360,
                    help="fold a day's batch files into one once there are this many "
                    "(a finished day is always folded into one file)")
    ap.add_argument("--ingest", choices=("driver", "external"), default="driver",
                    help="driver: the job runs the ingest; external: --log holds one log per "
                    "sub-directory, each written by its own python -m umqtt3_pipeline.ingest "
                    "(scale-out under a shared subscription)")
    ap.add_argument("--level", type=int, choices=(4, 5), default=5,
                    help="MQTT level of the job's ingest: 5 (default), where the broker's "
                    "in-flight window is the ingest's Receive Maximum (65535) up to the "
                    "broker's cap (ours: --max-inflight-v5; mosquitto: none), or 4 (3.1.1, for "
                    "a broker without MQTT 5), where it is the broker's --max-inflight "
                    "(mosquitto: max_inflight_messages)")
    add_max_packet(ap)
    ap.add_argument("--keep-log", action="store_true", help="do not trim the log after commits")
    ap.add_argument("--available-now", action="store_true",
                    help="process what the log holds, then stop")
    ap.add_argument("--seconds", type=_at_least(0), default=0,
                    help="stop after this long (0: never)")
    ap.add_argument("--drain", type=_at_least(0), default=60,
                    help="on stop, up to this many seconds to close: process what the log "
                    "holds and write every window (0: stop at once)")
    ap.add_argument("--plot", help="write each node's windowed series to this PNG at the end "
                    "(or .svg, .pdf: a format matplotlib writes)")
    ap.add_argument("--master", type=_master, help="default: spark-submit's, else local[*]")
    ap.add_argument("--shuffle-partitions", type=_at_least(1, int),
                    help="default: spark-submit's, else 1 (one machine)")
    ap.add_argument("--ui", action="store_true", help="start Spark's web UI")
    ap.add_argument("--conf", action="append", default=[], type=_setting, metavar="KEY=VALUE",
                    help="a Spark setting, as spark-submit's --conf (repeatable); for example "
                    "--conf spark.driver.extraJavaOptions= to let the JVM compile with C2")
    return ap


def parse(argv=None):
    """The checked arguments: one line and exit status 2 for anything
    unusable, the broker that cannot be reached included; the directories
    are created only once everything passed."""
    ap = parser()
    a = ap.parse_args(argv)
    why = spark_missing()
    if why:
        ap.error(why)
    needs_user(ap, a)
    dirs = [(option, getattr(a, option[2:])) for option in ("--log", "--out", "--checkpoint")]
    if a.plot:
        from .plot import unusable
        why = unusable(a.plot)
        if why:
            ap.error("--plot " + why)
        dirs.append(("--plot", os.path.dirname(os.path.abspath(a.plot))))
    for option, path in dirs:
        usable_dir(ap, option, path)
    from .ingest import read_password
    try:
        read_password(a.password_file)
    except OSError as e:
        ap.error("--password-file %s: %s" % (a.password_file, e.strerror or e))
    tls_checked(ap, a)  # refused here, before Spark starts
    if a.ingest == "driver":
        reachable(ap, a.broker)
    made_dirs(ap, dirs)
    note = client_id_note("umqtt3-pipeline", a.client_id)
    if note and a.ingest == "driver":
        print(note, file=sys.stderr)
    return a


def keep_jvm_on_ctrl_c(spark):
    """Under spark-submit, Spark's JVM is this process's parent and in its
    process group: a Ctrl-C stopped the JVM too, before the close could
    write the open windows. Let it ignore SIGINT, as the JVM that PySpark
    starts for itself does (pyspark.java_gateway): Ctrl-C then closes the run
    here, and the JVM exits once this process has."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return  # PySpark started the JVM: it ignores SIGINT already
    try:
        jvm = spark.sparkContext._jvm
        jvm.sun.misc.Signal.handle(jvm.sun.misc.Signal("INT"), jvm.sun.misc.SignalHandler.SIG_IGN)
    except Exception:  # a JVM without sun.misc: SIGTERM to this process still closes
        pass


def spark_gone(e):
    """Whether e says Spark's JVM is no longer there (py4j's errors, a
    closed connection): a JVM stopped by a signal of its own, or killed."""
    return type(e).__module__.split(".")[0] == "py4j" or isinstance(e, (ConnectionError, EOFError))


def windows_left(a, until):
    """The one line for a close that could not reach Spark: which windows
    were not written, and that the next run writes them."""
    which = ("the windows after %s (event time, UTC)" % until.strftime("%Y-%m-%d %H:%M:%S")
             if until is not None else "every window of this run")
    return ("umqtt3-pipeline: Spark stopped before the close wrote the open windows (its JVM "
            "went first: stop the job's Python process, not Spark's, with SIGTERM or Ctrl-C): "
            "%s left for the next run on --checkpoint %s, which writes them; their readings "
            "are in --log %s" % (which, a.checkpoint, a.log))


def on_signals(stop, interrupted):
    """SIGTERM and the first Ctrl-C set stop (the job closes: every window
    written, then stops); a second Ctrl-C sets interrupted (stop without
    closing), a third one raises KeyboardInterrupt. Installed again once
    Spark is up: PySpark's own SIGINT handler would cancel the jobs through
    the JVM from inside the signal and print tracebacks."""
    def on_int(*_):
        if interrupted.is_set():
            raise KeyboardInterrupt
        if stop.is_set():
            interrupted.set()
            print("interrupted: stopping without writing the open windows",
                  file=sys.stderr, flush=True)
        else:
            print("stopping: writing every window first (Ctrl-C again: stop now)",
                  file=sys.stderr, flush=True)
        stop.set()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, on_int)


# The loggers of Spark that report a failed query (with its trace, and the
# tasks it failed in) before the query's exception gets here: the job says it
# once, in one line (failed()), and writes the trace to a file
_REPORTERS = ("org.apache.spark.sql.execution.streaming", "org.apache.spark.executor.Executor",
              "org.apache.spark.scheduler.TaskSetManager", "org.apache.spark.api.python")
# what names a cause in a trace: a Python exception's last line (a builtin
# name, or a module's: pyarrow.lib.ArrowTypeError; not the wrappers py4j and
# pyspark.errors put round the JVM's, nor the JVM's own), else the deepest
# "Caused by:" of the JVM's, else the last of Spark's error classes
# ("[STREAM_FAILED] ... [THE_CAUSE] what")
_PY_CAUSE = re.compile(r"^((?:[a-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit)): (.+)$", re.M)
_WRAPPERS = ("py4j.", "pyspark.errors.", "java.", "javax.", "org.", "scala.")
_JVM_CAUSE = re.compile(r"^Caused by: [\w.$]+: (.+)$", re.M)
_SPARK_CAUSE = re.compile(r"\[[A-Z][A-Z0-9_.]+\] ")
# what to do about a cause, where the job knows it
_HINTS = {"STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE":
          " (a --checkpoint of an older version of the job: a new one, and a new --out; "
          "docs/pipeline.md)"}


def cause(text):
    """The line that says why, from a failure's whole text."""
    hint = "".join(h for k, h in _HINTS.items() if k in text)
    m = [x for x in _PY_CAUSE.findall(text) if not x[0].startswith(_WRAPPERS)]
    if m:
        return "%s: %s%s" % (m[-1] + (hint,))
    m = _JVM_CAUSE.findall(text)
    if m:
        return m[-1] + hint
    m = list(_SPARK_CAUSE.finditer(text))
    if m:
        return text[m[-1].start():].split("\n", 1)[0].strip() + hint
    lines = [x.strip() for x in text.splitlines() if x.strip()]
    return (lines[-1] if lines else "unknown") + hint


def failed(what, e):
    """Say "umqtt3-pipeline: WHAT (the full trace: FILE): CAUSE" on stderr,
    the trace written to FILE; returns the exit status, 1."""
    import tempfile
    import traceback
    text = "".join(traceback.format_exception(e)) if isinstance(e, BaseException) else str(e)
    try:
        fd, path = tempfile.mkstemp(prefix="umqtt3-pipeline-", suffix=".log")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        where = " (the full trace: %s)" % path
    except OSError:  # a full /tmp: the cause still goes out
        where = ""
    print("umqtt3-pipeline: %s%s: %s" % (what, where, cause(text)[:1000]), file=sys.stderr,
          flush=True)
    return 1


def quiet_reporters(spark):
    """Turn off _REPORTERS (failed() reports instead), the traceback
    PySpark's accumulator server prints when the JVM's connection to it ends,
    and the one py4j logs on the root logger when a call finds the JVM gone
    (a JVM gone before the close: windows_left() says it once)."""
    logging.getLogger().addFilter(not_py4j)
    try:
        jvm = spark.sparkContext._jvm
        off = jvm.org.apache.logging.log4j.Level.OFF
        for name in _REPORTERS:
            jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, off)
    except Exception:  # another logging back end: Spark's own lines stay
        pass
    server = getattr(spark.sparkContext, "_accumulatorServer", None)
    if server is not None:
        loud = server.handle_error

        def handle_error(request, client_address):
            if not isinstance(sys.exc_info()[1], (EOFError, ConnectionError)):
                loud(request, client_address)
        server.handle_error = handle_error


def not_py4j(record):
    """A root-logger filter: py4j's gateway logs a lost connection with
    logging.exception() on the root logger (a traceback on stderr however
    the caller goes on to handle it); its own loggers stay as they are."""
    return "py4j" not in record.pathname.replace("\\", "/").split("/")


def say_lost(line):
    """Print the line on stderr (which may be gone with spark-submit's JVM,
    its reader); exit status 1."""
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:
        pass
    return 1


def main(argv=None):
    a = parse(argv)
    stop, interrupted = threading.Event(), threading.Event()
    on_signals(stop, interrupted)
    t0 = time.monotonic()
    if a.ingest == "driver":
        from .ingest import read_password
        try:  # before Spark starts: a refused login in one line
            ensure_session(a.broker, a.topics, a.qos, a.client_id, a.level, a.user,
                           read_password(a.password_file), tls_context(a),
                           bool(getattr(a, "cert", None)))
        except Refused as e:
            print("umqtt3-pipeline: %s" % e, file=sys.stderr)
            return 1
    spark = q = None
    tally = [0, None]  # readings in the windows this run wrote, the last window's end
    dropped = {}  # late(): messages dropped as late, per batch
    gone = False  # Spark's JVM went before the close
    try:
        try:
            spark = session(a.master, conf=spark_conf(a.shuffle_partitions, a.ui, a.conf))
        except Exception as e:  # a --conf Spark refuses, a JVM that does not start
            return failed("Spark did not start", e)
        on_signals(stop, interrupted)
        keep_jvm_on_ctrl_c(spark)
        spark.sparkContext.setLogLevel("ERROR")
        quiet_reporters(spark)
        if not stop.is_set():
            try:
                q = start(spark, a, tally)
            except Exception as e:  # what Spark finds wrong as it starts the query
                if isinstance(e, Refused):
                    print("umqtt3-pipeline: %s" % e, file=sys.stderr)
                    return 1
                return failed("the query did not start", e)
            print("umqtt3 telemetry: %s -> %s (log %s)" % (a.broker, a.out, a.log), flush=True)
        t_end = time.monotonic() + a.seconds if a.seconds else None
        while q is not None and q.isActive and not stop.is_set():
            if t_end and time.monotonic() >= t_end:
                break
            q.awaitTermination(0.5)
            late(q, dropped)
        if q is not None and not interrupted.is_set():
            drain(q, a.log, a.drain, max(5.0, 4 * a.trigger), interrupted=interrupted,
                  each=lambda: late(q, dropped))
    except KeyboardInterrupt:
        print("interrupted again: stopping now", file=sys.stderr, flush=True)
        return 130
    except Exception as e:
        from pyspark.errors import StreamingQueryException
        if isinstance(e, StreamingQueryException):  # awaitTermination() raises it
            return failed("query failed", e)
        if q is not None and spark_gone(e):
            return say_lost(windows_left(a, tally[1]))
        raise
    finally:
        try:
            if q is not None and q.isActive:
                if interrupted.is_set():
                    # stopping interrupts the batch in flight; its JVM errors say only that
                    spark.sparkContext.setLogLevel("OFF")
                q.stop()
        except KeyboardInterrupt:  # a second Ctrl-C: leave Spark's shutdown to its JVM
            print("interrupted again: stopping now", file=sys.stderr)
            return 130
        except Exception as e:
            if not spark_gone(e):
                raise
            gone = True  # said below, unless the except above has said it
    if gone:
        return say_lost(windows_left(a, tally[1]))
    if q is None:
        # SIGTERM or Ctrl-C while Spark was starting: nothing was read
        print("umqtt3 telemetry: stopped before the query started: nothing read", flush=True)
        return 130 if interrupted.is_set() else 0
    if q.exception() is not None:
        return failed("query failed", q.exception())
    print("umqtt3 telemetry: stopped after %.0f s; %d readings committed to %s (in the windows "
          "this run wrote); %d messages dropped as late (behind the watermark, copies included)"
          % (time.monotonic() - t0, tally[0], a.out, late(q, dropped)), flush=True)
    if a.plot:
        from .plot import plot
        try:
            n = plot(a.out, a.plot)
        except Exception as e:  # the windows are written: only the picture failed
            spark.stop()
            return failed("the plot (%s) was not drawn" % a.plot, e)
        print("plot: %s (%d windows)" % (a.plot, n), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
