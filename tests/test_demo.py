"""The README's first command, `./run demo` (`make demo`), as smoke tests: our broker on a
free loopback port, three simulated nodes, the live view, and (unless
--no-spark) the Spark pipeline; it must stop by itself, on Ctrl-C, and when
the pipe it writes to goes away, leaving no process behind. The last test
runs the README's two commands the way a new user on a stock Debian 12 does:
in a fresh clone, with no `python` on PATH, only Debian's python3, whose pip
refuses to install outside a virtual environment (PEP 668)."""
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid

import pytest

from pipeline_support import have_spark
from tools import procs

ROOT = procs.ROOT
DEMO = [sys.executable, "-m", "tools.desktop.demo"]


def check_view(out):
    assert "broker: umqtt3 on 127.0.0.1:" in out
    port = re.search(r"broker: umqtt3 on 127.0.0.1:(\d+)", out).group(1)
    assert "watch the broker: mosquitto_sub -h 127.0.0.1 -p %s -t '#' -v" % port in out
    m = re.search(r"readings received: (\d+) from (\d+) nodes", out)
    assert m, out
    assert int(m.group(2)) == 3
    assert int(m.group(1)) >= 3
    for n in (1, 2, 3):
        assert re.search(r"node%d\s+online" % n, out), out


def first_frame_rates(out):
    """msg/s of each node in the first frame that shows all three."""
    for frame in out.split("watch the broker:")[1:]:
        rates = re.findall(r"^node\d\s+\S+\s+\S+\s+\S+\s+([\d.]+)\s", frame, re.M)
        if len(rates) == 3:
            return [float(r) for r in rates]
    raise AssertionError("no frame with three nodes:\n" + out)


def check_pipeline(out, outdir):
    m = re.search(r"windows in Parquet: (\d+) from (\d+) nodes", out)
    assert m, out
    assert int(m.group(1)) >= 3 and int(m.group(2)) == 3, out  # a window of every node
    png = os.path.join(outdir, "telemetry.png")
    assert os.path.getsize(png) > 1000
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def marked_env(mark):
    """The environment for a demo whose every descendant can be found again:
    they all inherit UMQTT3_TEST_MARK."""
    return dict(procs.python_env(), UMQTT3_TEST_MARK=mark, SPARK_LOCAL_IP="127.0.0.1")


def alive_with(mark):
    """pids of the processes whose environment holds the mark."""
    found = []
    needle = ("UMQTT3_TEST_MARK=%s" % mark).encode()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % pid, "rb") as f:
                env = f.read().split(b"\0")
            with open("/proc/%s/stat" % pid) as f:
                zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            continue
        if needle in env and not zombie:
            found.append(int(pid))
    return found


def none_left(mark, timeout=30):
    end = time.monotonic() + timeout
    while alive_with(mark) and time.monotonic() < end:
        time.sleep(0.2)
    left = alive_with(mark)
    for pid in left:  # do not leave them to the next test
        os.kill(pid, signal.SIGKILL)
    return left


def test_demo_without_spark_runs_and_readings_arrive(tmp_path):
    r = subprocess.run(DEMO + ["--seconds", "4", "--nodes", "3", "--period", "0.2", "--no-spark",
                               "--out", str(tmp_path / "demo")],
                       capture_output=True, text=True, timeout=60, cwd=ROOT,
                       env=procs.python_env())
    assert r.returncode == 0, r.stdout + r.stderr
    check_view(r.stdout)
    assert "pipeline: off (--no-spark)" in r.stdout
    # three metrics every 0.2 s: 15 msg/s a node. Measured from the moment the
    # view subscribed, the first frame cannot show more than a node sends
    # (a rate over the time since the node's first message would).
    assert max(first_frame_rates(r.stdout)) < 2 * 15, r.stdout


def test_a_message_that_is_no_reading_leaves_the_view_going(tmp_path):
    # anyone may publish on the nodes' topics of the demo's broker: a temp
    # that is no JSON ended the demo with a traceback
    import socket
    import threading
    from umqtt3.client import MQTTClient
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    done = threading.Event()

    def stray():
        # again and again until the demo has ended: what it sends before the
        # view has subscribed reaches no one (the view subscribes after the
        # broker is up, and this client may get there first)
        while not done.is_set():
            try:
                c = MQTTClient("stray", "127.0.0.1", port, timeout_ms=500)
                c.connect()
                while not done.is_set():
                    for m in (b"hello", b"[1, 2]", b"\xff"):
                        c.publish(b"umqtt3/node9/temp", m, qos=1)
                    c.publish(b"umqtt3/node9/status", b"\xff\xfe", qos=1)
                    done.wait(0.2)
                c.disconnect()
            except OSError:
                done.wait(0.2)  # the demo's broker is not up yet, or has gone
    t = threading.Thread(target=stray)
    t.start()
    try:
        r = subprocess.run(DEMO + ["--seconds", "4", "--nodes", "1", "--period", "0.2", "--no-spark",
                                   "--port", str(port), "--out", str(tmp_path / "demo")],
                           capture_output=True, text=True, timeout=60, cwd=ROOT,
                           env=procs.python_env())
    finally:
        done.set()
        t.join()
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert "node9" in r.stdout  # its row, with "-" for the reading it never sent


def ignore_sigint():
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_ctrl_c_stops_the_demo_with_a_summary():
    mark = uuid.uuid4().hex
    # as a terminal does: SIGINT to the demo's whole process group; started
    # with SIGINT ignored, as a non-interactive shell's `&` starts it
    p = subprocess.Popen(DEMO + ["--no-spark", "--period", "0.2"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=ROOT, env=marked_env(mark),
                         start_new_session=True, preexec_fn=ignore_sigint)
    try:
        for line in p.stdout:
            if re.match(r"node3\s+online", line):
                break
        os.killpg(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert re.search(r"readings received: \d+ from 3 nodes", out), out
    assert none_left(mark) == []


def test_ctrl_c_stops_the_simulation_with_a_summary():
    mark = uuid.uuid4().hex
    p = subprocess.Popen([sys.executable, "-m", "tools.desktop.simulate", "--nodes", "2",
                          "--start-broker", "--period", "0.2"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=ROOT, env=marked_env(mark),
                         start_new_session=True, preexec_fn=ignore_sigint)
    try:
        line = ""
        for line in p.stdout:
            if " nodes (" in line:
                break
        # a reading of sim1's at the broker (its nodes have just started:
        # on a busy machine the first may take more than a second)
        m = re.search(r"publishing (\S+)/<id>/<metric> to 127.0.0.1:(\d+) ", line)
        assert m, line
        from umqtt3.client import MQTTClient
        got = []
        watch = MQTTClient("sim-watch", "127.0.0.1", int(m.group(2)))
        watch.set_callback(lambda t, msg: t.endswith(b"/status") or got.append(t))
        watch.connect()
        watch.subscribe(m.group(1).encode() + b"/sim1/+", 1)
        end = time.monotonic() + 30
        while not got and time.monotonic() < end:
            watch.poll(100)
        watch.disconnect()
        assert got, "no reading of sim1's in 30 s"
        os.killpg(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert re.search(r"sim1: [1-9]\d* readings accepted", out), out
    assert none_left(mark) == []


@pytest.mark.slow
@pytest.mark.skipif(have_spark() is not None, reason=have_spark() or "")
def test_a_closed_pipe_stops_the_demo_spark_and_broker(tmp_path):
    # `make demo | head`: the reader goes away once Spark runs; the demo
    # must then stop its nodes, the job and its JVM, and the broker
    mark = uuid.uuid4().hex
    p = subprocess.Popen(DEMO + ["--period", "0.3", "--window", "2", "--out", str(tmp_path / "d")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                         env=marked_env(mark))
    seen = []
    try:
        for line in p.stdout:
            seen.append(line)
            if line.startswith("pipeline: running"):
                break
        assert len(alive_with(mark)) >= 3, "".join(seen)  # demo, broker, job (+ its JVM)
        p.stdout.close()
        err = p.stderr.read()
        p.wait(60)
    finally:
        if p.poll() is None:
            p.kill()
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert none_left(mark) == []
    # --out is marked as the demo's: the next demo may empty it
    assert (tmp_path / "d" / ".demo-out").is_file()


def test_run_sets_up_first_where_make_is_missing(tmp_path):
    # A stock Debian 12 has python3 and no make: ./run runs the set-up, which
    # installs make with the rest, then hands over to make. Here a PATH with
    # neither make nor python, a set-up that records how it was called and
    # puts a recording `make` on that PATH, and ./run as the README has it.
    shutil.copy(os.path.join(ROOT, "run"), str(tmp_path / "run"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "bash", "dirname", "cat", "chmod"):
        os.symlink(shutil.which(tool), str(bin_dir / tool))
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "setup.sh").write_text(
        'echo "setup VENV=$VENV STAMP=$STAMP" >> calls\n'
        'printf \'#!/bin/sh\\necho "make $*" >> calls\\n\' > bin/make\n'
        'chmod +x bin/make\n')
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path)}

    def run(*args, **extra):
        r = subprocess.run(["sh", "run"] + list(args), cwd=str(tmp_path), env=dict(env, **extra),
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        calls = (tmp_path / "calls").read_text().splitlines()
        os.remove(str(tmp_path / "calls"))
        return calls

    assert run("demo", "DEMO_ARGS=--seconds 5") == [
        "setup VENV=.venv STAMP=.venv/.umqtt3-setup", "make demo DEMO_ARGS=--seconds 5"]
    # make is there now: make alone, no second set-up
    assert run("test") == ["make test"]
    # PYTHON=... set: the Makefile's stamp for that case
    os.remove(str(bin_dir / "make"))
    assert run("test", PYTHON="python3") == ["setup VENV= STAMP=build/.setup", "make test"]


@pytest.mark.slow
@pytest.mark.skipif(have_spark() is not None, reason=have_spark() or "")
@pytest.mark.skipif(not shutil.which("git") or not shutil.which("make"), reason="needs git and make")
@pytest.mark.skipif(not os.path.isfile("/usr/bin/python3"), reason="needs Debian's /usr/bin/python3")
def test_readme_commands_in_a_fresh_clone_on_stock_debian(tmp_path):
    # What a new user runs: clone, then the README's two commands. PATH has
    # Debian's directories only: no `python`, and python3 is /usr/bin/python3,
    # whose pip refuses to install outside a virtual environment, as on a
    # stock Debian 12 (the EXTERNALLY-MANAGED marker). apt has nothing to add
    # on this machine; pip and npm fetch from their warm caches.
    marker = subprocess.run(["/usr/bin/python3", "-c",
                             "import sysconfig; print(sysconfig.get_path('stdlib'))"],
                            capture_output=True, text=True, check=True).stdout.strip()
    if not os.path.isfile(os.path.join(marker, "EXTERNALLY-MANAGED")):
        pytest.skip("/usr/bin/python3 has no EXTERNALLY-MANAGED marker: not a stock Debian 12")
    clone = tmp_path / "umqtt3"
    subprocess.run(["git", "clone", "-q", ROOT, str(clone)], check=True, timeout=120)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHON", "PYTHONHOME", "MAKEFLAGS", "MFLAGS")
           and not k.startswith("PYENV")}
    env.update(PATH="/usr/sbin:/usr/bin:/sbin:/bin", SPARK_LOCAL_IP="127.0.0.1")
    sh = subprocess.run(["sh", "-c", "command -v python; pip install --dry-run pytest"],
                        env=env, capture_output=True, text=True, cwd=str(clone))
    assert sh.stdout == "", "a `python` on this PATH: %s" % sh.stdout
    assert "externally-managed-environment" in sh.stderr, sh.stderr

    # 1. the demo: sets up first (.venv from python3), then runs
    r = subprocess.run(["./run", "demo", "DEMO_ARGS=--seconds 30 --period 0.3 --window 3"],
                       cwd=str(clone), env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert "setup: making a virtual environment in .venv with /usr/bin/python3" in r.stdout
    with open(str(clone / ".venv" / "pyvenv.cfg")) as f:
        assert "home = /usr/bin" in f.read()
    check_view(r.stdout)
    assert "pipeline: starting Spark local[2] -> " in r.stdout
    check_pipeline(r.stdout, str(clone / "build" / "demo"))
    assert os.access(str(clone / ".venv" / "bin" / "umqtt3-broker"), os.X_OK)

    # 2. the test suite, cut down to one module on each interpreter: the
    # set-up is not run again, and every part of `make test` finds its tools
    r = subprocess.run(["./run", "test", "PYTEST_ARGS=tests/test_packaging.py", "SECOND_TESTS=",
                        "MP_TESTS=test_topic"],
                       cwd=str(clone), env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert "setup:" not in r.stdout
    assert re.search(r"\d+ passed", r.stdout) and re.search(r"mp: \d+ passed, 0 failed", r.stdout)
