# umqtt3.store -- what the QoS flows must remember across a reset.
#
# Two stores, one interface:
#   out_add(pid, key, buf, off, n)  a QoS 1/2 PUBLISH as sent; durable before
#                                   the first send
#   out_rel(pid)                    PUBREC came: durable before PUBREL is sent;
#                                   True: the store sends PUBREL itself later
#                                   (a broker session keeping its send order)
#   out_del(pid)                    PUBACK/PUBCOMP came: True if it held pid
#   out_has(pid), out_count()
#   in_add(pid, buf, off, n)        inbound QoS 2 PUBLISH: durable before PUBREC
#                                   (FileStore: key=, a tag kept in the record)
#   in_done(pid)                    handed to the application
#   in_has(pid), in_del(pid)        PUBREL: removed durably before PUBCOMP
#   in_count()                      inbound ids held (a full store: are PUBRELs to come?)
#   in_max(window)                  inbound ids it always has room for while the
#                                   client holds at most window outbound messages
#                                   (MQTT 5: the Receive Maximum it may announce)
#   recover()                       after a reboot: [(pid, state, key, bytes)]
#                                   outbound in send order (state "p" or "r"),
#                                   then undelivered inbound (state "u")
#   accepted(key)                   was a publish with this key ever stored?
#                                   (keys increase: sequence numbers)
#
# MemoryStore (umqtt3.memstore, the client's default) holds one preallocated
# pool (no allocation per message, nothing survives a reset). FileStore keeps
# one small CRC-framed file per message, as littlefs handles small files and
# atomic renames well (docs/store.md).
#
# Both are made for one client. The broker's sessions (broker_session.py)
# implement the same interface over their in-flight ring, and a persistent
# session writes through to a FileStore of its own (broker_store.py).
#
# The file layer (OSFiles, refuse_fat) uses os and vfs directly: they are
# the same modules on MicroPython and CPython; only fsync and rename differ,
# and those are written here for MicroPython (compat's would be in every
# client's compat, a FileStore or not), CPython's come from compat.
import os
from binascii import crc32
from struct import pack, unpack
from .compat import const, MICROPYTHON

if MICROPYTHON:
    # littlefs renames atomically, over an existing file too
    from os import rename as replace

    def fsync(f):
        # littlefs commits a file's data and metadata on flush
        f.flush()

    def fsync_dir(path):
        # littlefs and FAT have no directory handles; littlefs renames and
        # removes are atomic metadata commits
        pass

else:
    from .compat import fsync, fsync_dir, replace
from .client_codec import StoreFull


# ----------------------------------------------------------------- on flash

_MAGIC = const(0x55)  # 'U'


def frame(n, key, b):
    # one record (public: the broker's store frames its records the same way)
    # magic, 4-byte sequence number n, 4-byte key (+1, so -1 "no key"
    # stores 0), the body b, CRC-32
    if key < -1 or (key + 1) >> 32:
        raise ValueError("key out of range 0..2**32-2")
    b = pack(">BII", _MAGIC, n & 0xFFFFFFFF, key + 1) + b
    return b + pack(">I", crc32(b))  # (crc32 is unsigned on both Pythons)


def unframe(b):
    """(seq, key, body) or None for a torn or corrupt record."""
    n = len(b) - 4
    if n < 9 or b[0] != _MAGIC or crc32(b[:n]) != unpack(">I", b[n:])[0]:
        return None
    seq, key = unpack(">II", b[1:9])
    return seq, key - 1, bytes(b[9:n])


class OSFiles:
    """The file operations FileStore needs, on the real filesystem. Tests swap
    in a layer that simulates power loss at every step and byte."""

    def write(self, path, data):
        try:
            with open(path, "wb") as f:
                f.write(data)
                fsync(f)
        except OSError:
            # a full flash (ENOSPC): refused means not stored, so no part of
            # the record stays to be found at the next boot (a whole one
            # would be sent then)
            try:
                os.remove(path)
            except OSError:
                pass
            raise

    def read(self, path):
        with open(path, "rb") as f:
            return f.read()

    def rename(self, a, b):
        replace(a, b)

    def remove(self, path):
        os.remove(path)

    listdir = staticmethod(os.listdir)

    def mkdir(self, path):
        try:
            os.mkdir(path)
        except OSError:
            return  # there already
        # a new directory's name is durable once its parent is synced
        i = path.rstrip("/").rfind("/")
        fsync_dir(path[:i] or "/" if i >= 0 else ".")

    def sync_dir(self, path):
        fsync_dir(path)


class FileStore:
    """One file per in-flight message under `path` (default /mq):
    o<seq>.p  outbound PUBLISH awaiting PUBACK/PUBREC (renamed to .r on PUBREC)
    i<pid>.u  inbound QoS 2 message not yet handed to the application (.d after)
    last      the completed outbound record with the highest key.
    keep_last=False (the broker's sessions): no `last`, keys are only tags."""

    def __init__(self, path="/mq", files=None, max_messages=32, allow_fat=False,
                 keep_last=True):
        self.dir = path
        self.fs = files or OSFiles()
        self.max = max_messages
        self.keep_last = keep_last
        self.fs.mkdir(path)
        if not allow_fat:
            refuse_fat(path)
        self.nseq = 0
        self.last_key = -1
        # scan now (recover() also makes self.out, pid -> [seq, state, key],
        # and self.inb, pid -> state): accepted(), the sequence numbers and
        # the packet ids in use are only right once the records of the last
        # boot are known. What it found is the first recover()'s answer,
        # unless the store changes before (a client's start-up reads each
        # record once).
        self.found = None
        self.found = self.recover()

    def _next_seq(self):
        # every new record starts here: refused when full (nothing written),
        # and the scan's answer is stale.
        # Numbering starts again whenever nothing it orders is left (no
        # outbound record, no undelivered inbound one), so names and the
        # 32-bit field stay short (and small ints on MicroPython) on a
        # store that runs for years. Rule 6 holds: no live record is passed.
        if len(self.out) + len(self.inb) >= self.max:
            raise StoreFull("store full", 0x97)
        self.found = None
        if not self.out and "u" not in self.inb.values():
            self.nseq = 0
        self.nseq += 1
        return self.nseq

    def _sync(self):
        # every change ends here: durable, and the scan's answer is stale
        self.found = None
        self.fs.sync_dir(self.dir)

    def out_add(self, pid, key, buf, off, n):
        k = -1 if key is None else key
        seq = self._next_seq()  # a key out of range: frame raises, nothing written
        self.fs.write("%s/o%08d.%s" % (self.dir, seq, "p"), frame(seq, k, buf[off:off + n]))
        self._sync()
        self.out[pid] = [seq, "p", k]
        if k > self.last_key:
            self.last_key = k

    def out_rel(self, pid):
        e = self.out.get(pid)
        if e and e[1] == "p":
            d = self.dir
            self.fs.rename("%s/o%08d.%s" % (d, e[0], "p"), "%s/o%08d.%s" % (d, e[0], "r"))
            self._sync()
            e[1] = "r"

    def out_del(self, pid):
        e = self.out.pop(pid, None)
        if e:
            name = "%s/o%08d.%s" % (self.dir, e[0], e[1])
            if self.keep_last and e[2] >= 0 and e[2] >= self.last_key:
                # keep the newest key's record as "last": accepted() survives
                self.fs.rename(name, self.dir + "/last")
            else:
                self.fs.remove(name)
            self._sync()
        return bool(e)

    def out_has(self, pid):
        return pid in self.out

    def out_count(self):
        return len(self.out)

    def in_add(self, pid, buf, off, n, key=-1):
        seq = self._next_seq()  # arrival order, for handing them over again
        self.fs.write("%s/i%05d.%s" % (self.dir, pid, "u"), frame(seq, key, buf[off:off + n]))
        self._sync()
        self.inb[pid] = "u"

    def in_done(self, pid):
        if self.inb.get(pid) == "u":
            d = self.dir
            self.fs.rename("%s/i%05d.%s" % (d, pid, "u"), "%s/i%05d.%s" % (d, pid, "d"))
            self._sync()
            self.inb[pid] = "d"

    def in_has(self, pid):
        return pid in self.inb

    def in_del(self, pid):
        st = self.inb.pop(pid, None)
        if st:
            self.fs.remove("%s/i%05d.%s" % (self.dir, pid, st))
            self._sync()

    def accepted(self, key):
        return key <= self.last_key

    def in_count(self):
        return len(self.inb)

    def in_max(self, window):
        # the room is shared: a client holds at most window outbound
        # records (Core.queue), so the rest is always the inbound's
        return self.max - window

    def in_clear(self):
        """The broker lost the session: its held QoS 2 ids mean nothing now.
        Call after undelivered ("u") messages were handed over."""
        for pid in list(self.inb):
            self.in_del(pid)

    def recover(self):
        """Scan the directory: drop torn or corrupt files, rebuild the maps,
        return outbound records in send order, then undelivered inbound.
        The first call after construction answers with the construction's
        scan, if nothing changed since (and then lets it go)."""
        recs = self.found
        self.found = None
        if recs is not None:
            return recs
        self.out = {}
        self.inb = {}
        recs = []
        for name in sorted(self.fs.listdir(self.dir)):
            # ours: o<seq>.p|r with 8 digits or more (a sequence past 10**8
            # has 9), i<pid>.u|d with 5, or last; never touch other files
            n = len(name)
            c = name[0]
            st = name[-1]
            if name != "last" and not (
                    name[-2:-1] == "." and name[1:-2].isdigit() and
                    (c == "o" and n > 10 and st in "pr" or
                     c == "i" and n == 8 and st in "ud")):
                continue
            path = self.dir + "/" + name
            try:
                data = self.fs.read(path)
            except OSError:
                continue  # unreadable now: not proof of a torn write
            rec = unframe(data)
            if rec is None:
                self.fs.remove(path)  # torn by a reset mid-write: never sent
                continue
            seq, key, body = rec
            if seq > self.nseq:
                self.nseq = seq
            if c != "i" and key > self.last_key:
                self.last_key = key  # "last", or an outbound record
            if c == "o" and len(body) > 4:
                # the packet id of the encoded QoS 1/2 PUBLISH: after the
                # fixed header and the topic
                i = 1
                while body[i] & 0x80:
                    i += 1
                i += 3 + ((body[i + 1] << 8) | body[i + 2])
                pid = (body[i] << 8) | body[i + 1]
                self.out[pid] = [seq, st, key]
                recs.append((0, seq, pid, st, key, body))
            elif c == "i":
                pid = int(name[1:6])
                self.inb[pid] = st
                if st == "u":
                    recs.append((1, seq, pid, st, key, body))
        # outbound in send order, then inbound in arrival order
        recs.sort()
        for i in range(len(recs)):
            recs[i] = recs[i][2:]
        return recs


def refuse_fat(path):
    # FAT is not power-loss safe: a reset during a write can corrupt the
    # directory. Refuse unless the caller opts in (allow_fat=True). The
    # directory is on the mount with the longest matching mount point.
    try:
        import vfs
        mounts = vfs.mount()
    except (ImportError, TypeError, AttributeError):
        return  # CPython, or a port that cannot list its mounts
    if path[:1] != "/":
        path = os.getcwd().rstrip("/") + "/" + path
    fat = n = 0
    for fs, mp in mounts:
        mp = mp.rstrip("/") + "/"  # ("/" stays "/")
        if (path + "/").startswith(mp) and len(mp) > n:
            n = len(mp)
            fat = type(fs).__name__ == "VfsFat"
    if fat:
        raise OSError("FAT is not power-loss safe (allow_fat=True)")
