"""tools/measure/peers.py: what it takes from PyPI's answer and from an
archive, checked offline on archives made here."""
import hashlib
import io
import os
import tarfile

import pytest

from tools.measure import peers


def archive(entries):
    """A .tar.gz of (name, data or None for a symlink) entries."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for name, data in entries:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.SYMTYPE
                info.linkname = "/etc/passwd"
                t.addfile(info)
            else:
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def sha(data):
    return hashlib.sha256(data).hexdigest()


def test_the_packages_files_are_unpacked_in_their_folder(tmp_path):
    data = archive([("p-1.0/umqtt/simple.py", b"x = 1\n"), ("p-1.0/p.egg-info/PKG-INFO", b"m"),
                    ("p-1.0/setup.cfg", b"skip")])
    out = peers.unpack(data, sha(data), str(tmp_path))
    assert sorted(os.path.relpath(p, tmp_path) for p in out) == [
        os.path.join("p-1.0", "p.egg-info", "PKG-INFO"), os.path.join("p-1.0", "umqtt", "simple.py")]
    assert (tmp_path / "p-1.0" / "umqtt" / "simple.py").read_bytes() == b"x = 1\n"


def test_an_archive_that_is_not_pypis_is_refused_before_anything_is_written(tmp_path):
    data = archive([("p-1.0/m.py", b"x = 1\n")])
    with pytest.raises(ValueError, match="SHA-256"):
        peers.unpack(data, sha(data + b"!"), str(tmp_path))
    assert not os.listdir(tmp_path)


def test_nothing_is_written_outside_the_destination(tmp_path):
    dest = tmp_path / "d"
    data = archive([("../evil.py", b"1"), ("/abs.py", b"1"), ("p-1.0/../../up.py", b"1"),
                    ("p-1.0/link.py", None), ("p-1.0/ok.py", b"1")])
    out = peers.unpack(data, sha(data), str(dest))
    assert [os.path.relpath(p, dest) for p in out] == [os.path.join("p-1.0", "ok.py")]
    assert sorted(os.listdir(tmp_path)) == ["d"]


def test_an_archive_without_python_is_refused(tmp_path):
    data = archive([("p-1.0/README", b"r")])
    with pytest.raises(ValueError, match="no Python file"):
        peers.unpack(data, sha(data), str(tmp_path))


def test_the_versions_sdist_is_taken_from_the_index():
    files = [{"filename": "micropython-mqtt-0.7b3.tar.gz", "url": "u3", "hashes": {"sha256": "a"}},
             {"filename": "micropython-mqtt-0.7b4.tar.gz", "url": "u4", "hashes": {"sha256": "b"}},
             {"filename": "micropython_umqtt.simple-1.3.4.tar.gz", "url": "s", "hashes": {"sha256": "c"}}]
    assert peers.sdist_url(files, "micropython-mqtt", "0.7b4") == ("u4", "b")
    assert peers.sdist_url(files, "micropython-umqtt.simple", "1.3.4") == ("s", "c")
    with pytest.raises(ValueError, match="no sdist"):
        peers.sdist_url(files, "micropython-mqtt", "9.9")


def test_a_bad_option_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        peers.main(["--nope"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("peers: ")
