# Every module of the library imports on its own, first, in a fresh
# interpreter: the lazy imports between the codec's modules (codec.py hands
# codec_server's names on through a module __getattr__) must not depend on
# which module a program happens to import first.
import os
import subprocess
import sys

import pytest

from tools.measure import packages

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("mod", sorted(m[:-3].replace("/", ".") for m in packages.lib_modules()))
def test_module_imports_alone(mod):
    name = "umqtt3" if mod == "__init__" else "umqtt3." + mod.replace(".__init__", "")
    p = subprocess.run([sys.executable, "-c", "import " + name], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "lib")), timeout=60)
    assert p.returncode == 0, p.stderr.strip().splitlines()[-1:]
