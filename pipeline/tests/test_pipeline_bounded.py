"""A bounded run of the telemetry job writes every window it saw: readings
with the node's own time, without it, and with a clock that is ahead, all
accounted for in Parquet once each; a batch over the retained log gives the
same windows. The next run on the checkpoint loses none of its readings to
the close, and says how many it dropped as late. Marked slow (Spark)."""
import collections
import math
import os
import re
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


def job_cmd(port, tmp, *extra, window=WINDOW, watermark=10):
    return [sys.executable, "-m", "umqtt3_pipeline.job", "--master", "local[2]",
            "--broker", "127.0.0.1:%d" % port, "--client-id", "bounded",
            "--log", str(tmp / "log"), "--out", str(tmp / "out"),
            "--checkpoint", str(tmp / "ckpt"), "--window", "%d seconds" % window,
            "--watermark", "%d seconds" % watermark, "--trigger", "0.5", "--keep-log"] + list(extra)


def bounded_run(cmd, log, until):
    """Run the job until the log holds `until` messages, then SIGTERM it (it
    closes); returns its stdout."""
    from umqtt3_pipeline import log as L
    env = dict(procs.python_env(), SPARK_LOCAL_IP="127.0.0.1")
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        wait_for(lambda: os.path.isdir(log) and L.count(log) >= until, 180,
                 "%d messages in the log" % until)
        p.terminate()  # SIGTERM to the driver (not its JVM): close, write, exit
        out, err = p.communicate(timeout=180)
    finally:
        procs.stop(p, 5)
    assert p.returncode == 0, err
    return out


def job_session(port):
    """The job's session first: the broker keeps every reading for it."""
    from umqtt3_pipeline import job
    job.ensure_session("127.0.0.1:%d" % port, "umqtt3/+/+", 1, "bounded")


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
    from umqtt3_pipeline.plot import load
    port = umqtt3_broker.port
    job_session(port)
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
    log = str(tmp_path / "log")
    out = bounded_run(job_cmd(port, tmp_path), log, len(msgs))
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


def test_the_next_run_keeps_the_readings_that_come_after_a_close(umqtt3_broker, tmp_path):
    # /tmp/audit29 finding 6: the close moved the watermark --max-early
    # seconds (plus up to a window) past its own time, so the next run on the
    # checkpoint dropped every reading it received in that span, silently
    from umqtt3_pipeline.plot import load
    port, w, log = umqtt3_broker.port, 2, str(tmp_path / "log")
    cmd = job_cmd(port, tmp_path, "--max-early", "300", window=w, watermark=w)
    job_session(port)
    before = time.time()  # a time of the first run's windows
    pub = publisher(port, "bounded-pub")
    publish_all(pub, [reading("n1", "temp", i + 0.5, 7, i) for i in range(3)])
    out1 = bounded_run(cmd, log, 3)
    # the second run's readings come well within --max-early of the close,
    # but after the end of the window the close's time is in (the docs' one
    # cost for readings without "t": a next run that starts within it)
    past = (math.floor(time.time() / w) + 1) * w
    wait_for(lambda: time.time() > past, 10, "the close's window to end")
    untimed = [reading("n2", "temp", i + 0.5, 8, i) for i in range(3)]
    late = [reading("n3", "temp", 1.0, 9, 1, before)]  # stamped in a window the close wrote
    publish_all(pub, untimed + late)
    pub.disconnect()
    out2 = bounded_run(cmd, log, 3 + 4)
    got = collections.Counter()
    for r in load(str(tmp_path / "out")).itertuples():
        got[r.node] += int(r.count)
    assert dict(got) == {"n1": 3, "n2": 3}
    # the late reading is the one left out, and the run says so
    assert re.search(r"; 3 readings committed .*; 0 messages dropped as late", out1), out1
    assert re.search(r"; 3 readings committed .*; 1 messages dropped as late", out2), out2
