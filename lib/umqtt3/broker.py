# umqtt3.broker -- a tiny MQTT 3.1/3.1.1 broker: one task, no threads.
#
#     b = Broker(host="0.0.0.0", port=1883)
#     b.serve_forever()                  # or: while True: b.poll_once(100)
#     await b.run()                      # or as an asyncio task
#
# One non-blocking listening socket and poll over the client sockets; links
# given to attach() (an in-memory transport.Pipe end, say) are serviced on
# every poll_once() too, so tests run broker and clients in one process.
# Per connection: a transport.Conn (receive and send buffers allocated when
# the connection is accepted), a session (broker_session.Session) that
# outlives the connection for CleanSession 0, and the will. Every packet is
# decoded with the codec into one shared Packet and answered by encoding
# into the connection's send buffer; the buffers are flushed once per
# poll_once(). Anything malformed or against the protocol closes that one
# connection. Limits are constructor arguments; see docs/broker.md.
#
# python -m umqtt3.broker --help   runs it on the desktop (broker_cli.py).
import gc

from . import compat
from .compat import ticks_ms, ticks_add, ticks_diff, POLLIN, POLLOUT, POLLHUP, POLLERR
from .codec import (Packet, decode, MQTTError, encode_simple, BAD_PROTOCOL_VERSION,
                    CONNECT, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP, SUBSCRIBE, UNSUBSCRIBE,
                    PINGREQ, PINGRESP, DISCONNECT)
from .codec_server import encode_connack, encode_suback, encode_unsuback, read_filter
from .topic import match_span
from .transport import Conn
from .flow import Flow
from .broker_session import Session, publish_size

VERSION = "umqtt3 0.1.0"

# CONNACK return codes (3.1.1 table 3.1)
_BAD_LEVEL = 1
_BAD_ID = 2
_UNAVAILABLE = 3
_BAD_AUTH = 4
_NOT_AUTHORIZED = 5

_TIMER_MS = 100  # how often keepalives and connect timeouts are checked


class _Buffered:
    """CPython only: a socket link read in large gulps, handed out to the
    exact reads of transport.Conn from memory. Saves the two recv calls
    per packet that exact reads cost; a MicroPython broker reads the socket
    directly and keeps the RAM."""

    def __init__(self, link, size=16384):
        self.link = link
        self.buf = bytearray(size)
        self.mv = memoryview(self.buf)
        self.pos = 0
        self.end = 0

    def readinto(self, buf, n):
        if self.pos >= self.end:
            r = self.link.readinto(self.buf, len(self.buf))
            if not r:
                return r
            self.pos = 0
            self.end = r
        k = self.end - self.pos
        if k > n:
            k = n
        buf[:k] = self.mv[self.pos:self.pos + k]
        self.pos += k
        return k

    def write(self, buf, off=0, n=-1):
        return self.link.write(buf, off, n)

    def close(self):
        self.link.close()


class _Client:
    """One network connection."""

    def __init__(self, conn, sock, peer, now):
        self.conn = conn
        self.sock = sock  # registered with the poller; None for attached links
        self.peer = peer
        self.state = 0  # 0: waiting for CONNECT, 1: connected, 2: closed
        self.sess = None
        self.level = 4
        self.cid = None
        self.t_last = now  # last complete packet (or the accept)
        self.ka = 0  # keepalive limit in ms, 0 = none
        self.will_t = None
        self.will_m = None
        self.will_q = 0
        self.will_r = False
        self.blocked = False  # not reading until the send buffer drains
        self.kick = False  # run it without waiting for poll
        self.buffered = False  # its link is a _Buffered
        self.doom = None  # reason, when a write failed inside routing
        self.mask = POLLIN


class Broker:
    def __init__(self, host="127.0.0.1", port=1883, max_clients=8, max_packet=1024,
                 max_subs=16, max_inflight=8, max_qos2_in=32, max_queued=32, queue_qos0=False,
                 txsize=0, ring_size=0, max_retained=128, max_pending=4,
                 users=None, allow_anonymous=None, store=None, max_sessions=16,
                 connect_timeout_ms=10000, sys_interval=10,
                 log=None, backlog=4, burst=16, sndbuf=0, files=None, allow_fat=False,
                 clock=None):
        self.max_clients = max_clients
        self.max_packet = max_packet
        self.max_subs = max_subs
        self.max_inflight = max_inflight
        self.max_qos2_in = max_qos2_in
        self.max_queued = max_queued
        # queued QoS 1/2 messages hold their packet ids too (Session._pid)
        if max_inflight + max_queued >= 65535:
            raise ValueError("max_inflight + max_queued must stay below 65535")
        self.max_sessions = max_sessions  # persistent sessions kept
        self.queue_qos0 = queue_qos0
        self.txsize = max(txsize, max_packet)
        self.ring_size = max(ring_size, max_packet)
        self.max_frame = min(self.txsize, self.ring_size)
        self.max_retained = max_retained
        self.max_pending = max_pending
        self.users = users  # {user bytes: password bytes} or None
        self.allow_anonymous = (users is None) if allow_anonymous is None else allow_anonymous
        self.connect_timeout_ms = connect_timeout_ms
        self.sys_interval = sys_interval
        self.log = log  # callable(str) or None
        # milliseconds in ticks_ms's range; a test passes a clock it moves itself
        self.ticks = clock or ticks_ms
        self.burst = burst
        self.sndbuf = sndbuf  # SO_SNDBUF for client sockets; 0: the OS default
        # statistics ($SYS/broker/...)
        self.received = 0
        self.sent = 0
        self.dropped = 0
        self.refused = 0
        self.errors = 0  # internal errors (a bug): the connection was closed
        self.store_errors = 0  # store writes that failed (nothing was acknowledged)
        self.connected = 0
        # state
        self._pkt = Packet(4)
        # inbound QoS 0/1/2 is flow.py's receiver, shared with the client; the
        # store it uses is the sending client's session (set per packet)
        self.flow = Flow(None, self)
        self.fsrc = None  # the PUBLISH frame being routed, when from a client
        self.flen = 0
        self.fpid = 0
        self._clients = []
        self._pipes = []
        self._socks = {}
        self._sess = {}  # client id -> Session
        self._slist = []  # the same sessions, for iteration
        self.retained = {}  # topic bytes -> (qos, payload bytes)
        self._nsys = 0  # how many of those are $SYS/ topics (not limited)
        self._ndead = 0
        self._hot = False  # a client has work that poll cannot see
        self._nauto = 0
        self._stop = False
        self._npersist = 0  # persistent sessions
        self.ntag = 0  # the last tag given to a QoS 2 routing (Session.in_add)
        self.rtag = -1  # the tag of the routing under way, -1: none
        now = self.ticks()
        self._t_timer = now
        self._t_prev = now
        self._t_sys = now
        self._up_s = 0
        self._up_ms = 0
        self.store = store
        self.disk = None
        if store:
            from .broker_store import Disk
            self.disk = Disk(self, store, files, allow_fat)
            self.disk.load()
        self._sock = None
        self._poller = None
        self.port = port
        if port is not None:
            self._listen(host, port, backlog)

    # ------------------------------------------------------------ set-up
    def _listen(self, host, port, backlog):
        so = compat.socket
        info = so.getaddrinfo(host, port, 0, so.SOCK_STREAM)[0]
        s = so.socket(info[0], so.SOCK_STREAM)
        s.setsockopt(so.SOL_SOCKET, so.SO_REUSEADDR, 1)
        s.bind(info[-1])
        s.listen(backlog)
        s.setblocking(False)
        try:
            self.port = s.getsockname()[1]  # type: ignore[attr-defined, unused-ignore]
        except Exception:
            pass  # not every MicroPython port has getsockname
        self._sock = s
        self._poller = compat.poll()
        self._poller.register(s, POLLIN)

    def attach(self, link, peer="pipe"):
        """Serve one connection over a link (e.g. a transport.Pipe end)."""
        c = _Client(Conn(link, self.max_packet, self.txsize), None, peer, self.ticks())
        self._clients.append(c)
        self._pipes.append(c)
        return c

    def _accept(self):
        while True:
            try:
                s, addr = self._sock.accept()
            except OSError:
                return
            if len(self._clients) >= self.max_clients + self.max_pending:
                # more connections than clients plus those still to send
                # CONNECT: closed at once, before any buffer is allocated
                s.close()
                self.refused += 1
                if self.log is not None:
                    self._log("refused %s: too many connections", (addr,))
                continue
            s.setblocking(False)
            compat.nodelay(s)
            if self.sndbuf:
                # bounds what a reader that stalls holds in the kernel too
                try:
                    s.setsockopt(compat.socket.SOL_SOCKET,  # no SO_SNDBUF on MicroPython: caught
                                 compat.socket.SO_SNDBUF,  # type: ignore[attr-defined, unused-ignore]
                                 self.sndbuf)
                except (AttributeError, OSError):
                    pass
            if isinstance(addr, tuple):
                addr = "%s:%s" % (addr[0], addr[1])
            link = compat.link(s)  # type: object
            if not compat.MICROPYTHON:
                link = _Buffered(link)
            c = _Client(Conn(link, self.max_packet, self.txsize), s, addr, self.ticks())
            c.buffered = not compat.MICROPYTHON
            self._clients.append(c)
            self._socks[s] = c
            self._poller.register(s, POLLIN)

    def _log(self, fmt, arg):
        if self.log is not None:
            try:
                self.log(fmt % arg)
            except Exception:
                pass

    # ------------------------------------------------------------ the loop
    def poll_once(self, timeout_ms=0):
        """Accept, read and answer what is ready, waiting at most timeout_ms
        for sockets; flush, run timers. Returns the packets handled."""
        work = 0
        if self._poller is not None:
            if self._pipes or self._hot:
                timeout_ms = 0
                self._hot = False
            incoming = False
            for ev in self._poller.ipoll(timeout_ms):
                obj = ev[0]
                e = ev[1]
                if obj is self._sock:
                    incoming = True  # accepted after the loop: no register() while iterating
                    continue
                c = self._socks.get(obj)
                if c is None or c.state == 2:
                    continue
                if e & POLLOUT:
                    self.flush(c)
                if c.blocked:
                    if e & (POLLHUP | POLLERR):
                        self._close(c, "connection lost", True)
                elif e & (POLLIN | POLLHUP | POLLERR):
                    work += self._run(c)
            if incoming:
                self._accept()
        pipes = self._pipes
        i = 0
        while i < len(pipes):
            c = pipes[i]
            if c.state != 2 and not c.blocked:
                work += self._run(c)
            i += 1
        cl = self._clients
        i = 0
        while i < len(cl):
            c = cl[i]
            if c.state != 2:
                if c.kick:
                    c.kick = False
                    if not c.blocked:
                        work += self._run(c)
                s = c.sess
                if c.state != 2 and (c.conn.tlen or (s is not None and (s.unsent or s.q))):
                    self.flush(c)
                if c.doom is not None:
                    self._close(c, c.doom, True)
            i += 1
        now = self.ticks()
        if ticks_diff(now, self._t_timer) >= 0:
            self._t_timer = ticks_add(now, _TIMER_MS)
            self._timers(now)
        if self._ndead:
            self._reap()
        return work

    def serve_forever(self, tick_ms=_TIMER_MS):
        self._stop = False
        while not self._stop:
            self.poll_once(tick_ms)

    async def run(self, idle_ms=10):
        """asyncio task form: poll_once(0), then yield to the other tasks."""
        import asyncio
        sleep_ms = getattr(asyncio, "sleep_ms", None)
        self._stop = False
        while not self._stop:
            n = self.poll_once(0)
            ms = 0 if n else idle_ms
            if sleep_ms is not None:
                await sleep_ms(ms)
            else:
                await asyncio.sleep(ms / 1000)

    def stop(self):
        """Make serve_forever() / run() return after the current step."""
        self._stop = True

    def close(self):
        """Close every connection and the listening socket. The store needs
        no saving: it was written before each acknowledgement."""
        for c in self._clients:
            if c.state != 2:
                c.state = 2
                if c.sess is not None and c.sess.client is c:
                    c.sess.client = None
                self._ndead += 1
        self.connected = 0
        self._reap()
        for s in self._slist[:]:
            if s.clean:
                self._drop(s)
        if self._sock is not None:
            self._poller.unregister(self._sock)
            self._sock.close()
            self._sock = None
            self._poller = None
        self._stop = True

    def _run(self, c):
        """Read and handle up to `burst` packets from one connection."""
        conn = c.conn
        p = self._pkt
        k = 0
        se = self.store_errors
        try:
            while k < self.burst and c.state != 2:
                n = conn.recv()
                if not n:
                    break
                t = conn.rx[0] >> 4
                need = n if t == SUBSCRIBE else 8
                if conn.space() < need:
                    self.flush(c)
                    if conn.space() < need:
                        c.blocked = True  # the peer is not reading: wait
                        self._mask(c)
                        break
                c.t_last = self.ticks()
                p.level = c.level
                decode(p, conn.rx, 0, n)
                if c.state == 0:
                    if t != CONNECT:
                        self._close(c, "first packet is not CONNECT", False)  # [MQTT-3.1.0-1]
                        break
                    self._connect(c, p)
                else:
                    self._packet(c, p, t)
                conn.done()
                k += 1
        except MQTTError as e:
            self.fsrc = None
            self.rtag = -1  # no routing goes on past a packet that failed
            if c.state == 0 and e.code == BAD_PROTOCOL_VERSION and conn.rx[0] == 0x10:
                # unacceptable protocol level: CONNACK 1, then close [MQTT-3.1.2-2]
                self._refuse(c, _BAD_LEVEL, "unsupported protocol level")
            else:
                self._close(c, "protocol error: " + e.reason, True)  # [MQTT-4.8.0-1]
        except OSError:
            self.fsrc = None
            self.rtag = -1
            # a store write that failed (counted) is not acknowledged: the
            # client sends again on its next connection
            self._close(c, "store write failed" if self.store_errors != se
                        else "connection lost", True)
        except Exception as e:
            self.fsrc = None
            self.rtag = -1
            self.errors += 1
            self._close(c, "internal error: %r" % (e,), True)
        if c.buffered and c.state != 2 and not c.blocked:
            link = conn.link
            if link.pos < link.end:
                # bytes left in memory (burst limit): poll would not report them
                c.kick = True
                self._hot = True
        return k

    def flush(self, c):
        """Write what is queued for c; move waiting messages into its send
        buffer as it drains. Never blocks; a failed write dooms c."""
        conn = c.conn
        try:
            while True:
                if conn.tlen and not conn.flush():
                    break
                s = c.sess
                if s is None or s.client is not c or not (s.unsent or s.q):
                    break
                s.pump()
                if not conn.tlen:
                    break
        except OSError:
            if c.doom is None:
                c.doom = "connection lost"
            return
        if c.blocked and conn.space() >= conn.max_packet:
            # the packet that did not fit may be whole in rx already, with
            # nothing left in the socket to wake poll: poll_once runs it
            c.blocked = False
            c.kick = True
            self._hot = True
        self._mask(c)

    def _mask(self, c):
        if c.sock is None:
            return
        m = (0 if c.blocked else POLLIN) | (POLLOUT if c.conn.tlen else 0)
        if m != c.mask:
            c.mask = m
            self._poller.modify(c.sock, m)

    # ------------------------------------------------------------ closing
    def _close(self, c, why, will):
        """Close a connection; publish its will when `will` and it has one
        [MQTT-3.1.2-8]. The socket is released by _reap()."""
        if c.state == 2:
            return
        was = c.state
        c.state = 2
        self._ndead += 1
        wt = c.will_t
        c.will_t = None
        if was == 1:
            self.connected -= 1
            s = c.sess
            if s is not None and s.client is c:
                s.client = None
                if s.clean:
                    self._drop(s)  # [MQTT-3.1.2-6]
            if self.log is not None:
                self._log("disconnect %s: %s", (c.cid.decode(), why))
            if will and wt is not None:
                self.publish(wt, c.will_m, c.will_q, c.will_r)
        elif self.log is not None:
            self._log("closed %s: %s", (c.peer, why))

    def _refuse(self, c, rc, why):
        conn = c.conn
        if conn.space() >= 4:
            conn.tlen = encode_connack(conn.tx, conn.tlen, False, rc)
        self.refused += 1
        if self.log is not None:
            why = "refused (CONNACK %d): %s" % (rc, why)
        self._close(c, why, False)

    def _reap(self):
        cl = self._clients
        i = 0
        while i < len(cl):
            c = cl[i]
            if c.state != 2:
                i += 1
                continue
            conn = c.conn
            try:
                conn.flush()  # a refusal's CONNACK
            except Exception:
                pass
            if c.sock is not None:
                try:
                    self._poller.unregister(c.sock)
                except Exception:
                    pass
                self._socks.pop(c.sock, None)
            else:
                self._pipes.remove(c)
            conn.close()
            cl.pop(i)
        self._ndead = 0

    def _drop(self, s):
        if not s.clean:
            if self.disk is not None:
                self.disk.drop_session(s)  # gone from disk before CONNACK
            self._npersist -= 1
        del self._sess[s.cid]
        self._slist.remove(s)

    # ------------------------------------------------------------ CONNECT
    def _connect(self, c, p):
        conn = c.conn
        buf = p.buf
        c.level = p.level
        if p.level == 5:
            conn.tlen = encode_connack(conn.tx, conn.tlen, False, BAD_PROTOCOL_VERSION, 5)
            self.refused += 1
            self._close(c, "MQTT 5 is not supported yet", False)
            return
        cid = bytes(buf[p.cid_off:p.cid_off + p.cid_len])
        if not cid:
            if not p.clean or p.level == 3:
                self._refuse(c, _BAD_ID, "empty client id")  # [MQTT-3.1.3-8]
                return
            cid = self._new_id()  # [MQTT-3.1.3-6]
        rc = self._auth(p)
        if rc:
            self._refuse(c, rc, "authentication")
            return
        old = self._sess.get(cid)
        if old is not None and old.client is not None:
            # the id is in use: the older connection goes [MQTT-3.1.4-2]
            self._close(old.client, "taken over", True)
        elif self.connected >= self.max_clients:
            self._refuse(c, _UNAVAILABLE, "max clients reached")
            return
        old = self._sess.get(cid)
        present = False
        if p.clean:
            if old is not None:
                self._drop(old)  # [MQTT-3.1.2-6]
            s = None
        else:
            s = old
            present = s is not None  # [MQTT-3.2.2-2]
        if s is None:
            s = Session(self, cid, p.clean)
            if not p.clean:
                if self._npersist >= self.max_sessions:
                    self._refuse(c, _UNAVAILABLE, "max sessions reached")
                    return
                if self.disk is not None:
                    self.disk.add_session(s)  # [MQTT-3.1.2-4], before CONNACK
                self._npersist += 1
            self._sess[cid] = s
            self._slist.append(s)
        c.cid = cid
        c.sess = s
        c.state = 1
        self.connected += 1
        c.ka = p.keepalive * 1500  # [MQTT-3.1.2-24]
        if p.will:
            c.will_t = bytes(buf[p.topic_off:p.topic_off + p.topic_len])
            c.will_m = bytes(buf[p.payload_off:p.payload_off + p.payload_len])
            c.will_q = p.qos
            c.will_r = p.retain
        # session present only for 3.1.1 [MQTT-3.2.2-1..3]
        conn.tlen = encode_connack(conn.tx, conn.tlen, present and p.level == 4, 0)
        s.attach(c)  # resend what was in flight [MQTT-4.4.0-1]
        if self.log is not None:
            self._log("connect %s from %s (clean %d, keepalive %d)",
                      (cid.decode(), c.peer, p.clean, p.keepalive))

    def _new_id(self):
        while True:
            self._nauto += 1
            cid = ("umqtt3-%d" % self._nauto).encode()
            if cid not in self._sess:
                return cid

    def _auth(self, p):
        """CONNACK return code for the credentials: 0 when accepted."""
        buf = p.buf
        if p.user_off < 0:
            return 0 if self.allow_anonymous else _NOT_AUTHORIZED
        users = self.users
        if users is None:
            return 0
        pw = users.get(bytes(buf[p.user_off:p.user_off + p.user_len]))
        if pw is None:
            return _BAD_AUTH
        if p.pw_off < 0:
            return 0 if not pw else _BAD_AUTH
        return 0 if bytes(buf[p.pw_off:p.pw_off + p.pw_len]) == pw else _BAD_AUTH

    # ------------------------------------------------------------ packets
    def deliver(self, p, redelivered):
        """Flow hands each inbound PUBLISH over once (a QoS 2 resend before
        PUBREL is answered, not routed again): retain it and route it."""
        buf = p.buf
        toff = p.topic_off
        tn = p.topic_len
        if tn >= 5 and buf[toff] == 36 and buf[toff + 1] == 83 and buf[toff + 2] == 89 \
                and buf[toff + 3] == 83 and buf[toff + 4] == 47:
            return  # clients do not publish into $SYS
        if p.retain:
            self._retain(buf, toff, tn, buf, p.payload_off, p.payload_len, p.qos)
        self.fsrc = buf  # the frame is buf[0:p.end] (see Session._put)
        self.flen = p.end
        self.fpid = toff + tn
        self._route(buf, toff, tn, buf, p.payload_off, p.payload_len, p.qos)
        self.fsrc = None

    def _packet(self, c, p, t):
        conn = c.conn
        s = c.sess
        if t == PUBLISH:
            self.received += 1
            f = self.flow
            f.store = s  # the session holds this client's inbound QoS 2 ids
            f.on_publish(conn, p)
        elif t == PUBACK or t == PUBREC or t == PUBCOMP or t == PUBREL:
            # the client's machine on both sides: outbound acks change the
            # session's ring (and its records), PUBREL forgets an inbound id,
            # each durably before PUBREL / PUBCOMP is written
            f = self.flow
            f.store = s
            f.on_ack(conn, p)
        elif t == PINGREQ:
            conn.tlen = encode_simple(conn.tx, conn.tlen, PINGRESP)
        elif t == SUBSCRIBE:
            self._subscribe(c, p)
        elif t == UNSUBSCRIBE:
            i = p.payload_off
            end = i + p.payload_len
            while i < end:
                i = read_filter(p, i)
                s.unsubscribe(p.buf, p.f_off, p.f_len)
            if self.disk is not None:
                self.disk.save_session(s)  # durable before UNSUBACK
            conn.tlen = encode_unsuback(conn.tx, conn.tlen, p.pid)  # [MQTT-3.10.4-4]
        elif t == DISCONNECT:
            self._close(c, "DISCONNECT", False)  # will discarded [MQTT-3.14.4-3]
        elif t == CONNECT:
            self._close(c, "second CONNECT", True)  # [MQTT-3.1.0-2]
        else:
            self._close(c, "unexpected packet type %d" % t, True)

    def _subscribe(self, c, p):
        conn = c.conn
        s = c.sess
        codes = bytearray()
        i = p.payload_off
        end = i + p.payload_len
        while i < end:
            i = read_filter(p, i)
            codes.append(s.subscribe(p.buf, p.f_off, p.f_len, p.opts & 3))
        if self.disk is not None:
            self.disk.save_session(s)  # durable before SUBACK
        # one return code per filter, in order [MQTT-3.8.4-5]
        conn.tlen = encode_suback(conn.tx, conn.tlen, p.pid, codes)
        # then the retained messages of each granted filter [MQTT-3.3.1-6]
        i = p.payload_off
        k = 0
        ret = self.retained
        while i < end:
            i = read_filter(p, i)
            g = codes[k]
            k += 1
            if g == 0x80 or not ret:
                continue
            fb = p.buf
            fo = p.f_off
            fn = p.f_len
            for topic in ret:
                if match_span(fb, fo, fn, topic, 0, len(topic)):
                    q, pl = ret[topic]
                    s.deliver(topic, 0, len(topic), pl, 0, len(pl), q if q < g else g, 1)

    # ------------------------------------------------------------ routing
    def _route(self, tsrc, toff, tn, psrc, poff, pn, qos):
        """Deliver a message to every session with a matching subscription,
        once per session at the highest granted QoS [MQTT-3.3.5-1], capped
        by the published QoS."""
        sl = self._slist
        err = None
        i = 0
        while i < len(sl):
            s = sl[i]
            i += 1
            fl = s.filters
            m = len(fl)
            if not m:
                continue
            best = -1
            j = 0
            while j < m:
                f = fl[j]
                if match_span(f, 0, len(f), tsrc, toff, tn):
                    g = s.fqos[j]
                    if g > best:
                        best = g
                j += 1
            if best >= 0:
                try:
                    s.deliver(tsrc, toff, tn, psrc, poff, pn, qos if qos < best else best, 0)
                except OSError as e:
                    err = e  # a store write failed (counted): the others still get theirs
        if err is not None:
            raise err  # not acknowledged: the publisher sends it again

    def _retain(self, tsrc, toff, tn, psrc, poff, pn, qos):
        key = bytes(tsrc[toff:toff + tn])
        ret = self.retained
        sysk = key.startswith(b"$SYS/")  # the broker's own: not limited, not saved
        if not pn:
            # an empty retained message clears, and is not stored [MQTT-3.3.1-10, -11]
            if ret.pop(key, None) is not None:
                if sysk:
                    self._nsys -= 1
                elif self.disk is not None:
                    self.disk.unretain(key)  # before the PUBACK / PUBREC
            return
        new = key not in ret
        if new and not sysk and len(ret) - self._nsys >= self.max_retained:
            self.dropped += 1
            if self.log is not None:
                self._log("retained message on %s not kept: max retained reached", (key.decode(),))
            return
        if publish_size(tn, pn, qos) > self.max_frame:
            return
        pl = bytes(psrc[poff:poff + pn])
        if not sysk and self.disk is not None:
            self.disk.retain(key, qos, pl)  # before the PUBACK / PUBREC
        ret[key] = (qos, pl)  # replaces [MQTT-3.3.1-5]
        if sysk and new:
            self._nsys += 1

    def publish(self, topic, payload, qos=0, retain=False):
        """Publish from the broker itself (wills, $SYS, an application)."""
        topic = compat.as_bytes(topic)
        payload = compat.as_bytes(payload)
        self.fsrc = None
        # nobody waits for an acknowledgement here (a will, say, from a
        # timer or a lost connection): a failed store write is counted in
        # store_errors and the broker goes on
        if retain:
            try:
                self._retain(topic, 0, len(topic), payload, 0, len(payload), qos)
            except OSError:
                pass
        try:
            self._route(topic, 0, len(topic), payload, 0, len(payload), qos)
        except OSError:
            pass

    # ------------------------------------------------------------ timers
    def _timers(self, now):
        d = ticks_diff(now, self._t_prev)
        self._t_prev = now
        if d > 0:
            ms = self._up_ms + d
            self._up_s += ms // 1000
            self._up_ms = ms % 1000
        ct = self.connect_timeout_ms
        cl = self._clients
        i = 0
        while i < len(cl):
            c = cl[i]
            i += 1
            if c.state == 0:
                if ct and ticks_diff(now, c.t_last) > ct:
                    self._close(c, "no CONNECT in time", False)
            elif c.state == 1 and c.ka and ticks_diff(now, c.t_last) > c.ka:
                self._close(c, "keepalive expired", True)  # [MQTT-3.1.2-24]
        if self.sys_interval and ticks_diff(now, self._t_sys) >= 0:
            self._t_sys = ticks_add(now, self.sys_interval * 1000)
            self._sys()

    def _sys(self):
        # retained, so a new subscriber sees the figures at once
        pub = self._sys_pub
        pub("version", VERSION)
        pub("uptime", "%d seconds" % self._up_s)
        pub("clients/connected", self.connected)
        pub("clients/total", len(self._slist))
        pub("clients/maximum", self.max_clients)
        pub("messages/received", self.received)
        pub("messages/sent", self.sent)
        pub("messages/dropped", self.dropped)
        pub("retained messages/count", len(self.retained))
        if self.store:
            pub("store/errors", self.store_errors)
        mf = getattr(gc, "mem_free", None)
        if mf is not None:
            pub("heap/free", mf())

    def _sys_pub(self, name, value):
        t = ("$SYS/broker/" + name).encode()
        v = str(value).encode()
        self._retain(t, 0, len(t), v, 0, len(v), 0)
        self._route(t, 0, len(t), v, 0, len(v), 0)

    def sessions(self):
        return self._sess


if __name__ == "__main__":
    from umqtt3.broker_cli import main
    main()
