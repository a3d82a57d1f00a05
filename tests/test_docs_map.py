# docs/architecture.md is a map of lib/umqtt3 (and of lib/umqtt3_cli, the
# desktop commands): it must name every module, and each file:line anchor of
# its walkthroughs must point at code.
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIB = os.path.join(ROOT, "lib", "umqtt3")
DOC = open(os.path.join(ROOT, "docs", "architecture.md")).read()


def modules(lib=LIB):
    for d, dirs, files in os.walk(lib):
        dirs[:] = [x for x in dirs if x != "__pycache__"]
        for f in files:
            if f.endswith(".py"):
                yield os.path.relpath(os.path.join(d, f), lib).replace(os.sep, "/")


def test_every_module_is_on_the_map():
    table = DOC.split("## Modules", 1)[1].split("\n## ", 1)[0]
    missing = [m for m in modules() if m != "__init__.py" and "`%s`" % m not in table]
    assert missing == []
    # the desktop commands' rows name them with their package: umqtt3_cli/broker.py
    cli = ["umqtt3_cli/" + m for m in modules(os.path.join(ROOT, "lib", "umqtt3_cli"))]
    assert "umqtt3_cli/broker.py" in cli
    assert [m for m in cli if not m.endswith("/__init__.py") and "`%s`" % m not in table] == []


def test_anchors_point_at_code():
    anchors = re.findall(r"`([a-z_/]+\.py):(\d+)(?:-(\d+))?`", DOC)
    assert len(anchors) > 20
    for f, a, b in anchors:
        lines = open(os.path.join(LIB, f)).read().splitlines()
        for n in (int(a), int(b or a)):
            assert 0 < n <= len(lines), (f, n)
            code = lines[n - 1].strip()
            assert code and not code.startswith("#"), (f, n, code)
