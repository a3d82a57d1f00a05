"""tests/mp/testrunner.py as `make test-mp MP_TESTS=...` runs it: a module
name that is no test module (a typo) is refused in one line, exit status 2,
before any test runs; the names that are there run as before."""
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNNER = os.path.join(ROOT, "tests", "mp", "testrunner.py")
NODE = shutil.which("node")
WASM = os.path.join(ROOT, "node_modules", "@micropython", "micropython-webassembly-pyscript",
                    "micropython.mjs")


def micropython(*mods):
    return subprocess.run([NODE, os.path.join(ROOT, "tests", "mp", "run.mjs"), "--heap", "2m",
                           RUNNER] + list(mods), capture_output=True, text=True, timeout=300)


def cpython(*mods):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "lib"), ROOT]))
    return subprocess.run([sys.executable, RUNNER] + list(mods), capture_output=True, text=True,
                          timeout=300, env=env)


def refused_in_one_line(r, name):
    out = (r.stdout + r.stderr).strip().splitlines()
    assert r.returncode == 2, r
    assert len(out) == 1 and "Traceback" not in out[0], out
    assert out[0].startswith("testrunner: no test module %s to import" % name), out[0]
    return out[0]


@pytest.mark.skipif(not (NODE and os.path.exists(WASM)), reason="no WebAssembly MicroPython")
def test_an_unknown_module_is_refused_in_one_line_under_micropython():
    line = refused_in_one_line(micropython("test_topic", "no_such_module"), "no_such_module")
    assert "tests/portable" in line, line  # where the test modules are, as the user knows it
    r = micropython("test_topic")
    assert r.returncode == 0 and r.stdout.strip().splitlines()[-1].startswith("mp: "), r


def test_an_unknown_module_is_refused_in_one_line_under_cpython():
    refused_in_one_line(cpython("no_such_module"), "no_such_module")
    r = cpython("test_topic.py")  # a file name is taken too, as before
    assert r.returncode == 0 and r.stdout.strip().splitlines()[-1].startswith("py: "), r
