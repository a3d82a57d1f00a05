# SIGHUP reloads the broker's --users and --acl-file, as mosquitto re-reads
# its password_file and acl_file on SIGHUP (its service file's ExecReload):
# the broker as a process, paho clients, the files edited with
# umqtt3-passwd. A user added logs in; a connected client keeps its
# connection and session, and what it does next is checked under the new
# ACL; a user deleted is disconnected (mosquitto 2.0.11 does the same); a
# file that no longer parses is said in one line and the previous users or
# ACL stay in force, the broker running.
import queue
import signal
import subprocess
import threading
import time

import pytest

from refusal import run
from tools import procs

mqtt = pytest.importorskip("paho.mqtt.client")
TIMEOUT = 10

ACL1 = "user alice\ntopic readwrite t/#\nuser w\ntopic write #\n"
# alice may still publish, no longer read; bob reads
ACL2 = "user alice\ntopic write t/#\nuser w\ntopic write #\nuser bob\ntopic read t/#\n"


class Client:
    """A paho client, connected: what it receives in .got, .gone set when
    the broker closes it."""

    def __init__(self, port, cid, user, pw, clean=True):
        self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=cid,
                             protocol=mqtt.MQTTv311, clean_session=clean)
        self.c.username_pw_set(user, pw)
        self.got = queue.Queue()
        self.rc = None
        self.up = threading.Event()
        self.gone = threading.Event()
        self.acks = queue.Queue()

        def on_connect(cl, u, f, rc, p):
            self.rc = int(rc.value)
            self.up.set()

        def on_disconnect(cl, u, f, rc, p):
            self.gone.set()
            self.up.set()
        self.c.on_connect = on_connect
        self.c.on_disconnect = on_disconnect
        self.c.on_message = lambda cl, u, m: self.got.put((m.topic, bytes(m.payload)))
        self.c.on_subscribe = lambda cl, u, mid, codes, p: self.acks.put(
            [int(x.value) for x in codes])
        self.c.reconnect_delay_set(60, 60)  # a closed connection stays closed here
        self.c.connect("127.0.0.1", port, 30)
        self.c.loop_start()
        assert self.up.wait(TIMEOUT), "no CONNACK"

    def subscribe(self, topic):
        self.c.subscribe(topic, 1)
        return self.acks.get(timeout=TIMEOUT)

    def publish(self, topic, payload):
        self.c.publish(topic, payload, 1).wait_for_publish(TIMEOUT)

    def close(self):
        self.c.disconnect()
        self.c.loop_stop()


def _lines(stream, q):
    for line in stream:
        q.put(line.rstrip("\n"))


def _wait_line(q, words):
    """The next line with words in it, the lines before it skipped."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        try:
            line = q.get(timeout=0.2)
        except queue.Empty:
            continue
        if words in line:
            return line
    raise AssertionError("no line with %r" % words)


def _login(clients, port, user, pw):
    """The CONNACK code of a login (paho's: 134 for 4, bad user name or password)."""
    c = Client(port, "x", user, pw)
    clients.append(c)
    return c.rc


def _passwd(*args):
    r = run("umqtt3_cli.passwd", "-b", *args)
    assert r.returncode == 0, r


def test_sighup_reloads_users_and_acl(tmp_path):
    users = str(tmp_path / "users")
    acl = tmp_path / "acl"
    _passwd("-c", users, "alice", "a")
    _passwd(users, "w", "wpw")
    acl.write_text(ACL1)
    port = procs.free_port()
    p = procs.start(procs.umqtt3_broker_cmd(port, "--users", users, "--acl-file", str(acl),
                                            "--store", str(tmp_path / "store")), port,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = queue.Queue()
    err = queue.Queue()
    for s, q in ((p.stdout, out), (p.stderr, err)):
        threading.Thread(target=_lines, args=(s, q), daemon=True).start()
    clients = []
    try:
        alice = Client(port, "al", "alice", "a", clean=False)
        clients.append(alice)
        assert alice.subscribe("t/#") == [1]
        w = Client(port, "w", "w", "wpw")
        clients.append(w)
        w.publish("t/1", b"before")
        assert alice.got.get(timeout=TIMEOUT) == ("t/1", b"before")
        assert _login(clients, port, "bob", "b") != 0  # not a user yet

        # bob added, alice's read revoked: reloaded, the broker running
        _passwd(users, "bob", "b")
        acl.write_text(ACL2)
        p.send_signal(signal.SIGHUP)
        line = _wait_line(out, "reloaded")
        assert users in line and str(acl) in line
        assert p.poll() is None
        bob = Client(port, "b", "bob", "b")
        clients.append(bob)
        assert bob.rc == 0
        assert bob.subscribe("t/#") == [1]
        w.publish("t/2", b"after")
        assert bob.got.get(timeout=TIMEOUT) == ("t/2", b"after")
        # alice is still connected, and what she does next is checked under
        # the new ACL: her subscription is no longer read from
        alice.publish("t/3", b"alice writes")
        assert bob.got.get(timeout=TIMEOUT) == ("t/3", b"alice writes")
        assert not alice.gone.is_set() and alice.got.empty()
        assert alice.subscribe("t/x") == [0x80]

        # a file that does not parse: one line, the previous ACL kept
        acl.write_text("user alice\ntopik read t/#\n")
        p.send_signal(signal.SIGHUP)
        line = _wait_line(err, "--acl-file")
        assert "line 2" in line and "kept" in line
        assert _wait_line(out, "reloaded")
        assert err.empty() and p.poll() is None
        assert alice.subscribe("t/y") == [0x80]
        acl.write_text(ACL2)
        good = (tmp_path / "users").read_text()
        (tmp_path / "users").write_text("alice:a\njust-a-name\n")
        p.send_signal(signal.SIGHUP)
        line = _wait_line(err, "--users")
        assert "users:2" in line and "kept" in line
        _wait_line(out, "reloaded")
        assert err.empty() and p.poll() is None
        assert _login(clients, port, "bob", "b") == 0  # the previous users: bob is still one
        (tmp_path / "users").write_text(good)

        # bob deleted: his connection is closed; alice's stays
        r = run("umqtt3_cli.passwd", "-D", users, "bob")
        assert r.returncode == 0, r
        p.send_signal(signal.SIGHUP)
        _wait_line(out, "reloaded")
        assert bob.gone.wait(TIMEOUT)
        assert not alice.gone.is_set()
        assert _login(clients, port, "bob", "b") != 0
    finally:
        for c in clients:
            c.close()
        status = procs.stop(p)
    assert status == 0
    assert "umqtt3 broker stopped" in _wait_line(out, "stopped")
