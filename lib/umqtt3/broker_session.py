# umqtt3.broker_session -- one client session inside the broker, and the
# registry of all of them.
#
# A session outlives its network connection when the client asked for a
# persistent one (CleanSession 0). It holds:
#   - its subscriptions: parallel lists of filters (bytes) and granted QoS,
#     kept by broker_subs.Subs, saved by broker_store;
#   - the outbound QoS 1/2 messages in flight, in a byte ring allocated once
#     (on the first QoS 1/2 delivery) with a fixed number of slots. A slot is
#     a PUBLISH frame exactly as it goes on the wire, its packet id and its
#     state (qos_state), so a resend after a reconnect is a copy with DUP set;
#   - a queue of frames that could not go out yet (client offline, send
#     buffer full, or no free in-flight slot). Bounded; see _enqueue();
#   - the packet ids of inbound QoS 2 messages waiting for PUBREL;
#   - its own flow.Flow, the client's QoS machine, over the session as its
#     store (store.py's interface); the Flow hands each inbound PUBLISH to
#     deliver(), which passes it to the router (the broker core);
#   - for a persistent session of a broker with a store, a store.FileStore
#     (self.fs) that every QoS 1/2 step is written to first (broker_store.py).
#
# Sending never touches a socket: the session writes into its connection's
# send buffer when there is room and queues otherwise; the driver flushes
# and calls pump() as the buffer drains. Forwarding a QoS 0 or 1 message to
# a connected subscriber that keeps up writes the frame straight into the
# send buffer (and the ring) with codec.put_varint and compat.copy: no heap
# allocation.
from .codec import put_varint, varint_size, encode_ack, PUBREL, MQTTError
from .compat import copy, const
from .flow import Flow, send_stored
from .qos_state import FREE, PUB, PUB_SENT, REL, REL_SENT, from_stored

# first byte of a queued frame whose next packet is PUBREL: a record that
# came back from the store after PUBREC and found no room in the ring
_QREL = const(0x62)


class Route:
    """The message being routed, passed down to every session it goes to:
    its topic tsrc[toff:toff+tn], payload psrc[poff:poff+pn] and QoS; when
    it comes from a client's PUBLISH, that frame (frame[foff:foff+flen], its packet
    id fpid bytes into it), which a copy to a subscriber reuses; and the tag of a QoS 2
    routing that copies to persistent sessions carry (-1: none). At MQTT
    5 its property list is prs[pro:pro+prn] (prs None: no properties), and
    the frame is of protocol level flevel. The core owns one and fills it
    per message: routing allocates nothing."""

    def __init__(self):
        self.set(None, 0, 0, None, 0, 0, 0)

    def set(self, tsrc, toff, tn, psrc, poff, pn, qos):
        self.tsrc = tsrc
        self.toff = toff
        self.tn = tn
        self.psrc = psrc
        self.poff = poff
        self.pn = pn
        self.qos = qos
        self.frame = None
        self.foff = 0
        self.flen = 0
        self.fpid = 0
        self.tag = -1
        self.prs = None
        self.pro = 0
        self.prn = 0
        self.flevel = 0
        self.retain = False  # its RETAIN flag, for retain as published
        self.src = None  # the publisher's session, for no local


def publish_size(tn, pn, qos, prn=-1):
    """Bytes of a PUBLISH; prn: its property list's length at MQTT 5, -1
    below (no list)."""
    rl = 2 + tn + pn + (2 if qos else 0)
    if prn >= 0:
        rl += varint_size(prn) + prn
    return 1 + varint_size(rl) + rl


def put_publish(dst, off, first, tsrc, toff, tn, pid, psrc, poff, pn, prs=None, pro=0, prn=-1,
                alias=0):
    """Write a PUBLISH with first byte `first` whose topic is
    tsrc[toff:toff+tn] and payload psrc[poff:poff+pn] at dst[off]; return
    the end offset. The caller checked the room (publish_size). prn >= 0:
    MQTT 5, with the property list prs[pro:pro+prn], after a topic alias
    property when alias is not 0."""
    q = first & 6
    rl = 2 + tn + pn + (2 if q else 0)
    if prn >= 0:
        m = prn + 3 if alias else prn
        rl += varint_size(m) + m
    dst[off] = first
    off = put_varint(dst, off + 1, rl)
    dst[off] = tn >> 8
    dst[off + 1] = tn & 255
    off += 2
    copy(dst, off, tsrc, toff, tn)
    off += tn
    if q:
        dst[off] = pid >> 8
        dst[off + 1] = pid & 255
        off += 2
    if prn >= 0:
        off = put_varint(dst, off, prn + 3 if alias else prn)
        if alias:
            dst[off] = 0x23  # topic alias (3.3.2.3.4 of 5.0)
            dst[off + 1] = alias >> 8
            dst[off + 2] = alias & 255
            off += 3
        if prn:
            copy(dst, off, prs, pro, prn)
            off += prn
    copy(dst, off, psrc, poff, pn)
    return off + pn


def props_at(f):
    """Offset of the property list's length in the level-5 PUBLISH frame f."""
    i = pid_offset(f, 0)  # just past the topic
    return i + 2 if f[0] & 6 else i


def expiry_at(f):
    """Offset of the message expiry interval's 4 bytes in the level-5
    PUBLISH frame f, or -1. An empty property list (the usual queued
    frame) is answered from its length byte, without props.py."""
    i = props_at(f)
    if not f[i]:
        return -1
    from .props import expiry_in
    return expiry_in(f, i)


def _u32(f, k):
    return (f[k] << 24) | (f[k + 1] << 16) | (f[k + 2] << 8) | f[k + 3]


def _put_u32(f, k, v):
    f[k] = (v >> 24) & 255
    f[k + 1] = (v >> 16) & 255
    f[k + 2] = (v >> 8) & 255
    f[k + 3] = v & 255


def _frame_pid(f):
    o = pid_offset(f, 0)
    return (f[o] << 8) | f[o + 1]


def _same(t, src, off, n):
    # t == src[off:off+n], without a slice
    if len(t) != n:
        return False
    i = 0
    while i < n:
        if t[i] != src[off + i]:
            return False
        i += 1
    return True


def pid_offset(f, off):
    """Offset of the packet id in the QoS 1/2 PUBLISH frame at f[off]."""
    i = off + 1
    while f[i] & 0x80:
        i += 1
    i += 1
    return i + 2 + ((f[i] << 8) | f[i + 1])


class Session:
    # What MQTT 5 adds, as class attributes: an instance holds its own only
    # once they differ, so a 3.1.1 session costs no RAM for them. level:
    # the protocol level frames are built for; maxpkt and rmax: the
    # client's maximum packet size (0: any) and receive maximum; expiry:
    # the session expiry interval (s), exp_at: the broker uptime (s) at
    # which it ends (-1: never); fsid: subscription identifiers, with
    # filters once one is given; tam: how many topic aliases of the
    # broker's the connected client takes, oal: their topics (alias k is
    # oal[k - 1]), for this connection only.
    level = 4
    maxpkt = 0
    tam = 0
    oal = None  # type: list | None
    rmax = 65535
    expiry = 0
    exp_at = -1
    fsid = None

    def __init__(self, cid, clean, limits, stats, router):
        self.cid = cid
        self.clean = clean
        self.lim = limits  # broker_limits.Limits, shared
        self.stats = stats  # counters, shared (sent, dropped)
        self.router = router  # has route_in(pkt, tag): inbound PUBLISHes go there
        self.client = None  # the connected broker_core.Connection, or None
        self.filters = []  # broker_subs.Subs keeps these two
        self.fqos = []
        self.q = []  # frames waiting, oldest first
        # in-flight ring, allocated by _ring() on first use
        self.rbuf = None
        self.s_pid = None
        self.s_off = None
        self.s_len = None
        self.s_st = None  # qos_state per slot
        self.rhead = 0  # oldest slot
        self.rcount = 0  # slots from rhead on that are in use (gaps included)
        self.unsent = 0  # slots in state PUB or REL
        self.npid = 0
        self.ipids = None  # inbound QoS 2 ids waiting for PUBREL
        self.nipids = 0
        self.tag = -1  # the tag of this client's QoS 2 routing under way
        self.fs = None  # a persistent session's FileStore (broker_store.py)
        self.new_tag = None  # and the store's tag source, with it
        self.slot = -1  # its number in the store directory
        # the client's QoS machine, on this session as its store; its
        # application is deliver() below
        self.flow = Flow(self, self)

    def bind_store(self, fs, new_tag, slot):
        """Write every QoS 1/2 step to fs first (broker_store.Disk)."""
        self.fs = fs
        self.new_tag = new_tag
        self.slot = slot

    # ------------------------------------------------------------ inbound
    def deliver(self, p, redelivered):
        """Flow hands over each inbound PUBLISH once (a QoS 2 resend before
        PUBREL is answered, not routed again): the router routes it."""
        self.router.route_in(p, self.tag)

    # ------------------------------------------------------------ delivery
    def _put(self, dst, off, first, size, r, pid):
        # A message routed straight from a client's PUBLISH whose frame has
        # the size of ours (same packet-id presence) is one copy of that
        # frame with a new first byte and packet id.
        fs = r.frame
        if fs is not None and r.flen == size and r.flevel == self.level:
            copy(dst, off, fs, r.foff, size)
            dst[off] = first
            if first & 6:
                o = off + r.fpid
                dst[o] = pid >> 8
                dst[o + 1] = pid & 255
            return off + size
        return put_publish(dst, off, first, r.tsrc, r.toff, r.tn, pid, r.psrc, r.poff, r.pn,
                           r.prs, r.pro, self._prn(r))

    def _prn(self, r):
        # the property list's length in this session's frames: -1 below 5
        if self.level < 5:
            return -1
        return r.prn if r.prs is not None else 0

    def _size(self, r, qos):
        return publish_size(r.tn, r.pn, qos, self._prn(r))

    def send(self, r, qos, retain):
        """The message of route r for this session at `qos` (already
        min(published, granted)); retain is 1 only for a delivery caused by
        a new subscription [MQTT-3.3.1-8, MQTT-3.3.1-9]. Written into the
        connection's send buffer when it has room, else queued. A QoS 1/2
        message of a persistent session is on disk when this returns
        (send_stored or _enqueue), so before the publisher gets its PUBACK
        or PUBREC."""
        first = 0x30 | (qos << 1) | retain
        c = self.client
        if c is None:
            # offline persistent session: QoS 1/2 queued [MQTT-3.1.2-5],
            # QoS 0 only when the broker is told to
            if qos or self.lim.queue_qos0:
                self._enqueue(first, r)
            return
        if self.q or self.unsent:
            # older messages are still waiting: keep the order
            self._enqueue(first, r)
            return
        conn = c.conn
        size = self._size(r, qos)
        if self.maxpkt and size > self.maxpkt:
            self.stats.dropped += 1  # never more than the client takes [MQTT-3.1.2-25]
            return
        ak = self._alias(r) if self.tam else 0
        need = size
        if ak:
            need = publish_size(r.tn if ak < 0 else 0, r.pn, qos, self._prn(r) + 3)
            if self.maxpkt and need > self.maxpkt:
                ak = 0
                need = size
            elif need < size:
                need = size
        if conn.space() < need or (qos and self._fit(size) < 0):
            self._enqueue(first, r)  # pump() writes it as the buffer drains
            return
        start = conn.tlen
        if not qos and not ak:
            conn.tlen = self._put(conn.tx, start, first, size, r, 0)
        elif not qos:
            conn.tlen = self._put_alias(conn.tx, start, first, r, 0, ak)
        else:
            pid = self._pid()
            end = self._put(conn.tx, start, first, size, r, pid)
            send_stored(self, conn, start, end, pid, r.tag)  # the client's rule 1
            if ak:
                # the ring keeps the whole frame (a resend goes on a new
                # connection, whose aliases start afresh); the wire gets
                # the one with the alias
                conn.tlen = self._put_alias(conn.tx, start, first, r, pid, ak)
        if ak < 0:
            self.oal.append(bytes(r.tsrc[r.toff:r.toff + r.tn]))  # a new alias, once
        self.stats.sent += 1

    def _alias(self, r):
        """The broker's topic alias for r's topic on this connection
        (3.3.2.3.4, [MQTT-3.3.2-8] [MQTT-3.3.2-11]): k > 0 when alias k
        stands for it (the topic goes empty), -k when alias k is free to be
        set with it now, 0 when every alias is taken by another topic. No
        allocation."""
        t = self.oal
        n = len(t)
        i = 0
        while i < n:
            if _same(t[i], r.tsrc, r.toff, r.tn):
                return i + 1
            i += 1
        return -(n + 1) if n < self.tam else 0

    def _put_alias(self, dst, off, first, r, pid, ak):
        # r's PUBLISH with topic alias |ak|, the topic only when it is set now
        return put_publish(dst, off, first, r.tsrc, r.toff, r.tn if ak < 0 else 0, pid,
                           r.psrc, r.poff, r.pn, r.prs, r.pro, self._prn(r), ak if ak > 0 else -ak)

    def queue_full(self):
        """True when a QoS 1/2 message for this session would be dropped:
        its queue holds max_queued messages and none is QoS 0 (_enqueue).
        A full queue is not empty, so send() would queue it. The router
        asks before routing and refuses the publisher instead. No allocation."""
        return len(self.q) >= self.lim.max_queued and self._qos0_at() < 0

    def _qos0_at(self):
        # the index of the oldest queued QoS 0 message (the one a full
        # queue drops to make room), -1 when none is queued
        q = self.q
        i = 0
        n = len(q)
        while i < n:
            if not q[i][0] & 6:
                return i
            i += 1
        return -1

    def _enqueue(self, first, r):
        # Bounded by max_queued. When full, the oldest queued QoS 0 message
        # makes room; with none to drop, the new message is dropped. A QoS
        # 1/2 message gets its packet id here, so that the record a
        # persistent session keeps of it is the frame that will be sent.
        q = self.q
        lim = self.lim
        qos = (first >> 1) & 3
        size = self._size(r, qos)
        if size > lim.max_frame or (self.maxpkt and size > self.maxpkt):
            self.stats.dropped += 1
            return
        if len(q) >= lim.max_queued:
            i = self._qos0_at()
            self.stats.dropped += 1
            if i < 0:
                return
            del q[i]
        f = bytearray(size)
        pid = self._pid() if qos else 0
        self._put(f, 0, first, size, r, pid)
        k = -1
        if self.level == 5 and r.prn:
            k = expiry_at(f)
            if k >= 0:
                # while it waits, the frame holds the broker uptime at
                # which it expires; pump() writes what is left back
                _put_u32(f, k, _u32(f, k) + self.stats.up_s)
        if qos and self.fs is not None:
            if k >= 0:
                f[0] -= 0x30  # on disk, type 0 says so (broker_store restores it queued)
            try:
                self.fs.out_add(pid, r.tag, f, 0, size)  # durable before any ack
            finally:
                if k >= 0:
                    f[0] += 0x30
        q.append(f)

    def pump(self):
        """Move what waits (unsent ring slots, then the queue) into the send
        buffer while it has room, in order."""
        conn = self.client.conn
        stats = self.stats
        if self.unsent:
            ns = len(self.s_st)
            i = 0
            while i < self.rcount and self.unsent:
                k = (self.rhead + i) % ns
                st = self.s_st[k]
                if st == PUB:
                    n = self.s_len[k]
                    if conn.space() < n:
                        return
                    copy(conn.tx, conn.tlen, self.rbuf, self.s_off[k], n)
                    conn.tlen += n
                    self.s_st[k] = PUB_SENT
                    self.unsent -= 1
                    stats.sent += 1
                elif st == REL:
                    if conn.space() < 4:
                        return
                    conn.tlen = encode_ack(conn.tx, conn.tlen, PUBREL, self.s_pid[k])
                    self.s_st[k] = REL_SENT
                    self.unsent -= 1
                i += 1
        q = self.q
        tx = conn.tx
        while q:
            f = q[0]
            n = len(f)
            x = expiry_at(f) if self.level == 5 and f[0] != _QREL else -1
            if self._expired(x, f):
                q.pop(0)  # expired while it waited [MQTT-3.3.2-5 (5.0)]
                stats.dropped += 1
                if f[0] & 6 and self.fs is not None:
                    self.fs.out_del(_frame_pid(f))
                continue
            if not f[0] & 6:
                if self.maxpkt and n > self.maxpkt:
                    q.pop(0)  # [MQTT-3.1.2-25]
                    stats.dropped += 1
                    continue
                if len(tx) - conn.tlen < n:
                    return
                if x >= 0:
                    self._age(f, x)
                copy(tx, conn.tlen, f, 0, n)
                conn.tlen += n
                stats.sent += 1
                q.pop(0)
                continue
            if f[0] == _QREL:
                # PUBREL only: a slot that holds no bytes but the id
                k = self._alloc(0)
                if k < 0:
                    return
                self.s_pid[k] = _frame_pid(f)
                q.pop(0)
                self.s_st[k] = REL
                self.unsent += 1
                if conn.space() < 4:
                    return
                conn.tlen = encode_ack(tx, conn.tlen, PUBREL, self.s_pid[k])
                self.s_st[k] = REL_SENT
                self.unsent -= 1
                continue
            if n > self.lim.max_frame or (self.maxpkt and n > self.maxpkt):
                q.pop(0)
                stats.dropped += 1
                if self.fs is not None:
                    self.fs.out_del(_frame_pid(f))
                continue
            k = self._alloc(n)
            if k < 0:
                return
            if x >= 0:
                self._age(f, x)
            # its id came with it from _enqueue, and so did its record
            self.s_pid[k] = _frame_pid(f)
            copy(self.rbuf, self.s_off[k], f, 0, n)
            q.pop(0)
            if len(tx) - conn.tlen < n:
                self.s_st[k] = PUB
                self.unsent += 1
                return
            copy(tx, conn.tlen, f, 0, n)
            conn.tlen += n
            self.s_st[k] = PUB_SENT
            stats.sent += 1

    def _expired(self, k, f):
        """A queued level-5 frame f whose message expiry interval (at
        f[k], an uptime while it waits; k < 0: none) has passed. pump()
        finds k once per frame."""
        return k >= 0 and _u32(f, k) <= self.stats.up_s

    def _age(self, f, k):
        # the queued frame f goes out now: what is left of its message
        # expiry interval, the time it waited taken off [MQTT-3.3.2-6 (5.0)]
        _put_u32(f, k, _u32(f, k) - self.stats.up_s)

    def backlog(self):
        return self.unsent or len(self.q)

    # ------------------------------------------------------------ in-flight ring
    def _ring(self):
        ns = self.lim.max_inflight
        self.rbuf = bytearray(self.lim.ring)
        self.s_pid = [0] * ns
        self.s_off = [0] * ns
        self.s_len = [0] * ns
        self.s_st = bytearray(ns)

    def _fit(self, n):
        """Where n contiguous ring bytes in a free slot start, or -1."""
        if self.rbuf is None:
            self._ring()
        ns = len(self.s_st)
        cnt = self.rcount
        if cnt >= ns or cnt >= self.rmax:  # the client's receive maximum [MQTT-3.3.4-9]
            return -1
        size = len(self.rbuf)
        if not cnt:
            return 0 if n <= size else -1
        else:
            first = self.rhead
            last = (first + cnt - 1) % ns
            h = self.s_off[first]
            t = self.s_off[last] + self.s_len[last]
            if self.s_off[last] >= h:  # live bytes in [h, t)
                if size - t >= n:
                    off = t
                elif h >= n:
                    off = 0
                else:
                    return -1
            elif h - t >= n:  # wrapped: live bytes in [h, size) and [0, t)
                off = t
            else:
                return -1
        return off

    def _alloc(self, n):
        """A free slot with n contiguous ring bytes, or -1."""
        off = self._fit(n)
        if off < 0:
            return -1
        cnt = self.rcount
        if not cnt:
            self.rhead = 0
        k = (self.rhead + cnt) % len(self.s_st)
        self.rcount = cnt + 1
        self.s_off[k] = off
        self.s_len[k] = n
        return k

    def _free(self, k):
        self.s_st[k] = FREE
        ns = len(self.s_st)
        while self.rcount and not self.s_st[self.rhead]:
            self.rhead = (self.rhead + 1) % ns
            self.rcount -= 1

    def _find(self, pid):
        if self.rbuf is None or not self.rcount:
            return -1
        ns = len(self.s_st)
        # Ids are handed out in sequence in the order slots are taken
        # (_pid), so pid is usually as many slots past the oldest as its id
        # is past the oldest's: one look, then the scan (restored slots).
        h = self.rhead
        d = (pid - self.s_pid[h]) % 65535
        if d < self.rcount:
            k = (h + d) % ns
            if self.s_pid[k] == pid and self.s_st[k]:
                return k
        i = 0
        while i < self.rcount:
            k = (self.rhead + i) % ns
            if self.s_st[k] and self.s_pid[k] == pid:
                return k
            i += 1
        return -1

    def _pid(self):
        # Ids are handed out in sequence and a slot is only taken at the
        # ring's tail, behind every live one; with fewer slots than ids the
        # live ids are the last len(s_st) handed out, so the next one is
        # free [MQTT-2.3.1-4]. (restore_slot keeps that order.)
        p = self.npid + 1
        if p > 65535:
            p = 1
        self.npid = p
        return p

    # ------------------------------------------------------------ the store
    # The outbound half of the store interface umqtt3.flow uses (store.py):
    # the broker answers PUBACK, PUBREC and PUBCOMP with Flow.on_ack, the
    # client's machine, and sends with flow.send_stored. A persistent
    # session writes each step to its FileStore (self.fs) before the RAM
    # state changes, so what is on disk is never behind what was sent.
    def out_add(self, pid, key, buf, off, n):
        if self._fit(n) < 0:
            raise MQTTError("in-flight ring full", 0x97)  # deliver() checked
        if self.fs is not None:
            self.fs.out_add(pid, key, buf, off, n)
        k = self._alloc(n)
        self.s_pid[k] = pid
        copy(self.rbuf, self.s_off[k], buf, off, n)
        self.s_st[k] = PUB_SENT

    def ack_fits(self, t, pid):
        """Does a PUBACK (4), PUBREC (5) or PUBCOMP (7) for pid fit the flow
        of that id? PUBACK only for QoS 1, PUBREC only for QoS 2 before
        its PUBCOMP, PUBCOMP only after PUBREL, nothing for an id not in
        flight [MQTT-4.3.2-*, MQTT-4.3.3-*]."""
        k = self._find(pid)
        if k < 0:
            return False
        st = self.s_st[k]
        if st == REL or st == REL_SENT:
            return t != 4  # PUBCOMP; a PUBREC again is answered with PUBREL again
        if t == 7:
            return False  # PUBCOMP before PUBREL
        q = (self.rbuf[self.s_off[k]] >> 1) & 3
        return q == (1 if t == 4 else 2)

    def out_has(self, pid):
        return self._find(pid) >= 0

    def out_count(self):
        return self.inflight()

    def out_rel(self, pid):
        """PUBREC: the PUBLISH is now the receiver's. Recorded, then
        False: Flow answers PUBREL now; True: older messages wait to be
        written, so PUBREL is written after them by pump()."""
        k = self._find(pid)
        st = self.s_st[k]
        if st == REL:
            return True  # its PUBREL is already waiting
        if st <= PUB_SENT:
            if self.fs is not None:
                self.fs.out_rel(pid)  # durable before PUBREL [MQTT-4.3.3-1]
            if st == PUB:
                self.unsent -= 1
        if self.unsent:
            self.s_st[k] = REL
            self.unsent += 1
            return True
        self.s_st[k] = REL_SENT
        return False

    def out_del(self, pid):
        """PUBACK or PUBCOMP: the flow is over [MQTT-4.3.2-1, MQTT-4.3.3-1]."""
        k = self._find(pid)
        st = self.s_st[k]
        if self.fs is not None:
            self.fs.out_del(pid)
        if st == PUB or st == REL:
            self.unsent -= 1
        self._free(k)

    def inflight(self):
        """Number of outbound QoS 1/2 messages not yet completed."""
        if self.rbuf is None:
            return 0
        ns = len(self.s_st)
        n = 0
        i = 0
        while i < self.rcount:
            if self.s_st[(self.rhead + i) % ns]:
                n += 1
            i += 1
        return n

    def attach(self, client):
        """The client (re)connects to this session: what was written and not
        acknowledged is due again, PUBLISH with DUP=1 [MQTT-4.4.0-1]."""
        self.client = client
        if self.exp_at >= 0:
            self.exp_at = -1
        v = client.v5
        if v is not None or self.level == 5:
            self.level = 4 if v is None else 5
            self.maxpkt = 0 if v is None else v.maxpkt
            self.rmax = 65535 if v is None else v.rmax
            # the broker's topic aliases start afresh with each connection [MQTT-3.3.2-7]
            tam = 0 if v is None else v.tam
            lim = self.lim.max_aliases
            if tam or self.tam:  # (a session that never had any holds no slots)
                self.tam = tam if tam < lim else lim
                self.oal = [] if self.tam else None
        if self.rbuf is None:
            return
        ns = len(self.s_st)
        self.unsent = 0
        i = 0
        while i < self.rcount:
            k = (self.rhead + i) % ns
            st = self.s_st[k]
            if st == PUB_SENT:
                self.rbuf[self.s_off[k]] |= 8
                st = PUB
            elif st == REL_SENT:
                st = REL
            if st:
                self.s_st[k] = st
                self.unsent += 1
            i += 1

    # ------------------------------------------------------------ inbound QoS 2
    # The held ids are kept packed in ipids[0:nipids], so each lookup scans
    # only the ids in flight, not the whole table.
    def ipid_has(self, pid):
        ids = self.ipids
        i = 0
        while i < self.nipids:
            if ids[i] == pid:
                return True
            i += 1
        return False

    def ipid_add(self, pid):
        """Hold pid until PUBREL; False when max_qos2_in ids are held."""
        ids = self.ipids
        if ids is None:
            ids = self.ipids = [0] * self.lim.max_qos2_in
        n = self.nipids
        if n >= len(ids):
            return False
        ids[n] = pid
        self.nipids = n + 1
        return True

    def ipid_del(self, pid):
        ids = self.ipids
        n = self.nipids
        i = 0
        while i < n:
            if ids[i] == pid:
                n -= 1
                ids[i] = ids[n]
                ids[n] = 0
                self.nipids = n
                return
            i += 1

    # The inbound half of the store interface: the broker receives with
    # Flow.on_publish / on_ack, the client's exactly-once machine. A
    # persistent session keeps each held id in a record i<pid>.u tagged with
    # a number unique in the broker (Disk.tag, kept in self.tag); every copy routed to a
    # persistent subscriber carries that tag, and the record becomes .d once
    # routing is over, before PUBREC. A .u found at start-up is a routing a
    # crash cut short: broker_store removes the copies with its tag and the
    # record, and the publisher, which got no PUBREC, sends it again.
    in_has = ipid_has

    def in_add(self, pid, buf, off, n):
        if self.nipids >= self.lim.max_qos2_in:
            raise MQTTError("too many QoS 2 messages in flight", 0x93)
        if self.fs is not None:
            t = self.new_tag()
            self.fs.in_add(pid, buf, off, 0, t)  # the id and its tag
            self.tag = t
        self.ipid_add(pid)

    def in_done(self, pid):
        # routing is over whatever the disk says next: no later copy may
        # carry this tag, or a restart would take it back
        self.tag = -1
        if self.fs is not None:
            try:
                self.fs.in_done(pid)  # routed: a resend is answered, not routed
            except OSError:
                # still .u on disk, so not held: no PUBREC now, and the
                # publisher's resend is routed again (a failing disk may
                # duplicate, never lose what a PUBREC promised)
                self.ipid_del(pid)
                raise

    def in_del(self, pid):
        # RAM first: when the disk fails, PUBCOMP is not sent, and an id
        # left on disk only makes a PUBREL after a restart find it
        self.ipid_del(pid)
        self.tag = -1
        if self.fs is not None:
            self.fs.in_del(pid)  # removed durably before PUBCOMP

    # ------------------------------------------------------------ persistence
    def restore_slot(self, st, pid, frame):
        """Put a stored message back (at load, before any client
        attaches); st is its record state (qos_state.STORED_*)."""
        n = len(frame)
        k = self._alloc(n)
        if k < 0:
            return False
        self.s_pid[k] = pid
        copy(self.rbuf, self.s_off[k], frame, 0, n)
        self.s_st[k] = from_stored(st)  # attach() resends
        self.npid = pid  # slots come back oldest first: the last is the newest
        return True

    def restore_queued(self, rel, pid, frame):
        """A stored message that found no room in the ring (the limits are
        lower than when it was written): it waits in the queue, in order;
        rel: its PUBREC came, so PUBREL is what goes out (pump)."""
        f = bytearray(frame)
        if rel:
            f[0] = _QREL
        elif not f[0] >> 4:
            f[0] += 0x30  # queued with its expiry as an uptime (_enqueue)
        elif self.level == 5:
            k = expiry_at(f)
            if k >= 0:  # it was in flight, with what was left: an uptime in the queue
                _put_u32(f, k, _u32(f, k) + self.stats.up_s)
        self.q.append(f)
        self.npid = pid


class Sessions:
    """Every session by client id, clean ones while connected and the
    persistent ones for good (bounded by max_sessions)."""

    def __init__(self):
        self.by_id = {}  # client id -> Session
        self.all = []  # the same, for iteration
        self.npersist = 0
        self.nauto = 0  # ids handed out for empty client ids

    def add(self, s):
        self.by_id[s.cid] = s
        self.all.append(s)
        if not s.clean:
            self.npersist += 1

    def remove(self, s):
        del self.by_id[s.cid]
        self.all.remove(s)
        if not s.clean:
            self.npersist -= 1

    def new_id(self):
        """A client id no session has [MQTT-3.1.3-6]."""
        while True:
            self.nauto += 1
            cid = ("umqtt3-%d" % self.nauto).encode()
            if cid not in self.by_id:
                return cid
