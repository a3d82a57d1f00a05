"""Fan-out to persistent sessions with a store: umqtt3's broker (CPython,
--store) next to mosquitto (persistence on), in the same run, each in its
own process on 127.0.0.1.

    python -m tools.measure.fanout
    python -m tools.measure.fanout --sessions 500 --online 250 --messages 200

SESSIONS persistent sessions (CleanSession 0) subscribe to fan/# at QoS 1;
the first ONLINE of them stay connected and acknowledge what they get, the
others go offline (their messages are queued, on the store). Then a
publisher sends MESSAGES QoS 1 messages of SIZE bytes to fan/x (fewer than
either broker queues per session by default), WINDOW of them unacknowledged
at most, for SECONDS at most, while a separate well-behaved client (clean
session, its own topic) publishes a QoS 1 message to itself every 50 ms and
times the round trip: its PUBLISH out, its PUBACK and its own message back.
Printed per broker: the round trip (p50, p95, max), the fanned-out messages
acknowledged per second, the broker's RSS (before, peak) and what the
broker process wrote (/proc/PID/io: write_bytes, the bytes that reached
the disk; wchar, every write call, the store's and the sockets') per
fanned-out message.

mosquitto runs with `persistence true` and its default autosave (it writes
its database at exit and every autosave_interval, not per message: its
figure is not a durability peer, only the round trip's). The umqtt3 broker
makes every acknowledged message durable before its acknowledgement
leaves. The script prints and asserts nothing; its exit status is 1 when a
broker crashed or a client was cut off.
"""
import os
import selectors
import socket
import sys
import tempfile
import threading
import time

from tools import args
from tools.measure.abuse import Broker, Client, pub_id
from umqtt3.codec import (encode_publish, encode_subscribe, encode_ack, encode_simple, PUBACK,
                          DISCONNECT)

PROG = "python -m tools.measure.fanout"


def io(pid):
    """(write_bytes, wchar) of process pid so far."""
    r = {}
    try:
        with open("/proc/%d/io" % pid) as f:
            for line in f:
                k, v = line.split(":")
                r[k] = int(v)
    except OSError:
        pass
    return r.get("write_bytes", 0), r.get("wchar", 0)


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


class Online(threading.Thread):
    """The connected sessions: read everything, acknowledge each QoS 1."""

    def __init__(self, cs):
        threading.Thread.__init__(self, daemon=True)
        self.cs = cs
        self.got = 0
        self.cut = 0
        self.stop = False

    def run(self):
        sel = selectors.DefaultSelector()
        for c in self.cs:
            c.s.setblocking(False)
            sel.register(c.s, selectors.EVENT_READ, c)
        while not self.stop:
            for key, _ in sel.select(0.1):
                c = key.data
                try:
                    b = c.s.recv(65536)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    b = b""
                if not b:
                    sel.unregister(c.s)
                    self.cut += 1
                    continue
                c.rx += b
                out = bytearray()
                while len(c.rx) >= 2:
                    from umqtt3.codec import frame_len
                    n = frame_len(c.rx, 0, len(c.rx))
                    if not n or len(c.rx) < n:
                        break
                    p = bytes(c.rx[:n])
                    del c.rx[:n]
                    if p[0] >> 4 == 3:
                        self.got += 1
                        if p[0] & 6:
                            t, pid, off = pub_id(p)
                            out += bytes((0x40, 2, pid >> 8, pid & 255))
                if out:
                    c.s.setblocking(True)
                    try:
                        c.s.sendall(out)
                    except OSError:
                        pass
                    c.s.setblocking(False)
        sel.close()


class Publisher(threading.Thread):
    """QoS 1 messages to fan/x, window unacknowledged at most."""

    def __init__(self, port, size, window, messages):
        threading.Thread.__init__(self, daemon=True)
        self.messages = messages
        self.t = 0.0
        self.c = Client(port, "fan-pub", clean=True, timeout=30)
        self.payload = b"x" * size
        self.window = window
        self.acked = 0
        self.stop = False
        self.failed = None

    def run(self):
        c = self.c
        sent = 0
        t0 = time.monotonic()
        try:
            while not self.stop and self.acked < self.messages:
                while sent - self.acked < self.window and sent < self.messages:
                    sent += 1
                    c.send(encode_publish, "fan/x", self.payload, 1, 1 + sent % 60000)
                p = c.packet()
                if p is None:
                    self.failed = "connection closed"
                    return
                if p[0] >> 4 == 4:
                    self.acked += 1
        except OSError as e:
            self.failed = str(e)
        self.t = time.monotonic() - t0


def probe(port, seconds, pub, every=0.05):
    """Round trips (s) of a QoS 1 message to the probe's own topic."""
    c = Client(port, "fan-probe", clean=True, timeout=10)
    c.send(encode_subscribe, 1, "probe/rt", 1)
    c.packet()  # SUBACK
    rts = []
    pid = 1
    end = time.monotonic() + seconds
    # at least one round trip, even when the publisher is done first
    while not rts or (time.monotonic() < end and pub.is_alive()):
        pid = pid % 60000 + 1
        t0 = time.monotonic()
        c.send(encode_publish, "probe/rt", b"ping", 1, pid)
        acked = back = False
        while not (acked and back):
            p = c.packet()
            if p is None:
                raise OSError("probe cut off")
            if p[0] >> 4 == 4:
                acked = True
            elif p[0] >> 4 == 3:
                t, rpid, off = pub_id(p)
                c.send(encode_ack, PUBACK, rpid)
                back = True
        rts.append(time.monotonic() - t0)
        time.sleep(max(0.0, every - (time.monotonic() - t0)))
    c.send(encode_simple, DISCONNECT)
    c.close()
    return rts


def run(name, a, tmp):
    store = os.path.join(tmp, name + "-store")
    os.mkdir(store)
    if name == "umqtt3":
        extra = ["--store", store, "--max-sessions", str(a.sessions + 10),
                 "--max-clients", str(a.sessions + 10)]
    else:
        extra = ["persistence true", "persistence_location %s/" % store,
                 "max_connections -1", "max_queued_messages 1000"]
    b = Broker(name, extra, tmp)
    try:
        rss0 = b.rss()
        t0 = time.monotonic()
        online = []
        for i in range(a.sessions):
            c = Client(b.port, "fan%d" % i, clean=False, timeout=30)
            c.send(encode_subscribe, 1, "fan/#", 1)
            c.packet()  # SUBACK
            if i < a.online:
                online.append(c)
            else:
                c.send(encode_simple, DISCONNECT)
                c.close()
        t_make = time.monotonic() - t0
        drain = Online(online)
        drain.start()
        w0 = io(b.p.pid)
        pub = Publisher(b.port, a.size, a.window, a.messages)
        pub.start()
        rts = probe(b.port, a.seconds, pub)
        pub.stop = True
        pub.join(5)
        n = pub.acked
        dt = pub.t or a.seconds
        w1 = io(b.p.pid)
        peak = max(b.rss(), b.peak)
        drain.stop = True
        drain.join(2)
        for c in online + [pub.c]:
            c.close()
        ok = b.alive() and pub.failed is None and not drain.cut
        per = max(n, 1)
        print("%-10s %d sessions (%d online, %d offline) made in %.1f s; %d fanned-out messages "
              "acknowledged (%.1f msg/s), online sessions got %d; probe round trip p50 %.1f ms, "
              "p95 %.1f ms, max %.1f ms (%d round trips); RSS %d KB, peak %d KB; written per "
              "fanned-out message: %d B to disk, %d B in write calls%s"
              % (name, a.sessions, len(online), a.sessions - len(online), t_make, n, n / dt,
                 drain.got, pct(rts, 0.5) * 1000, pct(rts, 0.95) * 1000, max(rts) * 1000,
                 len(rts), rss0, peak, (w1[0] - w0[0]) // per, (w1[1] - w0[1]) // per,
                 "" if ok else "; FAILED (%s)" % (pub.failed or "crashed or cut off")),
              flush=True)
        return ok
    finally:
        b.stop()


def main(argv=None):
    ap = args.parser(PROG, __doc__)
    ap.add_argument("--only", default="umqtt3,mosquitto",
                    help="brokers, comma-separated: umqtt3, mosquitto")
    ap.add_argument("--sessions", type=args.count, default=500, help="persistent sessions")
    ap.add_argument("--online", type=args.not_negative, default=0,
                    help="of them, how many stay connected")
    ap.add_argument("--messages", type=args.count, default=500, help="QoS 1 messages published")
    ap.add_argument("--seconds", type=args.positive, default=60.0,
                    help="how long to publish at most")
    ap.add_argument("--size", type=args.count, default=100, help="payload bytes")
    ap.add_argument("--window", type=args.count, default=10,
                    help="the publisher's unacknowledged messages at most")
    a = ap.parse_args(argv)
    a.online = int(a.online)
    if a.online > a.sessions:
        ap.error("--online %d is more than --sessions %d" % (a.online, a.sessions))
    names = [n.strip() for n in a.only.split(",") if n.strip()]
    for n in names:
        if n not in ("umqtt3", "mosquitto"):
            ap.error("--only: unknown broker %r (umqtt3, mosquitto)" % n)
    print("%s %s (load: %.2f)" % (PROG, " ".join(argv if argv is not None else sys.argv[1:]),
                                  os.getloadavg()[0]), flush=True)
    good = True
    with tempfile.TemporaryDirectory(dir=os.environ.get("FANOUT_DIR")) as tmp:
        for name in names:
            try:
                good = run(name, a, tmp) and good
            except OSError as e:
                print("%-10s %s" % (name, e), flush=True)
                good = False
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
