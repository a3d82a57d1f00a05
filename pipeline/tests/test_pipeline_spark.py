"""The telemetry job on Spark (local[2]) against our broker: exact window
aggregates for a known input, the driver SIGKILLed mid-batch and restarted,
a broker restart mid-stream. Marked slow (MQ_FAST=1 leaves them out)."""
import collections
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tools import procs
from pipeline_support import (Broker, have_spark, publish_all, publisher, reading,
                              spark_session, umqtt3_broker, wait_for)  # noqa: F401

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(have_spark() is not None, reason=have_spark() or "")]

WINDOW = 10
BASE = 1_700_000_000  # a multiple of WINDOW: window starts are BASE + k * WINDOW


@pytest.fixture(scope="module")
def spark():
    return spark_session()


def series(node, metric, boot, count, step=0.7, first_seq=1, t0=BASE):
    """count readings with their own time t (so windows are known exactly)."""
    out = []
    for i in range(count):
        v = round(((i * 37 + len(node) * 11) % 50) / 2, 1)
        out.append((node, metric, v, boot, first_seq + i, t0 + i * step))
    return out


def encode(rs):
    return [reading(n, m, v, b, s, t) for n, m, v, b, s, t in rs]


def sentinel():
    # a reading an hour later: the watermark passes every window before it
    return reading("clock", "tick", 0, 1, 1, BASE + 3600)


def expected(rs):
    """{(window start, node, metric): (count, min, max, mean)} of the distinct
    readings, computed here from the input."""
    first = {}
    for r in rs:
        first.setdefault((r[0], r[3], r[4]), r)
    groups = collections.defaultdict(list)
    for node, metric, v, _, _, t in first.values():
        groups[(int(t // WINDOW * WINDOW), node, metric)].append(v)
    return {k: (len(v), min(v), max(v), sum(v) / len(v)) for k, v in groups.items()}


def output(out):
    from umqtt3_pipeline.plot import load
    df = load(str(out))
    got = {}
    for r in df.itertuples():
        k = (int(r.window_start.timestamp()), r.node, r.metric)
        assert k not in got, "window written twice: %r" % (k,)
        got[k] = (int(r.count), r.min, r.max, r.mean)
    return got


def settle(out, want, timeout=150):
    """Wait until the output has every window of `want`, then compare."""
    wait_for(lambda: set(want) <= set(output(out)), timeout, "the windows in Parquet", step=0.5)
    got = {k: v for k, v in output(out).items() if k[1] != "clock"}
    assert set(got) == set(want)
    for k in want:
        c, lo, hi, mean = got[k]
        assert (c, lo, hi) == want[k][:3], k
        assert mean == pytest.approx(want[k][3], rel=1e-12), k


def job_args(broker, tmp, client_id, *extra):
    return ["--broker", "127.0.0.1:%d" % broker.port, "--log", str(tmp / "log"),
            "--out", str(tmp / "out"), "--checkpoint", str(tmp / "ckpt"),
            "--window", "%d seconds" % WINDOW, "--watermark", "10 minutes",
            "--trigger", "0.5", "--client-id", client_id] + list(extra)


def processed(q):
    return sum(p["numInputRows"] for p in q.recentProgress)


def test_python_workers_import_pyspark_as_installed(spark):
    # not compiled anew from pyspark.zip at each worker's start (job._worker_path)
    import pyspark
    where = spark.sparkContext.parallelize([0], 1).map(
        lambda _: __import__("pyspark").__file__).collect()
    assert where == [pyspark.__file__]
    assert ".zip" not in where[0]


def test_window_aggregates_are_exact_and_duplicates_count_once(spark, umqtt3_broker, tmp_path):
    from umqtt3_pipeline import job
    # a retained reading, replayed by the broker at the job's SUBSCRIBE (as
    # at every run's): not a reading of this run, counted in no window
    ret = publisher(umqtt3_broker.port, "exact-retained")
    ret.publish(*reading("n9", "temp", 5, 1, 1, BASE + 1), qos=1, retain=True)
    ret.disconnect()
    q = job.start(spark, job.parser().parse_args(job_args(umqtt3_broker, tmp_path, "exact")))
    try:
        rs = (series("n1", "temp", 11, 40) + series("n1", "vbat", 11, 25, step=1.3)
              + series("n2", "temp", 22, 30, step=0.9))
        pub = publisher(umqtt3_broker.port, "exact-pub")
        publish_all(pub, encode(rs))
        wait_for(lambda: processed(q) >= len(rs), 120, "the first readings processed")
        # the same readings published again (a node's resend after a reset):
        # a later batch, the same (node, boot, seq), not counted again
        again = rs[::4]
        publish_all(pub, encode(again) + [sentinel()])
        settle(tmp_path / "out", expected(rs + again))
        pub.disconnect()
    finally:
        q.stop()


def start_job(broker, tmp, *extra):
    env = dict(procs.python_env(), SPARK_LOCAL_IP="127.0.0.1")
    # --seconds: a job this test leaves behind (its pytest killed) ends by itself
    return subprocess.Popen([sys.executable, "-m", "umqtt3_pipeline.job", "--master", "local[2]",
                             "--seconds", "300", "--drain", "0"] + job_args(broker, tmp, "killed", *extra),
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def mid_batch(ckpt):
    """A batch Spark planned (offsets/N written) but has not committed."""
    offs = {int(f) for f in os.listdir(ckpt / "offsets") if f.isdigit()} if (ckpt / "offsets").is_dir() else set()
    commits = {int(f) for f in os.listdir(ckpt / "commits") if f.isdigit()} if (ckpt / "commits").is_dir() else set()
    return [b for b in offs - commits if b >= 1]


def test_driver_sigkilled_mid_batch_replays_from_the_log(umqtt3_broker, tmp_path):
    rs = series("k1", "temp", 5, 900, step=0.05) + series("k2", "temp", 6, 900, step=0.05)
    msgs = encode(rs)
    p = start_job(umqtt3_broker, tmp_path, "--max-rows", "150")
    pub = publisher(umqtt3_broker.port, "killed-pub")
    try:
        wait_for(lambda: (tmp_path / "ckpt" / "offsets").is_dir(), 120, "the job to start")
        half = len(msgs) // 2
        t = threading.Thread(target=publish_all, args=(pub, msgs[:half]))
        t.start()
        wait_for(lambda: mid_batch(tmp_path / "ckpt"), 120, "a batch in progress", step=0.02)
        os.killpg(p.pid, signal.SIGKILL)  # the driver, its JVM and its Python workers
        p.wait()
        t.join(60)
        assert mid_batch(tmp_path / "ckpt")  # killed with a batch planned, not committed
        publish_all(pub, msgs[half:])  # while no driver runs: queued by the broker
        p = start_job(umqtt3_broker, tmp_path, "--max-rows", "150")
        publish_all(pub, [sentinel()])
        settle(tmp_path / "out", expected(rs), timeout=180)
        got = output(tmp_path / "out")
        assert sum(v[0] for k, v in got.items() if k[1] != "clock") == len(rs)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        pub.disconnect()


def test_broker_restart_mid_stream_loses_nothing(spark, tmp_path):
    from umqtt3_pipeline import job
    from umqtt3_pipeline import log as L
    broker = Broker(store=tmp_path / "broker-store").start()
    q = job.start(spark, job.parser().parse_args(
        job_args(broker, tmp_path, "restart", "--qos", "2", "--keep-log")))
    try:
        q1 = series("r1", "temp", 1, 600, step=0.1)  # published at QoS 1
        q2 = series("r2", "temp", 2, 600, step=0.1)  # published at QoS 2
        pubs = [publisher(broker.port, "restart-pub1"), publisher(broker.port, "restart-pub2")]
        threads = [threading.Thread(target=publish_all, args=(pubs[0], encode(q1), 1, 120)),
                   threading.Thread(target=publish_all, args=(pubs[1], encode(q2), 2, 120))]
        for t in threads:
            t.start()
        log = str(tmp_path / "log")
        wait_for(lambda: os.path.isdir(log) and L.segments(log) and
                 sum(1 for _ in L.read_range(log, *first(log))) >= 300, 120,
                 "a third of the readings in the log", step=0.02)
        broker.stop()  # SIGTERM: the broker saves its sessions and closes every link
        time.sleep(0.5)
        broker.start()
        for t in threads:
            t.join(120)
        publish_all(pubs[0], [sentinel()])
        settle(tmp_path / "out", expected(q1 + q2))
        # QoS 2 end to end: every reading of r2 is in the log exactly once
        r2 = collections.Counter(m[6] for m in L.read_range(log, *first(log))
                                 if m[5] == b"umqtt3/r2/temp")
        assert len(r2) == len(q2) and max(r2.values()) == 1
        for p in pubs:
            p.disconnect()
    finally:
        q.stop()
        broker.stop()


def first(log):
    from umqtt3_pipeline import log as L
    b = L.segments(log)[0]
    h = L.read_header(log, b)
    return b + h[0], h[1]


def test_hostile_numbers_neither_stop_spoil_nor_merge(spark, tmp_path):
    """A time Spark's timestamps cannot hold stopped every batch holding it
    (OverflowError in the executors, at every restart); NaN and Infinity were
    counted into their window; boots from 2**31 up were null and merged two
    readings. Now: the first two are refused as malformed, the boots kept."""
    from umqtt3_pipeline import job, log as L
    g = L.Log(str(tmp_path / "log"))
    msgs = [reading("n1", "temp", 20, 1, 1, BASE + 1), reading("n1", "temp", 22, 1, 2, BASE + 2),
            (b"umqtt3/n1/temp", b'{"v":1,"boot":1,"seq":3,"t":99999999999999}'),
            (b"umqtt3/n1/temp", b'{"v":1,"boot":1,"seq":4,"t":NaN}'),
            (b"umqtt3/n1/temp", b'{"v":1,"boot":1,"seq":5,"t":1e300}'),
            (b"umqtt3/n1/temp", b'{"v":NaN,"boot":1,"seq":6,"t":%d}' % (BASE + 3)),
            (b"umqtt3/n1/temp", b'{"v":Infinity,"boot":1,"seq":7,"t":%d}' % (BASE + 3)),
            reading("n2", "temp", 5, 3000000000, 0, BASE + 1),
            reading("n2", "temp", 7, 3000000001, 0, BASE + 2)]
    for i, (tp, pl) in enumerate(msgs):
        g.append_msg(tp, pl, 1, False, False, i + 1, BASE * 1000)
    g.sync()
    g.close()
    rows = {r["node"]: r for r in job.history(spark, str(tmp_path / "log")).collect()}
    assert (rows["n1"]["count"], rows["n1"]["min"], rows["n1"]["max"]) == (2, 20, 22)
    assert (rows["n2"]["count"], rows["n2"]["min"], rows["n2"]["max"]) == (2, 5, 7)
