"""The README's first command, `make demo`, as smoke tests: our broker on a
free loopback port, three simulated nodes, the live view, and (unless
--no-spark) the Spark pipeline; it must stop by itself and have received
readings from every node. The last test runs it the way a new user does:
`make demo` in a fresh clone of the repository."""
import os
import re
import shutil
import subprocess
import sys

import pytest

from pipeline_support import have_spark
from tools import procs

ROOT = procs.ROOT


def check_view(out):
    assert "broker: umqtt3 on 127.0.0.1:" in out
    m = re.search(r"readings received: (\d+) from (\d+) nodes", out)
    assert m, out
    assert int(m.group(2)) == 3
    assert int(m.group(1)) >= 3
    for n in (1, 2, 3):
        assert re.search(r"node%d\s+online" % n, out), out


def check_pipeline(out, outdir):
    m = re.search(r"windows in Parquet: (\d+) from (\d+) nodes", out)
    assert m, out
    assert int(m.group(1)) >= 3 and int(m.group(2)) == 3, out  # a window of every node
    png = os.path.join(outdir, "telemetry.png")
    assert os.path.getsize(png) > 1000
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_demo_without_spark_runs_and_readings_arrive(tmp_path):
    r = subprocess.run([sys.executable, "-m", "tools.desktop.demo", "--seconds", "4",
                        "--nodes", "3", "--period", "0.2", "--no-spark",
                        "--out", str(tmp_path / "demo")],
                       capture_output=True, text=True, timeout=60, cwd=ROOT,
                       env=procs.python_env())
    assert r.returncode == 0, r.stdout + r.stderr
    check_view(r.stdout)
    assert "pipeline: off (--no-spark)" in r.stdout


@pytest.mark.slow
@pytest.mark.skipif(have_spark() is not None, reason=have_spark() or "")
@pytest.mark.skipif(not shutil.which("git") or not shutil.which("make"), reason="needs git and make")
def test_make_demo_in_a_fresh_clone(tmp_path):
    # What a new user runs: clone, then the README's first command. Setup has
    # already run on this machine (CI ran tools/setup.sh), so build/.setup is
    # made by hand instead of installing again.
    clone = tmp_path / "umqtt3"
    subprocess.run(["git", "clone", "-q", ROOT, str(clone)], check=True, timeout=120)
    (clone / "build").mkdir()
    (clone / "build" / ".setup").touch()
    env = dict(os.environ, PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    env.pop("PYTHONPATH", None)  # nothing from this checkout: only the clone's files
    r = subprocess.run(["make", "demo", "DEMO_ARGS=--seconds 45 --period 0.3 --window 3"],
                       cwd=str(clone), env=env, capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    check_view(r.stdout)
    assert "pipeline: Spark local[2] -> " in r.stdout
    check_pipeline(r.stdout, str(clone / "build" / "demo"))
