# Power loss at every step of FileStore's file operations, and a harness that
# reboots, carries on and checks exactly-once delivery of QoS 2 messages.
#
# SimFiles has FileStore's `files` interface and keeps only what is durable.
# Every operation that can be cut short by a power loss is a numbered "step":
#
#   write(path, data)  len(data)+1 steps: the power goes with j = 0..len bytes
#                      of the new file durable (j = 0: an empty file exists)
#   append(path, data) len(data)+1 steps, the same for bytes added to a file
#                      (a SimFiles has it, so the broker's store takes the log
#                      layout; FileSimFiles hides it: one file per record)
#   rename(a, b)       1 step: the power goes before the rename took effect
#   remove(path)       1 step: the power goes before the file was removed
#   point()            1 step, taken by the harness before every effect the
#                      outside world can see: bytes leaving for the peer, and
#                      a message handed to the application
#
# Renames are atomic (as on littlefs): a file has its old name or its new one.
# A write is create + write + fsync + close; torn, it leaves a prefix of the
# data. `crash_at=k` makes step k the power loss: PowerLoss is raised there,
# the files hold what was durable, and every later call raises PowerLoss.
#
# The harness is deterministic (a seeded random.Random picks the order in
# which packets travel, and when the connection drops). Two scenarios:
#
#   outbound  the device publishes N QoS 2 messages (application keys 0..N-1)
#             with umqtt3.flow.Flow + umqtt3.store.FileStore to a broker
#             stand-in that is the QoS 2 receiver;
#   inbound   a broker stand-in (the QoS 2 sender) sends N messages to the
#             device, which receives them with Flow.on_publish / on_ack.
#
# Both peers use a tiny packet id space, so ids are reused all the time. On a
# power loss the device's memory is gone, packets it had already written may
# or may not still reach the broker (a random prefix of them arrives), and
# packets on their way to it are lost. The device then reboots: a new
# FileStore over the durable files, recover(), reconnect to the SAME broker
# stand-in (which kept its session, as with clean_session=False), resend, and
# carry on. explore() runs one crash at every step of a run, and a second
# crash at every step of the recovery that follows each of them.
import os
import random

from umqtt3.codec import (Packet, MQTTError, decode, encode_publish, encode_ack,
                          frame_len, PUBLISH, PUBREC, PUBREL, PUBCOMP)
from umqtt3.flow import Flow, Busy
from umqtt3.client_core import Core
from umqtt3 import client_resume
from umqtt3.store import FileStore


class PowerLoss(BaseException):
    """The power went out. A BaseException, so that no `except Exception`
    in the code under test can swallow it."""


class SimFiles:
    def __init__(self, files=None, crash_at=0, on_rename=None):
        self.files = {} if files is None else files  # path -> bytes, durable
        self.crash_at = crash_at  # 0: no power loss
        self.step = 0
        self.dead = False
        self.on_rename = on_rename  # observer for the harness's bookkeeping
        self.kind = None  # what the power loss interrupted

    def _die(self, kind):
        self.dead = True
        self.kind = kind
        raise PowerLoss()

    def point(self, kind="send"):
        if self.dead:
            raise PowerLoss()
        s = self.step + 1
        self.step = s
        if s == self.crash_at:
            self._die(kind)

    def write(self, path, data):
        if self.dead:
            raise PowerLoss()
        n = len(data)
        s = self.step
        c = self.crash_at
        if c and c <= s + n + 1:
            j = c - s - 1
            self.files[path] = bytes(data[:j])  # torn: a prefix
            self.step = c
            self._die("torn write" if j < n else "whole write")
        self.files[path] = bytes(data)
        self.step = s + n + 1

    def append(self, path, data):
        """The log layout's one write per step (broker_log): len(data)+1
        steps, a prefix of data appended when the power goes."""
        if self.dead:
            raise PowerLoss()
        old = self.files.get(path, b"")
        n = len(data)
        s = self.step
        c = self.crash_at
        if c and c <= s + n + 1:
            j = c - s - 1
            self.files[path] = old + bytes(data[:j])  # torn: a prefix
            self.step = c
            self._die("torn append" if j < n else "whole append")
        self.files[path] = old + bytes(data)
        self.step = s + n + 1

    def rename(self, a, b):
        self.point("rename")
        f = self.files
        if a not in f:
            raise OSError(2, "no such file: " + a)
        f[b] = f.pop(a)
        if self.on_rename is not None:
            self.on_rename(a, b)

    def remove(self, path):
        self.point("remove")
        if path not in self.files:
            raise OSError(2, "no such file: " + path)
        del self.files[path]

    def read(self, path):
        if self.dead:
            raise PowerLoss()
        try:
            return self.files[path]
        except KeyError:
            raise OSError(2, "no such file: " + path)

    def listdir(self, path):
        # what is directly in path: a file, or a directory that holds files
        # (directories have no steps of their own: mkdir is free)
        if self.dead:
            raise PowerLoss()
        p = path + "/"
        n = len(p)
        names = []
        for k in self.files:
            if k.startswith(p):
                name = k[n:].split("/")[0]
                if name not in names:
                    names.append(name)
        return names

    def mkdir(self, path):
        pass

    def sync_dir(self, path):
        if self.dead:
            raise PowerLoss()


class FileSimFiles(SimFiles):
    """SimFiles as littlefs is to the broker's store: no append, so one file
    per record (broker_log.layout)."""
    append = None


class TxConn:
    """The device's end of the connection as Flow sees a transport.Conn
    (tx, tlen, space(), flush()). flush() is the moment bytes leave the
    device: a crash point, then every whole packet goes on the wire."""

    def __init__(self, size=2048):
        self.tx = bytearray(size)
        self.tlen = 0
        self.wire = None
        self.sim = None
        self.rx = None  # CoreFlow: the packet being handed to the core

    def done(self):
        pass  # (the core's Conn.done(): nothing is read ahead here)

    def space(self):
        return len(self.tx) - self.tlen

    def flush(self):
        n = self.tlen
        if n:
            self.sim.point()
            tx = self.tx
            i = 0
            while i < n:
                m = frame_len(tx, i, n)
                self.wire.append(bytes(tx[i:i + m]))
                i += m
            self.tlen = 0
        return True


class _WrapCore(Core):
    """Core with packet ids that wrap at max_pid, so that the worlds reuse
    them (Core.new_pid's rule, skip the ids in flight, with a small range)."""
    max_pid = 65535

    def new_pid(self):
        p = self.pid
        m = self.max_pid
        for _ in range(m):
            p = p % m + 1
            if not self.store.out_has(p):
                self.pid = p
                return p
        raise Busy("busy", 0x97)


class CoreFlow:
    """The client's own QoS 1/2 flow, client_core.Core (which has
    flow.Flow's rules written in), behind Flow's interface: the worlds
    below run the code a client runs. publish() is Core.queue(); a packet
    from the broker goes to Core.packet() as the bytes it decodes."""

    def __init__(self, store, app, window=8, level=4, max_pid=65535):
        c = _WrapCore("sim", level=level, store=store, window=window)
        c.state = 2  # connected (client_core's _UP): the worlds model the link
        c.max_pid = max_pid
        if app is not None:
            c.set_callback(app.deliver, True)
        self.core = c
        self.store = store

    def publish(self, conn, topic, msg, qos=0, retain=False, key=None):
        self.core.conn = conn
        return self.core.queue(topic, msg, retain, qos, key)

    def on_publish(self, conn, pkt):
        c = self.core
        c.conn = conn
        conn.rx = pkt.buf  # (decoded into pkt by the world: the same bytes)
        c.packet(pkt.end, 0)

    on_ack = on_publish


def resend(flow, conn):
    """What the client sends first on a new connection (its session kept):
    umqtt3.client_resume.resend, or a broken flow's own resend()."""
    f = getattr(flow, "resend", None)
    if f is not None:
        f(conn, conn.flush)
        return
    for _ in client_resume.resend(flow.store, conn, True):
        conn.flush()


TOPIC = b"a/b"
_ACKS = {}
_PKT = Packet(4)


def payload(key):
    return b"m%03d" % key


def key_of(topic, pl):
    """The key a message carries, or None if it is not one of ours."""
    if topic != TOPIC or len(pl) != 4 or pl[:1] != b"m" or not pl[1:].isdigit():
        return None
    return int(pl[1:])


def ack(t, pid):
    k = (t << 16) | pid
    b = _ACKS.get(k)
    if b is None:
        buf = bytearray(4)
        encode_ack(buf, 0, t, pid)
        b = _ACKS[k] = bytes(buf)
    return b


def publish_bytes(pid, key, dup):
    buf = bytearray(32)
    n = encode_publish(buf, 0, TOPIC, payload(key), 2, pid, False, dup)
    return bytes(buf[:n])


# ------------------------------------------------------------ broker stand-ins

class BrokerRx:
    """The receiving side of QoS 2 in a broker that keeps the session: a
    PUBLISH with an id it does not hold is new (stored, delivered onward at
    once, "method B"); with an id it holds it is a resend and is only
    answered; PUBREL forgets the id and is always answered with PUBCOMP."""

    def __init__(self, capacity):
        self.capacity = capacity  # ids it may hold at once: the window
        self.held = {}
        self.delivered = []  # keys, in the order delivered onward
        self.errors = []

    def copy(self):
        b = BrokerRx(self.capacity)
        b.held = dict(self.held)
        b.delivered = list(self.delivered)
        b.errors = list(self.errors)
        return b

    def receive(self, data, out):
        p = _PKT
        try:
            decode(p, data, 0, len(data))
        except MQTTError as e:
            self.errors.append("broker got a malformed packet %r (%s)" % (data, e.reason))
            return
        t = p.type
        pid = p.pid
        if t == PUBLISH:
            if p.qos != 2:
                self.errors.append("broker got QoS %d" % p.qos)
                return
            if pid not in self.held:
                k = key_of(bytes(p.topic), bytes(p.payload))
                if k is None:
                    self.errors.append("broker got a corrupt message %r" % data)
                self.held[pid] = k
                if len(self.held) > self.capacity:
                    self.errors.append("broker holds %d ids, window is %d"
                                       % (len(self.held), self.capacity))
                self.delivered.append(k)
            out.append(ack(PUBREC, pid))
        elif t == PUBREL:
            self.held.pop(pid, None)
            out.append(ack(PUBCOMP, pid))
        else:
            self.errors.append("broker got packet type %d" % t)


class BrokerTx:
    """The sending side of QoS 2 in a broker session (never loses power):
    messages 0..n-1 in order, at most `window` in flight, ids from 1..max_pid
    skipping those in use; on reconnect unacknowledged PUBLISHes again with
    DUP and PUBRELs again, in order."""

    def __init__(self, n, window, max_pid):
        self.n = n
        self.window = window
        self.max_pid = max_pid
        self.next_key = 0
        self.pid = 0
        self.flight = []  # [pid, key, state 'p' (PUBLISH sent) or 'r' (PUBREL sent)]
        self.errors = []

    def copy(self):
        b = BrokerTx(self.n, self.window, self.max_pid)
        b.next_key = self.next_key
        b.pid = self.pid
        b.flight = [list(e) for e in self.flight]
        b.errors = list(self.errors)
        return b

    def can_send(self):
        return self.next_key < self.n and len(self.flight) < self.window

    def send(self, out):
        used = [e[0] for e in self.flight]
        p = self.pid
        while True:
            p = p % self.max_pid + 1
            if p not in used:
                break
        self.pid = p
        self.flight.append([p, self.next_key, "p"])
        out.append(publish_bytes(p, self.next_key, False))
        self.next_key += 1

    def resend(self, out):
        for pid, key, st in self.flight:
            out.append(publish_bytes(pid, key, True) if st == "p" else ack(PUBREL, pid))

    def _find(self, pid):
        for e in self.flight:
            if e[0] == pid:
                return e
        return None

    def receive(self, data, out):
        p = _PKT
        try:
            decode(p, data, 0, len(data))
        except MQTTError as e:
            self.errors.append("broker got a malformed packet %r (%s)" % (data, e.reason))
            return
        e = self._find(p.pid)
        if p.type == PUBREC:
            if e is None:
                return  # stale: the flow already finished
            e[2] = "r"
            out.append(ack(PUBREL, p.pid))
        elif p.type == PUBCOMP:
            if e is None:
                return
            if e[2] != "r":
                self.errors.append("PUBCOMP for id %d before its PUBREC" % p.pid)
                return
            self.flight.remove(e)
        else:
            self.errors.append("broker got packet type %d" % p.type)


# ------------------------------------------------------------ worlds

class SendPoint:
    """A broker's or gateway's end of a pipe: each write is a step the power
    can take."""

    def __init__(self, link, sim):
        self.link = link
        self.sim = sim

    def readinto(self, buf, n):
        return self.link.readinto(buf, n)

    def write(self, buf, off=0, n=-1):
        self.sim.point("send")
        return self.link.write(buf, off, n)

    def close(self):
        self.link.close()


class Config:
    def __init__(self, n=12, window=3, max_pid=4, drop_rate=0.03, max_drops=4,
                 flow_cls=Flow, store_cls=FileStore, max_messages=32):
        self.n = n
        self.window = window
        self.max_pid = max_pid
        self.drop_rate = drop_rate
        self.max_drops = max_drops
        self.flow_cls = flow_cls
        self.store_cls = store_cls
        self.max_messages = max_messages


class World:
    """Everything that outlives the device's memory: the durable files, the
    broker (with its session), the schedule's random state, and the test's
    own record of what happened (the oracle)."""

    def __init__(self, cfg, seed):
        self.cfg = cfg
        self.rng = random.Random(seed)
        self.files = {}
        self.drops = cfg.max_drops
        self.boots = 0
        self.problems = []
        self.settle = 0  # steps from a boot until what it recovered was settled

    def _copy_base(self, w):
        w.rng = random.Random()
        w.rng.setstate(self.rng.getstate())
        w.files = dict(self.files)
        w.drops = self.drops
        w.boots = self.boots
        w.problems = list(self.problems)
        w.settle = self.settle
        return w

    def arrive(self, c2b, sink):
        # power lost: of what the device had written, a prefix still arrives
        rng = self.rng
        n = len(c2b)
        if n:
            cnt = n if rng.random() < 0.5 else rng.randrange(n + 1)
            for i in range(cnt):
                self.broker.receive(c2b[i], sink)


class OutWorld(World):
    """The device publishes; the broker stand-in receives."""

    def __init__(self, cfg, seed):
        World.__init__(self, cfg, seed)
        self.broker = BrokerRx(cfg.window)
        self.returned = []  # keys whose publish() returned, in order
        self.pending = -1  # key whose publish() was running at the power loss
        self.cut = []  # (key, accepted after the reboot) for those

    def copy(self):
        w = self._copy_base(OutWorld.__new__(OutWorld))
        w.cfg = self.cfg
        w.broker = self.broker.copy()
        w.returned = list(self.returned)
        w.pending = self.pending
        w.cut = list(self.cut)
        return w

    def boot(self, crash_at):
        """Run the device from power-on until the end of the test (True) or a
        power loss at step crash_at (False)."""
        cfg = self.cfg
        rng = self.rng
        broker = self.broker
        sim = SimFiles(self.files, crash_at)
        c2b = []
        b2c = []
        conn = TxConn()
        conn.sim = sim
        conn.wire = c2b
        pkt = Packet(4)
        self.boots += 1
        settle = -1
        try:
            st = cfg.store_cls("/mq", files=sim, max_messages=cfg.max_messages, allow_fat=True)
            # the application asks straight away, before anything called
            # recover() (the resend does, below)
            for k in self.returned:
                if not st.accepted(k):
                    self.problems.append("boot %d: publish of key %d returned, but "
                                         "accepted(%d) is False" % (self.boots, k, k))
                    break
            if self.pending >= 0:
                self.cut.append((self.pending, st.accepted(self.pending)))
                self.pending = -1
            # the application: skip what the store says was accepted
            key = 0
            while key < cfg.n and st.accepted(key):
                key += 1
            flow = cfg.flow_cls(st, None, cfg.window, 4, cfg.max_pid)
            # outbound records found at boot, by name without the state
            unsettled = [f[:-2] for f in self.files if f[f.rfind("/") + 1] == "o"]
            settle = -1 if unsettled else sim.step
            resend(flow, conn)
            conn.flush()
            drop_rate = cfg.drop_rate
            n = cfg.n
            acts = [0, 0, 0]
            for _ in range(20000):
                na = 0
                if key < n and st.out_count() < cfg.window:
                    acts[na] = 0
                    na += 1
                if c2b:
                    acts[na] = 1
                    na += 1
                if b2c:
                    acts[na] = 2
                    na += 1
                if not na:
                    break
                if self.drops and rng.random() < drop_rate:
                    # the connection drops; the broker keeps the session
                    self.drops -= 1
                    del c2b[:]
                    del b2c[:]
                    resend(flow, conn)
                    conn.flush()
                    continue
                a = acts[rng.randrange(na)] if na > 1 else acts[0]
                if a == 0:
                    self.pending = key
                    flow.publish(conn, TOPIC, payload(key), 2, False, key)
                    self.pending = -1
                    self.returned.append(key)
                    key += 1
                    conn.flush()
                elif a == 1:
                    broker.receive(c2b.pop(0), b2c)
                else:
                    d = b2c.pop(0)
                    decode(pkt, d, 0, len(d))
                    flow.on_ack(conn, pkt)
                    conn.flush()
                if settle < 0:
                    files = self.files
                    unsettled = [u for u in unsettled if u + ".p" in files or u + ".r" in files]
                    if not unsettled:
                        settle = sim.step
            else:
                self.problems.append("no end after 20000 steps of the schedule")
        except PowerLoss:
            self.kind = sim.kind
            self.arrive(c2b, [])
            self.settle = sim.step if settle < 0 else settle
            return False, sim.step
        except Exception as e:  # a broken rule can make the device fail outright
            self.problems.append("device raised %s: %s" % (type(e).__name__, e))
        self.settle = sim.step if settle < 0 else settle
        self.final_out()
        return True, sim.step

    def final_out(self):
        n = self.cfg.n
        p = self.problems
        p.extend(self.broker.errors)
        d = self.broker.delivered
        if d != list(range(n)):
            seen = set()
            for k in d:
                if k in seen:
                    p.append("key %s delivered twice" % k)
                seen.add(k)
            for k in range(n):
                if k not in seen:
                    p.append("key %d lost" % k)
            firsts = []
            for k in d:
                if k not in firsts:
                    firsts.append(k)
            if firsts != sorted(firsts, key=lambda x: -1 if x is None else x):
                p.append("out of order: %r" % (d,))
        for k, acc in self.cut:
            if acc and d.count(k) != 1:
                p.append("key %d was accepted at the power loss, delivered %d times"
                         % (k, d.count(k)))
        if self.broker.held:
            p.append("broker still holds ids %r" % sorted(self.broker.held))
        left = [f for f in self.files if f.split("/")[-1][0] != "l"]
        if left:
            p.append("records left in the store: %r" % sorted(left))


class InWorld(World):
    """The broker stand-in publishes; the device receives and hands messages
    to its application."""

    def __init__(self, cfg, seed):
        World.__init__(self, cfg, seed)
        self.broker = BrokerTx(cfg.n, cfg.window, cfg.max_pid)
        self.log = []  # (key, redelivered) as the application saw them
        self.open = {}  # pid -> key: delivered, in_done not yet durable
        self.windows = {}  # key -> power losses inside its open window

    def copy(self):
        w = self._copy_base(InWorld.__new__(InWorld))
        w.cfg = self.cfg
        w.broker = self.broker.copy()
        w.log = list(self.log)
        w.open = dict(self.open)
        w.windows = dict(self.windows)
        return w

    # the application
    def deliver(self, pkt, redelivered):
        self.sim.point("deliver")  # the power may go before the application has it
        k = key_of(bytes(pkt.topic), bytes(pkt.payload))
        if k is None:
            self.problems.append("application got a corrupt message")
        self.log.append((k, redelivered))
        self.open[pkt.pid] = k

    def renamed(self, a, b):
        # "i<pid>.u" -> "i<pid>.d" is durable: the window has closed
        name = a[a.rfind("/") + 1:]
        if name[0] == "i" and name[-2:] == ".u":
            self.open.pop(int(name[1:6]), None)

    def boot(self, crash_at):
        cfg = self.cfg
        rng = self.rng
        broker = self.broker
        sim = SimFiles(self.files, crash_at, self.renamed)
        self.sim = sim
        c2b = []
        b2c = []
        conn = TxConn()
        conn.sim = sim
        conn.wire = c2b
        pkt = Packet(4)
        self.boots += 1
        settle = -1
        try:
            st = cfg.store_cls("/mq", files=sim, max_messages=cfg.max_messages, allow_fat=True)
            recs = st.recover()
            flow = cfg.flow_cls(st, self, 8, 4)
            # as MQTTClient does: undelivered messages again, flagged
            for pid, state, key, body in recs:
                if state == "u":
                    decode(pkt, body, 0, len(body))
                    self.deliver(pkt, True)
                    st.in_done(pid)
            # inbound records found at boot, by name without the state
            unsettled = [f[:-2] for f in self.files if f[f.rfind("/") + 1] == "i"]
            settle = -1 if unsettled else sim.step
            broker.resend(b2c)
            drop_rate = cfg.drop_rate
            acts = [0, 0, 0]
            for _ in range(20000):
                na = 0
                if broker.can_send():
                    acts[na] = 0
                    na += 1
                if c2b:
                    acts[na] = 1
                    na += 1
                if b2c:
                    acts[na] = 2
                    na += 1
                if not na:
                    break
                if self.drops and rng.random() < drop_rate:
                    self.drops -= 1
                    del c2b[:]
                    del b2c[:]
                    broker.resend(b2c)
                    continue
                a = acts[rng.randrange(na)] if na > 1 else acts[0]
                if a == 0:
                    broker.send(b2c)
                elif a == 1:
                    broker.receive(c2b.pop(0), b2c)
                else:
                    d = b2c.pop(0)
                    decode(pkt, d, 0, len(d))
                    if pkt.type == PUBLISH:
                        flow.on_publish(conn, pkt)
                    else:
                        flow.on_ack(conn, pkt)
                    conn.flush()
                if settle < 0:
                    files = self.files
                    unsettled = [u for u in unsettled if u + ".u" in files or u + ".d" in files]
                    if not unsettled:
                        settle = sim.step
            else:
                self.problems.append("no end after 20000 steps of the schedule")
        except PowerLoss:
            self.kind = sim.kind
            for k in self.open.values():
                self.windows[k] = self.windows.get(k, 0) + 1
            self.open = {}
            self.arrive(c2b, [])
            self.settle = sim.step if settle < 0 else settle
            return False, sim.step
        except Exception as e:
            self.problems.append("device raised %s: %s" % (type(e).__name__, e))
        self.settle = sim.step if settle < 0 else settle
        self.final_in()
        return True, sim.step

    def final_in(self):
        n = self.cfg.n
        p = self.problems
        p.extend(self.broker.errors)
        firsts = []
        count = {}
        for k, redelivered in self.log:
            c = count.get(k, 0)
            if c and not redelivered:
                p.append("key %s delivered again without the redelivered flag" % k)
            count[k] = c + 1
            if not c:
                firsts.append(k)
        for k in range(n):
            if k not in count:
                p.append("key %d lost" % k)
            elif count[k] - 1 > self.windows.get(k, 0):
                p.append("key %d delivered %d times, but only %d power losses "
                         "between its delivery and in_done" % (k, count[k], self.windows.get(k, 0)))
        if firsts != list(range(n)) and set(firsts) == set(range(n)):
            p.append("delivered out of order: %r" % (firsts,))
        if self.broker.flight or self.broker.next_key != n:
            p.append("broker's flows did not finish: %r" % (self.broker.flight,))
        left = [f for f in self.files if f.split("/")[-1][0] == "i"]
        if left:
            p.append("inbound records left in the store: %r" % sorted(left))


# ------------------------------------------------------------ exploration

def run(world_cls, cfg, seed, crashes=()):
    """One run with a power loss at step crashes[i] of boot i (steps count
    from each boot). Returns the world; world.problems lists violations."""
    w = world_cls(cfg, seed)
    for c in crashes:
        done, _ = w.boot(c)
        if done:
            w.problems.append("the run ended before crash step %d" % c)
            return w
    w.boot(0)
    return w


class Stats:
    def __init__(self):
        self.single = 0
        self.double = 0
        self.runs = 0
        self.failures = []  # (seed, crashes, problems)
        self.kinds = {}  # what the power losses interrupted -> how many

    def total(self):
        return self.single + self.double

    def __repr__(self):
        return "Stats(single=%d, double=%d, failures=%d)" % (
            self.single, self.double, len(self.failures))


def frozen_ms():
    """The bridge's worlds' clock: time stands still, so how many packets
    one poll handles does not depend on the machine's speed."""
    return 1000


class GatewayWorld:
    """What the bridge's crash worlds (tests/test_bridge_crash.py, out;
    tests/test_bridge_crash_in.py, in) share: the uplink is a pipe whose
    sends are steps, and a boot (_boot, the world's own) runs with the
    client's clock stopped, so the steps repeat."""

    def _uplink(self):
        from umqtt3.transport import Pipe, Conn
        mine, theirs = Pipe.pair(4096)
        self.uconn = Conn(theirs, 1024, 1024)
        return SendPoint(mine, self.sim)

    def boot(self, crash_at):
        import umqtt3.client as client_mod
        saved = client_mod.ticks_ms
        client_mod.ticks_ms = frozen_ms
        try:
            return self._boot(crash_at)
        finally:
            client_mod.ticks_ms = saved


def settle(b, peers, done, problems, stalled):
    """Poll broker b, its peers answering (peers() says whether anything
    moved), until done() holds and nothing moved for four steps; if that
    never comes, a problem: "stalled: " + stalled()."""
    quiet = 0
    for _ in range(4000):
        b.poll_once(0)
        moved = peers()
        if done():
            if not moved:
                quiet += 1
                if quiet > 3:
                    return
        else:
            quiet = 0
    problems.append("stalled: " + stalled())


# The bridge's explorations take minutes at full size: the suite runs their
# first seed and a third of the margin; UMQTT3_CRASH_FULL=1 runs them whole
# (the counts in docs/figures.md are from whole runs).
FULL = os.environ.get("UMQTT3_CRASH_FULL") == "1"


def sized(seeds, margin=0):
    """(seeds, margin) as given with UMQTT3_CRASH_FULL=1, else the first
    seed and a third of the margin."""
    return (seeds, margin) if FULL else (seeds[:1], margin // 3)


def explore(world_cls, cfg, seeds, margin=40, double=True, stats=None, stop=False):
    """A power loss at every step of each seed's run; after each, a second
    power loss at every step of the boot that follows, up to `margin` steps
    past the point where what that boot recovered was settled (every record
    found at boot time completed). stop=True: return at the first violation."""
    st = stats or Stats()
    for seed in seeds:
        w = world_cls(cfg, seed)
        _, total = w.boot(0)
        st.runs += 1
        if w.problems:
            st.failures.append((seed, (), w.problems))
            if stop:
                return st
        for k in range(1, total + 1):
            w = world_cls(cfg, seed)
            done, _ = w.boot(k)
            assert not done
            st.kinds[w.kind] = st.kinds.get(w.kind, 0) + 1
            snap = w.copy()  # the world just after the first power loss
            done, after = w.boot(0)
            st.single += 1
            st.runs += 1
            if w.problems:
                st.failures.append((seed, (k,), w.problems))
                if stop:
                    return st
            if not double:
                continue
            limit = min(after, w.settle + margin)
            for j in range(1, limit + 1):
                w2 = snap.copy()
                done, _ = w2.boot(j)
                if done:
                    break
                st.kinds[w2.kind] = st.kinds.get(w2.kind, 0) + 1
                w2.boot(0)
                st.double += 1
                st.runs += 1
                if w2.problems:
                    st.failures.append((seed, (k, j), w2.problems))
                    if stop:
                        return st
    return st


# What tests/test_crash.py explores: (scenario, configuration, seeds).
# the client's flow (CoreFlow: what a device runs); the teeth in
# tests/test_crash.py break flow.Flow's rules one at a time
SUITE = (
    (OutWorld, Config(n=12, window=3, max_pid=4, flow_cls=CoreFlow), (1,)),
    (OutWorld, Config(n=14, window=2, max_pid=3, drop_rate=0.05, flow_cls=CoreFlow), (3,)),
    (InWorld, Config(n=12, window=3, max_pid=4, flow_cls=CoreFlow), (1, 2)),
    (InWorld, Config(n=14, window=2, max_pid=3, drop_rate=0.05, flow_cls=CoreFlow), (3,)),
)
MARGIN = 30


def explore_suite(stats=None):
    st = stats or Stats()
    for world_cls, cfg, seeds in SUITE:
        explore(world_cls, cfg, seeds, MARGIN, stats=st)
    return st


if __name__ == "__main__":
    # PYTHONPATH=lib python tests/crashsim.py
    import time
    t = time.time()
    s = explore_suite()
    dt = time.time() - t
    print("crash points: %d single + %d double = %d, %d runs, %.1f s"
          % (s.single, s.double, s.total(), s.runs, dt))
    for k in sorted(s.kinds):
        print("  %-12s %d" % (k, s.kinds[k]))
    for f in s.failures[:10]:
        print("VIOLATION seed %r crashes %r: %s" % f)
