# umqtt3.broker_store -- the broker's retained messages and persistent
# sessions in a directory, so that they survive a restart.
#
# Two snapshot files, each rewritten whole: retained.db and sessions.db.
# A file is a run of records:
#     0xA5, type (1 byte), body length (4 bytes, big-endian), body,
#     CRC-32 of type + length + body (4 bytes, big-endian)
# A snapshot is streamed to NAME.tmp, ends with an E record (its record
# count), is synced, then renamed over NAME and the directory is synced.
# On littlefs and POSIX that rename is atomic. On FAT (VfsFat) it is not:
# MicroPython removes NAME, then renames, so a power cut between the two
# leaves only NAME.tmp. load() therefore reads NAME when it is whole (all
# records good, ending with its E record), else NAME.tmp when that is
# whole, else what NAME holds up to its first record that is truncated or
# fails its CRC.
#
# retained.db:  R  qos, topic length (2), topic, payload
# sessions.db:  S  client id                    starts a session; then its
#               F  qos, filter                  subscriptions,
#               I  state, pid (2), frame         in-flight messages (state 1:
#                                                PUBLISH, 3: PUBREL, no frame),
#               P  pid (2)                       inbound QoS 2 ids held,
#               Q  frame                         queued messages, oldest first
# both:         E  record count (4)              the end of a whole snapshot
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


def _record(f, typ, a, b=None, c=None):
    """Write one record whose body is a + b + c (b, c optional), straight
    to f: no joined copy of the body."""
    n = len(a)
    if b is not None:
        n += len(b)
    if c is not None:
        n += len(c)
    h = bytearray(6)
    h[0] = _MAGIC
    h[1] = typ
    _u32(h, n, 2)
    crc = _crc(a, _crc(memoryview(h)[1:]))
    f.write(h)
    f.write(a)
    if b is not None:
        crc = _crc(b, crc)
        f.write(b)
    if c is not None:
        crc = _crc(c, crc)
        f.write(c)
    _u32(h, crc, 0)
    f.write(memoryview(h)[:4])


def _be(b, i, n):
    v = 0
    while n:
        v = (v << 8) | b[i]
        i += 1
        n -= 1
    return v


def _next(f):
    """The next good record of file f as (type, body); None at the end of
    the file, False at a truncated record or a bad CRC."""
    h = f.read(6)
    if not h:
        return None
    if len(h) < 6 or h[0] != _MAGIC:
        return False
    ln = _be(h, 2, 4)
    body = f.read(ln + 4)
    if body is None or len(body) < ln + 4:
        return False
    if _crc(memoryview(body)[:ln], _crc(memoryview(h)[1:])) != _be(body, ln, 4):
        return False
    return h[1], body[:ln]


def _path(store, name):
    return store.rstrip("/") + "/" + name


def _whole(path):
    """True when every record of the file is good and the last one, at the
    end of the file, is the E record."""
    last = None
    try:
        with open(path, "rb") as f:
            while True:
                r = _next(f)
                if r is None:
                    break
                if r is False:
                    return False
                last = r[0]
    except OSError:
        return False
    return last == 69


def _pick(store, name):
    """The path to load NAME from (see the top of this file). A snapshot
    written before E records existed is never whole, but NAME.tmp is then
    not whole either, so NAME is read as before."""
    path = _path(store, name)
    if _whole(path):
        return path
    if _whole(path + ".tmp"):
        return path + ".tmp"
    return path


def _read(store, name):
    """Yield the good records of NAME (or of NAME.tmp), read one at a time."""
    try:
        f = open(_pick(store, name), "rb")
    except OSError:
        return
    try:
        while True:
            r = _next(f)
            if not r:
                return
            yield r
    finally:
        f.close()


def _write(store, name, fn, b):
    path = _path(store, name)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        n = fn(f, b)
        h = bytearray(4)
        _u32(h, n, 0)
        _record(f, 69, h)  # E
        compat.fsync(f)
    compat.replace(tmp, path)
    compat.fsync_dir(store)


def _hdr(x, y, z):
    h = bytearray(3)
    h[0] = x
    h[1] = y
    h[2] = z
    return h


def _retained(f, b):
    n = 0
    for topic, (qos, payload) in b.retained.items():
        # $SYS figures are republished by a running broker
        if topic[:5] == b"$SYS/":
            continue
        k = len(topic)
        _record(f, 82, _hdr(qos, k >> 8, k & 255), topic, payload)  # R
        n += 1
    return n


def _sessions(f, b):
    n = 0
    for s in b._slist:
        if s.clean:
            continue
        _record(f, 83, s.cid)  # S
        n += 1
        for i in range(len(s.filters)):
            _record(f, 70, bytes((s.fqos[i],)), s.filters[i])  # F
            n += 1
        for st, pid, frame in s.slots():
            _record(f, 73, _hdr(st, pid >> 8, pid & 255), frame)  # I
            n += 1
        for i in range(s.nipids):
            pid = s.ipids[i]
            _record(f, 80, bytes((pid >> 8, pid & 255)))  # P
            n += 1
        for q in s.q:
            _record(f, 81, q)  # Q
            n += 1
    return n


def save(b):
    """Write both snapshots of broker b. Raises OSError (or MemoryError)
    when a file cannot be written; the older snapshot is then kept."""
    _write(b.store, "retained.db", _retained, b)
    _write(b.store, "sessions.db", _sessions, b)


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
