# umqtt3.client_more -- the client's calls a sensor node seldom makes
# (unsubscribe, disconnect, the hooks and the store's questions):
# on MicroPython loaded by client_core.Core.__getattr__ on the first use of
# one of them, which then puts it into the client's class, so that a later
# call is a plain method call; a node that only connects, subscribes and
# publishes never loads it (docs/client.md, "What it costs in RAM"). On
# CPython client_core puts them all into the class at import.
#
# They are the methods of Core, the rest of client_core.Core (a class
# never instantiated; the name is one the client has anyway): its public
# names, and only they, become the client's (self: client_core.Core, or
# client.MQTTClient for the blocking driver's calls at the end), so the
# module imports by their own names what they use. From client_codec and
# compat, which every client has loaded, at the top: nothing is imported
# per call (poll() calls redial() all through a backoff).
from .client_codec import mqtt5, MQTTError, put_header
from .compat import ticks_ms, ticks_diff, sleep_ms, as_bytes, poll

if False:  # for the type check alone (the compiler drops it): self is a client
    from typing import Any


class Core:
    def set_sync(self: "Any", f):
        """f() runs before any acknowledgement of a delivered message, and
        before the PUBCOMP of a released QoS 2 id, leaves: a callback (or a
        store) may buffer what it takes and f makes it durable, once for a
        whole burst (group commit). None: acknowledge as soon as taken.
        Also before a queued QoS 1/2 PUBLISH or a PUBREL leaves: a store
        that defers its syncs (the bridge's) is made durable by f, once for
        everything queued since."""
        self.sync = f

    def set_ack_callback(self: "Any", f):
        """f(pid, reason_code) when a QoS 1/2 publish completes (PUBACK,
        PUBCOMP) or is refused (MQTT 5: reason code 0x80 or more in PUBACK
        or PUBREC), or 0x100 when a reconnect forgot it (store=False). With
        wait=True a refusal raises MQTTError instead, a loss OSError(104).
        Also f(0, 0x195) when an inbound message larger than bufsize was
        discarded (client_skip; counted in too_large), and f(0, 0x95) when a
        reconnect's re-subscribe forgot a filter above the new server's
        Maximum Packet Size (client_resume)."""
        self.on_ack = f

    def accepted(self: "Any", key):
        """After a reboot: was the publish with this key taken (stored)?"""
        return self.store.accepted(key)

    def inflight(self: "Any"):
        return self.store.out_count()

    def fits(self: "Any", topic, msg, qos, props, room):
        """Would this PUBLISH fit `room` bytes of an empty send buffer and the
        server's Maximum Packet Size [MQTT-3.2.2-15]? queue() asks when the
        buffer had no room behind queued bytes: Busy (retry once they are
        sent) if so, else MQTTError 0x95 (retrying cannot help). The size as
        encode_publish counts it."""
        n = len(as_bytes(topic)) + len(as_bytes(msg)) + (4 if qos else 2)
        if self.level == 5:
            p5 = mqtt5()
            n += p5.size(p5.encoded(props))
        n += 2 if n < 128 else 3 if n < 16384 else 4
        return n <= room and not (self.max_packet and n > self.max_packet)

    def msg_props(self: "Any"):
        """MQTT 5: the properties of the message the callback is handling,
        as a dict {id: value} (allocates; see umqtt3.client5.value_at for
        reading them from a raw callback without allocating)."""
        from .client5 import event
        return event(self, 3, self.cur)  # 3: PUBLISH

    def unsubscribe_start(self: "Any", topic):
        # the half of unsubscribe() that queues it (see Core.subscribe_start),
        # both drivers': never above the server's Maximum Packet Size
        # [MQTT-3.2.2-15], refused as a SUBSCRIBE is, nothing sent or forgotten
        if self.oversized(topic, (-1, None)):
            raise MQTTError("too large", 0x95)
        return self.subscribe_start(topic, -1)

    def encoded(self: "Any", props, t, topic=None, qos=0):
        """MQTT 5: the properties the application gives for packet type t (3
        PUBLISH, 8 SUBSCRIBE: topic and qos, the QoS or the options byte),
        checked and encoded before anything is stored or queued (Core.queue,
        Core.subscribe_start). Raises MQTTError: 0x82 naming a property a
        client may not send there, 0x94 for a Topic Alias out of range
        (props.outgoing); 0x82 for No Local on a shared subscription
        [MQTT-3.8.3-4]; 0x94 for an empty topic at QoS 1/2 (it stands on a
        Topic Alias, whose mapping lasts one connection [MQTT-3.3.2-7]: a
        stored copy could not be resent on the next); 0x95 for a SUBSCRIBE
        above the server's Maximum Packet Size [MQTT-3.2.2-15], as for a
        PUBLISH. Allocates nothing for bytes that pass. Below level 5 props
        come back as given (no properties are sent)."""
        if self.level == 5:
            p5 = mqtt5()
            if t == 8:
                topic = as_bytes(topic)
                if qos & 4 and topic[:7] == b"$share/":
                    raise MQTTError("protocol error", 0x82)
            if props:
                props = p5.outgoing(props, t, self.alias_max)
                if t == 3 and qos and not topic and p5.find(props, 0, len(props), 0x23) >= 0:
                    raise MQTTError("PUBLISH at QoS %d: an empty topic (a Topic Alias alone)"
                                    " cannot be resent" % qos, 0x94)
            if t == 8 and self.oversized(topic, (qos, props)):
                raise MQTTError("too large", 0x95)
        return props

    def oversized(self: "Any", topic, s):
        """MQTT 5: is the SUBSCRIBE of topic with s, (options, encoded
        properties), above the server's Maximum Packet Size [MQTT-3.2.2-15]?
        (s[0] < 0: the UNSUBSCRIBE.) encoded() asks before a filter is kept,
        unsubscribe_start() before an UNSUBSCRIBE is queued, the re-subscribe
        (client_resume) before a kept one goes to a new server, whose maximum
        may be smaller."""
        if not self.max_packet:
            return False
        # the packet id, the properties, the filter, the options
        n = 2 + mqtt5().size(s[1]) + 2 + len(as_bytes(topic)) + (s[0] >= 0)
        return n + (2 if n < 128 else 3 if n < 16384 else 4) > self.max_packet

    def bye(self: "Any", rc=None, props=None):
        """Queue DISCONNECT if connected; no reconnect until the next
        connect. True when there is something to send. MQTT 5: rc, the reason
        code (0x04: the server publishes the will), and props, e.g. {0x11: 0}
        to end the session now; what a client may not send raises MQTTError
        (client5.goodbye), nothing queued, the connection kept."""
        if rc is not None or props is not None:
            if self.level != 5:
                raise MQTTError("DISCONNECT reason or properties: MQTT 5 only", 0x82)
            from .client5 import goodbye
            props = goodbye(self, rc, props)
        self.reconnect = False
        if not self.is_connected():
            return False
        # the rest of a reconnect's resend stays stored for the next
        # connect(): nothing may follow DISCONNECT on this link [MQTT-3.14.4-1]
        self.backlog = None
        if self.held is not None:
            self.held = None
        c = self.conn
        try:
            if rc is None and props is None:
                c.tlen = put_header(c.tx, c.tlen, 0xE0, 0)  # DISCONNECT, no reason
            else:
                c.tlen = mqtt5().encode_rc(c.tx, c.tlen, 0xE0, rc, props)
        except MQTTError:
            return False
        return True

    # ------------------------------------------------------ client.MQTTClient

    def connect_start(self: "Any", clean_session=True, sock=None):
        """Open the connection (on sock, when the caller connected one) and
        send CONNECT; poll() takes it from there (is_connected() once
        CONNACK accepted it). connect() without the wait."""
        self.clean = clean_session
        self.tries = 0
        self.reconnect = self.auto
        try:
            self.open_link(sock)
        except Exception:
            self.down()  # no half-open socket left behind
            raise

    def redial(self: "Any", timeout_ms):
        """poll()'s reconnect while the link is down (reconnect=True): nothing
        until the backoff has passed (poll() sleeps what timeout_ms allows of
        it), then the attempt, in steps that each wait at most timeout_ms
        (poll(0) does not wait): the TCP connect, the TLS handshake, then
        open_link(). True once the link is open, False while the backoff or
        the dial goes on, or when the attempt failed or took longer than the
        client's timeout_ms: its OSError is kept in err (connect() raises it at
        its timeout) and the next attempt comes after a backoff.
        (The name lookup still blocks: give an address to never wait.)"""
        w = ticks_diff(self.retry_at, ticks_ms())
        if w > 0:
            sleep_ms(min(timeout_ms, w))
            return False
        try:
            return dial(self, timeout_ms)
        except OSError as e:
            self.lost(ticks_ms())
            self.err = e
            return False

    def unsubscribe(self: "Any", topic):
        """MQTT 5: returns UNSUBACK's reason code (0x11: there was no such
        subscription); raises MQTTError for a refusal."""
        rc = self.wait_answer(self.unsubscribe_start(topic))
        if rc is not None and rc >= 0x80:
            raise MQTTError("refused", rc)
        return rc

    def disconnect(self: "Any", rc=None, props=None):
        """Send DISCONNECT (MQTT 5: with reason code rc and properties props,
        see bye()) and close the connection; no reconnect until connect()."""
        if self.bye(rc, props):
            try:
                self.drain()
            except (OSError, MQTTError):
                pass
        self.down()


def dial(c, timeout_ms):
    # redial()'s attempt on the blocking client c: True once the link is
    # open, False while it goes on
    if c.connect_link:
        c.open_link()
        return True
    from .compat.dial_steps import dial_start, dial_done, tls_start, tls_step
    s = c.sock  # the dial under way, closed by down()
    if s is None:
        s = c.sock = dial_start(c.server, c.port)
        c.retry_at = ticks_ms()  # the attempt's start
        c.dialing = 4  # waits to be writable: the TCP connect
    elif ticks_diff(ticks_ms(), c.retry_at) > c.timeout_ms:
        raise OSError(110, "connect timed out")
    elif c.dialing < 0:
        c.dialing = 0  # the handshake: another step
    while True:
        if c.dialing == 4 and dial_done(s):
            c.dialing = 0
            if c.ssl:
                s = c.sock = tls_start(s, c.server, c.ssl, c.ssl_params)
        if not c.dialing:
            w = tls_step(s) if c.ssl else 0
            if not w:
                break
            c.dialing = -w  # (negative: the handshake's wait)
        if not timeout_ms:
            return False
        p = poll()
        p.register(s, abs(c.dialing))
        if not p.poll(timeout_ms):
            return False
        if c.dialing < 0:
            c.dialing = 0
        timeout_ms = 0  # one wait per poll()
    c.sock = None  # (open_link() would close it)
    c.open_link(s)
    return True
