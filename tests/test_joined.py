"""tools/measure/joined.py: the client set joined into one module compiles,
carries each name once, and the split files' sum is what sizes.py reports."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tools.measure import joined  # noqa: E402


def test_join_drops_sibling_imports_and_repeated_consts():
    a = "from .compat import const, x\n_T = const(3)\ndel const\n\ndef f():\n    return _T\n"
    b = "from .a import (f,\n    g)\n_T = const(3)\n_U = const(4)\nimport sys\n"
    j = joined.join([a, b])
    assert "from ." not in j and "del const" not in j
    assert j.count("_T = const(3)") == 1 and "_U = const(4)" in j
    assert "import sys" in j and "return _T" in j  # the rest stays as written


def test_the_joined_client_set_is_smaller_and_stores_each_name_once():
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "lib"))
    r = subprocess.run([sys.executable, "-m", "tools.measure.joined"], capture_output=True,
                       text=True, timeout=300, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr
    rows = {}
    for ln in r.stdout.splitlines():
        cells = re.split(r"\s{2,}", ln.strip())
        if len(cells) == 4 and cells[1][:1].isdigit():
            rows[cells[0]] = [int(x.replace(",", "")) for x in cells[1:]]
    files = [rows[k] for k in ("compat/__init__.py", "client_codec.py", "memstore.py",
                               "client_core.py", "client.py")]
    split = rows["client set, 5 files"]
    one = rows["client set joined into one module"]
    assert split[0] == sum(f[0] for f in files)
    assert 0 < one[0] < split[0]
    assert one[1] < split[1]  # names: once each instead of once per file
    assert one[1] >= max(f[1] for f in files)


def test_a_bad_argument_is_one_line():
    r = subprocess.run([sys.executable, "-m", "tools.measure.joined", "--nope"],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "joined:" in r.stderr
