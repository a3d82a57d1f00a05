# umqtt3.broker_store -- what the broker acknowledged, on disk before the
# acknowledgement leaves, so that it survives a crash or a power cut.
#
# It reuses the client's store (store.py, docs/store.md): the same
# CRC-framed record in one small file per thing, the same file layer
# (OSFiles, or a power-loss simulation in tests), and the same rules: a
# file is written and fsynced, or renamed, and the directory is synced
# before the call returns; a torn or corrupt record was never acted on.
#
#   r<k>        one retained topic: key field = QoS, body = topic length
#               (2 bytes), topic, MQTT 5 properties (as many bytes as the
#               seq field says, 0 for none), payload. Replaced through r<k>.t and an
#               atomic rename; cleared by removing it.
#   s<k>/sess   one persistent session: seq field = MQTT 5 session expiry
#               interval (0 at 3.1.1: none), body = client id length (2), client
#               id, then per subscription options (1: QoS, and at 5.0 no
#               local, retain as published, retain handling), filter length
#               (2), filter.
#               Written before CONNACK; replaced through sess.t and a rename
#               before SUBACK / UNSUBACK; removed first when the session ends.
#   s<k>/...    the session's messages: a store.FileStore (keep_last=False)
#               with o<seq>.p|r for each QoS 1/2 message queued or in flight
#               towards it and i<pid>.u|d for each inbound QoS 2 id it holds
#               (broker_session.py says when each is written).
#
# On a desktop file system these files live in one appending log instead
# (broker_log.LogFiles: every change of a step made durable by one sync in
# commit(), which the driver calls before the step's bytes leave); on
# littlefs, one file each, every change synced as it is made.
#
# k is a small number reused when freed, so there are at most max_retained
# r files, and max_sessions s<k> directories of at most max_inflight +
# max_queued + max_qos2_in + 1 files each.
from .store import FileStore, frame, unframe, refuse_fat
from .qos_state import STORED_PUB, STORED_REL, HELD
from .broker_log import AppendFiles, LogFiles, layout

_TAG_END = 0x3FFFFFFF  # tags stay small ints on MicroPython, and fit a record


def _u16(b, i):
    return (b[i] << 8) | b[i + 1]


class _Counted:
    """The file layer, counting every change that fails in
    stats.store_errors: the broker's own records and the sessions'
    FileStores all write through it."""

    def __init__(self, files, stats):
        self.f = files
        self.stats = stats
        self.read = files.read
        self.listdir = files.listdir
        self.mkdir = files.mkdir

    def _do(self, fn, a, b=None):
        try:
            return fn(a) if b is None else fn(a, b)
        except OSError:
            self.stats.store_errors += 1
            raise

    def write(self, path, data):
        self._do(self.f.write, path, data)

    def rename(self, a, b):
        self._do(self.f.rename, a, b)

    def remove(self, path):
        self._do(self.f.remove, path)

    def sync_dir(self, path):
        self._do(self.f.sync_dir, path)

    def append(self, path, data):
        self._do(self.f.append, path, data)


class Disk:
    def __init__(self, path, limits, stats, files=None, allow_fat=False):
        self.lim = limits
        self.dir = path.rstrip("/") or "/"
        base = files or AppendFiles()
        counted = _Counted(base, stats)
        counted.mkdir(self.dir)  # OSFiles syncs the parent of a new directory
        if not allow_fat:
            refuse_fat(self.dir)
        self.log = None  # LogFiles: the layout with one sync per commit()
        self.fs = counted  # type: _Counted | LogFiles
        if layout(self.dir, base) == "log":
            self.log = self.fs = LogFiles(self.dir, counted)
        self.sessions = None  # broker_session.Sessions, given to load()
        self.ntag = 0  # the last tag given to a QoS 2 routing
        self.rslot = {}  # retained topic -> k of its r<k> file
        self.rfree = []
        self.rnext = 0
        self.sfree = []
        self.snext = 0

        self.taken = None  # tags live records still carry, after a wrap

    def _p(self, name):
        return self.dir + "/" + name

    def commit(self):
        """Make every change so far durable (one sync with the log layout;
        nothing to do with one file per record). False when the disk failed
        (counted in store_errors): what the changes answer must not leave."""
        if self.log is None:
            return True
        try:
            self.log.commit()
        except OSError:
            return False
        return True

    def tag(self):
        """A new routing's tag: one that no live record carries. After 2**30
        routings the numbers start again from 1, skipping the tags of copies
        still waiting (an offline session's queue can hold one for ever)."""
        t = self.ntag + 1
        if t >= _TAG_END:
            t = 1
            tk = []  # type: list
            for s in self.sessions.all:
                if s.fs is not None:
                    for e in s.fs.out.values():
                        tk.append(e[2])
            tk.sort()
            self.taken = tk
        tk = self.taken
        if tk is not None:
            while t in tk:
                t += 1
            if not tk or t > tk[-1]:
                self.taken = None
        self.ntag = t
        return t

    # ------------------------------------------------------------ retained
    def retain(self, topic, qos, payload, props=b""):
        """topic now holds payload: durable when this returns."""
        self._retain(topic, qos, payload, props)

    def _retain(self, topic, qos, payload, props=b""):
        # MQTT 5 properties go between topic and payload, their length in
        # the record's seq field (0 in records without any)
        fs = self.fs
        n = len(topic)
        m = len(props)
        body = bytearray(2 + n + m + len(payload))
        body[0] = n >> 8
        body[1] = n & 255
        body[2:2 + n] = topic
        body[2 + n:2 + n + m] = props
        body[2 + n + m:] = payload
        rec = frame(m, qos, body)
        k = self.rslot.get(topic)
        if k is None:
            k = self.rfree.pop() if self.rfree else self._new_r()
            fs.write(self._p("r%d" % k), rec)  # torn: dropped, never acked
            self.rslot[topic] = k
        else:
            t = self._p("r%d.t" % k)
            fs.write(t, rec)
            fs.rename(t, self._p("r%d" % k))  # the old value or the new one
        fs.sync_dir(self.dir)

    def _new_r(self):
        self.rnext += 1
        return self.rnext - 1

    def unretain(self, topic):
        k = self.rslot.get(topic)
        if k is not None:
            self._unretain(topic, k)

    def _unretain(self, topic, k):
        self.fs.remove(self._p("r%d" % k))
        self.fs.sync_dir(self.dir)
        del self.rslot[topic]
        self.rfree.append(k)

    # ------------------------------------------------------------ sessions
    def _sdir(self, s):
        return self._p("s%d" % s.slot)

    def _sess_rec(self, s):
        n = len(s.cid)
        size = 2 + n
        for f in s.filters:
            size += 3 + len(f)
        b = bytearray(size)
        b[0] = n >> 8
        b[1] = n & 255
        b[2:2 + n] = s.cid
        i = 2 + n
        for j in range(len(s.filters)):
            f = s.filters[j]
            b[i] = s.fqos[j]
            b[i + 1] = len(f) >> 8
            b[i + 2] = len(f) & 255
            b[i + 3:i + 3 + len(f)] = f
            i += 3 + len(f)
        return frame(s.expiry, 0, b)  # seq field: the MQTT 5 session expiry

    def _store(self, d):
        lim = self.lim
        return FileStore(d, self.fs, lim.max_inflight + lim.max_queued + lim.max_qos2_in,
                         True, False)

    def add_session(self, s):
        """A new persistent session: on disk before CONNACK [MQTT-3.1.2-4]."""
        self._add(s)

    def _add(self, s):
        k = self.sfree.pop() if self.sfree else self.snext
        if k == self.snext:
            self.snext += 1
        d = self._p("s%d" % k)
        try:
            self.fs.mkdir(d)  # OSFiles syncs DIR: the new s<k> is durable
            self.fs.write(d + "/sess", self._sess_rec(s))
            self.fs.sync_dir(d)
        except OSError:
            self.sfree.append(k)
            raise
        s.bind_store(self._store(d), self.tag, k)

    def save_session(self, s):
        """Its subscriptions changed: durable before SUBACK / UNSUBACK."""
        if s.slot >= 0:
            self._save(s)

    def _save(self, s):
        d = self._sdir(s)
        self.fs.write(d + "/sess.t", self._sess_rec(s))
        self.fs.rename(d + "/sess.t", d + "/sess")
        self.fs.sync_dir(d)

    def drop_session(self, s):
        """The session ends (CleanSession 1 took its id): sess goes first,
        so a crash half way leaves files that load() wipes."""
        if s.slot >= 0:
            self._drop(s)

    def _drop(self, s):
        d = self._sdir(s)
        self.fs.remove(d + "/sess")
        self.fs.sync_dir(d)
        self._wipe(d)
        self.sfree.append(s.slot)
        s.bind_store(None, None, -1)

    def _wipe(self, d):
        fs = self.fs
        for name in fs.listdir(d):
            fs.remove(d + "/" + name)
        fs.sync_dir(d)

    # ------------------------------------------------------------ start-up
    def load(self, sessions, retained, subs, new_session):
        """Fill sessions (broker_session.Sessions), retained
        (broker_retain.Retained) and subs (broker_subs.Subs) from the
        directory, making sessions with new_session(cid, clean); then undo
        what a crash cut short: a QoS 2 routing whose inbound record is
        still .u."""
        self.sessions = sessions
        fs = self.fs
        rused = []  # type: list
        sused = []  # type: list
        found = []  # (session, its records)
        for name in sorted(fs.listdir(self.dir)):
            path = self._p(name)
            if name[:1] == "r" and name[-2:] == ".t" and name[1:-2].isdigit():
                fs.remove(path)  # a replacement that never took place
            elif name[:1] == "r" and name[1:].isdigit():
                self._load_r(path, int(name[1:]), rused, retained)
            elif name[:1] == "s" and name[1:].isdigit():
                k = int(name[1:])
                s = self._load_s(path, k, sessions, subs, new_session)
                if s is None:
                    self._wipe(path)  # an unfinished start or end of a session
                    self.sfree.append(k)
                else:
                    found.append((s, s.fs.recover()))
                sused.append(k)
        fs.sync_dir(self.dir)
        self.rnext = max(rused) + 1 if rused else 0
        self.rfree = [k for k in range(self.rnext) if k not in rused]
        self.snext = max(sused) + 1 if sused else 0
        self.sfree += [k for k in range(self.snext) if k not in sused]
        cut = []
        for s, recs in found:
            for pid, st, key, body in recs:
                if key > self.ntag:
                    self.ntag = key
                if st == HELD:
                    cut.append(key)
        # Undo the routings cut short, across all sessions at once: every
        # copy first, then the .u records, each durable before the next. A
        # second power loss half way then finds each .u still there, with
        # whatever copies are left; a .u removed before the copies in
        # another session would leave those copies to meet the publisher's
        # resend, routed again [MQTT-4.3.3-2].
        self._undo(found, cut)
        for s, recs in found:
            for pid, st, key, body in recs:
                if st == HELD:
                    s.fs.in_del(pid)  # the publisher will send it again
        for s, recs in found:
            self._restore(s, recs, cut)

    def _undo(self, found, cut):
        for s, recs in found:
            for pid, st, key, body in recs:
                if st == STORED_PUB and key in cut:
                    s.fs.out_del(pid)  # routed by a PUBLISH that got no PUBREC

    def _load_r(self, path, k, used, retained):
        rec = unframe(self.fs.read(path))
        if rec is None:
            self.fs.remove(path)  # torn: its PUBLISH was never acknowledged
            return
        m, qos, body = rec
        n = _u16(body, 0)
        topic = bytes(body[2:2 + n])
        retained.load(topic, qos, bytes(body[2 + n + m:]), bytes(body[2 + n:2 + n + m]))
        self.rslot[topic] = k
        used.append(k)

    def _load_s(self, d, k, sessions, subs, new_session):
        fs = self.fs
        names = fs.listdir(d)
        if "sess.t" in names:
            fs.remove(d + "/sess.t")
        rec = None
        if "sess" in names:
            rec = unframe(fs.read(d + "/sess"))
        if rec is None:
            return None
        body = rec[2]
        n = _u16(body, 0)
        cid = bytes(body[2:2 + n])
        s = new_session(cid, False)
        s.expiry = rec[0]
        i = 2 + n
        while i + 3 <= len(body):
            m = _u16(body, i + 1)
            subs.restore(s, bytes(body[i + 3:i + 3 + m]), body[i])
            i += 3 + m
        s.bind_store(self._store(d), self.tag, k)
        sessions.add(s)
        return s

    def _restore(self, s, recs, cut):
        # Everything on disk comes back, also when the limits are now lower
        # than when it was written: held ids beyond max_qos2_in are all held,
        # and records beyond the ring wait in the queue in order, PUBRELs
        # included (Session.restore_queued).
        f = s.fs
        if len(f.inb) > self.lim.max_qos2_in:
            s.ipids = [0] * len(f.inb)
        for pid in f.inb:
            s.ipid_add(pid)  # routed, PUBREC may have gone: held [MQTT-4.3.3-2]
        full = False
        for pid, st, key, body in recs:
            if st == HELD or (st == STORED_PUB and key in cut):
                continue
            if not full and s.restore_slot(st, pid, body):
                continue
            full = True  # the rest waits in the queue, in order
            s.restore_queued(st == STORED_REL, pid, body)
