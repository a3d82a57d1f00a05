"""A full disk under the ingest log (RLIMIT_FSIZE: write(2) fails part-way
with EFBIG as it does with ENOSPC): the log stays at its last durable end,
the ingest stops with a clear error, and nothing is acknowledged that is not
on disk. No Spark."""
import contextlib
import os
import resource
import signal
import time

import pytest

from pipeline_support import publish_all, publisher, reading, umqtt3_broker, wait_for  # noqa: F401
from umqtt3_pipeline import log as L
from umqtt3_pipeline.ingest import Ingest, LogStore, LogWriteError


@contextlib.contextmanager
def disk_full(path, room=100):
    """Files of this process cannot grow past the last segment's size + room."""
    seg = os.path.join(path, L.seg_name(L.segments(path)[-1]))
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(seg) + room, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old)


def burst(g, first, k=10, qos=1):
    for i in range(first, first + k):
        g.append_msg(b"umqtt3/n1/temp", b'{"v":%d,"boot":1,"seq":%d}' % (i, i), qos, 0, 0,
                     i + 1, 2000 + i)


def seqs(path, start, end):
    from umqtt3_pipeline import source
    out = []
    for b in source.rows(path, source.LogRange(start[0], start[1], end[0])):
        out += b.column("seq").to_pylist()
    return out


def size(path):
    return sum(os.path.getsize(os.path.join(path, L.seg_name(b))) for b in L.segments(path))


@pytest.mark.parametrize("where", ["records", "rolled", "new header"])
def test_a_failed_sync_leaves_the_log_at_its_durable_end(tmp_path, where):
    p = str(tmp_path)
    g = L.Log(p, segment_bytes=64 << 20 if where == "records" else 700)
    burst(g, 0, 5)
    g.sync()
    before = g.durable()
    segs = L.segments(p)
    burst(g, 5, 10, qos=2)  # a group that does not fit: the client acknowledges none of it
    room = {"records": 100, "rolled": -200, "new header": -size(p)}[where]
    with disk_full(p, room=room):
        with pytest.raises(OSError):
            g.sync()
    if where == "rolled":  # the new segment's header made it: an empty segment
        assert g.durable()[1] == before[1] and len(L.segments(p)) == len(segs) + 1
    else:
        assert g.durable() == before and L.segments(p) == segs
    assert size(p) == g.durable()[0]  # what went out is cut off again
    assert g.held == set()  # its QoS 2 ids are not held: the broker's resend is taken
    burst(g, 5, 10, qos=2)  # the broker sends the group again
    g.sync()
    start = g.durable()
    burst(g, 15, 10)
    g.sync()
    end = g.durable()
    assert size(p) == end[0]
    assert seqs(p, before, end) == list(range(5, 25))
    assert seqs(p, start, end) == list(range(15, 25))
    g.close()
    g = L.Log(p)
    assert g.durable() == end
    g.close()


def test_a_full_disk_stops_the_ingest_with_a_clear_error(umqtt3_broker, tmp_path):
    p = str(tmp_path / "log")
    ing = Ingest(p, "127.0.0.1:%d" % umqtt3_broker.port, ["umqtt3/+/+"], "full-ingest", 1).start()
    try:
        assert ing.connected.wait(10)
        pub = publisher(umqtt3_broker.port, "full-pub")
        with disk_full(p):
            publish_all(pub, [reading("n1", "temp", i, 7, i) for i in range(50)])
            wait_for(lambda: ing.error is not None, 10, "the ingest's error")
            with pytest.raises(LogWriteError) as e:
                ing.check()
            assert p in str(e.value) and "File too large" in str(e.value)
            assert not ing.thread.is_alive() or wait_for(lambda: not ing.thread.is_alive(), 5,
                                                         "the ingest to stop")
        end = ing.log.durable()
        assert size(p) == end[0]
    finally:
        ing.stop()
    # with room again, the broker sends what was never acknowledged
    ing = Ingest(p, "127.0.0.1:%d" % umqtt3_broker.port, ["umqtt3/+/+"], "full-ingest", 1).start()
    try:
        wait_for(lambda: ing.log.durable()[1] >= 50, 20, "the broker's resend")
        first, end = ing.log.first(), ing.log.durable()
        assert set(seqs(p, first, end)) == set(range(50))
        ing.check()
    finally:
        ing.stop()
        pub.disconnect()


def test_a_qos2_id_is_known_only_once_its_record_is_durable(tmp_path):
    p = str(tmp_path)
    g = L.Log(p)
    store = LogStore(g)
    assert not store.in_has(5)
    g.append_msg(b"a/b/c", b"1", 2, 0, 0, 5, 1)
    # in memory only: a PUBREC for it now would acknowledge what a crash or
    # a full disk can still take
    assert not store.in_has(5)
    g.append_msg(b"a/b/c", b"1", 2, 0, 1, 5, 1)  # the broker's resend before the sync
    g.sync()
    assert store.in_has(5)
    assert [m[6] for m in L.read_range(p, g.first()[0], g.first()[1], g.durable()[0])] == [b"1"]
    g.append_msg(b"a/b/c", b"2", 2, 0, 0, 6, 1)
    with disk_full(p, room=10):
        with pytest.raises(OSError):
            g.sync()
    assert not store.in_has(6)  # the resend is taken and synced before its PUBREC
    store.in_del(5)
    assert not store.in_has(5)  # released, as the store contract has it
    with disk_full(p, room=0):
        with pytest.raises(OSError):
            g.sync()
    assert store.in_has(5)  # the release never reached the disk: still held
    store.in_del(5)  # the broker's PUBREL again
    g.sync()
    assert not store.in_has(5)
    g.close()


def test_a_failed_sync_at_close_still_releases_the_log(tmp_path):
    p = str(tmp_path)
    g = L.Log(p)
    burst(g, 0, 5)
    g.sync()
    end = g.durable()
    burst(g, 5, 10)
    with disk_full(p, room=10):
        with pytest.raises(OSError):
            g.close()
    g = L.Log(p, lock_timeout=0)  # the lock is free again
    assert g.durable() == end and size(p) == end[0]
    g.close()
