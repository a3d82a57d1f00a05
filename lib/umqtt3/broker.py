# umqtt3.broker -- a tiny MQTT 3.1/3.1.1 broker: one task, no threads.
#
#     b = Broker(host="0.0.0.0", port=1883)
#     b.serve_forever()                  # or: while True: b.poll_once(100)
#     await b.run()                      # or as an asyncio task
#
# The drivers of broker_core.Core, which holds the protocol: one
# non-blocking listening socket and poll over the client sockets (what a
# gateway runs), the same step as an asyncio task, and links given to
# attach() (an in-memory transport.Pipe end, say), serviced on every
# poll_once() too, so tests run broker and clients in one process. The
# driver accepts, reads whole packets into each connection's receive buffer
# and hands them to the core, flushes every send buffer the core filled once
# per step, closes what the core closed, and keeps the clock. Limits are
# broker_limits.Limits, given as keywords or as `limits`; see docs/broker.md.
#
# python -m umqtt3.broker --help   runs it on the desktop (umqtt3_cli/broker.py).
from . import compat
from .compat import ticks_ms, ticks_diff, POLLIN, POLLOUT, POLLHUP, POLLERR, asleep_ms, copy
from .codec import MQTTError, frame_len
from .conn import Conn
from .broker_limits import Limits
from .broker_core import (Core, CLOSED, WAITING, CONNECTED, TIMER_MS,  # noqa: F401
                          VERSION)  # (VERSION: API)
from .broker_session import grow_tx

# A connection that has not sent CONNECT reads it into a buffer this small
# and has no send buffer: the connection's own buffers come with the
# CONNECT, so a flood of idle connections costs little (docs/broker.md).
PENDING_RX = 128
# A connected client's send buffer starts at most this large and doubles
# when what is due does not fit (broker_session.grow_tx), up to Limits.tx;
# on CPython its receive buffer starts at the size of a gulp of the socket
# and takes max_packet when a packet is cut between two gulps. So an idle
# client holds a few KB, not two max_packet buffers (docs/broker.md).
TX_START = 4096


class Pending:
    """The stand-in for a Conn until the CONNECT's header has come: its
    first bytes in a PENDING_RX buffer, nothing to send."""

    tlen = 0  # nothing queued (what the core and the driver look at)
    sent = 0

    def __init__(self, link):
        self.link = link
        self.rx = bytearray(PENDING_RX)
        self.got = 0

    def read(self, max_packet):
        """The length n of the first packet once it is whole in rx; -n once
        its header says it is larger than rx; 0 until then. MQTTError for a
        malformed or too large header, OSError when the peer closed."""
        rx = self.rx
        while True:
            got = self.got
            n = frame_len(rx, 0, got, max_packet) if got >= 2 else 0
            if n > len(rx):
                return -n
            if n and got >= n:
                return n
            want = n - got if n else (2 - got if got < 2 else 1)
            r = self.link.readinto(memoryview(rx)[got:], want)
            if r is None:
                return 0
            if not r:
                raise OSError(104)  # closed by the peer
            self.got = got + r

    def space(self):
        return 0

    def flush(self):
        return True

    def close(self):
        try:
            self.link.close()
        except Exception:
            pass


class Broker(Core):
    def __init__(self, host="127.0.0.1", port=1883, users=None, allow_anonymous=None,
                 store=None, log=None, files=None, allow_fat=False, clock=None,
                 limits=None, tls=None, **kw):
        if limits is not None and kw:
            raise ValueError("limits given twice: as Limits and as keywords")
        lim = limits or Limits(**kw)
        # milliseconds in ticks_ms's range; a test passes a clock it moves itself
        self.ticks = clock or ticks_ms
        now = self.ticks()
        Core.__init__(self, lim, users, allow_anonymous, log, store, files, allow_fat, now)
        self.store = store
        self._deadline = now
        self._pipes = []
        self._socks = {}
        self._hot = False  # a connection has work that poll cannot see
        self._stop = False
        self._sock = None
        self._poller = None
        self._consume = None  # broker_bytes.consume, loaded by the first gulp
        self.port = port
        self.tls = tls  # an ssl.SSLContext (compat.tls_server): the listener speaks TLS
        self.pend_links = False  # attach() links as pending connections (see attach)
        if port is not None:
            self._listen(host, port, lim.backlog)

    # ------------------------------------------------------------ set-up
    def _listen(self, host, port, backlog):
        so = compat.socket
        info = so.getaddrinfo(host, port, 0, so.SOCK_STREAM)[0]
        s = so.socket(info[0], so.SOCK_STREAM)
        try:
            s.setsockopt(so.SOL_SOCKET, so.SO_REUSEADDR, 1)
            s.bind(info[-1])
            s.listen(backlog)
        except OSError:
            s.close()
            raise
        s.setblocking(False)
        try:
            self.port = s.getsockname()[1]  # type: ignore[attr-defined, unused-ignore]
        except Exception:
            pass  # not every MicroPython port has getsockname
        self._sock = s
        self._poller = compat.poll()
        self._poller.register(s, POLLIN)

    def _open(self, link, sock, peer, pending=True):
        # pending: a small receive buffer and no send buffer (_promote)
        conn = Pending(link) if pending else self._conn(link, sock)
        c = self.open(conn, peer, self.ticks())
        c.io = sock  # registered with the poller; None for attached links
        c.mask = POLLIN
        return c

    def _promote(self, c, n):
        """c's CONNECT has begun (its fixed header says n bytes): the
        connection's buffers now, with what was read of it moved in."""
        old = c.conn
        link = old.link if c.io is None else compat.server_link(c.io)
        conn = self._conn(link, c.io)
        copy(conn.rx, 0, old.rx, 0, old.got)
        conn.got = old.got
        conn.need = n
        c.conn = conn

    def _conn(self, link, sock):
        # a connected client's buffers: see TX_START
        lim = self.limits
        mp = lim.max_packet
        rx = mp
        if compat.LINK_BUFFERS and sock is not None and len(link.buf) < mp:
            rx = len(link.buf)  # broker_bytes.consume copies at most a gulp at once
        conn = Conn(link, rx, lim.tx if lim.tx < TX_START else TX_START)
        conn.max_packet = mp
        return conn

    def _read_pending(self, c, now):
        """Read a pending connection's CONNECT into its small buffer; at the
        first whole packet (or the header of one larger than that buffer)
        the connection gets its buffers and the packet goes to the core."""
        p = c.conn
        try:
            n = p.read(self.limits.max_packet)
        except MQTTError as e:
            self.fail(c, e)  # [MQTT-4.8.0-1]
            return 0
        except OSError:
            self.disconnect(c, "connection lost", True)
            return 0
        if not n:
            return 0
        if p.rx[0] >> 4 != 1:
            # the first packet must be CONNECT [MQTT-3.1.0-1]: no buffers
            self.disconnect(c, "first packet is not CONNECT", False)
            return 0
        n = n if n > 0 else -n
        self._promote(c, n)
        if c.conn.got < n:
            return 0  # a large CONNECT: read on into its own buffer
        c.conn.last = n
        self.packet(c, n, now)
        return 1

    def attach(self, link, peer="pipe", pending=None):
        """Serve one connection over a link (e.g. a transport.Pipe end); with
        as many connections as allowed the oldest pending one is closed.
        pending (default: pend_links): until its CONNECT, the link has a
        small buffer as an accepted socket has; otherwise its buffers now
        (what broker_bytes.feed needs)."""
        if not self._room():
            raise OSError(23)  # ENFILE: as many connections as allowed, none pending
        c = self._open(link, None, peer, self.pend_links if pending is None else pending)
        self._pipes.append(c)
        return c

    def _pending(self):
        """The oldest pending connection (no CONNECT handled yet, a large one
        perhaps on its way) and their number."""
        old = None
        n = 0
        for c in self.clients:
            if c.state == WAITING:
                n += 1
                if old is None:
                    old = c
        return old, n

    def _room(self):
        """Room for one more connection. With max_clients + max_pending
        open, the oldest pending connection goes: idle connections never
        keep a client that sends its CONNECT out."""
        if not self.full():
            return True
        old, n = self._pending()
        if old is None:
            return False
        self.refused += 1
        self.disconnect(old, "too many connections: the oldest without CONNECT", False)
        return True

    def _accept(self):
        # at most half the pending limit per step: what was accepted in the
        # last step is read before a flood can push it out
        k = self.limits.max_pending // 2 or 1
        while k:
            k -= 1
            try:
                s, addr = self._sock.accept()
            except OSError:
                return
            if not self._room():
                # as many clients and pending connections as allowed and
                # none of them pending: closed before any buffer
                s.close()
                self.refused += 1
                self._log("refused %s: too many connections", (addr,))
                continue
            s.setblocking(False)
            compat.nodelay(s)
            if self.limits.sndbuf:
                try:
                    compat.sndbuf(s, self.limits.sndbuf)
                except OSError:
                    pass
            if self.tls is not None:
                try:
                    s = compat.tls_accept(self.tls, s)
                except OSError:
                    s.close()
                    continue
            try:
                if isinstance(addr, tuple):
                    addr = "%s:%s" % (addr[0], addr[1])
                c = self._open(compat.link(s), s, addr)
                self._socks[s] = c
            except MemoryError:
                # the heap is spent: no room for its buffers, as no room at all
                self.nomem += 1
                self.refused += 1
                s.close()
                continue
            self._poller.register(s, POLLIN)

    # ------------------------------------------------------------ the loop
    def poll_once(self, timeout_ms=0):
        """Accept, read and answer what is ready, waiting at most timeout_ms
        for sockets; flush, run timers. Returns the packets handled."""
        work = 0
        now = self.ticks()
        if self.bridge is not None:
            work = self.bridge.step(now)  # the upstream clients' I/O; sets wait
            if self.bridge.wait < timeout_ms:
                timeout_ms = self.bridge.wait
            if self.holds:
                work += self._resume(now)  # what the bridge's acks made room for goes first
        cl = self.clients
        if self._hot:
            # what the last step left in memory (a turn that reached the
            # burst or fanout limit, TLS, a send buffer that drained): read
            # before poll, so that what poll reports meanwhile has its turn
            # in this step too, before the connection's next turn
            self._hot = False
            timeout_ms = 0
            i = 0
            while i < len(cl):
                c = cl[i]
                if c.kick and c.state != CLOSED:
                    c.kick = False
                    if not c.blocked and c.held is None and c.io is not None:  # (pipes: below)
                        work += self._read(c, now)
                i += 1
        if self._poller is not None:
            if self._pipes:
                timeout_ms = 0
            else:
                d = ticks_diff(self._deadline, now)
                if d < timeout_ms:
                    timeout_ms = d if d > 0 else 0
            incoming = False
            for ev in self._poller.ipoll(timeout_ms):
                obj = ev[0]
                e = ev[1]
                if obj is self._sock:
                    incoming = True  # accepted after the loop: no register() while iterating
                    continue
                c = self._socks.get(obj)
                if c is None or c.state == CLOSED:
                    continue
                if e & POLLOUT:
                    self._flush(c)
                if c.blocked or c.held is not None:
                    if e & (POLLHUP | POLLERR):
                        self.disconnect(c, "connection lost", True)
                elif e & (POLLIN | POLLHUP | POLLERR) and not c.kick:
                    # (kick: its turn came before poll and left bytes: next step)
                    work += self._read(c, now)
            if incoming:
                self._accept()
            now = self.ticks()
        pipes = self._pipes
        i = 0
        while i < len(pipes):
            c = pipes[i]
            if c.state != CLOSED and not c.blocked and c.held is None:
                work += self._read(c, now)
            i += 1
        # one write per connection per step, whatever the step routed to it
        i = 0
        while i < len(cl):
            c = cl[i]
            if c.state != CLOSED and self.wants_send(c):
                self._flush(c)
            i += 1
        self._deadline = self.tick(self.ticks())
        if not work:
            # what no byte answered (the removal of a completed message, a
            # timer's routing): at the first idle step, not one sync each
            self.commit()
        if self.ndead:
            self._reap()
        return work

    def serve_forever(self, tick_ms=TIMER_MS):
        self._stop = False
        while not self._stop:
            self.poll_once(tick_ms)

    async def run(self, idle_ms=10):
        """asyncio task form: poll_once(0), then yield to the other tasks."""
        self._stop = False
        while not self._stop:
            n = self.poll_once(0)
            await asleep_ms(0 if n else idle_ms)

    def stop(self):
        """Make serve_forever() / run() return after the current step."""
        self._stop = True

    def close(self):
        """Close every connection and the listening socket. The store needs
        no saving: it was written before each acknowledgement."""
        if self.bridge is not None:
            self.bridge.close()
        self.close_all()
        self.commit()
        self._reap()
        self.end_clean()
        if self._sock is not None:
            self._poller.unregister(self._sock)
            self._sock.close()
            self._sock = None
            self._poller = None
        self._stop = True

    # ------------------------------------------------------------ one connection
    def _read(self, c, now):
        """Read and hand over up to `burst` packets from one connection,
        fewer once they have routed `fanout` deliveries (at least one): a
        publisher fanning out to many sessions does not hold the others'
        packets unread for its whole burst. What is left waits in the
        socket (or in memory: _read_ahead) for the connection's next turn."""
        k = 0
        self.routed = 0
        try:
            if isinstance(c.conn, Pending):
                k = self._read_pending(c, now)
                if c.state != CONNECTED:
                    return k
                # what came with the CONNECT: TLS may hold it where poll cannot see
            if compat.LINK_BUFFERS and c.io is not None:
                return k + self._read_ahead(c, now)
            return k + self._read_packets(c, now)
        except Exception as e:
            # what no handler of the packet's expected: a MemoryError where
            # a turn allocates (a CONNECT's buffers, a send buffer grown)
            self.broke(c, e)  # c is closed, the others are served
            return k

    def _read_packets(self, c, now):
        k = 0
        conn = c.conn
        burst = self.limits.burst
        fan = self.limits.fanout
        try:
            while k < burst and self.routed < fan and c.state != CLOSED:
                n = conn.recv()
                if not n:
                    break
                if not self.room(c, conn.rx[0], n):
                    self._flush(c)
                    if c.state == CLOSED:
                        break
                    if not self.room(c, conn.rx[0], n):
                        c.blocked = True  # the peer is not reading: wait
                        self._mask(c)
                        break
                self.packet(c, n, now)
                if c.held is not None:
                    self._mask(c)  # held: its packet kept in rx, the rest in the socket
                    break
                k += 1
        except MQTTError as e:
            self.fail(c, e)  # [MQTT-4.8.0-1]
        except OSError:
            self.disconnect(c, "connection lost", True)
        return k

    def _read_ahead(self, c, now):
        # CPython: gulps of the socket (compat.server_link) handed to the
        # core in place, several packets per call. A gulp shorter than the
        # buffer emptied the socket: no second read (and EAGAIN) this step,
        # poll reports what comes next.
        consume = self._consume
        if consume is None:
            from .broker_bytes import consume  # CPython only: never on a device
            self._consume = consume
        conn = c.conn
        link = conn.link
        k = 0
        burst = self.limits.burst
        fan = self.limits.fanout
        short = False
        # a packet kept in rx (held, or stalled, when it was cut between two
        # gulps) goes to the core before the socket is read: it may be whole
        again = conn.got
        try:
            while k < burst and self.routed < fan and c.state != CLOSED:
                if link.pos >= link.end and not again:
                    if short:
                        break
                    r = link.fill()
                    if not r:
                        break
                    short = r < len(link.buf)
                again = 0
                if conn.got and len(conn.rx) < conn.max_packet:
                    # a packet cut between two gulps: the rest may be up to max_packet
                    rx = bytearray(conn.max_packet)
                    copy(rx, 0, conn.rx, 0, conn.got)
                    conn.rx = rx
                link.pos, n, stalled = consume(self, c, link.buf, link.pos, link.end, now, burst - k, True,
                                               fan)
                k += n
                if c.held is not None:
                    self._mask(c)  # held: its packet kept in the link's buffer
                    break
                if stalled:
                    self._flush(c)
                    if c.state == CLOSED:
                        break
                    link.pos, n, stalled = consume(self, c, link.buf, link.pos, link.end, now, 1, True,
                                                   fan)
                    k += n
                    if stalled:
                        c.blocked = True  # the peer is not reading: wait
                        self._mask(c)
                        break
        except OSError:
            self.disconnect(c, "connection lost", True)
        left = link.pos < link.end or (self.tls is not None and compat.tls_held(link))
        if c.state != CLOSED and not c.blocked and c.held is None and left:
            # bytes left in memory (burst or fanout limit, TLS): poll would
            # not report them
            c.kick = True
            self._hot = True
        return k

    def _resume(self, now):
        """Back-pressure's end: each held connection (Core._hold) whose
        bridge no longer waits (the upstream's acks made room on its queue,
        or its uplink went down: refused now) is read again from its held
        packet on, oldest hold first, before anything else in the step: a
        connection held again goes behind the others, so none is passed
        over for good. Asked before each, so that the room one ack makes
        goes to one."""
        k = 0
        q = self.holds
        last = self.nholds  # holds begun before this step: one held again waits
        while True:
            # the oldest whose bridge has room, looked for again after each
            # read (which may close or hold others: q changes under it)
            i = 0
            while i < len(q) and (q[i].hold_no > last or q[i].held.waits()):
                i += 1
            if i == len(q):
                return k
            c = q[i]
            self.unhold(c, now)
            k += self._read(c, now)
            if c.state != CLOSED:
                self._mask(c)

    def _flush(self, c):
        """Write what is queued for c; move waiting messages into its send
        buffer as it drains. Never blocks; a failed write closes c. What the
        store was handed is made durable first (Core.commit)."""
        self.commit()
        if c.state == CLOSED:
            return
        conn = c.conn
        try:
            while True:
                if conn.tlen and not self._write(conn):
                    break
                if not self.refill(c):
                    break
        except OSError:
            self.disconnect(c, "connection lost", True)
            return
        except Exception as e:
            self.broke(c, e)  # a MemoryError building what was queued: as _read
            return
        if c.blocked and (conn.space() >= conn.max_packet or
                          grow_tx(conn, conn.max_packet, self.limits.tx)):
            # the packet that did not fit may be whole in rx already, with
            # nothing left in the socket to wake poll: poll_once runs it
            c.blocked = False
            c.kick = True
            self._hot = True
        self._mask(c)

    def _write(self, conn):
        # conn.flush(), what left counted ($SYS bytes/sent)
        w = conn.tlen - conn.sent
        ok = conn.flush()
        self.bytes_out += w - (conn.tlen - conn.sent)
        return ok

    def _mask(self, c):
        if c.io is None:
            return
        m = (0 if c.blocked or c.held is not None else POLLIN) | (POLLOUT if c.conn.tlen else 0)
        if m != c.mask:
            c.mask = m
            self._poller.modify(c.io, m)

    def _linger(self, c):
        """Close c's socket cleanly: FIN after what was sent, and what the
        client sent that is still unread read away first, so that the
        kernel does not answer with a reset that can overtake the reason
        (a CONNACK or DISCONNECT) on its way to the client."""
        try:
            c.io.shutdown(1)  # SHUT_WR
        except Exception:
            pass  # a port without shutdown(): close() alone
        link = c.conn.link
        rx = c.conn.rx
        try:
            for _ in range(16):
                if not link.readinto(rx, len(rx)):
                    break
        except Exception:
            pass

    def _reap(self):
        cl = self.clients
        i = len(cl) - 1
        while i >= 0:
            c = cl[i]
            i -= 1
            if c.state != CLOSED:
                continue
            conn = c.conn
            try:
                self._write(conn)  # a refusal's CONNACK, a DISCONNECT's reason code
            except Exception:
                pass
            if c.io is not None:
                self._linger(c)
                try:
                    self._poller.unregister(c.io)
                except Exception:
                    pass
                self._socks.pop(c.io, None)
            else:
                self._pipes.remove(c)
            conn.close()
            self.forget(c)


if __name__ == "__main__":  # the desktop command line, a host-only package
    from umqtt3_cli.broker import main
    raise SystemExit(main())
