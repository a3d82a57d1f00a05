# The same ACL file on this broker and on Debian's mosquitto, with paho
# clients: what each client receives is the same.
# - client id "+" under "pattern readwrite devices/%c/#" reads no device's
#   topics (CVE-2017-7650);
# - "topic read #" reads no $SYS topic [MQTT-4.7.2-1];
# - docs/broker.md's ACL example grants what it says;
# - under "topic read #" and "topic deny secret/#", "+/x" and "#" are
#   granted and deliver no secret/ topic, retained ones neither;
# - that deny, added while the broker was down, holds for a persistent
#   session's stored subscriptions;
# - after a restart, a persistent session under "pattern read in/%u/#"
#   queues what its user may read while its client is away, and gets it
#   when the client comes back (the store keeps the user name).
import queue
import re
import threading
import time

import pytest

from tools import procs

mqtt = pytest.importorskip("paho.mqtt.client")
TIMEOUT = 10


class Client:
    def __init__(self, port, cid, user=None, pw=None, clean=True):
        self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=cid,
                             protocol=mqtt.MQTTv311, clean_session=clean)
        if user is not None:
            self.c.username_pw_set(user, pw)
        self.q = queue.Queue()
        self.acks = queue.Queue()
        self.up = threading.Event()
        self.present = None

        def on_connect(c, u, f, rc, p):
            self.present = f.session_present
            self.up.set()
        self.c.on_connect = on_connect
        self.c.on_message = lambda c, u, m: self.q.put((m.topic, bytes(m.payload)))
        self.c.on_subscribe = lambda c, u, mid, codes, p: self.acks.put([int(x.value) for x in codes])
        self.c.connect("127.0.0.1", port, 30)
        self.c.loop_start()
        assert self.up.wait(TIMEOUT), "no CONNACK"

    def sub(self, topic, qos=0):
        self.c.subscribe(topic, qos)
        return self.acks.get(timeout=TIMEOUT)

    def pub(self, topic, payload, qos=1):
        self.c.publish(topic, payload, qos).wait_for_publish(TIMEOUT)

    def got(self, wait=0.5):
        time.sleep(wait)
        out = []
        while not self.q.empty():
            out.append(self.q.get())
        return out

    def close(self):
        self.c.disconnect()
        self.c.loop_stop()


def both(tmp_path, broker_factory, acl, users=None, ours=(), theirs=()):
    """(mosquitto's port, ours, our process) with the ACL file acl."""
    f = tmp_path / "acl"
    f.write_text(acl)
    extra = ["acl_file %s" % f] + list(theirs)
    args = ["--acl-file", str(f), "--quiet"] + list(ours)
    if users:
        pw = tmp_path / "passwd"
        pw.write_text("".join("%s:%s\n" % u for u in users))
        import subprocess
        subprocess.run(["mosquitto_passwd", "-U", str(pw)], check=True, timeout=30)
        extra.append("password_file %s" % pw)
        args += ["--users", str(pw), "--allow-anonymous"]
    m = broker_factory(extra=extra)
    port = procs.free_port()
    p = procs.start(procs.umqtt3_broker_cmd(port, *args), port)
    return m.port, port, p


def test_client_id_plus_reads_no_device(tmp_path, broker_factory):
    mp, up, p = both(tmp_path, broker_factory, "pattern readwrite devices/%c/#\n")
    try:
        got = {}
        for name, port in (("mosquitto", mp), ("umqtt3", up)):
            spy = Client(port, "+")
            spy.sub("devices/+/#")
            dev = Client(port, "dev7")
            dev.sub("devices/dev7/cmd")
            dev.pub("devices/dev7/secret", b"s3cret")
            w = Client(port, "#")
            w.pub("devices/dev7/cmd", b"unlock")
            dev.pub("devices/dev7/cmd", b"mine")
            got[name] = (spy.got(), dev.got(0.1))
            for c in (spy, dev, w):
                c.close()
        assert got["mosquitto"] == ([], [("devices/dev7/cmd", b"mine")])
        assert got["umqtt3"] == got["mosquitto"]
    finally:
        procs.stop(p)


def test_read_everything_reads_no_sys(tmp_path, broker_factory):
    # $SYS every second on both; "topic read $SYS/#" is what grants it
    got = {}
    for acl in ("topic read #\n", "topic read #\ntopic read $SYS/#\n"):
        mp, up, p = both(tmp_path, broker_factory, acl, ours=["--sys-interval", "1"],
                         theirs=["sys_interval 1"])
        try:
            for name, port in (("mosquitto", mp), ("umqtt3", up)):
                c = Client(port, "spy")
                c.sub("$SYS/#")
                got[name, acl] = len(c.got(2.5))
                c.close()
        finally:
            procs.stop(p)
    assert got["mosquitto", "topic read #\n"] == got["umqtt3", "topic read #\n"] == 0
    assert got["mosquitto", "topic read #\ntopic read $SYS/#\n"] > 0
    assert got["umqtt3", "topic read #\ntopic read $SYS/#\n"] > 0


def test_documented_example_grants_what_it_says(tmp_path, broker_factory):
    doc = open(procs.ROOT + "/docs/broker.md").read()
    acl = re.search(r"## Access control.*?```\n(.*?)```", doc, re.S).group(1)
    mp, up, p = both(tmp_path, broker_factory, acl, users=[("alice", "pw")])
    try:
        got = {}
        for name, port in (("mosquitto", mp), ("umqtt3", up)):
            a = Client(port, "dev1", "alice", "pw")
            a.sub("home/kitchen")
            a.sub("home/secret")
            a.pub("home/kitchen", b"on")
            a.pub("home/secret", b"no")
            a.pub("devices/alice/dev1/t", b"21")  # pattern write: published, not read
            anon = Client(port, "anon")
            anon.sub("public/#")
            a.pub("public/news", b"not alice's to write")
            got[name] = (a.got(), anon.got(0.1))
            a.close()
            anon.close()
        assert got["umqtt3"] == ([("home/kitchen", b"on")], [])
        assert got["mosquitto"] == got["umqtt3"]
    finally:
        procs.stop(p)


def test_inline_comment_refused_in_one_line(tmp_path):
    from refusal import run
    f = tmp_path / "acl"
    f.write_text("user alice\ntopic readwrite home/#          # read, write\n")
    r = run("umqtt3.broker", "--acl-file", str(f), "--port", "0")
    lines = r.stderr.strip().splitlines()
    assert r.returncode != 0 and "Traceback" not in r.stderr and len(lines) == 1, r.stderr
    assert "line 2:" in lines[0] and "comment" in lines[0]


DENY = "topic read #\ntopic deny secret/#\nuser dev\ntopic readwrite #\n"


def test_partly_denied_filters_deliver_as_mosquitto(tmp_path, broker_factory):
    mp, up, p = both(tmp_path, broker_factory, DENY, users=[("dev", "devpw")])
    try:
        got = {}
        for name, port in (("mosquitto", mp), ("umqtt3", up)):
            dev = Client(port, "dev1", "dev", "devpw")
            dev.c.publish("secret/r", b"kept", 1, True).wait_for_publish(TIMEOUT)
            dev.c.publish("public/r", b"kept", 1, True).wait_for_publish(TIMEOUT)
            spy = Client(port, "spy")
            codes = [spy.sub("+/x"), spy.sub("+/r"), spy.sub("#"), spy.sub("secret/#")]
            retained = spy.got()
            for t in ("secret/x", "public/x", "secret/a/x"):
                dev.pub(t, b"m")
            got[name] = (sorted(set(retained)), sorted(set(spy.got())), codes)
            for t in ("secret/r", "public/r"):
                dev.c.publish(t, b"", 1, True).wait_for_publish(TIMEOUT)
            dev.close()
            spy.close()
        want = ([("public/r", b"kept")], [("public/x", b"m")])
        assert got["umqtt3"][:2] == got["mosquitto"][:2] == want
        # granted as mosquitto grants them, but for the filter the deny
        # covers: 0x80 here, granted (delivering nothing) there
        assert got["umqtt3"][2] == [[0], [0], [0], [128]]
        assert got["mosquitto"][2] == [[0], [0], [0], [0]]
    finally:
        procs.stop(p)


def test_deny_added_while_down_holds_for_stored_subscriptions(tmp_path, broker_factory):
    acl = tmp_path / "acl"
    acl.write_text("topic read #\nuser dev\ntopic readwrite #\n")
    pw = tmp_path / "passwd"
    pw.write_text("dev:devpw\n")
    import subprocess
    subprocess.run(["mosquitto_passwd", "-U", str(pw)], check=True, timeout=30)
    m = broker_factory(persistence=True, extra=["acl_file %s" % acl, "password_file %s" % pw])
    port = procs.free_port()
    args = procs.umqtt3_broker_cmd(port, "--acl-file", str(acl), "--users", str(pw),
                                   "--allow-anonymous", "--store", str(tmp_path / "store"), "--quiet")
    p = procs.start(args, port)
    try:
        for bport in (m.port, port):
            spy = Client(bport, "spy", clean=False)
            assert spy.sub("secret/#", 1) == [1] and spy.sub("#", 1) == [1]
            spy.close()
        m.stop()
        procs.stop(p)
        acl.write_text(DENY)  # revoked while both were down
        m.start()
        p = procs.start(args, port)
        got = {}
        for name, bport in (("mosquitto", m.port), ("umqtt3", port)):
            spy = Client(bport, "spy", clean=False)
            assert spy.present
            dev = Client(bport, "dev1", "dev", "devpw")
            dev.pub("secret/k", b"key")
            dev.pub("public/k", b"ok")
            got[name] = sorted(set(spy.got()))
            dev.close()
            spy.close()
        assert got["umqtt3"] == got["mosquitto"] == [("public/k", b"ok")]
    finally:
        procs.stop(p)


def test_restored_session_queues_for_its_user_after_a_restart(tmp_path, broker_factory):
    # Both brokers restarted with their stores: a message published while
    # the subscriber is away reaches it when it comes back [MQTT-3.1.2-4]
    # [MQTT-4.4.0-1]; its grants come from its user name ("in/%u/#"), which
    # only the session's record knows at that point.
    acl = tmp_path / "acl"
    acl.write_text("pattern read in/%u/#\nuser w\ntopic write #\n")
    pw = tmp_path / "passwd"
    pw.write_text("alice:alicepw\nw:wpw\n")
    import subprocess
    subprocess.run(["mosquitto_passwd", "-U", str(pw)], check=True, timeout=30)
    m = broker_factory(persistence=True, extra=["acl_file %s" % acl, "password_file %s" % pw])
    port = procs.free_port()
    args = procs.umqtt3_broker_cmd(port, "--acl-file", str(acl), "--users", str(pw),
                                   "--store", str(tmp_path / "store"), "--quiet")
    p = procs.start(args, port)
    try:
        for bport in (m.port, port):
            sub = Client(bport, "sub", "alice", "alicepw", clean=False)
            assert sub.sub("in/alice/#", 1) == [1]
            sub.close()
        m.stop()
        procs.stop(p)
        m.start()
        p = procs.start(args, port)
        got = {}
        for name, bport in (("mosquitto", m.port), ("umqtt3", port)):
            w = Client(bport, "w", "w", "wpw")
            w.pub("in/alice/x", b"away")
            w.pub("in/bob/x", b"not hers")
            w.close()
            sub = Client(bport, "sub", "alice", "alicepw", clean=False)
            assert sub.present
            got[name] = sub.got()
            sub.close()
        assert got["umqtt3"] == got["mosquitto"] == [("in/alice/x", b"away")]
    finally:
        procs.stop(p)
