"""The benchmark and size tools' command lines (tools/measure/): a bad argument
is refused in one line, `name: what was wrong`, with exit status 2
(tools/args.py), never argparse's usage block or a traceback; a count below 1
is refused rather than run; --help shows the whole description."""
import subprocess
import sys

import pytest

from tools import procs

ROOT = procs.ROOT


def run(module, *argv):
    return subprocess.run([sys.executable, "-m", module] + list(argv), capture_output=True,
                          text=True, timeout=60, cwd=ROOT, env=procs.python_env())


@pytest.mark.parametrize("module,argv,msg", [
    ("tools.measure.broker", ["--seconds", "0"], "broker: argument --seconds: 0 is not above 0"),
    ("tools.measure.broker", ["--backlog", "0"], "broker: --backlog: 1 to 60000 messages"),
    ("tools.measure.codec", ["--rounds", "0"], "codec: argument --rounds: 0 is not 1 or more"),
    ("tools.measure.codec", ["--seconds", "-1"], "codec: argument --seconds: -1 is not above 0"),
    ("tools.measure.bridge", ["--messages", "0"],
     "bridge: argument --messages: 0 is not 1 or more"),
    # U16: argparse's usage block
    ("tools.measure.codec", ["--rounds", "x"], "codec: argument --rounds: 'x' is not a whole number"),
    ("tools.measure.client", ["--nosuch"], "client: unrecognized arguments: --nosuch"),
    ("tools.measure.client", ["--cpu", "--profile"],
     "client: argument --profile: not allowed with argument --cpu"),
    ("tools.measure.broker", ["--level", "3"],
     "broker: argument --level: invalid choice: 3 (choose from 4, 5)"),
    ("tools.measure.bridge", ["--direction", "up"], "bridge: argument --direction: invalid choice"),
    ("tools.measure.sizes", ["--nosuch"], "sizes: unrecognized arguments: --nosuch"),
    ("tools.measure.sizes", ["--romfs", "--no-ram"], "sizes: --romfs measures RAM: drop --no-ram"),
])
def test_a_bad_argument_is_refused_in_one_line(module, argv, msg):
    p = run(module, *argv)
    assert p.returncode == 2 and p.stderr.startswith(msg) and p.stderr.count("\n") == 1, \
        (p.returncode, p.stderr)
    assert "total" not in p.stdout and "Traceback" not in p.stderr


@pytest.mark.parametrize("module", ["codec", "client", "broker", "bridge", "sizes"])
def test_help_shows_the_whole_description(module):
    mod = __import__("tools.measure." + module, fromlist=[module])
    p = run("tools.measure." + module, "--help")
    assert p.returncode == 0 and p.stdout.startswith("usage: python -m tools.measure." + module)
    assert " ".join(mod.__doc__.split()) in " ".join(p.stdout.split())
