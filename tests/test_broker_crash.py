# Power loss at every step of the broker's store, and a SIGKILL test.
#
# The simulation reuses tests/crashsim.py: SimFiles (the store's file layer,
# keeping only what is durable, one numbered step per written byte, rename
# and remove), its peers (BrokerTx: a QoS 2 sender with a persistent
# session; BrokerRx: a QoS 2 receiver that hands a message on once per
# packet id) and explore(). Here those peers are the clients and the real
# Broker, over transport.Pipe, is the one that loses power:
#
#   publisher   BrokerTx, client id "p", CleanSession 0: 10 QoS 2 messages
#               with a window of 3 and packet ids 1..4
#   subscriber  BrokerRx, client id "s", CleanSession 0, subscribed to them
#               at QoS 2
#   retainer    client id "r": QoS 1 retained sets and clears of one topic,
#               one at a time
#
# They connect in the order s, p, r, or p, s, r: the first to connect gets
# the store directory s0, and start-up reads the directories in name order,
# so both orders of the publisher's and the subscriber's records are met.
#
# Every byte the broker writes to a client is a step too (SimFiles.point).
# On a power loss the broker's memory and the bytes on their way to it are
# gone; what it wrote before reaches the clients. A new Broker then starts
# on the durable files, the clients reconnect, resend [MQTT-4.4.0-1] and
# carry on. Checked at the end of each run:
#   - the subscriber got every message exactly once and in order: an
#     acknowledged (PUBREC'd) message that the broker lost shows as missing,
#     a QoS 2 message sent twice as a duplicate [MQTT-4.3.3-2, MQTT-4.6.0-6];
#   - the sessions were present after every restart [MQTT-3.1.2-4, MQTT-3.1.2-5];
#   - after every restart the retained topic holds the value of the last
#     acknowledged set or clear, or of one sent after it [MQTT-3.3.1-5,
#     MQTT-3.3.1-10, MQTT-3.3.1-11];
#   - the broker counted no internal error.
import os
import signal
import socket
import subprocess
import sys

import pytest

from crashsim import (SimFiles, FileSimFiles, PowerLoss, BrokerTx, BrokerRx, SendPoint, Stats, explore,
                      FULL, TOPIC, _PKT)
from umqtt3.broker import Broker
from umqtt3.broker_log import replay
from umqtt3.codec import decode, encode_connect, encode_publish, encode_subscribe, encode_simple, \
    CONNACK, SUBACK, PUBACK, DISCONNECT
from umqtt3.transport import Pipe, Conn

# CPU-bound power-loss explorations on simulated files and clocks: make test
# runs them in a process of their own, beside the rest (Makefile)
pytestmark = pytest.mark.powerloss

RTOPIC = b"r/x"
ROPS = (b"v0", b"", b"v2", b"v3", b"", b"v5")  # b"": clear [MQTT-3.3.1-10]


SFIRST = (b"s", b"p", b"r")  # the subscriber's session is s0
PFIRST = (b"p", b"s", b"r")  # the publisher's session is s0


def _packet(cid):
    b = bytearray(64)
    return bytes(b[:encode_connect(b, 0, cid, 4, False, 0)])


class BrokerWorld:
    """One run, as explore() drives it (boot, copy, problems, kind, settle)."""

    # seed -> (messages, publisher window, its packet ids, broker max_inflight,
    # subscriber offline while the messages are published: they are queued,
    # the order in which the clients connect)
    CONFIGS = {1: (12, 3, 4, 2, False, SFIRST), 2: (14, 2, 3, 1, False, SFIRST),
               3: (10, 4, 5, 3, False, SFIRST), 4: (12, 3, 4, 2, True, SFIRST),
               5: (12, 3, 4, 2, False, PFIRST), 6: (12, 3, 4, 2, True, PFIRST)}

    SIM = SimFiles  # it can append: the store is one log, one sync per step

    def __init__(self, cfg=None, seed=1):
        n, window, ids, inflight, offline, order = self.CONFIGS[seed]
        self.seed = seed
        self.inflight = inflight
        self.offline = offline
        self.order = order
        self.files = {}
        self.tx = BrokerTx(n, window, ids)
        self.rx = BrokerRx(inflight)
        self.subscribed = False
        self.r_next = 0  # next retained operation to send
        self.r_flight = None  # (pid, index) sent, not acknowledged
        self.r_acked = -1  # last acknowledged retained operation
        self.problems = []
        self.kind = None
        self.settle = 0

    def copy(self):
        w = type(self)(None, self.seed)
        w.files = dict(self.files)
        w.tx = self.tx.copy()
        w.rx = self.rx.copy()
        w.subscribed = self.subscribed
        w.r_next = self.r_next
        w.r_flight = self.r_flight
        w.r_acked = self.r_acked
        w.problems = list(self.problems)
        return w

    # ------------------------------------------------------------ one boot
    def boot(self, crash_at):
        """Start a broker on the durable files and run until the work is
        done (True, steps) or the power goes at step crash_at (False, steps)."""
        sim = self.SIM(self.files, crash_at)
        self._conns = {}
        self.sp = {}
        try:
            b = Broker(port=None, store="/b", files=sim, sys_interval=0, max_inflight=self.inflight,
                       max_queued=16, max_qos2_in=4)
            self._check_retained(b)
            self.settle = sim.step
            conns = self._conns
            self._b = b
            self._sim = sim
            for cid in self.order:
                if cid != b"s" or not self._away():
                    self._connect(cid)
            quiet = 0
            for _ in range(3000):
                b.poll_once(0)
                moved = self._clients(conns, b)
                if self._done(b):
                    if not moved:
                        quiet += 1
                        if quiet > 2:
                            break
                else:
                    quiet = 0
            else:
                self.problems.append("stalled: tx %r rx %r retained op %d"
                                     % (self.tx.flight, self.rx.held, self.r_next))
            if b.errors:
                self.problems.append("broker internal errors: %d" % b.errors)
            self._final(b)
            return True, sim.step
        except PowerLoss:
            self.kind = sim.kind
            # what the broker wrote before the loss reaches the clients
            for c in getattr(self, "_conns", {}).values():
                try:
                    self._read(c, [], None)
                except Exception:
                    pass
            return False, sim.step

    def _connect(self, cid):
        mine, theirs = Pipe.pair(4096)
        self._b.attach(SendPoint(theirs, self._sim))
        self._conns[cid] = Conn(mine, 1024, 1024)
        mine.write(_packet(cid))

    def _tx_done(self):
        return self.tx.next_key == self.tx.n and not self.tx.flight

    def _away(self):
        """The subscriber stays offline: subscribed, messages still coming."""
        return self.offline and self.subscribed and not self._tx_done()

    def _done(self, b):
        s = b.sessions().get(b"s")
        return (self._tx_done() and b"s" in self._conns and s is not None
                and not (s.inflight() or s.queued()) and not self.rx.held
                and self.r_next == len(ROPS) and self.r_flight is None)

    def _clients(self, conns, b):
        moved = 0
        if b"s" in conns and self._away():
            buf = bytearray(2)
            conns[b"s"].link.write(bytes(buf[:encode_simple(buf, 0, DISCONNECT)]))
            del conns[b"s"]  # offline; its session queues [MQTT-3.1.2-5]
        elif b"s" not in conns and not self._away():
            self._connect(b"s")
            moved += 1
        for cid, c in list(conns.items()):
            out = []
            moved += self._read(c, out, cid)
            for data in out:
                c.link.write(data)
        # new work, once connected
        if self.subscribed and self.sp.get(b"p"):
            out = []
            while self.tx.can_send():
                self.tx.send(out)
            for data in out:
                conns[b"p"].link.write(data)
                moved += 1
        if self.sp.get(b"r") and self.r_flight is None and self.r_next < len(ROPS):
            self._r_send(conns[b"r"], False)
            moved += 1
        return moved

    def _r_send(self, c, dup):
        if self.r_flight is None:
            self.r_flight = (self.r_next % 2 + 1, self.r_next)
            self.r_next += 1
        pid, i = self.r_flight
        buf = bytearray(64)
        n = encode_publish(buf, 0, RTOPIC, ROPS[i], 1, pid, True, dup)
        c.link.write(bytes(buf[:n]))

    def _read(self, c, out, cid):
        k = 0
        while True:
            n = c.recv()
            if not n:
                return k
            data = bytes(c.rx[:n])
            c.done()
            k += 1
            if cid is None:
                cid = self._cid_of(c)
            self._packet(cid, c, data, out)

    def _cid_of(self, c):
        for cid, x in self._conns.items():
            if x is c:
                return cid
        return None

    def _packet(self, cid, c, data, out):
        t = data[0] >> 4
        if t == CONNACK:
            decode(_PKT, data, 0, len(data))
            sp = _PKT.session_present
            self.sp[cid] = True
            if cid == b"s":
                if self.subscribed and not sp:
                    self.problems.append("the subscriber's session was lost [MQTT-3.1.2-4]")
                if not (sp and self.subscribed):
                    buf = bytearray(32)
                    out.append(bytes(buf[:encode_subscribe(buf, 0, 1, [(TOPIC, 2)])]))
            elif cid == b"p":
                if self.tx.next_key and not sp:
                    self.problems.append("the publisher's session was lost")
                self.tx.resend(out)  # [MQTT-4.4.0-1]
            elif self.r_flight is not None:
                self._r_send(c, True)
        elif t == SUBACK:
            self.subscribed = True
        elif cid == b"s":
            self.rx.receive(data, out)
        elif cid == b"p":
            self.tx.receive(data, out)
        elif cid == b"r" and t == PUBACK:
            decode(_PKT, data, 0, len(data))
            if self.r_flight is not None and self.r_flight[0] == _PKT.pid:
                self.r_acked = self.r_flight[1]
                self.r_flight = None

    # ------------------------------------------------------------ checks
    def _check_retained(self, b):
        got = b.retained.get(RTOPIC)
        got = got[1] if got else b""
        first = max(self.r_acked, 0)
        ok = [ROPS[i] for i in range(first, self.r_next)]
        if self.r_acked < 0:
            ok.append(b"")
        if got not in ok:
            self.problems.append("after a restart r/x holds %r; acknowledged last: op %d"
                                 % (got, self.r_acked))

    def _final(self, b):
        p = self.problems
        p.extend(self.tx.errors)
        p.extend(self.rx.errors)
        d = self.rx.delivered
        want = list(range(self.tx.n))
        if d != want:
            lost = [k for k in want if k not in d]
            dup = sorted(set(k for k in d if d.count(k) > 1))
            p.append("subscriber got %r: lost %r, duplicated %r" % (d, lost, dup))
        if b.retained.get(RTOPIC, (0, b""))[1] != ROPS[-1]:
            p.append("retained r/x ends as %r" % (b.retained.get(RTOPIC),))


class FileBrokerWorld(BrokerWorld):
    """The same runs with one file per record, as on littlefs."""
    SIM = FileSimFiles


# the log's every appended byte is a step: 4 to 5 times the points
WORLDS = pytest.mark.parametrize("world", [pytest.param(BrokerWorld, id="log", marks=pytest.mark.slow),
                                          pytest.param(FileBrokerWorld, id="files")])


def _names(files):
    """The store's file names, the log layout's replayed."""
    if "/b/log" in files:
        return list(replay(files["/b/log"])[0])
    return list(files)


@WORLDS
def test_broker_runs_without_a_crash(world):
    w = world()
    done, steps = w.boot(0)
    assert done and not w.problems, w.problems
    assert steps > 200  # the store was written: there is something to cut


@WORLDS
def test_power_loss_at_every_step(world):
    # the log's six seeds take minutes: the suite runs the first
    # (UMQTT3_CRASH_FULL=1 runs all six)
    seeds = (1, 2, 3, 4, 5, 6) if FULL or world is FileBrokerWorld else (1,)
    st = explore(world, None, seeds, margin=0, double=False)
    print("broker crash points: %d single, interrupted: %r" % (st.single, st.kinds))
    assert st.single > 1500
    assert not st.failures, st.failures[:3]


@pytest.mark.slow
def test_power_loss_while_the_log_is_rewritten(monkeypatch):
    # a log that may carry 300 bytes of dead records is rewritten again and
    # again (log.t written, renamed over log): the power goes at every byte
    # of that too
    from umqtt3 import broker_log
    monkeypatch.setattr(broker_log, "COMPACT", 300)
    st = explore(BrokerWorld, None, (1,), margin=0, double=False)
    print("broker crash points with log rewrites: %d single, interrupted: %r" % (st.single, st.kinds))
    assert st.kinds.get("torn write", 0) > 1000 and st.kinds.get("rename", 0) > 2
    assert not st.failures, st.failures[:3]


def _caught(monkeypatch, obj, name, fn):
    monkeypatch.setattr(obj, name, fn)
    st = explore(BrokerWorld, None, (1,), margin=0, double=False, stop=True)
    assert st.failures, "a broken rule went unnoticed"
    return " ".join(st.failures[0][2])


def test_teeth_record_after_the_ack(monkeypatch):
    # a subscriber's copy kept in RAM only: acknowledged, then lost (its
    # session's store writes a message sent at once with out_add, one
    # queued with out_msg: neither writes)
    from umqtt3.broker_store import _Refs
    add = _Refs.out_add
    queue = _Refs.out_msg

    def late(self, pid, key, buf, off, n):
        if not self.dir.startswith("/b/s0"):
            add(self, pid, key, buf, off, n)

    def late_queued(self, pid, key, first, m, s):
        if not self.dir.startswith("/b/s0"):
            queue(self, pid, key, first, m, s)
    monkeypatch.setattr(_Refs, "out_msg", late_queued)
    assert "lost" in _caught(monkeypatch, _Refs, "out_add", late)


def test_teeth_bytes_leave_before_the_commit(monkeypatch):
    # the log synced after the step's bytes went out instead of before:
    # a power loss in between loses what was acknowledged
    from umqtt3.broker_core import Core
    commit = Core.commit
    poll = Broker.poll_once

    def late(self, timeout_ms=0):
        n = poll(self, timeout_ms)
        commit(self)
        return n
    monkeypatch.setattr(Broker, "commit", lambda self: None)
    assert "lost" in _caught(monkeypatch, Broker, "poll_once", late)


def test_teeth_pubrec_not_recorded(monkeypatch):
    # PUBREL sent while the record still says PUBLISH: after a restart the
    # message goes out again as a PUBLISH, and the subscriber, which forgot
    # the id at PUBREL, takes it twice [MQTT-4.3.3-1]
    from umqtt3.store import FileStore
    assert "duplicated [" in _caught(monkeypatch, FileStore, "out_rel",
                                     lambda self, pid: None).replace("duplicated []", "")


def test_teeth_routing_never_marked_done(monkeypatch):
    # the .u record never becomes .d: a restart takes back routed copies
    # whose PUBREC went out (lost), or the publisher's id is forgotten
    from umqtt3.store import FileStore
    assert "lost" in _caught(monkeypatch, FileStore, "in_done", lambda self, pid: None)


def test_teeth_no_rollback(monkeypatch):
    # a routing cut short is kept: the publisher sends it again and it is
    # routed twice (a QoS 2 duplicate)
    from umqtt3.broker_store import Disk
    orig = Disk._restore

    def keep(self, s, recs, cut):
        orig(self, s, recs, [])
    monkeypatch.setattr(Disk, "_undo", lambda self, found, cut: None)
    assert "duplicated [" in _caught(monkeypatch, Disk, "_restore", keep).replace("duplicated []", "")


def test_teeth_rollback_session_by_session(monkeypatch):
    # the rollback done one session at a time, in directory order: with the
    # publisher in s0 its .u goes before the subscriber's copies, and a
    # second power loss in between leaves copies the resend routes again
    from umqtt3.broker_store import Disk

    def per_session(self, found, cut):
        for s, recs in found:
            for pid, st, key, body in recs:
                if st == "p" and key in cut:
                    s.fs.out_del(pid)
            for pid, st, key, body in recs:
                if st == "u":
                    s.fs.in_del(pid)
    monkeypatch.setattr(Disk, "_undo", per_session)
    st = _rollback_twice((5,), stop=True)
    assert st.failures, "a broken rule went unnoticed"
    assert "duplicated [" in " ".join(st.failures[0][2]).replace("duplicated []", "")


@WORLDS
def test_power_loss_twice(world):
    # a second power loss at every step of the recovery after some first ones
    st = Stats()
    w = world()
    _, total = w.boot(0)
    assert total > 300
    for k in range(1, total, max(1, total // 12)):
        w = world()
        done, _ = w.boot(k)
        assert not done
        snap = w.copy()
        _, after = w.boot(0)
        for j in range(1, min(after, snap.settle + 400)):
            w2 = snap.copy()
            done, _ = w2.boot(j)
            if done:
                break
            w2.boot(0)
            st.double += 1
            if w2.problems:
                st.failures.append(((k, j), w2.problems))
    print("broker crash points: %d double" % st.double)
    assert st.double > 500
    assert not st.failures, st.failures[:3]


def _rollback_twice(seeds, stop=False, world=FileBrokerWorld, stride=1):
    """A first power loss at every step that leaves a routing cut short
    (an i<pid>.u on disk), then a second at every step of the start-up
    that undoes it, each run to the end. stride: every stride-th first and
    second step only (the log layout's start-up rewrites the whole log, a
    step per byte of one file that is thrown away whole when torn)."""
    st = Stats()
    for seed in seeds:
        w = world(None, seed)
        _, total = w.boot(0)
        for k in range(1, total + 1, stride):
            w = world(None, seed)
            w.boot(k)
            if not any(n.endswith(".u") for n in _names(w.files)):
                continue
            st.single += 1
            snap = w.copy()
            w.boot(0)
            for j in range(1, w.settle + 2, stride):
                w2 = snap.copy()
                done, _ = w2.boot(j)
                if done:
                    break
                w2.boot(0)
                st.double += 1
                if w2.problems:
                    st.failures.append((seed, (k, j), w2.problems))
                    if stop:
                        return st
    return st


@pytest.mark.parametrize("world,stride", [
    # the log: every 10th step with UMQTT3_CRASH_FULL=1, every 30th in the suite
    pytest.param(BrokerWorld, 10 if FULL else 30, id="log", marks=pytest.mark.slow),
    pytest.param(FileBrokerWorld, 1, id="files")])
def test_power_loss_during_rollback(world, stride):
    # The start-up that undoes a routing cut short is itself cut short, at
    # every step, with the publisher's directory before the subscriber's
    # (seed 5) and after it (seed 1): every copy of the routing goes before
    # its .u record, so the publisher's resend is routed once
    # [MQTT-4.3.3-2], and the subscriber gets each message exactly once.
    st = _rollback_twice((1, 5), world=world, stride=stride)
    print("broker crash points: %d cut routings, %d second losses in their rollback"
          % (st.single, st.double))
    assert st.single > 50 and st.double > st.single
    assert not st.failures, st.failures[:3]


# ------------------------------------------------------------ SIGKILL

def _start(store):
    lib = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib")
    env = dict(os.environ, PYTHONPATH=lib, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "umqtt3.broker", "--host", "127.0.0.1",
                             "--port", "0", "--store", store, "--quiet", "--sys-interval", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
    line = proc.stdout.readline()
    assert line.startswith("umqtt3 broker listening on 127.0.0.1:"), line
    return proc, int(line.rsplit(":", 1)[1])


def _kill(proc):
    proc.send_signal(signal.SIGKILL)  # no close(), no flush: as a crash
    proc.wait(10)
    proc.stdout.close()


class _Receiver:
    """The subscriber's QoS 2 side, kept across its connections: a PUBLISH
    whose id it holds (PUBREC sent, no PUBREL yet) is a resend."""

    def __init__(self):
        self.held = set()
        self.got = []  # payloads of k/<n> messages, as handed on

    def take(self, s, want, quiet=None):
        """Read until `want` new QoS 2 messages were taken and PUBREC'd (the
        last flow stays open). quiet: then go on reading until nothing comes
        for that long, so that a duplicate would be seen."""
        from umqtt3.codec import PUBLISH as P, PUBREL as REL, PUBREC as REC, PUBACK as ACK, \
            PUBCOMP as COMP
        new = 0
        while True:
            if new >= want and quiet is None:
                return
            try:
                p = s.recv(timeout=quiet if new >= want else 10.0)
            except socket.timeout:
                assert new >= want, "%d of %d messages came" % (new, want)
                return
            assert p is not None, "closed"
            if p.type == P:
                if p.qos == 2:
                    if p.pid not in self.held:
                        self.held.add(p.pid)
                        self.got.append(bytes(p.payload))
                        new += 1
                    s.ack(REC, p.pid)
                elif p.qos == 1:
                    s.ack(ACK, p.pid)
            elif p.type == REL:
                self.held.discard(p.pid)
                s.ack(COMP, p.pid)


def test_sigkill_loses_nothing_acknowledged(tmp_path):
    # A broker process killed with SIGKILL at a different point of the QoS 2
    # flows each round: after the PUBREC it sent (the publisher's PUBREL not
    # yet sent), after a completed flow, after a subscriber PUBREC'd a
    # message and left before PUBCOMP. Every message acknowledged reaches
    # the persistent subscriber exactly once, in order [MQTT-4.3.3-2,
    # MQTT-4.6.0-6]; the sessions [MQTT-3.1.2-4, MQTT-3.1.2-5] and the
    # retained message [MQTT-3.3.1-5] survive each kill.
    from test_broker_harness import Raw
    from umqtt3.codec import PUBREC as REC, PUBCOMP as COMP, PUBREL as REL, PUBACK as ACK
    store = str(tmp_path / "store")
    proc, port = _start(store)
    rx = _Receiver()
    try:
        with Raw(port) as s:
            s.connect("sub", clean=False)
            assert s.subscribe(1, [("k/+", 2)]) == b"\x02"
        pending = None  # pid whose PUBREC came, PUBREL not yet sent
        for i in range(8):
            with Raw(port) as p:
                assert p.connect("pub", clean=False).session_present == (i > 0)
                if pending:
                    p.ack(REL, pending)  # [MQTT-4.4.0-1]
                    p.expect(COMP, pending)
                    pending = None
                pid = i % 3 + 1
                p.publish("k/%d" % i, b"m%d" % i, 2, pid=pid)
                p.expect(REC, pid)  # acknowledged: from here it must not be lost
                p.publish("ret", b"r%d" % i, 1, pid=9, retain=True)
                p.expect(ACK, 9)
                if i % 2:
                    pending = pid  # killed between PUBREC and PUBREL
                else:
                    p.ack(REL, pid)
                    p.expect(COMP, pid)
            if i % 3 == 1:
                with Raw(port) as s:
                    assert s.connect("sub", clean=False).session_present
                    rx.take(s, 1)  # then gone before PUBCOMP
            _kill(proc)
            proc, port = _start(store)
            with Raw(port) as c:
                c.connect("look")
                c.subscribe(1, [("ret", 0)])
                assert c.messages(1)[0][:2] == (b"ret", b"r%d" % i)
        with Raw(port) as s:
            assert s.connect("sub", clean=False).session_present
            rx.take(s, 8 - len(rx.got), quiet=0.5)
    finally:
        if proc.poll() is None:
            _kill(proc)
    assert rx.got == [b"m%d" % i for i in range(8)]
