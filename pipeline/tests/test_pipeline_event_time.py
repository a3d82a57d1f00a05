"""Readings with skewed or missing device time land in the windows
docs/pipeline.md ("Event time") promises, while the job runs: a clock a
little ahead (within --max-early) keeps its own time, a clock far ahead takes
the arrival and does not move the watermark for the other nodes, a reading
without time takes its arrival, and one behind the watermark is late:
dropped and counted by Spark. Marked slow (Spark)."""
import collections
import time
from datetime import datetime, timezone

import pytest

from pipeline_support import (have_spark, publish_all, publisher, reading, spark_session,
                              umqtt3_broker, wait_for)  # noqa: F401

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(have_spark() is not None, reason=have_spark() or "")]

WINDOW = 10
MAX_EARLY = 5


def watermark(q):
    """The query's watermark in seconds since 1970 (0 before it has one)."""
    p = q.lastProgress
    w = (p or {}).get("eventTime", {}).get("watermark")
    if not w:
        return 0
    return datetime.strptime(w, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc).timestamp()


def processed(q):
    return sum(p["numInputRows"] for p in q.recentProgress)


def dropped(q):
    return sum(s.get("numRowsDroppedByWatermark", 0)
               for p in q.recentProgress for s in p.get("stateOperators", []))


def window_of(t):
    return int(t // WINDOW * WINDOW)


def test_skewed_and_missing_device_time_land_in_the_promised_windows(umqtt3_broker, tmp_path):
    from umqtt3_pipeline import job
    from umqtt3_pipeline.plot import load
    spark = spark_session()
    log = str(tmp_path / "log")
    a = job.parser().parse_args([
        "--broker", "127.0.0.1:%d" % umqtt3_broker.port, "--client-id", "skew", "--log", log,
        "--out", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "ckpt"),
        "--window", "%d seconds" % WINDOW, "--watermark", "10 seconds",
        "--max-early", str(MAX_EARLY), "--trigger", "0.5", "--min-rows", "0"])
    q = job.start(spark, a)
    pub = publisher(umqtt3_broker.port, "skew-pub")
    try:
        now = time.time()
        # the first batch: a node in sync, a reading of 40 s ago (queued on
        # its flash: its own window is still open), a clock 2 s ahead
        # (within --max-early: its own time), a clock an hour ahead and a
        # node without time (both: the arrival)
        synced = [("ok", "temp", i, 1, i + 1, now - 20 + i) for i in range(10)]
        queued = [("old", "temp", 7, 2, 1, now - 40)]
        fast = [("fast", "temp", i, 3, i + 1, now + 2 + i * 0.1) for i in range(5)]
        wrong = [("wrong", "temp", i, 4, i + 1, now + 3600 + i) for i in range(5)]
        untimed = [("none", "temp", i, 5, i + 1, None) for i in range(5)]
        # in the order of their event times: a batch may end anywhere, and
        # none is behind a reading before it by more than the watermark
        first = queued + synced + untimed + wrong + fast
        publish_all(pub, [reading(*r) for r in first])
        wait_for(lambda: processed(q) >= len(first), 120, "the first readings processed")
        # the job's ingest took them (their arrival) before Spark processed
        # them, not before the broker acknowledged them: a busy machine may
        # deliver them after the next window's start
        after_first = time.time()
        # the watermark follows the nodes in sync, not the clock an hour ahead
        wait_for(lambda: watermark(q) > now - 40, 60, "the watermark to move")
        assert watermark(q) < time.time() + 60
        # then: a reading behind the watermark (late: dropped, counted) and
        # more readings of the node in sync, which the clock an hour ahead
        # must not have made late
        late = [("late", "temp", 1, 6, 1, now - 300)]
        t2 = time.time()
        later = [("ok", "temp", 50 + i, 1, 11 + i, t2 + i * 0.1) for i in range(5)]
        publish_all(pub, [reading(*r) for r in late + later])
        wait_for(lambda: processed(q) >= len(first) + len(late) + len(later), 120,
                 "the later readings processed")
        assert job.drain(q, log, 120)  # close: every window written
        assert dropped(q) == 1  # the late reading, counted by Spark
    finally:
        pub.disconnect()
        q.stop()
    got = collections.Counter()
    for r in load(str(tmp_path / "out")).itertuples():
        got[(r.node, int(r.window_start.timestamp()))] += int(r.count)
    own = collections.Counter((n, window_of(t)) for n, _, _, _, _, t in synced + queued + fast
                              + later)
    # with their own time: exactly the windows of that time
    assert {k: v for k, v in got.items() if k[0] in ("ok", "old", "fast")} == dict(own)
    # far ahead or without time: all counted, in windows of their arrival
    for node, rs in (("wrong", wrong), ("none", untimed)):
        ws = {w: c for (n, w), c in got.items() if n == node}
        assert sum(ws.values()) == len(rs), node
        assert all(window_of(now) <= w <= after_first for w in ws), (node, ws)
    # late: in no window
    assert not [k for k in got if k[0] == "late"]
