"""Every command-line tool refuses bad input in one line on stderr with a
non-zero exit status naming what was wrong, never a traceback; and --help
shows every default and the whole description. (The broker's own command
line, umqtt3_cli.broker, has its tests beside the broker's.)"""
import argparse
import os
import re
import shutil
import subprocess

import pytest

from refusal import refused, run  # tests/refusal.py
from tools import procs
from tools.desktop import demo, simulate

ROOT = procs.ROOT



@pytest.fixture
def a_file(tmp_path):
    f = tmp_path / "plain-file"
    f.write_text("x")
    return str(f)


DEMO = "tools.desktop.demo"
SIMULATE = "tools.desktop.simulate"


@pytest.mark.parametrize("argv,what", [
    (["--port", "70000"], "port 70000 is outside 1-65535"),
    (["--port", "-1"], "port -1 is outside 1-65535"),
    (["--port", "http"], "'http' is not a port number"),
    (["--nodes", "0"], "--nodes: 0 is not 1 or more"),
    (["--period", "0"], "--period: 0 is not above 0"),
    (["--seconds", "-5"], "--seconds: -5 is below 0"),
    (["--window", "-1"], "--window: -1 is not above 0"),
    (["--seconds", "inf"], "--seconds: inf is not a finite number"),
    (["--period", "nan"], "--period: nan is not a finite number"),
    # what the node would refuse (firmware/config.py): before, a traceback
    # from every node's thread after the broker had started
    (["--period", "100000"], "the nodes' config: period_s must be a number from 0.001 to 86400"),
    (["--period", "0.0001"], "the nodes' config: period_s must be a number from 0.001 to 86400"),
    (["--broker", "hivemq"], "invalid choice: 'hivemq'"),
    (["--unknown"], "unrecognized arguments: --unknown"),
])
def test_demo_refuses(argv, what):
    assert refused(DEMO, argv, what).startswith("demo: ")


def test_demo_refuses_a_port_in_use(busy_port):
    refused(DEMO, ["--port", str(busy_port)], "cannot listen on 127.0.0.1:%d" % busy_port)


def test_demo_refuses_an_unusable_out_directory(a_file):
    refused(DEMO, ["--out", os.path.join(a_file, "demo")], "%s is not a directory" % a_file)


def test_demo_never_empties_a_directory_it_did_not_make(tmp_path):
    mine = tmp_path / "precious"
    mine.mkdir()
    (mine / "notes.txt").write_text("my notes")
    err = refused(DEMO, ["--out", str(mine), "--seconds", "1", "--nodes", "1"],
                  "--out %s: not a directory the demo made (no %s in it)" % (mine, demo.MARKER))
    assert err.endswith("name an empty or new directory"), err
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    assert (mine / "notes.txt").read_text() == "my notes"
    # --no-spark writes nothing there: nothing to refuse
    assert demo.parse(["--out", str(mine), "--no-spark"]).out == str(mine)


def test_demo_empties_only_its_own_out_directory(tmp_path):
    # missing, empty, or marked by an earlier demo: the demo's to empty
    new, empty, made = tmp_path / "new", tmp_path / "empty", tmp_path / "made"
    empty.mkdir()
    made.mkdir()
    (made / demo.MARKER).write_text("")
    (made / "spark.log").write_text("an earlier run")
    for d in (new, empty, made):
        assert demo.parse(["--out", str(d)]).out == str(d)
    demo.renew_out(str(made))
    assert [p.name for p in made.iterdir()] == [demo.MARKER]



def test_demo_default_out_is_its_own_even_unmarked(tmp_path, monkeypatch):
    # build/demo is the demo's: a run from before the marker left it
    # unmarked, and `make demo` still runs
    monkeypatch.chdir(tmp_path)
    (tmp_path / "build" / "demo").mkdir(parents=True)
    (tmp_path / "build" / "demo" / "spark.log").write_text("a run before the marker")
    assert demo.parse([]).out == demo.DEFAULT_OUT == os.path.join("build", "demo")


@pytest.mark.parametrize("argv,what", [
    (["--host", "no-such-host.invalid"], "cannot resolve host 'no-such-host.invalid'"),
    (["--port", "65536"], "port 65536 is outside 1-65535"),
    (["--nodes", "-2"], "--nodes: -2 is not 1 or more"),
    (["--period", "-1"], "--period: -1 is not above 0"),
    (["--board", "esp8266"], "--board esp8266: no such profile"),
    (["--qos", "3"], "invalid choice: 3"),
    (["--seconds", "inf"], "--seconds: inf is not a finite number"),
    (["--period", "inf"], "--period: inf is not a finite number"),
    # what the node would refuse (firmware/config.py): before, a traceback
    # from every node's thread after the broker had started
    (["--prefix", "a/+"], "the nodes' config: prefix must be free of '+', '#' and NUL"),
    (["--id-prefix", "a#"], "the nodes' config: node_id must be free of '+', '#' and NUL"),
    (["--period", "100000"], "the nodes' config: period_s must be a number from 0.001 to 86400"),
    (["--period", "0.0001"], "the nodes' config: period_s must be a number from 0.001 to 86400"),
    (["--prefix", "p" * 200], "the nodes' config: prefix must be shorter"),
])
def test_simulate_refuses(argv, what):
    assert refused(SIMULATE, argv, what).startswith("simulate: ")


def test_simulate_refuses_a_port_in_use_for_its_broker(busy_port):
    refused(SIMULATE, ["--start-broker", "--port", str(busy_port)],
            "cannot listen on 127.0.0.1:%d" % busy_port)


def test_simulate_refuses_a_broker_that_is_not_there():
    closed = procs.free_port()
    refused(SIMULATE, ["--port", str(closed)], "no broker at 127.0.0.1:%d" % closed)


def test_simulate_refuses_unreadable_secrets(tmp_path):
    refused(SIMULATE, ["--secrets", str(tmp_path / "none.json")], "cannot read secrets")


@pytest.mark.parametrize("text,what", [
    ("[1, 2]", "must hold a JSON object"),
    ('{"mqtt_user": "u", "mqtt_password": 5}', "mqtt_password must be a string"),
    ("{", "is not valid JSON"),
])
def test_simulate_refuses_secrets_the_board_would_not_take(tmp_path, text, what):
    # deploy's check, up front: not a traceback from every node's thread
    f = tmp_path / "secrets.json"
    f.write_text(text)
    err = refused(SIMULATE, ["--secrets", str(f), "--start-broker", "--seconds", "2",
                             "--nodes", "1"], what)
    assert err.startswith("simulate: ") and str(f) in err, err


@pytest.mark.parametrize("module,argv,what", [
    ("tools.device.deploy", ["--board", "esp32", "--port", "socket://127.0.0.1:1",
                             "--build", "{file}/b", "--dry-run"], "is not a directory"),
    ("tools.device.deploy", ["--board", "esp8266", "--dry-run"], "esp8266"),
    ("tools.device.flash", ["--board", "esp32", "--firmware", "x.bin", "--baud", "0"],
     "--baud: 0 is not 1 or more"),
    ("tools.device.flash", ["--board", "esp32", "--firmware", "{file}"],
     "esp32 takes a .bin image, not plain-file"),
    ("tools.device.selftest", ["--wasm", "--script", "{file}/x.py"], "x.py"),
    ("tools.device.selftest", ["--bogus"], "unrecognized arguments: --bogus"),
    # run.mjs's sizes: bytes, or with a k or m suffix
    ("tools.device.selftest", ["--wasm", "--heap", "abc", "--dry-run"],
     "argument --heap: 'abc' is not a size (bytes, or with k or m: 2m)"),
    ("tools.device.selftest", ["--wasm", "--heap", "0", "--dry-run"],
     "argument --heap: '0' is not a size"),
    ("tools.device.selftest", ["--wasm", "--heap", "2g", "--dry-run"], "'2g' is not a size"),
])
def test_device_tools_refuse(module, argv, what, a_file):
    refused(module, [x.replace("{file}", a_file) for x in argv], what)


# ------------------------------------------------------------------ --help
def every_default_shown(ap):
    """Each option whose default says something has it in its help line."""
    text = " ".join(ap.format_help().split())
    for action in ap._actions:
        d = action.default
        if not action.option_strings or d in (None, False, "", argparse.SUPPRESS):
            continue
        h = " ".join((action.help or "").split())
        assert "default" in h or ("%s (default: %s)" % (h, d)) in text, (action.dest, h)


@pytest.mark.parametrize("mod", [demo, simulate], ids=["demo", "simulate"])
def test_help_shows_every_default_and_the_whole_description(mod):
    ap = mod.parser()
    every_default_shown(ap)
    # the description is printed as written, not cut after its first line
    assert " ".join(mod.__doc__.split()) in " ".join(ap.format_help().split())


def test_job_help_shows_every_default_and_the_whole_description():
    from umqtt3_pipeline import job
    ap = job.parser()
    every_default_shown(ap)
    assert " ".join(job.__doc__.split()) in " ".join(ap.format_help().split())


@pytest.mark.parametrize("module", [DEMO, SIMULATE, "tools.device.deploy", "tools.device.flash",
                                    "tools.device.selftest", "umqtt3_pipeline.job"])
def test_help_runs(module):
    r = run(module, "--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: ") and not r.stderr, r.stderr


@pytest.mark.skipif(not shutil.which("make"), reason="needs make")
def test_bare_make_lists_the_targets():
    r = subprocess.run(["make", "-s"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("Start here")
    for target in ("demo", "test", "setup", "test-py", "test-mp", "packages", "pipeline",
                   "flash", "deploy", "selftest"):
        assert re.search(r"^\s+make %s\b" % re.escape(target), r.stdout, re.M), target
    assert subprocess.run(["make", "-s", "help"], capture_output=True, text=True, cwd=ROOT,
                          timeout=60).stdout == r.stdout
