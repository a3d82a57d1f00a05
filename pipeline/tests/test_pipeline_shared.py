"""Scale-out: two ingest processes share one MQTT 5 shared subscription
($share/<group>/<filter>) [MQTT-4.8.2-1], each into its own log; one is
SIGKILLed and restarted mid-stream; the job reads both logs (offsets per
log) and counts every reading exactly once. The same test on umqtt3's
broker and on mosquitto. Marked slow (Spark)."""
import collections
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from tools import procs
from pipeline_support import (Broker, have_spark, publish_all, publisher, reading,
                              spark_session, wait_for)

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(have_spark() is not None, reason=have_spark() or "")]

WINDOW = 10


def umqtt3_broker(tmp_path):
    """python -m umqtt3.broker (MQTT 5, $share) with its store."""
    b = Broker(store=tmp_path / "broker-store").start()
    yield b.port
    b.stop()


def mosquitto(tmp_path):
    """mosquitto (MQTT 5, $share) with persistence, on a free loopback port."""
    if not shutil.which("mosquitto"):
        pytest.skip("no mosquitto")
    port = procs.free_port()
    d = tmp_path / "mosquitto"
    d.mkdir()
    (d / "m.conf").write_text("listener %d 127.0.0.1\nallow_anonymous true\npersistence true\n"
                              "persistence_location %s/\nmax_queued_messages 0\n" % (port, d))
    p = procs.start([shutil.which("mosquitto"), "-c", str(d / "m.conf")], port,
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    yield port
    procs.stop(p)


@pytest.fixture(params=["umqtt3", "mosquitto"])
def broker(request, tmp_path):
    """The port of an MQTT 5 broker with shared subscriptions: ours, then mosquitto."""
    yield from (umqtt3_broker if request.param == "umqtt3" else mosquitto)(tmp_path)


def ingest(port, log, name):
    """python -m umqtt3_pipeline.ingest as a member of the group "fleet";
    returns once it has subscribed."""
    p = subprocess.Popen([sys.executable, "-m", "umqtt3_pipeline.ingest", "--log", str(log),
                          "--broker", "127.0.0.1:%d" % port, "--client-id", "ingest-" + name,
                          "--share", "fleet", "--topics", "umqtt3/+/+"],
                         env=procs.python_env(), stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    return p


def keys(log_root):
    """{(node, boot, seq): copies} over every log under log_root."""
    from umqtt3_pipeline import log as L
    from umqtt3_pipeline.source import log_parts
    from umqtt3_pipeline.telemetry import dedup_key
    seen = collections.Counter()
    for name in log_parts(str(log_root)):
        d = os.path.join(str(log_root), name)
        first = L.first(d)
        for m in L.read_range(d, *first):
            seen[dedup_key(m[5], m[6])] += 1
    return seen


def test_two_ingests_share_a_subscription_one_killed_every_reading_once(broker, tmp_path):
    from umqtt3_pipeline import job, log as L
    from umqtt3_pipeline.plot import load
    root = tmp_path / "logs"
    ings = {n: ingest(broker, root / n, n) for n in ("a", "b")}
    try:
        now = int(time.time())
        t0 = now - 120 - now % WINDOW
        rs = [("s%d" % (i % 3), "temp", i % 17, 5, i, t0 + i * 0.03) for i in range(3000)]
        msgs = [reading(n, m, v, b, s, t) for n, m, v, b, s, t in rs]
        pub = publisher(broker, "shared-pub")
        t = threading.Thread(target=publish_all, args=(pub, msgs, 1, 120))
        t.start()
        wait_for(lambda: L.segments(str(root / "a")) and L.count(str(root / "a")) >= 400, 60,
                 "ingest a to take a share", step=0.01)
        ings["a"].send_signal(signal.SIGKILL)  # mid-stream, acknowledged or not
        ings["a"].wait()
        time.sleep(0.5)
        ings["a"] = ingest(broker, root / "a", "a")  # the same session and log
        t.join(120)
        pub.disconnect()
        # both took a share, and every reading is in a log at least once
        wait_for(lambda: len(keys(root)) >= len(rs), 120, "every reading in the logs")
        assert all(L.count(str(root / n)) > 0 for n in ("a", "b"))
    finally:
        for p in ings.values():
            p.terminate()
            p.wait(10)
    spark = spark_session()
    a = job.parser().parse_args([
        "--ingest", "external", "--log", str(root), "--out", str(tmp_path / "out"),
        "--checkpoint", str(tmp_path / "ckpt"), "--window", "%d seconds" % WINDOW,
        "--watermark", "10 minutes", "--trigger", "0.5", "--keep-log"])
    q = job.start(spark, a)
    try:
        assert job.drain(q, str(root), 180)
    finally:
        q.stop()
    got = collections.Counter()
    for r in load(str(tmp_path / "out")).itertuples():
        got[(int(r.window_start.timestamp()), r.node)] += int(r.count)
    want = collections.Counter((int(t // WINDOW * WINDOW), n) for n, _, _, _, _, t in rs)
    assert got == want  # every reading exactly once, in the window of its own time
