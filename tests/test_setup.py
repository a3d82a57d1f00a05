"""tools/setup.sh's first step: an interpreter older than 3.11, which PySpark 4
(the spark extra, which the set-up installs) does not run on, as Ubuntu
22.04's python3 (3.10), is refused in one line saying what to do, before apt
or pip, instead of pip's resolver failing after the rest was installed.

The set-up runs from a copy of itself, on a PATH without apt, dpkg, sudo or
npm: a check that let the interpreter through goes on to fail there,
touching nothing."""
import glob
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def setup_copy(tmp_path):
    (tmp_path / "tools").mkdir()
    shutil.copy(os.path.join(ROOT, "tools", "setup.sh"), str(tmp_path / "tools" / "setup.sh"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "sh", "dirname", "id", "cat", "mkdir", "touch"):
        os.symlink(shutil.which(tool), str(bin_dir / tool))
    return bin_dir


def fake_python(path, version):
    """An interpreter that says it is `version` and does nothing else."""
    path.write_text("#!/bin/sh\necho %s\n" % version)
    path.chmod(0o755)
    return str(path)


def run_setup(tmp_path, bin_dir, **env):
    env = dict({"PATH": str(bin_dir), "HOME": str(tmp_path), "VENV": str(tmp_path / "venv"),
                "STAMP": str(tmp_path / "stamp")}, **env)
    return subprocess.run(["bash", str(tmp_path / "tools" / "setup.sh")], env=env,
                          capture_output=True, text=True, timeout=60, cwd=str(tmp_path))


def refused(r, py, how):
    assert r.returncode == 1 and r.stdout == "", (r.stdout, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith("setup: %s is Python 3.10; PySpark 4 (the pipeline, the demo) "
                               "needs 3.11+ (Debian 12's or Ubuntu 24.04's python3): on Ubuntu "
                               "22.04, apt-get install python3.11 python3.11-venv, then " % py), \
        lines[0]
    assert lines[0].endswith(how), lines[0]


def test_python_3_10_is_refused_in_one_line_before_anything(tmp_path):
    bin_dir = setup_copy(tmp_path)
    py = fake_python(tmp_path / "python3", "3.10")
    refused(run_setup(tmp_path, bin_dir, PYTHON3=py), py, "then PYTHON3=python3.11 ./run demo")
    assert not os.path.exists(str(tmp_path / "venv")) and not os.path.exists(str(tmp_path / "stamp"))
    # PYTHON=... (the requirements into that interpreter): the same refusal
    refused(run_setup(tmp_path, bin_dir, PYTHON=py), py, "then PYTHON=python3.11 make setup")
    # a virtual environment an earlier set-up made with 3.10: it must go
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    venv_py = fake_python(tmp_path / "venv" / "bin" / "python", "3.10")
    refused(run_setup(tmp_path, bin_dir), venv_py,
            "then rm -rf %s; PYTHON3=python3.11 ./run demo" % (tmp_path / "venv"))


def test_python_3_11_goes_on_to_the_rest(tmp_path):
    bin_dir = setup_copy(tmp_path)
    py = fake_python(tmp_path / "python3", "3.11")
    r = run_setup(tmp_path, bin_dir, PYTHON3=py)
    assert "needs 3.11+" not in r.stderr
    assert "setup: installing Debian packages" in r.stdout, (r.stdout, r.stderr)  # step 1
    assert r.returncode != 0  # no apt-get on this PATH


REAL_310 = sorted(glob.glob("/root/.pyenv/versions/3.10.*/bin/python3")) + [
    p for p in [shutil.which("python3.10")] if p]


@pytest.mark.skipif(not REAL_310, reason="no CPython 3.10 here")
def test_a_real_python_3_10_is_refused(tmp_path):
    bin_dir = setup_copy(tmp_path)
    refused(run_setup(tmp_path, bin_dir, PYTHON3=REAL_310[0]), REAL_310[0],
            "then PYTHON3=python3.11 ./run demo")


def test_an_interpreter_without_venv_gets_its_own_versions_package(tmp_path):
    # Debian's python3 lacks ensurepip until python3-venv; a PYTHON3=python3.11
    # beside an older python3 (Ubuntu 22.04) needs python3.11-venv, as the
    # refusal above tells: python3-venv would bring the older one's
    bin_dir = setup_copy(tmp_path)
    for name, package in (("python3", "python3-venv"), ("python3.11", "python3.11-venv")):
        py = tmp_path / "bin" / name
        py.write_text('#!/bin/sh\ncase "$*" in *ensurepip*) exit 1;; esac\necho 3.11\n')
        py.chmod(0o755)
        r = run_setup(tmp_path, bin_dir, PYTHON3=name)
        said = [x for x in r.stdout.splitlines() if "installing Debian packages" in x]
        assert len(said) == 1 and said[0].split("(")[0].split()[-1] == package, (r.stdout, r.stderr)
        assert r.returncode != 0  # no apt-get on this PATH
