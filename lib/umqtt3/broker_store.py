# umqtt3.broker_store -- what the broker acknowledged, on disk before the
# acknowledgement leaves, so that it survives a crash or a power cut.
#
# It reuses the client's store (store.py, docs/store.md): the same
# CRC-framed record in one small file per thing, the same file layer
# (OSFiles, or a power-loss simulation in tests), and the same rules: a
# file is written and fsynced, or renamed, and the directory is synced
# before the call returns; a torn or corrupt record was never acted on.
#
#   clock       the store's time: seq field = the broker's uptime when
#               written, key field = the wall-clock time (s) at uptime 0, 0
#               when the platform's clock was never set (see start()).
#   r<k>        one retained topic: key field = QoS, plus 4 * (its arrival
#               uptime + 1) when it has MQTT 5 properties; body = topic length
#               (2 bytes), topic, MQTT 5 properties (as many bytes as the
#               seq field says, 0 for none), payload. Replaced through r<k>.t and an
#               atomic rename; cleared by removing it.
#   s<k>/sess   one persistent session: seq field = MQTT 5 session expiry
#               interval (0 at 3.1.1: none), key field = 1 (2: its client
#               speaks MQTT 5; either is also the level of its records of
#               type 3, below), plus 4 when the user name of its client
#               follows the end time, 8 when its client had none (written
#               under an ACL: the grants it gets at start-up; with users:
#               whose client id it is, Core.owners; neither: not known, as
#               in records written before the flags); body =
#               client id length (2), client id, the uptime at which it
#               ends (4; 0xFFFFFFFF: a client is connected, or never),
#               with 4: user name length (2), user name; then per
#               subscription options (1: QoS, and at 5.0 no local, retain as
#               published, retain handling), subscription identifier (4, 0:
#               none), filter length (2), filter. (Key field 0: the same
#               without the end and the identifiers.)
#               Written before CONNACK; replaced through sess.t and a rename
#               before SUBACK / UNSUBACK, and when its client goes or comes
#               back; removed first when the session ends (one the disk
#               refused to remove goes before a new record of its client
#               id is written: Disk.stale).
#   s<k>/will   the delayed will of a session whose client has gone: seq
#               field = the uptime it is due, key field = QoS + 4 * retain;
#               body = topic length (2), topic, MQTT 5 property length (2),
#               properties, message. Removed when it is sent or the session
#               resumes [MQTT-3.1.3-9].
#   m<k>        one message queued or in flight towards persistent
#               sessions, written once however many of them hold it: seq
#               field = k; body = its PUBLISH frame without the first byte
#               and the packet id (what differs between sessions). Written
#               before the first reference to it; removed after the last
#               reference is (a crash in between leaves it unreferenced:
#               load() removes it).
#   s<k>/...    the session's messages: a store.FileStore (keep_last=False)
#               with o<seq>.p|r for each QoS 1/2 message queued or in flight
#               towards it and i<pid>.u|d for each inbound QoS 2 id it holds
#               (broker_session.py says when each is written). An o record's
#               body is the frame, or a reference (_Refs): 0xF0, the frame's
#               first byte, 0, 0, the packet id (2: where store.py reads it),
#               the message record's k (4). A stored frame's first byte says
#               the protocol level it was built for in its type
#               (broker_session.stored_first): 1 below 5, 2 at 5, 0 at 5 with
#               its message expiry as an uptime; 3 (written before records
#               said it): the level of the session record.
#
# On a desktop file system these files live in one appending log instead
# (broker_log.LogFiles: every change of a step made durable by one sync in
# commit(), which the driver calls before the step's bytes leave); on
# littlefs, one file each, every change synced as it is made.
#
# k is a small number reused when freed, so there are at most max_retained
# r files, and max_sessions s<k> directories of at most max_inflight +
# max_queued + max_qos2_in + 1 files each; m<k> numbers go on while any is
# live and start again from 1 when none is.
from .store import FileStore, frame, unframe, refuse_fat
from .client_codec import StoreFull
from .qos_state import STORED_PUB, STORED_REL, HELD
from .broker_log import AppendFiles, LogFiles, layout
from .broker_session import stored_first

_TAG_END = 0x3FFFFFFF  # tags stay small ints on MicroPython, and fit a record
_NONE = 0xFFFFFFFF  # no end time in a session record
_CLOCK_MIN = 60  # seconds between two writes of the clock record without a wall clock
_KEY_MAX = 0xFFFFFFFE  # store.frame's key range
_REF = 0xF0  # a reference record's first byte (type 15: never a stored PUBLISH)
_USER = 4  # in a session record's key field: its client's user name follows the end
_ANON = 8  # in a session record's key field: its client had no user name


def wall():
    """The wall-clock time in whole seconds, or None while the platform's
    clock is not set (compat.wall_s; tests replace this function)."""
    from .compat import wall_s
    return wall_s()


def _u16(b, i):
    return (b[i] << 8) | b[i + 1]


def _u32(b, i):
    return (b[i] << 24) | (b[i + 1] << 16) | (b[i + 2] << 8) | b[i + 3]


def _put32(b, i, v):
    b[i] = (v >> 24) & 255
    b[i + 1] = (v >> 16) & 255
    b[i + 2] = (v >> 8) & 255
    b[i + 3] = v & 255


def _pid_at(b, i):
    # where the packet id goes in a PUBLISH whose remaining length starts
    # at b[i]: right after the topic
    while b[i] & 0x80:
        i += 1
    i += 1
    return i + 2 + _u16(b, i)


class _Refs(FileStore):
    """A persistent session's FileStore whose outbound records refer to a
    message record (Disk.msg_ref), shared by every session that holds the
    message, instead of each keeping the frame: a message fanned out to
    500 sessions is written once plus 500 records of 23 bytes."""

    def __init__(self, d, files, n, disk):
        self.disk = disk
        self.mids = {}  # pid -> the k of the m<k> its record refers to
        FileStore.__init__(self, d, files, n, True, False)

    def out_add(self, pid, key, buf, off, n):
        """The PUBLISH at buf[off:off + n] is in flight (stored before it is sent)."""
        if len(self.out) + len(self.inb) >= self.max:
            raise StoreFull("store full", 0x97)
        k = self.disk.msg_ref(buf, off, n)
        if k < 0:
            FileStore.out_add(self, pid, key, buf, off, n)  # the frame itself
        else:
            self._ref(pid, key, buf[off], k)

    def out_msg(self, pid, key, first, m, s):
        """Session s queues broker_session.Msg m with first byte first:
        the frame is built only when m is not the message stored last."""
        if len(self.out) + len(self.inb) >= self.max:
            raise StoreFull("store full", 0x97)
        disk = self.disk
        k = disk.msg_last(m, s.level)
        if k < 0:
            f = s.stored_frame(first, pid, m)
            k = disk.msg_ref(f, 0, len(f), m, s.level)
            if k < 0:
                FileStore.out_add(self, pid, key, f, 0, len(f))  # the frame itself
                return
            first = f[0]
        else:
            first = stored_first(first, s.level, m.xk >= 0 and s.level == 5)  # as stored_frame
        self._ref(pid, key, first, k)

    def _ref(self, pid, key, first, mid):
        # the reference record, after m<mid> (which counts it already):
        # FileStore.out_add, its record framed here in one go (this runs
        # once per session a message is fanned out to)
        import binascii
        k = -1 if key is None else key
        try:
            if k < -1 or k > _KEY_MAX:
                raise ValueError("key out of range 0..2**32-2")
            self._next_seq()
            seq = self.nseq
            b = bytearray(23)  # store.frame(seq, k, body)
            b[0] = 0x55
            _put32(b, 1, seq)
            _put32(b, 5, k + 1)
            b[9] = _REF
            b[10] = first
            b[13] = pid >> 8
            b[14] = pid & 255
            _put32(b, 15, mid)
            _put32(b, 19, binascii.crc32(memoryview(b)[:19]) & 0xFFFFFFFF)
            self.fs.write("%s/o%08d.p" % (self.dir, seq), b)
            self.fs.sync_dir(self.dir)
        except Exception:
            self.disk.msg_unref(mid)
            raise
        self.out[pid] = [seq, "p", k]
        if k > self.last_key:
            self.last_key = k
        self.mids[pid] = mid

    def out_del(self, pid):
        had = FileStore.out_del(self, pid)  # (raises: the message stays until load() drops it)
        mid = self.mids.pop(pid, None)
        if mid is not None:
            self.disk.msg_unref(mid)
        return had

    def recover(self):
        """FileStore.recover, a reference's body left as it is (ref_frame
        builds the frame); one whose message record is gone was torn before
        it was acted on: removed."""
        self.mids = {}
        recs = FileStore.recover(self)
        out = []
        for r in recs:
            b = r[3]
            if len(b) == 10 and b[0] == _REF and r[1] != HELD:
                mid = _u32(b, 6)
                if mid not in self.disk.mload:
                    FileStore.out_del(self, r[0])
                    continue
                self.mids[r[0]] = mid
            out.append(r)
        return out


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
        self.changes = 0  # how many changes were made (the clock record's cue)

    def _do(self, fn, a, b=None):
        self.changes += 1
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
        self.stats = stats  # the core: its uptime up_s is the store's time
        self.dir = path.rstrip("/") or "/"
        base = files or AppendFiles()
        counted = self.counted = _Counted(base, stats)
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
        # sessions that ended while the disk refused to remove their record
        # (drop_session raised): retried before a new record of the same
        # client id is written, so that no start finds two
        self.stale = []  # type: list
        # at load: client id -> the user name (bytes, None: anonymous) its
        # record names: whose id it is with users (Core.owners takes them),
        # else for the ACL's grants (Core.set_acl takes them)
        self.who = {}  # type: dict

        self.mref = {}  # k of each live m<k> -> the records that refer to it
        self.mnext = 0
        self.mlast = None  # the last m<k> written: its body (what the next copy is checked against)
        self.mlid = 0  # and its k
        self.mobj = None  # and the broker_session.Msg it was built from (or None)
        self.mlev = 0  # for this protocol level
        self.mload = {}  # at load: k -> body of each m<k> found
        self.msgs = None  # at load: the Msg restored for (k, level, type 0), shared
        self.taken = None  # tags live records still carry, after a wrap
        self.epoch = 0  # wall-clock time at uptime 0; 0: no clock was ever set
        self.t_clock = 0  # the uptime the clock record holds
        self.n_clock = -1  # counted.changes when it was written

    def _p(self, name):
        return self.dir + "/" + name

    def commit(self):
        """Make every change so far durable (one sync with the log layout;
        nothing to do with one file per record). False when the disk failed
        (counted in store_errors), or the heap was spent (counted in
        nomem): what the changes answer must not leave."""
        if self.log is None:
            return True
        try:
            self.log.commit()
        except OSError:
            return False
        except MemoryError:
            self.stats.nomem += 1  # (the changes wait for the next commit, as after OSError)
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

    # ------------------------------------------------------------ time
    # Every time a record holds (a session's end, a delayed will, a queued
    # message's expiry, a retained message's arrival) is an uptime in the
    # store's count, which goes on across restarts: with a set wall clock
    # it is the seconds since the store's epoch, so the time the broker was
    # down counts [MQTT-3.1.2-23 (5.0), MQTT-3.3.2-5 (5.0)]; without one
    # the count resumes where the clock record left it (written at most
    # once a minute, and only while the store changes), so the time down
    # does not count. The record is written from the first MQTT 5 client on
    # (use_clock): only level 5 brings times into the store.
    def start(self):
        """The broker's uptime (s) at start-up, in the store's count."""
        rec = None
        try:
            rec = unframe(self.fs.read(self._p("clock")))
        except OSError:
            pass  # a new store
        last = rec[0] if rec is not None else 0
        ep = rec[1] if rec is not None and rec[1] > 0 else 0
        w = wall()
        up = last
        if w is not None:
            if not ep:
                ep = w - last  # the first run with a clock: it starts here
            if w - ep > last:
                up = w - ep  # (a clock set back makes no time run backwards)
        self.epoch = ep
        self.t_clock = up
        if rec is not None and ep != rec[1]:
            self._clock(up)  # the clock was set since: the epoch from now on
        elif rec is not None:
            self.n_clock = 0  # in use
        return up

    def use_clock(self, up):
        """The first MQTT 5 client: times may come, the clock record is due."""
        if self.n_clock < 0:
            self._clock(up)

    def tick(self, up):
        """Once a second from the core: keep the clock record near the
        uptime when there is no wall clock, or take the epoch when the
        clock was just set (NTP after boot). A failure is counted only."""
        if self.n_clock < 0:
            return  # not in use
        try:
            if not self.epoch:
                w = wall()
                if w is not None:
                    self.epoch = w - up
                    self._clock(up)
                elif up - self.t_clock >= _CLOCK_MIN and self.counted.changes != self.n_clock:
                    self._clock(up)
        except OSError:
            pass

    def _clock(self, up):
        fs = self.fs
        t = self._p("clock.t")
        fs.write(t, frame(up, self.epoch, b"t"))
        fs.rename(t, self._p("clock"))
        fs.sync_dir(self.dir)
        self.t_clock = up
        self.n_clock = self.counted.changes

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
        # with properties, when it came: its expiry counts from then
        rec = frame(m, qos | ((self.stats.up_s + 1) << 2) if m else qos, body)
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
        size = 6 + n
        # under an ACL, the user name its grants were made for; with users,
        # the user whose id it is (Core.owners): _USER and the name, or
        # _ANON (a record without either: not known)
        g = s.grants
        who = 0
        u = None
        if g is not None:
            who = _ANON
            if g.user is not None:
                u = g.user.encode()
        else:
            c = self.stats
            if c.users is not None and s.cid in c.owners:
                who = _ANON
                u = c.owners[s.cid]
        if u is not None:
            who = _USER
            size += 2 + len(u)
        for f in s.filters:
            size += 7 + len(f)
        b = bytearray(size)
        b[0] = n >> 8
        b[1] = n & 255
        b[2:2 + n] = s.cid
        _put32(b, 2 + n, _NONE if s.exp_at < 0 or s.client is not None else s.exp_at)
        i = 6 + n
        if who == _USER:
            b[i] = len(u) >> 8
            b[i + 1] = len(u) & 255
            b[i + 2:i + 2 + len(u)] = u
            i += 2 + len(u)
        ids = s.fsid
        for j in range(len(s.filters)):
            f = s.filters[j]
            b[i] = s.fqos[j]
            _put32(b, i + 1, ids[j] if ids is not None else 0)  # [MQTT-3.3.4-3 (5.0)]
            b[i + 5] = len(f) >> 8
            b[i + 6] = len(f) & 255
            b[i + 7:i + 7 + len(f)] = f
            i += 7 + len(f)
        # seq field: the MQTT 5 session expiry; key field: the protocol
        # level its frames are built for (1: below 5, 2: 5), kept at the
        # level of records of type 3 while it may hold some (Session.lv3)
        lv = s.lv3 or s.level
        return frame(s.expiry, (2 if lv == 5 else 1) | who, b)

    def _store(self, d):
        lim = self.lim
        n = lim.max_inflight if lim.max_inflight > lim.max_inflight_v5 else lim.max_inflight_v5
        return _Refs(d, self.fs, n + lim.max_queued + lim.max_qos2_in, self)

    # ------------------------------------------------------------ messages
    def msg_last(self, m, level):
        """The k of the m<k> written last when it holds Msg m as built for
        protocol level `level`, one more reference counted; else -1."""
        k = self.mlid
        if m is self.mobj and level == self.mlev and k in self.mref:
            self.mref[k] += 1
            return k
        return -1

    def msg_ref(self, buf, off, n, m=None, level=0):
        """The k of the m<k> holding the PUBLISH at buf[off:off + n] (its
        first byte and packet id aside), one more reference counted: the
        one written last when it holds the same (a fan-out: the same
        message for every session), else a new one. -1: keep the frame in
        the session's own record, as the first copy of a message is with
        one file per record (on flash a message for one session costs one
        file, not two; a second session's copy brings the m<k>).
        m: the Msg it was built from, at level."""
        p = _pid_at(buf, off + 1)
        body = bytes(buf[off + 1:p]) + bytes(buf[p + 2:off + n])
        k = self.mlid
        same = body == self.mlast
        self.mobj = m
        self.mlev = level
        if same and k in self.mref:
            self.mref[k] += 1
            return k
        if not same and self.log is None:
            self.mlast = body  # the first copy: inline
            self.mlid = 0
            return -1
        k = self.mnext + 1 if self.mref else 1
        if k >= _TAG_END:
            k = 1
        while k in self.mref:
            k += 1
        self.mnext = k
        self.fs.write(self._p("m%d" % k), frame(k, -1, body))  # torn: no reference yet
        self.fs.sync_dir(self.dir)
        self.mref[k] = 1
        self.mlast = body
        self.mlid = k
        return k

    def msg_unref(self, k):
        """A record referring to m<k> is gone: the last one takes m<k>
        with it. A failure to remove it is counted only (load() removes
        what nothing refers to)."""
        n = self.mref[k] - 1
        if n:
            self.mref[k] = n
            return
        del self.mref[k]
        if k == self.mlid:
            self.mlast = self.mobj = None
        try:
            self.fs.remove(self._p("m%d" % k))
            self.fs.sync_dir(self.dir)
        except OSError:
            pass

    def ref_frame(self, ref, pid):
        """The PUBLISH frame a reference record (its body ref) stands for."""
        m = self.mload[_u32(ref, 6)]
        q = _pid_at(m, 0)
        f = bytearray(len(m) + 3)
        f[0] = ref[1]
        f[1:1 + q] = m[:q]
        f[1 + q] = pid >> 8
        f[2 + q] = pid & 255
        f[3 + q:] = m[q:]
        return f

    def add_session(self, s):
        """A new persistent session: on disk before CONNACK [MQTT-3.1.2-4].
        An ended session of the same client id whose record the disk
        refused to remove goes first (raises while it still cannot)."""
        for o in self.stale[:]:
            if o.cid == s.cid:
                self._drop(o)
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

    def save_will(self, s, due, topic, msg, qos, retain, props):
        """A delayed will of s's client, due at uptime `due`: kept until it
        is sent or the session resumes, also across a restart."""
        if s.slot < 0:
            return
        m = len(props) if props else 0
        n = len(topic)
        b = bytearray(4 + n + m + len(msg))
        b[0] = n >> 8
        b[1] = n & 255
        b[2:2 + n] = topic
        b[2 + n] = m >> 8
        b[3 + n] = m & 255
        if m:
            b[4 + n:4 + n + m] = props
        b[4 + n + m:] = msg
        d = self._sdir(s)
        self.fs.write(d + "/will.t", frame(due, qos | (4 if retain else 0), b))
        self.fs.rename(d + "/will.t", d + "/will")
        self.fs.sync_dir(d)

    def drop_will(self, s):
        """s's delayed will was sent, or the session resumed."""
        if s.slot < 0:
            return
        d = self._sdir(s)
        if "will" in self.fs.listdir(d):
            self.fs.remove(d + "/will")
            self.fs.sync_dir(d)

    def _drop(self, s):
        d = self._sdir(s)
        st = self.stale
        try:
            if s not in st or "sess" in self.fs.listdir(d):  # (a retry: it may be gone)
                self.fs.remove(d + "/sess")
            self.fs.sync_dir(d)
            mids = list(s.fs.mids.values())
            self._wipe(d)
        except OSError:
            # the slot stays taken and the session bound to it until a
            # retry (add_session) or the next start removes the record
            if s not in st:
                st.append(s)
            raise
        if s in st:
            st.remove(s)
        s.fs.mids = {}
        for k in mids:
            self.msg_unref(k)  # after the records that refer to it
        self.sfree.append(s.slot)
        s.bind_store(None, None, -1)

    def _wipe(self, d):
        fs = self.fs
        for name in fs.listdir(d):
            fs.remove(d + "/" + name)
        fs.sync_dir(d)

    # ------------------------------------------------------------ start-up
    def load(self, sessions, retained, subs, new_session, wills=None):
        """Fill sessions (broker_session.Sessions), retained
        (broker_retain.Retained), subs (broker_subs.Subs) and wills (the
        core's delayed wills) from the directory, making sessions with
        new_session(cid, clean); then undo what a crash cut short: a QoS 2
        routing whose inbound record is still .u."""
        self.sessions = sessions
        self.wills = wills
        fs = self.fs
        rused = []  # type: list
        sused = []  # type: list
        found = []  # (session, its records)
        names = sorted(fs.listdir(self.dir))
        self.mload = {}
        for name in names:
            if name[:1] == "m" and name[1:].isdigit():
                rec = unframe(fs.read(self._p(name)))
                if rec is None:
                    fs.remove(self._p(name))  # torn: nothing refers to it
                else:
                    self.mload[int(name[1:])] = rec[2]
        for name in names:
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
        self._count(found)
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
        self.msgs = {}
        for s, recs in found:
            self._restore(s, recs, cut)
        self.msgs = None
        self.mload = {}

    def _count(self, found):
        # the references to each m<k>; one that none refers to is removed
        # (its last reference went, or the first never came)
        mref = self.mref = {}
        for s, recs in found:
            for k in s.fs.mids.values():
                mref[k] = mref.get(k, 0) + 1
        for k in self.mload:
            if k not in mref:
                self.fs.remove(self._p("m%d" % k))
        self.fs.sync_dir(self.dir)
        self.mnext = max(mref) if mref else 0

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
        m, key, body = rec
        n = _u16(body, 0)
        topic = bytes(body[2:2 + n])
        retained.load(topic, key & 3, bytes(body[2 + n + m:]), bytes(body[2 + n:2 + n + m]),
                      (key >> 2) - 1)
        self.rslot[topic] = k
        used.append(k)

    def _load_s(self, d, k, sessions, subs, new_session):
        fs = self.fs
        names = fs.listdir(d)
        if "sess.t" in names:
            fs.remove(d + "/sess.t")
        if "will.t" in names:
            fs.remove(d + "/will.t")
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
        key = rec[1]
        lk = key & 3
        who = None  # the user name its record keeps (None: anonymous)
        known = False  # (a record that keeps neither)
        if lk == 2 or (lk == 0 and s.expiry):
            s.level = 5  # what it queues is built for level 5 until a client says otherwise
        if lk:
            end = _u32(body, i)
            if end != _NONE:
                s.exp_at = end  # its client had gone: it ends then
            i += 4
            if key & _USER:
                m = _u16(body, i)
                who = bytes(body[i + 2:i + 2 + m])
                known = True
                i += 2 + m
            elif key & _ANON:
                known = True
            while i + 7 <= len(body):
                m = _u16(body, i + 5)
                subs.restore(s, bytes(body[i + 7:i + 7 + m]), body[i], _u32(body, i + 1))
                i += 7 + m
        else:
            while i + 3 <= len(body):
                m = _u16(body, i + 1)
                subs.restore(s, bytes(body[i + 3:i + 3 + m]), body[i])
                i += 3 + m
        s.bind_store(self._store(d), self.tag, k)
        o = sessions.by_id.get(cid)
        sessions.add(s)
        if o is not None and s.exp_at >= 0 and (o.exp_at < 0 or o.exp_at > s.exp_at):
            # two records of one client id (an ended session's record the
            # disk refused to remove, then a new session, written before
            # stale records were removed first): the one that ends later is
            # the live one; the other's end has passed, so it ends at
            # start-up (Core._expire) and leaves the index to this one
            sessions.by_id[cid] = o
        elif known:
            self.who[cid] = who  # (the live record's, of two)
        if "will" in names and self.wills is not None:
            w = unframe(fs.read(d + "/will"))
            if w is not None:
                b = w[2]
                n = _u16(b, 0)
                m = _u16(b, 2 + n)
                self.wills.append([w[0], cid, bytes(b[2:2 + n]), bytes(b[4 + n + m:]), w[1] & 3,
                                   bool(w[1] & 4), bytes(b[4 + n:4 + n + m]) if m else None])
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
        # A message many sessions hold comes back as one Msg they share.
        full = False
        for pid, st, key, body in recs:
            if st == HELD or (st == STORED_PUB and key in cut):
                continue
            k = f.mids.get(pid, -1)
            if k >= 0:
                body = self.ref_frame(body, pid)
            if not full and body[0] >> 4 and s.restore_slot(st, pid, body):
                continue  # (type 0: queued with its expiry as an uptime: it waits)
            full = True  # the rest waits in the queue, in order
            if k < 0 or st == STORED_REL:
                s.restore_queued(st == STORED_REL, pid, body)
            else:
                mk = (k, s.level, body[0] >> 4)
                self.msgs[mk] = s.restore_queued(False, pid, body, self.msgs.get(mk))
