# umqtt3.client -- MQTTClient: umqtt.simple's API, plus QoS 2 both ways,
# keepalive, reconnect with resend, and in-flight messages kept in a store.
#
# Everything happens in poll(timeout_ms): read and handle packets, write what
# is queued, send PINGREQ when idle, notice a dead link and reconnect when
# the backoff allows. The blocking calls (connect, publish at QoS 1/2,
# subscribe, wait_msg) loop on poll() until their answer or a timeout.
from .compat import (ticks_ms, ticks_add, ticks_diff, sleep_ms, poll, link, dial,
                     POLLIN, POLLOUT, POLLERR, POLLHUP)
from .codec import (Packet, MQTTError, decode, encode_connect, encode_simple,
                    encode_subscribe, encode_unsubscribe, encode_disconnect,
                    CONNACK, PUBLISH, PUBACK, PUBREL, PUBCOMP, SUBACK, UNSUBACK, PINGREQ,
                    PINGRESP, DISCONNECT, AUTH)
from .conn import Conn, Closed
from .flow import Flow, Busy

_DOWN = 0
_CONNACK = 1
_UP = 2
# I/O errors carry an errno and no text (each text would be a string in RAM
# from import on): 107 not connected, 110 timed out (also no CONNACK or
# PINGRESP in time), 111 connection failed, 104 the link or the server
# ended the connection (disconnect_rc: a server DISCONNECT's reason, MQTT 5)


class MQTTClient:
    def __init__(self, client_id, server, port=0, user=None, password=None,
                 keepalive=0, ssl=None, ssl_params=None, level=4, store=None,
                 window=8, bufsize=512, reconnect=False, timeout_ms=5000,
                 backoff_ms=(500, 30000), connect_link=None, session_expiry=None,
                 auth=None):
        self.client_id = client_id
        self.server = server
        self.port = port or (8883 if ssl else 1883)
        self.user = user
        self.pswd = password
        self.keepalive = keepalive
        self.ssl = ssl
        self.ssl_params = ssl_params or {}
        self.level = level
        self.session_expiry = session_expiry  # MQTT 5: seconds, None: see client5
        self.auth = auth  # MQTT 5: (method, data, f(data) -> reply data) or None
        if store is None:
            # loaded only when used: a FileStore client never loads it.
            # A pool of 2 KB for the window; inbound: room for the QoS 2
            # messages a broker sends before our PUBRECs reach it
            # (mosquitto's default limit is 20 per client)
            from .memstore import MemoryStore
            store = MemoryStore(window, 1024 // window, 32)
        elif store is False:
            # QoS 0/1/2 within one connection, nothing resent after a
            # reconnect: no pool, and memstore stays unloaded
            from .nostore import NoStore
            store = NoStore(window, 32)
        self.store = store
        self.flow = Flow(self.store, self, window, level)
        self.bufsize = bufsize
        self.reconnect = reconnect
        self.auto = reconnect  # restored by connect() after disconnect()
        self.timeout_ms = timeout_ms
        self.backoff = backoff_ms
        self.connect_link = connect_link  # () -> link, instead of a socket
        self.cb = None
        self.raw = False
        self.sync = None  # () -> None, made durable what deliver() took
        self.unsynced = False
        self.lw = None
        self.on_ack = None  # f(pid, reason code) when a QoS 1/2 publish completes
        self.ack_pid = self.ack_rc = 0  # the last completed publish
        self.want = -1  # the packet id a waiting publish() waits for
        self.disconnect_rc = None  # MQTT 5: the reason code of a server's DISCONNECT
        self.cur = None  # the packet being handed to the callback
        self.aliases = None  # MQTT 5: topic -> Topic Alias property, per connection
        self.answer_hook = None  # umqtt3.client5.request() waiting for its answer
        self.pkt = Packet(level)
        # one connection object for the client's life: buffers allocated once
        self.conn = Conn(None, bufsize, bufsize, 0, 5)  # a PUBACK in one read
        self.sock = None
        self.poller = None
        self.state = _DOWN
        self.wmask = False  # POLLOUT registered
        self.clean = True
        self.session_present = False
        self.subs = {}  # filter -> (options, props), re-subscribed when the session is gone
        self.tries = 0
        self.retry_at = ticks_ms()
        self.last_tx = self.last_rx = ticks_ms()
        self.ping_at = None
        self.wait_pid = 0
        self.req = None  # filter of the SUBSCRIBE/UNSUBSCRIBE waiting for its ack
        self.answer = -1
        self.depth = 0  # > 0 while the message callback runs
        self.redelivered = []  # inbound QoS 2 messages to hand over again
        self.redelivery = False  # True while the callback gets one of them
        for pid, state, key, body in self.store.recover():
            if state == "u":
                self.redelivered.append((pid, body))

    # ---------------------------------------------------------- umqtt API
    def set_callback(self, f, raw=False):
        """f(topic, msg) with bytes, as umqtt.simple (client.redelivery tells
        whether a message is handed over again after a reset); raw=True:
        f(pkt, redelivered) with the decoded codec.Packet (no allocation).
        If f raises, the message counts as not taken: no acknowledgement is
        sent and (QoS 1/2) the connection is dropped, so that the broker
        sends it again on the next one (persistent sessions)."""
        self.cb = f
        self.raw = raw

    def set_sync(self, f):
        """f() runs before any acknowledgement of a delivered message, and
        before the PUBCOMP of a released QoS 2 id, leaves: a callback (or a
        store) may buffer what it takes and f makes it durable, once for a
        whole burst (group commit). None: acknowledge as soon as taken."""
        self.sync = f

    def set_last_will(self, topic, msg, retain=False, qos=0, props=None):
        """props (MQTT 5): the will's properties, e.g. {0x18: 30} for a Will
        Delay Interval of 30 s."""
        assert 0 <= qos <= 2 and topic
        self.lw = (topic, msg, qos, retain, props)

    def set_ack_callback(self, f):
        """f(pid, reason_code) when a QoS 1/2 publish completes (PUBACK,
        PUBCOMP) or is refused (MQTT 5: reason code 0x80 or more in PUBACK
        or PUBREC). With wait=True a refusal raises MQTTError instead."""
        self.on_ack = f

    def connect(self, clean_session=True, timeout_ms=None):
        """Connect and wait for CONNACK; returns the session-present flag."""
        self.connect_start(clean_session)
        self._wait(_UP, timeout_ms)
        return self.session_present

    def connect_start(self, clean_session=True, sock=None):
        """Open the connection (on sock, when the caller connected one) and
        send CONNECT; poll() takes it from there (is_connected() once
        CONNACK accepted it). Used by connect() and aio."""
        self.clean = clean_session
        self.tries = 0
        self.reconnect = self.auto
        try:
            self._open(sock)
        except Exception:
            self._close()  # no half-open socket left behind
            raise

    def is_open(self):
        """A connection exists (CONNACK may still be awaited)."""
        return self.state != _DOWN

    def disconnect(self):
        self.reconnect = False
        if self.state == _UP:
            c = self.conn
            try:
                c.tlen = encode_disconnect(c.tx, c.tlen, None, self.level)
                self._flush_all(self.timeout_ms)
            except (OSError, MQTTError):
                pass
        self._close()

    def ping(self):
        self._queue_simple(PINGREQ)
        self.ping_at = ticks_ms()

    def publish(self, topic, msg, retain=False, qos=0, key=None, wait=True, props=None):
        """Send a message. QoS 1/2 are stored (durably with a FileStore)
        before the first send; with wait=True (umqtt.simple's behaviour) this
        returns once the broker acknowledged. Returns the packet id (0 for
        QoS 0). Raises Busy when the window or buffer is full: nothing is
        lost, retry after poll()."""
        c = self.conn
        up = self.state == _UP
        if not up and not (qos and self.reconnect):
            raise OSError(107)
        if up and c.tlen:
            try:
                sent = self.send()
            except OSError:
                # the link broke: store the message for the next connection
                self._lost()
                up = False
                if not (qos and self.reconnect):
                    raise
            if up and not sent and c.space() < len(msg) + 64:
                raise Busy("send buffer full")
        start = c.tlen
        al = self.aliases
        new = None
        if al is not None and not qos and props is None:
            # MQTT 5 topic alias: the topic once, then two bytes [MQTT-3.3.2-12]
            # (QoS 0 only: a stored message may be resent on a connection
            # that knows no alias)
            props = al.get(topic)
            if props is not None:
                topic = b""
            elif len(al) < self.flow.alias_max and len(al) < 8:
                props = new = bytes((0x23, 0, len(al) + 1))
        try:
            pid = self.flow.publish(c, topic, msg, qos, retain, key, props)
        except MQTTError as e:
            if e.code == 0x95 and start:
                raise Busy("send buffer full")
            raise  # larger than the whole buffer: retrying cannot help
        if new is not None:
            al[topic] = new  # known to the server once this PUBLISH is queued
        if up:
            try:
                self.send()
            except OSError:
                # the link broke; a stored message goes out after the reconnect
                self._lost()
                if not (qos and self.reconnect):
                    raise
        else:
            c.tlen = start  # stored: it goes out when the connection is back
        if qos and wait and not self.depth:
            self._wait_done(pid)
            if self.ack_pid == pid and self.ack_rc >= 0x80:
                raise MQTTError("refused", self.ack_rc)  # MQTT 5
        return pid

    def subscribe(self, topic, qos=0, no_local=False, retain_as_published=False,
                  retain_handling=0, props=None):
        """Subscribe and wait for SUBACK; returns the granted QoS. MQTT 5's
        subscription options: no_local, retain_as_published, retain_handling
        (0: send retained messages, 1: only for a new subscription, 2: not);
        props, e.g. {0x0B: 7} for Subscription Identifier 7."""
        pid = self.subscribe_start(topic, qos | no_local << 2 | retain_as_published << 3 |
                                   retain_handling << 4, props)
        if self._request(pid) is None:
            return None  # from a callback: not waited for
        return self.subscribe_end(topic)

    def unsubscribe(self, topic):
        """MQTT 5: returns UNSUBACK's reason code (0x11: there was no such
        subscription); raises MQTTError for a refusal."""
        rc = self._request(self.unsubscribe_start(topic))
        if rc is not None and rc >= 0x80:
            raise MQTTError("refused", rc)
        return rc

    # The halves of subscribe/unsubscribe, for callers that wait their own
    # way (umqtt3.aio): *_start sends and returns the packet id; the answer
    # has come when wait_pid no longer equals it.
    def subscribe_start(self, topic, qos=0, props=None):
        # qos: the options byte (MQTT 5's options above bit 1)
        # as umqtt.simple: messages would have nowhere to go
        assert self.cb is not None, "set_callback() before subscribe()"
        self._up()
        self.subs[topic] = (qos, props)  # props too: asked the same way again
        return self._start(topic)

    def subscribe_end(self, topic):
        """The granted QoS; raises if the broker refused the filter."""
        rc = self.answer
        if rc >= 0x80:
            del self.subs[topic]
            raise MQTTError("refused", rc)
        return rc

    def msg_props(self):
        """MQTT 5: the properties of the message the callback is handling,
        as a dict {id: value} (allocates; see umqtt3.client5.value_at for
        reading them from a raw callback without allocating)."""
        from .client5 import props_of
        return props_of(self.cur)

    def unsubscribe_start(self, topic):
        self._up()
        self.subs.pop(topic, None)
        return self._start(topic)

    def _start(self, topic):
        pid = self.flow.new_pid()
        self.ask(pid, topic)
        self.req = topic  # asked again, same id, if the link drops first
        self.wait_pid = pid
        self.answer = -1
        self.send()
        return pid

    def ask(self, pid, topic):
        # SUBSCRIBE for a filter in subs (with its options and properties),
        # else UNSUBSCRIBE
        c = self.conn
        if c.space() < len(topic) + 16:
            self.drain()
        s = self.subs.get(topic)
        if s is not None:
            c.tlen = encode_subscribe(c.tx, c.tlen, pid, topic, s[0], self.level, s[1])
        else:
            c.tlen = encode_unsubscribe(c.tx, c.tlen, pid, topic, self.level)

    def check_msg(self):
        """Handle whatever has arrived, without waiting (umqtt.simple)."""
        return self.poll(0)

    def wait_msg(self, timeout_ms=None):
        """Wait for and handle at least one incoming packet. Without a
        timeout it waits as long as it takes (umqtt.simple's behaviour),
        keeping the keepalive and reconnects going."""
        start = ticks_ms()
        while not self.poll(10):
            if timeout_ms is not None and ticks_diff(ticks_ms(), start) > timeout_ms:
                raise OSError(110)

    # ---------------------------------------------------------- extras
    def accepted(self, key):
        """After a reboot: was the publish with this key taken (stored)?"""
        return self.store.accepted(key)

    def inflight(self):
        return self.store.out_count()

    def is_connected(self):
        return self.state == _UP

    def deliver(self, pkt, redelivered):
        # called by Flow for every inbound message, exactly once per message
        if self.answer_hook is not None:
            from .client5 import take_answer
            if take_answer(self, pkt):
                return  # the answer request() waits for
        f = self.cb
        if f is None:
            return
        # While the callback runs nothing is read (see _io): a nested read
        # would overwrite the packet being handled before it is acknowledged.
        self.depth += 1
        self.redelivery = redelivered
        self.unsynced = True
        self.cur = pkt
        try:
            if self.raw:
                f(pkt, redelivered)
            else:
                f(bytes(pkt.topic), bytes(pkt.payload))
        finally:
            self.depth -= 1
            self.redelivery = False

    def poll(self, timeout_ms=0):
        """One step: I/O, keepalive, reconnect. Never blocks longer than
        timeout_ms. Returns the number of packets handled."""
        if self.state == _DOWN:
            if not self.reconnect:
                raise OSError(107)
            if ticks_diff(ticks_ms(), self.retry_at) < 0:
                sleep_ms(min(timeout_ms, max(0, ticks_diff(self.retry_at, ticks_ms()))))
                return 0
            try:
                self._open()
            except OSError:
                self._lost()
                return 0
        try:
            n = self._io(timeout_ms)
            self._keepalive()
            return n
        except (OSError, MQTTError) as e:
            if isinstance(e, Busy):
                raise
            self._lost()
            if not self.reconnect:
                raise
            return 0

    # ---------------------------------------------------------- internals
    def _up(self):
        if self.state != _UP:
            raise OSError(107)
        return self.conn

    def _open(self, sock=None):
        # a new connection: sock already connected (the asyncio driver dials
        # its own), else dialled here, blocking
        self._close()
        if self.connect_link:
            lk = self.connect_link()
        else:
            s = sock or dial(self.server, self.port, self.ssl, self.ssl_params, self.timeout_ms)
            self.sock = s
            s.setblocking(False)
            lk = link(s)
            self.poller = poll()
            self.poller.register(s, POLLIN)
            self.wmask = False
        c = self.conn
        c.link = lk
        lw = self.lw or (None, b"", 0, False, None)
        props = None
        if self.level == 5:
            from .client5 import connect_props
            props = connect_props(self)
        c.tlen = encode_connect(c.tx, 0, self.client_id, self.level, self.clean,
                                self.keepalive, self.user, self.pswd, lw[0], lw[1],
                                lw[2], lw[3], props, lw[4])
        self.state = _CONNACK
        self.pkt.level = self.level
        self.send()
        self.connect_started = ticks_ms()

    def _close(self):
        c = self.conn
        if c.link is not None:
            c.close()
            c.link = None
        elif self.sock is not None:
            self.sock.close()  # connect or TLS handshake failed in _open
        c.got = 0
        c.done()  # nothing read on the old link is kept
        c.tlen = c.sent = 0
        self.sock = None
        self.poller = None
        self.wmask = False
        self.state = _DOWN

    def _lost(self):
        self._close()
        self.tries += 1
        lo, hi = self.backoff
        d = min(hi, lo << min(self.tries - 1, 16))
        # jitter 75%..125%: the clock's low bits as noise (the device stubs
        # make ticks opaque, to stop arithmetic on them meant as time)
        d = d * 3 // 4 + (ticks_ms() * 7919) % (d // 2 + 1)  # type: ignore[operator, unused-ignore]
        self.retry_at = ticks_add(ticks_ms(), d)

    def send(self):
        # write what is queued; True when all of it went out
        if self.unsynced and self.sync is not None:
            self.sync()  # durable before the acks behind it leave
        self.unsynced = False
        # POLLOUT is asked for only while bytes wait: a writable socket would
        # otherwise end every poll() at once and spin
        if self.conn.flush():
            self.last_tx = ticks_ms()
            if self.wmask:
                self.wmask = False
                self.poller.modify(self.sock, POLLIN)
            return True
        if self.poller is not None and not self.wmask:
            self.wmask = True
            self.poller.modify(self.sock, POLLIN | POLLOUT)
        return False

    def _flush_all(self, timeout_ms):
        start = ticks_ms()
        while not self.send():
            if ticks_diff(ticks_ms(), start) > timeout_ms:
                raise OSError(110)
            self._wait_io(10)

    def _wait_io(self, timeout_ms):
        if self.poller is not None:
            for _ in self.poller.ipoll(timeout_ms):
                break
        elif timeout_ms:
            sleep_ms(1)

    def _io(self, timeout_ms):
        # Handles what arrives until timeout_ms has passed, at least one
        # packet when one is there; a peer that keeps sending cannot hold
        # poll() longer: the rest waits in the socket for the next call.
        c = self.conn
        start = ticks_ms()
        if self.poller is not None and timeout_ms and not c.buffered():
            for obj, ev in self.poller.ipoll(timeout_ms):
                if ev & (POLLERR | POLLHUP) and not ev & POLLIN:
                    raise Closed(104)
        handled = 0
        # inside the message callback only write (publish from a callback
        # queues and returns)
        n = 0 if self.depth else c.recv()
        while n:
            self.last_rx = ticks_ms()
            decode(self.pkt, c.rx, 0, n)
            c.done()  # consumed even if the callback raises; rx stays intact
            try:
                self._handle(self.pkt)
            except (OSError, MQTTError):
                raise
            except Exception:
                # the application's callback raised: the message was not
                # taken and not acknowledged. The broker resends only on a new
                # connection [MQTT-4.4.0-1], so drop this one (a persistent
                # session gets it again); QoS 0 has nothing to resend.
                if self.pkt.type == PUBLISH and self.pkt.qos:
                    self._lost()
                raise
            handled += 1
            if self.state == _DOWN:
                return handled
            if c.tlen > len(c.tx) >> 1:
                self.send()  # acks pile up while a long burst is read
            if ticks_diff(ticks_ms(), start) > timeout_ms or \
                    (self.ack_pid == self.want and not self.ssl):
                # time is up, or the acknowledgement a waiting publish wants
                # came: it returns without a read that would find nothing
                # (on TLS a record may hold more, which poll() cannot see)
                break
            n = c.recv()
        if c.tlen:
            self.send()
        if self.state == _CONNACK and ticks_diff(ticks_ms(), self.connect_started) > self.timeout_ms:
            raise Closed(110)  # no CONNACK
        return handled

    def _handle(self, p):
        t = p.type
        c = self.conn
        if self.state == _CONNACK:
            if t == AUTH and self.level == 5:
                from .client5 import on_auth
                on_auth(self, p)  # enhanced authentication before CONNACK
                return
            if t != CONNACK:
                raise MQTTError("expected CONNACK", 0x82)
            if p.rc:
                # server unavailable / busy / quota / rate: try again later;
                # any other refusal (version, id, credentials) is final
                self.reconnect = self.reconnect and p.rc in (3, 0x88, 0x89, 0x97, 0x9F)
                raise MQTTError("refused", p.rc)
            self.state = _UP
            self.tries = 0
            if self.level == 5:
                from .client5 import on_connack
                on_connack(self, p)
                self.aliases = {} if self.flow.alias_max else None
            self.ping_at = None
            self.session_present = p.session_present
            self._resume()
            return
        if t == PUBLISH:
            self.flow.on_publish(c, p)
        elif PUBACK <= t <= PUBCOMP:
            f = self.flow
            f.on_ack(c, p)
            if t == PUBREL:
                self.unsynced = True  # a store's release is durable before PUBCOMP
            elif f.last_done == p.pid:
                # a publish completed, or (MQTT 5) was refused
                f.last_done = 0
                self.ack_pid = p.pid
                self.ack_rc = p.rc
                if self.on_ack is not None:
                    self.on_ack(p.pid, p.rc)
        elif t == SUBACK or t == UNSUBACK:
            if p.pid == self.wait_pid:
                # SUBACK: the granted QoS or a refusal; MQTT 5 UNSUBACK too
                self.answer = c.rx[p.payload_off] if t == SUBACK or self.level == 5 else 0
                self.wait_pid = 0
        elif t == PINGRESP:
            self.ping_at = None
        elif t == DISCONNECT:
            self.disconnect_rc = p.rc  # MQTT 5: why the server closes
            raise Closed(104)  # the server sent DISCONNECT
        elif t == AUTH:
            from .client5 import on_auth
            on_auth(self, p)
        else:
            raise MQTTError("unexpected packet", 0x82)

    def _resume(self):
        # A new connection. Only what a reconnect or a kept session needs
        # loads umqtt3.client_resume; a first connect with nothing stored
        # leaves it unloaded.
        sp = self.session_present
        if (self.subs and not sp) or self.wait_pid or self.redelivered or \
                self.store.out_count():
            from .client_resume import resume
            resume(self, sp)
        if not sp:
            # The broker has no session: the packet ids of inbound QoS 2
            # messages still waiting for PUBREL mean nothing now, and a new
            # message reusing one would be taken for a duplicate and dropped.
            self.store.in_clear()

    def drain(self):
        # write all that is queued, or raise after timeout_ms
        self._flush_all(self.timeout_ms)
        return True

    def _keepalive(self):
        if not self.keepalive or self.state != _UP:
            return
        now = ticks_ms()
        ka = self.keepalive * 1000
        if self.ping_at is not None:
            if ticks_diff(now, self.ping_at) > ka:
                raise Closed(110)  # no PINGRESP: the link is dead
        elif ticks_diff(now, self.last_tx) >= ka:
            self._queue_simple(PINGREQ)
            self.ping_at = now

    def _queue_simple(self, ptype):
        c = self._up()
        c.tlen = encode_simple(c.tx, c.tlen, ptype)
        self.send()

    def _wait(self, state, timeout_ms):
        t = self.timeout_ms if timeout_ms is None else timeout_ms
        start = ticks_ms()
        while self.state != state:
            if self.state == _DOWN and not self.reconnect:
                raise OSError(111)
            if ticks_diff(ticks_ms(), start) > t:
                raise OSError(110)
            self.poll(10)

    def _wait_done(self, pid):
        start = ticks_ms()
        self.want = pid
        try:
            while self.store.out_has(pid):
                if ticks_diff(ticks_ms(), start) > self.timeout_ms:
                    raise OSError(110)
                self.poll(10)
        finally:
            self.want = -1

    def _request(self, pid):
        # SUBSCRIBE/UNSUBSCRIBE pid is sent (see *_start): wait for the answer
        if self.depth:
            return None  # from a callback: sent, not waited for (see _io)
        start = ticks_ms()
        while self.wait_pid == pid:
            if ticks_diff(ticks_ms(), start) > self.timeout_ms:
                self.wait_pid = 0
                raise OSError(110)
            self.poll(10)
        return self.answer
