"""The users file read strictly and the broker CLI's authentication options
(CPython): empty passwords and spaces around ':' refused in one line naming
the line unless allowed; client ids bound to users over TCP; failed logins
from one address made to wait."""
import os
import socket
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from refusal import run  # noqa: E402
from tools import procs  # noqa: E402
from umqtt3_cli.passwd import read_users  # noqa: E402
from umqtt3.codec import encode_connect  # noqa: E402


def refused(r, words):
    err = r.stderr
    assert "Traceback" not in err, err
    assert r.returncode != 0 and err.count("\n") == 1 and words in err, (r.returncode, err)


@pytest.mark.parametrize("text, line, words", [
    ("alice:x\nguest:\n", 2, "empty password"),
    ("alice :x\n", 1, "spaces"),
    ("alice: x\n", 1, "spaces"),
    ("# c\n\nalice:x \n", 3, "spaces"),
    ("  alice:x\n", 1, "spaces"),
])
def test_users_file_strict(tmp_path, text, line, words):
    f = tmp_path / "users"
    f.write_text(text)
    with pytest.raises(ValueError) as e:
        read_users(str(f))
    assert "users:%d:" % line in str(e.value) and words in str(e.value)
    refused(run("umqtt3.broker", "--users", str(f), "--port", "0"), "users:%d:" % line)


def test_users_file_allowed_when_asked(tmp_path):
    f = tmp_path / "users"
    f.write_text("guest:\nalice : x \n")
    assert read_users(str(f), allow_empty=True, allow_spaces=True) == {
        b"guest": b"", b"alice ": b" x "}
    f.write_text("guest:\nbob:pw\n")
    assert read_users(str(f), allow_empty=True) == {b"guest": b"", b"bob": b"pw"}


def _connack(port, cid, user=None, password=None, clean=True):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        buf = bytearray(256)
        n = encode_connect(buf, 0, cid, 4, clean, 0, user=user, password=password)
        s.sendall(buf[:n])
        data = b""
        while len(data) < 4:
            b = s.recv(4 - len(data))
            if not b:
                return None
            data += b
        return data[3]
    finally:
        s.close()


@pytest.fixture
def cli_broker(tmp_path):
    users = tmp_path / "users"
    assert run("umqtt3_cli.passwd", "-c", "-b", str(users), "alice", "a").returncode == 0
    assert run("umqtt3_cli.passwd", "-b", str(users), "bob", "b").returncode == 0
    started = []

    def start(*extra):
        port = procs.free_port()
        p = procs.start(procs.umqtt3_broker_cmd(port, "--users", str(users), "--quiet",
                                                *extra), port,
                        stdout=open(os.devnull, "w"))
        started.append(p)
        return port
    yield start
    for p in started:
        procs.stop(p)


def test_cli_binds_client_ids_and_can_stop(cli_broker):
    port = cli_broker()
    assert _connack(port, "alice-1", "alice", b"a", clean=False) == 0
    assert _connack(port, "alice-1", "bob", b"b", clean=False) == 5
    port = cli_broker("--unbound-client-ids")
    assert _connack(port, "alice-1", "alice", b"a", clean=False) == 0
    assert _connack(port, "alice-1", "bob", b"b", clean=False) == 0


def test_cli_password_guessing_waits(cli_broker):
    port = cli_broker("--auth-fails", "3", "--auth-wait-ms", "60000")
    codes = [_connack(port, "g%d" % i, "alice", b"guess%d" % i) for i in range(10)]
    assert codes == [4] * 10
    assert _connack(port, "g", "alice", b"a") == 4  # the right one waits too
