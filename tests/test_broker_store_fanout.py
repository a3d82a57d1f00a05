# Fan-out to persistent sessions through the broker's store: each message
# is written once (a message record m<k>), each session keeps a small
# reference to it, and the message record goes when the last reference
# does (docs/store.md). Both layouts: the log (SimFiles can append) and
# one file per record (FileSimFiles, as on littlefs). Behaviour only; the
# speed is measured by tools/measure/fanout.py.
import pytest

from crashsim import SimFiles, FileSimFiles, PowerLoss
from umqtt3.broker import Broker
from umqtt3.broker_bytes import feed, take
from umqtt3.codec import encode_connect, encode_subscribe, encode_publish, encode_ack, \
    frame_len, PUBACK
from umqtt3.transport import Pipe

# CPU-bound power-loss explorations on simulated files and clocks: make test
# runs them in a process of their own, beside the rest (Makefile)
pytestmark = pytest.mark.powerloss

LAYOUTS = pytest.mark.parametrize("sim", [SimFiles, FileSimFiles], ids=["log", "files"])
_buf = bytearray(4096)


def _broker(files, inflight=8):
    return Broker(port=None, store="/b", files=files, sys_interval=0, max_sessions=64,
                  max_inflight=inflight,
                  max_clients=64, max_queued=32, max_packet=8192, mem_budget=0,
                  max_queued_bytes=0)


def _client(b, cid, clean=False):
    c = b.attach(Pipe.pair(1 << 16)[1])
    feed(b, c, bytes(_buf[:encode_connect(_buf, 0, cid, 4, clean, 0)]), 0)
    return c, take(b, c)


def _sessions(b, n):
    for i in range(n):
        c, _ = _client(b, b"s%d" % i)
        feed(b, c, bytes(_buf[:encode_subscribe(_buf, 0, 1, [(b"t/#", 1)])]), 0)
        take(b, c)
        b.disconnect(c, "offline", False)


def _publish(b, p, i, payload):
    feed(b, p, bytes(_buf[:encode_publish(_buf, 0, b"t/x", payload, 1, 1 + i)]), 0)
    return take(b, p).count(b"\x40\x02")


def _packets(data):
    out = []
    i = 0
    while i < len(data):
        n = frame_len(data, i, len(data))
        out.append(data[i:i + n])
        i += n
    return out


def _messages(data):
    """(payload, packet id) of each PUBLISH in data (MQTT 3.1.1 frames)."""
    got = []
    for p in _packets(data):
        if p[0] >> 4 == 3:
            j = 1
            while p[j] & 0x80:
                j += 1
            j += 1
            j += 2 + (p[j] << 8 | p[j + 1])
            got.append((p[j + 2:], p[j] << 8 | p[j + 1]))
    return got


def _drain(b, c, out):
    """The payloads a connected session gets, each acknowledged, until
    nothing more comes (its in-flight window refills as it acknowledges)."""
    got = []
    while True:
        ms = _messages(out)
        if not ms:
            return got
        for m, pid in ms:
            got.append(m)
            feed(b, c, bytes(_buf[:encode_ack(_buf, 0, PUBACK, pid)]), 0)
        out = take(b, c)  # (commits)


def _mfiles(files):
    """The message records live in the store (the log's replayed)."""
    from umqtt3.broker_log import replay
    names = files
    if "/b/log" in files:
        names = replay(files["/b/log"])[0]
    return sorted(k for k in names if k.startswith("/b/m"))


class _Counting(SimFiles):
    """SimFiles counting every byte written or appended."""
    written = 0

    def write(self, path, data):
        self.written += len(data)
        SimFiles.write(self, path, data)

    def append(self, path, data):
        self.written += len(data)
        SimFiles.append(self, path, data)


class _CountingFiles(_Counting):
    append = None


@pytest.mark.parametrize("sim", [_Counting, _CountingFiles], ids=["log", "files"])
def test_a_fanned_out_message_is_written_once(sim):
    n, size, msgs = 40, 2000, 5
    files = sim()
    b = _broker(files)
    _sessions(b, n)
    p, _ = _client(b, b"pub", True)
    w0 = files.written
    for i in range(msgs):
        assert _publish(b, p, i, b"%d" % i * size) == 1
    per = (files.written - w0) / msgs
    # the message once, and a small record per session: O(size + n * small),
    # where a copy per session would be n * size (80 KB here)
    assert per < size + 200 + n * 150, per
    assert len(_mfiles(files.files)) == msgs  # one message record each
    b.close()


@LAYOUTS
def test_every_session_gets_the_message_after_a_restart(sim):
    n, msgs = 12, 4
    files = {}
    b = _broker(sim(files))
    _sessions(b, n)
    p, _ = _client(b, b"pub", True)
    for i in range(msgs):
        assert _publish(b, p, i, b"fan-%d" % i) == 1
    b.close()
    # the power went: everything comes back from the store, the first two
    # of each session in its in-flight ring, the others in its queue
    b = _broker(sim(files), 2)
    assert len(_mfiles(files)) == msgs
    queued = [b.sessions()[b"s%d" % i] for i in range(n)]
    assert all(s.inflight() == 2 and s.queued() == msgs - 2 for s in queued)
    # restored once, shared by every queue that holds it (the store kept it
    # once; with one file per record the first session's record holds the
    # message itself, and restores its own)
    assert len(set(id(s.q[s.qh]) for s in queued)) == (1 if sim is SimFiles else 2)
    for i in range(n):
        c, out = _client(b, b"s%d" % i)
        got = _drain(b, c, out)
        assert got == [b"fan-%d" % k for k in range(msgs)], i
        # a message record stays while any session still refers to it
        assert len(_mfiles(files)) == (msgs if i < n - 1 else 0)
    b.close()


@LAYOUTS
def test_a_session_that_ends_takes_its_references_with_it(sim):
    files = {}
    b = _broker(sim(files))
    _sessions(b, 2)
    p, _ = _client(b, b"pub", True)
    assert _publish(b, p, 0, b"one") == 1
    _client(b, b"s0", True)  # CleanSession 1: the old session ends [MQTT-3.1.2-6]
    b.commit()
    assert len(_mfiles(files)) == 1  # s1 still holds it
    _client(b, b"s1", True)
    b.commit()
    assert _mfiles(files) == []
    b.close()


def _run(files, crash_at, sent):
    """Publish three QoS 1 messages to three offline sessions on the
    durable files; a PUBACK that left is recorded in sent."""
    sim = files(crash_at)
    try:
        b = _broker(sim)
        p, _ = _client(b, b"pub", True)
        for i in range(len(sent), 3):
            if _publish(b, p, i, b"fan-%d" % i):
                sent.append(i)
        b.close()
        return True
    except PowerLoss:
        return False


@pytest.mark.slow
@pytest.mark.parametrize("sim,stride", [(SimFiles, 1), (FileSimFiles, 1)], ids=["log", "files"])
def test_power_loss_at_every_step_of_a_fan_out(sim, stride):
    base = {}
    b = _broker(sim(base))
    _sessions(b, 3)
    b.close()
    k = 1
    runs = 0
    while True:
        files = dict(base)
        sent = []
        done = _run(lambda c: sim(files, c), k, sent)
        # after the power loss: every session gets every acknowledged message,
        # in order, once; when all have acknowledged them no message record is left
        b = _broker(sim(files), 1)
        live = _mfiles(files)
        for i in range(3):
            c, out = _client(b, b"s%d" % i)
            got = _drain(b, c, out)
            want = [b"fan-%d" % x for x in range(len(got))]
            assert got == want and len(got) >= len(sent), (k, i, got, sent)
        b.commit()
        assert _mfiles(files) == [], (k, live)
        b.close()
        runs += 1
        if done:
            break
        k += stride
    assert runs > 50
