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


def console_script(directory, name):
    """The command `pip install` puts on PATH as `name` (pyproject.toml's
    [project.scripts]), written into directory as pip writes it, and run by
    its path with this checkout's lib/ and pipeline/: a CompletedProcess
    function of the arguments."""
    import os
    import re
    with open(os.path.join(procs.ROOT, "pyproject.toml")) as f:
        entry = re.search(r"^%s = \"([\w.]+):(\w+)\"$" % re.escape(name), f.read(), re.M)
    path = os.path.join(str(directory), name)
    with open(path, "w") as f:
        f.write("import re\nimport sys\nfrom %s import %s\nif __name__ == '__main__':\n"
                "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
                "    sys.exit(%s())\n" % (entry.group(1), entry.group(2), entry.group(2)))

    def run_it(*argv):
        return subprocess.run([sys.executable, path] + list(argv), capture_output=True,
                              text=True, timeout=60, cwd=procs.ROOT, env=procs.python_env(),
                              stdin=subprocess.DEVNULL)
    return run_it
