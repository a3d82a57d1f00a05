"""A bounded run of the telemetry job writes every window it saw: readings
with the node's own time, without it, and with a clock that is ahead, all
accounted for in Parquet once each; a batch over the retained log gives the
same windows. Marked slow (Spark)."""
import collections
import os
import subprocess
import sys
import time

import pytest

from tools import procs
from pipeline_support import (have_spark, publish_all, publisher, reading, spark_session,
                              umqtt3_broker, wait_for)  # noqa: F401

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(have_spark() is not None, reason=have_spark() or "")]

WINDOW = 10


def job_cmd(port, tmp, *extra):
    return [sys.executable, "-m", "umqtt3_pipeline.job", "--master", "local[2]",
            "--broker", "127.0.0.1:%d" % port, "--client-id", "bounded",
            "--log", str(tmp / "log"), "--out", str(tmp / "out"),
            "--checkpoint", str(tmp / "ckpt"), "--window", "%d seconds" % WINDOW,
            "--watermark", "10 seconds", "--trigger", "0.5", "--keep-log"] + list(extra)


def windows_of(df):
    """{(window start, node, metric): count} of a pandas frame of windows."""
    got = {}
    for r in df.itertuples():
        k = (int(r.window_start.timestamp()), r.node, r.metric)
        assert k not in got, "window written twice: %r" % (k,)
        got[k] = int(r.count)
    return got


def test_a_bounded_run_writes_every_window_once(umqtt3_broker, tmp_path):
    from umqtt3_pipeline import job
    from umqtt3_pipeline import log as L
    from umqtt3_pipeline.plot import load
    port = umqtt3_broker.port
    # the session first: the broker keeps every reading for the job
    job.ensure_session("127.0.0.1:%d" % port, "umqtt3/+/+", 1, "bounded")
    now = int(time.time())
    t0 = now - 60 - now % WINDOW  # a window start a minute ago
    timed = [("e1", "temp", (i % 7) / 2, 1, i + 1, t0 + i * 0.75) for i in range(60)]
    timed += [("e2", "temp", i, 2, i + 1, t0 + 3 + i * 2) for i in range(20)]
    untimed = [("a1", "temp", i, 3, i + 1, None) for i in range(40)]  # no "t": arrival time
    ahead = [("s1", "temp", i, 4, i + 1, now + 3600 + i) for i in range(15)]  # a clock ahead
    rs = timed + untimed + ahead
    again = rs[::5]  # resent: the same (node, boot, seq), counted once
    msgs = [reading(n, m, v, b, s, t) for n, m, v, b, s, t in rs + again]
    pub = publisher(port, "bounded-pub")
    publish_all(pub, msgs)
    pub.disconnect()
    env = dict(procs.python_env(), SPARK_LOCAL_IP="127.0.0.1")
    p = subprocess.Popen(job_cmd(port, tmp_path), env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        log = str(tmp_path / "log")
        wait_for(lambda: os.path.isdir(log) and L.count(log) >= len(msgs), 180,
                 "every reading in the log")
        p.terminate()  # SIGTERM to the driver (not its JVM): close, write, exit
        out, err = p.communicate(timeout=180)
    finally:
        procs.stop(p, 5)
    assert p.returncode == 0, err
    got = windows_of(load(str(tmp_path / "out")))
    per_node = collections.Counter()
    for (_, node, _), c in got.items():
        per_node[node] += c
    # every distinct reading once, whatever its time
    assert dict(per_node) == {"e1": 60, "e2": 20, "a1": 40, "s1": 15}
    # readings with their own time: in exactly the windows of that time
    want = collections.Counter((int(t // WINDOW * WINDOW), n, m) for n, m, _, _, _, t in timed)
    assert {k: v for k, v in got.items() if k[1] in ("e1", "e2")} == dict(want)
    # without a time, or with one ahead of the arrival: the arrival's windows,
    # after the publishing began and before the close
    for k in got:
        if k[1] in ("a1", "s1"):
            assert now - WINDOW <= k[0] <= time.time(), k
    assert "readings committed" in out

    # a batch over the retained log gives the same windows
    spark = spark_session()
    again = windows_of(job.history(spark, log, "%d seconds" % WINDOW, "10 seconds").toPandas())
    assert again == got
