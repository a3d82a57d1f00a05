"""The ingest log: what the broker delivered, on disk before it is acknowledged.

A directory of segments, each named by the log position it starts at
(``00000000000000000000.seg``). A position is a byte address in the whole
log, so positions only grow and never need renumbering when old segments are
deleted. Spark's offsets are positions.

Segment header::

    b"U3L1", first message number (8), held QoS 2 ids (2 + 2 each), CRC-32 (4)

Record::

    body length (4), CRC-32 of the body (4), body
    body: kind (1), flags (1), packet id (2), received at, ms (8),
          topic length (2), topic, payload

Kinds: ``M`` a message (flags: QoS, retain << 2, dup << 3), ``R`` the
broker released an inbound QoS 2 id (PUBREL), ``C`` the broker lost our
session, so every held id is void. Only ``M`` records are rows, numbered
from 0 across the whole log (Kafka's "offset").

One writer (``Log``) appends records to memory and ``sync()`` writes and
fsyncs the group, so one fsync covers a whole burst of messages. Readers
(``read_range``, ``segments``) only look at files, so they run anywhere the
directory is mounted.

Recovery reads only the last segment: its header carries the held QoS 2 ids
as of its start, and a record torn by a crash is cut off (it was never
acknowledged, so the broker sends it again). A record that does not check
but has whole records after it is corruption, not a torn tail: Corrupt, and
nothing is cut.
"""
import fcntl
import os
import re
import struct
import threading
import time
import zlib

MAGIC = b"U3L1"
MSG, REL, CLEAR = 0x4D, 0x52, 0x43  # b"M", b"R", b"C"
_REC = struct.Struct(">II")          # body length, CRC-32
_BODY = struct.Struct(">BBHQH")      # kind, flags, pid, received ms, topic length
_MAX_BODY = 1 << 28                  # a longer length is garbage, not a record


class Corrupt(IOError):
    """Synced records of the log do not check (a bad sector, a flipped bit):
    refused, never cut off or skipped."""


def seg_name(base):
    return "%020d.seg" % base


def segments(path):
    """Sorted base positions of the segments in path."""
    out = []
    for f in os.listdir(path):
        if f.endswith(".seg") and len(f) == 24 and f[:20].isdigit():
            out.append(int(f[:20]))
    out.sort()
    return out


def encode_header(first_n, held):
    held = sorted(held)
    b = MAGIC + struct.pack(">QH", first_n, len(held)) + b"".join(struct.pack(">H", p) for p in held)
    return b + struct.pack(">I", zlib.crc32(b))


def decode_header(b):
    """(header length, first message number, held ids) or None if torn."""
    if len(b) < 18 or b[:4] != MAGIC:
        return None
    first_n, count = struct.unpack_from(">QH", b, 4)
    n = 14 + 2 * count
    if len(b) < n + 4 or struct.unpack_from(">I", b, n)[0] != zlib.crc32(b[:n]):
        return None
    held = set(struct.unpack_from(">%dH" % count, b, 14))
    return n + 4, first_n, held


_MAX_HEADER = 14 + 2 * 65536 + 4


def read_header(path, base):
    with open(os.path.join(path, seg_name(base)), "rb") as f:
        return decode_header(f.read(_MAX_HEADER))


def encode_record(kind, flags, pid, t_ms, topic, payload):
    body = _BODY.pack(kind, flags, pid, t_ms, len(topic)) + topic + payload
    return _REC.pack(len(body), zlib.crc32(body)) + body


def scan(buf, off=0, end=None, check=True):
    """Yield (offset, next offset, body view) for the whole records in
    buf[off:end]; stops at the first torn or corrupt one."""
    end = len(buf) if end is None else end
    mv = memoryview(buf)
    unpack = _REC.unpack_from
    while off + 8 <= end:
        n, crc = unpack(buf, off)
        nxt = off + 8 + n
        if n < _BODY.size or n > _MAX_BODY or nxt > end:
            return
        body = mv[off + 8:nxt]
        if check and zlib.crc32(body) != crc:
            return
        yield off, nxt, body
        off = nxt


_KIND = re.compile(b"[MRC]")


def next_record(buf, off):
    """The offset of the first whole record with a good CRC that starts
    after the record at off in buf, or None: tells a torn tail (nothing whole
    after it: the group of a crash was never synced) from corruption (synced
    records follow). The search starts where the record at off says it ends,
    when its length is readable: what lies inside it is its data (a
    publisher's payload may hold a record's bytes, and a crash that tears
    that record must leave a log that opens)."""
    end = len(buf)
    mv = memoryview(buf)
    after = off + 1
    if off + 8 <= end:
        n = _REC.unpack_from(buf, off)[0]
        if _BODY.size <= n <= _MAX_BODY:
            after = off + 8 + n
    for m in _KIND.finditer(buf, after + 8):
        i = m.start() - 8  # the kind is the body's first byte
        n, crc = _REC.unpack_from(buf, i)
        if _BODY.size <= n <= _MAX_BODY and i + 8 + n <= end and zlib.crc32(mv[i + 8:i + 8 + n]) == crc:
            return i
    return None


def decode_body(body):
    """(kind, flags, pid, received ms, topic bytes, payload bytes)."""
    kind, flags, pid, t_ms, tl = _BODY.unpack_from(body, 0)
    o = _BODY.size
    return kind, flags, pid, t_ms, bytes(body[o:o + tl]), bytes(body[o + tl:])


def starts(buf, off=0, end=None):
    """The offsets of the whole records in buf[off:end] (scan()'s: up to the
    first torn or corrupt one), and the offset after the last of them."""
    at = []
    stop = off
    for o, stop, _ in scan(buf, off, end):
        at.append(o)
    return at, stop


def _gather(a, at, lens):
    # a[at[i]:at[i] + lens[i]] for every i, one after the other, as an Arrow
    # binary array: offsets and data built by numpy, no loop in Python
    import numpy as np
    import pyarrow as pa
    offs = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(lens, out=offs[1:])
    idx = np.repeat(at - offs[:-1], lens) + np.arange(offs[-1], dtype=np.int64)
    return pa.Array.from_buffers(pa.binary(), len(lens),
                                 [None, pa.py_buffer(offs.astype(np.int32)), pa.py_buffer(a[idx])])


def _be(a, at, width):
    # the big-endian unsigned integers of `width` bytes at offsets at
    import numpy as np
    v = np.zeros(len(at), np.uint64)
    for i in range(width):
        v = (v << np.uint64(8)) | a[at + i]
    return v


def read_columns(path, start, first_n, end=None, rows=8192):
    """The messages between positions start and end, as read_range() yields
    them, in columns of at most `rows`: yields (message numbers, flags,
    received ms: numpy int64 arrays; topics, payloads: Arrow binary arrays).
    One Python step per record (its length and CRC); numpy picks the fields
    out of the buffer."""
    import numpy as np
    n = first_n
    for lo, _, buf, seg in _slices(path, start, end, strict=True):
        at, stop = starts(buf)
        if seg is not None and stop < len(buf):
            raise _corrupt(path, seg, lo + stop)
        if not at:
            continue
        a = np.frombuffer(buf, np.uint8)
        s = np.array(at, np.int64)
        body = np.diff(np.append(s, stop)) - 8
        msg = a[s + 8] == MSG  # only messages are rows
        s, body = s[msg], body[msg]
        for lo in range(0, len(s), rows):
            c, b = s[lo:lo + rows], body[lo:lo + rows]
            # body: kind, flags, pid (2), received ms (8), topic length (2)
            flags = a[c + 9].astype(np.int64)
            t_ms = _be(a, c + 12, 8).astype(np.int64)
            tl = np.minimum(_be(a, c + 20, 2).astype(np.int64), b - _BODY.size)
            topics = _gather(a, c + 8 + _BODY.size, tl)
            payloads = _gather(a, c + 8 + _BODY.size + tl, b - _BODY.size - tl)
            yield np.arange(n, n + len(c), dtype=np.int64), flags, t_ms, topics, payloads
            n += len(c)


def _corrupt(path, seg, pos):
    return Corrupt("log %s: segment %s: the record at position %d does not check (inside the "
                   "range to read: corrupt, not a torn tail)" % (path, seg, pos))


def _slices(path, start, end=None, strict=False):
    """Yield (lo, stop, bytes, seg) for the part of each segment between
    positions start and end (None: every byte of the last segment's file);
    seg is the segment's file name where those bytes must be whole records
    (all but the open tail of the last segment), else None. strict: a
    segment that ends before `stop` is an error, not a torn tail."""
    bases = segments(path)
    for i, base in enumerate(bases):
        seg_end = bases[i + 1] if i + 1 < len(bases) else None
        if end is not None and base >= end or (seg_end is not None and seg_end <= start):
            continue
        with open(os.path.join(path, seg_name(base)), "rb") as f:
            hdr = decode_header(f.read(_MAX_HEADER))
            if hdr is None:
                raise IOError("segment %s: bad header" % seg_name(base))
            lo = max(start, base + hdr[0])
            f.seek(lo - base)
            if end is None and seg_end is None:
                buf = f.read()
                stop = lo + len(buf)
            else:
                stop = seg_end if end is None else end if seg_end is None else min(end, seg_end)
                buf = f.read(stop - lo)
                if strict and len(buf) < stop - lo:
                    raise IOError("segment %s: ends before position %d" % (seg_name(base), stop))
        yield lo, stop, buf, None if end is None and seg_end is None else seg_name(base)


def read_range(path, start, first_n, end=None):
    """Yield (position, message number, flags, pid, received ms, topic,
    payload) for the messages between positions start and end (None: every
    whole record); first_n is the number of the first message at or after
    start (from the offset)."""
    n = first_n
    for lo, _, buf, seg in _slices(path, start, end, strict=True):
        stop = 0
        for off, stop, body in scan(buf):
            kind, flags, pid, t_ms, topic, payload = decode_body(body)
            if kind == MSG:
                yield lo + off, n, flags, pid, t_ms, topic, payload
                n += 1
        if seg is not None and stop < len(buf):
            raise _corrupt(path, seg, lo + stop)


def advance(path, start, first_n, end, max_rows):
    """The (position, message number) after at most max_rows messages from
    start, not beyond end: where a batch limited to max_rows ends."""
    pos, n = start, first_n
    for lo, stop, buf, _ in _slices(path, start, end):
        for off, nxt, body in scan(buf, check=False):
            if body[0] == MSG:
                if n - first_n == max_rows:
                    return lo + off, n
                n += 1
            pos = lo + nxt
        if pos < stop:
            break  # a torn tail: nothing past it
        pos = stop
    return pos, n


SYNCED = "SYNCED"
SYNCED_SIZE = 64  # "position number crc32", padded: rewritten in place


def synced(path):
    """The (position, message number) a log's writer last published as
    synced (Log(publish_synced=True)), None if it publishes none; (0, 0)
    while what the file holds does not check (a write half seen: read
    nothing new)."""
    try:
        with open(os.path.join(path, SYNCED), "rb") as f:
            parts = f.read(SYNCED_SIZE).split()
    except FileNotFoundError:
        return None
    try:
        pos, n, crc = parts
        if zlib.crc32(pos + b" " + n) != int(crc, 16):
            return 0, 0
        return int(pos), int(n)
    except ValueError:
        return 0, 0


def tail(path, start, first_n):
    """The (position, message number) after the last whole, intact record
    from start on: how far a reader in another process than the writer may
    read (the writer appends whole groups; a torn or half-written tail is
    not read)."""
    pos, n = start, first_n
    for lo, stop, buf, seg in _slices(path, start):
        for _, nxt, body in scan(buf):
            if body[0] == MSG:
                n += 1
            pos = lo + nxt
        if pos < stop:
            if seg is not None:  # a segment with a successor was written whole
                raise _corrupt(path, seg, pos)
            break  # the writer's tail: nothing past it yet
        pos = stop
    return pos, n


def first(path):
    """(position, message number) of the log's first record, or None."""
    bases = segments(path)
    hdr = read_header(path, bases[0]) if bases else None
    return None if hdr is None else (bases[0] + hdr[0], hdr[1])


def cuts_between(path, start, first_n, end, every):
    """Record boundaries [(position, message number)] about every `every`
    bytes between positions start and end (for partitions of a range the
    writer's index does not cover, e.g. after a restart)."""
    cuts, last, n = [], start, first_n
    for lo, _, buf, _ in _slices(path, start, end):
        for off, _, body in scan(buf, check=False):
            if lo + off - last >= every:
                cuts.append((lo + off, n))
                last = lo + off
            if body[0] == MSG:
                n += 1
    return cuts


def boundaries(path, base, hlen, first_n, every):
    """For the batch reader: cut points [(position, message number)] about
    every `every` bytes of segment `base`, and the position after its last
    whole record."""
    with open(os.path.join(path, seg_name(base)), "rb") as f:
        buf = f.read()
    cuts, last, n = [], base + hlen, first_n
    end = base + hlen
    for off, nxt, body in scan(buf, hlen):
        if base + off - last >= every:
            cuts.append((base + off, n))
            last = base + off
        if body[0] == MSG:
            n += 1
        end = base + nxt
    if end - base < len(buf) and next_record(buf, end - base) is not None:
        raise _corrupt(path, seg_name(base), end)  # whole records after it: not a torn tail
    return cuts, end


def count(path):
    """How many messages the log holds in whole records (its last segment's
    first number plus what that segment holds)."""
    bases = segments(path)
    if not bases:
        return 0
    with open(os.path.join(path, seg_name(bases[-1])), "rb") as f:
        buf = f.read()
    hdr = decode_header(buf)
    if hdr is None:
        return 0
    return hdr[1] + sum(1 for _, _, body in scan(buf, hdr[0], check=False) if body[0] == MSG)


class Log:
    """The single writer of a log directory (an exclusive lock file keeps a
    second one out). append_*() buffer records in memory; sync() makes them
    durable with one write and one fsync, and only then moves durable()."""

    def __init__(self, path, segment_bytes=64 << 20, split_bytes=1 << 20, lock_timeout=30.0,
                 publish_synced=False):
        self.path = path
        # write the synced end to SYNCED after every sync, for readers in other
        # processes (synced()): they must not read what a power loss can take
        self.publish_synced = publish_synced
        self._synced_fd = None
        self.segment_bytes = segment_bytes
        self.split_bytes = split_bytes  # distance between the cut points of partitions
        os.makedirs(path, exist_ok=True)
        self.lockf = open(os.path.join(path, "LOCK"), "a+")
        deadline = time.monotonic() + lock_timeout
        while True:
            try:
                fcntl.flock(self.lockf, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                # a killed predecessor may still be on its way out
                if time.monotonic() > deadline:
                    self.lockf.close()
                    raise
                time.sleep(0.1)
        self.mutex = threading.Lock()  # durable end and the segment list, for other threads
        self.pending = bytearray()
        self.pending_n = 0
        self.pending_ops = []  # (pid, held?) for QoS 2 ids, applied to held_durable on sync
        self.held = set()  # inbound QoS 2 ids before PUBREL, including pending records
        self.syncs = 0
        self.synced_at = 0.0  # time.monotonic() of the last sync that wrote records
        try:
            self._recover()
        except BaseException:
            self.lockf.close()
            raise
        if publish_synced:
            os.fdatasync(self.f.fileno())  # what recovery kept may not have been synced yet
            self._publish()

    # ------------------------------------------------------------ recovery
    def _recover(self):
        bases = segments(self.path)
        hdr = read_header(self.path, bases[-1]) if bases else None
        if bases and hdr is None:
            # A header is synced before its segment takes records: one torn
            # by a crash while the segment was created leaves a file with no
            # record in it, which held nothing ever acknowledged. A bad
            # header before records is corruption.
            name = os.path.join(self.path, seg_name(bases[-1]))
            with open(name, "rb") as f:
                buf = f.read()
            if next_record(buf, 0) is not None:
                raise Corrupt("log %s: segment %s: bad header at position %d, records follow: "
                              "corrupt, refusing to cut acknowledged records"
                              % (self.path, seg_name(bases[-1]), bases[-1]))
            os.remove(name)
            bases.pop()
            hdr = read_header(self.path, bases[-1]) if bases else None
            if bases and hdr is None:  # a segment that had a successor was synced whole
                raise Corrupt("log %s: segment %s: bad header at position %d: corrupt"
                              % (self.path, seg_name(bases[-1]), bases[-1]))
        self.bases = []
        self.cuts = []
        if not bases:
            self.end, self.n, self.held_durable = 0, 0, set()
            self._create(0, 0, set())
            self.end = self.base + self.hlen
            return
        for b in bases:
            h = read_header(self.path, b) if b != bases[-1] else hdr
            if h is None:
                raise Corrupt("log %s: segment %s: bad header at position %d: corrupt"
                              % (self.path, seg_name(b), b))
            self.cuts.append((b + h[0], h[1]))
        self.bases = bases
        base = bases[-1]
        hlen, first_n, held = hdr
        name = os.path.join(self.path, seg_name(base))
        with open(name, "rb") as f:
            buf = f.read()
        off, n = hlen, first_n
        for _, nxt, body in scan(buf, hlen):
            kind, flags, pid = body[0], body[1], struct.unpack_from(">H", body, 2)[0]
            if kind == MSG:
                n += 1
                if flags & 3 == 2:
                    held.add(pid)
            elif kind == REL:
                held.discard(pid)
            elif kind == CLEAR:
                held.clear()
            off = nxt
        if off < len(buf):
            bad = next_record(buf, off)
            if bad is not None:
                raise Corrupt("log %s: segment %s: the record at position %d does not check and "
                              "whole records follow at %d: corrupt, not a torn tail; refusing to "
                              "cut acknowledged records"
                              % (self.path, seg_name(base), base + off, base + bad))
        self.f = open(name, "r+b", buffering=0)  # unbuffered: a failed write leaves nothing behind
        if off < len(buf):
            # the torn tail of a group that never synced; its bytes kept
            # aside first (a damaged record length looks the same)
            with open(name + ".bad", "ab") as bad:
                bad.write(buf[off:])
                os.fsync(bad.fileno())
            self.f.truncate(off)
            os.fsync(self.f.fileno())
        self.f.seek(off)
        self.base = base
        self.hlen = hlen
        self.written = off  # bytes of the current segment on disk
        self.end = base + off
        self.n = n
        self.held = set(held)
        self.held_durable = set(held)

    def _create(self, base, first_n, held):
        # the header is durable before the segment joins the list, so a
        # trim can never leave only a segment whose header a crash tore
        hdr = encode_header(first_n, held)
        name = os.path.join(self.path, seg_name(base))
        f = open(name, "w+b", buffering=0)
        try:
            _write_all(f, hdr)
            os.fsync(f.fileno())
            fsync_path(self.path)
        except OSError:
            f.close()
            os.remove(name)  # it never took a record
            raise
        self.f = f
        self.base = base
        self.hlen = len(hdr)
        self.written = len(hdr)
        with self.mutex:
            self.bases.append(base)
            self.cuts.append((base + len(hdr), first_n))

    # ------------------------------------------------------------ writing
    def append_msg(self, topic, payload, qos, retain, dup, pid, t_ms):
        if qos == 2 and pid in self.held and pid not in self.held_durable:
            return  # resent before its group synced: the record is in that group once
        flags = qos | (retain << 2) | (dup << 3)
        self.pending += encode_record(MSG, flags, pid if qos else 0, t_ms, topic, payload)
        self.pending_n += 1
        if qos == 2:
            self.held.add(pid)
            self.pending_ops.append((pid, True))

    def append_release(self, pid):
        """The broker sent PUBREL: pid is free for a new message."""
        if pid in self.held:
            self.held.discard(pid)
            self.pending += encode_record(REL, 0, pid, 0, b"", b"")
            self.pending_ops.append((pid, False))

    def append_clear(self):
        """The broker kept no session: every held id is void."""
        if self.held:
            self.held.clear()
            self.pending += encode_record(CLEAR, 0, 0, 0, b"", b"")
            self.pending_ops.append((None, False))

    def sync(self):
        """Write and fsync what was appended; returns the durable end."""
        if not self.pending:
            return self.end
        data = self.pending
        try:
            if self.written + len(data) > self.segment_bytes and self.written > self.hlen:
                old = self.f
                self._create(self.end, self.n, self.held_durable)
                old.close()  # every byte of it was synced by an earlier sync()
                with self.mutex:
                    self.end = self.base + self.hlen
            _write_all(self.f, data)
            os.fdatasync(self.f.fileno())
        except OSError:
            self._restore()
            raise
        self.syncs += 1
        self.synced_at = time.monotonic()
        self.written += len(data)
        for pid, hold in self.pending_ops:
            if pid is None:
                self.held_durable.clear()
            elif hold:
                self.held_durable.add(pid)
            else:
                self.held_durable.discard(pid)
        end, n = self.end + len(data), self.n + self.pending_n
        with self.mutex:
            if end - self.cuts[-1][0] >= self.split_bytes:
                self.cuts.append((end, n))
            self.end, self.n = end, n
        self.pending = bytearray()
        self.pending_n = 0
        self.pending_ops = []
        if self.publish_synced:
            self._publish()
        return end

    def _restore(self):
        """After a failed write or fsync (a full disk): the file back to its
        last durable end and the group forgotten, so positions stay those of
        the file; the group was never acknowledged and the broker sends it
        again."""
        self.pending = bytearray()
        self.pending_n = 0
        self.pending_ops = []
        self.held = set(self.held_durable)
        os.ftruncate(self.f.fileno(), self.written)
        self.f.seek(self.written)

    def _publish(self):
        # one pwrite in place (a rename per sync costs about 0.5 ms, in the
        # path from the fsync to the acknowledgements); a CRC tells a reader
        # a torn or half-seen write. No fsync: SYNCED never says more than is
        # durable (the records were synced before), and a crash can only
        # leave it older or torn
        body = b"%d %d" % (self.end, self.n)
        line = b"%s %08x" % (body, zlib.crc32(body))
        if self._synced_fd is None:
            self._synced_fd = os.open(os.path.join(self.path, SYNCED), os.O_WRONLY | os.O_CREAT,
                                      0o644)
        os.pwrite(self._synced_fd, line.ljust(SYNCED_SIZE - 1) + b"\n", 0)

    def durable(self):
        """(position, message number) of the durable end."""
        with self.mutex:
            return self.end, self.n

    def first(self):
        """(position, message number) of the first retained record."""
        with self.mutex:
            return self.cuts[0]

    def cut_points(self, start, end):
        """Record boundaries strictly between positions start and end where a
        batch may be split into partitions: [(position, message number)]."""
        with self.mutex:
            return [c for c in self.cuts if start < c[0] < end]

    def trim(self, pos):
        """Delete the segments that end at or before pos (Spark committed
        everything before it). The segment being written always stays."""
        with self.mutex:
            drop = []
            while len(self.bases) > 1 and self.bases[1] <= pos:
                drop.append(self.bases.pop(0))
            if drop:
                keep = self.bases[0]
                self.cuts = [c for c in self.cuts if c[0] >= keep] or self.cuts[-1:]
        for b in drop:
            os.remove(os.path.join(self.path, seg_name(b)))
        return len(drop)

    def close(self):
        try:
            self.sync()  # a failure leaves the file at its durable end (_restore)
        finally:
            self.f.close()
            if self._synced_fd is not None:
                os.close(self._synced_fd)
                self._synced_fd = None
            self.lockf.close()  # releases the lock


def _write_all(f, data):
    # an unbuffered file may take part of it (a disk filling up): the rest,
    # or the error
    mv = memoryview(data)
    while mv:
        mv = mv[f.write(mv):]


def fsync_path(path):
    """fsync a file or a directory (its entries) by name."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
