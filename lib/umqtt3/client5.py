# umqtt3.client5 -- what MQTTClient does only at MQTT 5 (level=5), imported on
# first use so that a 3.1.1 client never loads it (nor umqtt3.props).
#
# The client calls connect_props() for CONNECT, on_connack() for the
# server's limits, on_auth() for enhanced authentication. The application
# reads a message's properties with props_of() (a dict; allocates) or, in a
# raw callback without allocating, with value_at() and props.get(); and
# asks with request() for the answer to a request (response topic and
# correlation data).
from .compat import ticks_ms, ticks_diff
from .props import TYPES, get, parse, encode, encode_auth, varint_end

# property ids (MQTT 5.0 section 2.2.2.2)
_SESSION_EXPIRY = 0x11
_ASSIGNED_ID = 0x12
_SERVER_KEEPALIVE = 0x13
_AUTH_METHOD = 0x15
_AUTH_DATA = 0x16
_REASON_STRING = 0x1F
_RECEIVE_MAX = 0x21
_ALIAS_MAX = 0x22
_MAX_PACKET = 0x27
_RESPONSE_TOPIC = 0x08
_CORRELATION = 0x09


def connect_props(c):
    """CONNECT's properties: session expiry (the client's, else "never"
    for a persistent session and none for a clean one), the receive
    maximum, enhanced authentication."""
    d = {}
    exp = c.session_expiry
    if exp is None and not c.clean:
        exp = 0xFFFFFFFF
    if exp:
        d[_SESSION_EXPIRY] = exp
    d[_RECEIVE_MAX] = c.receive_max  # at most this many QoS 1/2 at once to us
    if c.auth is not None:
        d[_AUTH_METHOD] = c.auth[0]
        if c.auth[1] is not None:
            d[_AUTH_DATA] = c.auth[1]
    return encode(d)


def on_connack(c, p):
    """The server's limits bind the client; an assigned id is kept for the
    reconnects (they must resume the session under it)."""
    b, o, n = p.buf, p.props_off, p.props_len
    rm = get(b, o, n, _RECEIVE_MAX)  # [MQTT-3.3.4-7]
    if rm and rm < c.window:
        c.window = rm
    ka = get(b, o, n, _SERVER_KEEPALIVE)  # [MQTT-3.2.2-21]
    if ka is not None:
        c.keepalive = ka
    c.max_packet = get(b, o, n, _MAX_PACKET, 0)  # [MQTT-3.1.2-24]
    c.alias_max = get(b, o, n, _ALIAS_MAX, 0)  # [MQTT-3.3.2-9]
    cid = get(b, o, n, _ASSIGNED_ID)
    if cid is not None:
        c.client_id = cid  # [MQTT-3.2.2-16]


def on_auth(c, p):
    """AUTH from the server: continue (0x18) asks the application's hook
    for the next authentication data [MQTT-4.12.0-2]."""
    if c.auth is None or p.rc != 0x18:
        return  # success (0x00) needs nothing; no hook: the server will close
    method, _, f = c.auth
    data = get(p.buf, p.props_off, p.props_len, _AUTH_DATA)
    d = {_AUTH_METHOD: method}
    reply = f(data)
    if reply is not None:
        d[_AUTH_DATA] = reply
    conn = c.conn
    conn.tlen = encode_auth(conn.tx, conn.tlen, 0x18, d)


def reason(p):
    """The Reason String of an ack or DISCONNECT, or None."""
    return get(p.buf, p.props_off, p.props_len, _REASON_STRING) if p.props_len else None


def props_of(pkt):
    """The packet's properties as a dict {id: value} (allocates):
    strings as str, binary data as bytes, User Property and Subscription
    Identifier as lists."""
    return parse(pkt.buf, pkt.props_off, pkt.props_len) if pkt.props_len else {}


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


class _Answer:
    def __init__(self, corr):
        self.corr = corr
        self.msg = None


def request(c, topic, msg, response_topic, timeout_ms=None, qos=1, corr=None):
    """Publish a request with Response Topic and Correlation Data, and return
    the payload of the answer that carries the same correlation data (a
    responder copies it [MQTT-4.10.0-1]). Subscribes to response_topic the
    first time. Raises OSError(110) when no answer comes in time. Messages
    other than the answer go to the callback as usual."""
    if corr is None:
        c.corr_n = getattr(c, "corr_n", 0) + 1
        corr = str(c.corr_n).encode()
    if response_topic not in c.subs:
        c.subscribe(response_topic, qos)
    ans = _Answer(corr)
    c.answer_hook = ans
    try:
        c.publish(topic, msg, qos=qos, props={_RESPONSE_TOPIC: response_topic,
                                              _CORRELATION: corr})
        t = c.timeout_ms if timeout_ms is None else timeout_ms
        start = ticks_ms()
        while ans.msg is None:
            if ticks_diff(ticks_ms(), start) > t:
                raise OSError(110, "timed out")
            c.poll(10)
    finally:
        c.answer_hook = None
    return ans.msg


def take_answer(c, pkt):
    """For the client's deliver(): True when pkt is the answer request()
    waits for (it is then not handed to the callback)."""
    ans = c.answer_hook
    o = value_at(pkt, _CORRELATION)
    if o < 0:
        return False
    b = pkt.buf
    n = (b[o] << 8) | b[o + 1]
    if bytes(b[o + 2:o + 2 + n]) != ans.corr:
        return False
    ans.msg = bytes(pkt.payload)
    return True
