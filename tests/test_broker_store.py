# The broker's store (broker_store.py) at its edges: a second power loss in
# the middle of the start-up rollback, a disk that fails, a restart with
# lower limits than the store was written with, routing tags that wrap.
# The broker runs over transport.Pipe; the clients are raw packets, so each
# test decides exactly which acknowledgement goes when. Power loss at every
# step of whole runs is tests/test_broker_crash.py's job.
import os

from crashsim import SimFiles, FileSimFiles, PowerLoss
from umqtt3 import broker_store
from umqtt3.broker import Broker
from umqtt3.broker_core import CLOSED
from umqtt3.compat import cpython
from umqtt3.codec import (Packet, decode, frame_len, encode_connect, encode_publish,
                          encode_subscribe, encode_ack, encode_simple, PUBLISH, PUBACK,
                          PUBREC, PUBREL, PUBCOMP, CONNACK, DISCONNECT)
from umqtt3.store import OSFiles
from umqtt3.transport import Pipe


class Raw:
    """A client made of raw packets on one end of a Pipe."""

    def __init__(self, b, cid, clean=False, **kw):
        self.b = b
        self.link, end = Pipe.pair(1 << 16)
        self.c = b.attach(end)
        self.rx = bytearray()
        self.send(encode_connect, cid, 4, clean, kw.pop("keepalive", 0), **kw)

    def send(self, fn, *args, **kw):
        buf = bytearray(1024)
        self.link.write(buf, 0, fn(buf, 0, *args, **kw))
        for _ in range(4):
            self.b.poll_once(0)

    def publish(self, topic, payload, qos, pid, dup=False):
        self.send(encode_publish, topic, payload, qos, pid, False, dup)

    def ack(self, t, pid):
        self.send(encode_ack, t, pid)

    def packets(self):
        """[(type, pid, payload)] of what the broker sent since last asked."""
        for _ in range(4):
            self.b.poll_once(0)
        tmp = bytearray(4096)
        while True:
            n = self.link.readinto(tmp, len(tmp))
            if not n:
                break
            self.rx += tmp[:n]
        out = []
        p = Packet(4)
        while self.rx:
            n = frame_len(self.rx, 0, len(self.rx))
            if not n or n > len(self.rx):
                break
            decode(p, bytes(self.rx[:n]), 0, n)
            t = self.rx[0] >> 4
            pl = bytes(p.payload) if t == PUBLISH else None
            out.append((t, p.pid if t != CONNACK else p.session_present, pl))
            del self.rx[:n]
        return out

    def leave(self):
        self.send(encode_simple, DISCONNECT)

    def lost(self):
        self.link.closed = True  # gone without DISCONNECT
        for _ in range(4):
            self.b.poll_once(0)


# Tests that look at the directory pass files=OSFiles(): a files layer that
# cannot append gets one file per record (broker_log.layout), as on
# littlefs; the appending log has tests of its own (tests/test_broker_group_commit.py).
def _broker(store, **kw):
    kw.setdefault("sys_interval", 0)
    return Broker(port=None, store=store, **kw)


def _publishes(pk):
    return [(pid, pl) for t, pid, pl in pk if t == PUBLISH]


class Failing(OSFiles):
    """The real files, until `broken`: then every change fails, as on a
    full or missing disk. `only` narrows it to names ending so."""

    def __init__(self, only=None):
        self.broken = False
        self.only = only

    def _check(self, path):
        if self.broken and (self.only is None or path.endswith(self.only)):
            raise OSError(5, "EIO")

    def write(self, path, data):
        self._check(path)
        OSFiles.write(self, path, data)

    def rename(self, a, b):
        self._check(b)
        OSFiles.rename(self, a, b)

    def remove(self, path):
        self._check(path)
        OSFiles.remove(self, path)


# ---------------------------------------------------------------- 1. rollback

class _CutAtMark(FileSimFiles):
    """The power goes as the routing is marked over (.u -> .d)."""

    def rename(self, a, b):
        if b.endswith(".d"):
            self._die("rename")
        SimFiles.rename(self, a, b)


def _cut_routing(order):
    """Files as a power loss leaves them while a QoS 2 message was routed:
    the publisher's i<pid>.u and the subscriber's copy carrying its tag.
    order: which client connects first, so takes s0."""
    files = {}
    b = _broker("/b", files=_CutAtMark(files))
    clients = {}
    for cid in order:
        clients[cid] = Raw(b, cid)
    clients[b"s"].send(encode_subscribe, 1, [(b"t", 2)])
    clients[b"s"].leave()  # offline: the copy is queued on disk
    try:
        clients[b"p"].publish(b"t", b"m", 2, 1)
        raise AssertionError("the routing was never marked over")
    except PowerLoss:
        pass
    names = sorted(files)
    assert any(n.endswith(".u") for n in names), names
    assert any("/o" in n for n in names), names
    return files


def _state(files):
    """(routing record present, copies of it present)."""
    u = any(n.endswith(".u") for n in files)
    copies = sum(1 for n in files if "/o" in n)
    return u, copies


def test_rollback_removes_every_copy_before_any_record():
    # A second power loss at each step of the start-up that undoes the
    # routing must never leave a copy whose .u record is gone: the
    # publisher's resend would be routed again and the subscriber would get
    # the QoS 2 message twice [MQTT-4.3.3-2]. Both orders of the session
    # directories: the publisher's s0 comes before the subscriber's s1 when
    # it connected first.
    for order in ((b"s", b"p"), (b"p", b"s")):
        cut = _cut_routing(order)
        steps = 0
        for j in range(1, 200):
            files = dict(cut)
            try:
                _broker("/b", files=SimFiles(files, j))
            except PowerLoss:
                u, copies = _state(files)
                assert u or not copies, (order, j, sorted(files))
                steps += 1
                continue
            break
        assert steps >= 2, steps  # a copy removed, a record removed
        files = dict(cut)
        _broker("/b", files=SimFiles(files))
        assert _state(files) == (False, 0), sorted(files)


def test_rollback_then_resend_delivers_once():
    # after the rollback the publisher, which got no PUBREC, sends the
    # message again: it is routed once, and the subscriber gets it once
    # [MQTT-4.3.3-2, MQTT-4.4.0-1]
    for order in ((b"s", b"p"), (b"p", b"s")):
        files = _cut_routing(order)
        b = _broker("/b", files=SimFiles(files))
        p = Raw(b, b"p")
        assert p.packets()[0] == (CONNACK, True, None)
        p.publish(b"t", b"m", 2, 1, dup=True)
        assert (PUBREC, 1, None) in p.packets()
        s = Raw(b, b"s")
        assert _publishes(s.packets()) == [(1, b"m")]


# ---------------------------------------------------------------- 2. the routing tag

def test_failed_routing_mark_leaves_no_tag(tmp_path):
    # The .u -> .d rename fails: the QoS 2 message gets no PUBREC, and the
    # routing is over all the same. A QoS 1 message acknowledged after it
    # must not carry its tag, or the next start would take it back as a
    # copy of that routing [MQTT-4.3.2-2].
    files = Failing(only=".d")
    b = _broker(str(tmp_path), files=files)
    s = Raw(b, b"s")
    s.send(encode_subscribe, 1, [(b"t", 1)])
    s.leave()
    p = Raw(b, b"p")
    files.broken = True
    p.publish(b"t", b"q2", 2, 1)
    assert (PUBREC, 1, None) not in p.packets()  # not acknowledged
    assert b.store_errors == 1 and b.errors == 0
    files.broken = False
    q = Raw(b, b"q", clean=True)
    q.publish(b"t", b"acked", 1, 7)
    assert (PUBACK, 7, None) in q.packets()
    b2 = _broker(str(tmp_path))
    s2 = Raw(b2, b"s")
    got = [pl for pid, pl in _publishes(s2.packets())]
    assert b"acked" in got, got


def test_failed_routing_mark_routes_the_resend(tmp_path):
    # The id stays .u on disk, so it is not held: the publisher's resend is
    # routed again and acknowledged then. A failing disk may duplicate; it
    # never answers PUBREC for a routing a restart would take back.
    files = Failing(only=".d")
    b = _broker(str(tmp_path), files=files)
    s = Raw(b, b"s")
    s.send(encode_subscribe, 1, [(b"t", 2)])
    s.packets()
    p = Raw(b, b"p")
    files.broken = True
    p.publish(b"t", b"q2", 2, 1)
    files.broken = False
    p2 = Raw(b, b"p")
    p2.publish(b"t", b"q2", 2, 1, dup=True)
    assert (PUBREC, 1, None) in p2.packets()
    assert sorted(os.listdir(str(tmp_path / "s1"))) == ["i00001.d", "sess"]


def test_failed_copy_write_forgets_the_id_and_routes_the_resend(tmp_path):
    # The subscriber's copy (o<seq>.p) cannot be written while a QoS 2
    # PUBLISH is routed: no PUBREC, and the publisher's id is not held (in
    # RAM or on disk), so its resend is routed and reaches the subscriber,
    # never answered PUBREC without a delivery [MQTT-4.3.3-2].
    files = Failing(only=".p")
    b = _broker(str(tmp_path), files=files)
    s = Raw(b, b"s")
    s.send(encode_subscribe, 1, [(b"t", 2)])
    s.leave()
    p = Raw(b, b"p")
    files.broken = True
    p.publish(b"t", b"q2", 2, 1)
    assert (PUBREC, 1, None) not in p.packets()  # not acknowledged
    assert b.store_errors == 1
    files.broken = False
    p2 = Raw(b, b"p")
    p2.publish(b"t", b"q2", 2, 1, dup=True)
    assert (PUBREC, 1, None) in p2.packets()
    s2 = Raw(b, b"s")
    assert [pl for pid, pl in _publishes(s2.packets())] == [b"q2"]


def test_tags_wrap_past_live_copies(tmp_path):
    # After 2**30 routings the tags start again from 1, skipping a tag a
    # queued copy still carries: rolling back the new routing must not take
    # that older, acknowledged copy with it [MQTT-4.3.3-2].
    b = _broker(str(tmp_path))
    s = Raw(b, b"s")
    s.send(encode_subscribe, 1, [(b"t", 2)])
    s.leave()
    p = Raw(b, b"p")
    p.publish(b"t", b"first", 2, 1)
    p.ack(PUBREL, 1)
    sess = b.sessions()[b"s"]
    assert [e[2] for e in sess.fs.out.values()] == [1]
    b.disk.ntag = broker_store._TAG_END - 1
    p.publish(b"t", b"second", 2, 2)
    tags = sorted(e[2] for e in sess.fs.out.values())
    assert tags == [1, 2], tags
    assert b.disk.ntag == 2


# ---------------------------------------------------------------- 3. a failing disk

def test_store_failures_counted_and_the_broker_goes_on(tmp_path):
    # Every failed store write is counted in store_errors ($SYS/broker/
    # store/errors); what it was for is not acknowledged [MQTT-4.3.2-2]; and
    # a will routed from a timer or a lost connection, which nobody
    # acknowledges, does not raise out of poll_once: the broker goes on.
    files = Failing()
    b = _broker(str(tmp_path), files=files)
    s = Raw(b, b"s")
    s.send(encode_subscribe, 1, [(b"t", 1)])
    watch = Raw(b, b"watch", clean=True)
    watch.send(encode_subscribe, 1, [(b"t", 1)])
    watch.packets()
    files.broken = True
    p = Raw(b, b"p", clean=True)
    p.publish(b"t", b"x", 1, 1)
    assert (PUBACK, 1, None) not in p.packets()
    assert p.c.state == 2  # closed: it sends again on its next connection
    assert b.store_errors == 1
    n = b.store_errors
    # a will on a lost connection
    w = Raw(b, b"w", clean=True, will_topic=b"t", will_msg=b"lost", will_qos=1)
    w.lost()
    assert b.store_errors == n + 1
    # a will on a keepalive timeout [MQTT-3.1.2-24]
    k = Raw(b, b"k", clean=True, keepalive=1, will_topic=b"t", will_msg=b"timeout",
            will_qos=1)
    saved = cpython._ticks_base
    try:
        cpython._ticks_base += 5000
        for _ in range(3):
            b.poll_once(0)
    finally:
        cpython._ticks_base = saved
    assert k.c.state == 2
    assert b.store_errors == n + 2 and b.errors == 0
    # the clean subscriber, whose copies are not written, got both wills
    # [MQTT-3.1.2-8]
    got = [pl for pid, pl in _publishes(watch.packets())]
    assert got == [b"x", b"lost", b"timeout"], got


# ---------------------------------------------------------------- 4. lower limits

def test_restore_into_a_smaller_ring_keeps_every_pubrel(tmp_path):
    # Two messages PUBREC'd (records .r), then a restart with one in-flight
    # slot: both PUBRELs still go out, in order, one at a time, and each
    # record goes with its PUBCOMP [MQTT-4.4.0-1, MQTT-4.6.0-1].
    b = _broker(str(tmp_path), files=OSFiles(), max_inflight=2)
    s = Raw(b, b"s")
    s.send(encode_subscribe, 1, [(b"t", 2)])
    p = Raw(b, b"p", clean=True)
    p.publish(b"t", b"m1", 2, 1)
    p.publish(b"t", b"m2", 2, 2)
    pids = [pid for pid, pl in _publishes(s.packets())]
    assert len(pids) == 2
    for pid in pids:
        s.ack(PUBREC, pid)
    assert [x[0] for x in s.packets()] == [PUBREL, PUBREL]
    s.lost()
    b2 = _broker(str(tmp_path), files=OSFiles(), max_inflight=1)
    s2 = Raw(b2, b"s")
    assert s2.packets()[1:] == [(PUBREL, pids[0], None)]
    s2.ack(PUBCOMP, pids[0])
    assert s2.packets() == [(PUBREL, pids[1], None)]
    s2.ack(PUBCOMP, pids[1])
    assert os.listdir(str(tmp_path / "s0")) == ["sess"]


def test_restore_into_a_smaller_ring_keeps_the_order(tmp_path):
    # PUBLISH and PUBREL records that no longer fit the ring wait in the
    # queue, in their order, and go out as slots free [MQTT-4.6.0-1]
    b = _broker(str(tmp_path), files=OSFiles(), max_inflight=3)
    s = Raw(b, b"s")
    s.send(encode_subscribe, 1, [(b"t", 2)])
    p = Raw(b, b"p", clean=True)
    for i in (1, 2, 3):
        p.publish(b"t", b"m%d" % i, 2, i)
    pids = [pid for pid, pl in _publishes(s.packets())]
    s.ack(PUBREC, pids[1])  # only the second one: .p .r .p
    s.lost()
    b2 = _broker(str(tmp_path), files=OSFiles(), max_inflight=1)
    s2 = Raw(b2, b"s")
    seen = []
    for _ in range(6):
        for t, pid, pl in s2.packets():
            if t == PUBLISH:
                seen.append(("PUBLISH", pid))
                s2.ack(PUBREC, pid)
            elif t == PUBREL:
                seen.append(("PUBREL", pid))
                s2.ack(PUBCOMP, pid)
    assert seen == [("PUBLISH", pids[0]), ("PUBREL", pids[0]), ("PUBREL", pids[1]),
                    ("PUBLISH", pids[2]), ("PUBREL", pids[2])], seen
    assert os.listdir(str(tmp_path / "s0")) == ["sess"]


def test_restore_holds_every_inbound_id(tmp_path):
    # Three QoS 2 ids held (PUBREC sent, no PUBREL yet), then a restart
    # with max_qos2_in=1: all three are still held, so the resends get
    # PUBREC and are not routed again [MQTT-4.3.3-2].
    b = _broker(str(tmp_path), files=OSFiles())
    s = Raw(b, b"s", clean=False)
    s.send(encode_subscribe, 1, [(b"t", 0)])
    p = Raw(b, b"p")
    for i in (1, 2, 3):
        p.publish(b"t", b"m%d" % i, 2, i)
    assert [x for x in p.packets() if x[0] == PUBREC] == [(PUBREC, i, None) for i in (1, 2, 3)]
    assert len(_publishes(s.packets())) == 3
    b2 = _broker(str(tmp_path), files=OSFiles(), max_qos2_in=1)
    s2 = Raw(b2, b"s")
    s2.packets()
    p2 = Raw(b2, b"p")
    for i in (1, 2, 3):
        p2.publish(b"t", b"m%d" % i, 2, i, dup=True)
    assert [x for x in p2.packets() if x[0] == PUBREC] == [(PUBREC, i, None) for i in (1, 2, 3)]
    assert _publishes(s2.packets()) == []
    for i in (1, 2, 3):
        p2.ack(PUBREL, i)
    assert [x for x in p2.packets() if x[0] == PUBCOMP] == [(PUBCOMP, i, None) for i in (1, 2, 3)]
    assert sorted(os.listdir(str(tmp_path / "s1"))) == ["sess"]


# ---------------------------------------------------------------- 6. a full queue refuses

def test_full_queue_refuses_the_publisher_unacknowledged(tmp_path):
    # An offline session whose queue holds max_queued QoS 1/2 messages
    # makes the broker refuse the next one (docs/broker.md, the queue):
    # at 3.1.1 the publisher's connection is closed with no PUBACK
    # [MQTT-3.3.5-2], so nothing acknowledged is dropped; it is counted in
    # messages/refused/queue_full. The two acknowledged ones survive a restart.
    b = _broker(str(tmp_path), max_queued=2)
    s = Raw(b, b"s")
    s.send(encode_subscribe, 1, [(b"t", 1)])
    s.leave()
    p = Raw(b, b"p")
    for i in (1, 2, 3):
        p.publish(b"t", b"m%d" % i, 1, i)
    assert [x for x in p.packets() if x[0] == PUBACK] == [(PUBACK, i, None) for i in (1, 2)]
    assert p.c.state == CLOSED
    assert b.dropped == 0 and b.queue_full == 1
    b2 = _broker(str(tmp_path), max_queued=2)
    s2 = Raw(b2, b"s")
    assert [pl for pid, pl in _publishes(s2.packets())] == [b"m1", b"m2"]


# ---------------------------------------------------------------- directories

def test_new_directories_are_synced_into_their_parent(tmp_path, monkeypatch):
    # a new directory's name is durable only once its parent is fsynced:
    # the store root before anything in it, s<k> before its sess record
    # is relied on [MQTT-3.1.2-4]
    from umqtt3 import store as store_mod
    synced = []
    real = store_mod.fsync_dir

    def fsync_dir(path):
        synced.append(path)
        real(path)
    monkeypatch.setattr(store_mod, "fsync_dir", fsync_dir)
    root = str(tmp_path / "store")
    b = _broker(root, files=OSFiles())
    assert synced[0] == str(tmp_path), synced
    synced[:] = []
    Raw(b, b"s")
    assert synced[0] == root and synced[1] == root + "/s0", synced


# ---------------------------------------------------------------- expiry

def test_a_session_the_disk_refuses_leaves_no_owner(tmp_path):
    # with users, a client id belongs to its session's user (Core.owners);
    # a persistent session the disk cannot record is not made (no CONNACK),
    # and nor is its owner: ids tried while the store fails cost no RAM
    files = Failing()
    b = _broker(str(tmp_path), files=files, users={b"u": b"pw"})
    files.broken = True
    for i in range(20):
        try:
            Raw(b, b"c%d" % i, clean=False, user=b"u", password=b"pw").packets()
        except OSError:
            pass
    assert len(b.sess.all) == 0 and len(b.owners) == 0
    files.broken = False
    r = Raw(b, b"c0", clean=False, user=b"u", password=b"pw")
    r.packets()
    assert b.owners == {b"c0": b"u"} and len(b.sess.all) == 1


def test_session_expiry_on_a_failing_disk_goes_on(tmp_path):
    # A session's expiry interval ends while the disk fails: the failed
    # write is counted in store_errors and the broker goes on; the session
    # ends all the same [MQTT-3.1.2-23 (5.0)], and its record, whose end
    # time is on disk, ends at the next start.
    import broker_harness as bh
    from test_broker5_connect import connect5, disconnect5
    from umqtt3 import props as P
    files = Failing()
    with bh.running(store=str(tmp_path), files=files) as b:
        with bh.Raw(b) as c:
            connect5(c, "s", clean=False, props={P.SESSION_EXPIRY: 2})
            disconnect5(c)
        assert bh.wait_for(lambda: b.sessions()[b"s"].client is None)
        files.broken = True
        bh.advance(4000)  # the 2 s pass: the timers run in poll_once
        assert b.store_errors >= 1
        assert b"s" not in b.sessions()
        files.broken = False
        with bh.Raw(b) as c:
            assert not connect5(c, "s", clean=False).session_present
    with bh.running(store=str(tmp_path)) as b:
        bh.advance(4000)
        assert b"s" not in b.sessions()


def test_expired_record_a_failing_disk_left_does_not_hide_the_new_session(tmp_path):
    # The disk refuses to remove an expired session's record; the same
    # client id then starts a new persistent session (a new record), and
    # the broker stops. The next start must not take the old record for
    # the new session's, nor end the new one with it: the store removes the
    # old record before it writes the new one [MQTT-3.1.2-23 (5.0)]
    # [MQTT-3.1.2-4].
    import broker_harness as bh
    from test_broker5_connect import connect5, disconnect5, sub5, pub5, next_publish
    from umqtt3 import props as P
    files = Failing()
    with bh.running(store=str(tmp_path), files=files) as b:
        with bh.Raw(b) as c:
            connect5(c, "s", clean=False, props={P.SESSION_EXPIRY: 2})
            disconnect5(c)
        assert bh.wait_for(lambda: b.sessions()[b"s"].client is None)
        files.broken = True
        bh.advance(4000)  # the session ends; its record stays on disk
        assert b.store_errors >= 1
        assert b"s" not in b.sessions()
        files.broken = False
        with bh.Raw(b) as c:
            assert not connect5(c, "s", clean=False,
                                props={P.SESSION_EXPIRY: 600}).session_present
            sub5(c, 1, [(b"t", 1)])
            disconnect5(c)
        assert bh.wait_for(lambda: b.sessions()[b"s"].client is None)
    with bh.running(store=str(tmp_path)) as b:
        bh.advance(4000)
        assert b"s" in b.sessions()
        with bh.Raw(b) as p:
            connect5(p, "p")
            pub5(p, "t", b"kept", 1, 1)
        with bh.Raw(b) as c:
            assert connect5(c, "s", clean=False, props={P.SESSION_EXPIRY: 600}).session_present
            assert bytes(next_publish(c).payload) == b"kept"


def test_two_records_of_one_client_id_from_an_earlier_version_load_the_live_one(
        tmp_path, monkeypatch):
    # A store written before an ended session's record was removed ahead of
    # a new one of the same client id (add_session as it was): both records
    # are on disk. The start keeps the one that ends later in the index and
    # ends the other, whose end has passed, with its record.
    import broker_harness as bh
    from test_broker5_connect import connect5, disconnect5, sub5, pub5, next_publish
    from umqtt3 import props as P
    files = Failing()
    with monkeypatch.context() as mp:
        mp.setattr(broker_store.Disk, "add_session",
                   lambda self, s: broker_store.Disk._add(self, s))
        with bh.running(store=str(tmp_path), files=files) as b:
            with bh.Raw(b) as c:
                c.connect("x", clean=False)  # s0, so that the old record is s1
            with bh.Raw(b) as c:
                connect5(c, "s", clean=False, props={P.SESSION_EXPIRY: 2})
                sub5(c, 1, [(b"old", 1)])
                disconnect5(c)
            with bh.Raw(b) as c:
                c.connect("x", clean=True)  # s0 is free: the new record takes it
            assert bh.wait_for(lambda: b.sessions()[b"s"].client is None)
            files.broken = True
            bh.advance(4000)
            files.broken = False
            with bh.Raw(b) as c:
                connect5(c, "s", clean=False, props={P.SESSION_EXPIRY: 600})
                sub5(c, 1, [(b"t", 1)])
                disconnect5(c)
            assert bh.wait_for(lambda: b.sessions()[b"s"].client is None)
    # the new record loads first, the old one after it
    assert sorted(n for n in os.listdir(str(tmp_path)) if n[:1] == "s") == ["s0", "s1"]
    with bh.running(store=str(tmp_path), files=OSFiles()) as b:
        assert b.sessions()[b"s"].filters == [b"t"]
        bh.advance(4000)  # (the harness's clock ran ahead of the store's)
        assert b.sessions()[b"s"].filters == [b"t"]
        assert sorted(os.listdir(str(tmp_path / "s1"))) == []  # the old record went
        with bh.Raw(b) as p:
            connect5(p, "p")
            pub5(p, "t", b"kept", 1, 1)
        with bh.Raw(b) as c:
            assert connect5(c, "s", clean=False, props={P.SESSION_EXPIRY: 600}).session_present
            assert bytes(next_publish(c).payload) == b"kept"
