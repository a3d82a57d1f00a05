# The device code type-checks against MicroPython's own stubs (mypy.ini,
# docs/typecheck.md): firmware/, boards/ and lib/umqtt3/ once per board family
# (esp32, rp2), so that a call a device does not have fails here instead of in
# the field; and the desktop-only files (compat/cpython.py, lib/umqtt3_cli/,
# the commands) against CPython's typeshed. Probe files prove that the check reports a
# missing device API, and that tools/desktop/shim (the desktop stand-ins for machine
# and network) never takes the stubs' place.
#
# The stubs are pinned in requirements-dev.txt ("#stubs" lines) and installed
# by tools/setup.sh into build/stubs/<family>; without them the device checks
# skip.
import glob
import os
import re
import subprocess
import sys

import pytest

from tools import libgraph

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STUBS = os.path.join(REPO, "build", "stubs")
FAMILIES = ("esp32", "rp2")
# never imported on a device (see mypy.ini): lib/umqtt3's desktop-only files
# (tools/libgraph.py lists them), and the commands' package lib/umqtt3_cli
DESKTOP_ONLY = tuple("lib/umqtt3/" + f for f in libgraph.lib_host_only())
CLI = "lib/umqtt3_cli"
NOT_CODE = ("firmware/manifest.py",)  # read by MicroPython's firmware build

# Findings the check tolerates (same file, code and message), each with why.
# Empty: every finding fails the test.
KNOWN = set()  # type: set

ERROR = re.compile(r"^(.+?):(\d+): error: (.*)  \[([a-z-]+)\]$")


def stubs(family):
    """build/stubs/<family> with the pinned stubs in it, or skip."""
    with open(os.path.join(REPO, "requirements-dev.txt")) as f:
        pins = [ln.split()[1:] for ln in f if ln.startswith("#stubs ")]
    reqs = [p[1:] for p in pins if p[0] == family]
    assert reqs, "no #stubs line for %s in requirements-dev.txt" % family
    d = os.path.join(STUBS, family)
    for req in reqs[0]:
        name, version = req.split("==")
        dist = "%s-%s.dist-info" % (name.replace("-", "_"), version)
        if not os.path.isdir(os.path.join(d, dist)):
            pytest.skip("%s is not installed in build/stubs/%s (tools/setup.sh installs it)"
                        % (req, family))
    return d


def mypy(name, args, stubs_dir=None, env=None):
    """Run mypy with mypy.ini from the repository root; returns the error
    findings as {(path, code, message): [lines]} and the summary line."""
    env = dict(os.environ if env is None else env)
    env.pop("MYPYPATH", None)
    if stubs_dir:
        env["MYPYPATH"] = stubs_dir
        args = ["--custom-typeshed-dir", stubs_dir, "--always-true", "MICROPYTHON"] + args
    cmd = [sys.executable, "-m", "mypy", "--config-file", "mypy.ini",
           "--cache-dir", os.path.join(REPO, "build", "mypy-cache", name)] + args
    p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    out = p.stdout + p.stderr
    assert p.returncode in (0, 1), out  # 2: mypy itself failed
    found = {}
    for ln in out.splitlines():
        if ": error: " not in ln:
            continue
        m = ERROR.match(ln)
        key = (os.path.relpath(m.group(1), REPO), m.group(4), m.group(3)) if m else (ln, "", "")
        found.setdefault(key, []).append(int(m.group(2)) if m else 0)
    assert (p.returncode == 1) == bool(found), out
    summary = out.strip().splitlines()[-1]
    return found, summary


def checked(summary):
    m = re.search(r"(\d+) source files?\)?$", summary)
    assert m, summary
    return int(m.group(1))


def sources(*dirs):
    out = []
    for d in dirs:
        out += glob.glob(os.path.join(REPO, d, "**", "*.py"), recursive=True)
    return sorted(os.path.relpath(p, REPO) for p in out)


def unexpected(found):
    """The findings not in KNOWN, one line each, for the failure message."""
    return "\n".join("%s:%s: %s  [%s]" % (k[0], found[k][0], k[2], k[1])
                     for k in sorted(found) if k not in KNOWN)


@pytest.mark.parametrize("family", FAMILIES)
def test_device_code_against_the_stubs(family):
    found, summary = mypy(family, [], stubs(family))
    new = unexpected(found)
    assert not new, "%s\n%s" % (new, summary)
    # every device file was checked: a config that finds nothing passes nothing
    want = [p for p in sources("firmware", "boards", "lib/umqtt3")
            if p not in DESKTOP_ONLY + NOT_CODE]
    assert checked(summary) == len(want), (summary, want)


def test_desktop_half_against_typeshed():
    # compat's CPython branch (compat/cpython.py) and the desktop commands
    # (umqtt3_cli), with the rest of the library as CPython sees it
    files = sources("lib/umqtt3", CLI)
    assert set(DESKTOP_ONLY) <= set(files)
    assert "lib/umqtt3_cli/broker.py" in files and "lib/umqtt3_cli/passwd.py" in files
    found, summary = mypy("cpython", ["--always-false", "MICROPYTHON"] + files)
    new = unexpected(found)
    assert not new, "%s\n%s" % (new, summary)
    assert checked(summary) == len(files), summary


PROBES = {
    # family: (a module only that family has, a call on it that exists)
    "esp32": ("esp32", 'esp32.NVS("umqtt3").get_i32("boots")'),
    "rp2": ("rp2", "rp2.bootsel_button()"),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_missing_device_api_is_reported(family, tmp_path):
    d = stubs(family)
    port, call = PROBES[family]
    bad = tmp_path / "probe_bad.py"
    bad.write_text(
        "import machine\n"
        "import %s\n"
        "\n"
        "\n"
        "def run():\n"
        "    machine.Pin(2).nonexistent()\n"          # line 6
        "    %s.no_such_api()\n"                      # line 7
        "    raise machine.DeepSleep(10)\n" % (port, port))  # line 8: tools/desktop/shim's only
    good = tmp_path / "probe_good.py"
    good.write_text(
        "import machine\n"
        "import network\n"
        "import %s\n"
        "\n"
        "\n"
        "def run():\n"
        "    w = network.WLAN(network.STA_IF)\n"
        "    w.active(True)\n"
        "    machine.Pin(2, machine.Pin.OUT).value(1)\n"
        "    return %s, w.isconnected(), machine.freq()\n" % (port, call))
    # the desktop stand-ins on the Python path, as tools/desktop/sim.py loads them: the
    # check must still see the device's machine, not theirs
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "tools", "desktop", "shim"))
    found, _ = mypy(family, [str(bad)], d, env)
    lines = sorted((k[1], n) for k in found for n in found[k])
    assert lines == [("attr-defined", 6), ("attr-defined", 7), ("attr-defined", 8)], found
    found, summary = mypy(family, [str(good)], d, env)
    assert found == {}, summary
