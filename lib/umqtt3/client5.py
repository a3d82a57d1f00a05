# umqtt3.client5 -- what MQTTClient does only at MQTT 5 (level=5), imported on
# first use so that a 3.1.1 client never loads it (nor umqtt3.props).
#
# The client core calls event() for CONNECT's properties, CONNACK's limits,
# enhanced authentication and msg_props(). The application reads a
# message's properties with msg_props() (a dict; allocates) or, in a raw
# callback without allocating, with value_at() and props.get(); and asks
# with request() for the answer to a request (response topic and
# correlation data).
from .compat import ticks_ms, ticks_diff, const
from .props import TYPES, get, parse, encode, encode_auth, varint_end, outgoing
from .client_codec import MQTTError, Packet, decode, encode_publish
from .client_core import key

_CONNECT = const(1)  # packet types, as in client_codec
_CONNACK = const(2)
_PUBLISH = const(3)
# property ids (MQTT 5.0 section 2.2.2.2)
_SESSION_EXPIRY = const(0x11)
_ASSIGNED_ID = const(0x12)
_SERVER_KEEPALIVE = const(0x13)
_AUTH_METHOD = const(0x15)
_AUTH_DATA = const(0x16)
_REASON_STRING = const(0x1F)
_RECEIVE_MAX = const(0x21)
_ALIAS_MAX = const(0x22)
_MAX_PACKET = const(0x27)
_MAX_QOS = const(0x24)
_RETAIN_OK = const(0x25)
_RESPONSE_TOPIC = const(0x08)
_CORRELATION = const(0x09)
_TOPIC_ALIAS = const(0x23)
# the reason codes a client may put in DISCONNECT (MQTT 5.0 section
# 3.14.2.1: sent by "Client" or "Client or Server") [MQTT-3.14.2-1]
_RC_DISCONNECT = b"\x00\x04\x80\x81\x82\x83\x90\x93\x94\x95\x96\x97\x98\x99"


def event(c, t, p):
    """What MQTT 5 adds where the core meets packet type t (one entry, so
    that the core names one function of this module):
    CONNECT (p None): its properties: session expiry (the client's, else
      "never" for a persistent session and none for a clean one), the
      receive maximum, enhanced authentication;
    CONNACK: the server's limits bind the client; an assigned id is kept
      for the reconnects (they must resume the session under it), and so
      is the session: Clean Start is the first connect's only;
    AUTH: continue (0x18) asks the application's hook for the next
      authentication data [MQTT-4.12.0-2];
    PUBLISH: the message's properties as a dict (msg_props(); allocates).
    The will's properties are checked here, at each CONNECT: MQTTError
    naming one a will may not carry (props.outgoing), nothing sent."""
    if t == _PUBLISH:
        return parse(p.buf, p.props_off, p.props_len) if p.props_len else {}
    if t == _CONNECT:
        lw = c.lw
        if lw is not None and lw[4]:
            outgoing(lw[4], 0)  # (0: the will's properties)
        if c.keepalive0 is not None:
            c.keepalive = c.keepalive0  # asked for anew: the last server's is its own
        d = {}
        exp = c.session_expiry
        if exp is None and not c.clean:
            exp = 0xFFFFFFFF
        if exp:
            d[_SESSION_EXPIRY] = exp
        d[_RECEIVE_MAX] = announced_receive_max(c)
        # nothing larger than the receive buffer: the server drops such a
        # message for us [MQTT-3.1.2-24, MQTT-3.1.2-25] rather than have us
        # close on it at every reconnect
        d[_MAX_PACKET] = c.conn.max_packet
        if c.auth is not None:
            d[_AUTH_METHOD] = c.auth[0]
            if c.auth[1] is not None:
                d[_AUTH_DATA] = c.auth[1]
        return encode(d)
    b, o, n = p.buf, p.props_off, p.props_len
    if t == _CONNACK:
        # Both per connection: the quota starts anew with each one
        # [MQTT-4.9.0-1]; the window never exceeds our own (the store's size)
        rm = get(b, o, n, _RECEIVE_MAX)  # [MQTT-3.3.4-7]
        c.window = rm if rm and rm < c.receive_max else c.receive_max
        ka = get(b, o, n, _SERVER_KEEPALIVE)  # [MQTT-3.2.2-21]
        if ka is not None:
            c.keepalive0 = c.keepalive
            c.keepalive = ka
        c.max_packet = get(b, o, n, _MAX_PACKET, 0)  # [MQTT-3.2.2-15]
        c.max_qos = get(b, o, n, _MAX_QOS, 2)  # [MQTT-3.2.2-11]
        c.retain_ok = get(b, o, n, _RETAIN_OK, 1)  # [MQTT-3.2.2-14]
        c.alias_max = am = get(b, o, n, _ALIAS_MAX, 0)  # [MQTT-3.3.2-9]
        c.aliases = Aliases(am) if am else None  # none from an old connection
        cid = get(b, o, n, _ASSIGNED_ID)
        if cid is not None:
            c.client_id = cid  # [MQTT-3.2.2-16]
        if c.session_expiry and c.clean:
            # the server keeps this session after the link goes: the
            # automatic reconnects resume it (Clean Start 0 [MQTT-3.1.2-5]),
            # as Clean Start 1 would discard it [MQTT-3.1.2-4]; connect()
            # asks for a clean one again (paho's clean start "first only")
            c.clean = False
        if c.disconnect_rc is not None:
            c.disconnect_rc = None  # this connection's end is yet to come
        if c.auth is not None:
            data = get(b, o, n, _AUTH_DATA)
            if data is not None:
                # the server's last word (section 4.12's SCRAM example:
                # server-final, its proof): the hook checks it too
                _hook(c, data)
    elif c.auth is not None and p.rc == 0x18:
        # (success, 0x00, needs nothing; without a hook the server closes)
        d = {_AUTH_METHOD: c.auth[0]}
        reply = _hook(c, get(b, o, n, _AUTH_DATA))
        if reply is not None:
            d[_AUTH_DATA] = reply
        conn = c.conn
        conn.tlen = encode_auth(conn.tx, conn.tlen, 0x18, d)
    return None


def announced_receive_max(c):
    """The Receive Maximum CONNECT announces: at most this many QoS 1/2
    PUBLISHes unacknowledged at once to us [MQTT-3.3.4-9, the server's
    rule]. The window, and no more than the store holds inbound QoS 2 ids
    for (store.in_max; a store without it: the window), so that a server
    that honours it never fills the table. At least 1 (0 is a Protocol
    Error, MQTT 5.0 section 3.1.2.11.3)."""
    w = c.receive_max
    f = getattr(c.store, "in_max", None)
    return w if f is None else max(1, min(w, f(w)))


_KEYS = (bytes, str)  # topics an alias may stand for: a bytearray's contents may change


class Aliases:
    """The Topic Aliases of one connection, for the QoS 0 publishes without
    properties (Core.queue): the topic once, then two bytes [MQTT-3.3.2-12],
    at most the server's Topic Alias Maximum and 8 of them."""

    def __init__(self, n):
        self.n = min(n, 8)
        self.d = {}  # topic -> its Topic Alias property, once sent
        self.new = None  # the property props() made for a topic not yet in d

    def props(self, topic):
        # topic's Topic Alias property, or None (none left; a bytearray
        # topic may change: none; an empty one is the codec's to refuse)
        self.new = None
        if not topic or not isinstance(topic, _KEYS):
            return None
        d = self.d
        p = d.get(topic)
        if p is None and len(d) < self.n:
            p = self.new = bytes((0x23, 0, len(d) + 1))
        return p


def unalias(body):
    """A stored PUBLISH as a new connection's resend sends it (client_resume):
    without the application's Topic Alias, whose mapping lasted the
    connection that set it [MQTT-3.3.2-7] and which the new server may not
    allow [MQTT-3.3.2-9]; its topic goes in full. body itself when it has
    none; None when its topic is empty (only a store written before
    publish() refused that has one): nothing could name it."""
    p = Packet(5)
    decode(p, body, 0, len(body))
    o = value_at(p, _TOPIC_ALIAS)
    if o < 0:
        return body
    if not p.topic_len:
        return None
    i = p.props_off
    props = bytes(body[i:o - 1]) + bytes(body[o + 2:i + p.props_len])
    b = bytearray(len(body))
    n = encode_publish(b, 0, p.topic, p.payload, p.qos, p.pid, p.retain, False, 5, props)
    return memoryview(b)[:n]


def _hook(c, data):
    # The application's enhanced-authentication hook with the server's data.
    # A hook that raises rejects the server: MQTTError(0x87), which both
    # drivers answer by closing the connection (any other exception would
    # pass for a message callback's and leave it open).
    try:
        return c.auth[2](data)
    except MQTTError:
        raise
    except Exception as e:
        raise MQTTError("authentication refused: %r" % (e,), 0x87)


def goodbye(c, rc, props):
    """DISCONNECT's reason code and properties (MQTT 5.0 3.14.2), checked
    for client.disconnect(rc, props); returns the properties encoded.
    Raises MQTTError(0x82): a code a client may not send [MQTT-3.14.2-1],
    a property a client may not send (props.outgoing), or a Session Expiry
    Interval above 0 when CONNECT's was 0 (a Protocol Error, 3.14.2.2.2)."""
    if rc is not None and not (0 <= rc < 256 and rc in _RC_DISCONNECT):
        raise MQTTError("DISCONNECT reason code 0x%02x: not a client's" % rc, 0x82)
    if props is not None:
        props = outgoing(props, 14)
        exp = c.session_expiry  # as event() put it in CONNECT
        if get(props, 0, len(props), _SESSION_EXPIRY) and not (exp or (exp is None and
                                                                        not c.clean)):
            raise MQTTError("DISCONNECT property 0x11: CONNECT's Session Expiry "
                            "Interval was 0", 0x82)
    return props


def reason(p):
    """The Reason String of an ack or DISCONNECT, or None."""
    return get(p.buf, p.props_off, p.props_len, _REASON_STRING) if p.props_len else None


def value_at(pkt, want):
    """Offset in pkt.buf of property `want`'s value (the first one, for a
    repeated one), -1 when absent; allocates nothing. A string or binary
    value starts with its 2-byte length: n = buf[o] << 8 | buf[o + 1], the
    bytes are buf[o + 2:o + 2 + n]. Integers: props.get() does not allocate."""
    buf = pkt.buf
    i = pkt.props_off
    end = i + pkt.props_len
    while i < end:
        pid = buf[i]
        i += 1
        if pid == want:
            return i
        t = TYPES[pid]
        if t == 4:  # variable byte integer
            i = varint_end(buf, i)
        elif t < 4:
            i += (1, 2, 4)[t - 1]
        else:
            i += 2 + ((buf[i] << 8) | buf[i + 1])
            if t == 7:  # a pair: the value string follows the name
                i += 2 + ((buf[i] << 8) | buf[i + 1])
    return -1


def late_answers(pkt, redelivered):
    """The message callback request() leaves a client that had none (raw):
    an answer that comes after its request gave up (it carries Correlation
    Data) is taken and dropped, where no callback would refuse it and drop
    the link, and a persistent session would send it again at every
    connect. Anything else is refused as with no callback (Core.deliver)."""
    if pkt.qos and value_at(pkt, _CORRELATION) < 0:
        raise MQTTError("no callback", 0x80)


def expect(c, corr):
    """A request's message callback, installed: the answer carrying the
    correlation data corr (a new one when None) is appended to `got`,
    anything else goes to the application's callback, which
    c.set_callback(f, raw) puts back (a client without one gets late_answers).
    Returns (corr, got, f, raw). For request() here and
    aio.AsyncClient.request(); installed before they subscribe:
    subscribe() wants a callback, and with none of the application's the
    answer still has somewhere to go. The correlation data counts from a
    random start (the port's random module, seeded from its hardware at
    boot): after a reset the first request's cannot match a late answer
    to one made before it."""
    if corr is None:
        n = getattr(c, "corr_n", None)
        if n is None:
            from random import getrandbits
            n = getrandbits(30)
        c.corr_n = n + 1
        corr = str(n + 1).encode()
    got = []  # type: list
    f, raw = c.cb, c.raw
    if f is None:
        f, raw = late_answers, True
        c.stand_in = f  # subscribe() still asks for the application's

    def take(pkt, redelivered):
        # the answer is kept here; anything else goes to the callback
        o = value_at(pkt, _CORRELATION)
        if o >= 0:
            b = pkt.buf
            if bytes(b[o + 2:o + 2 + ((b[o] << 8) | b[o + 1])]) == corr:
                got.append(bytes(pkt.payload))
                return
        if raw:
            f(pkt, redelivered)
        else:
            f(bytes(pkt.topic), bytes(pkt.payload))

    c.set_callback(take, True)
    return corr, got, f, raw


def subscribed(c, topic):
    """Is the filter topic (str, bytes, bytearray, memoryview) in c.subs,
    which keeps a buffer's as bytes?"""
    return key(topic) in c.subs


def request(c, topic, msg, response_topic, timeout_ms=None, qos=1, corr=None):
    """Publish a request with Response Topic and Correlation Data, and return
    the payload of the answer that carries the same correlation data (a
    responder copies it [MQTT-4.10.0-1]). Subscribes to response_topic the
    first time. Raises OSError(110) when no answer comes in time. Messages
    other than the answer go to the callback as usual. Not from the message
    callback: nothing is read while it runs, so the answer could never
    come; RuntimeError at once, nothing sent."""
    if c.depth:
        raise RuntimeError("request() in the message callback: its answer cannot be read")
    corr, got, f, raw = expect(c, corr)
    try:
        if not subscribed(c, response_topic):
            c.subscribe(response_topic, qos)
        c.publish(topic, msg, qos=qos, props={_RESPONSE_TOPIC: response_topic,
                                              _CORRELATION: corr})
        t = c.timeout_ms if timeout_ms is None else timeout_ms
        start = ticks_ms()
        while not got:
            if ticks_diff(ticks_ms(), start) > t:
                raise OSError(110, "timed out")
            c.poll(10)
    finally:
        c.set_callback(f, raw)
    return got[0]
