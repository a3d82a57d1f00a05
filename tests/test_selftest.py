# firmware/selftest.py, the on-device self-test, run where CI can run it: under
# the WebAssembly MicroPython (tools/mp/run.mjs: lib/ at /lib, as a deploy puts
# it on a board) and under CPython. Its hooks (--corrupt, --alloc, --dir) break
# one check on purpose, to show that a broken check is reported as FAIL.
import os
import re
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SELFTEST = os.path.join(REPO, "firmware", "selftest.py")
RUN_MJS = os.path.join(REPO, "tools", "mp", "run.mjs")
WASM = os.path.join(REPO, "node_modules", "@micropython", "micropython-webassembly-pyscript",
                    "micropython.mjs")

SUMMARY = re.compile(r"^selftest: (PASS|FAIL) \((\d+) passed, (\d+) failed, (\d+) skipped\)$",
                     re.M)
HEAP = re.compile(r"^PASS  heap: free before import (\d+) B, after codec \+ client (\d+) B, "
                  r"import used (\d+) B$", re.M)


def mp(*args):
    if not (shutil.which("node") and os.path.isfile(WASM)):
        pytest.skip("the WebAssembly MicroPython is not installed (make setup)")
    return subprocess.run(["node", RUN_MJS, "--heap", "2m", SELFTEST] + list(args),
                          capture_output=True, text=True, timeout=120, cwd=REPO)


def cpython(*args):
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "lib"))
    return subprocess.run([sys.executable, SELFTEST] + list(args), capture_output=True,
                          text=True, timeout=120, cwd=REPO, env=env)


def lines(out, status):
    return [ln for ln in out.splitlines() if ln.startswith(status + "  ")]


def summary(p):
    m = SUMMARY.search(p.stdout)
    assert m, p.stdout + p.stderr
    assert m.end() == len(p.stdout.rstrip()), "the summary is not the last line"
    return m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4))


def test_passes_under_micropython_with_heap_figures():
    p = mp()
    assert p.returncode == 0, p.stdout + p.stderr
    status, passed, failed, skipped = summary(p)
    assert (status, failed, skipped) == ("PASS", 0, 0), p.stdout
    assert passed == len(lines(p.stdout, "PASS")) and passed >= 10
    # the heap figures: free before and after the import, and what it took
    m = HEAP.search(p.stdout)
    assert m, p.stdout
    before, after, used = (int(g) for g in m.groups())
    assert before > after and used > 0
    # the client set costs tens of KB when compiled from .py; a figure of a
    # few bytes would mean the import happened before the measurement
    assert used > 10000, used
    passed_lines = lines(p.stdout, "PASS")
    assert any(ln.startswith("PASS  no allocation: PUBLISH") for ln in passed_lines)
    assert any(ln.startswith("PASS  no allocation: client") for ln in passed_lines)
    assert any(ln.startswith("PASS  store:") for ln in p.stdout.splitlines())


def test_corrupt_vector_is_reported():
    p = mp("--corrupt")
    assert p.returncode == 1
    status, passed, failed, skipped = summary(p)
    assert status == "FAIL" and failed == 1
    bad = lines(p.stdout, "FAIL")
    assert len(bad) == 1 and bad[0].startswith("FAIL  codec: PUBLISH QoS 0"), bad
    assert "want 30 12 00 0c" in bad[0]
    # an exception after the report: mpremote, like run.mjs, then exits 1
    assert p.stderr.rstrip().endswith("Failed: see the FAIL lines above"), p.stderr


def test_allocation_under_heap_lock_is_reported():
    p = mp("--alloc")
    assert p.returncode == 1
    bad = lines(p.stdout, "FAIL")
    assert len(bad) == 1 and bad[0].endswith("allocated in: topic match"), p.stdout
    assert summary(p)[0] == "FAIL"


def test_store_refuses_a_directory_that_is_not_scratch():
    # /lib exists in the VM (the library): the check must not use it, or
    # remove it, and says so
    p = mp("--dir", "/lib")
    assert p.returncode == 1
    bad = lines(p.stdout, "FAIL")
    assert len(bad) == 1 and "/lib exists already" in bad[0], p.stdout


def test_runs_under_cpython_with_heap_checks_skipped(tmp_path):
    d = tmp_path / "mq"
    p = cpython("--dir", str(d))
    assert p.returncode == 0, p.stdout + p.stderr
    status, passed, failed, skipped = summary(p)
    assert (status, failed, skipped) == ("PASS", 0, 3), p.stdout
    skips = lines(p.stdout, "SKIP")
    assert skips[0].startswith("SKIP  heap:")
    assert all("needs micropython.heap_lock()" in ln for ln in skips[1:]), skips
    assert not d.exists()  # nothing left behind
    assert list(tmp_path.iterdir()) == []


def test_cpython_corrupt_vector_is_reported():
    p = cpython("--corrupt")
    assert p.returncode == 1
    status, _, failed, _ = summary(p)
    assert status == "FAIL" and failed == 1
