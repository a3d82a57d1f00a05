"""What the firmware's users read stays true: every tools/ file that firmware/,
boards/, tools/ and docs/firmware.md name exists (firmware/manifest.py once
sent users to a tools/deploy.py that had moved), and docs/firmware.md's
self-test summary line has the form the self-test prints, with no count that
drifts as tests are added (it is matched against a real run under CPython)."""
import glob
import os
import re
import subprocess
import sys

from tools import procs

ROOT = procs.ROOT
DOC = os.path.join(ROOT, "docs", "firmware.md")


def test_every_tools_path_named_exists():
    files = [DOC] + [f for d in ("firmware", "boards", "tools")
                     for f in glob.glob(os.path.join(ROOT, d, "**", "*.py"), recursive=True)]
    missing = []
    for f in files:
        for n, line in enumerate(open(f, encoding="utf-8"), 1):
            for p in re.findall(r"\btools/[\w/]+\.py\b", line):
                if not os.path.exists(os.path.join(ROOT, p)):
                    missing.append("%s:%d %s" % (os.path.relpath(f, ROOT), n, p))
    assert not missing, missing


def test_the_selftest_summary_in_the_doc_is_what_it_prints():
    doc = " ".join(open(DOC, encoding="utf-8").read().split())
    quoted = re.findall(r"`(selftest: PASS \([^`]*\))`", doc)
    assert len(quoted) == 1, quoted
    assert not re.search(r"\d+ passed|\d+ skipped", quoted[0]), quoted  # no count that drifts
    env = dict(procs.python_env(), PYTHONPATH=os.pathsep.join(
        [os.path.join(ROOT, "lib"), os.path.join(ROOT, "tests", "portable")]))
    p = subprocess.run([sys.executable, os.path.join(ROOT, "firmware", "selftest.py")],
                       capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr
    last = p.stdout.strip().splitlines()[-1]
    form = re.escape(quoted[0]).replace("N", r"\d+").replace("M", r"\d+")
    assert re.fullmatch(form, last), (quoted[0], last)
