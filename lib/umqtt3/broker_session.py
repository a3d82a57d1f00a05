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
#   - a queue of messages that could not go out yet (client offline, send
#     buffer full, or no free in-flight slot): each a reference to one
#     shared Msg (topic, payload, properties, held once however many
#     sessions queue it) and a small int (first byte, packet id); the frame
#     is built into the send buffer when it goes (pump). Bounded in
#     messages and in bytes; see enqueue();
#   - the packet ids of inbound QoS 2 messages waiting for PUBREL;
#   - the store of its QoS 1/2 flows (store.py's interface), which the
#     broker core runs by umqtt3.flow's rules (Core._packet, Core._ack,
#     ack_out() here); the core routes each inbound PUBLISH once;
#   - for a persistent session of a broker with a store, a store.FileStore
#     (self.fs) that every QoS 1/2 step is written to first (broker_store.py).
#
# Sending never touches a socket: the session writes into its connection's
# send buffer when there is room and queues otherwise; the driver flushes
# and calls pump() as the buffer drains. Forwarding a QoS 0 or 1 message to
# a connected subscriber that keeps up writes the frame straight into the
# send buffer (and the ring) with codec.put_varint and compat.copy: no heap
# allocation.
from .codec import put_varint, varint_size, publish_size, encode_ack, mqtt5, PUBREL, MQTTError
from .compat import copy, const, MICROPYTHON
from .qos_state import FREE, PUB, PUB_SENT, REL, REL_SENT, from_stored

# first byte of a queued frame whose next packet is PUBREL: a record that
# came back from the store after PUBREC and found no room in the ring
_QREL = const(0x62)
# A queue entry's bit 7 (a PUBLISH's first byte never has it): the copy came
# by a shared group's turn (mark_shared), so it goes to another member of
# the group when this session ends unacknowledged (shared_held).
_QSH = const(0x80)


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
        self.msg = None  # its Msg once a session queued it: shared by the next


# What a queued message costs besides its bytes (the Msg and its bytes
# objects), and what one queue entry costs (two list slots, with room to
# grow; on CPython the packed int is an object too): what the byte budgets
# count (broker_limits.max_queued_bytes, mem_budget), near what RAM holds.
MSG_COST = 128 if MICROPYTHON else 320
ENTRY_COST = 16 if MICROPYTHON else 56
# the in-flight ring's first size (Session._ring); it grows to Limits.ring
RING_START = const(4096)


def mark_late(x, bit):
    """A will from the broker's late slot whose bit this is reaches x (a
    Session, or a bridge): False when an earlier try did (its bit set),
    else x is marked before its copy, so that a mark that cannot be made
    sends nothing (broker_core.Core._route, bridge.Hub.route)."""
    if x.got_late & bit:
        return False
    x.got_late |= bit
    return True


def unmark_late(xs, n, bit):
    """The marks of that will on the first n of xs go (it is out)."""
    i = 0
    while i < n:
        x = xs[i]
        if x.got_late & bit:
            x.got_late &= ~bit
        i += 1


def msg_size(r):
    """What route r costs queued once: its topic, payload and properties,
    and MSG_COST."""
    return r.tn + r.pn + (r.prn if r.prs is not None else 0) + MSG_COST


class Msg:
    """One queued message, held once however many queues reference it:
    topic t, payload p, MQTT 5 property list pr (None: none) whose message
    expiry interval is at pr[xk:xk+4] (xk -1: none) and ends at broker
    uptime exp; refs: the queue entries that hold it; size: what it costs
    (msg_size). Never changed once made: each frame built from it writes
    its own expiry (Session._put_msg). pr, xk and exp are the class's
    (none) unless the message has properties (_with_props): a message
    without costs no RAM and no step for them."""
    pr = None  # type: bytes | None
    xk = -1
    exp = -1
    pk = 0  # not a Framed

    def __init__(self, t, p):
        self.t = t
        self.p = p
        self.refs = 0
        self.size = len(t) + len(p) + MSG_COST


class Framed:
    """A queued QoS 1/2 message that came in a level 3/4 QoS 1/2 PUBLISH
    and goes to a level 4 session: that frame f, its packet id pk
    bytes into it, as the session sends it but for its first byte and
    packet id, which pump() patches (one copy, no size to work out). It
    holds one bytes object where a Msg holds two. Anywhere else it is
    read as a Msg (plain())."""
    pr = None
    xk = -1
    exp = -1

    def __init__(self, f, pk, size):
        self.f = f
        self.pk = pk
        self.refs = 0
        self.size = size


def frame_payload(b, o, n, v5):
    """The payload's length in the QoS 1/2 PUBLISH frame b[o:o+n] (v5: it
    has a property list)."""
    e = o + n
    o += 1
    while b[o] & 0x80:
        o += 1  # the remaining length
    o += 3 + (b[o + 1] << 8 | b[o + 2]) + 2  # the topic, the packet id
    if v5:
        m = 0
        sh = 0
        while True:
            v = b[o]
            o += 1
            m |= (v & 0x7F) << sh
            if v < 128:
                break
            sh += 7
        o += m
    return e - o


def plain(m):
    """Queued message m as a Msg (a Framed made into one, with its refs
    and size: off the fast path, it allocates)."""
    if not m.pk:
        return m
    f = m.f
    i = 1
    while f[i] & 0x80:
        i += 1
    p = Msg(bytes(f[i + 3:m.pk]), bytes(f[m.pk + 2:]))
    p.refs = m.refs
    p.size = m.size
    return p


def _with_props(m, pr, xk, exp):
    # Msg m with its MQTT 5 property list pr (None: none, m as it is)
    if pr is not None:
        m.pr = pr
        m.xk = xk
        m.exp = exp
        m.size += len(pr)
    return m


def new_msg(r, up):
    """The Msg of route r, its bytes copied once; up: the broker's uptime."""
    pr = None
    xk = -1
    exp = -1
    if r.prs is not None:
        pr = bytes(r.prs[r.pro:r.pro + r.prn])
        if r.prn:
            from .props import find, MESSAGE_EXPIRY  # MQTT 5 only
            xk = find(pr, 0, r.prn, MESSAGE_EXPIRY)
            if xk >= 0:
                exp = _ends(pr, xk, up)
    return _with_props(Msg(bytes(r.tsrc[r.toff:r.toff + r.tn]), bytes(r.psrc[r.poff:r.poff + r.pn])),
                       pr, xk, exp)


def stored_first(first, level, uptime=False):
    """The first byte a store keeps for a PUBLISH whose first byte is
    `first`, built for protocol level `level`: its type says the level (1:
    below 5; 2: 5; 0: 5 with its message expiry as an uptime, not what is
    left), so that a session resumed at another level, and restored after
    a restart, reads each frame as it was built (stored_level)."""
    return first - (0x30 if uptime else 0x10 if level == 5 else 0x20)


def frame_msg(f, level, up):
    """The Msg of the PUBLISH frame f a store kept (level: its protocol
    level; a first byte of type 0: its expiry is an uptime, not what is
    left)."""
    i = 1
    while f[i] & 0x80:
        i += 1
    i += 1
    tn = (f[i] << 8) | f[i + 1]
    i += 2
    t = bytes(f[i:i + tn])
    i += tn
    if f[0] & 6:
        i += 2  # the packet id
    pr = None
    xk = -1
    exp = -1
    if level == 5:
        from .props import read_varint, varint_end, find, MESSAGE_EXPIRY
        prn = read_varint(f, i, len(f))
        i = varint_end(f, i)
        pr = bytes(f[i:i + prn])
        if prn:
            xk = find(pr, 0, prn, MESSAGE_EXPIRY)
            if xk >= 0:
                exp = _ends(pr, xk, 0 if not f[0] >> 4 else up)
        i += prn
    return _with_props(Msg(t, bytes(f[i:])), pr, xk, exp)


def grow_tx(conn, need, cap):
    """Room for need more bytes in conn's send buffer, which starts small
    (broker.py) and doubles on demand up to cap bytes (Limits.tx): True
    when they fit now. Growing allocates; a connection whose buffer has
    grown to what its traffic needs never does again."""
    tx = conn.tx
    n = len(tx)
    want = conn.tlen + need
    if want <= n:
        return True
    if want > cap:
        return False
    while n < want:
        n += n
    b = bytearray(n if n < cap else cap)
    copy(b, 0, tx, 0, conn.tlen)
    conn.tx = b
    return True


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


def put_ack(conn, b0, pid):
    """A 4-byte PUBACK (b0 0x40), PUBREC (0x50), PUBREL (0x62) or PUBCOMP
    (0x70) for pid into conn's send buffer: codec.encode_ack's, inline
    where it fits (the router's every QoS 1/2 message writes one)."""
    tx = conn.tx
    o = conn.tlen
    if len(tx) - o < 4:
        conn.tlen = encode_ack(tx, o, b0 >> 4, pid)  # refused as the codec does
        return
    tx[o] = b0
    tx[o + 1] = 2
    tx[o + 2] = pid >> 8
    tx[o + 3] = pid & 255
    conn.tlen = o + 4


def _u32(f, k):
    return (f[k] << 24) | (f[k + 1] << 16) | (f[k + 2] << 8) | f[k + 3]


# The uptime (s) past which a message's expiry counts as never: the last
# small int of MicroPython on a 32-bit port (2**30 - 1, 34 years), since a
# bigger int is allocated and forwarding allocates nothing. A broker runs
# that long on no device, so no message that would expire in its uptime
# is kept past its time; one so far off just keeps its interval as sent.
END_UP = 0x3FFFFFFF


def _ends(f, k, up):
    # the uptime at which the message expiry interval f[k:k+4], counted
    # from uptime up, ends; -1: never (END_UP). No big int is made.
    if f[k] >= 0x40:
        return -1
    v = _u32(f, k)
    return -1 if v >= END_UP - up else v + up


def _put_u32(f, k, v):
    f[k] = (v >> 24) & 255
    f[k + 1] = (v >> 16) & 255
    f[k + 2] = (v >> 8) & 255
    f[k + 3] = v & 255


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


def _expiry_at(f, o):
    # where the message expiry interval's value lies in the level-5 PUBLISH
    # at f[o] (-1: it has none); no allocation
    i = o + 1
    while f[i] & 0x80:
        i += 1
    i += 3 + ((f[i + 1] << 8) | f[i + 2])  # the topic
    if f[o] & 6:
        i += 2  # the packet id
    return mqtt5().expiry_in(f, i)


_NONE = []  # type: list  # an empty queue, shared: never added to (_push)


class Session:
    # What MQTT 5 adds, as class attributes: an instance holds its own only
    # once they differ, so a 3.1.1 session costs no RAM for them. level:
    # the protocol level frames are built for; maxpkt: the client's maximum
    # packet size (0: any); rmax: the most QoS 1/2 messages in flight to it,
    # set at attach once the session has been MQTT 5 (_window); expiry:
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
    # the ACL's broker_acl.Grants of the client whose session it is, which
    # its subscriptions marked broker_subs.ACL_CHECK are checked against
    # per message (None: they deliver nothing)
    grants = None
    # The queue, oldest first from q[qh]: per message two items, the Msg
    # (None: a PUBREL only) and first byte | packet id << 8; qb: what it
    # costs in bytes. Class attributes until a session queues something.
    qh = 0
    qb = 0
    # the level its store's records of type 3 were built for (written
    # before records said their level; stored_first): 0 when none were
    lv3 = 0
    # per ring slot, 1: its copy came by a shared group's turn; made by the
    # first such copy in flight (mark_shared), so a session that never gets
    # one holds no bytes for it
    s_sh = None  # type: bytearray | None
    # per ring slot, the broker uptime (s) at which its message expires (-1:
    # never), so that a resend carries what is left [MQTT-3.3.2-6]; made by
    # the first message in flight that has an expiry (_deadline)
    s_exp = None  # type: list | None
    # queue_full "drop" (broker_core): qskip, this session does not get the
    # message being routed, its queue being full; dropping, such a message
    # was dropped since the queue last drained (logged once). Class
    # attributes until a session's queue is first full.
    qskip = False
    dropping = False
    # bit k: the will in the broker's late slot k has reached this session
    # (broker_core.Core._route); a class attribute until one has
    got_late = 0

    def __init__(self, cid, clean, limits, stats):
        self.cid = cid
        self.clean = clean
        self.lim = limits  # broker_limits.Limits, shared
        self.stats = stats  # counters, shared (sent, dropped)
        self.client = None  # the connected broker_core.Connection, or None
        self.filters = []  # broker_subs.Subs keeps these two
        self.fqos = []
        self.q = _NONE  # the queue (_push makes it a list)
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

    def bind_store(self, fs, new_tag, slot):
        """Write every QoS 1/2 step to fs first (broker_store.Disk)."""
        self.fs = fs
        self.new_tag = new_tag
        self.slot = slot

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
        (out_add before the send, or enqueue), so before the publisher gets its PUBACK
        or PUBREC."""
        first = 0x30 | (qos << 1) | retain
        c = self.client
        if c is None:
            # offline persistent session: QoS 1/2 queued [MQTT-3.1.2-5],
            # QoS 0 only when the broker is told to
            if qos or self.lim.queue_qos0:
                self.enqueue(first, r)
            return
        if self.unsent or self.qh < len(self.q):
            # older messages are still waiting: keep the order
            self.enqueue(first, r)
            return
        conn = c.conn
        # its frame's size (_size, inline: every forward comes here)
        rl = r.tn + r.pn + (4 if qos else 2)
        lev = self.level
        if lev == 5:
            prn = r.prn if r.prs is not None else 0
            rl += prn + (1 if prn < 128 else 2 if prn < 16384 else 3)
        size = rl + (2 if rl < 128 else 3 if rl < 16384 else 4 if rl < 2097152 else 5)
        if self.maxpkt and size > self.maxpkt and not self._alias_fits(r, qos):
            # never more than the client takes: dropped as if sent, unless
            # its form with a topic alias fits [MQTT-3.1.2-25]
            self.stats.dropped += 1
            return
        if not qos and not self.tam:
            # QoS 0 (_put inline): the publisher's frame when it is the same
            start = conn.tlen
            tx = conn.tx
            if len(tx) - start < size:
                if not grow_tx(conn, size, self.lim.tx):
                    self.enqueue(first, r)  # pump() writes it as the buffer drains
                    return
                tx = conn.tx
            fs = r.frame
            if fs is not None and r.flen == size and r.flevel == lev:
                copy(tx, start, fs, r.foff, size)
                tx[start] = first
                conn.tlen = start + size
            else:
                conn.tlen = self._put(tx, start, first, size, r, 0)
            st = self.stats
            st.sent += 1
            st.pub_out += r.pn
            return
        ak = self._alias(r.tsrc, r.toff, r.tn) if self.tam else 0
        need = size
        if ak:
            need = publish_size(r.tn if ak < 0 else 0, r.pn, qos, self._prn(r) + 3)
            if self.maxpkt and need > self.maxpkt:
                ak = 0
                need = size
            elif need < size:
                need = size
        k = -1
        if (conn.space() < need and not grow_tx(conn, need, self.lim.tx)) or \
                (qos and self._alloc(size) < 0):
            self.enqueue(first, r)  # pump() writes it as the buffer drains
            return
        if qos:
            k = (self.rhead + self.rcount - 1) % len(self.s_st)  # the slot _alloc took
        start = conn.tlen
        if not qos and not ak:
            conn.tlen = self._put(conn.tx, start, first, size, r, 0)
        elif not qos:
            conn.tlen = self._put_alias(conn.tx, start, first, r, 0, ak)
        else:
            pid = self._pid()
            end = self._put(conn.tx, start, first, size, r, pid)
            # stored before its first send (the client's rule 1), then in
            # the ring: out_add's, in the slot taken above
            self._out_at(k, pid, r.tag, conn.tx, start, end - start)
            if lev == 5 and r.prn:
                self._deadline(k, self._expires(r))
            conn.tlen = end
            if ak:
                # the ring keeps the whole frame (a resend goes on a new
                # connection, whose aliases start afresh); the wire gets
                # the one with the alias
                conn.tlen = self._put_alias(conn.tx, start, first, r, pid, ak)
        if ak < 0:
            try:
                self.oal.append(bytes(r.tsrc[r.toff:r.toff + r.tn]))  # a new alias, once
            except MemoryError:
                # the PUBLISH is on its way: so that a caller does not send
                # it again, the alias goes unrecorded, and the next PUBLISH
                # sets alias |ak| again with its topic (a new mapping, 3.3.2.3.4)
                pass
        st = self.stats
        st.sent += 1
        st.pub_out += r.pn

    def _expires(self, r):
        # the uptime at which level-5 route r's message expires (-1: never)
        i = mqtt5().find(r.prs, r.pro, r.prn, 0x02)  # (props.MESSAGE_EXPIRY)
        return -1 if i < 0 else _ends(r.prs, i, self.stats.up_s)

    def _deadline(self, k, x):
        # slot k's message expires at uptime x (-1: never); returns s_exp
        se = self.s_exp
        if se is None:
            if x < 0:
                return None
            se = self.s_exp = [-1] * len(self.s_st)
        se[k] = x
        return se

    def _alias_fits(self, r, qos):
        # r's PUBLISH with the topic alias that stands for its topic already
        # (an empty topic) within the client's maximum packet size
        return self.tam and self._alias(r.tsrc, r.toff, r.tn) > 0 and \
            publish_size(0, r.pn, qos, self._prn(r) + 3) <= self.maxpkt

    def _msg_alias(self, m, qos):
        # _alias_fits for queued Msg m (level 5): the alias, or 0. Aliases
        # are the connection's: a message queued for the next one goes
        # whole, as a resend does [MQTT-3.3.2-7]
        if not self.tam or self.client is None:
            return 0
        k = self._alias(m.t, 0, len(m.t))
        if k > 0 and publish_size(0, len(m.p), qos, (len(m.pr) if m.pr is not None else 0) + 3) \
                <= self.maxpkt:
            return k
        return 0

    def _alias(self, src, off, n):
        """The broker's topic alias for topic src[off:off+n] on this
        connection (3.3.2.3.4, [MQTT-3.3.2-8] [MQTT-3.3.2-11]): k > 0 when
        alias k stands for it (the topic goes empty), -k when alias k is
        free to be set with it now, 0 when every alias is taken by another
        topic, or when a new one would hold more than max_alias_bytes of
        topics. No allocation."""
        t = self.oal
        na = len(t)
        held = n
        i = 0
        while i < na:
            if _same(t[i], src, off, n):
                return i + 1
            held += len(t[i])
            i += 1
        mb = self.lim.max_alias_bytes
        return -(na + 1) if na < self.tam and (not mb or held <= mb) else 0

    def _put_alias(self, dst, off, first, r, pid, ak):
        # r's PUBLISH with topic alias |ak|, the topic only when it is set now
        return put_publish(dst, off, first, r.tsrc, r.toff, r.tn if ak < 0 else 0, pid,
                           r.psrc, r.poff, r.pn, r.prs, r.pro, self._prn(r), ak if ak > 0 else -ak)

    def queued(self):
        """Messages waiting in the queue."""
        return (len(self.q) - self.qh) >> 1

    def held(self, acc):
        """Add to acc ([messages, payload bytes], floats) the messages this
        session holds for its client ($SYS messages/stored): each queued
        one as a share of one (a message queued for n sessions is held
        once), each in flight until acknowledged (PUBACK, PUBREC) as one.
        Allocates: once per $SYS update."""
        q = self.q
        i = self.qh
        while i < len(q):
            m = q[i]
            if m is not None:  # (None: a PUBREL only)
                acc[0] += 1 / m.refs
                acc[1] += (len(m.f) - m.pk - 2 if m.pk else len(m.p)) / m.refs
            i += 2
        if self.rbuf is None:
            return
        ns = len(self.s_st)
        i = 0
        while i < self.rcount:
            k = (self.rhead + i) % ns
            if self.s_st[k] == PUB or self.s_st[k] == PUB_SENT:
                acc[0] += 1
                acc[1] += frame_payload(self.rbuf, self.s_off[k], self.s_len[k], self.level == 5)
            i += 1

    def queue_full(self, size=0):
        """True when a QoS 1/2 message costing `size` bytes (msg_size) would
        not fit this session's queue, max_queued messages or
        max_queued_bytes, even with every queued QoS 0 message dropped
        (enqueue drops those first). The router asks before routing and
        refuses the publisher instead. No allocation."""
        lim = self.lim
        n = (len(self.q) - self.qh) >> 1  # (queued())
        mb = lim.max_queued_bytes
        need = size + ENTRY_COST
        if n < lim.max_queued and (not mb or self.qb + need <= mb):
            return False
        q = self.q
        i = self.qh
        k = 0  # QoS 0 messages queued
        b = 0  # and their bytes
        while i < len(q):
            if not q[i + 1] & 6:
                k += 1
                b += q[i].size + ENTRY_COST
            i += 2
        if n - k >= lim.max_queued:
            return True
        return bool(mb) and self.qb - b + need > mb

    def _qos0_at(self):
        # the index in q of the oldest queued QoS 0 message (the one a
        # full queue drops to make room), -1 when none is queued
        q = self.q
        i = self.qh
        n = len(q)
        while i < n:
            if not q[i + 1] & 6:
                return i
            i += 2
        return -1

    def _push(self, m, v):
        # queue message m (None: a PUBREL only) with v = first byte | pid << 8
        q = self.q
        if q is _NONE:
            q = self.q = []
        q.append(m)
        q.append(v)
        st = self.stats
        c = ENTRY_COST
        if m is not None:
            m.refs += 1
            c += m.size
            if m.refs == 1:
                st.qbytes += m.size  # its bytes, once for every queue
        st.qbytes += ENTRY_COST
        self.qb += c

    def _take(self, i):
        # forget queue entry i (the head, usually: no pop(0), the head index
        # moves on and the lists are cut once it has gone far enough)
        q = self.q
        m = q[i]  # type: Msg | None
        st = self.stats
        c = ENTRY_COST
        if m is not None:
            c += m.size
            m.refs -= 1
            if not m.refs:
                st.qbytes -= m.size
        st.qbytes -= ENTRY_COST
        self.qb -= c
        h = self.qh
        if i != h:
            del q[i:i + 2]
            return
        q[h] = None
        h += 2
        if h == len(q):
            del q[:]
            h = 0
            if self.dropping:
                self.dropping = False  # drained: the next drop is logged again
        elif h >= 64 and h + h >= len(q):
            del q[:h]
            h = 0
        self.qh = h

    def clear(self):
        """Forget every queued message (the session ends)."""
        while self.qh < len(self.q):
            self._take(self.qh)

    def admit(self, r, qos, size):
        """What the router asks of each matching session before it routes
        the QoS 1/2 message of route r (at `qos` for this session, costing
        `size` bytes, msg_size): -1 when the queue could not take it
        (queue_full: the publisher is refused), 1 when send() would queue
        it rather than write it now, else 0. One call per session and
        message; no allocation (but the ring's, once)."""
        lim = self.lim
        n = len(self.q) - self.qh  # two items per message
        mb = lim.max_queued_bytes
        if (n >> 1 >= lim.max_queued or (mb and self.qb + size + ENTRY_COST > mb)) and \
                self.queue_full(size):
            return -1
        c = self.client
        if c is None or self.unsent or n:
            return 1 if c is not None or qos > 0 or lim.queue_qos0 else 0
        n = self._size(r, qos)
        return 1 if c.conn.tlen + n > lim.tx or (qos > 0 and self._fit(n) < 0) else 0

    def admit_send(self, r, qos, size):
        """What the router does with the QoS 1/2 message of route r, not
        retained, when this session is the only one it goes to (at `qos`,
        costing `size` bytes, msg_size): admit(), then send() or, when it
        waits, the broker's mem_budget and enqueue(), in one call (fan-in
        routes every message here). Returns 1 when the queue could not take
        it (queue_full), 2 when holding it would pass mem_budget: refused,
        nothing done; else 0."""
        lim = self.lim
        q = self.q
        nq = len(q) - self.qh  # two items per message
        mb = lim.max_queued_bytes
        need = size + ENTRY_COST
        some = False  # (admit's) no room without dropping queued QoS 0 messages
        if nq >> 1 >= lim.max_queued or (mb and self.qb + need > mb):
            if self.queue_full(size):
                return 1
            some = True
        first = 0x30 | (qos << 1)
        c = self.client
        if c is not None and not self.unsent and not nq:
            n = self._size(r, qos)
            if c.conn.tlen + n <= lim.tx and self._fit(n) >= 0:
                self.send(r, qos, 0)  # written now
                return 0
        st = self.stats
        if st.over(need):
            return 2
        m = r.msg
        if some or m is not None or r.prs is not None or self.fs is not None or \
                self.level == 5 or self.maxpkt:
            self.enqueue(first, r)
            return 0
        # enqueue()'s steps for a level-4 session without a store: nothing
        # to drop (above), the message new
        rl = r.tn + r.pn + 4
        if rl + (2 if rl < 128 else 3 if rl < 16384 else 4 if rl < 2097152 else 5) > \
                lim.max_frame:
            st.dropped += 1
            return 0
        if r.frame is not None and r.flevel < 5:
            # its frame as it came (QoS 1 and 2 frames differ only in
            # their first byte): pump() writes it with one copy
            m = r.msg = Framed(bytes(r.frame[r.foff:r.foff + r.flen]), r.fpid, size)
        else:
            m = r.msg = Msg(bytes(r.tsrc[r.toff:r.toff + r.tn]),
                            bytes(r.psrc[r.poff:r.poff + r.pn]))
        pid = self.npid + 1  # (_pid, inline)
        if pid > 65535:
            pid = 1
        self.npid = pid
        if q is _NONE:
            q = self.q = []
        q.append(m)
        q.append(first | pid << 8)
        m.refs = 1
        c = ENTRY_COST + m.size
        st.qbytes += c  # its bytes, once for every queue
        self.qb += c
        return 0

    def _msize(self, m, qos):
        # bytes of m's PUBLISH for this session
        m = plain(m)
        return publish_size(len(m.t), len(m.p), qos,
                            -1 if self.level < 5 else (len(m.pr) if m.pr is not None else 0))

    def _put_msg(self, dst, off, first, pid, m, up, ak=0):
        # m's PUBLISH for this session at dst[off]; its message expiry
        # interval is what is left at uptime up (up 0: the uptime it ends,
        # what the store keeps); ak: the topic alias that stands for its
        # topic (_msg_alias), 0: none; returns the end offset
        m = plain(m)
        prn = -1 if self.level < 5 else (len(m.pr) if m.pr is not None else 0)
        pn = len(m.p)
        end = put_publish(dst, off, first, m.t, 0, 0 if ak else len(m.t), pid, m.p, 0, pn, m.pr, 0,
                          prn, ak)
        if m.exp >= 0 and prn > 0:
            _put_u32(dst, end - pn - prn + m.xk, m.exp - up)  # (-1: as it came, END_UP)
        return end

    def enqueue(self, first, r):
        # Bounded by max_queued messages and max_queued_bytes: the oldest
        # queued QoS 0 messages make room; with none to drop, a QoS 0
        # message is dropped (a QoS 1/2 one was refused before routing,
        # queue_full). The broker's mem_budget is checked here for QoS 0
        # (dropped) and before routing for QoS 1/2 (Core). The message is
        # held once (r.msg, shared by every session that queues it). A QoS
        # 1/2 message gets its packet id here, so that the record a
        # persistent session keeps of it is the frame that will be sent.
        lim = self.lim
        st = self.stats
        qos = (first >> 1) & 3
        # its frame's size (_size, inline: a subscriber that lags behind
        # queues every message)
        prn = 0
        rl = r.tn + r.pn + (4 if qos else 2)
        if r.prs is not None:
            prn = r.prn
            if self.level == 5:
                rl += prn + (1 if prn < 128 else 2 if prn < 16384 else 3)
        size = rl + (2 if rl < 128 else 3 if rl < 16384 else 4 if rl < 2097152 else 5)
        if size > lim.max_frame or (self.maxpkt and size > self.maxpkt and
                                    not (self.client is not None and self._alias_fits(r, qos))):
            # never more than the client takes, unless its form with a
            # topic alias fits (pump() checks again) [MQTT-3.1.2-25]
            st.dropped += 1
            return
        m = r.msg
        need = (r.tn + r.pn + prn + MSG_COST if m is None else m.size) + ENTRY_COST  # (msg_size)
        mb = lim.max_queued_bytes
        while True:
            full = (len(self.q) - self.qh) >> 1 >= lim.max_queued  # (queued())
            if not full and not (mb and self.qb + need > mb):
                break
            i = self._qos0_at()
            if i < 0:
                if full or not qos:
                    st.dropped += 1  # (QoS 1/2: from the broker itself, a will)
                    st.dropped_q += 1
                    return
                # a routed QoS 1/2 message is never lost for its bytes
                # (queue_full counted them; its own subscription
                # identifiers may add a few)
                break
            st.dropped += 1
            st.dropped_q += 1
            self._take(i)
        if not qos and st.over(need if m is None or not m.refs else ENTRY_COST):
            st.dropped += 1  # the broker's memory budget is spent
            st.dropped_mem += 1
            return
        if m is None:
            if r.prs is None:  # (new_msg, inline: no properties)
                m = Msg(bytes(r.tsrc[r.toff:r.toff + r.tn]), bytes(r.psrc[r.poff:r.poff + r.pn]))
            else:
                m = new_msg(r, st.up_s)
            r.msg = m
        pid = 0
        if qos:
            pid = self.npid + 1  # (_pid, inline)
            if pid > 65535:
                pid = 1
            self.npid = pid
            if self.fs is not None:
                self.fs.out_msg(pid, r.tag, first, m, self)  # durable before any ack
        # _push(m, first | pid << 8), inline
        q = self.q
        if q is _NONE:
            q = self.q = []
        q.append(m)
        q.append(first | pid << 8)
        m.refs += 1
        c = ENTRY_COST + m.size
        if m.refs == 1:
            st.qbytes += c  # its bytes, once for every queue
        else:
            st.qbytes += ENTRY_COST
        self.qb += c

    def stored_frame(self, first, pid, m):
        """The PUBLISH of queued message m as a persistent session's store
        keeps it (broker_store asks once per message and protocol level)."""
        f = bytearray(self._msize(m, (first >> 1) & 3))
        self._put_msg(f, 0, first, pid, m, 0)
        # type 0: its expiry is an uptime (restore_queued)
        f[0] = stored_first(first, self.level, m.xk >= 0 and self.level == 5)
        return f

    def pump(self):
        """Move what waits (unsent ring slots, then the queue) into the send
        buffer while it has room, in order; each queued message's frame is
        built there."""
        conn = self.client.conn
        stats = self.stats
        if self.unsent:
            ns = len(self.s_st)
            # what a resumed session resends stays within the client's
            # window, which may now be smaller [MQTT-3.3.4-9] [MQTT-4.9.0-2]:
            # the rest waits, in order, for the oldest to be acknowledged
            w = self.rcount if self.rcount < self.rmax else self.rmax
            i = 0
            while i < w and self.unsent:
                k = (self.rhead + i) % ns
                st = self.s_st[k]
                if st == PUB:
                    n = self.s_len[k]
                    if conn.space() < n and not grow_tx(conn, n, self.lim.tx):
                        return
                    copy(conn.tx, conn.tlen, self.rbuf, self.s_off[k], n)
                    conn.tlen += n
                    self.s_st[k] = PUB_SENT
                    self.unsent -= 1
                    stats.sent += 1
                    stats.pub_out += frame_payload(self.rbuf, self.s_off[k], n, self.level == 5)
                elif st == REL:
                    if conn.space() < 4:
                        return
                    conn.tlen = encode_ack(conn.tx, conn.tlen, PUBREL, self.s_pid[k])
                    stats.others_out += 1
                    self.s_st[k] = REL_SENT
                    self.unsent -= 1
                i += 1
        # The frames of QoS 1/2 messages are built in the ring; those that
        # lie end to end there, ring[rs:re], are copied into the send
        # buffer in one go, before anything else is written to it and when
        # the loop ends; tl: where the send buffer ends once they are.
        q = self.q
        tx = conn.tx
        up = stats.up_s
        lev5 = self.level == 5
        maxpkt = self.maxpkt
        rs = re = 0
        tl = conn.tlen
        # the next slot while the newest's bytes end at te with room after
        # them (_alloc's usual case, kept in locals from one message to the
        # next; ak -1: ask _alloc)
        ak = -1
        te = lo = ho = rsz = ns = wmax = 0
        offs = lens = pids = self.s_off
        sts = self.s_st
        sh = self.s_sh
        se = self.s_exp
        rb = self.rbuf
        sent = 0  # QoS 1/2 frames built (stats.sent, once at the end)
        pb = 0  # their payloads' bytes (stats.pub_out, with it)
        al = 0  # the topic alias of a message over maxpkt whose aliased form fits
        while self.qh < len(q):
            h = self.qh
            m = q[h]
            v = q[h + 1]
            first = v & 127  # (bit 7: _QSH)
            pid = v >> 8
            if m is None:
                # PUBREL only: a slot that holds no bytes but the id
                if re > rs:
                    copy(tx, conn.tlen, self.rbuf, rs, re - rs)
                    conn.tlen = tl
                    rs = re = 0
                ak = -1
                k = self._alloc(0)
                if k < 0:
                    break
                self.s_pid[k] = pid
                self._take(h)
                self.s_st[k] = REL
                self.unsent += 1
                if conn.space() < 4:
                    break
                conn.tlen = tl = encode_ack(tx, conn.tlen, PUBREL, pid)
                self.stats.others_out += 1
                self.s_st[k] = REL_SENT
                self.unsent -= 1
                continue
            pk = m.pk
            if pk and lev5:
                q[h] = m = plain(m)  # (a session that came back at level 5)
                pk = 0
            if lev5 and 0 <= m.exp <= up:
                self._take(h)  # expired while it waited [MQTT-3.3.2-5 (5.0)]
                stats.dropped += 1
                if first & 6 and self.fs is not None:
                    self.fs.out_del(pid)
                continue
            if pk:
                n = len(m.f)  # (admit_send checked it against max_frame)
            else:
                # its size (_msize, inline: this loop is a drain's every message)
                t = m.t
                tn = len(t)
                pr = m.pr
                prn = 0
                rl = tn + len(m.p) + (4 if first & 6 else 2)
                if lev5:
                    if pr is not None:
                        prn = len(pr)
                    rl += prn + (1 if prn < 128 else 2 if prn < 16384 else 3)
                n = rl + (2 if rl < 128 else 3 if rl < 16384 else 4 if rl < 2097152 else 5)
                if (maxpkt and n > maxpkt) or (first & 6 and n > self.lim.max_frame):
                    if not (first & 6 and n > self.lim.max_frame):
                        al = self._msg_alias(m, (first >> 1) & 3)  # (as send()'s)
                    if not al:
                        self._take(h)  # [MQTT-3.1.2-25]
                        stats.dropped += 1
                        if first & 6 and self.fs is not None:
                            self.fs.out_del(pid)
                        continue
                    if re > rs:
                        # those before it go first: it is written on its own
                        copy(tx, conn.tlen, self.rbuf, rs, re - rs)
                        conn.tlen = tl
                        rs = re = 0
            if len(tx) - tl < n:
                if re > rs:
                    copy(tx, conn.tlen, self.rbuf, rs, re - rs)
                    conn.tlen = tl
                    rs = re = 0
                if not grow_tx(conn, n, self.lim.tx):
                    break
                tx = conn.tx
            if not first & 6:
                if re > rs:
                    copy(tx, conn.tlen, self.rbuf, rs, re - rs)
                    conn.tlen = tl
                    rs = re = 0
                conn.tlen = tl = self._put_msg(tx, tl, first, 0, m, up, al)
                al = 0
                stats.sent += 1
                stats.pub_out += len(m.f) - m.pk - 2 if m.pk else len(m.p)
                self._take(h)
                continue
            cnt = self.rcount
            if ak >= 0 and cnt < wmax and ((rsz - te >= n) if lo >= ho else (ho - te >= n)):
                k = ak
                o = offs[k] = te
                lens[k] = n
                self.rcount = cnt + 1
            else:
                k = self._alloc(n)
                if k < 0:
                    break
                offs = self.s_off
                lens = self.s_len
                pids = self.s_pid
                sts = self.s_st
                rb = self.rbuf
                ns = len(offs)
                wmax = ns if ns < self.rmax else self.rmax
                rsz = len(rb)
                ho = offs[self.rhead]
                o = offs[k]
                sh = self.s_sh
                se = self.s_exp
            lo = o
            te = o + n
            ak = k + 1 if k + 1 < ns else 0
            # its id came with it from enqueue, and so did its record
            pids[k] = pid
            if sh is not None:
                sh[k] = v >> 7 & 1  # (_QSH) whether a shared group's turn gave it
            if se is not None or (lev5 and m.exp >= 0):
                se = self._deadline(k, m.exp if lev5 else -1)  # (its frame says what is left)
            if o != re:
                if re > rs:
                    copy(tx, conn.tlen, rb, rs, re - rs)
                    conn.tlen = tl
                rs = o
            re = o + n
            tl += n
            if pk:
                # its frame as it came, its first byte and packet id this session's
                if MICROPYTHON:
                    copy(rb, o, m.f, 0, n)
                else:
                    rb[o:re] = m.f
                rb[o] = first
                rb[o + pk] = pid >> 8
                rb[o + pk + 1] = pid & 255
                pb += n - pk - 2  # the payload: the rest of the frame
            else:
                # the frame into the ring (_put_msg, inline)
                rb[o] = first
                if rl < 128:
                    rb[o + 1] = rl
                    i = o + 2
                else:
                    i = put_varint(rb, o + 1, rl)
                rb[i] = tn >> 8
                rb[i + 1] = tn & 255
                i += 2
                # (CPython: a slice, sized above, costs less than copy's call)
                if MICROPYTHON:
                    copy(rb, i, t, 0, tn)
                else:
                    rb[i:i + tn] = t
                i += tn
                rb[i] = pid >> 8
                rb[i + 1] = pid & 255
                i += 2
                if lev5:
                    if prn < 128:
                        rb[i] = prn
                        i += 1
                    else:
                        i = put_varint(rb, i, prn)
                    if prn:
                        copy(rb, i, pr, 0, prn)
                        if m.exp >= 0:
                            _put_u32(rb, i + m.xk, m.exp - up)  # what is left of its interval
                        i += prn
                if MICROPYTHON:
                    copy(rb, i, m.p, 0, re - i)
                else:
                    rb[i:re] = m.p
                pb += re - i
                if al:
                    # the ring keeps the whole frame (as send()'s); the wire
                    # gets the one with the alias, written on its own
                    conn.tlen = tl = self._put_msg(tx, conn.tlen, first, pid, m, up, al)
                    rs = re = al = 0
            sts[k] = PUB_SENT
            sent += 1
            # _take(h), inline for the head (the list is cut after the loop)
            q[h] = None
            c = ENTRY_COST + m.size
            m.refs -= 1
            if not m.refs:
                stats.qbytes -= c
            else:
                stats.qbytes -= ENTRY_COST
            self.qb -= c
            self.qh = h + 2
        stats.sent += sent
        stats.pub_out += pb
        h = self.qh
        if h == len(q):
            if h:
                del q[:]
                self.qh = 0
                if self.dropping:
                    self.dropping = False  # drained: the next drop is logged again
        elif h >= 64 and h + h >= len(q):
            del q[:h]
            self.qh = 0
        if re > rs:
            copy(tx, conn.tlen, self.rbuf, rs, re - rs)
            conn.tlen = tl

    def backlog(self):
        return self.unsent or self.queued()

    # ------------------------------------------------------------ shared groups
    def mark_shared(self, pid):
        """The QoS 1/2 copy just sent or queued with packet id pid came by
        a shared group's turn: marked so, in its queue entry (_QSH) or its
        ring slot (s_sh, made now if need be). Only for those copies: a
        session that never gets one pays nothing."""
        q = self.q
        if len(q) > self.qh and q[-2] is not None and q[-1] >> 8 == pid:
            q[-1] |= _QSH
            return
        k = self._find(pid)
        if k >= 0:
            if self.s_sh is None:
                self.s_sh = bytearray(len(self.s_st))
            self.s_sh[k] = 1

    def shared_held(self):
        """The session ends: the copies a shared group's turn gave it that
        go to another member of the group, oldest first, each as (Msg,
        first byte): QoS 1 ones its client did not acknowledge, in flight
        or queued (4.8.2 (5.0): the Server SHOULD send them to another
        Client of the group), and QoS 2 ones still queued, never sent. A
        QoS 2 copy in flight stays: its delivery was begun with this
        client, so no other gets it [MQTT-4.8.2-4, MQTT-4.8.2-5]. Their
        marks go, so each is handed on once. (Allocates: the rare end of
        a shared member.)"""
        out = []
        sh = self.s_sh
        if sh is not None and self.rcount:
            ns = len(self.s_st)
            up = self.stats.up_s
            i = 0
            while i < self.rcount:
                k = (self.rhead + i) % ns
                st = self.s_st[k]
                if sh[k] and (st == PUB or st == PUB_SENT) and \
                        self.rbuf[self.s_off[k]] & 6 == 2:
                    o = self.s_off[k]
                    f = self.rbuf[o:o + self.s_len[k]]
                    m = frame_msg(f, self.level, up)
                    if self.s_exp is not None and self.s_exp[k] >= 0:
                        m.exp = self.s_exp[k]  # (its frame says what was left when sent)
                    out.append((m, f[0] & 0x37))
                sh[k] = 0
                i += 1
        q = self.q
        i = self.qh
        while i < len(q):
            v = q[i + 1]
            if v & _QSH:
                q[i + 1] = v & ~_QSH
                m = q[i]
                if m is not None and v & 6:
                    out.append((plain(m), v & 0x37))
            i += 2
        return out

    # ------------------------------------------------------------ in-flight ring
    def _window(self, v):
        # The most QoS 1/2 messages in flight to a client: max_inflight at
        # MQTT 3.1.1; at MQTT 5 its Receive Maximum [MQTT-3.3.4-9] (65535
        # when absent, 3.2.2.3.3 of CONNECT), at most max_inflight_v5 (4.9:
        # a sender may keep fewer in flight than the receiver allows).
        # v: the connection's broker5.V5, None at MQTT 3.1.1.
        lim = self.lim
        if v is None:
            return lim.max_inflight
        return v.rmax if v.rmax < lim.max_inflight_v5 else lim.max_inflight_v5

    def _ring(self):
        # the bytes start at most RING_START and grow on demand (_grow);
        # one slot per message the client's window takes (a session
        # restored before its client attaches: the level's largest)
        lim = self.lim
        if self.level != 5:
            ns = lim.max_inflight
        else:
            ns = self.rmax if self.rmax < lim.max_inflight_v5 else lim.max_inflight_v5
        self.rbuf = bytearray(lim.ring if lim.ring < RING_START else RING_START)
        self._slots(ns)

    def _slots(self, ns):
        # ns slots; the live ones of the slots before keep their order,
        # moved to the front
        pids = [0] * ns
        offs = [0] * ns
        lens = [0] * ns
        sts = bytearray(ns)
        sh = self.s_sh
        if sh is not None:
            self.s_sh = bytearray(ns)
        se = self.s_exp
        if se is not None:
            self.s_exp = [-1] * ns
        if self.s_st is not None:
            n = len(self.s_st)
            i = 0
            while i < self.rcount:
                k = (self.rhead + i) % n
                pids[i] = self.s_pid[k]
                offs[i] = self.s_off[k]
                lens[i] = self.s_len[k]
                sts[i] = self.s_st[k]
                if sh is not None:
                    self.s_sh[i] = sh[k]
                if se is not None:
                    self.s_exp[i] = se[k]
                i += 1
            self.rhead = 0
        self.s_pid = pids
        self.s_off = offs
        self.s_len = lens
        self.s_st = sts

    def _fit(self, n):
        """Where n contiguous ring bytes in a free slot start, or -1."""
        if self.rbuf is None:
            self._ring()
        ns = len(self.s_st)
        cnt = self.rcount
        if cnt >= ns or cnt >= self.rmax:  # the client's window (_window) [MQTT-3.3.4-9]
            return -1
        size = len(self.rbuf)
        if not cnt:
            return 0 if n <= size or self._grow(0, n) else -1
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
                elif self._grow(t, n):
                    off = t
                else:
                    return -1
            elif h - t >= n:  # wrapped: live bytes in [h, size) and [0, t)
                off = t
            else:
                return -1
        return off

    def _grow(self, t, n):
        # a larger ring, up to Limits.ring, with n bytes free past t, where
        # the live bytes end (not wrapped); False when it cannot be
        size = len(self.rbuf)
        cap = self.lim.ring
        if t + n > cap:
            return False
        while size < t + n:
            size += size
        b = bytearray(size if size < cap else cap)
        copy(b, 0, self.rbuf, 0, t)
        self.rbuf = b
        return True

    def _alloc(self, n):
        """A free slot with n contiguous ring bytes, or -1."""
        cnt = self.rcount
        if cnt:
            # the usual case first (_fit's, inline): room after the newest
            # slot, the live bytes not wrapped
            sts = self.s_st
            ns = len(sts)
            if cnt < ns and cnt < self.rmax:
                h = self.rhead
                last = (h + cnt - 1) % ns
                offs = self.s_off
                lo = offs[last]
                t = lo + self.s_len[last]
                ho = offs[h]
                # not wrapped, room up to the end; or wrapped (live bytes
                # in [ho, size) and [0, t)), room up to the oldest's bytes
                if (len(self.rbuf) - t >= n) if lo >= ho else (ho - t >= n):
                    k = (h + cnt) % ns
                    self.rcount = cnt + 1
                    offs[k] = t
                    self.s_len[k] = n
                    return k
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
    # The outbound half of the store interface (store.py): the core answers
    # PUBACK, PUBREC and PUBCOMP through ack_out(), with umqtt3.flow's rules
    # written in, and send() stores before it queues. A persistent
    # session writes each step to its FileStore (self.fs) before the RAM
    # state changes, so what is on disk is never behind what was sent.
    def out_add(self, pid, key, buf, off, n):
        k = self._alloc(n)
        if k < 0:
            raise MQTTError("in-flight ring full", 0x97)  # deliver() checked
        self._out_at(k, pid, key, buf, off, n)

    def _out_at(self, k, pid, key, buf, off, n):
        # out_add's, in slot k that _alloc(n) just took: given back when
        # the store fails
        if self.fs is not None:
            b0 = buf[off]
            buf[off] = stored_first(b0, self.level)  # its level, on disk
            try:
                self.fs.out_add(pid, key, buf, off, n)
            except BaseException:
                self.rcount -= 1  # (the newest slot, its state still FREE)
                raise
            finally:
                buf[off] = b0
        self.s_pid[k] = pid
        copy(self.rbuf, self.s_off[k], buf, off, n)
        self.s_st[k] = PUB_SENT
        if self.s_sh is not None:
            self.s_sh[k] = 0  # (mark_shared sets it for a shared group's copy)
        if self.s_exp is not None:
            self.s_exp[k] = -1  # (send() sets it for a message that expires)

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

    def ack_out(self, conn, t, pid, rc=0):
        """A PUBACK (4), PUBREC (5) or PUBCOMP (7) for pid from the client
        (rc: its reason code): False, nothing changed, when it does not fit
        the flow of that id (ack_fits); else what Flow.on_ack does with it
        (out_rel, out_del), in one look at the ring: a PUBREC is recorded
        and its PUBREL written to conn now, or by pump() behind older
        messages [MQTT-4.3.3-1]; a PUBACK, a PUBCOMP or a refusing v5
        PUBREC ends the flow [MQTT-4.3.2-1]."""
        k = self._find(pid)
        if k < 0:
            return False
        sts = self.s_st
        st = sts[k]
        if st == REL or st == REL_SENT:
            if t == 4:
                return False  # PUBCOMP; a PUBREC again is answered with PUBREL again
        elif t == 7 or (self.rbuf[self.s_off[k]] >> 1) & 3 != (1 if t == 4 else 2):
            return False  # PUBCOMP before PUBREL, or not the message's QoS
        fs = self.fs
        if t == 5 and rc < 0x80:
            # (out_rel)
            if st == REL:
                return True  # its PUBREL is already waiting
            if st <= PUB_SENT:
                if fs is not None:
                    fs.out_rel(pid)  # durable before PUBREL [MQTT-4.3.3-1]
                if st == PUB:
                    self.unsent -= 1
            if self.unsent:
                sts[k] = REL  # pump() writes it after the older ones
                self.unsent += 1
                return True
            sts[k] = REL_SENT
            put_ack(conn, 0x62, pid)
            self.stats.others_out += 1
            return True
        # (out_del)
        if fs is not None:
            fs.out_del(pid)
        if st == PUB or st == REL:
            self.unsent -= 1
        self._free(k)
        return True

    def out_has(self, pid):
        return self._find(pid) >= 0

    def pubacks(self, buf, off, end):
        """The PUBACKs that are only their packet id (40 02, the id), one
        after the other from buf[off] on: each ends the flow of its id
        [MQTT-4.3.2-1] as ack_fits and out_del would, in one look at the
        ring (a drain's acknowledgements come in runs: Core.pubacks).
        Returns where they end: at the first other packet, or at a PUBACK
        that does not fit the flow of its id, which is left as it was."""
        sts = self.s_st
        if sts is None:
            return off
        pids = self.s_pid
        offs = self.s_off
        rb = self.rbuf
        ns = len(sts)
        fs = self.fs
        h = self.rhead  # (kept equal to self.rhead and self.rcount)
        cnt = self.rcount
        while off + 4 <= end and buf[off] == 0x40 and buf[off + 1] == 2:
            pid = (buf[off + 2] << 8) | buf[off + 3]
            if cnt and pids[h] == pid and sts[h]:
                k = h  # the oldest: acknowledgements come in order
            else:
                d = (pid - pids[h]) % 65535  # (_find's first look)
                k = (h + d) % ns
                if not (d < cnt and pids[k] == pid and sts[k]):
                    k = self._find(pid)
                    if k < 0:
                        return off
            st = sts[k]
            if st >= REL or (rb[offs[k]] >> 1) & 3 != 1:
                return off  # not QoS 1, or its PUBREL went
            if fs is not None:
                fs.out_del(pid)
            if st == PUB:
                self.unsent -= 1
            sts[k] = FREE
            if k == h:  # (_free)
                h = h + 1 if h + 1 < ns else 0
                cnt -= 1
                while cnt and not sts[h]:
                    h = h + 1 if h + 1 < ns else 0
                    cnt -= 1
                self.rhead = h
                self.rcount = cnt
            off += 4
        return off

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
        acknowledged is due again, PUBLISH with DUP=1 [MQTT-4.4.0-1], built
        for the level it connects at (_relevel), with what is left of its
        message expiry interval [MQTT-3.3.2-6] (_aged), even once it has
        passed [MQTT-4.3.3-7] (5.0); one now over the client's maximum
        packet size is not sent again, dropped as if it had been
        acknowledged [MQTT-3.1.2-25]."""
        self.client = client
        if self.exp_at >= 0:
            self.exp_at = -1
        v = client.v5
        win = 0
        old = self.level
        if v is not None or self.level == 5:
            self.level = 4 if v is None else 5
            self.maxpkt = 0 if v is None else v.maxpkt
            self.rmax = win = self._window(v)
            # the broker's topic aliases start afresh with each connection [MQTT-3.3.2-7]
            tam = 0 if v is None else v.tam
            lim = self.lim.max_aliases
            if tam or self.tam:  # (a session that never had any holds no slots)
                self.tam = tam if tam < lim else lim
                self.oal = [] if self.tam else None
        if self.rbuf is None:
            return
        if len(self.s_st) < win:
            self._slots(win)  # a larger window than the ring was made for
        if self.s_exp is not None:
            self._aged()
        if self.level != old and self.rcount:
            self._relevel(old)
        ns = len(self.s_st)
        mp = self.maxpkt
        self.unsent = 0
        i = 0
        while i < self.rcount:
            k = (self.rhead + i) % ns
            st = self.s_st[k]
            if (st == PUB_SENT or st == PUB) and mp and self.s_len[k] > mp:
                self._gone(k)  # (its aliased form fitted the last connection)
                st = FREE
            elif st == PUB_SENT:
                self.rbuf[self.s_off[k]] |= 8
                st = PUB
            elif st == REL_SENT:
                st = REL
            if st:
                self.s_st[k] = st
                self.unsent += 1
            i += 1
        if self.rcount and not self.s_st[self.rhead]:
            self._free(self.rhead)

    def _gone(self, k):
        # slot k's PUBLISH is not sent again: as if acknowledged (its id
        # free), counted in dropped; the caller frees the slot (FREE)
        self.stats.dropped += 1
        if self.fs is not None:
            self.fs.out_del(self.s_pid[k])
        self.s_st[k] = FREE

    def _aged(self):
        # attach: each PUBLISH in flight that has a message expiry interval
        # gets what is left of it written into its frame [MQTT-3.3.2-6]
        # (5.0), 0 once it has passed. It is sent again all the same: every
        # frame in the ring was written to a connection (or came back from
        # the store), its onward delivery started, so expiry no longer
        # applies [MQTT-3.3.2-5] [MQTT-4.3.3-7] (5.0) and it is resent
        # [MQTT-4.4.0-1] (mosquitto drops it). Frames of level 5 only have
        # one (s_exp). No allocation.
        se = self.s_exp
        up = self.stats.up_s
        ns = len(self.s_st)
        i = 0
        while i < self.rcount:
            k = (self.rhead + i) % ns
            x = se[k]
            st = self.s_st[k]
            if x >= 0 and (st == PUB or st == PUB_SENT):
                _put_u32(self.rbuf, _expiry_at(self.rbuf, self.s_off[k]), x - up if x > up else 0)
            i += 1

    def _relevel(self, old):
        # The client came back at another protocol level than the ring's
        # frames were built for (old): each PUBLISH in flight is built
        # again for this one, as a first send would build it: its
        # properties dropped below 5 [MQTT-3.3.2-*], going to 5 the ones it
        # has (none, from a 3.1.1 frame: an empty list), never a topic alias
        # [MQTT-3.3.2-7]; dropped, as sent [MQTT-3.1.2-25], when it is now
        # over the client's maximum packet size (never for its expiry: it
        # was sent [MQTT-4.3.3-7] (5.0), _aged). Packet ids, order and QoS 2 state stay: a PUBREL due is
        # due at either level (it holds no bytes). The ring is built anew,
        # oldest first; it may pass Limits.ring by the few bytes per frame
        # an empty property list adds. Only here (attach): it allocates.
        ns = len(self.s_st)
        up = self.stats.up_s
        msgs = []
        total = 0
        i = 0
        while i < self.rcount:
            k = (self.rhead + i) % ns
            st = self.s_st[k]
            m = None
            n = 0
            if st == PUB or st == PUB_SENT:
                o = self.s_off[k]
                m = frame_msg(self.rbuf[o:o + self.s_len[k]], old, up)
                n = self._msize(m, (self.rbuf[o] >> 1) & 3)
                if self.maxpkt and n > self.maxpkt:
                    self.stats.dropped += 1
                    if self.fs is not None:
                        self.fs.out_del(self.s_pid[k])
                    st = FREE
            if st:
                msgs.append((self.s_pid[k], st, self.rbuf[self.s_off[k]] if m else 0, m, n,
                             self.s_sh[k] if self.s_sh is not None else 0))
                total += n
            i += 1
        size = len(self.rbuf)
        b = bytearray(total if total > size else size)
        pids = [0] * ns
        offs = [0] * ns
        lens = [0] * ns
        sts = bytearray(ns)
        sh = None if self.s_sh is None else bytearray(ns)
        se = None  # (s_exp: built for the frames that have an expiry)
        o = 0
        i = 0
        for pid, st, first, m, n, shd in msgs:
            pids[i] = pid
            sts[i] = st
            if sh is not None:
                sh[i] = shd
            if self.level == 5 and m is not None and m.exp >= 0:
                if se is None:
                    se = [-1] * ns
                se[i] = m.exp
            offs[i] = o
            lens[i] = n
            if m is not None:
                o = self._put_msg(b, o, first, pid, m, up)
            i += 1
        self.rbuf = b
        self.s_pid = pids
        self.s_off = offs
        self.s_len = lens
        self.s_st = sts
        self.s_sh = sh
        self.s_exp = se
        self.rhead = 0
        self.rcount = i

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

    # The inbound QoS 2 ids: Core.publish2 holds them by the rules of
    # Flow.on_publish, the client's exactly-once machine, Core._ack lets
    # them go at PUBREL. A
    # persistent session keeps each held id in a record i<pid>.u tagged with
    # a number unique in the broker (Disk.tag, kept in self.tag); every copy routed to a
    # persistent subscriber carries that tag, and the record becomes .d once
    # routing is over, before PUBREC. A .u found at start-up is a routing a
    # crash cut short: broker_store removes the copies with its tag and the
    # record, and the publisher, which got no PUBREC, sends it again.
    in_has = ipid_has

    def in_add(self, pid, buf=None, off=0, n=0):
        # ipid_add's steps, without its call (one per QoS 2 message). The
        # store contract's signature (store.py); a session holds the id
        # alone, so Core.publish2 passes nothing else
        ids = self.ipids
        if ids is None:
            ids = self.ipids = [0] * self.lim.max_qos2_in
        n = self.nipids
        if n >= len(ids):
            raise MQTTError("too many QoS 2 messages in flight", 0x93)  # [MQTT-3.3.4-7]
        if self.fs is not None:
            t = self.new_tag()
            self.fs.in_add(pid, b"", 0, 0, t)  # the id and its tag
            self.tag = t
        ids[n] = pid
        self.nipids = n + 1

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
        attaches); st is its record state (qos_state.STORED_*). A frame
        built for another level than the session's is built again for it."""
        lev = self.stored_level(frame[0])
        first = 0x30 | (frame[0] & 15)
        n = len(frame)
        m = None
        if lev != self.level:
            m = frame_msg(frame, lev, self.stats.up_s)
            n = self._msize(m, (first >> 1) & 3)
        k = self._alloc(n)
        if k < 0:
            return False
        self.s_pid[k] = pid
        o = self.s_off[k]
        if m is None:
            copy(self.rbuf, o, frame, 0, n)
            self.rbuf[o] = first
        else:
            self._put_msg(self.rbuf, o, first, pid, m, self.stats.up_s)
        self.s_st[k] = from_stored(st)  # attach() resends
        # what was left of its message expiry interval when it was sent
        # counts from now, as for a queued message restored (frame_msg):
        # the new run's time counts, the time down is not known
        # [MQTT-3.3.2-5] [MQTT-3.3.2-6] (5.0)
        x = -1
        if self.level == 5 and first & 6:
            if m is not None:
                x = m.exp
            else:
                i = _expiry_at(self.rbuf, o)
                if i >= 0:
                    x = _ends(self.rbuf, i, self.stats.up_s)
        if x >= 0 or self.s_exp is not None:
            self._deadline(k, x)
        self.npid = pid  # slots come back oldest first: the last is the newest
        return True

    def stored_level(self, first):
        """The protocol level a stored frame whose first byte is `first` was
        built for (stored_first); type 3, from before records said it: the
        level of the session's record, which keeps saying it (lv3)."""
        t = first >> 4
        if t == 3:
            if not self.lv3:
                self.lv3 = self.level
            return self.lv3
        return 4 if t == 1 else 5

    def restore_queued(self, rel, pid, frame, m=None):
        """A stored message that found no room in the ring (the limits are
        lower than when it was written): it waits in the queue, in order;
        rel: its PUBREC came, so PUBREL is what goes out (pump). m: the Msg
        of frame when another session restored it already (the store keeps
        a message once); returns the Msg queued."""
        if rel:
            self._push(None, _QREL | pid << 8)
        else:
            first = 0x30 | (frame[0] & 15)
            if m is None:
                m = frame_msg(frame, self.stored_level(frame[0]), self.stats.up_s)
            self._push(m, first | pid << 8)
        self.npid = pid
        return m


class Sessions:
    """Every session by client id, clean ones while connected and the
    persistent ones for good (bounded by max_sessions)."""

    def __init__(self):
        self.by_id = {}  # client id -> Session
        self.all = []  # the same, for iteration
        self.npersist = 0

    def add(self, s):
        self.by_id[s.cid] = s
        self.all.append(s)
        if not s.clean:
            self.npersist += 1

    def remove(self, s):
        if self.by_id.get(s.cid) is s:  # (a stale twin at start-up is not indexed)
            del self.by_id[s.cid]
        self.all.remove(s)
        s.clear()
        if not s.clean:
            self.npersist -= 1

    def make_clean(self, s):
        """s now ends with its connection (a resume with expiry 0): it
        stops counting against max_sessions, its queue stays."""
        if not s.clean:
            s.clean = True
            self.npersist -= 1

    def new_id(self):
        """A client id no session has [MQTT-3.1.3-6], and none a client
        would name by chance: a random 64-bit suffix, as mosquitto's
        auto-<uuid>. (A count, umqtt3-1, umqtt3-2, is how a fleet may name
        itself too, and a 3.1.1 client is never told its id: a namesake
        took its connection over.)"""
        from random import getrandbits
        while True:
            cid = ("auto-%08x%08x" % (getrandbits(32), getrandbits(32))).encode()
            if cid not in self.by_id:
                return cid
