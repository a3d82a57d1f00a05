# umqtt3.broker_core -- the broker without I/O: packets and the time in, bytes out.
#
#     core = Core(Limits())
#     c = core.open(Conn(None, lim.max_packet, lim.tx), "peer", now)
#     core.packet(c, n, now)        # the whole packet c.conn.rx[0:n]
#     core.packet_at(c, buf, off, n, now)   # or one where it lies
#     core.wants_send(c); core.refill(c)    # c.conn.tx holds what to send
#     c.state == CLOSED             # the driver closes it, then forget(c)
#     deadline = core.tick(now)     # timers; when to call tick() again
#
# broker_bytes.feed(core, c, data, now) and take(core, c) are the same as
# plain bytes in and bytes out (the tests, and CPython's driver, which
# reads a socket in gulps, use them).
#
# A connection is its buffers (a transport.Conn: rx holds the packet being
# read, tx what is due) and its state (Connection). The core decodes each
# whole packet into one shared codec.Packet and answers by encoding into
# the connection's tx; routing writes into the subscribers' tx, or queues
# when there is no room. It never reads a clock, a socket or a poller: the
# time comes with each call, and a driver (broker.py) reads, writes, flushes
# and closes. The driver asks wants_send(c) for what to flush, refill(c)
# as tx drains, and closes each connection whose state is CLOSED.
#
# Concerns live apart: broker_subs (who gets a topic), broker_retain
# (retained messages), broker_session (sessions, their in-flight ring and
# queue, their QoS machine, the registry), broker_store (the disk),
# broker_limits (every limit), broker5 (what only MQTT 5 has, imported on
# the first level-5 CONNECT: a broker serving 3.1.1 only never loads it).
from .codec import (Packet, decode, MQTTError, encode_simple, encode_ack, BAD_PROTOCOL_VERSION,
                    CONNECT, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP, SUBSCRIBE, UNSUBSCRIBE,
                    PINGREQ, PINGRESP, DISCONNECT, AUTH)
from .codec_server import encode_connack, encode_suback, encode_unsuback, read_filter
from .compat import ticks_add, ticks_diff, const, mem_free, name_levels, topic_ok, TOPIC_MEMO
from .broker_limits import Limits
from .broker_session import (Session, Sessions, Route, msg_size, ENTRY_COST, MSG_COST, grow_tx,
                             put_ack, mark_late, unmark_late)
from .broker_subs import Subs, shared_at, ACL_CHECK
from .broker_retain import Retained, is_sys
from .topic import match_span

VERSION = "umqtt3 0.1.0"

# connection states
WAITING = const(0)  # accepted, no CONNECT yet
CONNECTED = const(1)
CLOSED = const(2)  # the driver closes it and drops it (reap)

# CONNACK return codes (3.1.1 table 3.1)
_BAD_LEVEL = const(1)
_BAD_ID = const(2)
_UNAVAILABLE = const(3)
_BAD_AUTH = const(4)
_NOT_AUTHORIZED = const(5)

TIMER_MS = const(100)  # how often keepalives and connect timeouts are checked
LATE_WILLS = const(4)  # wills put off for want of memory at once (Core.late)

# Core._why: why the last QoS 1/2 PUBLISH was not routed (1: a
# subscriber's queue is full, _refuse_full)
_MEM = const(2)  # the broker's mem_budget is spent
_HELD = const(4)  # a bridge's queue is full, its uplink up: the publisher waits
_RETAINED = const(5)  # a retained message for a new topic past max_retained

# the counts of bytes and packets carry into a count of this many once a
# second: an int stays small on a device (31 bits), where a larger one would
# allocate at each packet counted (a gateway passes 2^30 packets in months)
CARRY = const(0x10000000)

# the counts carry() keeps small, each with its count of CARRY in Stats.hi
_CARRIED = ("bytes_in", "bytes_out", "received", "sent", "others_in", "others_out", "pub_in",
            "pub_out")


class Stats:
    """The figures $SYS publishes; the sessions and the store count here."""

    def __init__(self):
        self.received = 0  # PUBLISH packets received ($SYS publish/messages/received)
        self.sent = 0  # PUBLISH packets sent (publish/messages/sent)
        # their payloads' bytes (publish/bytes/received, publish/bytes/sent)
        self.pub_in = 0
        self.pub_out = 0
        # the other packets (CONNECT, acks, SUBSCRIBE, PINGREQ...): $SYS
        # messages/received and messages/sent count every packet, as mosquitto's
        self.others_in = 0
        self.others_out = 0
        # bytes of every packet received (counted as each is handled) and
        # sent (counted by the driver as they leave): $SYS bytes/*
        self.bytes_in = 0
        self.bytes_out = 0
        self.hi = [0] * len(_CARRIED)  # of CARRY each (carry)
        self.sockets = 0  # connections opened (load/sockets)
        self.connects = 0  # CONNECTs accepted (load/connections)
        self.expired = 0  # sessions ended by their expiry interval (clients/expired)
        self.load = None  # broker_load's averages, from the first $SYS update
        self.peak = 0  # the most clients connected at once (clients/maximum)
        self.dropped = 0
        self.refused = 0
        self.queue_full = 0  # QoS 1/2 PUBLISHes refused: a subscriber's queue was full
        self.refused_mem = 0  # QoS 1/2 PUBLISHes refused: the broker's mem_budget was spent
        self.refused_retained = 0  # QoS 1/2 retained PUBLISHes refused: max_retained topics kept
        self.dropped_mem = 0  # QoS 0 messages not queued (or retained) for that cause
        self.dropped_full = 0  # QoS 1/2 copies a full queue did not take (queue_full "drop")
        self.dropped_q = 0  # and the other messages a full queue did not take (or let go)
        self.qbytes = 0  # what queued messages cost, each held once (broker_session.Msg)
        self.errors = 0  # internal errors (a bug): the connection was closed
        # MemoryErrors the broker went on from (the heap spent): a client
        # closed, a $SYS update skipped, a will put off (Core.broke, tick)
        self.nomem = 0
        self.store_errors = 0  # store writes that failed (nothing was acknowledged)
        self.handed = 0  # copies a shared group's ending member handed on (Core._hand_on)
        self.connected = 0
        self.budget = 0  # broker_limits.mem_budget (0: none)
        self.ret = None  # broker_retain.Retained: its bytes count too

    def carry(self):
        """Keep the counts of bytes and packets small (see CARRY); called
        once a second."""
        hi = self.hi
        for i in range(len(_CARRIED)):
            n = _CARRIED[i]
            v = getattr(self, n)
            if v >= CARRY:
                setattr(self, n, v - CARRY)
                hi[i] += 1

    def total(self, name):
        """The whole count that name (one of _CARRIED) keeps, carried part
        included: an int of any size ($SYS, once a second)."""
        return self.hi[_CARRIED.index(name)] * CARRY + getattr(self, name)

    def bytes_received(self):
        return self.total("bytes_in")

    def bytes_sent(self):
        return self.total("bytes_out")

    def over(self, n):
        """n more bytes held would pass mem_budget: what queued messages
        (each once) and retained ones cost. No allocation."""
        b = self.budget
        if not b:
            return False
        r = self.ret
        return self.qbytes + (r.nbytes if r is not None else 0) + n > b


class QueueFull(Exception):
    """A QoS 1/2 PUBLISH that a matching session's full queue cannot take
    (Session.queue_full), or that the broker's mem_budget cannot: not
    routed, not acknowledged as accepted."""


class Connection:
    """One network connection as the core sees it."""

    v5 = None  # broker5.V5 at MQTT 5 (what the client asked for); a class
    # attribute, so a 3.1.1 connection holds no slot for it
    grants = None  # broker_acl.Grants, when the broker has an ACL
    # a broker's bridge: a 3.1/3.1.1 CONNECT with the level's bridge bit
    # (codec_server.decode_connect); set on the instance for one only
    bridge = False
    # the bridge (bridge.Bridge) whose full queue its PUBLISH waits for, the
    # packet kept unread where it lies (Core.refuse_publish); None: none
    held = None
    hold_no = 0  # the broker's count of holds when this one began (Core.holds)

    def __init__(self, conn, peer, now):
        self.conn = conn  # transport.Conn: the buffers
        self.peer = peer
        self.state = WAITING
        self.why = None  # the reason it was closed
        self.sess = None
        self.level = 4
        self.cid = None
        self.t_last = now  # last complete packet (or the accept)
        self.ka = 0  # keepalive limit in ms, 0 = none
        self.will_t = None
        self.will_m = None
        self.will_q = 0
        self.will_r = False
        # the driver's: its socket (None for a link), poll mask, and
        # whether reading waits for the send buffer to drain, or is due
        # without poll
        self.io = None
        self.mask = 0
        self.blocked = False
        self.kick = False


class Core(Stats):
    bind_ids = True  # with users: a client id whose session is another user's is refused

    def __init__(self, limits=None, users=None, allow_anonymous=None, log=None,
                 store=None, files=None, allow_fat=False, now=0):
        Stats.__init__(self)
        lim = self.limits = limits or Limits()
        self.users = users  # {user bytes: password bytes or a umqtt3_cli.passwd hash} or None
        self.owners = {}  # with users: client id -> the user whose session it is
        self.guard = None  # broker_auth.Backoff: failed logins per source, from the first
        self.allow_anonymous = (users is None) if allow_anonymous is None else allow_anonymous
        self.log = log  # callable(str) or None
        self.clients = []  # Connection, in accept order
        self.ndead = 0  # of which CLOSED, waiting for the driver
        self.sess = Sessions()
        self.subs = Subs(lim.max_subs)
        self.ret = Retained(lim, self, log)
        self.budget = lim.mem_budget
        self._why = 0  # why the last QoS 1/2 PUBLISH was refused (_refuse_full), or held
        self._holder = None  # the bridge the last held PUBLISH waits for
        # connections held (Connection.held), oldest hold first: the driver
        # retries them in that order, so none waits behind later holds
        self.holds = []
        self.nholds = 0  # holds begun, ever (Connection.hold_no)
        # a QoS 1/2 message a session's full queue cannot take: dropped for
        # that session (True) or refused to its publisher
        self.drop_full = lim.queue_full == "drop"
        self.retained = self.ret.msgs  # topic bytes -> (qos, payload bytes)
        self.route = Route()
        self.b5 = None  # the broker5 module, from the first level-5 CONNECT
        self.cur = None  # the connection whose packet is being handled
        self.atopic = None  # a level-5 PUBLISH's topic and properties after
        self.aprops = None  # its topic alias (broker5.publish_in)
        self.nhit = -1  # sessions the last routing reached (-1: none routed)
        # deliveries routed since the driver last set it to 0 (at each
        # connection's turn): what limits.fanout bounds per turn
        self.routed = 0
        self.acl = None  # broker_acl.Acl: topic access per user (None: all allowed)
        self.auth_methods = {}  # MQTT 5 enhanced authentication: name -> hook(data) -> rc
        # delayed wills: [due (uptime s), cid, topic, msg, qos, retain, props]
        self.wills = []  # type: list
        # wills being published, or put off for want of memory and tried
        # again at each tick: preallocated, as wills entries and their bit
        # (Session.got_late), so that keeping one allocates nothing (free:
        # topic None). A will is routed from one (_will_go) so that a retry
        # goes on where a MemoryError stopped it.
        self.late = [[0, None, None, None, 0, False, None, 1 << k, False]
                     for k in range(LATE_WILLS)]  # (the last: cut short once)
        self.nlate = 0  # of them in use
        self.wbit = 0  # the bit of the slot whose will is being routed (_route)
        # retained messages new subscriptions are owed, handed over as each
        # session's queue has room (_give): [session, matching topics, the
        # next one's index, QoS granted, subscription id, grants or None,
        # filter], in the order they were subscribed
        self.owed = []  # type: list
        self._pkt = Packet(4)
        # CPython: the topic names a level-3/4 PUBLISH was found valid with
        # (broker_bytes), each the bytes object routing uses for it; None on
        # a device, which decodes every PUBLISH
        self.names = {} if topic_ok is not None and TOPIC_MEMO else None
        self._foff = 0  # where the packet in _pkt starts in its buffer
        self._t_timer = now
        self._t_prev = now
        self._t_sys = now
        self.up_s = 0  # seconds since start-up: session expiry, will delay, message expiry
        self._up_ms = 0
        self.disk = None  # broker_store.Disk, with a store directory
        self.bridge = None  # bridge.Hub: the broker's bridges (bridge.install)
        if store:
            from .broker_store import Disk  # only a broker with a store loads it
            self.disk = self.ret.disk = Disk(store, lim, self, files, allow_fat)
            # the store's clock: the time the broker was down counts where
            # the platform has a wall clock (broker_store.Disk.start)
            self.up_s = self.disk.start()
            self.disk.load(self.sess, self.ret, self.subs, self._new_session, self.wills)
            if users is not None:
                # each restored session's id is its user's, as before the
                # restart (a record that names none: the first user to
                # resume it); the ACL finds the names here (set_acl)
                self.owners.update(self.disk.who)
                self.disk.who = {}
            for x in self.sess.all:
                self.subs.mark(x, False)  # no mark outlives its ACL: set_acl() marks
                if x.expiry and x.expiry != 0xFFFFFFFF and x.exp_at < 0:
                    # its client was connected when the broker stopped
                    x.exp_at = self.up_s + x.expiry
            self._expire()  # what ended, or fell due, while it was down

    def set_acl(self, text):
        """Topic access per user from the text of an ACL file (broker_acl,
        loaded here); None: everything allowed. ValueError names a bad line."""
        from .broker_acl import parse
        acl = self.acl = None if text is None else parse(text)
        # A session without its client gets the grants of the user name
        # its last client had (a restored one: the name its record keeps,
        # broker_store), its subscriptions checked as at a resume, so that
        # it queues what the ACL lets it read. One whose user name is not
        # known (a record written without an ACL, or before records kept
        # it) gets nothing through its subscriptions until its client
        # connects (_connect). A connected client that had grants gets
        # those of its user name under this ACL: what it does next is
        # checked against it, its subscriptions too (a reload, as
        # mosquitto's on SIGHUP: umqtt3_cli.broker).
        who = self.disk.who if self.disk is not None else {}
        if self.users is not None:
            who = self.owners  # the user whose session it is (bytes, None: anonymous)
        for x in self.sess.all:
            c = x.client
            if c is not None and acl is not None and c.grants is not None:
                c.grants = g = acl.grants(c.grants.user, x.cid.decode())
                if self.subs.recheck(x, g):
                    self._save(x)
                continue
            if c is None or text is None:
                g = x.grants
                if acl is not None and (g is not None or x.cid in who):
                    if g is not None:
                        u = g.user
                    else:
                        u = who[x.cid]
                        if u is not None:
                            u = u.decode()
                    g = acl.grants(u, x.cid.decode())
                    if self.subs.recheck(x, g):
                        self._save(x)  # what went, on disk (a failure: again at the next start)
                    continue
                if g is not None:
                    x.grants = None
                self.subs.mark(x, text is not None)
        if self.disk is not None and self.disk.who:
            self.disk.who = {}  # taken

    def _new_session(self, cid, clean):
        return Session(cid, clean, self.limits, self)

    def sessions(self):
        return self.sess.by_id

    def _log(self, fmt, arg):
        if self.log is not None:
            try:
                self.log(fmt % arg)
            except Exception:
                pass

    # ------------------------------------------------------------ connections
    def open(self, conn, peer, now):
        """A new connection with buffers conn (transport.Conn)."""
        c = Connection(conn, peer, now)
        self.clients.append(c)
        self.sockets += 1
        return c

    def full(self):
        """No room for one more connection: close it before any buffer."""
        lim = self.limits
        return len(self.clients) >= lim.max_clients + lim.max_pending

    def room(self, c, first, n):
        """True when c's send buffer can take the answers to an n-byte
        packet whose first byte is `first`: otherwise flush first (or stop
        reading)."""
        need = n if first >> 4 == SUBSCRIBE else 8
        return c.conn.space() >= need or grow_tx(c.conn, need, self.limits.tx)

    def packet(self, c, n, now):
        """Handle the whole packet c.conn.rx[0:n] (a driver that reads each
        packet into rx exactly, as on MicroPython). A held one (c.held)
        stays in rx, whole: conn.recv() returns it again after unhold()."""
        self.packet_at(c, c.conn.rx, 0, n, now)
        if c.held is None:
            c.conn.done()

    def packet_at(self, c, buf, off, n, now):
        """Handle the whole packet buf[off:off+n], in place. Anything
        malformed or against the protocol closes c [MQTT-4.8.0-1]."""
        p = self._pkt
        se = self.store_errors
        try:
            c.t_last = now
            self.cur = c
            self.bytes_in += n
            b0 = buf[off]
            t = b0 >> 4
            if t != PUBLISH:
                self.others_in += 1  # (a PUBLISH: Core.received, once handled)
            if n == 4 and (b0 == 0x50 or b0 == 0x62 or b0 == 0x70) and buf[off + 1] == 2 and \
                    c.state == CONNECTED:
                # a PUBREC, PUBREL or PUBCOMP that is only its packet id
                # (the usual one at every level): no decode
                pid = (buf[off + 2] << 8) | buf[off + 3]
                if pid:  # (0 is refused by the decoder [MQTT-2.3.1-1])
                    self._ack(c, t, pid, 0)
                    return
            p.level = c.level
            decode(p, buf, off, off + n)
            self._foff = off
            if c.state == WAITING:
                if t == AUTH and c.v5 is not None and c.v5.cbytes is not None:
                    self.b5.auth_in(self, c, p)  # a CONNECT's authentication exchange
                elif t != CONNECT:
                    self.disconnect(c, "first packet is not CONNECT", False)  # [MQTT-3.1.0-1]
                else:
                    self._connect(c, p)
            else:
                self._packet(c, p, t)
        except MQTTError as e:
            try:
                if c.state == WAITING and e.code == BAD_PROTOCOL_VERSION and buf[off] == 0x10:
                    # unacceptable protocol level: CONNACK 1, then close [MQTT-3.1.2-2]
                    self._refuse(c, _BAD_LEVEL, "unsupported protocol level")
                else:
                    self.fail(c, e)
            except MemoryError as e2:
                self.broke(c, e2)  # (the refusal's own allocation: closed all the same)
        except OSError:
            # a store write that failed (counted) is not acknowledged: the
            # client sends again on its next connection
            self.disconnect(c, "store write failed" if self.store_errors != se
                            else "connection lost", True)
        except Exception as e:
            self.broke(c, e)
        if c.held is not None:
            self.bytes_in -= n  # handed over again after unhold: counted then

    def pubacks(self, c, buf, off, end, now):
        """What packet_at does with each PUBACK of connected c from
        buf[off] on that is only its packet id (4 bytes, the usual one at
        every level), for the whole run of them in one call
        (Session.pubacks; a session's QoS 1 drain reads one per message,
        broker_bytes.consume). Returns where the run ends."""
        c.t_last = now
        se = self.store_errors
        try:
            o = c.sess.pubacks(buf, off, end)
        except OSError:
            self.disconnect(c, "store write failed" if self.store_errors != se
                            else "connection lost", True)
            return end
        if o == off:
            self.others_in += 1
            self.bytes_in += 4
            self.fail(c, MQTTError("acknowledgement out of its flow", 0x82))
            return off + 4
        self.others_in += (o - off) >> 2  # 4 bytes each
        self.bytes_in += o - off
        return o

    def wants_send(self, c):
        """c has bytes in its send buffer, or messages waiting for room."""
        if c.conn.tlen:
            return True
        s = c.sess
        if s is None or s.client is not c:
            return False
        return s.backlog() or (self.owed and self._owes(s))

    def commit(self):
        """Make durable what the store was handed since the last commit
        (broker_store.Disk.commit): the driver calls it before any byte
        leaves, so a step's acknowledgements and deliveries follow the one
        sync of everything the step accepted. When the disk fails, or the
        heap is spent in the commit (counted in nomem), every connection is
        closed with what it had to send unsent: the clients send again, the
        broker keeps what it held. False then (a bridge drops its link:
        bridge.Bridge._commit)."""
        d = self.disk
        if d is None or d.commit():
            return True
        for c in self.clients:
            if c.state != CLOSED:
                c.conn.tlen = c.conn.sent = 0
                self.disconnect(c, "store write failed", True)
        return False

    def refill(self, c):
        """c's send buffer drained: move what waits into it. True when it
        now holds bytes."""
        s = c.sess
        if s is None or s.client is not c:
            return False
        if self.owed:
            self._hand(s)  # (written, or queued behind what waits)
        if s.backlog():
            s.pump()
        return c.conn.tlen > 0

    # ------------------------------------------------------------ closing
    def fail(self, c, e):
        """c broke the protocol (e: the codec's MQTTError): closed, with a
        DISCONNECT carrying e's reason code at MQTT 5 [MQTT-4.13.1-1]."""
        # (0x97: a bridge's full queue refused the message, no error of c's)
        why = "quota exceeded: " if e.code == 0x97 else "protocol error: "  # [MQTT-4.8.0-1]
        try:
            why += e.reason
        except MemoryError:
            pass  # (the heap is spent: closed all the same, the kind of error said)
        self.disconnect(c, why, True, e.code)

    def broke(self, c, e):
        """An exception no handler expected while c's packet was handled
        (or its turn read or flushed): c is closed, as a protocol error
        closes it [MQTT-4.8.0-1], and the broker goes on serving the
        others. A MemoryError (the heap is spent) is counted in nomem and
        answered without allocating: a constant reason, at MQTT 5 a
        DISCONNECT 0x97 (quota exceeded) [MQTT-4.13.1-1]. Anything else
        is a bug: counted in errors, DISCONNECT 0x83."""
        if isinstance(e, MemoryError):
            self.nomem += 1
            self.disconnect(c, "out of memory", True, 0x97)
            return
        self.errors += 1
        try:
            why = "internal error: %r" % (e,)
        except MemoryError:
            why = "internal error"
        self.disconnect(c, why, True, 0x83)

    def disconnect(self, c, why, will, rc=0):
        """Close a connection; publish its will when `will` and it has one
        [MQTT-3.1.2-8]. At MQTT 5 a reason code rc goes to the client in a
        DISCONNECT first. The driver releases it."""
        if c.state == CLOSED:
            return
        if c.held is not None:
            self.unhold(c, c.t_last)  # its packet goes unacknowledged: the client resends it
        was = c.state
        if rc and c.v5 is not None and was == CONNECTED:
            try:
                self.b5.send_disconnect(c, rc, why)
            except MemoryError:
                # its reason string did not fit the heap: the code alone
                # (DISCONNECT, remaining length 1, the code: 3.14.2.1)
                conn = c.conn
                if conn.space() >= 3:
                    t = conn.tlen
                    conn.tx[t] = 0xE0
                    conn.tx[t + 1] = 1
                    conn.tx[t + 2] = rc
                    conn.tlen = t + 3
            self.others_out += 1
        c.state = CLOSED
        c.why = why
        self.ndead += 1
        wt = c.will_t
        c.will_t = None
        if was == CONNECTED:
            self.connected -= 1
            s = c.sess
            ended = False
            if s is not None and s.client is c:
                s.client = None
                if s.clean:
                    self._end(s)  # [MQTT-3.1.2-6]
                    ended = True
                elif s.expiry:
                    if s.expiry != 0xFFFFFFFF:
                        # [MQTT-3.1.2-23 (5.0)], never early: from the next whole second
                        s.exp_at = self.up_s + s.expiry + (1 if self._up_ms else 0)
                        try:
                            self._save(s)  # its end, on disk: it counts across a restart
                        except MemoryError:
                            self.nomem += 1  # (as a failed write: it ends at the next start)
                elif c.v5 is not None:
                    self._end(s)  # expiry 0, set at DISCONNECT
                    ended = True
            if self.log is not None:
                try:
                    self._log("disconnect %s: %s", (c.cid.decode(), why))
                except MemoryError:
                    pass  # (its arguments: the heap is spent, no line)
            if will and wt is not None:
                self._will(c, s, wt, ended)
        elif self.log is not None:
            try:
                self._log("closed %s: %s", (c.peer, why))
            except MemoryError:
                pass

    def _will(self, c, s, wt, ended):
        # c's will, its connection closed abnormally [MQTT-3.1.2-8]: now,
        # or later at MQTT 5 with a will delay, unless the session resumes
        # first [MQTT-3.1.3-9]. With the heap spent it is put off (late)
        # rather than lost, and a tick tries it again.
        v = c.v5
        due = self.up_s
        cid = None  # (a delayed will's: its session may resume first)
        if v is not None and v.wdelay and not ended:
            d = v.wdelay if v.wdelay < s.expiry else s.expiry
            if self._up_ms:
                d += 1  # never early: timers run on whole seconds
            due += d
            cid = c.cid
        pr = None
        try:
            pr = None if v is None else self.b5.will_props(c)
            if cid is None:
                self._will_go(due, None, wt, c.will_m, c.will_q, c.will_r, pr)
                return
            self.wills.append([due, cid, wt, c.will_m, c.will_q, c.will_r, pr])
        except MemoryError:
            # (its properties too, if they could not be built)
            self.nomem += 1
            if self._put_off(due, cid, wt, c.will_m, c.will_q, c.will_r, pr) is None:
                self.dropped += 1  # no slot free: lost, counted
            return
        if self.disk is not None:
            try:  # kept across a restart, sent when due
                self.disk.save_will(s, due, wt, c.will_m, c.will_q, c.will_r, pr)
            except OSError:
                pass  # counted; it is lost only if the broker restarts
            except MemoryError:
                self.nomem += 1  # (the same)

    def _put_off(self, due, cid, topic, msg, qos, retain, pr):
        # a will kept in a free slot of late, allocating nothing: the slot,
        # or None when none is free
        for e in self.late:
            if e[2] is None:
                e[0] = due
                e[1] = cid
                e[2] = topic
                e[3] = msg
                e[4] = qos
                e[5] = retain
                e[6] = pr
                self.nlate += 1
                return e
        return None

    def _will_go(self, due, cid, topic, msg, qos, retain, pr):
        """Publish a will that is due [MQTT-3.1.2-8], once: it is held in a
        free slot of late while it is routed, and each session it reaches
        is marked with the slot's bit (_route), so that after a
        MemoryError part way (counted) a tick goes on with the sessions
        it has not reached (_late) rather than sending it again to those
        it has. cid: a delayed will's, whose record goes once it is out.
        No slot free: routed unmarked, a MemoryError raised."""
        e = self._put_off(due, cid, topic, msg, qos, retain, pr)
        if e is None:
            self.publish(topic, msg, qos, retain, pr)
            if cid is not None:
                self._drop_will(cid)
            return
        try:
            self._late_one(e)
        except MemoryError:
            self.nomem += 1  # (its slot keeps it, and the marks)

    def _late(self):
        # the wills put off for want of memory that are due, tried again
        # where they stopped (a tick; a MemoryError again leaves them for
        # the next one)
        up = self.up_s
        for e in self.late:
            if e[2] is not None and up >= e[0]:
                self._late_one(e)

    def _late_one(self, e):
        # route slot e's will to the sessions (and bridges) it has not
        # reached yet; then the slot is free, the marks gone, and a delayed
        # will's record too (a MemoryError: all kept for the next try)
        self.wbit = e[7]
        try:
            self.publish(e[2], e[3], e[4], e[5], e[6])
        except MemoryError:
            e[8] = True  # marks left behind: _unlate sweeps every session
            raise
        finally:
            self.wbit = 0
        cid = e[1]
        self._unlate(e)
        if cid is not None:
            self._drop_will(cid)

    def _unlate(self, e):
        e[1] = e[2] = e[3] = e[6] = None
        self.nlate -= 1
        bit = e[7]
        if self.bridge is not None:
            self.bridge.unmark(bit)  # (each bridge marked as it took it: Hub.route)
        if e[8]:
            # a try cut short marked sessions the last one may not have
            # hit (_route takes back the marks of its own hits)
            e[8] = False
            al = self.sess.all
            unmark_late(al, len(al), bit)

    def _end(self, s):
        # a clean session ends with its connection; with the heap spent,
        # what _drop does that allocates (a shared member's hand-on) is
        # given up, the session goes all the same
        try:
            self._drop(s)
        except MemoryError:
            self.nomem += 1
            self.subs.drop(s)
            if s in self.sess.all:
                self.sess.remove(s)

    def forget(self, c):
        """The driver released c."""
        self.clients.remove(c)
        self.ndead -= 1

    def close_all(self):
        for c in self.clients:
            if c.state != CLOSED:
                c.state = CLOSED
                if c.sess is not None and c.sess.client is c:
                    c.sess.client = None
                self.ndead += 1
            c.held = None
        self.connected = 0
        del self.holds[:]

    def end_clean(self):
        """At shutdown: clean sessions go (their connections are gone)."""
        for s in self.sess.all[:]:
            if s.clean:
                self._drop(s)

    def _refuse(self, c, rc, why):
        conn = c.conn
        if c.level == 5:
            self._b5().refuse(c, rc, why)
        elif conn.space() >= 4:
            conn.tlen = encode_connack(conn.tx, conn.tlen, False, rc)
        self.others_out += 1
        self.refused += 1
        if self.log is not None:
            try:
                why = "refused (CONNACK %d): %s" % (rc, why)
            except MemoryError:
                pass  # (the heap is spent: the reason alone)
        self.disconnect(c, why, False)

    def _b5(self):
        b5 = self.b5
        if b5 is None:
            from . import broker5  # the first level-5 CONNECT loads MQTT 5
            b5 = self.b5 = broker5
            if self.disk is not None:
                self.disk.use_clock(self.up_s)  # times come into the store
        return b5

    def set_expiry(self, s, sx):
        """A session's expiry interval changed (a CONNECT that resumes it, a
        DISCONNECT): on disk with it."""
        s.expiry = sx
        if not s.clean and self.disk is not None:
            self.disk.save_session(s)

    def _save(self, s):
        # a session record rewritten where nobody waits for it (a client
        # gone); a failed write is counted and the broker goes on
        if self.disk is not None and not s.clean:
            try:
                self.disk.save_session(s)
            except OSError:
                pass

    def _drop_will(self, cid):
        s = self.sess.by_id.get(cid)
        if self.disk is not None and s is not None:
            try:
                self.disk.drop_will(s)
            except OSError:
                pass

    def _drop(self, s):
        if self.owed:
            self._unowe(s, None)
        if self.sess.by_id.get(s.cid) is s:  # (not a second, ended record of the id: Disk.load)
            self.owners.pop(s.cid, None)
        if self.subs.groups and s.filters:
            # on another member's record (send) before this one's goes
            self._hand_on(s)
        if not s.clean and self.disk is not None:
            self.disk.drop_session(s)  # gone from disk before CONNACK
        self.subs.drop(s)
        self.sess.remove(s)

    def _hand_on(self, s):
        """Session s ends: each QoS 1/2 copy a shared group's turn gave it
        and its client did not acknowledge (sent without PUBACK / PUBREC, or
        queued) goes to another member of that group, chosen as match()
        chooses, at the QoS that member was granted, capped by the copy's
        [MQTT-4.8.2 (5.0): "the Server SHOULD send the Application Message
        to another Client that is subscribed to the same Shared
        Subscription"]; none left: dropped, counted. Each copy carries
        the subscription identifier of the member's own subscription.
        (The rare end of a shared member: it allocates.)"""
        held = s.shared_held()
        if not held:
            return
        subs = self.subs
        r = Route()  # (self.route may be half way through a message)
        up = self.up_s
        seen = {}  # type: dict  # (topic, payload) -> copies handed on: a topic two of its groups match
        for m, first in held:
            t = m.t
            # the group it came by: its shared filters that match the topic,
            # the n-th for the n-th copy of one message
            fs = [f for f in s.filters if shared_at(f) > 0 and
                  match_span(f, shared_at(f), len(f) - shared_at(f), t, 0, len(t))]
            key = (t, m.p)
            n = seen.get(key, 0)
            seen[key] = n + 1
            if n >= len(fs):
                self.dropped += 1
                continue
            f = fs[n]
            o = subs.turn(f, t, 0, len(t), s)
            pr = m.pr
            if o is None or (m.exp >= 0 and m.exp <= up):
                self.dropped += 1  # no other member may have it, or it expired
                continue
            g = subs.po
            q = (first >> 1) & 3
            r.set(t, 0, len(t), m.p, 0, len(m.p), q)
            r.retain = bool(first & 1)
            if pr is not None:
                pr = self._b5().hand_on_props(pr, m.exp - up if m.exp >= 0 else -1)
                r.prs = pr
                r.prn = len(pr)
            try:
                # at the member's QoS, capped by the copy's; marked, so that
                # its end hands it on again
                self._send_shared(o, r, q, g, first & 1 if g & 8 else 0, f)
            except OSError:
                continue  # counted in store_errors: that member misses it
            self.handed += 1

    # ------------------------------------------------------------ CONNECT
    def _connect(self, c, p):
        conn = c.conn
        buf = p.buf
        c.level = lv = p.level
        b5 = None
        if lv == 5:
            b5 = self._b5()
            rc = b5.connect(self, c, p)
            if rc <= 0 and self._keeps_too_much(c, p):
                return  # (before an authentication exchange keeps it)
            if rc < 0:
                # an authentication exchange goes on (AUTH 0x18 sent): the
                # CONNECT waits for its end (broker5.auth_in)
                c.v5.cbytes = bytes(buf[self._foff:p.end])
                self.others_out += 1
                return
            if rc:
                self._refuse(c, rc, "CONNECT refused")
                return
        elif self._keeps_too_much(c, p):
            return
        reg = self.sess
        self.name_ok(buf, p.cid_off, p.cid_len, 2)
        if p.user_off >= 0:
            self.name_ok(buf, p.user_off, p.user_len, 2)
        if p.will:
            self.name_ok(buf, p.topic_off, p.topic_len, 0)
        cid = bytes(buf[p.cid_off:p.cid_off + p.cid_len])
        if lv == 3 and len(cid) > 23:
            self._refuse(c, _BAD_ID, "client id over 23 characters")  # MQTT 3.1, 3.1
            return
        assigned = None
        if not cid:
            if lv == 3 or (lv == 4 and not p.clean):
                self._refuse(c, _BAD_ID, "empty client id")  # [MQTT-3.1.3-8]
                return
            cid = assigned = reg.new_id()  # [MQTT-3.1.3-6]
        rc = self._auth(c, p)
        if rc:
            self._refuse(c, rc, "authentication")
            return
        if self.users is not None and self.bind_ids and cid in reg.by_id:
            # a client id is its session's user's: another user (or an
            # anonymous client) taking it over would get that user's messages
            u = None if p.user_off < 0 else bytes(buf[p.user_off:p.user_off + p.user_len])
            if self.owners.get(cid, u) != u:
                self._refuse(c, _NOT_AUTHORIZED, "client id of another user")
                return
        if self.acl is not None:
            u = p.user_off
            c.grants = g = self.acl.grants(
                None if u < 0 else bytes(buf[u:u + p.user_len]).decode(), cid.decode())
            if p.will and not g.may_write(buf, p.topic_off, p.topic_len):
                self._refuse(c, _NOT_AUTHORIZED, "will topic not allowed by the ACL")
                return
        old = reg.by_id.get(cid)
        if old is not None and old.client is not None:
            # the id is in use: the older connection goes [MQTT-3.1.4-2]
            self.disconnect(old.client, "taken over", True, 0x8E)
        elif self.connected >= self.limits.max_clients:
            self._refuse(c, _UNAVAILABLE, "max clients reached")
            return
        if self.wills or self.nlate:
            self._will_resumed(cid, p.clean)
        old = reg.by_id.get(cid)
        present = False
        # a session outlives the connection: CleanSession 0 at 3.1.1, a
        # session expiry interval above 0 at 5.0 [MQTT-3.1.2-23 (5.0)]
        keep = c.v5.sx > 0 if lv == 5 else not p.clean
        if p.clean:
            if old is not None:
                self._drop(old)  # [MQTT-3.1.2-6]
            s = None
        else:
            s = old
            present = s is not None  # [MQTT-3.2.2-2]
        if s is not None and not keep:
            # resumed, but it ends with this connection now (expiry 0): what
            # it queued stays to be sent [MQTT-3.1.2-4 (5.0)] [MQTT-4.4.0-1]
            if self.disk is not None:
                self.disk.drop_session(s)
            reg.make_clean(s)
        sx = c.v5.sx if lv == 5 else 0
        users = self.users
        if users is not None:
            u = None if p.user_off < 0 else bytes(buf[p.user_off:p.user_off + p.user_len])
        renew = False  # its record names another user, or none
        if s is None:
            s = self._new_session(cid, not keep)
            if sx:
                s.expiry = sx
            if c.grants is not None:
                s.grants = c.grants  # its user name goes into its record
            if keep:
                if reg.npersist >= self.limits.max_sessions:
                    self._refuse(c, _UNAVAILABLE, "max sessions reached")
                    return
                if users is not None:
                    self.owners[cid] = u  # its record names its user
                if self.disk is not None:
                    try:
                        self.disk.add_session(s)  # [MQTT-3.1.2-4], before CONNACK
                    except OSError:
                        self.owners.pop(cid, None)  # no session, so no owner
                        raise
            reg.add(s)
        elif s.expiry != sx:
            self.set_expiry(s, sx)
        if users is not None:
            # the id is this user's now; a session resumed from a record
            # that named nobody (or, with ids not bound, another user) gets
            # a record that names it, so a restart keeps the id this user's
            own = self.owners
            if own.get(cid, 0) != u:
                own[cid] = u
                renew = True
        if self.acl is not None:
            # what the session subscribed to before, under the ACL in
            # force now: a revoked permission reaches it too. Its record
            # names the user whose grants it has (a restart grants the
            # same): rewritten when that changes.
            g = s.grants
            if g is None or g.user != c.grants.user:
                renew = True
            s.grants = c.grants
            if s.filters and self.subs.recheck(s, c.grants):
                renew = True
        if renew and self.disk is not None and not s.clean:
            self.disk.save_session(s)
        c.cid = cid
        c.sess = s
        c.state = CONNECTED
        if p.bridge:
            c.bridge = True
        self.connected += 1
        self.connects += 1
        if self.connected > self.peak:
            self.peak = self.connected
        ka = p.keepalive
        ska = -1
        mk = self.limits.max_keepalive
        if lv == 5 and mk and (not ka or ka > mk):
            ka = ska = mk  # the server keep alive [MQTT-3.1.2-21 (5.0)]
        c.ka = ka * 1500  # [MQTT-3.1.2-24]
        if p.will and not is_sys(buf, p.topic_off, p.topic_len):
            # a will into $SYS/ is accepted and never published, as a
            # client's PUBLISH there is acknowledged and dropped [MQTT-4.7.2-1]
            c.will_t = bytes(buf[p.topic_off:p.topic_off + p.topic_len])
            c.will_m = bytes(buf[p.payload_off:p.payload_off + p.payload_len])
            c.will_q = p.qos
            c.will_r = p.retain
        if lv == 5:
            b5.connack(self, c, present, assigned, ska)  # [MQTT-3.2.2-2]
        else:
            # session present only for 3.1.1 [MQTT-3.2.2-1..3]
            conn.tlen = encode_connack(conn.tx, conn.tlen, present and lv == 4, 0)
        self.others_out += 1
        gone = s.exp_at >= 0  # its client had gone, with an end on disk
        s.attach(c)  # resend what was in flight [MQTT-4.4.0-1]
        if gone:
            self._save(s)  # no end on disk while a client is connected
        if self.log is not None:
            self._log("connect %s from %s (%sclean %d, keepalive %d)",
                      (cid.decode(), c.peer, "bridge, " if c.bridge else "", p.clean,
                       p.keepalive))

    def _keeps_too_much(self, c, p):
        """Whether CONNECT p asks c to keep more than the limits let a
        connection keep (broker_limits: max_id_bytes, max_will_bytes):
        refused before any of it is copied, and True. A client id: CONNACK
        2, identifier rejected [MQTT-3.1.3-9] (0x85 at MQTT 5
        [MQTT-3.1.3-8 (5.0)]); a user name: 4 (0x86); a will at MQTT 5:
        0x97, quota exceeded; below MQTT 5, whose CONNACK has no code for
        it, the connection is closed unanswered [MQTT-3.2.2-6]."""
        lim = self.limits
        mi = lim.max_id_bytes
        if p.cid_len > mi:
            self._refuse(c, _BAD_ID, "client id over max_id_bytes")
            return True
        if p.user_len > mi:
            self._refuse(c, _BAD_AUTH, "user name over max_id_bytes")
            return True
        mw = lim.max_will_bytes
        if p.will and mw and p.topic_len + p.payload_len + p.wprops_len > mw:
            if c.level == 5:
                self._refuse(c, 0x97, "will over max_will_bytes")
            else:
                self.refused += 1
                self.disconnect(c, "refused (no CONNACK): will over max_will_bytes", False)
            return True
        return False

    def _will_resumed(self, cid, clean):
        """A client connects with the id of a delayed will: the session
        resumes and the will is not sent [MQTT-3.1.3-9], or it starts
        anew, which ends the old one, and the will goes now."""
        w = self.wills
        i = len(w) - 1
        while i >= 0:
            e = w[i]
            if e[1] == cid:
                del w[i]
                self._drop_will(cid)
                if clean:
                    self._will_go(0, None, e[2], e[3], e[4], e[5], e[6])
            i -= 1
        if self.nlate:
            up = self.up_s
            for e in self.late:  # (a delayed will put off for want of memory)
                if e[2] is not None and e[1] == cid and up < e[0]:
                    # (one already due is on its way: it goes on)
                    if clean:
                        e[0] = 0  # due: the next tick publishes it
                    else:
                        self._unlate(e)

    def name_ok(self, buf, off, n, flt):
        """A topic name (flt 0) or filter (1), client id or user name (2)
        without control characters (U+0001-U+001F, U+007F-U+009F), which
        [MQTT-1.5.3-2] lets the broker refuse, and within max_levels levels
        (names and filters). Raises MQTTError to close the connection."""
        ml = self.limits.max_levels if flt < 2 else 0
        if name_levels is not None:  # CPython: the same scan, in C
            lv = name_levels(buf, off, n)
            if lv < 0:
                raise MQTTError("control character", 0x81)
            if ml and lv > ml:
                raise MQTTError("too many topic levels", 0x90 if not flt else 0x8F)
            return
        lv = 1
        i = off
        end = off + n
        while i < end:
            b = buf[i]
            if b < 0x20 or b == 0x7F or (b == 0xC2 and i + 1 < end and buf[i + 1] < 0xA0):
                raise MQTTError("control character", 0x81)
            if b == 47:
                lv += 1
            i += 1
        if ml and lv > ml:
            raise MQTTError("too many topic levels", 0x90 if not flt else 0x8F)

    def _auth(self, c, p):
        """CONNACK return code for the credentials: 0 when accepted. A
        source with too many failed logins waits (broker_auth.Backoff):
        meanwhile its logins are refused unchecked."""
        buf = p.buf
        if p.user_off < 0:
            return 0 if self.allow_anonymous else _NOT_AUTHORIZED
        users = self.users
        if users is None:
            return 0
        from .broker_auth import password_ok, Backoff  # loaded by the first CONNECT with a user
        g = self.guard
        if g is None:
            lim = self.limits
            g = self.guard = Backoff(lim.auth_sources, lim.auth_fails, lim.auth_wait_ms)
        src = c.peer
        k = src.rfind(":") if isinstance(src, str) else -1
        if k > 0:
            src = src[:k]  # the address, whatever the port
        now = c.t_last
        if g.waiting(src, now):
            return _BAD_AUTH
        pw = users.get(bytes(buf[p.user_off:p.user_off + p.user_len]))
        if pw is None:
            ok = False
        elif p.pw_off < 0:
            ok = not pw
        else:
            ok = password_ok(pw, bytes(buf[p.pw_off:p.pw_off + p.pw_len]))
        if not ok:
            g.failed(src, now)
            return _BAD_AUTH
        g.passed(src)
        return 0

    # ------------------------------------------------------------ packets
    def _packet(self, c, p, t):
        conn = c.conn
        s = c.sess
        if t == PUBLISH:
            self.received += 1
            self.pub_in += p.payload_len
            self.name_ok(p.buf, p.topic_off, p.topic_len, 0)
            if c.v5 is not None and self.b5.publish_in(self, c, p):
                return  # refused with a reason code
            g = c.grants
            if g is not None:
                at = self.atopic if c.v5 is not None else None
                if not (g.may_write(at, 0, len(at)) if at is not None else
                        g.may_write(p.buf, p.topic_off, p.topic_len)):
                    self._denied(c, p)
                    return
            self.nhit = -1
            q = p.qos
            r = self._route_of(c, p)
            if q == 2:
                self.publish2(c, p.pid, r)
                return
            try:
                if r is not None:
                    self.route_ready(r)  # what Flow does at QoS 0: nothing else
            except QueueFull:
                # nothing routed or retained
                self.refuse_publish(c, q, p.pid)
                return
            if q:
                # what Flow.on_publish does at QoS 1, without its call and
                # Session.deliver's: routed once, then PUBACK [MQTT-4.3.2-2];
                # refused (QueueFull), no PUBACK
                if not self.nhit and c.v5 is not None:
                    # accepted, no subscription matched: 0x10 (3.4.2.1)
                    conn.tlen = encode_ack(conn.tx, conn.tlen, PUBACK, p.pid, 0x10, 5)
                else:
                    put_ack(conn, 0x40, p.pid)
                self.others_out += 1
        elif t == PUBACK or t == PUBREC or t == PUBCOMP or t == PUBREL:
            self._ack(c, t, p.pid, p.rc)
        elif t == PINGREQ:
            conn.tlen = encode_simple(conn.tx, conn.tlen, PINGRESP)
            self.others_out += 1
        elif t == SUBSCRIBE:
            self._subscribe(c, p)
        elif t == UNSUBSCRIBE:
            i = p.payload_off
            end = i + p.payload_len
            codes = bytearray() if c.v5 is not None else None
            if codes is not None and c.v5.maxpkt and not self.b5.acks_fit(c, p, 0):
                # (as SUBACK's, _subscribe)
                raise MQTTError("UNSUBACK over the client's maximum packet size", 0x95)
            while i < end:
                i = read_filter(p, i)
                self.name_ok(p.buf, p.f_off, p.f_len, 1)
                ok = self.subs.remove(s, p.buf, p.f_off, p.f_len)
                if ok and self.owed:
                    # no more of its retained messages [MQTT-3.10.4-2]
                    self._unowe(s, p.buf[p.f_off:p.f_off + p.f_len])
                if codes is not None:
                    codes.append(0 if ok else 0x11)  # 0x11: no subscription existed
            if self.disk is not None:
                self.disk.save_session(s)  # durable before UNSUBACK
            # [MQTT-3.10.4-4]; at 5.0 one reason code per filter [MQTT-3.11.3-1]
            conn.tlen = encode_unsuback(conn.tx, conn.tlen, p.pid, codes, c.level)
            self.others_out += 1
        elif t == DISCONNECT:
            if c.v5 is not None:
                self.b5.on_disconnect(self, c, p)
            else:
                self.disconnect(c, "DISCONNECT", False)  # will discarded [MQTT-3.14.4-3]
        elif t == CONNECT:
            self.disconnect(c, "second CONNECT", True)  # [MQTT-3.1.0-2]
        elif t == AUTH:
            if c.v5 is None:
                raise MQTTError("AUTH below MQTT 5", 0x82)
            self.b5.auth_in(self, c, p)  # re-authentication, or a protocol error
        else:
            self.disconnect(c, "unexpected packet type %d" % t, True)

    def publish2(self, c, pid, r):
        """The receiver's side of c's QoS 2 PUBLISH with packet id pid,
        each of its rules here alone (Core._packet and broker_bytes.publish4
        call it): r, the Route filled from the packet (None: nothing to
        route, a client's $SYS topic)."""
        s = c.sess
        if not s.in_has(pid):
            # a new id: held before it is routed and before PUBREC, on disk
            # for a persistent session (i<pid>.u, with the routing's tag)
            # [MQTT-4.3.3-2]. Past max_qos2_in held ids (the receive maximum
            # a level-5 CONNACK announces) in_add raises: closed, at 5.0 with
            # 0x93, Receive Maximum exceeded [MQTT-3.3.4-7]
            s.in_add(pid)
            try:
                if r is not None:
                    r.tag = s.tag  # every copy routed carries it
                    self.route_ready(r)
            except QueueFull:
                # nothing routed or retained: the id is forgotten and no
                # PUBREC goes (at 5.0 one with 0x97), so the sender's
                # resend is routed
                s.in_del(pid)
                self.refuse_publish(c, 2, pid)
                return
            except Exception:
                s.in_del(pid)  # not routed (a store write failed): the resend is
                raise
            s.in_done(pid)  # i<pid>.d: a resend is answered, not routed
            if not self.nhit and c.v5 is not None:
                # accepted, no subscription matched: PUBREC 0x10 (3.5.2.1)
                conn = c.conn
                conn.tlen = encode_ack(conn.tx, conn.tlen, PUBREC, pid, 0x10, 5)
                self.others_out += 1
                return
        # PUBREC after the routing; a known id gets PUBREC again and is not
        # routed a second time [MQTT-4.3.3-2]
        put_ack(c.conn, 0x50, pid)
        self.others_out += 1

    def refuse_publish(self, c, q, pid):
        """c's QoS q (1 or 2) PUBLISH with packet id pid was refused
        (QueueFull): counted, and answered as its level allows; or held
        (_hold), when a bridge with its uplink up has no room for it."""
        if self._why == _HELD:
            self._hold(c)
            return
        if self._why == _MEM:
            self.refused_mem += 1
            why = "the broker's memory budget is spent"
        elif self._why == _RETAINED:
            self.refused_retained += 1
            why = "max retained reached"
        else:
            self.queue_full += 1
            why = "a subscriber's queue is full"
        if c.v5 is not None:
            # Quota exceeded in its PUBACK / PUBREC (3.4.2.1, 3.5.2.1)
            conn = c.conn
            conn.tlen = encode_ack(conn.tx, conn.tlen, PUBACK if q == 1 else PUBREC, pid, 0x97, 5)
            self.others_out += 1
        else:
            # 3.1.1 has no refusing PUBACK: closed unacknowledged, the
            # client sends it again on its next connection [MQTT-4.4.0-1]
            self.disconnect(c, why, True)

    def _hold(self, c):
        # Back-pressure: c's QoS 1/2 PUBLISH waits for room on the bridge's
        # queue (nothing routed, retained or acknowledged; a QoS 2 id taken
        # back, publish2). Its caller leaves the packet where it lies and
        # the driver reads c no further, so TCP stops the node at its
        # window; once the bridge no longer waits (its upstream's acks made
        # room, or its uplink went down: then the refusal) the driver
        # calls unhold(c) and hands the packet over again, as if it had
        # just arrived. (What allocates is route_ready's QueueFull, as for
        # a refusal: a hold is no steady state.)
        self.received -= 1  # counted when it is handled
        self.pub_in -= self.route.pn  # (the route it was refused with)
        if c.held is None:
            self.holds.append(c)  # (a list keeps its room: no allocation once grown)
            self.nholds += 1
            c.hold_no = self.nholds
        c.held = self._holder
        self._holder = None

    def unhold(self, c, now):
        """c's held PUBLISH may be handed over again (c.held.waits() is
        False), or c is closing. The keepalive counts from now: while held
        the client's silence was ours [MQTT-3.1.2-24]."""
        c.held = None
        c.t_last = now
        self.holds.remove(c)

    def _ack(self, c, t, pid, rc):
        # PUBACK, PUBREC, PUBREL or PUBCOMP for pid (rc: its reason code,
        # 0 when absent). What Flow.on_ack does, the client's machine on
        # both sides, in one look at the session's ring (Session.ack_out):
        # outbound acks change the ring (and its records), PUBREL forgets
        # an inbound id, each durably before PUBREL / PUBCOMP is written.
        # An ack that does not fit the flow of its id is a protocol error.
        s = c.sess
        conn = c.conn
        if t != PUBREL:
            if not s.ack_out(conn, t, pid, rc):
                raise MQTTError("acknowledgement out of its flow", 0x82)
            return
        if c.v5 is not None and not s.in_has(pid):
            # PUBCOMP 0x92, packet identifier not found (broker5.no_pid)
            conn.tlen = encode_ack(conn.tx, conn.tlen, PUBCOMP, pid, 0x92, 5)
            self.others_out += 1
            return
        s.in_del(pid)  # removed durably before PUBCOMP
        # unknown ids are answered too, so the sender can finish
        put_ack(conn, 0x70, pid)
        self.others_out += 1

    def _denied(self, c, p):
        # a PUBLISH the ACL does not allow: dropped, and acknowledged so
        # that the client does not send it again; at MQTT 5 with 0x87
        self.dropped += 1
        if c.v5 is not None:
            self.b5.ack_refuse(c, p, 0x87)
        elif p.qos:
            conn = c.conn
            conn.tlen = encode_ack(conn.tx, conn.tlen, PUBACK if p.qos == 1 else PUBREC, p.pid)
        if p.qos:
            self.others_out += 1

    def _subscribe(self, c, p):
        conn = c.conn
        s = c.sess
        v5 = c.v5 is not None
        if v5 and c.v5.maxpkt and not self.b5.acks_fit(c, p, 1):
            # no SUBACK the client takes [MQTT-3.1.2-24]: closed before
            # anything is subscribed
            raise MQTTError("SUBACK over the client's maximum packet size", 0x95)
        sid = self.b5.subscription_id(p) if v5 else 0
        codes = bytearray()
        new = 0  # bit k: filter k is a new subscription (retain handling 1)
        check = 0  # bit k: filter k is marked ACL_CHECK: its retained messages too
        shared = 0  # bit k: filter k is shared: no retained messages [4.8.2 (5.0)]
        i = p.payload_off
        end = i + p.payload_len
        k = 0
        subs = self.subs
        while i < end:
            i = read_filter(p, i)
            self.name_ok(p.buf, p.f_off, p.f_len, 1)
            sh = 0
            if p.buf[p.f_off] == 36:
                sh = shared_at(p.buf[p.f_off:p.f_off + p.f_len])
            o = p.opts if v5 else p.opts & 3
            if c.bridge:
                # a bridge's subscription is no local and retain as
                # published, as mosquitto makes it: its own messages do not
                # come back [MQTT-3.8.3-3 (5.0)], live ones keep their
                # RETAIN flag [MQTT-3.3.1-13 (5.0)]; kept in the options
                # byte, so the store keeps them too
                o |= 12
            gr = c.grants
            ff = None if gr is None or sh < 0 else bytes(p.buf[p.f_off + sh:p.f_off + p.f_len])
            if sh < 0:
                g = 0x8F if v5 else 0x80  # a shared subscription without group or filter
            elif ff is not None and not gr.may_read(ff):
                g = 0x87 if v5 else 0x80  # not authorized by the ACL
            else:
                if sh and p.opts & 4:
                    raise MQTTError("no local on a shared subscription", 0x82)  # [MQTT-3.8.3-4]
                if ff is not None and gr.partly_denied(ff):
                    # granted, and a deny pattern meets it: each topic is
                    # checked as it is delivered (as mosquitto does)
                    o |= ACL_CHECK
                    check |= 1 << k
                # the options byte is kept whole: QoS, and at 5.0 no local,
                # retain as published, retain handling [MQTT-3.8.3-*]
                g = subs.add(s, p.buf, p.f_off, p.f_len, o, sid)
                if g == 0x80 and v5:
                    g = 0x97  # quota exceeded
                if subs.added:
                    new |= 1 << k
                if sh:
                    new &= ~(1 << k)
                    codes.append(g)
                    k += 1
                    shared |= 1 << (k - 1)
                    continue
            codes.append(g)
            k += 1
        if self.disk is not None:
            self.disk.save_session(s)  # durable before SUBACK
        # one return code per filter, in order [MQTT-3.8.4-5]
        conn.tlen = encode_suback(conn.tx, conn.tlen, p.pid, codes, c.level)
        self.others_out += 1
        # then the retained messages of each granted filter [MQTT-3.3.1-6]:
        # owed, and handed over as the session's queue takes them (_give),
        # so that none is dropped for a queue they do not all fit
        i = p.payload_off
        k = 0
        ret = self.retained
        while i < end:
            i = read_filter(p, i)
            g = codes[k]
            k += 1
            if g >= 0x80 or not ret or shared >> (k - 1) & 1:
                continue
            rh = p.opts >> 4 & 3 if v5 else 0
            if rh == 2 or (rh == 1 and not new >> (k - 1) & 1):
                continue  # retain handling 2, or 1 on an existing subscription
            # (a filter subscribed again is owed its retained messages
            # again [MQTT-3.8.4-3], after what is still owed for it)
            topics = self.ret.matching(p.buf, p.f_off, p.f_len)
            if topics:
                gr = c.grants if check >> (k - 1) & 1 else None
                self.owed.append([s, topics, 0, g, sid, gr,
                                  bytes(p.buf[p.f_off:p.f_off + p.f_len])])
        if self.owed:
            self._hand(s)

    # ------------------------------------------------------------ retained, owed
    def _hand(self, s):
        """Hand session s what its new subscriptions are owed of the
        retained messages (owed), oldest subscription first, while its
        queue has room. True when some are still owed."""
        ow = self.owed
        i = 0
        while i < len(ow):
            e = ow[i]
            if e[0] is not s:
                i += 1
            elif self._give(e):
                del ow[i]
            else:
                return True
        return False

    def _give(self, e):
        # the retained messages of owed entry e, in order, while its
        # session's queue has room (_takes); True once all are given. Each
        # is looked up as it goes: one cleared since is skipped, one
        # replaced goes as it is now.
        s, topics, j, g, sid, gr = e[0], e[1], e[2], e[3], e[4], e[5]
        rt = self.ret
        ret = self.retained
        r = self.route
        while j < len(topics):
            topic = topics[j]
            m = ret.get(topic)
            if m is None or (gr is not None and not gr.may_receive(topic, 0, len(topic))):
                j += 1  # cleared since, or a topic the ACL denies this client
                continue
            pr = rt.aged(topic) if rt.props else None
            if pr == b"":
                j += 1  # its message expiry interval has passed
                continue
            q, pl = m
            if not self._takes(s, len(topic) + len(pl) + MSG_COST + (len(pr) if pr else 0)):
                break
            j += 1
            r.set(topic, 0, len(topic), pl, 0, len(pl), q if q < g else g)
            if pr is not None:
                r.prs = pr
                r.prn = len(pr)
            if sid:
                # sent because of its SUBSCRIBE: its identifier goes with
                # it [MQTT-3.3.4-3 (5.0)], as with routing (_send_ids)
                self._send_with(s, r, r.qos, 1, (sid,))
            else:
                s.send(r, r.qos, 1)
        e[2] = j
        return j == len(topics)

    def _takes(self, s, size):
        # s's queue takes one more message of `size` bytes (msg_size)
        # without dropping anything: max_queued, max_queued_bytes and the
        # broker's mem_budget. An empty queue always takes one, so that
        # what is owed goes on whatever else holds memory.
        n = s.queued()
        if not n:
            return True
        lim = self.limits
        mb = lim.max_queued_bytes
        return n < lim.max_queued and not (mb and s.qb + size + ENTRY_COST > mb) and \
            not self.over(size + ENTRY_COST)

    def _owes(self, s):
        # s is owed retained messages and its queue has room for more
        if s.queued() >= self.limits.max_queued:
            return False
        for e in self.owed:
            if e[0] is s:
                return True
        return False

    def _unowe(self, s, f):
        # s is owed nothing more for filter f (None: for any)
        ow = self.owed
        i = len(ow) - 1
        while i >= 0:
            e = ow[i]
            if e[0] is s and (f is None or e[6] == f):
                del ow[i]
            i -= 1

    # ------------------------------------------------------------ routing
    def _route_of(self, c, p):
        """The Route filled from c's decoded PUBLISH p, for route_ready();
        None for a topic in $SYS, which clients do not publish into."""
        buf = p.buf
        toff = p.topic_off
        tn = p.topic_len
        if tn and buf[toff] == 36 and is_sys(buf, toff, tn):
            return None
        # every field of the Route (Route.set's, and the frame's), each
        # written once
        r = self.route
        r.psrc = buf
        r.poff = p.payload_off
        r.pn = p.payload_len
        r.qos = p.qos
        r.retain = p.retain
        r.src = s = c.sess
        r.msg = None
        r.tag = s.tag
        at = None
        if c.v5 is not None:
            r.flevel = 5
            at = self.atopic
        else:
            r.flevel = 4
            r.prs = None
            r.pro = r.prn = 0
        if at is None:
            r.tsrc = buf
            r.toff = toff
            r.tn = tn
            if r.flevel == 5:
                r.prs = buf
                r.pro = p.props_off
                r.prn = p.props_len
            f = self._foff
            r.frame = buf  # the frame is buf[f:p.end] (see Session._put)
            r.foff = f
            r.flen = p.end - f
            r.fpid = toff + tn - f
        else:
            # a topic alias: its topic, its properties less the alias
            r.tsrc = at
            r.toff = 0
            r.tn = len(at)
            r.prs = ap = self.aprops
            r.pro = 0
            r.prn = len(ap)
            r.frame = None
            r.foff = r.flen = r.fpid = 0
        return r

    def route_ready(self, r):
        """Route r, once filled (_route_of's, broker_bytes fills its own):
        refused (QueueFull) before anything is routed or retained, else
        retained and routed."""
        subs = self.subs
        n = subs.match(r.tsrc, r.toff, r.tn, r.src)
        try:
            if n == 1 and r.qos and not r.retain and self.bridge is None:
                # one session at QoS 1/2 (fan-in: many publishers, one
                # subscriber), nothing retained: _refuse_full's and _route's
                # steps for it in one call (Session.admit_send)
                s = subs.hit[0]
                g = subs.hq[0] & 0x13  # (broker_subs.SHARED, 0x10: _route sends those, marked)
                if g and g < 3 and s.fsid is None:
                    self.nhit = 1
                    self.routed += 1
                    w = s.admit_send(r, g if g < r.qos else r.qos,
                                     r.tn + r.pn + (r.prn if r.prs is not None else 0) + MSG_COST)
                    if w:
                        if w == 1 and self.drop_full:
                            self._dropped_for(s)  # acknowledged: nobody else has it
                            return
                        self.nhit = -1
                        self.routed -= 1
                        self._why = w
                        raise QueueFull()
                    return
            if r.qos:
                w = self._refuse_full(r, n)
                if w:
                    if w == 3:
                        self._route_some(r, n)  # (queue_full "drop")
                        return
                    self._why = w
                    raise QueueFull()
            if self.bridge is not None:
                # queued for upstream, or refused, or held, before anything
                # is retained: a refused message is nobody's [MQTT-3.3.1-5]
                self._bridge(r)
            if r.retain:
                self._retain(r)
            self._route(r, n)
        finally:
            subs.release(n)

    def _bridge(self, r):
        # route_ready's: r to the bridges (bridge.Hub.route), which queue it
        # or refuse it (MQTTError 0x97), or return the bridge a node's r
        # waits for: QueueFull, nothing done, and refuse_publish holds it
        b = self.bridge.route(r)
        if b is not None:
            self._holder = b
            self._why = _HELD
            raise QueueFull()

    def _retain(self, r):
        # route_ready's: r kept as its topic's retained message, but a QoS 0
        # one that would pass mem_budget
        if r.pn and not r.qos and self.over(msg_size(r)) and \
                self.over(msg_size(r) - self.ret.replaced(r)):
            self.dropped += 1  # a QoS 0 retained message not kept: mem_budget
            self.dropped_mem += 1
        else:
            self.ret.set(r)

    def _route_some(self, r, n):
        # route_ready's steps once _refuse_full has marked sessions to pass
        # over (queue_full "drop"): the bridge, the retained message, then
        # _route_but; the marks go whatever happens
        try:
            if self.bridge is not None:
                self._bridge(r)
            if r.retain:
                self._retain(r)
            self._route_but(r, n)
        finally:
            self._unmark(n)

    def _refuse_full(self, r, n):
        # Whether the QoS 1/2 message r is refused before anything is
        # routed or retained: 1 when one of the n matching sessions
        # (subs.hit; a shared group's member that gets it) could not queue
        # it (Session.queue_full), 2 when holding it, queued by one of them
        # or retained, would pass the broker's mem_budget; else 0. With
        # queue_full "drop", a session that could not queue it is marked
        # (Session.qskip) instead, for _route_but to pass over, and 3 says
        # so (the mem_budget refusal stays one, its marks taken back). 5
        # (_RETAINED) when it is retained, for a new topic, and
        # max_retained topics are kept: it would be acknowledged and not
        # kept [MQTT-3.3.1-5]; at MQTT 5 alone, whose PUBACK can refuse. A
        # 3.1.1 refusal closes the link, and its publisher sends the same
        # message first on every connection after [MQTT-4.4.0-1]: nothing
        # behind it would ever pass, so there it is delivered, not kept
        # (Retained.set). No allocation (but that last check's, for a
        # retained message once the limit is reached).
        if r.retain and r.src is not None and r.src.level == 5 and self.ret.full(r):
            return _RETAINED
        hit = self.subs.hit
        hq = self.subs.hq
        size = r.tn + r.pn + (r.prn if r.prs is not None else 0) + MSG_COST  # (msg_size)
        held = False  # queued by a session
        some = False  # a session marked
        q = r.qos
        i = 0
        while i < n:
            g = hq[i] & 3
            if g:
                s = hit[i]
                w = s.admit(r, g if g < q else q, size)
                if w < 0:
                    if not self.drop_full:
                        return 1
                    s.qskip = some = True
                elif w:
                    held = True
            i += 1
        if held:
            # queued (once, however many queue it), and retained too: a copy
            # of its own, less what it replaces [MQTT-3.3.1-5]
            w = 2 if self.over(size + ENTRY_COST) or (
                r.retain and r.pn and self.over(size + ENTRY_COST + size) and
                self.over(size + ENTRY_COST + size - self.ret.replaced(r))) else 0
        else:
            # retained only: it costs what it adds to the message it
            # replaces [MQTT-3.3.1-5]
            w = 2 if r.retain and r.pn and self.over(size) and \
                self.over(size - self.ret.replaced(r)) else 0
        if not some:
            return w
        if w:
            self._unmark(n)
            return w
        return 3

    def _unmark(self, n):
        # take back the marks _refuse_full put on the first n hits
        hit = self.subs.hit
        i = 0
        while i < n:
            s = hit[i]
            if s.qskip:
                s.qskip = False
            i += 1

    def _dropped_for(self, s):
        # s does not get a QoS 1/2 message its full queue cannot take
        # (queue_full "drop"): counted; logged once until its queue drains
        # (Session.pump), as mosquitto does
        self.dropped += 1
        self.dropped_full += 1
        if not s.dropping:
            s.dropping = True
            if self.log is not None:
                self._log("outgoing messages are being dropped for client %s: its queue is full",
                          s.cid.decode())

    def _route_but(self, r, n):
        # _route(r, n) less the sessions _refuse_full marked (queue_full
        # "drop"; _route_some unmarks them): those do not get r
        # (_dropped_for), every other does. A loop of its own, so that
        # _route pays no check per delivery. A shared group whose member
        # is marked does not get r: the turn has passed to that member,
        # and r is dropped for the group.
        subs = self.subs
        hit = subs.hit
        hq = subs.hq
        qos = r.qos
        rf = 1 if r.retain else 0
        m = subs.np if subs.groups else n
        self.nhit = n
        self.routed += n
        err = None
        i = 0
        while i < n:
            s = hit[i]
            g = hq[i]
            if s.qskip:
                self._dropped_for(s)
            else:
                try:
                    if i >= m:
                        self._send_shared(s, r, qos, g, rf if g & 8 else 0, subs.hf[i])
                    else:
                        ra = rf if g & 8 else 0
                        g &= 3
                        if s.fsid is not None and s.level == 5:
                            self._send_ids(s, r, qos if qos < g else g, ra, None)
                        else:
                            s.send(r, qos if qos < g else g, ra)
                except OSError as e:
                    err = e  # (as _route)
            i += 1
        if err is not None:
            raise err

    def _route(self, r, n=-1):
        """Send r to every session with a matching subscription, once per
        session at the highest granted QoS [MQTT-3.3.5-1], capped by the
        published QoS. n: how many route_ready matched (subs.hit), which it
        releases, having asked the bridge; -1: matched here. A will from a
        slot of late (wbit: its bit, _late_one) goes to each bridge and
        session it has not reached yet, marking each as it goes, so that
        a MemoryError part way leaves the marks for the next try (_late)."""
        subs = self.subs
        own = n < 0
        bit = self.wbit
        if own and self.bridge is not None:
            self.bridge.route(r)  # queued for upstream, or refused, first
        if own:
            n = subs.match(r.tsrc, r.toff, r.tn, r.src)
        self.nhit = n
        self.routed += n
        hit = subs.hit
        hq = subs.hq
        qos = r.qos
        rf = 1 if r.retain else 0
        err = None
        i = 0
        # a shared group's hits come after the others (Subs.match): those
        # pay no check per delivery, these are marked (_send_shared)
        m = subs.np if subs.groups else n
        while i < m:
            s = hit[i]
            if bit and not mark_late(s, bit):
                i += 1
                continue  # (reached by an earlier try)
            g = hq[i]
            ra = rf if g & 8 else 0  # retain as published [MQTT-3.3.1-12 (5.0)]
            g &= 3
            try:
                if s.fsid is not None and s.level == 5:
                    self._send_ids(s, r, qos if qos < g else g, ra, None)
                else:
                    s.send(r, qos if qos < g else g, ra)
            except OSError as e:
                err = e  # a store write failed (counted): the others still get theirs
            except MemoryError:
                self._unroute(s, bit, own, n)
                raise
            i += 1
        while i < n:
            s = hit[i]
            if bit and not mark_late(s, bit):
                i += 1
                continue
            g = hq[i]
            try:
                self._send_shared(s, r, qos, g, rf if g & 8 else 0, subs.hf[i])
            except OSError as e:
                err = e
            except MemoryError:
                self._unroute(s, bit, own, n)
                raise
            i += 1
        if bit:
            unmark_late(hit, n, bit)  # the will is out: its slot's marks go
        if own:
            subs.release(n)
        if err is not None:
            raise err  # not acknowledged: the publisher sends it again

    def _unroute(self, s, bit, own, n):
        # a MemoryError in _route's copy to s: a will's mark taken back
        # (not reached), the hits released
        if bit:
            s.got_late &= ~bit
        if own:
            self.subs.release(n)

    def _send_shared(self, s, r, qos, g, ra, gf):
        # r to s by the turn of shared group gf (g: hq's byte), its QoS 1/2
        # copy marked so (Session.mark_shared): handed on if s ends first
        g &= 3
        if g > qos:
            g = qos
        pid = s.npid
        if s.fsid is not None and s.level == 5:
            self._send_ids(s, r, g, ra, gf)
        else:
            s.send(r, g, ra)
        if g and s.npid != pid:
            s.mark_shared(s.npid)

    def _send_ids(self, s, r, q, ra, gf):
        # r with the identifiers of the subscriptions of s it came by added
        # to its properties (gf: a shared group's filter) [MQTT-3.3.4-3
        # (5.0)] [MQTT-3.3.4-5]; r is as before for the next session
        self._send_with(s, r, q, ra, self.subs.ids(s, r.tsrc, r.toff, r.tn, gf, r.src))

    def _send_with(self, s, r, q, ra, ids):
        # r to s with subscription identifiers ids added to its properties
        # (none: r as it is); r is as before for the next session
        if not ids:
            s.send(r, q, ra)
            return
        prs, pro, prn, fr, m = r.prs, r.pro, r.prn, r.frame, r.msg
        r.prs = self.b5.with_ids(r, ids)
        r.pro = 0
        r.prn = len(r.prs)
        r.frame = None
        r.msg = None  # its own properties: its own Msg if queued
        try:
            s.send(r, q, ra)
        finally:
            r.prs, r.pro, r.prn, r.frame, r.msg = prs, pro, prn, fr, m

    def publish(self, topic, payload, qos=0, retain=False, props=None):
        """Publish from the broker itself (wills, $SYS, an application);
        props: MQTT 5 property bytes (what props.encode gives) that level-5
        subscribers get."""
        topic = topic.encode() if isinstance(topic, str) else topic
        payload = payload.encode() if isinstance(payload, str) else payload
        self.publish_span(topic, 0, len(topic), payload, 0, len(payload), qos, retain, props)

    def publish_span(self, tsrc, toff, tn, psrc, poff, pn, qos=0, retain=False, props=None):
        """publish() of the topic tsrc[toff:toff+tn] and the payload
        psrc[poff:poff+pn], spans of the caller's buffers: no copy, no
        allocation (a bridge's messages from upstream)."""
        r = self.route
        r.set(tsrc, toff, tn, psrc, poff, pn, qos)
        r.retain = retain
        if props:
            r.prs = props
            r.prn = len(props)
        # nobody waits for an acknowledgement here (a will, say, from a
        # timer or a lost connection): a failed store write is counted in
        # store_errors and the broker goes on
        if retain:
            try:
                self.ret.set(r)
            except OSError:
                pass
        try:
            self._route(r)
        except OSError:
            pass

    # ------------------------------------------------------------ timers
    def tick(self, now):
        """Run the timers that are due at `now`; return when to call again."""
        if ticks_diff(now, self._t_timer) < 0:
            return self._t_timer
        self._t_timer = ticks_add(now, TIMER_MS)
        d = ticks_diff(now, self._t_prev)
        self._t_prev = now
        if d > 0:
            ms = self._up_ms + d
            self.up_s += ms // 1000
            self._up_ms = ms % 1000
        ct = self.limits.connect_timeout_ms
        cl = self.clients
        i = 0
        while i < len(cl):
            c = cl[i]
            i += 1
            if c.state == WAITING:
                if ct and ticks_diff(now, c.t_last) > ct:
                    self.disconnect(c, "no CONNECT in time", False)
            elif c.state == CONNECTED and c.ka and ticks_diff(now, c.t_last) > c.ka and \
                    c.held is None:
                # [MQTT-3.1.2-24]; a held connection's silence is ours (unhold)
                self.disconnect(c, "keepalive expired", True, 0x8D)
        # With the heap spent, a timer's work is put off, never raised out
        # of here: an expiry or a delayed will waits for the next second, a
        # will put off (late) for the next tick, a $SYS update is skipped
        # (the next one carries the figures)
        if self.nlate:
            try:
                self._late()
            except MemoryError:
                self.nomem += 1
        if d > 0 and ms >= 1000:
            self.carry()
            try:
                self._expire()
            except MemoryError:
                self.nomem += 1
            if self.disk is not None:
                self.disk.tick(self.up_s)
        si = self.limits.sys_interval
        if si and ticks_diff(now, self._t_sys) >= 0:
            self._t_sys = ticks_add(now, si * 1000)
            try:
                self._sys()
            except MemoryError:
                self.nomem += 1
        return self._t_timer

    def _expire(self):
        """Once a second: delayed wills that are due, and MQTT 5 sessions
        whose expiry interval has passed with no client [MQTT-3.1.2-23 (5.0)]."""
        up = self.up_s
        w = self.wills
        i = len(w) - 1
        while i >= 0:
            e = w[i]
            if up >= e[0]:
                # out, or in a slot of late (a MemoryError routing it with
                # none free, raised to tick: here again the next second)
                self._will_go(e[0], e[1], e[2], e[3], e[4], e[5], e[6])
                del w[i]
            i -= 1
        al = self.sess.all
        i = len(al) - 1
        while i >= 0:
            s = al[i]
            if s.client is None and s.exp_at >= 0 and up >= s.exp_at:
                self._log("session %s expired", s.cid.decode())
                self.expired += 1
                try:
                    self._drop(s)
                except OSError:
                    # counted in store_errors; the session ends all the same
                    # [MQTT-3.1.2-23 (5.0)]: its record, whose end time is
                    # on disk, ends at the next start
                    self.subs.drop(s)
                    self.sess.remove(s)
            i -= 1

    def _sys(self):
        # retained, so a new subscriber sees the figures at once
        pub = self._sys_pub
        pub("version", VERSION)
        pub("uptime", "%d seconds" % self.up_s)
        n = self.connected
        pub("clients/connected", n)
        pub("clients/active", n)  # (mosquitto's older name, still published)
        n = len(self.sess.all)
        pub("clients/total", n)
        n -= self.connected  # persistent sessions without a client
        pub("clients/disconnected", n)
        pub("clients/inactive", n)
        pub("clients/maximum", self.peak)
        pub("clients/expired", self.expired)
        n = k = 0  # subscriptions, and shared ones apart (as mosquitto's)
        read = self.load is not None  # whether anything reads $SYS (below)
        for x in self.subs.subscribers:
            for f in x.filters:
                i = shared_at(f)
                if i > 0:
                    k += 1
                else:
                    n += 1
                if not read and f[i:i + 5] == b"$SYS/":
                    read = True  # (no wildcard matches it first [MQTT-4.7.2-1])
        pub("subscriptions/count", n)
        pub("shared_subscriptions/count", k)
        t = self.total
        pub("messages/received", t("received") + t("others_in"))
        pub("messages/sent", t("sent") + t("others_out"))
        pub("publish/messages/received", t("received"))
        pub("publish/messages/sent", t("sent"))
        pub("publish/bytes/received", t("pub_in"))
        pub("publish/bytes/sent", t("pub_out"))
        pub("bytes/received", self.bytes_received())
        pub("bytes/sent", self.bytes_sent())
        pub("messages/dropped", self.dropped)
        # as mosquitto's: what a client's full queue did not take
        pub("publish/messages/dropped", self.dropped_full + self.dropped_q)
        # the messages held: retained ones ($SYS's too) and those queued or
        # in flight for a session (Session.held), with their payloads' bytes
        rt = self.retained
        acc = [len(rt), 0]
        for v in rt.values():
            acc[1] += len(v[1])
        for s in self.sess.all:
            s.held(acc)
        n = int(acc[0] + 0.5)
        pub("messages/stored", n)
        pub("store/messages/count", n)
        pub("store/messages/bytes", int(acc[1] + 0.5))
        pub("messages/refused/queue_full", self.queue_full)
        pub("messages/refused/mem_budget", self.refused_mem)
        pub("messages/refused/max_retained", self.refused_retained)
        pub("messages/dropped/mem_budget", self.dropped_mem)
        pub("messages/dropped/queue_full", self.dropped_full)
        pub("messages/queued/bytes", self.qbytes)
        pub("retained messages/bytes", self.ret.nbytes)
        pub("retained messages/count", len(self.retained))
        if self.disk is not None:
            pub("store/errors", self.store_errors)
        # MemoryErrors the broker went on from (see Stats.nomem): a gateway
        # whose heap runs short says so before it stops serving
        pub("heap/nomem", self.nomem)
        if self.bridge is not None:
            self.bridge.sys(pub)
        mf = mem_free()
        if mf is not None:
            pub("heap/free", mf)
        if read or self._sys_up():
            # the averages (1.5 KB of code) start once something can read
            # them: a gateway nobody watches does not load them
            from .broker_load import update
            update(self, pub)

    def _sys_up(self):
        # whether a bridge takes $SYS/broker/load/ up (`$SYS/# out`)
        h = self.bridge
        if h is not None:
            for b in h.all:
                for rule in b.rules:
                    if rule.takes_below((b"$SYS", b"broker", b"load")):
                        return True
        return False

    def _sys_pub(self, name, value):
        # a figure goes out when it has changed, as mosquitto's (its retained
        # copy holds the last value): an update is what a $SYS/# subscriber's
        # queue can take (max_queued), not every figure each time
        t = ("$SYS/broker/" + name).encode()
        v = str(value).encode()
        m = self.retained.get(t)
        if m is None or m[1] != v:
            self.publish(t, v, 0, True)

