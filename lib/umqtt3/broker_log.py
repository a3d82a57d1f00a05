# umqtt3.broker_log -- the broker store's files as one appending log: group
# commit for desktop file systems.
#
# LogFiles has the file interface broker_store.Disk and store.FileStore
# write through (write, read, rename, remove, listdir, mkdir, sync_dir) and
# keeps the files in RAM. Each change becomes a record appended to a buffer;
# commit() appends the buffer to DIR/log and syncs it once. The driver
# commits before any byte of a step leaves (broker.py), so what one step
# accepted is durable together, with one sync, before its acknowledgements.
#
# A power loss keeps a prefix of the log: start-up replays the records up
# to the first torn one, which is the state after a prefix of the changes,
# in order -- what the one-file-per-record layout gives too, so Disk's rules
# for a crash half way hold unchanged. The torn tail is kept aside in
# log.bad (LogFiles.cut says where). Anything a power loss cannot leave (a
# file that does not begin as a record does, a bad record with whole ones
# after it) is refused with ValueError and the file left alone. Record:
#
#   0x4C  op ('W' write, 'R' rename, 'D' remove)  path length (2)
#   data length (4)  path  data (W: the bytes, R: the new path)  CRC-32 (4)
#
# The log is rewritten as a snapshot of the live files (to log.t, synced,
# renamed over log) when it has grown past twice what is live plus
# COMPACT bytes, and at start-up when its tail was torn; a crash before the
# rename leaves the old log whole.
#
# littlefs rewrites a block for each append to a file, so on flash one small
# file per record (store.OSFiles) is the layout: Disk picks this one only
# for a new directory, with a files layer that can append (AppendFiles), on
# a file system that is not littlefs; a directory keeps its layout (layout()).
from .store import OSFiles
from .compat import fsync

_MAGIC = 0x4C
COMPACT = 1 << 20  # bytes of dead records the log may carry


def _record(out, op, path, data):
    p = path.encode()
    n = len(p)
    m = len(data)
    i = len(out)
    out.extend(b"\x4c\x00\x00\x00\x00\x00\x00\x00")
    out[i + 1] = op
    out[i + 2] = n >> 8
    out[i + 3] = n & 255
    out[i + 4] = (m >> 24) & 255
    out[i + 5] = (m >> 16) & 255
    out[i + 6] = (m >> 8) & 255
    out[i + 7] = m & 255
    out.extend(p)
    out.extend(data)
    c = _crc_from(out, i)
    out.extend(b"\0\0\0\0")
    j = len(out) - 4
    out[j] = (c >> 24) & 255
    out[j + 1] = (c >> 16) & 255
    out[j + 2] = (c >> 8) & 255
    out[j + 3] = c & 255


def _written(path, data):
    # the write record of path, on its own: what LogFiles keeps per file
    r = bytearray()
    _record(r, 0x57, path, data)
    return bytes(r)


def _data(r):
    # the data a write record holds
    n = (r[2] << 8) | r[3]
    return r[8 + n:len(r) - 4]


def _crc_from(out, i):
    import binascii
    return binascii.crc32(memoryview(out)[i:]) & 0xFFFFFFFF


def _whole(b, mv, i, end):
    """The end of the whole, valid record at b[i:], else 0."""
    import binascii
    if i + 12 > end or b[i] != _MAGIC or b[i + 1] not in (0x57, 0x52, 0x44):
        return 0
    n = (b[i + 2] << 8) | b[i + 3]
    m = (b[i + 4] << 24) | (b[i + 5] << 16) | (b[i + 6] << 8) | b[i + 7]
    j = i + 8 + n + m
    if j + 4 > end:
        return 0
    c = (b[j] << 24) | (b[j + 1] << 16) | (b[j + 2] << 8) | b[j + 3]
    if binascii.crc32(mv[i:j]) & 0xFFFFFFFF != c:
        return 0
    return j + 4


def replay(b):
    """(files {path: bytes}, bytes of whole records) from a log's bytes."""
    files = {}
    i = 0
    end = len(b)
    mv = memoryview(b)
    while True:
        k = _whole(b, mv, i, end)
        if not k:
            break
        n = (b[i + 2] << 8) | b[i + 3]
        j = k - 4
        op = b[i + 1]
        path = bytes(mv[i + 8:i + 8 + n]).decode()
        data = bytes(mv[i + 8 + n:j])
        if op == 0x57:  # W
            files[path] = data
        elif op == 0x52:  # R
            if path in files:
                files[data.decode()] = files.pop(path)
        else:  # D
            files.pop(path, None)
        i = k
    return files, i


def damage(b, good):
    """Why b[good:], what follows a log's whole records, is not a torn tail
    (a message), or None when it is one. A power loss cuts an append short:
    it leaves the start of a record, never a bad record with whole ones after
    it, and a log's first bytes are a record's. Whole records found inside
    the bad record's own extent (its header's lengths) do not count: they
    are its data, and a client's payload may hold a record's bytes."""
    end = len(b)
    if good == end:
        return None
    mv = memoryview(b)
    head = b[good] == _MAGIC and (end - good < 2 or b[good + 1] in (0x57, 0x52, 0x44))
    after = good + 1  # where later records may start
    if head:
        after = end + 1  # the header itself cut short
        if end - good >= 8:
            n = (b[good + 2] << 8) | b[good + 3]
            m = (b[good + 4] << 24) | (b[good + 5] << 16) | (b[good + 6] << 8) | b[good + 7]
            after = good + 8 + n + m + 4
    if good == 0 and not (head and after > end):
        # the start of the first record, cut short (its header, as far as
        # it goes, says so), or not a log at all
        return "no whole record at byte 0: not a store log, or a damaged one"
    i = b.find(b"\x4c", after)
    while i >= 0:
        if _whole(b, mv, i, end):
            return "bad record at byte %d, whole records after it (at byte %d)" % (good, i)
        i = b.find(b"\x4c", i + 1)
    return None


class AppendFiles(OSFiles):
    """store.OSFiles that can also append to a file and sync it: with
    fdatasync where the os module has it (the size, which reading the bytes
    back needs, is synced with them; the times are not)."""

    def append(self, path, data):
        import os
        with open(path, "ab") as f:
            f.write(data)
            sync = getattr(os, "fdatasync", None)
            if sync is None:
                fsync(f)
            else:
                f.flush()
                sync(f.fileno())


def layout(path, files):
    """'log' or 'files': the layout the directory already holds, else the
    log for a files layer that can append, on a file system that is not
    littlefs."""
    names = files.listdir(path)
    if "log" in names:
        return "log"
    if names or getattr(files, "append", None) is None:
        return "files"
    try:
        import vfs
        mounts = vfs.mount()
    except (ImportError, TypeError, AttributeError):
        return "log"  # CPython, or a port that cannot list its mounts
    best = None
    for fs, mp in mounts:
        if mp == "/" or path == mp or path.startswith(mp.rstrip("/") + "/"):
            if best is None or len(mp) > len(best[1]):
                best = (fs, mp)
    if best and type(best[0]).__name__.startswith("VfsLfs"):
        return "files"
    return "log"


class LogFiles:
    # Each live file is kept as its write record (recs: path -> record), so
    # a rewrite joins them instead of framing every file again: with many
    # sessions' references live, the snapshot is one copy, not a loop in
    # Python that holds the step up.
    def __init__(self, path, base):
        self.base = base  # the real files: append, write, rename, sync_dir
        self.dir = path
        self.log = path + "/log"
        self.tmp = path + "/log.t"
        self.dirs = {}  # directories made, also when empty
        self.buf = bytearray()  # records not yet committed
        self.broken = False  # a commit failed: the next one rewrites the log
        names = base.listdir(path)
        if "log.t" in names:
            base.remove(self.tmp)  # a rewrite that never took place
        data = base.read(self.log) if "log" in names else b""
        files, good = replay(data)
        bad = damage(data, good)
        if bad:  # not a power loss's mark: the file is left as it is
            raise ValueError("%s: %s; left as it is" % (self.log, bad))
        self.cut = None  # (byte, count): the torn tail cut at start-up
        if good != len(data):
            # a torn tail: kept aside in log.bad (appended: earlier cuts stay)
            tail = data[good:]
            if "log.bad" in names and getattr(base, "append", None):
                base.append(path + "/log.bad", tail)
            else:
                base.write(path + "/log.bad", tail)
            self.cut = (good, len(tail))
            tail = None
        self.recs = {}
        self.live = 0  # bytes a snapshot of the files would take
        for k in files:
            r = self.recs[k] = _written(k, files[k])
            self.live += len(r)
        files = None
        self.size = good
        if good != len(data) or "log" not in names:
            self._rewrite()  # a torn tail would hide what is appended after it

    # the files layer
    def write(self, path, data):
        f = self.recs
        if path in f:
            self.live -= len(f[path])
        r = f[path] = _written(path, data)
        self.live += len(r)
        self.buf.extend(r)

    def read(self, path):
        try:
            return _data(self.recs[path])
        except KeyError:
            raise OSError(2, "no such file: " + path)

    def rename(self, a, b):
        f = self.recs
        if a not in f:
            raise OSError(2, "no such file: " + a)
        if b in f:
            self.live -= len(f[b])
        old = f.pop(a)
        r = f[b] = _written(b, _data(old))
        self.live += len(r) - len(old)
        _record(self.buf, 0x52, a, b.encode())

    def remove(self, path):
        if path not in self.recs:
            raise OSError(2, "no such file: " + path)
        self.live -= len(self.recs.pop(path))
        _record(self.buf, 0x44, path, b"")

    def contents(self):
        """{path: data} of every file (what a replay of the log gives)."""
        f = {}
        for k in self.recs:
            f[k] = _data(self.recs[k])
        return f

    def listdir(self, path):
        p = path.rstrip("/") + "/"
        n = len(p)
        names = {}
        for k in self.recs:
            if k.startswith(p):
                names[k[n:].split("/")[0]] = 1
        for k in self.dirs:
            if k.startswith(p) and "/" not in k[n:]:
                names[k[n:]] = 1
        return list(names)

    def mkdir(self, path):
        self.dirs[path.rstrip("/")] = 1

    def sync_dir(self, path):
        pass  # commit() makes it durable

    # group commit
    def pending(self):
        return len(self.buf) > 0

    def commit(self):
        """Make every change so far durable, with one sync. Raises OSError
        when the disk fails (MemoryError when the heap is spent); the
        changes then wait for the next commit, which rewrites the log."""
        if not self.buf and not self.broken:
            return
        if self.broken or self.size + len(self.buf) > 2 * self.live + COMPACT:
            self._rewrite()
        else:
            try:
                self.base.append(self.log, self.buf)
            except (OSError, MemoryError):
                self.broken = True  # a torn append may sit at the end now
                raise
            self.size += len(self.buf)
        self.buf = bytearray()

    def _rewrite(self):
        snap = b"".join(self.recs.values())
        b = self.base
        try:
            b.write(self.tmp, snap)
            b.rename(self.tmp, self.log)
            b.sync_dir(self.dir)
        except (OSError, MemoryError):
            self.broken = True
            raise
        self.broken = False
        self.size = self.live = len(snap)
        self.buf = bytearray()
