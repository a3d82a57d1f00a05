"""A broker that wants a login (ours with --users, as mosquitto with
password_file): --user and --password-file of the job and the ingest, the
source's options user and passwordFile; a refused login in one line. No
Spark."""
import os
import subprocess
import sys

import pytest

from pipeline_support import Broker, wait_for
from refusal import refused, run  # tests/refusal.py
from tools import procs


@pytest.fixture
def login_broker(tmp_path):
    users = str(tmp_path / "users")
    subprocess.run([sys.executable, "-m", "umqtt3_cli.passwd", "-c", "-b", users, "ingest",
                    "s3cret pass"], check=True, env=procs.python_env(), capture_output=True)
    pw = tmp_path / "pw"
    pw.write_text("s3cret pass\n")
    bad = tmp_path / "bad"
    bad.write_text("guess\n")
    b = Broker(args=["--users", users]).start()
    yield b, str(pw), str(bad)
    b.stop()


def test_job_and_ingest_refuse_a_login_the_broker_refuses(tmp_path, login_broker):
    b, pw, bad = login_broker
    at = "127.0.0.1:%d" % b.port
    job = ["--broker", at, "--log", str(tmp_path / "log"), "--out", str(tmp_path / "out"),
           "--checkpoint", str(tmp_path / "ck")]
    for extra in ([], ["--user", "ingest", "--password-file", bad]):
        err = refused("umqtt3_pipeline.job", job + extra, "refused the login: ", status=1)
        assert "not authorized" in err or "bad user name or password" in err, err
        err = refused("umqtt3_pipeline.ingest", ["--log", str(tmp_path / "log"), "--broker", at]
                      + extra, "refused the login: ", status=1)
    refused("umqtt3_pipeline.job", job + ["--user", "ingest", "--password-file",
                                          str(tmp_path / "none")],
            "--password-file %s: No such file" % (tmp_path / "none"))


def test_ingest_and_source_log_in_with_the_password_file(tmp_path, login_broker):
    b, pw, bad = login_broker
    p = subprocess.Popen([sys.executable, "-m", "umqtt3_pipeline.ingest", "--log",
                          str(tmp_path / "log"), "--broker", "127.0.0.1:%d" % b.port,
                          "--user", "ingest", "--password-file", pw],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=procs.python_env())
    try:
        assert p.stdout.readline().strip() == "ready", p.stderr.read()
    finally:
        procs.stop(p, 5)
    from umqtt3_pipeline.source import StreamReader
    r = StreamReader({"path": str(tmp_path / "log2"), "broker": "127.0.0.1:%d" % b.port,
                      "user": "ingest", "passwordFile": pw})
    try:
        r.initialOffset()
        wait_for(lambda: r._ingest.connected.is_set() or r._ingest.error, 10, "the login")
        r._ingest.check()
        assert r._ingest.connected.is_set()
    finally:
        r.stop()
    r = StreamReader({"path": str(tmp_path / "log3"), "broker": "127.0.0.1:%d" % b.port,
                      "user": "ingest", "passwordFile": bad})
    try:
        # the refusal surfaces at the first look at the ingest after it came:
        # in initialOffset() itself when the broker answers that fast
        with pytest.raises(RuntimeError, match="refused the login"):
            r.initialOffset()
            wait_for(lambda: r._ingest.error, 10, "the refusal")
            r._ingest.check()
    finally:
        r.stop()
