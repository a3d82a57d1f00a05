# Crash consistency of FileStore + Flow: power loss at every step, reboots,
# double power losses during recovery, and proof that the harness has teeth
# (each ordering rule, broken on purpose, is caught). The simulator and the
# harness are in tests/crashsim.py; docs/store.md explains both.
import os
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import crashsim as cs  # noqa: E402
from crashsim import SimFiles, PowerLoss, OutWorld, InWorld, Config, explore  # noqa: E402
from umqtt3 import store as store_mod  # noqa: E402
from umqtt3.store import FileStore, OSFiles  # noqa: E402
from umqtt3.flow import Flow  # noqa: E402
from umqtt3.codec import (encode_publish, encode_ack, PUBREC, PUBREL,  # noqa: E402
                          PUBCOMP)

# CPU-bound power-loss explorations on simulated files and clocks: make test
# runs them in a process of their own, beside the rest (Makefile)
pytestmark = pytest.mark.powerloss

# ---------------------------------------------------------------- the simulator

def test_sim_write_steps_and_torn_prefix():
    data = b"0123456789"
    for k in range(1, 12):
        s = SimFiles(crash_at=k)
        with pytest.raises(PowerLoss):
            s.write("/d/f", data)
        assert s.files["/d/f"] == data[:k - 1]  # k-1 bytes made it
        assert s.kind == ("torn write" if k <= 10 else "whole write")
        with pytest.raises(PowerLoss):  # dead from now on
            s.read("/d/f")
    s = SimFiles(crash_at=12)
    s.write("/d/f", data)
    assert s.step == 11 and s.files == {"/d/f": data}


def test_sim_rename_remove_atomic():
    s = SimFiles({"/d/a": b"x"}, crash_at=1)
    with pytest.raises(PowerLoss):
        s.rename("/d/a", "/d/b")
    assert s.files == {"/d/a": b"x"}  # not renamed: the power went first
    s = SimFiles({"/d/a": b"x", "/d/b": b"old"}, crash_at=2)
    s.rename("/d/a", "/d/b")  # replaces, atomically
    assert s.files == {"/d/b": b"x"}
    with pytest.raises(PowerLoss):
        s.remove("/d/b")
    assert s.files == {"/d/b": b"x"}
    s = SimFiles({"/d/a": b"x", "/e/c": b"y"})
    assert s.listdir("/d") == ["a"]
    s.remove("/d/a")
    assert s.listdir("/d") == [] and s.step == 1
    with pytest.raises(OSError):
        s.read("/d/a")


def test_harness_is_deterministic_and_reuses_ids():
    for world in (OutWorld, InWorld):
        cfg = Config()
        a = world(cfg, 7)
        b = world(cfg, 7)
        assert a.boot(0) == b.boot(0)
        assert not a.problems
        assert cfg.n > 2 * cfg.max_pid  # every id is used several times
    w = cs.run(OutWorld, Config(), 7, (40, 5))
    assert w.boots == 3 and not w.problems


# ---------------------------------------------------------------- the rules for CPython

class RecordingFiles(SimFiles):
    def __init__(self):
        SimFiles.__init__(self)
        self.log = []

    def write(self, path, data):
        self.log.append("write")
        SimFiles.write(self, path, data)

    def rename(self, a, b):
        self.log.append("rename")
        SimFiles.rename(self, a, b)

    def remove(self, path):
        self.log.append("remove")
        SimFiles.remove(self, path)

    def sync_dir(self, path):
        self.log.append("sync")


def test_every_change_is_synced_before_returning():
    # On CPython a create, rename or remove is durable only once the
    # directory is fsynced: each store call must do that before it returns.
    fs = RecordingFiles()
    s = FileStore("/mq", files=fs, allow_fat=True)
    buf = bytearray(64)
    n = encode_publish(buf, 0, b"t", b"m", 2, 1)
    calls = [
        lambda: s.out_add(1, 0, buf, 0, n),
        lambda: s.out_rel(1),
        lambda: s.out_del(1),
        lambda: s.out_add(1, None, buf, 0, n),
        lambda: s.out_del(1),
        lambda: s.in_add(5, buf, 0, n),
        lambda: s.in_done(5),
        lambda: s.in_del(5),
    ]
    for call in calls:
        fs.log = []
        call()
        assert fs.log and fs.log[-1] == "sync", fs.log
        assert fs.log.count("sync") == 1


def test_osfiles_fsyncs_before_close(tmp_path, monkeypatch):
    seen = []

    def fsync(f):
        f.flush()
        seen.append((f.closed, os.path.getsize(f.name)))
        os.fsync(f.fileno())

    monkeypatch.setattr(store_mod, "fsync", fsync)
    OSFiles().write(str(tmp_path / "x"), b"12345")
    assert seen == [(False, 5)]


def test_osfiles_mkdir_syncs_the_parent(tmp_path, monkeypatch):
    # a new directory is a new name in its parent: durable once the parent
    # is fsynced, before FileStore writes anything it relies on
    synced = []
    monkeypatch.setattr(store_mod, "fsync_dir", synced.append)
    d = tmp_path / "mq"
    OSFiles().mkdir(str(d))
    assert d.is_dir() and synced == [str(tmp_path)]
    OSFiles().mkdir(str(d))  # there already: nothing new to sync
    assert synced == [str(tmp_path)]


# ---------------------------------------------------------------- exploration

def test_power_loss_everywhere():
    """At least 80,000 crash points: a power loss at every step of each run
    (single) and, after each of those, a second one at every step of the
    recovery, the resend and what follows it (double). No lost, duplicated or
    reordered message anywhere."""
    t = time.time()
    st = cs.explore_suite()
    dt = time.time() - t
    print("\ncrash points: %d single + %d double = %d in %.1f s; interrupted: %s"
          % (st.single, st.double, st.total(), dt,
             ", ".join("%s %d" % (k, st.kinds[k]) for k in sorted(st.kinds))))
    assert not st.failures, st.failures[:5]
    assert st.total() >= 80000, st.total()
    assert st.single >= 2000
    for kind in ("torn write", "whole write", "rename", "remove", "send", "deliver"):
        assert st.kinds.get(kind, 0) >= 100, (kind, st.kinds)


# ---------------------------------------------------------------- teeth
#
# Each ordering rule, broken on purpose. The harness must find a violation
# (a lost, duplicated, reordered or unflagged message, or a flow that never
# finishes) for every one of them.

class SendBeforeStore(Flow):
    # rule: a QoS 1/2 PUBLISH is durable before its first send
    def publish(self, conn, topic, msg, qos=0, retain=False, key=None, props=None):
        pid = self.new_pid()
        start = conn.tlen
        end = encode_publish(conn.tx, start, topic, msg, qos, pid, retain, False,
                             self.level, props)
        conn.tlen = end
        conn.flush()
        self.store.out_add(pid, key, conn.tx, start, end - start)
        return pid


class RelBeforeRecord(Flow):
    # rule: PUBREC is recorded durably before PUBREL is sent
    def on_ack(self, conn, pkt):
        if pkt.type == PUBREC:
            conn.tlen = encode_ack(conn.tx, conn.tlen, PUBREL, pkt.pid)
            conn.flush()
            if self.store.out_has(pkt.pid):
                self.store.out_rel(pkt.pid)
            return
        Flow.on_ack(self, conn, pkt)


class ForgetOnPubrec(Flow):
    # rule: the outbound record (and its packet id) lives until PUBCOMP
    def on_ack(self, conn, pkt):
        if pkt.type == PUBREC:
            self.store.out_del(pkt.pid)
            conn.tlen = encode_ack(conn.tx, conn.tlen, PUBREL, pkt.pid)
            return
        Flow.on_ack(self, conn, pkt)


class ResendAllAsPublish(Flow):
    # rule: a record that had its PUBREC is resent as PUBREL, not PUBLISH
    def resend(self, conn, flush):
        for pid, state, key, body in self.store.recover():
            if state == "u":
                continue
            o = conn.tlen
            conn.tx[o:o + len(body)] = body
            conn.tx[o] |= 8
            conn.tlen = o + len(body)
        return True


class RecBeforeStore(Flow):
    # rule: an inbound QoS 2 packet id is durable before PUBREC is sent
    def on_publish(self, conn, pkt):
        st = self.store
        pid = pkt.pid
        conn.tlen = encode_ack(conn.tx, conn.tlen, PUBREC, pid)
        conn.flush()
        if not st.in_has(pid):
            st.in_add(pid, pkt.buf, 0, pkt.end)
            self.app.deliver(pkt, False)
            st.in_done(pid)


class CompBeforeRemove(Flow):
    # rule: the inbound packet id is removed durably before PUBCOMP is sent
    def on_ack(self, conn, pkt):
        if pkt.type == PUBREL:
            conn.tlen = encode_ack(conn.tx, conn.tlen, PUBCOMP, pkt.pid)
            conn.flush()
            self.store.in_del(pkt.pid)
            return
        Flow.on_ack(self, conn, pkt)


class DeliverBeforeStore(Flow):
    # rule: the message is stored before the application gets it
    def on_publish(self, conn, pkt):
        st = self.store
        pid = pkt.pid
        if not st.in_has(pid):
            self.app.deliver(pkt, False)
            st.in_add(pid, pkt.buf, 0, pkt.end)
            st.in_done(pid)
        conn.tlen = encode_ack(conn.tx, conn.tlen, PUBREC, pid)


class DoneBeforeDeliver(Flow):
    # rule: marked delivered only after the application had it
    def on_publish(self, conn, pkt):
        st = self.store
        pid = pkt.pid
        if not st.in_has(pid):
            st.in_add(pid, pkt.buf, 0, pkt.end)
            st.in_done(pid)
            self.app.deliver(pkt, False)
        conn.tlen = encode_ack(conn.tx, conn.tlen, PUBREC, pid)


class DeliverKnownAgain(Flow):
    # rule: a PUBLISH with a packet id already held is answered, not delivered
    def on_publish(self, conn, pkt):
        st = self.store
        pid = pkt.pid
        if not st.in_has(pid):
            st.in_add(pid, pkt.buf, 0, pkt.end)
        self.app.deliver(pkt, False)
        st.in_done(pid)
        conn.tlen = encode_ack(conn.tx, conn.tlen, PUBREC, pid)


class IgnoreUnknownPubrel(Flow):
    # rule: a PUBREL for an unknown id is still answered with PUBCOMP
    def on_ack(self, conn, pkt):
        if pkt.type == PUBREL and not self.store.in_has(pkt.pid):
            return
        Flow.on_ack(self, conn, pkt)


class NoLast(FileStore):
    # rule: the completed record with the newest key stays, as "last"
    def out_del(self, pid):
        e = self.out.pop(pid, None)
        if e:
            self.fs.remove("%s/o%08d.%s" % (self.dir, e[0], e[1]))
            self.fs.sync_dir(self.dir)
        return bool(e)


class ResendByPid(FileStore):
    # rule: resend in sequence order
    def recover(self):
        r = FileStore.recover(self)
        out = sorted((x for x in r if x[1] != "u"), key=lambda x: x[0])
        return out + [x for x in r if x[1] == "u"]


class SeqRestart(FileStore):
    # rule: sequence numbers go on past the records that survived
    def recover(self):
        r = FileStore.recover(self)
        self.nseq = 0
        return r


def _unframe_no_crc(b):
    # rule: a torn or corrupt record (bad CRC) is never used
    if len(b) < 13 or b[0] != store_mod._MAGIC:
        return None
    n = len(b) - 4
    seq = (b[1] << 24) | (b[2] << 16) | (b[3] << 8) | b[4]
    key = ((b[5] << 24) | (b[6] << 16) | (b[7] << 8) | b[8]) - 1
    return seq, key, bytes(b[9:n])


TEETH = [
    # (rule broken, scenario, Config arguments, what the harness must report)
    ("send before the store write is durable", OutWorld,
     dict(flow_cls=SendBeforeStore), ("twice", "lost")),
    ("PUBREL before PUBREC is recorded", OutWorld,
     dict(flow_cls=RelBeforeRecord), ("twice",)),
    ("outbound record dropped at PUBREC", OutWorld,
     dict(flow_cls=ForgetOnPubrec), ("lost",)),
    ("PUBREC'd record resent as PUBLISH", OutWorld,
     dict(flow_cls=ResendAllAsPublish), ("twice",)),
    ("no 'last' record for accepted()", OutWorld,
     dict(store_cls=NoLast), ("accepted(",)),
    ("resend in packet id order", OutWorld,
     dict(store_cls=ResendByPid), ("out of order",)),
    ("sequence numbers restart after reboot", OutWorld,
     dict(store_cls=SeqRestart), ("lost",)),
    ("torn outbound record used (no CRC)", OutWorld,
     dict(unframe=_unframe_no_crc), ("lost", "corrupt", "malformed", "raised")),
    ("PUBREC before the inbound id is stored", InWorld,
     dict(flow_cls=RecBeforeStore), ("lost",)),
    ("PUBCOMP before the inbound id is removed", InWorld,
     dict(flow_cls=CompBeforeRemove), ("lost",)),
    ("delivered before stored", InWorld,
     dict(flow_cls=DeliverBeforeStore), ("without the redelivered flag",)),
    ("marked delivered before delivery", InWorld,
     dict(flow_cls=DoneBeforeDeliver), ("lost",)),
    ("known packet id delivered again", InWorld,
     dict(flow_cls=DeliverKnownAgain), ("without the redelivered flag",)),
    ("unknown PUBREL not answered", InWorld,
     dict(flow_cls=IgnoreUnknownPubrel), ("did not finish",)),
    ("torn inbound record used (no CRC)", InWorld,
     dict(unframe=_unframe_no_crc), ("lost", "corrupt", "raised")),
]


@pytest.mark.parametrize("rule,world,kw,expect", TEETH, ids=[t[0] for t in TEETH])
def test_teeth(rule, world, kw, expect, monkeypatch):
    kw = dict(kw)
    unframe = kw.pop("unframe", None)
    if unframe is not None:
        monkeypatch.setattr(store_mod, "unframe", unframe)
    st = explore(world, Config(**kw), (1, 2, 3), cs.MARGIN, stop=True)
    assert st.failures, "breaking '%s' went unnoticed (%d runs)" % (rule, st.runs)
    seed, crashes, problems = st.failures[0]
    text = " | ".join(problems)
    assert any(e in text for e in expect), text
    print("\n%s: caught after %d runs, seed %d, power loss at %r: %s"
          % (rule, st.runs, seed, crashes, text[:200]))
