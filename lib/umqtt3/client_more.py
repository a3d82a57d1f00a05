# umqtt3.client_more -- the client's calls a sensor node seldom makes
# (unsubscribe, disconnect, the hooks and the store's questions):
# on MicroPython loaded by client_core.Core.__getattr__ on the first use of
# one of them, which then puts it into the client's class, so that a later
# call is a plain method call; a node that only connects, subscribes and
# publishes never loads it (docs/client.md, "What it costs in RAM"). On
# CPython client_core puts them all into the class at import.
#
# Each function is a method of the client (self: client_core.Core, or
# client.MQTTClient for the blocking driver's three at the end). Only
# underscored names are imported at module level (from client_codec and
# compat, which every client has loaded): every public name here becomes a
# client attribute on first use.
from .client_codec import mqtt5 as _mqtt5  # umqtt3.props, without an import per call
from .client_codec import MQTTError as _MQTTError
# (poll() calls redial() all through a backoff: no import per call)
from .compat import ticks_ms as _ticks_ms, ticks_diff as _ticks_diff, sleep_ms as _sleep_ms


def set_sync(self, f):
    """f() runs before any acknowledgement of a delivered message, and
    before the PUBCOMP of a released QoS 2 id, leaves: a callback (or a
    store) may buffer what it takes and f makes it durable, once for a
    whole burst (group commit). None: acknowledge as soon as taken.
    Also before a queued QoS 1/2 PUBLISH or a PUBREL leaves: a store
    that defers its syncs (the bridge's) is made durable by f, once for
    everything queued since."""
    self.sync = f


def set_ack_callback(self, f):
    """f(pid, reason_code) when a QoS 1/2 publish completes (PUBACK,
    PUBCOMP) or is refused (MQTT 5: reason code 0x80 or more in PUBACK
    or PUBREC), or 0x100 when a reconnect forgot it (store=False). With
    wait=True a refusal raises MQTTError instead, a loss OSError(104).
    Also f(0, 0x195) when an inbound message larger than bufsize was
    discarded (client_skip; counted in too_large), and f(0, 0x95) when a
    reconnect's re-subscribe forgot a filter above the new server's
    Maximum Packet Size (client_resume)."""
    self.on_ack = f


def accepted(self, key):
    """After a reboot: was the publish with this key taken (stored)?"""
    return self.store.accepted(key)


def inflight(self):
    return self.store.out_count()


def fits(self, topic, msg, qos, props, room):
    """Would this PUBLISH fit `room` bytes of an empty send buffer and the
    server's Maximum Packet Size [MQTT-3.2.2-15]? queue() asks when the
    buffer had no room behind queued bytes: Busy (retry once they are
    sent) if so, else MQTTError 0x95 (retrying cannot help). The size as
    encode_publish counts it."""
    from .compat import as_bytes
    n = len(as_bytes(topic)) + len(as_bytes(msg)) + (4 if qos else 2)
    if self.level == 5:
        from .props import size, encoded
        n += size(encoded(props))
    n += 2 if n < 128 else 3 if n < 16384 else 4
    return n <= room and not (self.max_packet and n > self.max_packet)


def msg_props(self):
    """MQTT 5: the properties of the message the callback is handling,
    as a dict {id: value} (allocates; see umqtt3.client5.value_at for
    reading them from a raw callback without allocating)."""
    from .client5 import event
    return event(self, 3, self.cur)  # 3: PUBLISH


def unsubscribe_start(self, topic):
    # the half of unsubscribe() that queues it (see Core.subscribe_start),
    # both drivers': never above the server's Maximum Packet Size
    # [MQTT-3.2.2-15], refused as a SUBSCRIBE is, nothing sent or forgotten
    if oversized(self, topic, (-1, None)):
        raise _MQTTError("too large", 0x95)
    return self.subscribe_start(topic, -1)


def encoded(self, props, t, topic=None, qos=0):
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
        p5 = _mqtt5()
        if t == 8:
            from .compat import as_bytes
            topic = as_bytes(topic)
            if qos & 4 and topic[:7] == b"$share/":
                raise _MQTTError("protocol error", 0x82)
        if props:
            props = p5.outgoing(props, t, self.alias_max)
            if t == 3 and qos and not topic and p5.find(props, 0, len(props), 0x23) >= 0:
                raise _MQTTError("PUBLISH at QoS %d: an empty topic (a Topic Alias alone)"
                                 " cannot be resent" % qos, 0x94)
        if t == 8 and oversized(self, topic, (qos, props)):
            raise _MQTTError("too large", 0x95)
    return props


def oversized(self, topic, s):
    """MQTT 5: is the SUBSCRIBE of topic with s, (options, encoded
    properties), above the server's Maximum Packet Size [MQTT-3.2.2-15]?
    (s[0] < 0: the UNSUBSCRIBE.) encoded() asks before a filter is kept,
    unsubscribe_start() before an UNSUBSCRIBE is queued, the re-subscribe
    (client_resume) before a kept one goes to a new server, whose maximum
    may be smaller."""
    if not self.max_packet:
        return False
    from .compat import as_bytes
    # the packet id, the properties, the filter, the options
    n = 2 + _mqtt5().size(s[1]) + 2 + len(as_bytes(topic)) + (s[0] >= 0)
    return n + (2 if n < 128 else 3 if n < 16384 else 4) > self.max_packet


def bye(self, rc=None, props=None):
    """Queue DISCONNECT if connected; no reconnect until the next
    connect. True when there is something to send. MQTT 5: rc, the reason
    code (0x04: the server publishes the will), and props, e.g. {0x11: 0}
    to end the session now; what a client may not send raises MQTTError
    (client5.goodbye), nothing queued, the connection kept."""
    from .client_codec import MQTTError, put_header
    if rc is not None or props is not None:
        if self.level != 5:
            raise MQTTError("DISCONNECT reason or properties: MQTT 5 only", 0x82)
        from .client5 import goodbye
        props = goodbye(self, rc, props)
    self.reconnect = False
    if not self.is_connected():
        return False
    c = self.conn
    try:
        if rc is None and props is None:
            c.tlen = put_header(c.tx, c.tlen, 0xE0, 0)  # DISCONNECT, no reason
        else:
            c.tlen = _mqtt5().encode_rc(c.tx, c.tlen, 0xE0, rc, props)
    except MQTTError:
        return False
    return True


# ---------------------------------------------------------- client.MQTTClient

def connect_start(self, clean_session=True, sock=None):
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


def redial(self, timeout_ms):
    """poll()'s reconnect while the link is down (reconnect=True): nothing
    until the backoff has passed (poll() sleeps what timeout_ms allows of
    it), then the attempt, in steps that each wait at most timeout_ms
    (poll(0) does not wait): the TCP connect, the TLS handshake, then
    open_link(). True once the link is open, False while the backoff or
    the dial goes on, or when the attempt failed or took longer than the
    client's timeout_ms: its OSError is kept in err (connect() raises it at
    its timeout) and the next attempt comes after a backoff.
    (The name lookup still blocks: give an address to never wait.)"""
    w = _ticks_diff(self.retry_at, _ticks_ms())
    if w > 0:
        _sleep_ms(min(timeout_ms, w))
        return False
    try:
        return _dial(self, timeout_ms)
    except OSError as e:
        self.lost(_ticks_ms())
        self.err = e
        return False


def _dial(self, timeout_ms):
    # the attempt: True once the link is open, False while it goes on
    if self.connect_link:
        self.open_link()
        return True
    from .compat import ticks_ms, ticks_diff, poll
    from .compat.dial_steps import dial_start, dial_done, tls_start, tls_step
    s = self.sock  # the dial under way, closed by down()
    if s is None:
        s = self.sock = dial_start(self.server, self.port)
        self.retry_at = ticks_ms()  # the attempt's start
        self.dialing = 4  # waits to be writable: the TCP connect
    elif ticks_diff(ticks_ms(), self.retry_at) > self.timeout_ms:
        raise OSError(110, "connect timed out")
    elif self.dialing < 0:
        self.dialing = 0  # the handshake: another step
    while True:
        if self.dialing == 4 and dial_done(s):
            self.dialing = 0
            if self.ssl:
                s = self.sock = tls_start(s, self.server, self.ssl, self.ssl_params)
        if not self.dialing:
            w = tls_step(s) if self.ssl else 0
            if not w:
                break
            self.dialing = -w  # (negative: the handshake's wait)
        if not timeout_ms:
            return False
        p = poll()
        p.register(s, abs(self.dialing))
        if not p.poll(timeout_ms):
            return False
        if self.dialing < 0:
            self.dialing = 0
        timeout_ms = 0  # one wait per poll()
    self.sock = None  # (open_link() would close it)
    self.open_link(s)
    return True


def unsubscribe(self, topic):
    """MQTT 5: returns UNSUBACK's reason code (0x11: there was no such
    subscription); raises MQTTError for a refusal."""
    rc = self.wait_answer(self.unsubscribe_start(topic))
    if rc is not None and rc >= 0x80:
        from .client_codec import MQTTError
        raise MQTTError("refused", rc)
    return rc


def disconnect(self, rc=None, props=None):
    """Send DISCONNECT (MQTT 5: with reason code rc and properties props,
    see bye()) and close the connection; no reconnect until connect()."""
    if self.bye(rc, props):
        from .client_codec import MQTTError
        try:
            self.drain()
        except (OSError, MQTTError):
            pass
    self.down()

