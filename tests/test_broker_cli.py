# The broker's command line and its users-file tool, as a user meets them:
# each bad input is refused in one line with a non-zero status and no
# traceback; --help shows every default; docs/broker.md's tables agree with
# broker_limits; a file umqtt3_cli.passwd writes lets exactly its users in.
import os
import re
import shutil
import subprocess
import sys

import pytest

from umqtt3.broker_limits import Limits, span
from umqtt3_cli import broker as cli
from umqtt3_cli.passwd import read_users, update

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMES = cli.NAMES


def desktop():
    return dict(cli.DESKTOP)


from refusal import console_script, run  # noqa: E402  (tests/refusal.py)
from tools import procs  # noqa: E402


def refused(r, words):
    assert r.returncode != 0, r
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert words in lines[0], lines[0]
    return lines[0]



@pytest.mark.parametrize("args, words", [
    (["--port", "70000"], "--port"),
    (["--port", "-1"], "--port"),
    (["--port", "http"], "--port"),
    (["--host", "bad..host", "--port", "0"], "--host bad..host"),
    (["--host", "nosuch.invalid", "--port", "0"], "--host nosuch.invalid"),
    (["--host", "192.0.2.1", "--port", "0"], "--host 192.0.2.1"),
    (["--max-clients", "0"], "--max-clients"),
    (["--max-queued", "-5"], "--max-queued"),
    (["--max-packet", "big"], "--max-packet"),
    (["--connect-timeout", "-1", "--port", "0"], "--connect-timeout"),
    (["--users", "/nonexistent/users", "--port", "0"], "--users /nonexistent/users"),
    (["--no-such-flag"], "--no-such-flag"),
])
def test_bad_input_refused_in_one_line(args, words):
    refused(run("umqtt3.broker", *args), words)


def test_port_in_use(busy_port):
    refused(run("umqtt3.broker", "--port", str(busy_port)), "port %d" % busy_port)


def test_users_file_unreadable_or_malformed(tmp_path):
    bad = tmp_path / "users"
    bad.write_text("alice:x\njust-a-name\n")
    refused(run("umqtt3.broker", "--users", str(bad), "--port", "0"), "users:2")
    refused(run("umqtt3.broker", "--users", str(tmp_path), "--port", "0"), "--users")


def test_acl_file_unreadable_or_malformed(tmp_path):
    bad = tmp_path / "acl"
    bad.write_text("user alice\ntopik read x\n")
    refused(run("umqtt3.broker", "--acl-file", str(bad), "--port", "0"), "line 2")
    refused(run("umqtt3.broker", "--acl-file", str(tmp_path / "none"), "--port", "0"),
            "--acl-file")


def test_store_unusable(tmp_path):
    f = tmp_path / "file"
    f.write_text("")
    refused(run("umqtt3.broker", "--store", str(f), "--port", "0"), "--store")
    refused(run("umqtt3.broker", "--store", str(f / "sub"), "--port", "0"), "--store")


@pytest.mark.parametrize("opt", ["--users", "--acl-file", "--bridge-config"])
def test_a_file_that_is_not_utf8_is_named_with_its_line(tmp_path, opt):
    f = tmp_path / "f"
    f.write_bytes(b"# first\ncaf\xe9 x\n")
    line = refused(run("umqtt3.broker", opt, str(f), "--port", "0"), "%s %s:2: not UTF-8" % (opt, f))
    assert "codec" not in line


def test_mosquitto_short_options(tmp_path):
    # -p and -v mean what they mean to mosquitto; -c and -d are refused with
    # what to use instead
    import subprocess
    import sys
    from tools import procs
    p = subprocess.Popen([sys.executable, "-m", "umqtt3.broker", "-p", "0", "-v"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         cwd=procs.ROOT, env=procs.python_env(), stdin=subprocess.DEVNULL)
    try:
        first = p.stdout.readline()
    finally:
        p.terminate()
        p.communicate(timeout=30)
    assert first.startswith("umqtt3 broker listening on 127.0.0.1:"), first
    a = cli.parser().parse_args(["-p", "1884", "-v"])
    assert (a.port, a.verbose, a.quiet) == (1884, True, False)
    from refusal import refused as one_line
    one_line("umqtt3.broker", ["-c", "/etc/mosquitto/mosquitto.conf"],
             "-c /etc/mosquitto/mosquitto.conf: this broker reads no mosquitto.conf; give its "
             "settings as flags")
    one_line("umqtt3.broker", ["-d"], "-d: this broker does not detach")
    one_line("umqtt3.broker", ["-v", "--quiet"], "-v and --quiet")
    one_line("umqtt3.broker", ["-p", "70000"], "--port")


def test_queue_full_refuse_or_drop():
    # --queue-full: refuse (the default) or drop, as Limits.queue_full; any
    # other word is refused in one line, here and by Limits
    p = cli.parser()
    assert cli.limits(p.parse_args([])).queue_full == "refuse" == Limits.queue_full
    assert cli.limits(p.parse_args(["--queue-full", "drop"])).queue_full == "drop"
    refused(run("umqtt3.broker", "--queue-full", "keep", "--port", "0"), "--queue-full")
    with pytest.raises(ValueError):
        Limits(queue_full="keep")


def test_limits_sum_refused():
    refused(run("umqtt3.broker", "--max-inflight", "60000", "--max-queued", "6000",
                "--port", "0"), "max_inflight + max_queued")


def test_help_shows_every_default():
    r = run("umqtt3.broker", "--help")
    assert r.returncode == 0
    text = " ".join(r.stdout.split())
    for name in NAMES:
        assert re.search(r"%s N .*?\(default %d\)" % (cli.flag(name), desktop()[name]),
                         text), name
    for f in ("--host", "--port", "--users", "--store", "--queue-qos0", "--queue-full",
              "--allow-anonymous"):
        assert f in text


@pytest.mark.parametrize("name, module", [("umqtt3-broker", "umqtt3.broker"),
                                          ("umqtt3-passwd", "umqtt3_cli.passwd")])
def test_the_commands_call_themselves_by_the_name_run(tmp_path, name, module):
    # the console script pip installs says its own name in the usage line and
    # in a refusal (it said `python -m ...`); run as a module, the module's
    cmd = console_script(tmp_path, name)
    r = cmd("--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: %s [-h]" % name), r.stdout[:200]
    bad = ("users", "alice", "--no-such-flag")  # (passwd wants FILE USER first)
    assert refused(cmd(*bad), "--no-such-flag").startswith(name + ": ")
    r = run(module, "--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: python -m %s [-h]" % module)
    assert refused(run(module, *bad), "--no-such-flag").startswith("python -m %s: " % module)


def test_every_limit_is_a_flag_with_help():
    limits = sorted(k for k in dir(Limits) if not k.startswith("_") and
                    k not in ("queue_qos0", "queue_full"))
    assert sorted(NAMES) == limits  # the profile names every limit, once
    assert sorted(cli.HELP) == limits
    a = cli.parser().parse_args([])
    lim = cli.limits(a)
    for name in NAMES:
        assert getattr(lim, name) == desktop()[name]
    assert Limits().max_clients != lim.max_clients  # the device profile is its own


def _table(doc, first_col):
    rows = {}
    for line in open(os.path.join(ROOT, "docs", doc)).read().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) >= 2:
            rows[cells[0]] = cells[1:]
    return rows


def test_docs_flag_table_matches_limits():
    # docs/broker.md, "Running it": `--flag` | desktop default | meaning
    rows = _table("broker.md", "flag")
    prof = desktop()
    for name in NAMES:
        key = "`%s`" % cli.flag(name)
        assert key in rows, key
        assert rows[key][0] == str(prof[name]), (key, rows[key][0], prof[name])


def test_docs_flag_table_gives_each_largest_value():
    rows = _table("broker.md", "flag")
    for name in BOUNDED:
        row = rows["`%s`" % cli.flag(name)][1]
        assert str(span(name)[1]) in row, (name, row)


def test_docs_limits_table_matches_device_defaults():
    # docs/broker.md, "Limits": `name` | device default | when it is hit
    rows = _table("broker.md", "limit")
    for name in NAMES:
        key = "`%s`" % name
        assert key in rows, key
        assert rows[key][0] == str(getattr(Limits, name)), (key, rows[key][0])


def test_limits_refuse_zero_and_unknown():
    with pytest.raises(ValueError):
        Limits(max_clients=0)
    with pytest.raises(ValueError):
        Limits(max_client=3)
    # txsize 0: max_packet and what a PUBLISH may grow by on its way out
    # (88 bytes at 16 subscriptions: broker_limits.grow)
    assert Limits(txsize=0, max_packet=2048).tx == 2048 + 88
    assert Limits(txsize=0, max_packet=2048, max_subs=1).ring == 2048 + 13
    assert Limits(txsize=4096, max_packet=2048).tx == 4096


# every limit with a largest value: what it flows into takes that value and
# refuses one more ([MQTT-3.2.2] Two Byte Integers, a C int, a ms tick)
BOUNDED = [n for n in NAMES if span(n)[1] is not None]


def test_the_bounded_limits():
    assert sorted(BOUNDED) == sorted([
        "max_keepalive", "max_aliases", "max_qos2_in", "sndbuf", "backlog",
        "connect_timeout_ms", "max_packet", "sys_interval", "auth_wait_ms", "max_id_bytes"])
    for name in BOUNDED:
        lo, hi = span(name)
        Limits(**{name: hi})
        with pytest.raises(ValueError):
            Limits(**{name: hi + 1})
    with pytest.raises(ValueError):
        Limits(max_packet=19)  # a CONNECT is 20 bytes at least (mosquitto's floor too)
    assert Limits(max_packet=20).max_packet == 20
    with pytest.raises(ValueError):
        Limits(max_id_bytes=22)  # a server takes client ids of 1 to 23 bytes [MQTT-3.1.3-5]


@pytest.mark.parametrize("args, words", [
    (["--sys-interval", "604800"], "--sys-interval: must be a whole number 0-65535, not 604800"),
    (["--sndbuf", "2147483648"], "--sndbuf"),
    (["--sndbuf", "3000000000"], "--sndbuf"),
    (["--backlog", "2147483648"], "--backlog"),
    (["--max-keepalive", "70000"], "--max-keepalive"),
    (["--max-aliases", "65536"], "--max-aliases"),
    (["--max-qos2-in", "65536"], "--max-qos2-in"),
    (["--connect-timeout-ms", "536870912"], "--connect-timeout-ms"),
    (["--auth-wait-ms", "268435457"], "--auth-wait-ms"),
    (["--max-packet", "19"], "--max-packet: must be a whole number 20-268435460, not 19"),
    (["--max-id-bytes", "22"], "--max-id-bytes: must be a whole number 23-65535, not 22"),
    (["--max-will-bytes", "-1"], "--max-will-bytes"),
    (["--max-packet", "1"], "--max-packet"),
    (["--max-packet", "268435461"], "--max-packet"),
    (["--connect-timeout", "nan"], "--connect-timeout"),
    (["--connect-timeout", "inf"], "--connect-timeout"),
    (["--connect-timeout", "-1"], "--connect-timeout"),
    (["--connect-timeout", "536871"], "--connect-timeout"),
    # rounded to 0 ms it would mean "for ever"
    (["--connect-timeout", "0.0004"], "--connect-timeout: must be 0 (for ever) or a number of "
                                      "seconds 0.001-"),
])
def test_out_of_range_refused_before_listening(args, words):
    from refusal import refused as one_line
    one_line("umqtt3.broker", args + ["--port", "0"], words, status=2)


def test_the_largest_values_work():
    # each at its most: the timers tick, CONNACK carries the Two Byte
    # Integers, setsockopt takes the int
    import socket
    from umqtt3 import compat
    from umqtt3.broker import Broker
    from umqtt3.transport import Pipe
    from umqtt3.codec import encode_connect
    lim = Limits(sys_interval=65535, connect_timeout_ms=span("connect_timeout_ms")[1],
                 max_keepalive=65535, max_aliases=65535, max_qos2_in=65535,
                 auth_wait_ms=span("auth_wait_ms")[1])
    b = Broker(port=None, limits=lim)
    try:
        a, end = Pipe.pair()
        b.attach(end)
        buf = bytearray(128)
        n = encode_connect(buf, 0, b"c", 5, True, 0)
        a.write(buf, 0, n)
        for _ in range(5):
            b.poll_once(0)
        got = bytearray(64)
        k = a.readinto(got, 64)
        assert k and got[0] == 0x20 and got[3] == 0, bytes(got[:k])  # CONNACK, success
        assert b"\x13\xff\xff" in got[:k] and b"\x22\xff\xff" in got[:k]  # keep alive, aliases
    finally:
        b.close()
    s = socket.socket()
    try:
        compat.sndbuf(s, span("sndbuf")[1])
    finally:
        s.close()


# ---------------------------------------------------------------- umqtt3_cli.passwd

def test_passwd_add_update_delete(tmp_path):
    f = str(tmp_path / "users")
    assert run("umqtt3_cli.passwd", "-c", "-b", f, "alice", "one").returncode == 0
    assert run("umqtt3_cli.passwd", "-b", f, "bob", "two").returncode == 0
    first = read_users(f)[b"alice"]
    assert first.startswith(b"$sha256$") and b"one" not in first
    assert run("umqtt3_cli.passwd", "-b", f, "alice", "three").returncode == 0
    users = read_users(f)
    assert sorted(users) == [b"alice", b"bob"] and users[b"alice"] != first
    assert run("umqtt3_cli.passwd", "-D", f, "bob").returncode == 0
    assert sorted(read_users(f)) == [b"alice"]
    refused(run("umqtt3_cli.passwd", "-D", f, "bob"), "no user bob")


def test_passwd_keeps_comments_and_plain_entries(tmp_path):
    f = tmp_path / "users"
    f.write_text("# gateway users\nnode:plain\n")
    update(str(f), "alice", b"pw", rounds=2)
    text = f.read_text()
    assert text.startswith("# gateway users\nnode:plain\nalice:$sha256$2$")


@pytest.mark.parametrize("args, words", [
    (["-b", "F", "alice"], "-b"),
    (["F", "alice", "pw"], "-b"),
    (["-b", "F", "a:b", "pw"], "user"),
    (["-b", "F", "", "pw"], "user"),
    (["-b", "--rounds", "0", "F", "alice", "pw"], "--rounds"),
    (["-b", "/nonexistent/dir/users", "alice", "pw"], "/nonexistent/dir/users"),
    (["-c", "-b", "F", "alice", ""], "empty"),
    (["-D", "/nonexistent/users", "alice"], "/nonexistent/users"),
    ([], "required"),
])
def test_passwd_refusals(tmp_path, args, words):
    args = [str(tmp_path / "users") if a == "F" else a for a in args]
    refused(run("umqtt3_cli.passwd", *args), words)


@pytest.mark.parametrize("user", ["bo\nb", "bo\rb", "bo\tb", "bo\x7fb", "bo\x85b", "bo:b"])
def test_passwd_refuses_control_characters_and_colons_in_user_names(tmp_path, user):
    # as mosquitto_passwd ("must not contain control characters", "must not
    # contain the ':' character"): a newline would split the entry over two
    # lines, a file the broker then refuses to start with; C1 controls too,
    # which the broker refuses in a CONNECT's user name [MQTT-1.5.3-2]
    f = tmp_path / "users"
    f.write_text("alice:secret\n")
    r = run("umqtt3_cli.passwd", "-b", str(f), user, "pw")
    assert r.returncode == 2
    refused(r, "user %r" % user)
    assert f.read_text() == "alice:secret\n"  # left as it was


def test_users_and_acl_files_with_a_utf8_bom(tmp_path):
    # saved "UTF-8 with BOM" (Notepad): the BOM is not part of the first
    # user's name (which it would lock out), nor of the first ACL keyword
    from umqtt3.broker_acl import parse
    f = tmp_path / "users"
    f.write_bytes(b"\xef\xbb\xbfalice:secret\r\nbob:pw\r\n")
    assert read_users(str(f)) == {b"alice": b"secret", b"bob": b"pw"}
    assert run("umqtt3_cli.passwd", "-b", str(f), "alice", "new").returncode == 0
    text = f.read_bytes()
    assert not text.startswith(b"\xef\xbb\xbf") and text.count(b"alice:") == 1, text
    g = parse("\ufeffuser alice\r\ntopic readwrite a/#\r\n").grants("alice", "c")
    assert g.may_write(b"a/x", 0, 3)
    acl = tmp_path / "acl"
    acl.write_bytes(b"\xef\xbb\xbfuser alice\r\ntopic readwrite a/#\r\n")
    a = cli.parser().parse_args(["--port", "0", "--users", str(f), "--acl-file", str(acl)])
    b = cli.start(a, None)
    try:
        assert b.acl.grants("alice", "c").may_read(b"a/#")
    finally:
        b.close()


def test_passwd_keeps_the_mode_and_makes_new_files_0600(tmp_path):
    # the hashes are never readable by more users than before
    f = str(tmp_path / "users")
    old = os.umask(0o022)
    try:
        assert run("umqtt3_cli.passwd", "-c", "-b", f, "alice", "one").returncode == 0
        assert os.stat(f).st_mode & 0o777 == 0o600  # new: 0600, whatever the umask
        for mode in (0o600, 0o640, 0o644):
            os.chmod(f, mode)
            assert run("umqtt3_cli.passwd", "-b", f, "bob", "two").returncode == 0
            assert os.stat(f).st_mode & 0o777 == mode
            assert run("umqtt3_cli.passwd", "-D", f, "bob").returncode == 0
            assert os.stat(f).st_mode & 0o777 == mode
        # a FILE.tmp left by a crash does not lend its mode
        with open(f + ".tmp", "w") as t:
            t.write("x")
        os.chmod(f + ".tmp", 0o666)
        os.chmod(f, 0o600)
        assert run("umqtt3_cli.passwd", "-b", f, "carl", "three").returncode == 0
        assert os.stat(f).st_mode & 0o777 == 0o600 and not os.path.exists(f + ".tmp")
    finally:
        os.umask(old)


def test_passwd_writes_through_a_symbolic_link(tmp_path):
    # users -> conf/users.real (as /etc/mosquitto setups often are): the link
    # stays, and its target, what the broker reads, gets the change, as
    # mosquitto_passwd does
    real = tmp_path / "users.real"
    real.write_text("")
    link = tmp_path / "users"
    os.symlink(str(real), str(link))
    assert run("umqtt3_cli.passwd", "-b", str(link), "bob", "pw").returncode == 0
    assert os.path.islink(str(link)) and os.readlink(str(link)) == str(real)
    assert real.read_text().startswith("bob:")


def test_passwd_refuses_a_file_that_is_not_utf8_in_one_line(tmp_path):
    f = tmp_path / "users"
    f.write_bytes(b"alice:pw\ncaf\xe9:pw\n")
    for args in (["-b", str(f), "bob", "pw"], ["-D", str(f), "alice"]):
        r = run("umqtt3_cli.passwd", *args)
        assert r.returncode == 1
        refused(r, "%s:2: not UTF-8" % f)
    assert f.read_bytes() == b"alice:pw\ncaf\xe9:pw\n"  # left as it was


def test_passwd_adds_to_a_missing_file_only_with_c(tmp_path):
    # as mosquitto_passwd: -b (or the password asked for) on a file that does
    # not exist is refused in one line and makes none, so a typo in FILE never
    # starts a second users file beside the one the broker reads; -c creates
    f = str(tmp_path / "typo-users")
    for args in (["-b", f, "alice", "one"], [f, "alice"]):
        r = run("umqtt3_cli.passwd", *args)
        assert r.returncode == 1
        line = refused(r, "unable to open password file %s: No such file or directory" % f)
        assert "-c" in line  # says how to make one
        assert "no password given" not in line  # refused before asking for it
    assert os.listdir(str(tmp_path)) == []
    library = str(tmp_path / "by-update")
    with pytest.raises(FileNotFoundError):
        update(library, "alice", b"one", rounds=2)
    assert os.listdir(str(tmp_path)) == []
    assert run("umqtt3_cli.passwd", "-c", "-b", f, "alice", "one").returncode == 0
    assert run("umqtt3_cli.passwd", "-b", f, "bob", "two").returncode == 0
    assert sorted(read_users(f)) == [b"alice", b"bob"]


@pytest.mark.skipif(not shutil.which("mosquitto_passwd"), reason="mosquitto_passwd not installed")
def test_passwd_missing_file_as_mosquitto_passwd(tmp_path):
    # the peer, same arguments: both refuse -b on a missing file and make
    # none, and both create it with -c -b
    for tool in (["mosquitto_passwd"], [sys.executable, "-m", "umqtt3_cli.passwd"]):
        d = tmp_path / os.path.basename(tool[-1]).replace(".", "_")
        d.mkdir()
        f = str(d / "users")
        r = subprocess.run(tool + ["-b", f, "alice", "one"], capture_output=True, text=True,
                           timeout=60, cwd=ROOT, env=procs.python_env(), stdin=subprocess.DEVNULL)
        assert r.returncode != 0 and os.listdir(str(d)) == [], (tool, r)
        assert "nable to open password file" in r.stdout + r.stderr, (tool, r)
        r = subprocess.run(tool + ["-c", "-b", f, "alice", "one"], capture_output=True,
                           text=True, timeout=60, cwd=ROOT, env=procs.python_env())
        assert r.returncode == 0 and os.listdir(str(d)) == ["users"], (tool, r)


def test_passwd_delete_from_a_missing_file_makes_none(tmp_path):
    # as mosquitto_passwd: "Unable to open password file", nothing created
    f = str(tmp_path / "typo-users")
    r = run("umqtt3_cli.passwd", "-D", f, "bob")
    assert r.returncode == 1
    refused(r, "unable to open password file %s: No such file or directory" % f)
    assert os.listdir(str(tmp_path)) == []


def test_broker_lets_in_exactly_the_users_of_the_file(tmp_path):
    from umqtt3.broker import Broker
    f = str(tmp_path / "users")
    assert run("umqtt3_cli.passwd", "-c", "-b", f, "alice", "s3cret").returncode == 0
    b = Broker(port=None, users=read_users(f), sys_interval=0)
    try:
        ok = _connect(b, "alice", "s3cret")
        bad = _connect(b, "alice", "wrong")
        assert (ok, bad) == (0, 4)
    finally:
        b.close()


def _connect(b, user, pw):
    from umqtt3.transport import Pipe
    from umqtt3.codec import encode_connect, Packet, decode
    a, end = Pipe.pair()
    b.attach(end)
    buf = bytearray(128)
    n = encode_connect(buf, 0, b"c", 4, True, 0, user=user, password=pw)
    a.write(buf, 0, n)
    for _ in range(5):
        b.poll_once(0)
    got = bytearray(4)
    a.readinto(got, 4)
    p = Packet(4)
    decode(p, got, 0, 4)
    return p.rc
