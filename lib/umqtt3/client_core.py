# umqtt3.client_core -- one MQTT client connection without I/O: packets and
# the time in, bytes, a deadline and callbacks out.
#
#     core.start(now)           # a link is open: CONNECT is queued
#     n = core.conn.recv()      # the driver reads into core.conn.rx ...
#     core.packet(n, now)       # ... and hands over each whole packet
#     core.out(now)             # bytes ready: conn.tx[conn.sent:conn.tlen]
#     wait = core.tick(now)     # timers; ms until tick() has work again
#     core.lost(now)            # the link broke: back off, then start() again
#     core.refill()             # after a flush: more of a resume backlog
#
# The core keeps the connection's state (CONNACK, keepalive, the resume after
# a reconnect), the QoS 1/2 flows over the store and the buffers (a
# conn.Conn, whose link only the driver uses). The flows are the rules of
# umqtt3.flow (the broker's sessions use that module), written into the
# core: a client loads neither flow.py nor its Flow object. Events reach the
# application as callbacks (messages, acknowledgements) and as state the
# driver reads: is_connected(), wait_pid and answer (SUBACK/UNSUBACK),
# ack_pid (the last publish completed), waits (the completion code of each
# publish a caller waits for), disconnect_rc. It never
# opens a socket, resolves a name, reads a clock or sleeps: the drivers,
# client.MQTTClient (blocking) and aio.AsyncClient (asyncio), do.
from .compat import ticks_add, ticks_diff, const, MICROPYTHON
from .client_codec import (Packet, MQTTError, MQTTException, Busy, decode, encode_connect,
                           encode_publish, encode_ack, encode_filter, put_header, Conn, Closed,
                           mqtt5)

# Underscored consts take no slot in the module's dict (the drivers define
# the states again: MicroPython cannot import a const() name).
_DOWN = const(0)  # no link
_OPENING = const(1)  # CONNECT sent, CONNACK awaited
_UP = const(2)
_IDLE_MS = const(60000)  # tick()'s answer when no timer runs
_RESERVE = const(8)  # send-buffer bytes a PUBLISH may not take: acks and PINGREQ always fit
_LOST = const(0x100)  # the completion code of a message a reconnect forgot (store=False)
# packet types, as in codec
_CONNECT = const(1)
_CONNACK = const(2)
_PUBLISH = const(3)
_PUBACK = const(4)
_PUBREC = const(5)
_PUBREL = const(6)
_PUBCOMP = const(7)
_SUBACK = const(9)
_UNSUBACK = const(11)
_PINGRESP = const(13)
_DISCONNECT = const(14)
_AUTH = const(15)
# const() has done its work (MicroPython's compiler replaced every use): its
# name would take a slot in this module's dict (18 names: a table of 23
# slots, 17 names: 17)
del const
# The I/O errors the client raises itself carry an errno and an empty text
# (a text would be a string in RAM from import on; the empty one is
# interned): OSError(n, "") so that CPython sets e.errno too, as
# MicroPython does from OSError(n). 107 not connected, 110 timed out (also
# no CONNACK or PINGRESP in time), 104 the link or the server ended the
# connection (disconnect_rc: a server DISCONNECT's reason, MQTT 5), 32 a
# write failed. A refused dial's 111 is the socket's own, raised as it came.


def key(topic):
    # a filter as subs keeps it: a bytearray or memoryview as bytes
    # (hashable); client5.subscribed() asks with it too
    return topic if type(topic) in (str, bytes) else bytes(topic)


class Core:
    # Defaults set on the instance only when they change (set_sync(),
    # set_last_will(), ..., MQTT 5's CONNACK): each costs a slot in the
    # class's table, not in every instance's, nor a line of __init__.
    sync = None  # () -> None, made durable what deliver() took
    lw = None  # the will: (topic, msg, qos, retain, props)
    on_ack = None  # f(pid, reason code) when a QoS 1/2 publish completes
    disconnect_rc = None  # MQTT 5: the reason code of a server's DISCONNECT
    aliases = None  # MQTT 5: client5.Aliases, per connection
    # MQTT 5 limits the server set in CONNACK
    max_packet = 0  # Maximum Packet Size, 0: none [MQTT-3.2.2-15]
    alias_max = 0  # Topic Alias Maximum
    max_qos = 2  # Maximum QoS
    retain_ok = 1  # Retain Available
    keepalive0 = None  # our keepalive while the server's Server Keep Alive replaces it
    held = None  # the resume while it waits for acks (the server's Receive Maximum)
    # f(body, rc) -> body or None: a stored PUBLISH the new connection's
    # limits refuse (rc 0x95, 0x9B, 0x9A), sent lowered instead (client_resume;
    # a bridge's: a node's caller asked for that QoS, and gets the refusal)
    lower = None  # type: object
    too_large = 0  # inbound PUBLISHes larger than bufsize, discarded (client_skip)
    paused = None  # the StoreFull that left inbound QoS 1/2 unanswered on this link
    # MQTT 5: client5.late_answers once a request() left it as the callback
    # of a client that had none; not the application's (subscribe() asks)
    stand_in = None

    def __init__(self, client_id, keepalive=0, user=None, password=None, level=4,
                 store=None, window=8, bufsize=512, reconnect=False, timeout_ms=5000,
                 backoff_ms=(500, 30000), session_expiry=None, auth=None, now=0):
        self.client_id = client_id
        self.user = user
        self.password = password
        self.keepalive = keepalive
        self.level = level
        if level == 5:
            # what only client5 reads: a 3.1.1 client's instance has no
            # slot for it (48 attributes take a table of 59, 47 one of 47)
            self.session_expiry = session_expiry  # seconds, None: see client5
            self.auth = auth  # (method, data, f(data) -> reply data) or None
            # the window asked for: the broker's Receive Maximum may lower
            # window (what we send), never this; the Receive Maximum we
            # send is no more, nor more than the store's inbound room
            # (client5.announced_receive_max)
            self.receive_max = window
        if store is None:
            # loaded only when used: a FileStore client never loads it.
            # A pool of 1 KB for the window; inbound: room for the QoS 2
            # messages a broker sends before our PUBRECs reach it
            from .memstore import MemoryStore
            store = MemoryStore(window, 1024 // window, 32)
        elif store is False:
            # QoS 0/1/2 within one connection, nothing resent after a
            # reconnect: no pool, and memstore stays unloaded
            from .nostore import NoStore
            store = NoStore(window, 32)
        self.store = store
        self.window = window  # QoS 1/2 publishes in flight at once
        self.pid = 0  # the packet id taken last
        self.reconnect = reconnect
        self.auto = reconnect  # restored by connect() after disconnect()
        self.timeout_ms = timeout_ms
        self.backoff_ms = backoff_ms
        self.cb = None
        self.raw = False
        self.unsynced = False
        self.ack_pid = 0  # the last completed publish
        # {packet id: completion code}: the publishes callers wait for, 0
        # until acked() records another code (a plain PUBACK leaves it 0)
        self.waits = {}
        # set by deliver(), so on the instance from the start (no table of
        # the class's grows for them; the instance's has room)
        self.cur = None  # the packet being handed to the callback (once it raised: its error)
        self.depth = 0  # > 0 while the message callback runs
        self.redelivery = False  # True while the callback gets a redelivered message
        self.pkt = Packet(level)
        # one Conn for the client's life: buffers allocated once; a larger
        # head reads a PUBACK in one read
        self.conn = Conn(None, bufsize, bufsize, 0, 5)
        if level < 5:
            # a PUBLISH larger than bufsize: discarded, not the link. At 5
            # the server was told our size, so one is a Protocol Error
            # (DISCONNECT 0x95, MQTT 5.0 section 3.1.2.11.4) [MQTT-3.1.2-24]
            self.conn.discard = self
        self.state = _DOWN
        self.clean = True
        self.session_present = False
        self.subs = {}  # filter -> (options, props), re-subscribed when the session is gone
        self.tries = 0
        # when the next attempt may start (while opening: when it started)
        self.retry_at = self.last_tx = self.last_rx = now
        self.ping_at = None
        self.wait_pid = 0  # SUBSCRIBE/UNSUBSCRIBE waiting for its ack
        self.req = None  # its filter, asked again if the link drops first
        self.answer = -1  # SUBACK's code for it (MQTT 5: UNSUBACK's too)
        self.backlog = None  # the resume after CONNACK, while it waits for room
        self.redelivered = []  # inbound QoS 2 messages to hand over again
        for pid, state, key, body in store.recover():
            if state == "u":
                self.redelivered.append((pid, body))

    def __getattr__(self, name):
        # What a sensor node seldom calls (set_sync, set_ack_callback,
        # accepted, inflight, msg_props, unsubscribe, disconnect, ...) is
        # client_more.Core's: loaded on the first use of one of its names,
        # which is then kept in the class, so that later calls find it as
        # any method. Any other name: the AttributeError getattr() raises.
        # (CPython: see the end of this module.)
        if name[0] == "_":
            raise AttributeError(name)
        from . import client_more
        setattr(type(self), name, getattr(client_more.Core, name))
        return getattr(self, name)

    # ---------------------------------------------------------- application
    def set_callback(self, f, raw=False):
        """f(topic, msg) with bytes, as umqtt.simple (client.redelivery tells
        whether a message is handed over again after a reset); raw=True:
        f(pkt, redelivered) with the decoded codec.Packet (no allocation).
        If f raises, the message counts as not taken: no acknowledgement is
        sent and (QoS 1/2) the connection is dropped, so that the broker
        sends it again on the next one (persistent sessions). f is a plain
        function: with an async one each message raises TypeError, not
        taken (start a task from f for async work)."""
        self.cb = f
        self.raw = raw

    def is_connected(self):
        return self.state == _UP

    def set_last_will(self, topic, msg, retain=False, qos=0, props=None):
        """props (MQTT 5): the will's properties, e.g. {0x18: 30} for a Will
        Delay Interval of 30 s. (Here, not in client_more.py: a node with a
        will sets it before every first connect.)"""
        assert 0 <= qos <= 2 and topic
        self.lw = (topic, msg, qos, retain, props)

    def deliver(self, p, redelivered):
        # every inbound message, exactly once per message (packet(), and the
        # resume's redelivery)
        f = self.cb
        if f is None:
            if p.qos:
                # taken by nobody: not acknowledged, the link dropped, and
                # the server sends it again once a callback is set (a
                # persistent session's messages come at connect: set the
                # callback first) [MQTT-4.3.2-2]
                raise MQTTError("no callback", 0x80)
            return
        # While the callback runs the drivers read nothing: a nested read
        # would overwrite the packet being handled before it is acknowledged.
        self.depth += 1
        self.redelivery = redelivered
        self.unsynced = True
        self.cur = p
        try:
            if self.raw:
                r = f(p, redelivered)
            else:
                r = f(bytes(p.topic), bytes(p.payload))
            if r is not None and hasattr(r, "send"):
                # an async def's coroutine (MicroPython: a generator): the
                # core cannot await it, so the message was not handled
                r.close()  # (CPython would warn it was never awaited)
                raise TypeError("callback is async")
        except Exception as e:
            # the application's, whatever its type: the drivers pass it on
            # as the callback's, not as the link's (cur: read by them)
            self.cur = e
            raise
        finally:
            self.depth -= 1
            self.redelivery = False

    # ---------------------------------------------------------- requests
    def queue(self, topic, msg, retain=False, qos=0, key=None, props=None):
        """Queue a PUBLISH (QoS 1/2: stored first). While the connection is
        down, with reconnect, a QoS 1/2 message is only stored: the resume
        sends it (not with store=False, which keeps no bytes: OSError(107)
        then, as for QoS 0). Returns the packet id, 0 for QoS 0; raises
        Busy when the window or the send buffer is full."""
        up = self.state == _UP
        if not up and (not (qos and self.reconnect) or getattr(self.store, "lost", False)):
            raise OSError(107, "")
        if self.backlog is not None:
            raise Busy("busy", 0x97)  # the resend keeps its order
        if qos > self.max_qos:
            raise MQTTError("refused", 0x9B)  # [MQTT-3.2.2-11]
        if retain and not self.retain_ok:
            raise MQTTError("refused", 0x9A)  # [MQTT-3.2.2-14]
        if props:
            props = self.encoded(props, 3, topic, qos)  # MQTT 5: checked (client_more)
        c = self.conn
        start = c.tlen
        al = self.aliases
        new = None
        if al is not None and not qos and props is None:
            # MQTT 5 topic alias (client5.Aliases; QoS 0 only: a stored
            # message may be resent on a connection that knows no alias)
            props = al.props(topic)
            new = al.new
            if props is not None and new is None:
                topic = b""  # the server knows it
        pid = 0
        try:
            if qos:
                k = self.store.out_count()
                if k >= self.window:
                    raise Busy("busy", 0x97)
                if k:
                    pid = self.new_pid()
                else:  # nothing stored: the next id is free
                    pid = self.pid = self.pid % 65535 + 1
            end = encode_publish(c.tx, start, topic, msg, qos, pid, retain, False, self.level,
                                 props)
            if (self.max_packet and end - start > self.max_packet) or len(c.tx) - end < _RESERVE:
                # never sent to a server that would close on it
                # [MQTT-3.2.2-15]; the last bytes are for acks and PINGREQ
                raise MQTTError("too large", 0x95)
        except MQTTError as e:
            if e.code == 0x95 and start and self.fits(topic, msg, qos, props,
                                                      len(c.tx) - _RESERVE):
                # no room behind what is queued, but an empty buffer has
                # room: retry once it is sent (client_more.fits)
                raise Busy("busy", 0x97)
            raise  # larger than the whole buffer or the server's maximum
        if qos:
            # stored before its first send; nothing is queued if the store
            # refuses (StoreFull; 0x95, larger than it ever holds; OSError)
            self.store.out_add(pid, key, c.tx, start, end - start)
            self.unsynced = True  # stored: durable (set_sync) before it leaves
        # while down, stored only: it goes out when the connection is back
        c.tlen = end if up else start
        if new is not None:
            al.d[topic] = new  # known to the server once this PUBLISH is queued
        return pid

    # The halves of subscribe/unsubscribe, for drivers that wait their own
    # way: *_start queues and returns the packet id; the answer has come
    # when wait_pid no longer equals it.
    def subscribe_start(self, topic, qos=0, props=None):
        # qos: the options byte (MQTT 5's options above bit 1); -1: an
        # UNSUBSCRIBE (unsubscribe_start)
        if self.state != _UP:
            raise OSError(107, "")
        topic = key(topic)
        if qos >= 0:
            if props or qos & 4 or self.max_packet:
                # MQTT 5: No Local on a shared subscription, properties a
                # client may not send, a SUBSCRIBE above the server's Maximum
                # Packet Size: refused before subs keeps them (client_more)
                props = self.encoded(props, 8, topic, qos)
            # as umqtt.simple: messages would have nowhere to go
            assert self.cb is not None and self.cb is not self.stand_in, \
                "set_callback() before subscribe()"
        pid = self.new_pid()
        s = (qos, props)
        if not self.ask(pid, topic, s):
            raise Busy("busy", 0x97)
        # kept (or forgotten) once queued: a filter ask() refused is never
        # asked again by a reconnect's re-subscribe
        if qos < 0:
            self.subs.pop(topic, None)
        else:
            self.subs[topic] = s  # props too: asked the same way again
        if self.depth and self.wait_pid:
            # from the callback while a call waits for its answer: sent,
            # not waited for; the waiting call keeps its answer
            return pid
        self.req = topic
        self.wait_pid = pid
        self.answer = -1
        return pid

    def subscribe_end(self, topic):
        """The granted QoS; raises if the broker refused the filter."""
        rc = self.answer
        if rc >= 0x80:
            del self.subs[key(topic)]
            raise MQTTException(rc)
        return rc

    def new_pid(self):
        p = self.pid
        for _ in range(65535):
            p = p % 65535 + 1
            if not self.store.out_has(p):
                self.pid = p
                return p
        raise Busy("busy", 0x97)

    def ask(self, pid, topic, s=None):
        # SUBSCRIBE with s, (options, properties), else with those subs
        # keeps for topic; else UNSUBSCRIBE. False when the send buffer has
        # no room (MQTTError: the codec refused the filter or options)
        c = self.conn
        if c.space() < len(topic) + 16:
            return False
        s = s or self.subs.get(topic) or (-1, None)
        c.tlen = encode_filter(c.tx, c.tlen, pid, topic, s[0], self.level, s[1])
        return True

    def pingreq(self, now):
        if self.state != _UP:
            raise OSError(107, "")
        c = self.conn
        c.tlen = put_header(c.tx, c.tlen, 0xC0, 0)  # PINGREQ
        if self.ping_at is None:
            # one outstanding: its deadline stands (an application's ping()
            # every few seconds would otherwise hide a dead link for good)
            self.ping_at = now

    # ---------------------------------------------------------- connection
    def start(self, now):
        """The driver opened a link: queue CONNECT."""
        c = self.conn
        lw = self.lw or (None, b"", 0, False, None)
        props = None
        if self.level == 5:
            from .client5 import event
            props = event(self, _CONNECT, None)
        c.tlen = encode_connect(c.tx, 0, self.client_id, self.level, self.clean,
                                self.keepalive, self.user, self.password, lw[0], lw[1],
                                lw[2], lw[3], props, lw[4])
        self.state = _OPENING
        self.pkt.level = self.level
        self.retry_at = now  # the CONNACK timeout counts from here

    def down(self):
        """The driver closed the link: nothing read or queued on it is kept."""
        c = self.conn
        c.got = 0
        c.done()
        c.tlen = c.sent = 0
        self.state = _DOWN
        self.backlog = self.paused = None
        if self.held is not None:
            self.held = None

    def lost(self, now):
        """The link broke: down, and the next attempt after a backoff.
        Attempt k waits backoff_ms[0] * 2**(k-1) ms, at most backoff_ms[1]."""
        self.down()
        self.tries += 1
        lo, hi = self.backoff_ms
        d = min(hi, lo << min(self.tries - 1, 16))
        # jitter 75%..125%: the clock's low bits as noise (the device stubs
        # make ticks opaque, to stop arithmetic on them meant as time); 16
        # of them, so that the product stays a small int (no heap on a device)
        d = d * 3 // 4 + (now & 0xFFFF) * 7919 % (d // 2 + 1)  # type: ignore[operator, unused-ignore]
        self.retry_at = ticks_add(now, d)

    def out(self, now):
        """Bytes ready to send, conn.tx[conn.sent:conn.tlen]: what the
        callbacks and the store took is made durable (set_sync) before the
        packets behind it leave."""
        if self.unsynced:
            if self.sync is not None:
                self.sync()  # raises: still unsynced, nothing behind it leaves
            self.unsynced = False
        n = self.conn.tlen - self.conn.sent
        if n:
            self.last_tx = now
        return n

    def tick(self, now):
        """Timers: PINGREQ when nothing was sent, or nothing received, for
        keepalive seconds; Closed(110) when CONNACK or PINGRESP is late.
        Returns the ms until tick() has work again (while down: until a
        reconnect attempt may start)."""
        st = self.state
        if st == _DOWN:
            t = ticks_diff(self.retry_at, now) if self.reconnect else _IDLE_MS
        elif st == _OPENING:
            t = self.timeout_ms - ticks_diff(now, self.retry_at)
            if t < 0:
                raise Closed(110, "")  # no CONNACK
        elif not self.keepalive:
            t = _IDLE_MS
        else:
            ka = self.keepalive * 1000
            if self.ping_at is not None:
                # from the PINGREQ, or the last packet since: a PINGRESP
                # behind a stream of messages is late, not lost
                t = ka - min(ticks_diff(now, self.ping_at), ticks_diff(now, self.last_rx))
                if t < 0:
                    raise Closed(110, "")  # no PINGRESP: the link is dead
                t += 1
            else:
                # nothing sent [MQTT-3.1.2-23], or nothing received, for
                # keepalive seconds: a client that keeps sending QoS 0 to a
                # server gone silent learns it from the missing PINGRESP
                t = ka - max(ticks_diff(now, self.last_tx), ticks_diff(now, self.last_rx))
                if t <= 0:
                    self.pingreq(now)
                    t = ka
        return max(0, min(t, _IDLE_MS))

    def refill(self):
        """After a flush made room: more of the resume backlog. True when
        it queued bytes."""
        b = self.backlog
        if b is None:
            return False
        n = self.conn.tlen
        try:
            # returns when the send buffer is full again (1: when acks must
            # come first; the driver reads meanwhile), b once it is done
            r = next(b, b)
            if r is b:
                self.backlog = None
            elif r:
                self.held = b
                self.backlog = None
        except BaseException:
            self.backlog = None
            raise
        return self.conn.tlen != n

    def acked(self, pid, rc):
        # a stored publish completed (rc < 0x80), was refused, or (0x100)
        # was forgotten by a reconnect: a store without its copy cannot
        # resend it (client_resume)
        self.ack_pid = pid
        w = self.waits
        if pid in w:
            w[pid] = rc  # for the caller waiting for it
        if self.on_ack is not None:
            self.on_ack(pid, rc)
        if self.held is not None:
            # a resume waiting for this: the send quota grew [MQTT-4.9.0-2]
            self.backlog = self.held
            self.held = None
            self.refill()

    def packet(self, n, now):
        """Handle the whole packet in conn.rx[0:n]. Raises MQTTError for a
        protocol error and OSError when the connection must end; an
        exception from the application's callback leaves as it is (after a
        QoS 1/2 message the state is then DOWN: the driver closes the link)."""
        self.last_rx = now
        c = self.conn
        rx = c.rx
        if n == 4 and rx[0] == 0x40 and self.state == _UP and (rx[2] or rx[3]):
            # a PUBACK with its packet id alone (n == 4: remaining length
            # 2), what a sequential QoS 1 publish waits for: the branch
            # below without decode() (a packet id 0 is malformed
            # [MQTT-2.3.1-1]: decode() says so)
            pid = (rx[2] << 8) | rx[3]
            c.done()
            self.unsynced = True
            if self.store.out_del(pid):
                self.ack_pid = pid  # acked()'s step, its call only when it has more to do
                if self.on_ack is not None or self.held is not None:
                    self.acked(pid, 0)
            return
        if n < 0:
            return  # a piece of a PUBLISH larger than the buffer, discarded (client_skip)
        p = self.pkt
        t = decode(p, rx, 0, n)
        c.done()  # consumed even if the callback raises; rx stays intact
        if t == _PUBLISH:
            if p.props_len and mqtt5().find(rx, p.props_off, p.props_len, 0x23) >= 0:
                # (MQTT 5: props_len is 0 below) we allow no Topic Alias
                # [MQTT-3.1.2-27]: one is invalid (MQTT 5.0 section 3.3.2.3.4)
                raise MQTTError("protocol error", 0x94)
            if not p.topic_len:
                # (MQTT 5; decode() refuses it below 5) and an empty topic
                # without one is a protocol error [MQTT-3.3.2-12]
                raise MQTTError("protocol error", 0x82)
            if self.state == _UP:
                # hand it to the application once, answer it
                q = p.qos
                pid = p.pid  # read first: the callback may reuse the packet
                st = self.store
                if q and self.paused:
                    return  # behind one left unanswered: kept in order [MQTT-4.6.0-2]
                # a known QoS 2 id: PUBREC again, no second delivery [MQTT-4.3.3-2]
                if q < 2 or not st.in_has(pid):
                    if q == 2:
                        try:
                            st.in_add(pid, p.buf, 0, p.end)  # durable before PUBREC
                        except MQTTError as e:
                            if not st.in_count():
                                raise  # full of our own messages
                            # more QoS 2 ids in flight than the store holds
                            # (3.1.1 cannot tell the broker): this one and
                            # those behind it go unanswered; PUBRELs free
                            # the ids, then a new link brings them again
                            self.paused = e
                            return
                    try:
                        self.deliver(p, False)
                    except Exception:
                        # the callback raised: the message was not taken
                        # and is not acknowledged. The broker resends only
                        # on a new connection [MQTT-4.4.0-1], so drop this
                        # one (a persistent session gets it again; QoS 2:
                        # forgotten, so the resend delivers it); QoS 0 has
                        # nothing to resend.
                        if q:
                            if q == 2:
                                st.in_del(pid)
                            self.lost(now)
                        raise
                    if q == 2:
                        st.in_done(pid)
                if q:
                    c.tlen = encode_ack(c.tx, c.tlen, _PUBREC if q == 2 else _PUBACK, pid)
                return
        elif _PUBACK <= t <= _PUBCOMP:
            if self.state == _UP:
                pid = p.pid
                st = self.store
                # what the store records is durable before the next
                # send: a release before PUBCOMP, a PUBREC before PUBREL
                self.unsynced = True
                if t == _PUBREL:
                    st.in_del(pid)  # removed durably before PUBCOMP
                    # unknown ids are answered too, so the sender can finish
                    c.tlen = encode_ack(c.tx, c.tlen, _PUBCOMP, pid)
                    why = self.paused
                    if why and not st.in_count():
                        # all ids free: a new link at once, on which the
                        # broker sends the unanswered ones again
                        # [MQTT-4.4.0-1] (and the PUBRELs whose PUBCOMP
                        # this drops: answered as unknown ids)
                        self.down()
                        self.retry_at = now
                        raise why
                elif t == _PUBREC and p.rc < 0x80:
                    # recorded before PUBREL [MQTT-4.3.3-1] (True: the
                    # store sends PUBREL itself, in its own order)
                    if not (st.out_has(pid) and st.out_rel(pid)):
                        c.tlen = encode_ack(c.tx, c.tlen, _PUBREL, pid)
                elif st.out_del(pid):
                    # PUBACK, PUBCOMP, or a v5 PUBREC refusing the
                    # message: a publish completed, or was refused
                    self.acked(pid, p.rc)
                return
        elif t == _AUTH:  # (decode() refuses AUTH below level 5)
            from .client5 import event
            event(self, _AUTH, p)  # enhanced authentication, also before CONNACK
            return
        elif self.state == _OPENING:
            if t == _CONNACK:
                if p.rc:
                    # server unavailable / busy / quota / rate: try
                    # again later; any other refusal (version, id,
                    # credentials) is final
                    self.reconnect = self.reconnect and p.rc in b"\x03\x88\x89\x97\x9f"
                    raise MQTTException(p.rc)
                if p.session_present and self.clean:
                    # a session we did not ask for: close [MQTT-3.2.2-4]
                    raise MQTTError("protocol error", 0x82)
                self.state = _UP
                self.tries = 0
                if self.level == 5:
                    from .client5 import event
                    event(self, _CONNACK, p)  # (and a new connection's aliases)
                self.ping_at = None
                sp = self.session_present = p.session_present
                # A new connection. Only what a reconnect or a kept
                # session needs loads umqtt3.client_resume; a first
                # connect with nothing stored leaves it unloaded.
                if (self.subs and not sp) or self.wait_pid or self.redelivered or \
                        self.store.out_count():
                    from .client_resume import resume
                    self.backlog = resume(self, sp)
                    self.refill()
                elif not sp:
                    # The broker has no session: the packet ids of
                    # inbound QoS 2 messages still waiting for PUBREL
                    # mean nothing now, and a new message reusing one
                    # would be taken for a duplicate and dropped.
                    self.store.in_clear()
                return
        elif t == _SUBACK or t == _UNSUBACK:
            if p.pid == self.wait_pid:
                # SUBACK: the granted QoS or a refusal; MQTT 5 UNSUBACK too
                self.answer = c.rx[p.payload_off] if t == _SUBACK or self.level == 5 else 0
                self.wait_pid = 0
            return
        elif t == _PINGRESP:
            self.ping_at = None
            return
        elif t == _DISCONNECT:
            self.disconnect_rc = p.rc  # MQTT 5: why the server closes
            raise Closed(104, "")  # the server sent DISCONNECT
        raise MQTTError("protocol error", 0x82)  # (before CONNACK: not CONNACK)


if not MICROPYTHON:
    # CPython reads every attribute of a class with __getattr__ the slow way
    # (2-4 times as long: no specialised reads), so there the seldom calls
    # are the class's methods from the start, and it has no __getattr__
    del Core.__getattr__
    from . import client_more
    for n in dir(client_more.Core):
        if n[0] != "_":
            setattr(Core, n, getattr(client_more.Core, n))
