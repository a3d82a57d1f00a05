"""Fetch the peers that tools/measure/sizes.py measures umqtt3 against: the
PyPI sdists of micropython-lib's umqtt.simple (micropython-umqtt.simple) and
of micropython-mqtt (mqtt_async.py, a fork of mqtt_as), unpacked under
build/peers/. pip cannot install them (their sdists have neither setup.py
nor pyproject.toml), so this takes each archive's address from PyPI's simple index
(its JSON form, PEP 691), checks its SHA-256 against what PyPI lists, and unpacks only the
package's files.

    python -m tools.measure.peers            # (make peers)
    python -m tools.measure.peers --dest DIR

Exit status: 0 when every peer is there, 1 when one could not be fetched
or failed its check (one line each).
"""
import hashlib
import io
import json
import os
import re
import sys
import tarfile
import urllib.request

from tools import args

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (PyPI project, version): the versions the figures in docs/ were measured with
PEERS = (("micropython-umqtt.simple", "1.3.4"), ("micropython-mqtt", "0.7b4"))
INDEX = "https://pypi.org/simple/%s/"
JSON = "application/vnd.pypi.simple.v1+json"


def norm(filename):
    return re.sub(r"[-_.]+", "-", filename.lower())


def sdist_url(files, name, version):
    """(url, sha256) of the version's sdist among the files of a PyPI
    simple-index answer."""
    # (a name's "-", "_" and "." are one character to PyPI: PEP 503)
    want = norm("%s-%s.tar.gz" % (name, version))
    for f in files:
        if norm(f.get("filename", "")) == want:
            return f["url"], f["hashes"]["sha256"]
    raise ValueError("no sdist of %s %s on PyPI" % (name, version))


def unpack(data, sha256, dest):
    """Check data against sha256 and unpack its .py files under dest (the
    archive's own top folder kept); returns the paths written."""
    if hashlib.sha256(data).hexdigest() != sha256:
        raise ValueError("SHA-256 differs from PyPI's")
    out = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as t:
        for m in t.getmembers():
            parts = m.name.split("/")
            # a plain file inside the archive's folder: no absolute path,
            # no "..", no link (an archive decides nothing outside dest)
            if not m.isfile() or m.name.startswith("/") or ".." in parts or len(parts) < 2 \
                    or not m.name.endswith((".py", "PKG-INFO")):
                continue
            path = os.path.join(dest, *parts)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(t.extractfile(m).read())
            out.append(path)
    if not any(p.endswith(".py") for p in out):
        raise ValueError("no Python file in the archive")
    return out


def fetch(url, accept="*/*", timeout=60):
    req = urllib.request.Request(url, headers={"Accept": accept})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read()


def main(argv=None):
    ap = args.parser("python -m tools.measure.peers", __doc__)
    ap.add_argument("--dest", default=os.path.join(REPO, "build", "peers"),
                    help="where to unpack them (default: build/peers)")
    a = ap.parse_args(argv)
    failed = 0
    for name, version in PEERS:
        try:
            files = json.loads(fetch(INDEX % name, JSON))["files"]
            url, sha = sdist_url(files, name, version)
            paths = unpack(fetch(url), sha, a.dest)
            print("peers: %s %s: %s" % (name, version, ", ".join(
                os.path.relpath(p, a.dest) for p in paths if p.endswith(".py"))))
        except (OSError, ValueError, KeyError, tarfile.TarError) as e:
            print("peers: %s %s: %s" % (name, version, e), file=sys.stderr)
            failed = 1
    return failed


if __name__ == "__main__":
    sys.exit(main())
