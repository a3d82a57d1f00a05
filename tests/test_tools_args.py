"""The benchmark and size tools' command lines (tools/measure/): a bad argument
is refused in one line, `name: what was wrong`, with exit status 2
(tools/args.py), never argparse's usage block or a traceback; a name the tool
does not know (--only, --case) and a count below 1 are refused rather than
taken as a run that measures nothing; --help shows the whole description."""
import subprocess
import sys

import pytest

from tools import procs

ROOT = procs.ROOT


def run(module, *argv):
    return subprocess.run([sys.executable, "-m", module] + list(argv), capture_output=True,
                          text=True, timeout=60, cwd=ROOT, env=procs.python_env())


@pytest.mark.parametrize("module,argv,msg", [
    # U13: a typo was a run of nothing, exit 0
    ("tools.measure.broker", ["--only", "nosuch", "--no-ram"],
     "broker: --only: unknown broker 'nosuch' (umqtt3, umqtt3+store, amqtt, mosquitto)"),
    ("tools.measure.broker", ["--case", "nosuch", "--no-ram", "--only", "umqtt3"],
     "broker: --case: unknown case 'nosuch' (fan-in:0, fan-in:1, fan-in:2, fan-out:0, "
     "fan-out:1, fan-out:2)"),
    ("tools.measure.broker", ["--case", "fan-in:1,fan-in:3", "--only", "umqtt3"],
     "broker: --case: unknown case 'fan-in:3'"),
    ("tools.measure.broker", ["--only", ","], "broker: --only names no broker"),
    ("tools.measure.broker", ["--case", "", "--only", "umqtt3"], "broker: --case names no case"),
    ("tools.measure.broker", ["--seconds", "0"], "broker: argument --seconds: 0 is not above 0"),
    ("tools.measure.broker", ["--backlog", "0"], "broker: --backlog: 1 to 60000 messages"),
    ("tools.measure.codec", ["--rounds", "0"], "codec: argument --rounds: 0 is not 1 or more"),
    ("tools.measure.codec", ["--seconds", "-1"], "codec: argument --seconds: -1 is not above 0"),
    ("tools.measure.bridge", ["--messages", "0"],
     "bridge: argument --messages: 0 is not 1 or more"),
    ("pipeline.bench", ["--only", "nosuch"],
     "bench: --only: unknown measurement 'nosuch' (naive, ingest, ingest2, noop, job, job2, run, "
     "run2, spark, latency, latency2)"),
    ("pipeline.bench", ["--rounds", "0"], "bench: argument --rounds: 0 is not 1 or more"),
    ("pipeline.bench", ["--messages", "x"], "bench: argument --messages: 'x' is not a whole number"),
    # U16: argparse's usage block
    ("tools.measure.codec", ["--rounds", "x"],
     "codec: argument --rounds: 'x' is not a whole number"),
    ("tools.measure.client", ["--nosuch"], "client: unrecognized arguments: --nosuch"),
    ("tools.measure.client", ["--cpu", "--profile"],
     "client: argument --profile: not allowed with argument --cpu"),
    ("tools.measure.broker", ["--level", "3"],
     "broker: argument --level: invalid choice: 3 (choose from 4, 5)"),
    ("tools.measure.bridge", ["--direction", "up"],
     "bridge: argument --direction: invalid choice"),
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
