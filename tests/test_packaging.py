"""The three ways onto a machine: mip (package.json, the client, and
package-broker.json, the broker), freezing (firmware/manifest.py) and pip
(pyproject.toml, with its console scripts and licence) must each carry the
library."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import types
import zipfile

import pytest

from tools.measure import packages

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIB = os.path.join(ROOT, "lib", "umqtt3")


def lib_modules():
    return packages.lib_modules()


def test_mip_packages_follow_the_import_graph():
    # each package file lists the import closure of its entry modules; a
    # module no package needs, or one a package lacks, is named here
    assert packages.problems() == []


def test_every_device_module_is_in_one_package_and_desktop_ones_in_none():
    listed = []
    for pfile in packages.PACKAGES:
        with open(os.path.join(ROOT, pfile)) as f:
            pkg = json.load(f)
        assert pkg["version"]
        for dest, src in pkg["urls"]:
            assert os.path.exists(os.path.join(ROOT, src)), src
            assert src.startswith("lib/umqtt3/"), src  # never lib/umqtt3_cli, the desktop's
            listed.append(src[len("lib/umqtt3/"):])
    assert len(listed) == len(set(listed)), "a module in two packages"
    assert sorted(listed) == [m for m in lib_modules() if m not in packages.DESKTOP_ONLY]
    assert not set(listed) & set(packages.DESKTOP_ONLY)


class Board:
    """What mpremote's mip talks to: a board's filesystem, in a dict."""

    def __init__(self):
        self.files = {}

    def fs_exists(self, path):
        return path in self.files or any(p.startswith(path + "/") for p in self.files)

    def fs_mkdir(self, path):
        pass

    def fs_writefile(self, path, data, progress_callback=None):
        self.files[path] = data


@pytest.mark.parametrize("pfile,entries", [
    ("package.json", ["client.py", "aio.py", "codec.py", "store.py"]),
    ("package-broker.json", ["client.py", "broker.py", "broker_session.py"]),
])
def test_mip_installs_from_a_clone(pfile, entries, monkeypatch):
    # The README's device install, `mpremote mip install package.json` (a
    # node) or `... package-broker.json` (a gateway: the client comes first,
    # as its dependency), run from the clone's root by mpremote's own mip
    # against a board stand-in.
    mip = pytest.importorskip("mpremote.mip")
    board = Board()
    state = types.SimpleNamespace(transport=board, did_action=lambda: None,
                                  ensure_raw_repl=lambda: None)
    monkeypatch.chdir(ROOT)
    mip.do_mip(state, argparse.Namespace(command=["install"], packages=[pfile], index=None,
                                         target="/lib", mpy=False))
    got = sorted(p[len("/lib/umqtt3/"):] for p in board.files)
    want = sorted(set(m for f in ["package.json", pfile] for m in packages.listed(f)[1]))
    assert got == want
    assert all(e in got for e in entries)
    assert not set(got) & set(packages.DESKTOP_ONLY)
    with open(os.path.join(LIB, "client.py"), "rb") as f:
        assert board.files["/lib/umqtt3/client.py"] == f.read()


def test_freeze_manifest_packages_the_library(monkeypatch):
    calls = []
    env = {
        "include": lambda path: calls.append(("include", path)),
        "package": lambda name, files=None, base_path=".", opt=None: calls.append(
            ("package", name, base_path, files)),
        "module": lambda *a, **k: calls.append(("module",) + a),
    }
    path = os.path.join(ROOT, "firmware", "manifest.py")
    monkeypatch.chdir(os.path.join(ROOT, "firmware"))  # as the firmware build runs it
    with open(path) as f:
        exec(compile(f.read(), path, "exec"), env)
    pkgs = [c for c in calls if c[0] == "package"]
    assert pkgs, "manifest freezes nothing"
    for _, name, base, files in pkgs:
        assert os.path.isdir(os.path.join(ROOT, "firmware", base, name))
    # the library, less what only the desktop runs
    frozen = [c[3] for c in pkgs if c[1] == "umqtt3"][0]
    assert frozen == [m for m in lib_modules() if m not in packages.DESKTOP_ONLY]
    # the board's manifest (the Pico W's has the networking bundle: ntptime),
    # else the port's
    assert calls[0] == ("include", "$(BOARD_DIR)/manifest.py")
    calls[:] = []

    def include(path):
        if "BOARD_DIR" in path:
            raise OSError(2, "no such file: a board without its own manifest")
        calls.append(("include", path))
    env["include"] = include
    with open(path) as f:
        exec(compile(f.read(), path, "exec"), env)
    assert calls[0] == ("include", "$(PORT_DIR)/boards/manifest.py")


def test_pip_wheel_contains_the_library(tmp_path):
    # built from a clean copy of what pip reads: an in-tree build/lib keeps
    # the files of an earlier build, so a module moved away (or a package
    # left out of pyproject.toml) would still be found in the wheel
    src = tmp_path / "src"
    for d in ("lib", "pipeline"):
        shutil.copytree(os.path.join(ROOT, d), str(src / d),
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for f in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(os.path.join(ROOT, f), str(src / f))
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(dist), str(src)], check=True, timeout=300)
    wheels = [f for f in os.listdir(str(dist)) if f.endswith(".whl")]
    assert len(wheels) == 1
    whl = zipfile.ZipFile(os.path.join(str(dist), wheels[0]))
    names = whl.namelist()
    for m in lib_modules():
        assert "umqtt3/" + m in names
    # the desktop commands' package, which the console scripts run
    cli = sorted(f for f in os.listdir(os.path.join(ROOT, "lib", "umqtt3_cli")) if f.endswith(".py"))
    assert cli == ["__init__.py", "broker.py", "passwd.py"]
    for m in cli:
        assert "umqtt3_cli/" + m in names
    assert "umqtt3_pipeline/job.py" in names
    meta = [n for n in names if n.endswith(".dist-info/METADATA")][0]
    text = whl.read(meta).decode()
    assert "License-Expression: MIT" in text
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    ep = whl.read([n for n in names if n.endswith("entry_points.txt")][0]).decode()
    for script in ("umqtt3-broker = umqtt3_cli.broker:main",
                   "umqtt3-passwd = umqtt3_cli.passwd:main",
                   "umqtt3-pipeline = umqtt3_pipeline.job:main"):
        assert script in ep


def test_readme_names_what_each_mip_package_installs():
    # README.md's package table is what `make packages` prints, to the byte:
    # `python -m tools.measure.packages --check` says so too, and --write
    # rewrites it (any change to a module of a package changes it)
    assert packages.readme_problems(packages.measure()) == []


def test_a_readme_table_that_differs_is_named_and_written(tmp_path, monkeypatch):
    rows = packages.measure()
    text = "# umqtt3\n\nbefore:\n\n%s\n\nafter\n" % "\n".join(packages.table(rows))
    pfile, name, n, py, mpy = rows[0]
    stale = text.replace("| %s |" % format(py, ","), "| %s |" % format(py - 1, ","))
    assert stale != text
    readme = tmp_path / "README.md"
    readme.write_text(stale)
    monkeypatch.setattr(packages, "README", str(readme))
    assert packages.readme_problems(rows) == [
        "README.md's mip package table is not what the packages measure (%s %d modules, %s .py "
        "and %s .mpy bytes): run python -m tools.measure.packages --write"
        % (name, n, format(py, ","), format(mpy, ","))]
    packages.write_readme(rows)  # what --write does: the table as measured, the rest kept
    assert readme.read_text() == text
    readme.write_text(text.replace(packages.HEADER, "| package |"))
    assert "no mip package table" in packages.readme_problems(rows)[0]
