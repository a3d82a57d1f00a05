# umqtt3.broker_store -- the broker's retained messages and persistent
# sessions in a directory, so that they survive a restart.
#
# Two snapshot files, each rewritten whole: retained.db and sessions.db.
# A file is a run of records:
#     0xA5, type (1 byte), body length (4 bytes, big-endian), body,
#     CRC-32 of type + length + body (4 bytes, big-endian)
# A snapshot is written to NAME.tmp, synced, then renamed over NAME (atomic
# on littlefs and POSIX), so a power cut leaves the old or the new snapshot.
# Reading stops at the first record that is truncated or fails its CRC.
#
# retained.db:  R  qos, topic length (2), topic, payload
# sessions.db:  S  client id                    starts a session; then its
#               F  qos, filter                  subscriptions,
#               I  state, pid (2), frame         in-flight messages (state 1:
#                                                PUBLISH, 3: PUBREL, no frame),
#               P  pid (2)                       inbound QoS 2 ids held,
#               Q  frame                         queued messages, oldest first
import os

from . import compat
from .broker_session import Session

try:
    from binascii import crc32
except ImportError:  # a port built without binascii.crc32
    crc32 = None

_MAGIC = 0xA5


def _crc(data, crc=0):
    if crc32 is not None:
        return crc32(data, crc) & 0xFFFFFFFF
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0xEDB88320 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


def _u32(b, v, off):
    b[off] = (v >> 24) & 255
    b[off + 1] = (v >> 16) & 255
    b[off + 2] = (v >> 8) & 255
    b[off + 3] = v & 255


def _record(f, typ, body):
    h = bytearray(6)
    h[0] = _MAGIC
    h[1] = typ
    _u32(h, len(body), 2)
    t = bytearray(4)
    _u32(t, _crc(body, _crc(memoryview(h)[1:])), 0)
    f.write(h)
    f.write(body)
    f.write(t)


def records(data):
    """(type, body) for each good record of a file's bytes."""
    out = []
    i = 0
    n = len(data)
    mv = memoryview(data)
    while i + 10 <= n and data[i] == _MAGIC:
        ln = (data[i + 2] << 24) | (data[i + 3] << 16) | (data[i + 4] << 8) | data[i + 5]
        end = i + 6 + ln
        if end + 4 > n:
            break
        want = (data[end] << 24) | (data[end + 1] << 16) | (data[end + 2] << 8) | data[end + 3]
        if _crc(mv[i + 1:end]) != want:
            break
        out.append((data[i + 1], bytes(mv[i + 6:end])))
        i = end + 4
    return out


def _path(store, name):
    return store.rstrip("/") + "/" + name


def _write(store, name, recs):
    path = _path(store, name)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        for typ, body in recs:
            _record(f, typ, body)
        compat.fsync(f)
    compat.replace(tmp, path)
    compat.fsync_dir(store)


def _read(store, name):
    try:
        with open(_path(store, name), "rb") as f:
            return records(f.read())
    except OSError:
        return []


def save(b):
    """Write both snapshots of broker b."""
    recs = []
    for topic, (qos, payload) in b.retained.items():
        # $SYS figures are republished by a running broker
        if topic[:5] == b"$SYS/":
            continue
        n = len(topic)
        recs.append((82, bytes([qos, n >> 8, n & 255]) + topic + payload))  # R
    _write(b.store, "retained.db", recs)
    recs = []
    for s in b._slist:
        if s.clean:
            continue
        recs.append((83, s.cid))  # S
        for i in range(len(s.filters)):
            recs.append((70, bytes([s.fqos[i]]) + s.filters[i]))  # F
        for st, pid, frame in s.slots():
            recs.append((73, bytes([st, pid >> 8, pid & 255]) + frame))  # I
        for i in range(s.nipids):
            pid = s.ipids[i]
            recs.append((80, bytes([pid >> 8, pid & 255])))  # P
        for f in s.q:
            recs.append((81, bytes(f)))  # Q
    _write(b.store, "sessions.db", recs)


def load(b):
    """Fill broker b from its store directory (created when missing)."""
    try:
        os.mkdir(b.store)
    except OSError:
        pass
    for typ, body in _read(b.store, "retained.db"):
        if typ == 82 and len(body) >= 3:
            n = (body[1] << 8) | body[2]
            b.retained[body[3:3 + n]] = (body[0], body[3 + n:])
    s = None
    for typ, body in _read(b.store, "sessions.db"):
        if typ == 83:
            s = Session(b, body, False)
            b._sess[body] = s
            b._slist.append(s)
        elif s is None:
            continue
        elif typ == 70 and len(body) > 1:
            s.filters.append(body[1:])
            s.fqos.append(body[0])
        elif typ == 73 and len(body) >= 3:
            s.restore_slot(body[0], (body[1] << 8) | body[2], body[3:])
        elif typ == 80 and len(body) == 2:
            s.ipid_add((body[0] << 8) | body[1])
        elif typ == 81 and body:
            s.q.append(bytearray(body))
    b.dirty = False
