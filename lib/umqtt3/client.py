# umqtt3.client -- MQTTClient: umqtt.simple's API, plus QoS 2 both ways,
# keepalive, reconnect with resend, and in-flight messages kept in a store.
#
# The blocking driver of client_core.Core, which holds the protocol: this
# module only moves bytes between a socket and the core's buffers, reads the
# clock and waits. Everything happens in poll(timeout_ms): read and hand
# over packets, write what is queued, run the core's timers, notice a dead
# link and reconnect when the backoff allows. The blocking calls (connect,
# publish at QoS 1/2, subscribe, wait_msg) loop on poll() until their answer
# or a timeout.
from .compat import ticks_ms, ticks_diff, sleep_ms, poll, waiter, link, dial, const
from .client_codec import MQTTError, MQTTException, Busy, Closed  # noqa: F401 (umqtt.simple's name)
from .client_core import Core

# as select's and client_core's (underscored consts take no dict slot)
_POLLIN = const(1)
_POLLOUT = const(4)
_POLLERR_HUP = const(24)  # POLLERR | POLLHUP
_DOWN = const(0)
_UP = const(2)
_LOST = const(0x100)  # client_core's completion code: a reconnect forgot the message


class MQTTClient(Core):
    # umqtt.simple's arguments, then connect_link and, by keyword, the
    # core's: level=4, store=None, window=8, bufsize=512, reconnect=False,
    # timeout_ms=5000, backoff_ms=(500, 30000), session_expiry=None, auth=None
    # (client_core.Core; docs/client.md)
    # Set on the instance only when given (a slot in the class's table, not
    # in every client's: 47 attributes fit the instance's table, 48 need a
    # larger one)
    connect_link = None  # () -> link, instead of a socket
    ssl_params = None  # dict of keyword arguments for wrap_socket()
    # the error that last dropped a link (or a dial) poll() then reconnects
    # from: connect() raises it rather than OSError(110) at its timeout
    err = None  # type: Exception | None
    # connect() (or connect_start()) came: until then poll() dials nothing,
    # so that no default clean session replaces the persistent one the
    # application's connect(clean_session=False) asks for [MQTT-3.1.2-6]
    opened = False

    def __init__(self, client_id, server, port=0, user=None, password=None,
                 keepalive=0, ssl=None, ssl_params=None, connect_link=None, **kw):
        Core.__init__(self, client_id, keepalive, user, password, now=ticks_ms(), **kw)
        self.server = server
        self.port = port or (8883 if ssl else 1883)
        self.ssl = ssl
        if ssl_params:
            self.ssl_params = ssl_params
        if connect_link:
            self.connect_link = connect_link
        self.sock = None
        self.poller = None
        self.ipoll = None  # the poller's ipoll (compat.waiter): (obj, events) pairs
        self.wmask = False  # POLLOUT registered

    # ---------------------------------------------------------- umqtt API
    def connect(self, clean_session=True, timeout_ms=None):
        """Connect and wait for CONNACK; returns the session-present flag.
        (connect_start(), in client_more.py, is the half that does not wait.)"""
        self.clean = clean_session
        self.tries = 0
        self.reconnect = self.auto
        self.err = None
        t = self.timeout_ms if timeout_ms is None else timeout_ms
        start = ticks_ms()  # the dial counts too
        try:
            self.open_link(None, t)  # raises what the dial met (111: refused)
            while self.state != _UP:
                if ticks_diff(ticks_ms(), start) > t:
                    # what dropped the link before CONNACK (reconnect=True:
                    # the last attempt's, a retry-later CONNACK's
                    # MQTTException too); 110 when nothing did
                    raise self.err or OSError(110, "")
                # raises what dropped the link (a refused CONNACK:
                # MQTTException(code)); reconnect=True: poll() tries again
                # (not after a final CONNACK code: the core ends reconnect)
                self.poll(10)
        except BaseException:
            # no half-open link left behind: a CONNACK that comes late
            # cannot connect a client whose connect() raised
            self.down()
            raise
        return self.session_present

    def ping(self):
        self.pingreq(ticks_ms())
        self.send()

    def publish(self, topic, msg, retain=False, qos=0, key=None, wait=True, props=None):
        """Send a message. QoS 1/2 are stored (durably with a FileStore)
        before the first send; with wait=True (umqtt.simple's behaviour) this
        returns once the broker acknowledged. Returns the packet id (0 for
        QoS 0). Raises Busy when the window or buffer is full: nothing is
        lost, retry after poll()."""
        c = self.conn
        if c.tlen and self.state == _UP:
            try:
                if not self.send() and c.space() < len(msg) + 64:
                    raise Busy("busy", 0x97)
            except OSError:
                # the link broke: store the message for the next connection
                self.lost(ticks_ms())
                if not (qos and self.reconnect):
                    raise
        pid = self.queue(topic, msg, retain, qos, key, props)
        if self.state == _UP:
            try:
                self.send()
            except OSError:
                # the link broke; a stored message goes out after the reconnect
                self.lost(ticks_ms())
                if not (qos and self.reconnect):
                    raise
        if qos and wait and not self.depth:
            first = True  # the clock is read once the first poll() has not brought the ack
            w = self.waits
            w[pid] = 0  # the core records its completion there
            self.ack_pid = 0
            try:
                while True:  # just stored: not acknowledged yet
                    self.poll(10)
                    if self.ack_pid == pid or not self.store.out_has(pid):
                        break
                    if first:
                        first = False
                        start = ticks_ms()
                    elif ticks_diff(ticks_ms(), start) > self.timeout_ms:
                        raise OSError(110, "")
            finally:
                rc = w[pid]
                del w[pid]
            if rc >= 0x80:
                if rc == _LOST:
                    raise OSError(104, "")  # a reconnect forgot it (store=False): never acknowledged
                raise MQTTError("refused", rc)  # MQTT 5
        return pid

    def subscribe(self, topic, qos=0, no_local=False, retain_as_published=False,
                  retain_handling=0, props=None):
        """Subscribe and wait for SUBACK; returns the granted QoS. MQTT 5's
        subscription options: no_local, retain_as_published, retain_handling
        (0: send retained messages, 1: only for a new subscription, 2: not);
        props, e.g. {0x0B: 7} for Subscription Identifier 7."""
        pid = self.subscribe_start(topic, qos | no_local << 2 | retain_as_published << 3 |
                                   retain_handling << 4, props)
        if self.wait_answer(pid) is None:
            return None  # from a callback: not waited for
        return self.subscribe_end(topic)  # a refusal raises MQTTException(code)

    # The halves of subscribe/unsubscribe, for callers that wait their own
    # way: *_start sends and returns the packet id; the answer has come when
    # wait_pid no longer equals it (subscribe_end(topic) has it).
    def subscribe_start(self, topic, qos=0, props=None):
        # (unsubscribe_start comes here too, with qos -1)
        if self.state == _UP and self.conn.tlen:
            self.drain()  # an empty send buffer for the request
        pid = Core.subscribe_start(self, topic, qos, props)
        self.send()
        return pid

    def wait_msg(self, timeout_ms=None):
        """Wait for and handle at least one incoming packet. Without a
        timeout it waits as long as it takes (umqtt.simple's behaviour),
        keeping the keepalive and reconnects going."""
        start = ticks_ms()
        while not self.poll(10):
            if timeout_ms is not None and ticks_diff(ticks_ms(), start) > timeout_ms:
                raise OSError(110, "")

    def poll(self, timeout_ms=0):
        """One step: I/O, keepalive, reconnect. Never blocks longer than
        timeout_ms. Returns the number of packets handled."""
        if self.state == _DOWN:
            if not (self.reconnect and self.opened):
                raise OSError(107, "")
            # the backoff, then the dial, in client_more.py: a node whose
            # link never drops never loads it
            if not self.redial(timeout_ms):
                return 0  # the backoff or the dial goes on in the next poll()
        # Handles what arrives until timeout_ms has passed, at least one
        # packet when one is there; a peer that keeps sending cannot hold
        # poll() longer: the rest waits in the socket for the next call.
        c = self.conn
        start = ticks_ms()
        handled = 0
        try:
            if self.poller is not None and timeout_ms and not c.spent:  # (nothing read ahead)
                for obj, ev in self.ipoll(timeout_ms):
                    if ev & _POLLERR_HUP and not ev & _POLLIN:
                        raise Closed(104, "")
            # inside the message callback only write (publish from a
            # callback queues and returns)
            n = 0 if self.depth else c.recv()
            while n:
                # (the time only sets a backoff; a callback that refuses a
                # QoS 1/2 message leaves the link closed by the core's lost())
                self.packet(n, start)
                handled += 1
                if self.state == _DOWN:
                    # the callback's publish() found the link broken and
                    # closed it: the ack queued since goes nowhere
                    self.down()
                    return handled
                if self.backlog is not None:
                    self.drain()  # the resume after CONNACK, within timeout_ms
                elif c.tlen > len(c.tx) >> 1:
                    self.send()  # acks pile up while a long burst is read
                if (self.ack_pid in self.waits and not self.ssl) or \
                        ticks_diff(ticks_ms(), start) > timeout_ms:
                    # time is up, or the acknowledgement a waiting publish
                    # wants came: it returns without a read that would find
                    # nothing (on TLS a record may hold more, which poll()
                    # cannot see)
                    break
                n = c.recv()
            if c.tlen:
                self.send()
            if self.keepalive or self.state != _UP:  # else no timer runs
                self.tick(ticks_ms())
                if c.tlen:
                    self.send()  # the PINGREQ tick() queued
            return handled
        except Busy:
            raise
        except (OSError, MQTTError) as e:
            if e is self.cur:
                raise  # the callback's own (a sensor's OSError): as any it raises
            if self.state != _DOWN:  # (else the core's lost() came first)
                self.lost(ticks_ms())
            if not self.reconnect:
                raise
            self.err = e
            return 0

    # umqtt.simple's check_msg(): handle whatever has arrived, without
    # waiting (poll() with its default timeout, 0)
    check_msg = poll

    def send(self):
        # write what is queued; True when all of it went out
        c = self.conn
        if (self.sync is not None and self.unsynced) or (c.tlen and self.keepalive):
            self.out(ticks_ms() if self.keepalive else 0)  # (the time only matters for keepalive)
        # POLLOUT is asked for only while bytes wait: a writable socket would
        # otherwise end every poll() at once and spin
        if c.flush():
            if self.wmask:
                self.wmask = False
                self.poller.modify(self.sock, _POLLIN)
            return True
        if self.poller is not None and not self.wmask:
            self.wmask = True
            self.poller.modify(self.sock, _POLLIN | _POLLOUT)
        return False

    def drain(self):
        # write all that is queued (and the resume's backlog), or raise
        # OSError(110) after timeout_ms
        start = ticks_ms()
        while True:
            if self.send():
                if not self.refill():
                    return True
            elif ticks_diff(ticks_ms(), start) > self.timeout_ms:
                raise OSError(110, "")
            elif self.poller is not None:
                for _ in self.ipoll(10):
                    break
            else:
                sleep_ms(1)

    # ---------------------------------------------------------- internals
    def open_link(self, sock=None, timeout_ms=0):
        # a new connection: sock already connected by the caller, else
        # dialled here, blocking for at most timeout_ms (else the client's)
        self.down()
        self.opened = True
        if self.connect_link:
            lk = self.connect_link()
        else:
            s = sock or dial(self.server, self.port, self.ssl, self.ssl_params,
                             timeout_ms or self.timeout_ms)
            self.sock = s
            s.setblocking(False)
            lk = link(s)
            p = self.poller = poll()
            p.register(s, _POLLIN)
            self.ipoll = waiter(p)
        self.conn.link = lk
        self.start(ticks_ms())
        self.send()

    def down(self):
        # the link is closed (the core's down(), which lost() calls too)
        c = self.conn
        if c.link is not None:
            c.close()
            c.link = None
        elif self.sock is not None:
            self.sock.close()  # connect or TLS handshake failed in open_link
        self.sock = None
        self.poller = self.ipoll = None
        self.wmask = False
        Core.down(self)

    def wait_answer(self, pid):
        # SUBSCRIBE/UNSUBSCRIBE pid is sent: wait for the answer
        if self.depth:
            return None  # from a callback: sent, not waited for (see poll)
        start = ticks_ms()
        while self.wait_pid == pid:
            if ticks_diff(ticks_ms(), start) > self.timeout_ms:
                self.wait_pid = 0
                raise OSError(110, "")
            self.poll(10)
        return self.answer
