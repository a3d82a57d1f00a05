# firmware/selftest.py, the on-device self-test, run where CI can run it: under
# the WebAssembly MicroPython (tests/mp/run.mjs: lib/ at /lib, as a deploy puts
# it on a board, tests/portable at /tests) and under CPython. It runs the
# portable tests; a module of tests that fail on purpose shows that a broken
# check is reported as FAIL and the report goes on.
import os
import re
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SELFTEST = os.path.join(REPO, "firmware", "selftest.py")
PORTABLE = os.path.join(REPO, "tests", "portable")
RUN_MJS = os.path.join(REPO, "tests", "mp", "run.mjs")
WASM = os.path.join(REPO, "node_modules", "@micropython", "micropython-webassembly-pyscript",
                    "micropython.mjs")

SUMMARY = re.compile(r"^selftest: (PASS|FAIL) \((\d+) passed, (\d+) failed, (\d+) skipped\)$",
                     re.M)
HEAP = re.compile(r"^PASS  heap: free before import (\d+) B, after codec \+ client (\d+) B, "
                  r"import used (\d+) B$", re.M)


def mp(*args, tests=None):
    if not (shutil.which("node") and os.path.isfile(WASM)):
        pytest.skip("the WebAssembly MicroPython is not installed (make setup)")
    where = ["--tests", str(tests)] if tests else []
    return subprocess.run(["node", RUN_MJS, "--heap", "2m"] + where + [SELFTEST] + list(args),
                          capture_output=True, text=True, timeout=300, cwd=REPO)


def cpython(*args, tests=PORTABLE, cwd=REPO):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(REPO, "lib"), str(tests)]))
    return subprocess.run([sys.executable, SELFTEST] + list(args), capture_output=True,
                          text=True, timeout=300, cwd=str(cwd), env=env)


def lines(out, status):
    return [ln for ln in out.splitlines() if ln.startswith(status + "  ")]


def summary(p):
    m = SUMMARY.search(p.stdout)
    assert m, p.stdout + p.stderr
    assert m.end() == len(p.stdout.rstrip()), "the summary is not the last line"
    return m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4))


def portable_with(tmp_path, name, text):
    """A copy of tests/portable with one more test module."""
    d = tmp_path / "portable"
    shutil.copytree(PORTABLE, str(d), ignore=shutil.ignore_patterns("__pycache__"))
    (d / (name + ".py")).write_text(text)
    return d


# A module of checks that must fail: a wrong byte, an allocation under the
# heap lock (MicroPython), and a crash, with one that passes between them.
BROKEN = """\
from support import locked, MICROPYTHON, SkipTest


def test_a_wrong_byte():
    assert b"\\x30\\x12" == b"\\x30\\x13", "want 30 13"


def test_b_allocates_under_the_lock():
    if not MICROPYTHON:
        raise SkipTest("heap_lock is MicroPython's")
    locked(lambda: bytes(8))


def test_c_passes():
    pass


def test_d_crashes():
    return 1 // 0
"""


def test_passes_under_micropython_with_heap_figures():
    p = mp()
    assert p.returncode == 0, p.stdout + p.stderr
    status, passed, failed, skipped = summary(p)
    assert (status, failed) == ("PASS", 0), p.stdout
    assert passed == len(lines(p.stdout, "PASS")) and passed >= 100
    # the heap figures: free before and after the import, and what it took
    m = HEAP.search(p.stdout)
    assert m, p.stdout
    before, after, used = (int(g) for g in m.groups())
    assert before > after and used > 0
    # the client set costs tens of KB when compiled from .py; a figure of a
    # few bytes would mean the import happened before the measurement
    assert used > 10000, used
    passed_lines = lines(p.stdout, "PASS")
    # the portable tests' own zero-allocation proofs ran on this interpreter
    for name in ("test_codec.test_no_allocation_micropython",
                 "test_topic.test_match_span_no_allocation",
                 "test_client_mem.test_steady_state_allocates_nothing"):
        assert "PASS  " + name in passed_lines, p.stdout
    assert any(ln.startswith("PASS  test_store.test_file_") for ln in passed_lines)


def test_failing_checks_are_reported_and_the_report_goes_on(tmp_path):
    p = mp("test_broken", tests=portable_with(tmp_path, "test_broken", BROKEN))
    assert p.returncode == 1
    status, passed, failed, skipped = summary(p)
    assert (status, passed, failed) == ("FAIL", 2, 3), p.stdout  # heap and test_c pass
    bad = lines(p.stdout, "FAIL")
    assert bad[0] == "FAIL  test_broken.test_a_wrong_byte: AssertionError: want 30 13", bad
    assert bad[1].startswith("FAIL  test_broken.test_b_allocates_under_the_lock: MemoryError")
    assert bad[2].startswith("FAIL  test_broken.test_d_crashes: ZeroDivisionError"), bad
    # an exception after the report: mpremote, like run.mjs, then exits 1
    assert p.stderr.rstrip().endswith("Failed: see the FAIL lines above"), p.stderr


def test_runs_under_cpython_with_heap_checks_skipped(tmp_path):
    p = cpython(cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    status, passed, failed, skipped = summary(p)
    assert (status, failed) == ("PASS", 0), p.stdout
    skips = lines(p.stdout, "SKIP")
    assert skips[0].startswith("SKIP  heap:")
    assert all("heap_lock" in ln for ln in skips[1:]) and len(skips) >= 3, skips
    assert list(tmp_path.iterdir()) == []  # nothing left behind


def test_cpython_failure_is_reported(tmp_path):
    p = cpython("test_broken", tests=portable_with(tmp_path, "test_broken", BROKEN))
    assert p.returncode == 1
    status, passed, failed, skipped = summary(p)
    assert (status, failed, skipped) == ("FAIL", 2, 2), p.stdout
