"""The broker under load and abuse: umqtt3's broker (CPython) next to
mosquitto, in the same run, each in its own process on 127.0.0.1.

    python -m tools.measure.abuse fuzz --packets 1000000 --only umqtt3
    python -m tools.measure.abuse flood --idle 1000 --seconds 30
    python -m tools.measure.abuse clients --clients 500
    python -m tools.measure.abuse slow --messages 5000 --size 8192
    python -m tools.measure.abuse sessions --sessions 200 --messages 1000 --size 4096

fuzz     mutated and random packets at protocol levels 3, 4 and 5 (bits
         flipped, bytes replaced, cut, inserted, lengths corrupted, whole
         packets of noise), over many connections at once, the CONNECT
         itself mutated on a quarter of them; a health check between
         batches. Stops at the first failed health check.
flood    --idle connections that never send CONNECT, held open and reopened
         in waves, while a new client connects every --every seconds: how
         many got their CONNACK.
clients  --clients clients connect, each subscribes to its own topic and gets
         one QoS 1 message: how long it took and how many arrived.
slow     --messages QoS 1 messages of --size bytes to a QoS 1 subscriber
         that reads nothing for the first --behind of them, then one for
         each one published, then the rest: how many arrived. A publisher
         whose connection the broker closes unacknowledged (a full queue at
         3.1.1) reconnects and sends what was not acknowledged again: how
         often is printed.
sessions --sessions persistent sessions subscribe to # at QoS 1 and go
         offline, then --messages QoS 1 messages of --size bytes are
         published to them, one at a time (amplification: each is queued
         once per session). A message refused (3.1.1: the connection closed
         unacknowledged) is counted and not sent again. Then --check of the
         sessions come back: each must get every acknowledged message, in
         order, once; then every session ends. The broker's RSS shows what
         holding the messages costs.
(Fan-out to persistent sessions with a store: python -m tools.measure.fanout.)

Every run prints the broker's RSS (before, at the peak, after) and a health
check: a new client connects, subscribes, and gets its own QoS 1 message
within 5 s. Each is bounded by --seconds. The umqtt3 broker runs with the
CLI's defaults unless a run needs more clients (clients); mosquitto with a
generated config (listener, allow_anonymous true, log_dest none). The
script prints and asserts nothing; its exit status is 1 when a broker
crashed or failed a health check.
"""
import os
import random
import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from tools import args, procs
from umqtt3.codec import (encode_connect, encode_publish, encode_subscribe, encode_unsubscribe,
                          encode_ack, encode_simple, frame_len, PUBACK, PUBREC, PUBREL,
                          PUBCOMP, PINGREQ, DISCONNECT)

PROG = "python -m tools.measure.abuse"


# ---------------------------------------------------------------- brokers

class Broker:
    """A broker process on 127.0.0.1 and a free port."""

    def __init__(self, name, extra=(), tmp=None):
        self.name = name
        self.port = procs.free_port()
        if name == "umqtt3":
            cmd = procs.umqtt3_broker_cmd(self.port, "--quiet", "--sys-interval", "0", *extra)
        else:
            exe = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
            if not os.path.exists(exe):
                raise RuntimeError("mosquitto is not installed")
            conf = os.path.join(tmp, "mosquitto-%d.conf" % self.port)
            lines = ["listener %d 127.0.0.1" % self.port, "allow_anonymous true",
                     "log_dest none"] + list(extra)
            if hasattr(os, "geteuid") and os.geteuid() == 0:
                lines.append("user root")
            with open(conf, "w") as f:
                f.write("\n".join(lines) + "\n")
            cmd = [exe, "-c", conf]
        self.p = procs.start(cmd, self.port, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        self.peak = 0

    def alive(self):
        return self.p.poll() is None

    def rss(self):
        """The broker's resident set, in KB (0 when it is gone)."""
        try:
            with open("/proc/%d/status" % self.p.pid) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        kb = int(line.split()[1])
                        self.peak = max(self.peak, kb)
                        return kb
        except OSError:
            pass
        return 0

    def stop(self):
        return procs.stop(self.p)


# ---------------------------------------------------------------- a raw client

class Client:
    """A blocking MQTT 3.1.1 client over a raw socket, packets by the codec."""

    def __init__(self, port, cid, clean=True, timeout=5.0):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray(256)
        self.rx = bytearray()
        self.send(encode_connect, cid, 4, clean, 60)
        p = self.packet()
        if p is None or p[0] >> 4 != 2 or p[3] != 0:
            raise OSError("no CONNACK 0 for %s" % cid)

    def send(self, fn, *a, **kw):
        need = 64 + sum(len(x) for x in a if isinstance(x, (bytes, bytearray)))
        if len(self.buf) < need:
            self.buf = bytearray(need)
        n = fn(self.buf, 0, *a, **kw)
        self.s.sendall(self.buf[:n])

    def packet(self):
        """The next whole packet (bytes), or None at EOF."""
        while True:
            n = frame_len(self.rx, 0, len(self.rx)) if len(self.rx) >= 2 else 0
            if n and len(self.rx) >= n:
                p = bytes(self.rx[:n])
                del self.rx[:n]
                return p
            b = self.s.recv(65536)
            if not b:
                return None
            self.rx += b

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass


def pub_id(p):
    """(topic, packet id, payload offset) of a PUBLISH frame."""
    i = 1
    while p[i] & 0x80:
        i += 1
    i += 1
    tl = p[i] << 8 | p[i + 1]
    t = p[i + 2:i + 2 + tl]
    i += 2 + tl
    pid = 0
    if p[0] >> 1 & 3:
        pid = p[i] << 8 | p[i + 1]
        i += 2
    return t, pid, i


_hc = [0]


def health(port, timeout=5.0):
    """A new client connects, subscribes, gets its own QoS 1 message:
    seconds it took, or None."""
    _hc[0] += 1
    t0 = time.monotonic()
    topic = "health/%d/%d" % (os.getpid(), _hc[0])
    try:
        c = Client(port, "health-%d-%d" % (os.getpid(), _hc[0]), timeout=timeout)
    except OSError:
        return None
    try:
        c.send(encode_subscribe, 1, topic, 1)
        c.send(encode_publish, topic, b"ok", 1, 2)
        while time.monotonic() - t0 < timeout:
            p = c.packet()
            if p is None:
                return None
            if p[0] >> 4 == 3:
                t, pid, off = pub_id(p)
                c.send(encode_ack, PUBACK, pid)
                if p[off:] == b"ok":
                    c.send(encode_simple, DISCONNECT)
                    return time.monotonic() - t0
    except OSError:
        return None
    finally:
        c.close()
    return None


# ---------------------------------------------------------------- fuzz

def seeds(rng):
    """Valid packets at levels 3, 4 and 5: (CONNECT, [others])."""
    buf = bytearray(4096)
    out = []
    for level in (3, 4, 5):
        cid = "fz%d" % rng.randrange(1 << 20)
        kw = {}
        if rng.random() < 0.3:
            kw = dict(user="u", password=b"p", will_topic="w/t", will_msg=b"bye", will_qos=1)
        if level == 5 and rng.random() < 0.5:
            kw["props"] = {0x11: 60, 0x21: 10}  # session expiry, receive maximum
        conn = bytes(buf[:encode_connect(buf, 0, cid, level, rng.random() < 0.7, 30, **kw)])
        pk = []
        for q in (0, 1, 2):
            pk.append(bytes(buf[:encode_publish(buf, 0, "a/b/%d" % q, b"x" * rng.randrange(40),
                                                 q, 1 + q, rng.random() < 0.2, level=level)]))
        pk.append(bytes(buf[:encode_subscribe(buf, 0, 7, [("a/#", 1), ("+/b", 2)], level=level)]))
        pk.append(bytes(buf[:encode_unsubscribe(buf, 0, 8, ["a/#"], level=level)]))
        for t in (PUBACK, PUBREC, PUBREL, PUBCOMP):
            pk.append(bytes(buf[:encode_ack(buf, 0, t, rng.randrange(1, 5), level=level)]))
        pk.append(bytes(buf[:encode_simple(buf, 0, PINGREQ)]))
        if level == 5:
            pk.append(b"\xf0\x02\x18\x00")  # AUTH, continue
            pk.append(b"\xe0\x02\x04\x00")  # DISCONNECT with will
        out.append((conn, pk))
    return out


def mutate(rng, p):
    b = bytearray(p)
    for _ in range(1 + int(rng.expovariate(1.0))):
        k = rng.randrange(7)
        if not b:
            b.append(rng.randrange(256))
        i = rng.randrange(len(b))
        if k == 0:
            b[i] ^= 1 << rng.randrange(8)
        elif k == 1:
            b[i] = rng.choice((0, 0xFF, 0x7F, 0x80, rng.randrange(256)))
        elif k == 2:
            del b[i:]
        elif k == 3:
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 8)))
        elif k == 4 and len(b) > 1:
            b[1] = rng.randrange(256)  # the remaining length
        elif k == 5:
            del b[i:i + rng.randrange(1, 4)]
        else:
            b[0] = rng.randrange(256)  # type and flags
    return bytes(b)


def noise(rng):
    n = rng.randrange(2, 64)
    b = bytearray(rng.randrange(256) for _ in range(n))
    if rng.random() < 0.7:
        b[1] = n - 2 if n - 2 < 128 else 127
    return bytes(b)


def fuzz(b, a, out):
    rng = random.Random(a.seed)
    pool = seeds(rng)
    sel = selectors.DefaultSelector()
    open_ = {}
    sent = conns = checks = 0
    bad = []
    rss0 = b.rss()
    t_end = time.monotonic() + a.seconds
    next_check = a.batch
    lat = []

    def start():
        nonlocal sent, conns
        conn, pk = pool[rng.randrange(len(pool))]
        data = bytearray(mutate(rng, conn) if rng.random() < 0.25 else conn)
        for _ in range(a.per_conn):
            data += noise(rng) if rng.random() < 0.1 else mutate(rng, rng.choice(pk))
        sent += a.per_conn
        conns += 1
        try:
            s = socket.create_connection(("127.0.0.1", b.port), timeout=2)
            s.setblocking(False)
            try:
                s.send(data)
            except (BlockingIOError, OSError):
                pass
            sel.register(s, selectors.EVENT_READ)
            open_[s] = time.monotonic() + 0.5
        except OSError:
            pass

    while sent < a.packets and time.monotonic() < t_end:
        while len(open_) < a.parallel:
            start()
        for key, _ in sel.select(0.05):
            s = key.fileobj
            try:
                d = s.recv(65536)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                d = b""
            if not d:
                sel.unregister(s)
                s.close()
                del open_[s]
        now = time.monotonic()
        for s in [s for s, dl in open_.items() if dl < now]:
            sel.unregister(s)
            s.close()
            del open_[s]
        if sent >= next_check:
            next_check += a.batch
            checks += 1
            h = health(b.port)
            if h is None or not b.alive():
                bad.append(sent)
                break
            lat.append(h)
            if a.progress:
                print("  %s: %d packets, %d connections, RSS %d KB, health %.0f ms"
                      % (b.name, sent, conns, b.rss(), h * 1000), flush=True)
            b.rss()
    for s in list(open_):
        sel.unregister(s)
        s.close()
    time.sleep(1.0)
    h = health(b.port)
    checks += 1
    if h is None:
        bad.append(sent)
    out.update(packets=sent, connections=conns, checks=checks, failed=len(bad),
               rss0=rss0, rss1=b.rss(), worst_ms=max(lat + [h or 0]) * 1000)
    return not bad


# ---------------------------------------------------------------- flood

def flood(b, a, out):
    rss0 = b.rss()
    idle = []

    def open_idle(n):
        k = 0
        for _ in range(n):
            try:
                s = socket.socket()
                s.setblocking(False)
                s.connect_ex(("127.0.0.1", b.port))
                idle.append(s)
                k += 1
            except OSError:
                break
        return k

    open_idle(a.idle)
    t0 = time.monotonic()
    t_end = t0 + a.seconds
    ok = tries = 0
    worst = 0.0
    reopened = 0
    next_wave = t0 + a.reopen
    i = 0
    while time.monotonic() < t_end:
        i += 1
        tries += 1
        t = time.monotonic()
        try:
            c = Client(b.port, "legit%d" % i, timeout=5)
            c.send(encode_simple, DISCONNECT)
            c.close()
            ok += 1
            worst = max(worst, time.monotonic() - t)
        except OSError:
            pass
        b.rss()
        if time.monotonic() >= next_wave:
            next_wave += a.reopen
            for s in idle:
                s.close()
            idle.clear()
            reopened += open_idle(a.idle)
        time.sleep(a.every)
    held = len(idle)
    for s in idle:
        s.close()
    time.sleep(0.5)
    h = health(b.port)
    out.update(idle=held, reopened=reopened, ok=ok, tries=tries, worst_ms=worst * 1000,
               rss0=rss0, rss_peak=b.peak, rss1=b.rss(), checks=1,
               failed=0 if h is not None else 1)
    return ok == tries and h is not None


# ---------------------------------------------------------------- many clients

def clients(b, a, out):
    rss0 = b.rss()
    t0 = time.monotonic()
    cs = []
    failed = 0
    for i in range(a.clients):
        if time.monotonic() - t0 > a.seconds:
            break
        try:
            c = Client(b.port, "many%d" % i, timeout=10)
            c.send(encode_subscribe, 1, "many/%d" % i, 1)
            cs.append(c)
        except OSError:
            failed += 1
    for c in cs:
        c.packet()  # SUBACK
    t_conn = time.monotonic() - t0
    rss_peak = b.rss()
    pub = Client(b.port, "many-pub")
    t1 = time.monotonic()
    for i in range(len(cs)):
        pub.send(encode_publish, "many/%d" % i, b"m%d" % i, 1, 1 + i % 60000)
    got = 0
    for i, c in enumerate(cs):
        try:
            p = c.packet()
            if p is not None and p[0] >> 4 == 3:
                t, pid, off = pub_id(p)
                c.send(encode_ack, PUBACK, pid)
                got += p[off:] == b"m%d" % i
        except OSError:
            pass
    t_msg = time.monotonic() - t1
    for c in cs + [pub]:
        c.close()
    time.sleep(0.5)
    h = health(b.port)
    out.update(connected=len(cs), refused=failed, connect_s=t_conn, got=got, deliver_s=t_msg,
               rss0=rss0, rss_peak=rss_peak, rss1=b.rss(), checks=1, failed=h is None)
    return h is not None


# ---------------------------------------------------------------- slow consumer

def slow(b, a, out):
    rss0 = b.rss()
    sub = Client(b.port, "slow-sub", clean=True, timeout=30)
    sub.send(encode_subscribe, 1, "slow/t", 1)
    sub.packet()
    pub = Client(b.port, "slow-pub", clean=False, timeout=30)
    payload = bytearray(a.size)
    seen = set()
    unacked = {}  # packet id -> message number, in the order sent
    closed = 0

    def take(timeout):
        # one message for the subscriber, acknowledged; False when none came
        sub.s.settimeout(timeout)
        try:
            p = sub.packet()
        except (socket.timeout, BlockingIOError):
            return False
        if p is None:
            raise OSError("the subscriber was disconnected")
        if p[0] >> 4 == 3:
            t, pid, off = pub_id(p)
            seen.add(bytes(p[off:off + 8]))
            if p[0] >> 1 & 3:
                sub.send(encode_ack, PUBACK, pid)
        return True

    def send(i, pid, dup):
        payload[:8] = b"%08d" % i
        pub.send(encode_publish, "slow/t", bytes(payload), 1, pid, False, dup)

    def reconnect():
        # closed with messages unacknowledged: the subscriber takes one,
        # then the publisher's next connection sends them again, DUP set
        nonlocal pub, closed
        for _ in range(10000):
            closed += 1
            pub.close()
            take(0.05)
            try:
                pub = Client(b.port, "slow-pub", clean=False, timeout=30)
                for pid, i in list(unacked.items()):
                    send(i, pid, True)
                return
            except OSError:
                pass  # closed again: the subscriber has not made room yet
        raise OSError("the publisher could not get its messages in")

    def ack():
        # one PUBACK, across as many reconnections as it takes
        while True:
            try:
                p = pub.packet()
            except OSError:
                p = None
            if p is None:
                reconnect()
            elif p[0] >> 4 == 4 and unacked.pop(p[2] << 8 | p[3], None) is not None:
                return

    t0 = time.monotonic()
    acked = 0
    window = 16
    for i in range(a.messages):
        pid = 1 + i % 60000
        unacked[pid] = i
        try:
            send(i, pid, False)
        except OSError:
            reconnect()
        while len(unacked) >= window:
            ack()
            acked += 1
        # the subscriber reads nothing for the first --behind messages,
        # then one for each one published: it stays that far behind
        if i >= a.behind:
            take(0.05)
        if time.monotonic() - t0 > a.seconds:
            break
    while unacked:
        ack()
        acked += 1
    t_pub = time.monotonic() - t0
    rss_peak = b.rss()
    while len(seen) < acked and take(3.0):
        pass
    sub.close()
    pub.close()
    h = health(b.port)
    out.update(published=acked, got=len(seen), publish_s=t_pub, rss0=rss0, rss_peak=rss_peak,
               rss1=b.rss(), checks=1, failed=h is None, closed=closed)
    return h is not None


# ---------------------------------------------------------------- amplification

def sessions(b, a, out):
    rss0 = b.rss()
    t0 = time.monotonic()
    for i in range(a.sessions):
        c = Client(b.port, "amp%d" % i, clean=False, timeout=10)
        c.send(encode_subscribe, 1, "#", 1)
        c.packet()  # SUBACK
        c.send(encode_simple, DISCONNECT)
        c.close()
    rss_sess = b.rss()
    payload = bytearray(a.size)
    pub = Client(b.port, "amp-pub", timeout=30)
    acked = []  # message numbers acknowledged, in order
    refused = 0
    for i in range(a.messages):
        if time.monotonic() - t0 > a.seconds:
            break
        payload[:8] = b"%08d" % i
        try:
            pub.send(encode_publish, "amp/t", bytes(payload), 1, 1 + i % 60000)
            p = pub.packet()
        except OSError:
            p = None
        if p is not None and p[0] >> 4 == 4:
            acked.append(i)
        else:
            refused += 1  # closed unacknowledged (or a refusing PUBACK)
            pub.close()
            pub = Client(b.port, "amp-pub", timeout=30)
        if i % 20 == 0:
            b.rss()
    t_pub = time.monotonic() - t0
    pub.close()
    rss_held = b.rss()
    want = [b"%08d" % i for i in acked]
    good = 0
    for i in range(min(a.check, a.sessions)):
        c = Client(b.port, "amp%d" % i, clean=False, timeout=10)
        got = []
        try:
            while len(got) < len(want):
                p = c.packet()
                if p is None:
                    break
                if p[0] >> 4 == 3:
                    t, pid, off = pub_id(p)
                    if p[0] >> 1 & 3:
                        c.send(encode_ack, PUBACK, pid)
                    if t == b"amp/t":
                        got.append(bytes(p[off:off + 8]))
        except OSError:
            pass
        c.send(encode_simple, DISCONNECT)
        c.close()
        good += got == want
    # the sessions end (CleanSession 1): what they held is let go, and the
    # health check's QoS 1 message finds no full queue on #
    for i in range(a.sessions):
        try:
            c = Client(b.port, "amp%d" % i, clean=True, timeout=10)
            c.send(encode_simple, DISCONNECT)
            c.close()
        except OSError:
            pass
    time.sleep(0.5)
    h = health(b.port)
    out.update(sessions=a.sessions, size=a.size, messages=len(acked) + refused, acked=len(acked),
               refused=refused, publish_s=t_pub, checked=min(a.check, a.sessions), whole=good,
               rss0=rss0, rss_sess=rss_sess, rss_held=rss_held, rss_peak=b.peak,
               rss1=b.rss(), checks=1, failed=h is None)
    return h is not None


# ---------------------------------------------------------------- the run

JOBS = {"fuzz": fuzz, "flood": flood, "clients": clients, "slow": slow, "sessions": sessions}


def broker_args(job, a, name, tmp):
    if name == "umqtt3":
        extra = list(a.umqtt3_args)
        if job == "clients":
            extra += ["--max-clients", str(a.clients + 10)]
        return extra
    extra = list(a.mosquitto_conf)
    if job == "clients":
        extra.append("max_connections -1")
    return extra


def report(job, name, ok, r):
    rss = "RSS %d KB -> %d KB" % (r.get("rss0", 0), r.get("rss1", 0))
    if "rss_peak" in r:
        rss = "RSS %d KB, peak %d KB, after %d KB" % (r["rss0"], r["rss_peak"], r["rss1"])
    if job == "fuzz":
        what = ("%d mutated packets over %d connections; health checks %d, failed %d; "
                "worst health check %.0f ms" % (r["packets"], r["connections"], r["checks"],
                                                r["failed"], r["worst_ms"]))
    elif job == "flood":
        what = ("%d idle connections held, %d reopened; new clients connected %d of %d, "
                "slowest %.0f ms" % (r["idle"], r["reopened"], r["ok"], r["tries"],
                                     r["worst_ms"]))
    elif job == "sessions":
        what = ("%d persistent sessions on #, %d QoS 1 messages of %d bytes: %d acknowledged, "
                "%d refused, in %.1f s; %d of %d sessions checked got every acknowledged "
                "message; RSS %d KB, %d KB with the sessions, %d KB holding the messages "
                "(peak %d KB)" % (r["sessions"], r["messages"], r["size"], r["acked"],
                                  r["refused"], r["publish_s"], r["whole"], r["checked"],
                                  r["rss0"], r["rss_sess"], r["rss_held"], r["rss_peak"]))
        rss = "RSS after %d KB" % r["rss1"]
    elif job == "clients":
        what = ("%d clients connected and subscribed in %.2f s (%d refused); %d of %d got "
                "their message in %.2f s" % (r["connected"], r["connect_s"], r["refused"],
                                             r["got"], r["connected"], r["deliver_s"]))
    else:
        what = ("%d QoS 1 messages acknowledged to the publisher in %.1f s (its connection "
                "closed unacknowledged %d times); the subscriber that fell behind got %d"
                % (r["published"], r["publish_s"], r["closed"], r["got"]))
    print("%-10s %s; %s; health %s" % (name, what, rss, "ok" if ok else "FAILED"), flush=True)


def main(argv=None):
    ap = args.parser(PROG, __doc__)
    ap.add_argument("job", choices=sorted(JOBS))
    ap.add_argument("--only", default="umqtt3,mosquitto",
                    help="brokers, comma-separated: umqtt3, mosquitto")
    ap.add_argument("--seconds", type=args.positive, default=60.0,
                    help="the most a run takes per broker")
    ap.add_argument("--packets", type=args.count, default=100000, help="fuzz: packets to send")
    ap.add_argument("--per-conn", type=args.count, default=20, help="fuzz: packets per connection")
    ap.add_argument("--parallel", type=args.count, default=32,
                    help="fuzz: connections open at once")
    ap.add_argument("--batch", type=args.count, default=20000,
                    help="fuzz: packets between health checks")
    ap.add_argument("--seed", type=int, default=1, help="fuzz: random seed")
    ap.add_argument("--progress", action="store_true", help="fuzz: print each health check")
    ap.add_argument("--idle", type=args.count, default=1000, help="flood: idle connections")
    ap.add_argument("--reopen", type=args.positive, default=5.0,
                    help="flood: seconds between waves of reopened idle connections")
    ap.add_argument("--every", type=args.not_negative, default=0.1,
                    help="flood: seconds between new clients")
    ap.add_argument("--clients", type=args.count, default=500, help="clients: how many")
    ap.add_argument("--messages", type=args.count, default=5000,
                    help="slow, sessions: QoS 1 messages")
    ap.add_argument("--size", type=args.count, default=8192, help="slow, sessions: payload bytes")
    ap.add_argument("--sessions", type=args.count, default=200,
                    help="sessions: persistent sessions")
    ap.add_argument("--check", type=args.count, default=5,
                    help="sessions: sessions drained and checked at the end")
    ap.add_argument("--behind", type=args.count, default=1000,
                    help="slow: messages the subscriber falls behind")
    ap.add_argument("--umqtt3-args", default="", help="more flags for python -m umqtt3.broker")
    ap.add_argument("--mosquitto-conf", default="",
                    help="more mosquitto.conf lines, separated by ';'")
    a = ap.parse_args(argv)
    names = [n.strip() for n in a.only.split(",") if n.strip()]
    for n in names:
        if n not in ("umqtt3", "mosquitto"):
            ap.error("--only: unknown broker %r (umqtt3, mosquitto)" % n)
    if not names:
        ap.error("--only names no broker")
    if "mosquitto" in names and not (shutil.which("mosquitto") or
                                     os.path.exists("/usr/sbin/mosquitto")):
        ap.error("mosquitto is not installed (--only umqtt3 runs without it)")
    a.umqtt3_args = a.umqtt3_args.split()
    a.mosquitto_conf = [x.strip() for x in a.mosquitto_conf.split(";") if x.strip()]
    print("%s %s (load: %s)" % (PROG, " ".join(argv if argv is not None else sys.argv[1:]),
                                os.getloadavg()[0]), flush=True)
    good = True
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            b = Broker(name, broker_args(a.job, a, name, tmp), tmp)
            r = {}
            try:
                ok = JOBS[a.job](b, a, r) and b.alive()
            except OSError as e:
                ok = False
                r = {}
                print("%-10s %s: %s" % (name, a.job, e), flush=True)
            finally:
                alive = b.alive()
                b.stop()
            if r:
                report(a.job, name, ok, r)
            if not alive:
                print("%-10s CRASHED (exit status %s)" % (name, b.p.returncode), flush=True)
            good = good and ok and alive
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
