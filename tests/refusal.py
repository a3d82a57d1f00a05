"""What every command-line tool's refusal of bad input looks like, for the
CLI tests: one line on stderr naming what was wrong, a non-zero exit status,
nothing on stdout, never a traceback."""
import subprocess
import sys

from tools import procs


def run(module, *argv, timeout=60):
    """python -m module argv..., from the repository root."""
    return subprocess.run([sys.executable, "-m", module] + list(argv), capture_output=True,
                          text=True, timeout=timeout, cwd=procs.ROOT, env=procs.python_env(),
                          stdin=subprocess.DEVNULL)


def refused(module, argv, what, status=2):
    """The one line `module` prints for argv; it must contain `what`."""
    r = run(module, *argv)
    err = r.stderr
    assert "Traceback" not in err, err
    assert r.returncode == status, (r.returncode, r.stdout, err)
    assert r.stdout == "" and err.endswith("\n") and err.count("\n") == 1, (r.stdout, err)
    assert what in err, err
    return err.strip()
