"""The telemetry job's command line (umqtt3-pipeline): bad input refused in
one line with exit status 2 before Spark starts, and Ctrl-C stopping it with
a summary and no traceback once it has written its windows."""
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest

from pipeline_support import Broker, have_spark, publish_all, publisher, reading
from refusal import console_script, refused, run  # tests/refusal.py
from tools import procs

JOB = "umqtt3_pipeline.job"


def job_args(tmp_path, *extra):
    return ["--log", str(tmp_path / "log"), "--out", str(tmp_path / "out"),
            "--checkpoint", str(tmp_path / "cp")] + list(extra)


@pytest.mark.parametrize("extra,what", [
    (["--broker", "127.0.0.1:70000"], "--broker: port 70000 is outside 1-65535"),
    (["--broker", "127.0.0.1:0"], "--broker: port 0 is outside 1-65535"),
    (["--broker", "no-such-host.invalid:1883"], "cannot resolve host 'no-such-host.invalid'"),
    (["--broker", "127.0.0.1:mqtt"], "'127.0.0.1:mqtt' is not host:port"),
    (["--trigger", "0"], "--trigger: 0 is not above 0"),
    (["--max-rows", "-1"], "--max-rows: -1 is below 0"),
    (["--min-rows", "-5"], "--min-rows: -5 is below 0"),
    (["--max-delay", "-1"], "--max-delay: -1 is below 0"),
    (["--seconds", "-1"], "--seconds: -1 is below 0"),
    (["--shuffle-partitions", "0"], "--shuffle-partitions: 0 is below 1"),
    (["--qos", "0"], "--qos: invalid choice: 0"),
    (["--window", "10"], "--window: '10' is not '<number> seconds|minutes|hours|days'"),
    (["--watermark", "0 seconds"], "--watermark: '0 seconds' is outside 0.001 seconds to 365 days"),
    (["--max-early", "-1"], "--max-early: -1 is below 0"),
    (["--conf", "spark.sql.shuffle.partitions"],
     "--conf: 'spark.sql.shuffle.partitions' is not KEY=VALUE"),
    (["--conf", "=1"], "--conf: '=1' is not KEY=VALUE"),
    (["--trigger", "nan"], "--trigger: 'nan' is not a finite number"),
    (["--trigger", "inf"], "--trigger: 'inf' is not a finite number"),
    (["--max-early", "nan"], "--max-early: 'nan' is not a finite number"),
    (["--seconds", "nan"], "--seconds: 'nan' is not a finite number"),
    (["--drain", "inf"], "--drain: 'inf' is not a finite number"),
    (["--max-delay", "NaN"], "--max-delay: 'NaN' is not a finite number"),
    (["--window", "inf seconds"], "--window: 'inf seconds' is not in Spark's form"),
    (["--watermark", "nan seconds"], "--watermark: 'nan seconds' is not in Spark's form"),
    (["--watermark", "inf minutes"], "--watermark: 'inf minutes' is not in Spark's form"),
    # what Spark's interval parser refuses, refused here (it took 30 lines)
    (["--window", "1e-9 seconds"], "--window: '1e-9 seconds' is not in Spark's form"),
    (["--window", "1.5 minutes"], "--window: '1.5 minutes' is not in Spark's form"),
    (["--window", "1 min"], "--window: '1 min' is not '<number> seconds|minutes|hours|days'"),
    (["--window", "0.0000001 seconds"], "--window: '0.0000001 seconds' is not in Spark's form"),
    (["--window", "0.0001 seconds"], "--window: '0.0001 seconds' is outside 0.001 seconds"),
    (["--watermark", "1e15 days"], "--watermark: '1e15 days' is not in Spark's form"),
    (["--watermark", "366 days"], "--watermark: '366 days' is outside 0.001 seconds to 365 days"),
    (["--trigger", "1e-9"], "--trigger: 1e-9 is outside 0.001 to 86400 seconds"),
    (["--trigger", "1e20"], "--trigger: 1e20 is outside 0.001 to 86400 seconds"),
    (["--master", "bogus://x"], "--master: 'bogus://x' is not a master URL"),
    (["--master", "local[x]"], "--master: 'local[x]' is not a master URL"),
    (["--master", "local[0]"], "--master: 'local[0]' is not a master URL"),  # (29 lines of Java)
    # Spark's timestamps overflowed on the first reading
    (["--max-early", "1e300"], "--max-early: 1e300 is above 3.1536e+07"),
    # command-line bytes that are no UTF-8 (a traceback at connect) [MQTT-3.1.3-4]
    (["--client-id", "a\udcff"], "--client-id: 'a\\udcff' is not UTF-8 text"),
    (["--user", "\udcff"], "--user: '\\udcff' is not UTF-8 text"),
    # the broker would make up a new id at each connection [MQTT-3.1.3-6]
    (["--client-id", ""], "--client-id: '' would have the broker make up an id"),
    (["--client-id", "x" * 70000], "--client-id: 70000 bytes is more than 256"),
    (["--password-file", "/etc/hostname"], "--password-file needs --user"),
    (["--plot", "out.txt"], "--plot out.txt: the name must end in a format matplotlib writes"),
    (["--max-packet", "100"], "--max-packet: 100 is outside 1024-268435460"),
    (["--max-packet", "64k"], "--max-packet: '64k' is not a whole number of bytes"),
    (["--topics", "a/#/b"], "--topics: 'a/#/b' is not a topic filter"),  # [MQTT-4.7.1-2]
    (["--topics", "umqtt3/+/+,a+"], "--topics: 'a+' is not a topic filter"),  # [MQTT-4.7.1-3]
    (["--topics", ""], "--topics: '' is not a topic filter"),
])
def test_job_refuses(tmp_path, extra, what):
    assert refused(JOB, job_args(tmp_path, *extra), what).startswith("umqtt3-pipeline: ")
    assert os.listdir(tmp_path) == []  # nothing made for a refused command line


@pytest.mark.parametrize("window,want", [("10 seconds", 10), ("1.5 seconds", 1.5),
                                         ("2 Minutes", 120), ("1 hour", 3600), ("1 day", 86400),
                                         ("0.001 seconds", 0.001), ("365 days", 365 * 86400)])
def test_intervals_in_the_form_spark_takes(window, want):
    from umqtt3_pipeline.job import seconds
    assert seconds(window) == want


def test_a_refused_command_line_makes_no_directory(tmp_path):
    closed = procs.free_port()
    refused(JOB, job_args(tmp_path, "--broker", "127.0.0.1:%d" % closed, "--plot",
                          str(tmp_path / "p" / "t.png")), "cannot reach the broker")
    assert os.listdir(tmp_path) == []
    refused(INGEST, ["--log", str(tmp_path / "log"), "--broker", "127.0.0.1:%d" % closed],
            "cannot reach the broker")
    assert os.listdir(tmp_path) == []


def test_python_m_package_is_the_job(tmp_path):
    r = run("umqtt3_pipeline", "--help")
    assert r.returncode == 0 and "--checkpoint" in r.stdout, r.stderr
    refused("umqtt3_pipeline", job_args(tmp_path, "--trigger", "0"), "--trigger: 0 is not above 0")


def test_the_command_calls_itself_by_the_name_run(tmp_path):
    # the console script's usage line names it (it said `python -m ...`);
    # run as a module, or as a file under spark-submit, the module's name
    r = console_script(tmp_path, "umqtt3-pipeline")("--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: umqtt3-pipeline [-h]"), r.stdout[:200]
    r = run(JOB, "--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: python -m umqtt3_pipeline.job [-h]")


def test_without_pyspark_one_line_before_anything_is_made(tmp_path):
    # the console script without the spark extra: it made the broker
    # session, then died in a ModuleNotFoundError traceback
    b = Broker().start()
    try:
        code = ("import sys; sys.modules['pyspark'] = None\n"  # import pyspark: ImportError
                "from umqtt3_pipeline.job import main; sys.exit(main())")
        r = subprocess.run([sys.executable, "-c", code] + job_args(
            tmp_path, "--broker", "127.0.0.1:%d" % b.port), capture_output=True, text=True,
            timeout=60, cwd=procs.ROOT, env=procs.python_env())
    finally:
        b.stop()
    assert r.returncode == 2 and r.stdout == "", (r.stdout, r.stderr)
    assert r.stderr == ("umqtt3-pipeline: pyspark is not installed (pip install 'umqtt3[spark]', "
                        "or '.[spark]' in a clone; PySpark 4 needs Python 3.11+)\n")
    assert os.listdir(tmp_path) == []


@pytest.mark.skipif(have_spark() is not None, reason=have_spark() or "")
def test_spark_settings_c1_by_default_and_conf_last(monkeypatch):
    import pyspark
    from umqtt3_pipeline import job
    # nothing given by spark-submit or a running Spark (another test's)
    real = pyspark.SparkConf
    monkeypatch.setattr(pyspark, "SparkConf", lambda: real(loadDefaults=False))
    a = job.parser().parse_args(job_args(pathlib.Path("/x"), "--conf",
                                         "spark.driver.extraJavaOptions=", "--conf", "k=a=b"))
    assert a.conf == [("spark.driver.extraJavaOptions", ""), ("k", "a=b")]
    c = job.spark_conf()
    assert c["spark.driver.extraJavaOptions"] == job.JIT == "-XX:TieredStopAtLevel=1"
    assert c["spark.sql.shuffle.partitions"] == "1"
    c = job.spark_conf(4, conf=a.conf)
    assert (c["spark.driver.extraJavaOptions"], c["k"], c["spark.sql.shuffle.partitions"]) == (
        "", "a=b", "4")
    # JVM options spark-submit or spark-defaults.conf gave are kept
    given = real(loadDefaults=False).set("spark.driver.extraJavaOptions", "-Xmx1g")
    monkeypatch.setattr(pyspark, "SparkConf", lambda: given)
    assert "spark.driver.extraJavaOptions" not in job.spark_conf()


def test_workers_leave_out_only_the_installed_pyspark_zips(tmp_path):
    import importlib.util
    from umqtt3_pipeline import job
    path = os.path.join(os.path.dirname(job.__file__), "workers", "sitecustomize.py")
    spec = importlib.util.spec_from_file_location("workers_sitecustomize", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # leaves this process's path as it is: no such zip on it
    installed = tmp_path / "site-packages" / "pyspark"
    (installed / "python" / "lib").mkdir(parents=True)
    (installed / "__init__.py").write_text("")
    other = tmp_path / "opt" / "spark" / "python" / "lib"
    other.mkdir(parents=True)
    lib = str(installed / "python" / "lib")
    assert mod._installed_zip(os.path.join(lib, "pyspark.zip"))
    assert mod._installed_zip(os.path.join(lib, "py4j-0.10.9.9-src.zip"))
    assert not mod._installed_zip(str(other / "pyspark.zip"))  # another Spark's
    assert not mod._installed_zip(str(tmp_path / "site-packages"))


def test_job_refuses_a_broker_it_cannot_reach(tmp_path):
    closed = procs.free_port()
    refused(JOB, job_args(tmp_path, "--broker", "127.0.0.1:%d" % closed),
            "cannot reach the broker at 127.0.0.1:%d" % closed)


def test_job_refuses_unusable_directories(tmp_path):
    f = tmp_path / "a-file"
    f.write_text("x")
    for option in ("--log", "--out", "--checkpoint"):
        argv = job_args(tmp_path)
        argv[argv.index(option) + 1] = str(f / "sub")
        refused(JOB, argv, "%s %s/sub: %s is not a directory" % (option, f, f))


@pytest.mark.slow
@pytest.mark.skipif(have_spark() is not None, reason=have_spark() or "")
def test_ctrl_c_stops_the_job_with_a_summary(tmp_path):
    b = Broker().start()
    try:
        # as a terminal does: SIGINT to the job's whole process group
        p = subprocess.Popen([sys.executable, "-m", JOB] + job_args(tmp_path, "--broker", "127.0.0.1:%d" % b.port,
                                            "--master", "local[1]", "--trigger", "0.5"),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=dict(procs.python_env(), SPARK_LOCAL_IP="127.0.0.1"),
                             start_new_session=True)
        try:
            first = p.stdout.readline()
            assert first.startswith("umqtt3 telemetry: "), first + p.stderr.read()
            os.killpg(p.pid, signal.SIGINT)
            out, err = p.communicate(timeout=120)
        finally:
            procs.stop(p, 5)
    finally:
        b.stop()
    assert p.returncode == 0, err
    assert re.search(r"^umqtt3 telemetry: stopped after \d+ s; \d+ readings committed", out,
                     re.M), out
    assert "stopping: writing every window first" in err
    for bad in ("Traceback", "ERROR", "Exception"):
        assert bad not in err, err


@pytest.mark.slow
@pytest.mark.skipif(have_spark() is not None, reason=have_spark() or "")
def test_bounded_run_over_external_logs_counts_every_reading_in_its_summary(tmp_path):
    # --ingest external: the offsets are per log; the summary adds them up
    from umqtt3_pipeline.log import Log
    for name, boot in (("a", 1), ("b", 2)):
        log = Log(str(tmp_path / "log" / name), publish_synced=True)
        for i in range(30):
            log.append_msg(*reading("n%d" % boot, "temp", float(i), boot, i), 1, False, False, 0,
                           1000 * int(time.time()))
        log.sync()
        log.close()
    def run():
        p = subprocess.run([sys.executable, "-m", JOB] + job_args(tmp_path, "--ingest", "external",
                                                                 "--master", "local[1]",
                                                                 "--seconds", "3",
                                                                 "--window", "1 seconds",
                                                                 "--watermark", "1 seconds",
                                                                 "--max-early", "0"),
                           capture_output=True, text=True, timeout=300,
                           env=dict(procs.python_env(), SPARK_LOCAL_IP="127.0.0.1"))
        assert p.returncode == 0, p.stderr
        return p
    p = run()
    assert re.search(r"^umqtt3 telemetry: stopped after \d+ s; 60 readings committed", p.stdout,
                     re.M), p.stdout + p.stderr
    # a second run on the same directories: only its own readings, not what
    # the logs numbered before, nor status messages, nor a resent copy
    log = Log(str(tmp_path / "log" / "a"), publish_synced=True)
    t = 1000 * int(time.time() + 2)  # after the first run's close: not late
    for i in range(10):
        log.append_msg(*reading("n3", "temp", float(i), 3, i), 1, False, False, 0, t)
    log.append_msg(*reading("n3", "temp", 0.0, 3, 0), 1, False, True, 0, t)  # a resend
    for i in range(3):
        log.append_msg(b"umqtt3/n%d/status" % i, b"online", 1, True, False, 0, t)
    log.sync()
    log.close()
    p = run()
    assert re.search(r"^umqtt3 telemetry: stopped after \d+ s; 10 readings committed", p.stdout,
                     re.M), p.stdout + p.stderr


INGEST = "umqtt3_pipeline.ingest"


@pytest.mark.parametrize("broker,what", [
    ("127.0.0.1:abc", "--broker: '127.0.0.1:abc' is not host:port"),
    ("127.0.0.1:99999", "--broker: port 99999 is outside 1-65535"),
    ("no-such-host.invalid:1883", "cannot resolve host 'no-such-host.invalid'"),
])
def test_ingest_refuses_a_bad_broker(tmp_path, broker, what):
    refused(INGEST, ["--log", str(tmp_path / "log"), "--broker", broker], what)


@pytest.mark.parametrize("extra,what", [
    (["--client-id", ""], "--client-id: '' would have the broker make up an id"),
    (["--client-id", "é" * 200], "--client-id: 400 bytes is more than 256"),
    (["--client-id", "a\udcff"], "--client-id: 'a\\udcff' is not UTF-8 text"),
    (["--password-file", "/etc/hostname"], "--password-file needs --user"),
    (["--max-packet", "0x100"], "--max-packet: '0x100' is not a whole number of bytes"),
])
def test_ingest_refuses(tmp_path, extra, what):
    refused(INGEST, ["--log", str(tmp_path / "log")] + extra, what)
    assert os.listdir(tmp_path) == []


def test_ingest_refuses_a_bad_topic_filter(tmp_path):
    refused(INGEST, ["--log", str(tmp_path / "log"), "--topics", "a/#/b"],
            "--topics: 'a/#/b' is not a topic filter")


def test_ingest_refuses_what_it_cannot_use(tmp_path):
    closed = procs.free_port()
    refused(INGEST, ["--log", str(tmp_path / "log"), "--broker", "127.0.0.1:%d" % closed],
            "cannot reach the broker at 127.0.0.1:%d" % closed)
    b = Broker().start()
    try:
        at = "127.0.0.1:%d" % b.port
        refused(INGEST, ["--log", "/proc/nope", "--broker", at], "--log /proc/nope: cannot create it")
        from umqtt3_pipeline import log as L
        held = L.Log(str(tmp_path / "held"))  # another ingest's
        t0 = time.monotonic()
        refused(INGEST, ["--log", str(tmp_path / "held"), "--broker", at],
                "in use by another process")
        assert time.monotonic() - t0 < 20
        held.append_msg(b"a/b/c", b"x", 1, 0, 0, 1, 1)
        held.append_msg(b"a/b/c", b"y", 1, 0, 0, 2, 1)
        held.sync()
        seg = os.path.join(str(tmp_path / "held"), L.seg_name(L.segments(str(tmp_path / "held"))[0]))
        held.close()
        with open(seg, "r+b") as f:  # a bit of the first record's body flipped
            f.seek(L.read_header(str(tmp_path / "held"), 0)[0] + 20)
            c = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([c[0] ^ 1]))
        refused(INGEST, ["--log", str(tmp_path / "held"), "--broker", at],
                "corrupt", status=1)
    finally:
        b.stop()


def test_job_runs_as_a_file_as_spark_submit_runs_it(tmp_path):
    # spark-submit ... pipeline/umqtt3_pipeline/job.py: a script, not a module
    job = os.path.join(procs.ROOT, "pipeline", "umqtt3_pipeline", "job.py")
    env = dict(procs.python_env(), PYTHONPATH=os.path.join(procs.ROOT, "lib"))
    r = subprocess.run([sys.executable, job, "--help"], capture_output=True, text=True,
                       timeout=60, cwd=str(tmp_path), env=env)
    assert r.returncode == 0 and "--checkpoint" in r.stdout, r.stderr
    r = subprocess.run([sys.executable, job, "--trigger", "0"] + job_args(tmp_path),
                       capture_output=True, text=True, timeout=60, cwd=str(tmp_path), env=env)
    assert r.returncode == 2 and r.stderr.startswith("umqtt3-pipeline: "), r.stderr
    code = ("import runpy, sys\nsys.argv = [%r, '--help']\ntry:\n"
            "    runpy.run_path(%r, run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "print(sys.modules['umqtt3_pipeline'].__file__, file=sys.stderr)" % (job, job))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       cwd=str(tmp_path), env=env)
    # the package this file is in, not another installed copy
    assert r.stderr.strip() == os.path.join(os.path.dirname(job), "__init__.py"), r.stderr


def _last_lines(tmp_path, *extra, at=None):
    """Run the job over one external log of 30 readings that arrived at
    `at` (seconds since 1970; default: now); (exit status, stderr's lines
    after Spark's start-up notes, the trace file it names)."""
    import glob
    from umqtt3_pipeline.log import Log
    at = time.time() if at is None else at
    log = Log(str(tmp_path / "log" / "a"), publish_synced=True)
    for i in range(30):
        log.append_msg(*reading("n1", "temp", float(i), 1, i), 1, False, False, 0,
                       1000 * int(at))
    log.sync()
    log.close()
    (tmp_path / "tmp").mkdir()
    p = subprocess.run([sys.executable, "-m", JOB] + job_args(
        tmp_path, "--ingest", "external", "--master", "local[1]", "--seconds", "3",
        "--window", "1 seconds", "--watermark", "1 seconds", "--max-early", "0", *extra),
        capture_output=True, text=True, timeout=300,
        env=dict(procs.python_env(), SPARK_LOCAL_IP="127.0.0.1", TMPDIR=str(tmp_path / "tmp")))
    lines = [x for x in p.stderr.splitlines()
             if not re.match(r"(WARNING: Using incubator|Using Spark's|Setting default log|"
                             r"To adjust logging|\d\d/\d\d/\d\d [\d:]+ WARN )", x)]
    return p.returncode, lines, glob.glob(str(tmp_path / "tmp" / "umqtt3-pipeline-*.log"))


@pytest.mark.slow
@pytest.mark.skipif(have_spark() is not None, reason=have_spark() or "")
def test_a_failing_query_ends_in_one_line_with_its_cause(tmp_path):
    # the output's day directory cannot be made (a file is in the way), as a
    # full disk cannot be written: 160 lines ending in a piece of the plan before
    # (the day of the readings' own arrival: a clock read twice may be read
    # on either side of midnight)
    import datetime
    at = time.time()
    day = datetime.datetime.fromtimestamp(at, datetime.timezone.utc).strftime("%Y-%m-%d")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / ("day=" + day)).write_text("in the way")
    status, lines, traces = _last_lines(tmp_path, at=at)
    assert status == 1 and len(lines) == 1, lines
    assert lines[0].startswith("umqtt3-pipeline: query failed (the full trace: ")
    assert lines[0].endswith("FileExistsError: [Errno 17] File exists: '%s'"
                             % (tmp_path / "out" / ("day=" + day))), lines
    assert len(traces) == 1 and traces[0] in lines[0]
    assert "Traceback" in open(traces[0]).read()


@pytest.mark.slow
@pytest.mark.skipif(have_spark() is not None, reason=have_spark() or "")
def test_a_setting_spark_refuses_ends_in_one_line(tmp_path):
    status, lines, traces = _last_lines(tmp_path, "--conf", "spark.sql.shuffle.partitions=abc")
    assert status == 1 and len(lines) == 1, lines
    assert lines[0].startswith("umqtt3-pipeline: Spark did not start (the full trace: ")
    assert lines[0].endswith("The value 'abc' in the config \"spark.sql.shuffle.partitions\" "
                             "is invalid. It should be a/an 'int' value. SQLSTATE: 22022"), lines
    assert len(traces) == 1


def test_the_longest_client_id_makes_its_session_with_a_long_login(tmp_path):
    # the id the command line takes at most, with a 300-byte password: the
    # CONNECT did not fit the client's default 512-byte buffer
    from umqtt3_pipeline.cli import MAX_CLIENT_ID, client_id_note
    from umqtt3_pipeline.job import ensure_session
    b = Broker().start()
    try:
        assert ensure_session("127.0.0.1:%d" % b.port, "umqtt3/+/+", 1, "x" * MAX_CLIENT_ID, 5,
                              "u", b"p" * 300) is True
    finally:
        b.stop()
    assert client_id_note("p", "x" * 23) is None  # every server takes it [MQTT-3.1.3-5]
    assert client_id_note("p", "x" * 24) == (
        "p: note: --client-id has 24 characters: a server must take up to 23 [MQTT-3.1.3-5], "
        "and may refuse more")


def test_the_cause_of_a_failure_is_its_deepest_reason():
    from umqtt3_pipeline.job import cause
    plan = "\n== Physical Plan ==\n   +- ~StreamingDataSourceV2ScanRelation[topic#0] umqtt3\n"
    py = ("pyspark.errors.exceptions.captured.StreamingQueryException: [STREAM_FAILED] Query "
          "terminated with exception: [FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred\n"
          "Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n"
          "OSError: [Errno 28] Error writing bytes to file. Detail: [errno 28] No space left on "
          "device\n\tat org.apache.spark.X.y(X.scala:1)" + plan)
    assert cause(py) == ("OSError: [Errno 28] Error writing bytes to file. Detail: [errno 28] "
                         "No space left on device")
    # a module's exception, its dotted name (the line ended at "Traceback ...:")
    arrow = ("pyspark.errors.exceptions.captured.StreamingQueryException: [STREAM_FAILED] "
             "Query terminated with exception: Return Message: Traceback (most recent call "
             "last):\n  File \"source.py\", line 171, in f\npyarrow.lib.ArrowTypeError: Expected "
             "integer, got bool\n\tat org.apache.spark.X.y(X.scala:1)" + plan)
    assert cause(arrow) == "pyarrow.lib.ArrowTypeError: Expected integer, got bool"
    jvm = ("pyspark.errors.exceptions.captured.IllegalArgumentException: Error while "
           "instantiating 'x':\n\tat a.b(c)\nCaused by: java.lang.reflect.Invocation: outer\n"
           "Caused by: org.apache.spark.SparkIllegalArgumentException: [INVALID_CONF_VALUE] "
           "The value 'abc' is invalid.\n\tat d.e(f)\n")
    assert cause(jvm) == "[INVALID_CONF_VALUE] The value 'abc' is invalid."
    # a checkpoint from before boot became long (its state's key schema)
    state = ("pyspark.errors.exceptions.captured.StreamingQueryException: [STREAM_FAILED] Query "
             "[id = 1] terminated with exception: [STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE] "
             "Provided key schema does not match existing state key schema.\nPlease check "
             "number and type of fields." + plan)
    assert cause(state) == ("[STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE] Provided key schema does "
                            "not match existing state key schema. (a --checkpoint of an older "
                            "version of the job: a new one, and a new --out; docs/pipeline.md)")


_RESET_GATEWAY = r"""
import logging, socket, struct, sys, threading
from py4j.java_gateway import GatewayClient, GatewayParameters
from umqtt3_pipeline import job
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(4)

def reset():  # a JVM gone in the middle of a call: the connection reset
    while True:
        c, _ = srv.accept()
        c.recv(100)
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        c.close()

threading.Thread(target=reset, daemon=True).start()
if sys.argv[1] == "quiet":
    logging.getLogger().addFilter(job.not_py4j)
try:
    GatewayClient(gateway_parameters=GatewayParameters(port=srv.getsockname()[1])).send_command(
        "c\no0\nx\ne\n")
except Exception:
    pass
logging.getLogger("mine").error("the caller's own line")
"""


def test_py4j_traceback_on_the_root_logger_is_filtered_and_nothing_else():
    # py4j logs a call that finds the JVM gone with logging.exception() on the
    # root logger: a traceback on stderr before the close's one line
    pytest.importorskip("py4j")
    env = dict(procs.python_env())
    loud, quiet = (subprocess.run([sys.executable, "-c", _RESET_GATEWAY, how], env=env,
                                  capture_output=True, text=True, timeout=60)
                   for how in ("loud", "quiet"))
    assert "ERROR:root:Exception while sending command." in loud.stderr, loud.stderr
    assert "Traceback" not in quiet.stderr, quiet.stderr
    assert "the caller's own line" in quiet.stderr, quiet.stderr


def _children(pid):
    """The pids of pid's descendants (ps), nearest first."""
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True,
                         text=True).stdout.split()
    found = [int(x) for x in out]
    for c in list(found):
        found += _children(c)
    return found


def _cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _publish_readings(port, n=20):
    c = publisher(port, "feeder")
    try:
        now = time.time()
        publish_all(c, [reading("n1", "temp", float(i), 1, i, t=now - n + i) for i in range(n)])
    finally:
        c.disconnect()


@pytest.mark.slow
@pytest.mark.skipif(have_spark() is not None, reason=have_spark() or "")
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc")
def test_a_close_that_cannot_reach_spark_says_which_windows_are_left_in_one_line(tmp_path):
    # Spark's JVM gone before the close (killed; as systemd's SIGTERM to the
    # whole group does, or Ctrl-C to spark-submit's JVM did): the close cannot
    # write the open windows, and the job says so in one line, not a traceback
    b = Broker().start()
    try:
        p = subprocess.Popen([sys.executable, "-m", JOB] + job_args(
            tmp_path, "--broker", "127.0.0.1:%d" % b.port, "--master", "local[1]",
            "--trigger", "0.5", "--window", "1 seconds", "--watermark", "1 seconds"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=dict(procs.python_env(), SPARK_LOCAL_IP="127.0.0.1"), start_new_session=True)
        try:
            first = p.stdout.readline()
            assert first.startswith("umqtt3 telemetry: "), first + p.stderr.read()
            _publish_readings(b.port)
            end = time.monotonic() + 120  # some windows written (the last ones stay open)
            while not list(pathlib.Path(tmp_path / "out").rglob("*.parquet")):
                assert time.monotonic() < end and p.poll() is None, p.stderr.read()
                time.sleep(0.2)
            jvm = [c for c in _children(p.pid) if "java" in _cmdline(c).split(" ", 1)[0]]
            assert len(jvm) == 1, [_cmdline(c) for c in _children(p.pid)]
            os.kill(jvm[0], signal.SIGKILL)
            p.send_signal(signal.SIGTERM)  # the job's close
            out, err = p.communicate(timeout=120)
        finally:
            procs.stop(p, 5)
        # the next run on the same checkpoint writes the windows left
        again = subprocess.run([sys.executable, "-m", JOB] + job_args(
            tmp_path, "--broker", "127.0.0.1:%d" % b.port, "--master", "local[1]",
            "--trigger", "0.5", "--window", "1 seconds", "--watermark", "1 seconds",
            "--seconds", "3"), capture_output=True, text=True, timeout=300,
            env=dict(procs.python_env(), SPARK_LOCAL_IP="127.0.0.1"))
    finally:
        b.stop()
    assert again.returncode == 0, again.stderr
    import pyarrow.parquet as pq
    counts = [pq.read_table(str(f)).column("count").to_pylist()
              for f in pathlib.Path(tmp_path / "out").rglob("*.parquet")]
    assert sum(sum(c) for c in counts) == 20, counts  # each reading in a window, once
    assert p.returncode == 1, (out, err)
    for bad in ("Traceback", "Exception", "ERROR"):
        assert bad not in err, err
    lines = [x for x in err.splitlines() if x.startswith("umqtt3-pipeline")]
    assert len(lines) == 1 and err.strip().splitlines()[-1] == lines[0], err
    assert re.match(r"umqtt3-pipeline: Spark stopped before the close wrote the open windows "
                    r"\(its JVM went first: .*\): the windows after \d{4}-\d\d-\d\d "
                    r"\d\d:\d\d:\d\d \(event time, UTC\) left for the "
                    r"next run on --checkpoint %s, which writes them; their readings are in "
                    r"--log %s$" % (re.escape(str(tmp_path / "cp")), re.escape(str(tmp_path / "log"))),
                    lines[0]), lines[0]


SPARK_SUBMIT = os.path.join(os.path.dirname(sys.executable), "spark-submit")


@pytest.mark.slow
@pytest.mark.skipif(have_spark() is not None, reason=have_spark() or "")
@pytest.mark.skipif(not os.access(SPARK_SUBMIT, os.X_OK), reason="no spark-submit beside python")
def test_ctrl_c_under_spark_submit_writes_every_window(tmp_path):
    # Ctrl-C reaches spark-submit's JVM (the job's parent) too: it stopped
    # before the close wrote the open windows (RpcEnvStoppedException, exit
    # 130, the run's windows left). The JVM now ignores it, as the JVM that
    # PySpark starts itself does, and the job closes as without spark-submit.
    b = Broker().start()
    try:
        job = os.path.join(procs.ROOT, "pipeline", "umqtt3_pipeline", "job.py")
        p = subprocess.Popen([SPARK_SUBMIT, "--master", "local[1]", job] + job_args(
            tmp_path, "--broker", "127.0.0.1:%d" % b.port, "--trigger", "0.5"),
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=str(tmp_path),
            env=dict(procs.python_env(), SPARK_LOCAL_IP="127.0.0.1",
                     PYSPARK_PYTHON=sys.executable), start_new_session=True)
        try:
            lines = []  # the job's stdout and stderr, through the JVM's stdout
            while not (lines and lines[-1].startswith("umqtt3 telemetry: ")):
                lines.append(p.stdout.readline())
                assert lines[-1], "".join(lines)
            _publish_readings(b.port)  # acknowledged: in the log
            os.killpg(p.pid, signal.SIGINT)  # as a terminal does
            out = p.communicate(timeout=180)[0]
        finally:
            procs.stop(p, 5)
    finally:
        b.stop()
    assert p.returncode == 0, out
    assert "stopping: writing every window first" in out, out
    assert re.search(r"^umqtt3 telemetry: stopped after \d+ s; 20 readings committed", out,
                     re.M), out
