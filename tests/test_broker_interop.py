"""Real clients against umqtt3's broker: paho-mqtt (v2 API) and Debian's
mosquitto_pub / mosquitto_sub, on 127.0.0.1 only.

QoS 0/1/2, retained messages, wills, persistent sessions and wildcards.
Every wait and every subprocess has a timeout; every client, process and
broker is stopped even when a test fails.
"""
import queue
import shutil
import signal
import subprocess
import threading
import time

import pytest

from test_broker_harness import running, wait_for

mqtt = pytest.importorskip("paho.mqtt.client")

MOSQ_PUB = shutil.which("mosquitto_pub")
MOSQ_SUB = shutil.which("mosquitto_sub")
need_mosq = pytest.mark.skipif(not (MOSQ_PUB and MOSQ_SUB), reason="mosquitto clients not installed")
TIMEOUT = 10


class Paho:
    """A paho client on its own network thread; messages land in a queue."""

    def __init__(self, port, cid, clean=True, will=None, keepalive=30):
        self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=cid, clean_session=clean)
        self.q = queue.Queue()
        self.up = threading.Event()
        self.subbed = queue.Queue()
        self.flags = None
        self.rc = None
        self.c.on_connect = self._on_connect
        self.c.on_message = lambda c, u, m: self.q.put((m.topic, bytes(m.payload), m.qos, bool(m.retain)))
        self.c.on_subscribe = lambda c, u, mid, codes, props: self.subbed.put([int(x.value) for x in codes])
        if will:
            self.c.will_set(*will)
        self.c.connect("127.0.0.1", port, keepalive=keepalive)
        self.c.loop_start()
        assert self.up.wait(TIMEOUT), "no CONNACK"

    def _on_connect(self, c, u, flags, rc, props):
        self.flags = flags
        self.rc = rc
        self.up.set()

    def sub(self, topic, qos=0):
        self.c.subscribe(topic, qos)
        return self.subbed.get(timeout=TIMEOUT)

    def pub(self, topic, payload, qos=0, retain=False):
        info = self.c.publish(topic, payload, qos, retain)
        info.wait_for_publish(TIMEOUT)
        assert info.is_published()

    def get(self, n=1, timeout=TIMEOUT):
        return [self.q.get(timeout=timeout) for _ in range(n)]

    def empty(self, wait=0.2):
        time.sleep(wait)
        return self.q.empty()

    def close(self):
        try:
            self.c.disconnect()
        finally:
            self.c.loop_stop()


class Clients:
    """Everything a test started, stopped at the end whatever happens."""

    def __init__(self, port):
        self.port = port
        self.made = []
        self.procs = []

    def paho(self, cid, **kw):
        p = Paho(self.port, cid, **kw)
        self.made.append(p)
        return p

    def sub_proc(self, *args):
        """mosquitto_sub printing 'topic|payload|qos|retain' lines."""
        cmd = [MOSQ_SUB, "-h", "127.0.0.1", "-p", str(self.port), "-F", "%t|%p|%q|%r"] + list(args)
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.procs.append(p)
        return p

    def pub_cmd(self, *args):
        cmd = [MOSQ_PUB, "-h", "127.0.0.1", "-p", str(self.port)] + list(args)
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)
        assert r.returncode == 0, r.stderr
        return r

    def sub_cmd(self, *args):
        cmd = [MOSQ_SUB, "-h", "127.0.0.1", "-p", str(self.port), "-F", "%t|%p|%q|%r"] + list(args)
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)
        return r

    def close(self):
        for p in self.made:
            try:
                p.close()
            except Exception:
                pass
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            try:
                p.communicate(timeout=5)
            except Exception:
                pass


class env:
    """A broker with the CLI's desktop limits (real clients burst 20 QoS 1/2
    messages at once), its clients, and their clean-up."""

    def __init__(self, **kw):
        kw.setdefault("max_inflight", 32)
        kw.setdefault("max_queued", 1000)
        kw.setdefault("max_packet", 65536)
        self.kw = kw

    def __enter__(self):
        self.run = running(**self.kw)
        self.b = self.run.__enter__()
        self.c = Clients(self.b.port)
        return self.b, self.c

    def __exit__(self, *exc):
        try:
            self.c.close()
        finally:
            self.run.__exit__(*exc)


def lines(proc, n, timeout=TIMEOUT):
    """n output lines of a running mosquitto_sub, split on '|'."""
    out = []
    box = []

    def reader():
        for _ in range(n):
            ln = proc.stdout.readline()
            if not ln:
                break
            box.append(ln.rstrip("\n").split("|"))

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    t.join(timeout)
    out.extend(box)
    return out


# ---------------------------------------------------------------- paho

def test_paho_qos_0_1_2_roundtrip():
    with env() as (b, c):
        s = c.paho("psub")
        assert s.sub("t/#", 2) == [2]
        p = c.paho("ppub")
        for q in (0, 1, 2):
            p.pub("t/%d" % q, b"m%d" % q, q)
        got = sorted(s.get(3))
        assert got == [("t/0", b"m0", 0, False), ("t/1", b"m1", 1, False), ("t/2", b"m2", 2, False)]


def test_paho_large_messages_grow_the_buffers():
    # a connected client's buffers start small (broker.TX_START, a socket
    # gulp for the receive buffer) and grow to what a message needs, up to
    # max_packet: 60 KB messages, cut across many reads, arrive whole
    with env() as (b, c):
        s = c.paho("bsub")
        assert s.sub("big/#", 1) == [1]
        p = c.paho("bpub")
        conn = b.sessions()[b"bsub"].client.conn
        assert len(conn.tx) <= 4096 and len(b.sessions()[b"bpub"].client.conn.rx) <= 16384
        sizes = [10, 60000, 30000, 60000]
        for i, n in enumerate(sizes):
            p.pub("big/%d" % i, bytes([65 + i]) * n, 1)
        got = s.get(len(sizes))
        assert [(t, len(m), m[:1]) for t, m, _, _ in got] == \
            [("big/%d" % i, n, bytes([65 + i])) for i, n in enumerate(sizes)]
        assert len(conn.tx) > 4096 and len(b.sessions()[b"bpub"].client.conn.rx) == 65536


def test_paho_granted_qos_caps_delivery():
    with env() as (b, c):
        s = c.paho("psub")
        assert s.sub("t", 1) == [1]
        p = c.paho("ppub")
        p.pub("t", b"x", 2)
        assert s.get()[0][2] == 1


def test_paho_retained():
    with env() as (b, c):
        p = c.paho("ppub")
        p.pub("cfg/a", b"1", 1, retain=True)
        p.pub("cfg/b", b"2", 2, retain=True)
        p.pub("cfg/b", b"", 0, retain=True)  # clears cfg/b
        s = c.paho("psub")
        s.sub("cfg/#", 2)
        assert s.get() == [("cfg/a", b"1", 1, True)]
        assert s.empty()
        p.pub("cfg/a", b"live", 1, retain=True)
        assert s.get() == [("cfg/a", b"live", 1, False)]


def test_paho_will_on_lost_connection():
    with env() as (b, c):
        w = c.paho("watch")
        w.sub("status/#", 1)
        dev = Paho(b.port, "dev", will=("status/dev", b"offline", 1, True))
        dev.c.loop_stop()
        dev.c.socket().close()  # gone without DISCONNECT
        assert w.get() == [("status/dev", b"offline", 1, False)]
        late = c.paho("late")
        late.sub("status/#", 1)
        assert late.get() == [("status/dev", b"offline", 1, True)]


def test_paho_no_will_on_disconnect():
    with env() as (b, c):
        w = c.paho("watch")
        w.sub("status/#", 1)
        dev = Paho(b.port, "dev", will=("status/dev", b"offline", 1, False))
        dev.close()
        assert w.empty(0.3)


def test_paho_persistent_session():
    with env() as (b, c):
        s = Paho(b.port, "keeper", clean=False)
        assert not s.flags.session_present
        s.sub("q/#", 2)
        s.close()
        p = c.paho("ppub")
        for i in range(5):
            p.pub("q/%d" % i, b"%d" % i, 1 + i % 2)
        p.pub("q/zero", b"z", 0)  # not queued for an offline session
        s = c.paho("keeper", clean=False)
        assert s.flags.session_present
        got = s.get(5)
        # in order per QoS (paho hands a QoS 2 message over on PUBREL, so
        # the two streams interleave differently in the callback)
        assert [m[1] for m in got if m[2] == 1] == [b"0", b"2", b"4"]
        assert [m[1] for m in got if m[2] == 2] == [b"1", b"3"]
        assert s.empty()


def test_paho_wildcards_and_takeover():
    with env() as (b, c):
        s = c.paho("w")
        s.sub("home/+/temp", 0)
        p = c.paho("ppub")
        for t in ("home/kitchen/temp", "home/kitchen/hum", "home/a/b/temp", "home//temp"):
            p.pub(t, t.encode(), 0)
        got = [m[0] for m in s.get(2)]
        assert got == ["home/kitchen/temp", "home//temp"]
        assert s.empty()


# ---------------------------------------------------------------- mosquitto clients

@need_mosq
def test_mosquitto_pub_sub_qos_levels():
    with env() as (b, c):
        sp = c.sub_proc("-t", "m/#", "-q", "2", "-C", "3", "-W", str(TIMEOUT))
        assert wait_for(lambda: any(s.filters for s in b.sessions().values()))
        for q in (0, 1, 2):
            c.pub_cmd("-t", "m/%d" % q, "-m", "v%d" % q, "-q", str(q))
        out = lines(sp, 3)
        assert out == [["m/0", "v0", "0", "0"], ["m/1", "v1", "1", "0"], ["m/2", "v2", "2", "0"]]


@need_mosq
def test_mosquitto_retained():
    with env() as (b, c):
        c.pub_cmd("-t", "r/x", "-m", "kept", "-q", "1", "-r")
        r = c.sub_cmd("-t", "r/#", "-q", "1", "-C", "1", "-W", str(TIMEOUT))
        assert r.stdout.splitlines() == ["r/x|kept|1|1"]
        c.pub_cmd("-t", "r/x", "-n", "-r")  # empty retained message clears
        # mosquitto_pub exits once its QoS 0 PUBLISH is written, maybe before
        # the broker's thread has read it
        assert wait_for(lambda: b"r/x" not in b.retained)
        r = c.sub_cmd("-t", "r/#", "-W", "1")
        assert r.stdout == ""


@need_mosq
def test_mosquitto_will_on_kill():
    with env() as (b, c):
        w = c.paho("watch")
        w.sub("wills/#", 1)
        sp = c.sub_proc("-i", "victim", "-t", "x", "--will-topic", "wills/victim",
                        "--will-payload", "died", "--will-qos", "1")
        assert wait_for(lambda: b"victim" in b.sessions())
        sp.send_signal(signal.SIGKILL)
        sp.wait(TIMEOUT)
        assert w.get() == [("wills/victim", b"died", 1, False)]


@need_mosq
def test_mosquitto_persistent_session():
    with env() as (b, c):
        # subscribe with a persistent session, then leave (-E: exit once subscribed)
        r = c.sub_cmd("-c", "-i", "offline-sub", "-q", "1", "-t", "inbox/#", "-E")
        assert r.returncode == 0, r.stderr
        assert wait_for(lambda: b"offline-sub" in b.sessions() and
                        b.sessions()[b"offline-sub"].client is None)
        for i in range(3):
            c.pub_cmd("-t", "inbox/%d" % i, "-m", "msg%d" % i, "-q", "1")
        r = c.sub_cmd("-c", "-i", "offline-sub", "-q", "1", "-t", "inbox/#", "-C", "3", "-W", str(TIMEOUT))
        assert r.stdout.splitlines() == ["inbox/0|msg0|1|0", "inbox/1|msg1|1|0", "inbox/2|msg2|1|0"]


@need_mosq
def test_mosquitto_wildcards_and_sys():
    with env(sys_interval=60) as (b, c):
        sp = c.sub_proc("-t", "a/+/c", "-t", "b/#", "-C", "3", "-W", str(TIMEOUT))
        assert wait_for(lambda: any(len(s.filters) == 2 for s in b.sessions().values()))
        for t in ("a/x/c", "a/x/d", "b", "b/1/2", "c"):
            c.pub_cmd("-t", t, "-m", t)
        assert [ln[0] for ln in lines(sp, 3)] == ["a/x/c", "b", "b/1/2"]
        r = c.sub_cmd("-t", "$SYS/broker/version", "-C", "1", "-W", str(TIMEOUT))
        assert r.stdout.startswith("$SYS/broker/version|umqtt3")


@need_mosq
def test_mosquitto_pub_to_paho_qos2_many():
    with env() as (b, c):
        s = c.paho("sink")
        s.sub("bulk", 2)
        r = subprocess.run([MOSQ_PUB, "-h", "127.0.0.1", "-p", str(b.port), "-t", "bulk", "-q", "2", "-l"],
                           input="".join("line%d\n" % i for i in range(50)), capture_output=True,
                           text=True, timeout=TIMEOUT)
        assert r.returncode == 0, r.stderr
        got = s.get(50)
        assert [m[1] for m in got] == [b"line%d" % i for i in range(50)]
        assert all(m[2] == 2 for m in got)
        assert s.empty()
