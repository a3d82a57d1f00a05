# The broker store's log layout (broker_log.py): what a prefix of the log
# replays to, the rewrite of a torn tail, one sync per poll step, a failing
# disk, the rewrite that keeps the log short, and which layout a directory
# gets. Power loss at every byte of whole broker runs over this layout is in
# tests/test_broker_crash.py.
import os

import pytest

from crashsim import SimFiles, FileSimFiles
from test_broker_store import Raw, _broker, _publishes
from umqtt3 import broker_log
from umqtt3.broker_log import LogFiles, AppendFiles, replay, layout
from umqtt3.codec import encode_subscribe, PUBACK, PUBREC
from umqtt3.store import OSFiles

OPS = [("w", "/b/a", b"1"), ("w", "/b/s0/x", b"22"), ("r", "/b/a", "/b/c"),
       ("w", "/b/a", b""), ("d", "/b/s0/x", None), ("w", "/b/c", b"333")]


def _apply(fs, op):
    if op[0] == "w":
        fs.write(op[1], op[2])
    elif op[0] == "r":
        fs.rename(op[1], op[2])
    else:
        fs.remove(op[1])


def test_every_prefix_replays_to_a_prefix_of_the_changes():
    # a power loss keeps a prefix of the log: it must read back as the
    # files after some first changes, in order, never a mix
    sim = SimFiles()
    log = LogFiles("/b", sim)
    states = [log.contents()]
    for op in OPS:
        _apply(log, op)
        states.append(log.contents())
    log.commit()
    data = sim.files["/b/log"]
    seen = set()
    for j in range(len(data) + 1):
        files, good = replay(data[:j])
        assert files in states, (j, files)
        seen.add(states.index(files))
        assert good <= j
    assert seen == set(range(len(states)))  # every state is some prefix
    assert replay(data)[0] == states[-1]
    # what a snapshot would take, kept as the files change, is what it takes
    assert log.live == LogFiles("/b", SimFiles(dict(sim.files))).live


def test_a_corrupt_record_ends_the_replay():
    sim = SimFiles()
    log = LogFiles("/b", sim)
    log.write("/b/a", b"one")
    log.commit()
    n = len(sim.files["/b/log"])
    log.write("/b/b", b"two")
    log.write("/b/c", b"three")
    log.commit()
    bad = bytearray(sim.files["/b/log"])
    bad[n + 10] ^= 1  # inside /b/b's record
    assert replay(bytes(bad))[0] == {"/b/a": b"one"}


def test_a_torn_tail_is_rewritten_before_anything_is_appended():
    # what is appended after a torn record would never be replayed
    sim = SimFiles()
    log = LogFiles("/b", sim)
    log.write("/b/a", b"one")
    log.commit()
    sim.files["/b/log"] += b"\x4c\x57\x00"  # a record cut short
    log2 = LogFiles("/b", SimFiles(sim.files))
    assert log2.contents() == {"/b/a": b"one"}
    log2.write("/b/b", b"two")
    log2.commit()
    assert replay(sim.files["/b/log"])[0] == {"/b/a": b"one", "/b/b": b"two"}
    assert "/b/log.t" not in sim.files


def test_a_rewrite_cut_short_leaves_the_old_log():
    sim = SimFiles()
    log = LogFiles("/b", sim)
    log.write("/b/a", b"one")
    log.commit()
    sim.files["/b/log.t"] = b"half a snapshot"
    log2 = LogFiles("/b", SimFiles(sim.files))
    assert log2.contents() == {"/b/a": b"one"} and "/b/log.t" not in sim.files


class Counting(AppendFiles):
    def __init__(self):
        self.appends = 0
        self.fail = False

    def append(self, path, data):
        if self.fail == "nomem":
            raise MemoryError()  # (the heap spent as the append is built)
        if self.fail:
            raise OSError(5, "EIO")
        self.appends += 1
        AppendFiles.append(self, path, data)


def test_one_sync_per_step(tmp_path):
    # 20 QoS 1 and 20 QoS 2 messages to a persistent subscriber, read in
    # one step: one append of the log, then the acknowledgements
    files = Counting()
    b = _broker(str(tmp_path), files=files, burst=64, max_inflight=40, max_packet=4096)
    s = Raw(b, b"s")
    s.send(encode_subscribe, 1, [(b"t", 2)])
    p = Raw(b, b"p")
    buf = bytearray(4096)
    from umqtt3.codec import encode_publish
    n = 0
    for i in range(40):
        n = encode_publish(buf, n, b"t", b"m%d" % i, 1 + i % 2, i + 1, False)
    before = files.appends
    p.link.write(buf, 0, n)
    b.poll_once(0)
    assert files.appends == before + 1
    got = p.packets()
    assert [t for t, pid, pl in got].count(PUBACK) == 20
    assert [t for t, pid, pl in got].count(PUBREC) == 20
    assert len(_publishes(s.packets())) == 40


@pytest.mark.parametrize("failure", ["disk", "nomem"])
def test_failed_commit_sends_nothing_and_loses_nothing_acknowledged(tmp_path, failure):
    # the disk fails at the commit, or the heap is spent in it: no
    # acknowledgement leaves, the connections close (the publisher sends
    # again), the broker goes on, counting it; what was acknowledged before
    # is still there after a restart [MQTT-4.3.2-2]; the next commit
    # rewrites the log
    files = Counting()
    b = _broker(str(tmp_path), files=files)
    s = Raw(b, b"s")
    s.send(encode_subscribe, 1, [(b"t", 1)])
    s.leave()
    p = Raw(b, b"p")
    p.publish(b"t", b"kept", 1, 1)
    assert (PUBACK, 1, None) in p.packets()
    files.fail = True if failure == "disk" else failure
    p.publish(b"t", b"failed", 1, 2)
    assert (PUBACK, 2, None) not in p.packets()
    assert b.errors == 0 and not b.connected
    assert (b.store_errors if failure == "disk" else b.nomem) >= 1
    files.fail = False
    q = Raw(b, b"q")
    q.publish(b"t", b"after", 1, 3)
    assert (PUBACK, 3, None) in q.packets()
    b2 = _broker(str(tmp_path))
    got = [pl for pid, pl in _publishes(Raw(b2, b"s").packets())]
    assert got[0] == b"kept" and b"after" in got, got


def test_the_log_stays_short(tmp_path, monkeypatch):
    monkeypatch.setattr(broker_log, "COMPACT", 2000)
    b = _broker(str(tmp_path))
    s = Raw(b, b"s")
    s.send(encode_subscribe, 1, [(b"t", 1)])
    p = Raw(b, b"p")
    for i in range(300):
        p.publish(b"t", b"x" * 50, 1, 1 + i % 100)
        for pid, pl in _publishes(s.packets()):
            s.ack(PUBACK, pid)
        p.packets()
    assert os.path.getsize(str(tmp_path / "log")) < 3 * 2000
    s.leave()
    p.publish(b"t", b"last", 1, 9)
    b2 = _broker(str(tmp_path))
    assert [pl for pid, pl in _publishes(Raw(b2, b"s").packets())] == [b"last"]


@pytest.mark.parametrize("files,names,want", [
    (SimFiles(), [], "log"),
    (FileSimFiles(), [], "files"),
    (SimFiles(), ["s0"], "files"),  # a directory keeps its layout
    (FileSimFiles(), ["log"], "log"),
])
def test_layout(files, names, want):
    for n in names:
        files.files["/b/" + n + ("/sess" if n[0] == "s" else "")] = b""
    assert layout("/b", files) == want


def test_layout_of_the_real_files(tmp_path):
    assert layout(str(tmp_path), AppendFiles()) == "log"
    assert layout(str(tmp_path), OSFiles()) == "files"
