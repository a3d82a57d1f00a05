# A users file made by Debian's mosquitto_passwd works with this broker as
# with mosquitto: $7$ (mosquitto 2, PBKDF2-HMAC-SHA512) and $6$ (mosquitto
# 1.x, salted SHA-512) entries are checked, so the real password logs in and
# the hash string itself does not. An entry that cannot be checked (an
# unknown $name$, a malformed hash, SHA-512 missing on the platform) is
# refused as the file loads, in one line naming the line and the format,
# never compared as a plain password (broker_auth, umqtt3_cli.passwd).
import shutil
import socket

import pytest

from refusal import run
from tools import procs
from umqtt3 import compat
from umqtt3.broker_auth import entry_error, password_ok
from umqtt3_cli.passwd import read_users
from umqtt3.codec import encode_connect

MOSQUITTO_PASSWD = shutil.which("mosquitto_passwd")
need_passwd = pytest.mark.skipif(not MOSQUITTO_PASSWD, reason="mosquitto_passwd not installed")


def mosquitto_passwd(path, user, pw, *flags):
    import subprocess
    subprocess.run([MOSQUITTO_PASSWD] + list(flags) + ["-b", path, user, pw], check=True,
                   capture_output=True, timeout=30)


def connack(port, user, pw):
    """The CONNACK return code of a 3.1.1 CONNECT with user and password."""
    buf = bytearray(512)
    n = encode_connect(buf, 0, b"auth-" + user.encode(), 4, True, 30, user=user.encode(),
                       password=pw.encode())
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(bytes(buf[:n]))
        got = b""
        while len(got) < 4:
            d = s.recv(4 - len(got))
            if not d:
                return None  # closed without a CONNACK
            got += d
    assert got[0] == 0x20, got
    return got[3]


@need_passwd
def test_mosquitto_passwd_file_same_logins_as_mosquitto(tmp_path, broker_factory):
    f = str(tmp_path / "passwd")
    mosquitto_passwd(f, "alice", "s3cret", "-c")  # $7$, mosquitto 2's default
    mosquitto_passwd(f, "bob", "hunter2", "-H", "sha512")  # $6$, mosquitto 1.x's
    entries = dict(line.split(":", 1) for line in open(f).read().split())
    assert entries["alice"].startswith("$7$") and entries["bob"].startswith("$6$")
    tries = [("alice", "s3cret"), ("alice", entries["alice"]), ("alice", "s3cre"),
             ("bob", "hunter2"), ("bob", entries["bob"]), ("bob", "")]
    m = broker_factory(extra=["password_file %s" % f, "allow_anonymous false"])
    port = procs.free_port()
    p = procs.start(procs.umqtt3_broker_cmd(port, "--users", f, "--quiet"), port)
    try:
        ours = [connack(port, u, pw) == 0 for u, pw in tries]
    finally:
        procs.stop(p)
    theirs = [connack(m.port, u, pw) == 0 for u, pw in tries]
    assert theirs == [True, False, False, True, False, False]
    assert ours == theirs


@need_passwd
def test_entries_checked_as_mosquitto_writes_them(tmp_path):
    f = str(tmp_path / "passwd")
    mosquitto_passwd(f, "alice", "s3cret", "-c")
    mosquitto_passwd(f, "bob", "hunter2", "-H", "sha512")
    users = read_users(f)
    for user, pw in ((b"alice", b"s3cret"), (b"bob", b"hunter2")):
        e = users[user]
        assert password_ok(e, pw)
        assert not password_ok(e, e)  # the hash is no password
        assert not password_ok(e, pw + b"x") and not password_ok(e, pw[:-1])


@pytest.mark.parametrize("entry, words", [
    ("$2y$10$N9qo8uLOickgx2ZMRZoMyeIjZAgcfl7p92ldGxad68LJZdL17lhWy", "$2y$ is no format"),
    ("$argon2id$v=19$m=65536,t=3,p=4$c2FsdA$aGFzaA", "$argon2id$ is no format"),
    ("$7$101$not base64!$AAAA", "a malformed $7$ entry"),
    ("$7$x$DIZ8Tk6/tB7AQxeL$AAAA", "a malformed $7$ entry"),
    ("$6$s4FNvnzfbmRITj9C$tooshort", "a malformed $6$ entry"),
    ("$sha256$1000$zz$00", "a malformed $sha256$ entry"),
])
def test_unknown_or_malformed_entry_refused_in_one_line(tmp_path, entry, words):
    f = tmp_path / "users"
    f.write_text("# users\nnode:plain\nalice:%s\n" % entry)
    with pytest.raises(ValueError) as e:
        read_users(str(f))
    assert "users:3:" in str(e.value) and words in str(e.value)
    assert not password_ok(entry.encode(), entry.encode())  # never a plain password
    r = run("umqtt3.broker", "--users", str(f), "--port", "0")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "users:3:" in lines[0] and words in lines[0], r.stderr


def test_plain_and_own_entries_as_before(tmp_path):
    from umqtt3_cli.passwd import entry
    f = tmp_path / "users"
    f.write_text("node:plain\nalice:%s\nodd:$notahash\n" % entry(b"pw", 3).decode())
    users = read_users(str(f))
    assert password_ok(users[b"node"], b"plain") and not password_ok(users[b"node"], b"plai")
    assert password_ok(users[b"alice"], b"pw") and not password_ok(users[b"alice"], users[b"alice"])
    assert password_ok(users[b"odd"], b"$notahash")  # one '$': a plain password


@pytest.fixture
def no_sha512(monkeypatch):
    # a port whose hashlib has only sha256 (the WebAssembly port's)
    monkeypatch.setattr(compat, "sha512", None)
    monkeypatch.setattr(compat, "pbkdf2_sha512", None)


@need_passwd
def test_without_sha512_refused_not_compared(tmp_path, no_sha512):
    f = str(tmp_path / "passwd")
    mosquitto_passwd(f, "alice", "s3cret", "-c")
    mosquitto_passwd(f, "bob", "hunter2", "-H", "sha512")
    lines = open(f).read().split()
    alice = lines[0].split(":", 1)[1].encode()
    bob = lines[1].split(":", 1)[1].encode()
    assert entry_error(alice) == "$7$ (mosquitto 2's PBKDF2-SHA512) needs SHA-512, which " \
                                 "this port's hashlib lacks"
    assert entry_error(bob).startswith("$6$ (mosquitto 1.x's salted SHA-512) needs SHA-512")
    for e, pw in ((alice, b"s3cret"), (bob, b"hunter2")):
        assert not password_ok(e, pw) and not password_ok(e, e)
    with pytest.raises(ValueError) as err:
        read_users(f)
    assert "passwd:1: user 'alice': $7$" in str(err.value)


def test_device_pbkdf2_is_pbkdf2():
    # compat/gateway.py's PBKDF2-HMAC-SHA512 (MicroPython has no
    # pbkdf2_hmac) against hashlib's, where it can run: CPython
    import hashlib
    from umqtt3.compat import gateway
    for pw, salt, rounds in ((b"s3cret", b"\x01" * 12, 101), (b"p" * 200, b"salt", 3),
                             (b"", b"", 1), (b"k" * 128, b"s" * 12, 2)):
        assert gateway.pbkdf2_sha512(pw, salt, rounds) == \
            hashlib.pbkdf2_hmac("sha512", pw, salt, rounds)

