"""The three ways onto a machine: mip (package.json), freezing
(firmware/manifest.py) and pip (pyproject.toml) must each carry the library."""
import json
import os
import subprocess
import sys
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIB = os.path.join(ROOT, "lib", "umqtt3")


# CPython's half of compat: a device never imports it, so mip does not copy it.
CPYTHON_ONLY = ["compat/cpython.py"]


def lib_modules():
    """Every module file of the package, relative to it ("compat/__init__.py")."""
    found = []
    for d, dirs, files in os.walk(LIB):
        dirs[:] = [x for x in dirs if x != "__pycache__"]
        rel = os.path.relpath(d, LIB).replace(os.sep, "/")
        found += [f if rel == "." else rel + "/" + f for f in files if f.endswith(".py")]
    return sorted(found)


def test_mip_package_json_lists_every_module():
    with open(os.path.join(ROOT, "package.json")) as f:
        pkg = json.load(f)
    urls = dict(pkg["urls"])
    for dest, src in urls.items():
        assert os.path.exists(os.path.join(ROOT, src)), src
        assert src.startswith("lib/umqtt3/") and dest == "umqtt3/" + src[len("lib/umqtt3/"):]
    listed = sorted(d[len("umqtt3/"):] for d in urls)
    assert listed == [m for m in lib_modules() if m not in CPYTHON_ONLY]
    assert pkg["version"]


def test_freeze_manifest_packages_the_library():
    calls = []
    env = {
        "include": lambda path: calls.append(("include", path)),
        "package": lambda name, files=None, base_path=".", opt=None: calls.append(("package", name, base_path)),
        "module": lambda *a, **k: calls.append(("module",) + a),
    }
    path = os.path.join(ROOT, "firmware", "manifest.py")
    with open(path) as f:
        exec(compile(f.read(), path, "exec"), env)
    pkgs = [c for c in calls if c[0] == "package"]
    assert pkgs, "manifest freezes nothing"
    for _, name, base in pkgs:
        assert os.path.isdir(os.path.join(ROOT, "firmware", base, name))
    assert calls[0] == ("include", "$(PORT_DIR)/boards/manifest.py")


def test_pip_wheel_contains_the_library(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp_path), ROOT], check=True, timeout=300)
    wheels = [f for f in os.listdir(tmp_path) if f.endswith(".whl")]
    assert len(wheels) == 1
    names = zipfile.ZipFile(os.path.join(tmp_path, wheels[0])).namelist()
    for m in lib_modules():
        assert "umqtt3/" + m in names
