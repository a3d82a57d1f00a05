# MemoryStore and FileStore (umqtt3.store): what the QoS flows remember.
#
# Runs under pytest on CPython and under tests/mp/testrunner.py on MicroPython,
# so: plain functions and assert, no pytest import, nothing CPython-only at
# module level. FileStore runs on the real `os` (a directory under /tmp on
# CPython, under / on MicroPython, whose WebAssembly port keeps files in
# memory). Power loss at every step is tests/test_crash.py's job.
import sys

try:
    import os
except ImportError:
    os = None

from umqtt3 import store as store_mod
from umqtt3.memstore import MemoryStore
from umqtt3.store import FileStore, StoreFull
from umqtt3.codec import encode_publish, MQTTError

try:
    from unittest import SkipTest  # pytest reports it as a skip
except ImportError:
    class SkipTest(Exception):
        pass

MICROPYTHON = sys.implementation.name == "micropython"


# ---------------------------------------------------------------- helpers

def _pub(pid, msg=b"hello", topic=b"a/b", qos=2, level=4, props=None):
    buf = bytearray(512)
    n = encode_publish(buf, 0, topic, msg, qos, pid, False, False, level, props)
    return buf, n


def _add(s, pid, key=None, msg=b"hello", **kw):
    buf, n = _pub(pid, msg, **kw)
    # at an offset inside a larger buffer, as Flow stores from conn.tx
    big = bytearray(8) + buf[:n] + bytearray(8)
    s.out_add(pid, key, big, 8, n)
    return bytes(buf[:n])


def _raises(exc, fn, *args):
    try:
        fn(*args)
    except exc as e:
        return e
    raise AssertionError("did not raise " + exc.__name__)


def _isdir(p):
    try:
        return (os.stat(p)[0] & 0x4000) != 0
    except OSError:
        return False


def _rmtree(p):
    if not _isdir(p):
        return
    for name in os.listdir(p):
        q = p + "/" + name
        if _isdir(q):
            _rmtree(q)
        else:
            os.remove(q)
    os.rmdir(p)


_n = [0]


def _tmpdir():
    """A fresh, empty directory for one test."""
    if os is None:
        raise SkipTest("no os module")
    _n[0] += 1
    if MICROPYTHON:
        base = "/umqtt3-test-store"
    else:
        base = "/tmp/umqtt3-test-store-%d" % os.getpid()
    if not _isdir(base):
        os.mkdir(base)
    d = "%s/%d" % (base, _n[0])
    _rmtree(d)
    return d


def _cleanup(d):
    _rmtree(d)
    base = d.rsplit("/", 1)[0]
    try:
        os.rmdir(base)
    except OSError:
        pass


def _files(d):
    r = os.listdir(d)
    r.sort()
    return r


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def _write(path, data):
    with open(path, "wb") as f:
        f.write(data)


# ---------------------------------------------------------------- MemoryStore

def test_memory_out_add_has_count():
    s = MemoryStore(slots=3, slot_size=64)
    assert s.out_count() == 0 and not s.out_has(1)
    p1 = _add(s, 1, key=0)
    p7 = _add(s, 7, key=1, msg=b"world")
    assert s.out_has(1) and s.out_has(7) and not s.out_has(2)
    assert s.out_count() == 2
    got = {r[0]: r for r in s.recover()}  # pid -> (pid, state, key, bytes)
    assert got[7][1] == "p" and got[7][3] == p7
    assert got[1][3] == p1


def test_memory_rel_and_del():
    s = MemoryStore(slots=2, slot_size=64)
    _add(s, 5)
    s.out_rel(5)
    assert s.recover()[0][:2] == (5, "r")
    s.out_rel(99)  # unknown: ignored
    s.out_del(99)
    assert s.out_count() == 1
    s.out_del(5)
    assert not s.out_has(5) and s.out_count() == 0
    s.out_del(5)  # twice: harmless


def test_memory_full_raises_and_keeps_what_it_has():
    s = MemoryStore(slots=2, slot_size=64)
    a = _add(s, 1, key=0)
    b = _add(s, 2, key=1)
    e = _raises(StoreFull, _add, s, 3, 2)
    assert isinstance(e, MQTTError) and e.code == 0x97
    r = s.recover()
    assert [x[0] for x in r] == [1, 2]
    assert r[0][3] == a and r[1][3] == b
    assert not s.accepted(2)  # the refused publish was not taken
    s.out_del(1)
    _add(s, 3, key=2)  # room again
    assert s.accepted(2)


def test_memory_message_larger_than_the_pool_is_too_large_not_full():
    # 40 bytes never fit a 32-byte pool, however many acks come: 0x95, not
    # StoreFull's "not now" (0x97), on which a node would retry for ever
    s = MemoryStore(slots=2, slot_size=16)
    e = _raises(MQTTError, _add, s, 1, None, b"x" * 40)
    assert e.code == 0x95 and not isinstance(e, StoreFull)
    assert s.out_count() == 0


def test_memory_pool_takes_any_size_that_fits():
    # one pool of slots * slot_size bytes: a message larger than a slot fits
    # while the pool has room, and the room comes back when it is acked
    s = MemoryStore(slots=4, slot_size=32)  # 128 bytes
    big = _add(s, 1, key=0, msg=b"x" * 60)
    small = _add(s, 2, key=1, msg=b"y")
    _raises(StoreFull, _add, s, 3, 2, b"z" * 60)  # 60 more do not fit
    s.out_del(1)  # the first one goes: the second moves down
    third = _add(s, 3, key=2, msg=b"z" * 60)
    r = s.recover()
    assert [x[0] for x in r] == [2, 3] and r[0][3] == small and r[1][3] == third, r
    assert len(big) > 32


def test_memory_recover_in_send_order():
    s = MemoryStore(slots=4, slot_size=64)
    _add(s, 9, key=0, msg=b"first")
    _add(s, 2, key=1, msg=b"second")
    _add(s, 5, key=2, msg=b"third")
    s.out_del(9)
    _add(s, 1, key=3, msg=b"fourth")  # reuses the first slot, but comes last
    s.out_rel(2)
    r = s.recover()
    assert [(x[0], x[1], x[2]) for x in r] == [(2, "r", 1), (5, "p", 2), (1, "p", 3)], r
    assert r[2][3] == _pub(1, b"fourth")[0][:len(r[2][3])]


def test_memory_key_none():
    s = MemoryStore(slots=1, slot_size=64)
    _add(s, 1, key=7)
    s.out_del(1)
    _add(s, 2)  # no key: recover must not report the slot's old key
    assert s.recover()[0][2] == -1
    assert s.accepted(7) and not s.accepted(8)


def test_memory_accepted():
    s = MemoryStore()
    assert not s.accepted(0)
    _add(s, 1, key=0)
    _add(s, 2, key=1)
    assert s.accepted(0) and s.accepted(1) and not s.accepted(2)
    s.out_del(1)
    s.out_del(2)
    assert s.accepted(1)  # completed messages stay accepted


def test_memory_inbound():
    s = MemoryStore(inbound=2)
    buf, n = _pub(3)
    s.in_add(3, buf, 0, n)
    assert s.in_has(3) and not s.in_has(4)
    s.in_done(3)
    s.in_add(4, buf, 0, n)
    _raises(StoreFull, s.in_add, 5, buf, 0, n)
    assert s.in_has(3) and s.in_has(4)
    s.in_del(3)
    assert not s.in_has(3)
    s.in_add(5, buf, 0, n)
    assert s.in_has(5)
    s.in_del(42)  # unknown: ignored


# ---------------------------------------------------------------- FileStore

def test_file_out_lifecycle():
    d = _tmpdir()
    try:
        s = FileStore(d)
        assert s.recover() == []
        p = _add(s, 3, key=0)
        assert _files(d) == ["o00000001.p"]
        assert s.out_has(3) and s.out_count() == 1
        s.out_rel(3)
        assert _files(d) == ["o00000001.r"]
        s.out_rel(3)  # again: nothing changes
        assert _files(d) == ["o00000001.r"]
        s.out_del(3)
        # the newest key's record stays, as "last", for accepted()
        assert _files(d) == ["last"]
        assert not s.out_has(3) and s.out_count() == 0
        assert s.accepted(0) and not s.accepted(1)
        rec = store_mod.unframe(_read(d + "/last"))
        assert rec == (1, 0, p)
    finally:
        _cleanup(d)


def test_file_reboot_recovers_in_sequence_order():
    d = _tmpdir()
    try:
        s = FileStore(d)
        bodies = []
        # ten records so sequence 10 must sort after 9; ids in falling order
        for i in range(10):
            bodies.append(_add(s, 20 - i, key=i, msg=b"m%d" % i))
        s.out_rel(18)
        s.out_rel(12)
        s.out_del(20)
        s.out_del(15)
        # reboot: a new store over the same directory
        s2 = FileStore(d)
        r = s2.recover()
        want = [i for i in range(10) if 20 - i not in (20, 15)]
        assert [x[0] for x in r] == [20 - i for i in want], r
        assert [x[2] for x in r] == want
        assert [x[3] for x in r] == [bodies[i] for i in want]
        assert [x[1] for x in r] == ["r" if 20 - i in (18, 12) else "p" for i in want]
        assert s2.out_count() == 8 and s2.out_has(18) and not s2.out_has(20)
        assert s2.accepted(9) and not s2.accepted(10)
        # sequence numbers go on past the survivors
        _add(s2, 20, key=10)
        assert "o00000011.p" in _files(d)
        assert [x[0] for x in s2.recover()][-1] == 20
    finally:
        _cleanup(d)


class _CountingFiles(store_mod.OSFiles):
    # the real files, counting the records read
    def __init__(self):
        self.reads = 0

    def read(self, path):
        self.reads += 1
        return store_mod.OSFiles.read(self, path)


def test_file_start_up_reads_each_record_once():
    # FileStore() scans; the first recover() (the client core's, at its
    # construction) answers with that scan instead of reading every record
    # again; a later one scans
    d = _tmpdir()
    try:
        s = FileStore(d)
        for pid in (1, 2, 3):
            _add(s, pid, key=pid, msg=b"m%d" % pid)
        s.out_rel(2)
        fs = _CountingFiles()
        s2 = FileStore(d, files=fs)
        assert fs.reads == 3
        first = s2.recover()
        assert fs.reads == 3
        assert [x[:3] for x in first] == [(1, "p", 1), (2, "r", 2), (3, "p", 3)]
        assert s2.recover() == first and fs.reads == 6
    finally:
        _cleanup(d)


def test_file_recover_after_a_change_reads_again():
    # any change between FileStore() and the first recover() makes the
    # scan's answer stale: recover() reports the store as it is now
    d = _tmpdir()
    buf, n = _pub(7)
    changes = [
        lambda s: s.out_rel(3),
        lambda s: s.out_del(1),
        lambda s: _add(s, 4, key=4),
        lambda s: s.in_add(7, buf, 0, n),
        lambda s: s.in_done(7),
        lambda s: s.in_del(7),
        lambda s: s.out_del(4),
    ]
    try:
        s = FileStore(d)
        for pid in (1, 2, 3):
            _add(s, pid, key=pid)
        for change in changes:
            fs = _CountingFiles()
            s = FileStore(d, files=fs)
            before = fs.reads
            change(s)
            got = s.recover()
            assert fs.reads > before
            assert got == FileStore(d).recover()
            assert [r[:2] for r in got] == [(r[0], r[1]) for r in s.recover()]
    finally:
        _cleanup(d)


def test_file_sequence_past_eight_digits():
    # a store that never empties for 10**8 records writes o100000000.p:
    # it is still a record, recovered in sequence order (rule 5), and
    # numbering goes on past it (rule 6)
    d = _tmpdir()
    try:
        s = FileStore(d)
        _add(s, 1, key=0)  # stays live: numbering cannot start again
        s.nseq = 99999998
        _add(s, 2, key=1)
        _add(s, 3, key=2)
        assert _files(d) == ["o00000001.p", "o100000000.p", "o99999999.p"], _files(d)
        s2 = FileStore(d)
        assert [x[0] for x in s2.recover()] == [1, 2, 3]
        assert s2.nseq == 100000000
        s2.out_rel(3)
        assert "o100000000.r" in _files(d)
        assert [x[:2] for x in FileStore(d).recover()] == [(1, "p"), (2, "p"), (3, "r")]
    finally:
        _cleanup(d)


def test_file_numbering_starts_again_when_empty():
    # with no record left to order, numbering starts again from 1, so the
    # sequence stays a small int (MicroPython) and the names 8 digits long;
    # a "last" record does not count (it is never resent)
    d = _tmpdir()
    try:
        s = FileStore(d)
        _add(s, 9, key=6)
        s.nseq = 0x3FFFFFF0
        _add(s, 1, key=7)
        assert _files(d) == ["o00000001.p", "o1073741809.p"], _files(d)
        s.out_del(9)
        s.out_del(1)
        _add(s, 2, key=8)
        assert _files(d) == ["last", "o00000001.p"], _files(d)
        s2 = FileStore(d)  # "last" holds the big number: still starts again
        s2.out_del(2)
        _add(s2, 3, key=9)
        assert _files(d) == ["last", "o00000001.p"], _files(d)
        assert s2.accepted(9) and not s2.accepted(10)
        # an undelivered inbound record is ordered by the sequence too
        b, n = _pub(4)
        s2.in_add(4, b, 0, n)
        s2.out_del(3)
        _add(s2, 5, key=10)
        assert "o00000003.p" in _files(d), _files(d)
    finally:
        _cleanup(d)


def test_file_key_range():
    # keys are stored + 1 in 32 bits: 2**32-2 is the largest that reads
    # back; a larger one is refused before anything is written
    d = _tmpdir()
    try:
        s = FileStore(d)
        big = 0xFFFFFFFE
        _add(s, 1, key=big)
        assert FileStore(d).accepted(big)
        _raises(ValueError, _add, s, 2, big + 1)
        assert _files(d) == ["o00000001.p"] and s.out_count() == 1
    finally:
        _cleanup(d)


def test_file_accepted_without_recover():
    # the constructor scans: accepted() is right straight after a reboot
    d = _tmpdir()
    try:
        s = FileStore(d)
        _add(s, 1, key=4)
        _add(s, 2, key=5)
        s.out_rel(2)
        s.out_del(2)  # key 5 completes: "last"
        s2 = FileStore(d)
        assert s2.accepted(5) and s2.accepted(0) and not s2.accepted(6)
        assert s2.out_has(1) and not s2.out_has(2)
        _add(s2, 3, key=6)  # must not overwrite o00000001.p
        assert _files(d) == ["last", "o00000001.p", "o00000003.p"], _files(d)
    finally:
        _cleanup(d)


def test_file_key_none_and_last():
    d = _tmpdir()
    try:
        s = FileStore(d)
        _add(s, 1, key=3)
        _add(s, 2)  # no key
        s.out_del(2)
        assert _files(d) == ["o00000001.p"]  # removed, not kept as "last"
        _add(s, 4, key=2)  # an older key than the newest: never "last"
        s.out_del(4)
        s.out_del(1)
        assert _files(d) == ["last"]
        assert FileStore(d).accepted(3)
    finally:
        _cleanup(d)


def test_file_keys_as_tags_for_the_broker():
    # keep_last=False (a broker session): keys are tags, no "last" record;
    # an inbound record keeps its tag, and tags never count for accepted()
    d = _tmpdir()
    try:
        s = FileStore(d, keep_last=False)
        _add(s, 1, key=5)
        s.out_del(1)
        assert _files(d) == []
        b1, n1 = _pub(3, b"x")
        s.in_add(3, b1, 0, 0, 77)  # only the id and the tag
        _add(s, 2, key=77)
        r = FileStore(d, keep_last=False).recover()
        assert [(x[0], x[1], x[2]) for x in r] == [(2, "p", 77), (3, "u", 77)], r
        assert r[1][3] == b""
        assert not FileStore(d).accepted(78) and FileStore(d).accepted(77)
    finally:
        _cleanup(d)


def test_file_inbound():
    d = _tmpdir()
    try:
        s = FileStore(d)
        b1, n1 = _pub(7, b"one")
        b2, n2 = _pub(2, b"two")
        b3, n3 = _pub(9, b"three")
        s.in_add(7, b1, 0, n1)
        s.in_add(2, b2, 0, n2)
        s.in_add(9, b3, 0, n3)
        assert s.in_has(7) and s.in_has(2) and not s.in_has(1)
        s.in_done(9)
        assert _files(d) == ["i00002.u", "i00007.u", "i00009.d"]
        s2 = FileStore(d)
        r = s2.recover()
        # undelivered ones, in the order they arrived (not by id)
        assert [(x[0], x[1]) for x in r] == [(7, "u"), (2, "u")], r
        assert r[0][3] == bytes(b1[:n1]) and r[1][3] == bytes(b2[:n2])
        assert s2.in_has(9)  # delivered, still waiting for PUBREL
        s2.in_done(7)
        s2.in_done(2)
        s2.in_del(9)
        s2.in_del(9)
        s2.in_del(7)
        assert _files(d) == ["i00002.d"]
        assert FileStore(d).recover() == []
    finally:
        _cleanup(d)


def test_file_full():
    d = _tmpdir()
    try:
        s = FileStore(d, max_messages=3)
        _add(s, 1, key=0)
        _add(s, 2, key=1)
        b, n = _pub(5)
        s.in_add(5, b, 0, n)
        _raises(StoreFull, _add, s, 3, 2)
        _raises(StoreFull, s.in_add, 6, b, 0, n)
        assert len(_files(d)) == 3 and not s.accepted(2)
        s.out_del(1)
        _add(s, 3, key=2)
        assert s.accepted(2)
    finally:
        _cleanup(d)


def test_file_write_that_fails_leaves_no_record():
    # a full flash (ENOSPC) as the record is made durable: refused, and
    # nothing of it left to be taken for a stored message at the next boot
    d = _tmpdir()
    keep = store_mod.fsync
    try:
        s = FileStore(d)
        _add(s, 1, key=0)

        def full(f):
            raise OSError(28, "")
        store_mod.fsync = full
        _raises(OSError, _add, s, 2, 1)
        b, n = _pub(5)
        _raises(OSError, s.in_add, 5, b, 0, n)
        store_mod.fsync = keep
        assert s.out_count() == 1 and not s.in_has(5) and not s.accepted(1)
        assert len(_files(d)) == 1
        assert [r[0] for r in FileStore(d).recover()] == [1]
    finally:
        store_mod.fsync = keep
        _cleanup(d)


def test_file_recover_drops_torn_and_corrupt():
    d = _tmpdir()
    try:
        s = FileStore(d)
        good = _add(s, 1, key=0, msg=b"good")
        _add(s, 2, key=1, msg=b"torn")
        _add(s, 3, key=2, msg=b"flipped")
        _add(s, 4, key=3, msg=b"empty")
        full = _read(d + "/o00000002.p")
        for cut in range(len(full)):
            _write(d + "/o00000002.p", full[:cut])
            assert store_mod.unframe(full[:cut]) is None
        bad = bytearray(_read(d + "/o00000003.p"))
        bad[12] ^= 0x20
        _write(d + "/o00000003.p", bad)
        _write(d + "/o00000004.p", b"")
        s2 = FileStore(d)
        r = s2.recover()
        assert [(x[0], x[3]) for x in r] == [(1, good)], r
        assert _files(d) == ["o00000001.p"]
        # the torn ones were never sent, so their keys were not accepted
        assert s2.accepted(0) and not s2.accepted(1)
        assert not s2.out_has(2)
    finally:
        _cleanup(d)


def test_file_torn_inbound_dropped():
    d = _tmpdir()
    try:
        s = FileStore(d)
        b, n = _pub(5)
        s.in_add(5, b, 0, n)
        data = _read(d + "/i00005.u")
        _write(d + "/i00005.u", data[:-1])
        s2 = FileStore(d)
        assert s2.recover() == [] and not s2.in_has(5)
        assert _files(d) == []
    finally:
        _cleanup(d)


def test_file_v5_publish_pid():
    # the packet id sits after the topic; v5 properties come after it
    d = _tmpdir()
    try:
        s = FileStore(d)
        buf, n = _pub(0x1234, b"x", b"t" * 200, level=5, props=b"\x01\x01")
        s.out_add(0x1234, 0, buf, 0, n)
        r = FileStore(d).recover()
        assert r[0][0] == 0x1234 and r[0][3] == bytes(buf[:n])
    finally:
        _cleanup(d)


def test_frame_roundtrip():
    for key in (-1, 0, 1, 0x7FFFFFFE):
        b = store_mod.frame(0x01020304, key, b"body")
        assert len(b) == 9 + 4 + 4
        assert store_mod.unframe(b) == (0x01020304, key, b"body")
    assert store_mod.unframe(b"") is None
    b = bytearray(store_mod.frame(1, 1, b"x"))
    b[0] = 0
    assert store_mod.unframe(b) is None


class _FakeVfs:
    # stands in for MicroPython's vfs module: one FAT volume mounted at /
    def __init__(self, fs):
        self.fs = fs

    def mount(self):
        return [(self.fs, "/")]


def test_file_refuses_fat():
    d = _tmpdir()
    fat = type("VfsFat", (), {})()  # refuse_fat goes by the class name
    old = sys.modules.get("vfs")
    sys.modules["vfs"] = _FakeVfs(fat)
    try:
        import vfs
        if not isinstance(vfs, _FakeVfs):
            raise SkipTest("the built-in vfs module cannot be replaced here")
        e = _raises(OSError, FileStore, d)
        assert "FAT" in str(e)
        FileStore(d, allow_fat=True)  # the caller may opt in
        sys.modules["vfs"] = _FakeVfs(type("VfsLfs2", (), {})())
        FileStore(d)  # littlefs: fine
    finally:
        if old is None:
            del sys.modules["vfs"]
        else:
            sys.modules["vfs"] = old
        _cleanup(d)


class _FakeMounts:
    # MicroPython's vfs module with the given (fs, mount point) pairs
    def __init__(self, *mounts):
        self.mounts = list(mounts)

    def mount(self):
        return self.mounts


def test_refuse_fat_goes_by_the_longest_mount_point():
    fat = type("VfsFat", (), {})()
    lfs = type("VfsLfs2", (), {})()
    old = sys.modules.get("vfs")
    try:
        sys.modules["vfs"] = _FakeMounts((fat, "/"), (lfs, "/flash"))
        import vfs
        if not isinstance(vfs, _FakeMounts):
            raise SkipTest("the built-in vfs module cannot be replaced here")
        store_mod.refuse_fat("/flash/mq")  # littlefs mounted over FAT
        store_mod.refuse_fat("/flash")
        for p in ("/mq", "/flashy/mq"):  # on FAT: /flashy is not under /flash
            assert "FAT" in str(_raises(OSError, store_mod.refuse_fat, p))
        sys.modules["vfs"] = _FakeMounts((lfs, "/flash"), (fat, "/"))  # in any order
        store_mod.refuse_fat("/flash/mq")
        _raises(OSError, store_mod.refuse_fat, "/mq")
        sys.modules["vfs"] = _FakeMounts((lfs, "/"), (fat, "/sd"))
        store_mod.refuse_fat("/mq")
        store_mod.refuse_fat("/sdx/mq")
        _raises(OSError, store_mod.refuse_fat, "/sd/mq")
        _raises(OSError, store_mod.refuse_fat, "/sd")
        # a relative path is under the current directory
        d = _tmpdir()
        os.mkdir(d)
        cwd = os.getcwd()
        os.chdir(d)
        try:
            sys.modules["vfs"] = _FakeMounts((lfs, "/"), (fat, d))
            _raises(OSError, store_mod.refuse_fat, "mq")
            sys.modules["vfs"] = _FakeMounts((fat, "/"), (lfs, d))
            store_mod.refuse_fat("mq")
        finally:
            os.chdir(cwd)
            _cleanup(d)
    finally:
        if old is None:
            del sys.modules["vfs"]
        else:
            sys.modules["vfs"] = old


def test_file_recover_leaves_other_files_alone():
    # FileStore("/") on a board must not wipe main.py: only names of its own
    # records (o<seq>.p/.r, i<pid>.u/.d, last) are read, dropped or kept.
    d = _tmpdir()
    try:
        s = FileStore(d)
        _write(d + "/main.py", b"print('hello')")
        _write(d + "/o1.p", b"not ours either")
        _write(d + "/i12345.x", b"nor this")
        _add(s, 1, key=0, msg=b"kept")
        s2 = FileStore(d)
        assert [x[0] for x in s2.recover()] == [1]
        assert _read(d + "/main.py") == b"print('hello')"
        assert sorted(_files(d)) == ["i12345.x", "main.py", "o00000001.p", "o1.p"]
    finally:
        _cleanup(d)
