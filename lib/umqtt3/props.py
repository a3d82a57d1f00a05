# umqtt3.props -- MQTT 5 properties and reason codes: check, read and build
# them, and frame property lists in packets for umqtt3.codec (put_in(): the
# client's encoders write the 3.1.1 form, this makes it MQTT 5's).
#
# Imported only when protocol level 5 is in use, so v3/v4 devices never pay
# for it. check(), read(), tail(), size(), put() and put_in() do not allocate
# (for properties given as bytes); parse() and encode() trade allocation for
# convenience (dicts keyed by property id).
from .compat import const, as_bytes, move
# Not circular: codec imports this module lazily. Importing here, not inside
# the functions, keeps check() free of a per-call import (which allocates on
# MicroPython).
from .client_codec import fail, str_end, put_header, read_pid, MQTTError

# indexes into umqtt3.codec_errors, as in codec.py
_E_BUFFER = const(5)
_E_TOPIC = const(16)
_E_BINARY_TRUNCATED = const(22)
_E_BINARY_PAST_END = const(23)
_E_LENGTH = const(28)
_E_CONNACK_BITS = const(29)
_E_NO_CODES = const(30)
_E_RETURN_CODE = const(31)
_E_VARINT = const(45)
_E_VARINT_NOT_MINIMAL = const(46)
_E_PROPS_PAST_END = const(47)
_E_PROP_PAST_LIST = const(48)
_E_PROP_LIST_LENGTH = const(49)
_E_PROP_UNKNOWN = const(50)
_E_PROP_NOT_ALLOWED = const(51)
_E_PROP_DUPLICATE = const(52)
_E_PROP_NOT_0_1 = const(53)
_E_PROP_MAX_QOS = const(54)
_E_PROP_ZERO = const(55)
_E_PROP_MAX_PACKET_0 = const(56)
_E_PROP_SUB_ID_0 = const(57)
_E_PROP_STRING_LONG = const(58)
_E_PROP_VALUE = const(59)
_E_REASON_CODE = const(60)
_E_SHARED = const(62)

PAYLOAD_FORMAT = const(0x01)
MESSAGE_EXPIRY = const(0x02)
CONTENT_TYPE = const(0x03)
RESPONSE_TOPIC = const(0x08)
CORRELATION_DATA = const(0x09)
SUBSCRIPTION_ID = const(0x0B)
SESSION_EXPIRY = const(0x11)
ASSIGNED_CLIENT_ID = const(0x12)
SERVER_KEEPALIVE = const(0x13)
AUTH_METHOD = const(0x15)
AUTH_DATA = const(0x16)
REQUEST_PROBLEM_INFO = const(0x17)
WILL_DELAY = const(0x18)
REQUEST_RESPONSE_INFO = const(0x19)
RESPONSE_INFO = const(0x1A)
SERVER_REFERENCE = const(0x1C)
REASON_STRING = const(0x1F)
RECEIVE_MAXIMUM = const(0x21)
TOPIC_ALIAS_MAXIMUM = const(0x22)
TOPIC_ALIAS = const(0x23)
MAXIMUM_QOS = const(0x24)
RETAIN_AVAILABLE = const(0x25)
USER_PROPERTY = const(0x26)
MAXIMUM_PACKET_SIZE = const(0x27)
WILDCARD_SUB_AVAILABLE = const(0x28)
SUB_ID_AVAILABLE = const(0x29)
SHARED_SUB_AVAILABLE = const(0x2A)

# value types
_BYTE = const(1)
_U16 = const(2)
_U32 = const(3)
_VARINT = const(4)
_UTF8 = const(5)
_BIN = const(6)
_PAIR = const(7)

# TYPES[id] is the value type (0: no such property); WHERE[id] is a bit mask
# of the packet types that may carry it (bit 0 stands for the will properties
# in CONNECT's payload). MQTT 5.0 section 2.2.2.2.
TYPES = b"\x00\x01\x03\x05\x00\x00\x00\x00\x05\x06\x00\x04\x00\x00\x00\x00\x00\x03\x05\x02\x00\x05\x06\x01\x03\x01\x05\x00\x05\x00\x00\x05\x00\x02\x02\x02\x01\x01\x07\x03\x01\x01\x01"
_P = const(1 << 3)  # PUBLISH
_W = const(1)  # will
_C = const(1 << 1)  # CONNECT
_A = const(1 << 2)  # CONNACK
_D = const(1 << 14)  # DISCONNECT
_U = const(1 << 15)  # AUTH
_ACKS = const((1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 9) | (1 << 11))
_ALL = const(0xFFFF)
WHERE = (0, _P | _W, _P | _W, _P | _W, 0, 0, 0, 0, _P | _W, _P | _W, 0, _P | (1 << 8),
         0, 0, 0, 0, 0, _C | _A | _D, _A, _A, 0, _C | _A | _U, _C | _A | _U, _C, _W, _C,
         _A, 0, _A | _D, 0, 0, _A | _ACKS | _D | _U, 0, _C | _A, _C | _A, _P, _A, _A, _ALL,
         _C | _A, _A, _A, _A)


# The reason codes each packet type may carry, indexed by packet type (MQTT
# 5.0 section 2.4); a peer that sends another breaks a MUST such as
# [MQTT-3.4.2-1], so it is refused as a protocol error.
_RC_PUB = b"\x00\x10\x80\x83\x87\x90\x91\x97\x99"  # PUBACK, PUBREC
_RC_REL = b"\x00\x92"  # PUBREL, PUBCOMP
_RC = (b"", b"",
       # CONNACK
       b"\x00\x80\x81\x82\x83\x84\x85\x86\x87\x88\x89\x8a\x8c\x90\x95\x97\x99\x9a\x9b\x9c"
       b"\x9d\x9f",
       b"", _RC_PUB, _RC_PUB, _RC_REL, _RC_REL, b"",
       b"\x00\x01\x02\x80\x83\x87\x8f\x91\x97\x9e\xa1\xa2", b"",  # SUBACK
       b"\x00\x11\x80\x83\x87\x8f\x91", b"", b"",  # UNSUBACK
       # DISCONNECT
       b"\x00\x04\x80\x81\x82\x83\x87\x89\x8b\x8d\x8e\x8f\x90\x93\x94\x95\x96\x97\x98\x99"
       b"\x9a\x9b\x9c\x9d\x9e\x9f\xa0\xa1\xa2",
       b"\x00\x18\x19")  # AUTH


def reason_ok(ptype, rc):
    """Is rc a reason code packet type ptype may carry? (No allocation.)"""
    return rc in _RC[ptype]


def read_varint(buf, i, end):
    """The variable byte integer at i (1..4 bytes, minimal [MQTT-1.5.5-1]);
    varint_end() gives the offset after it. (The fixed header's remaining
    length is codec.frame_len's.)"""
    n = 0
    shift = 0
    while True:
        if i >= end or shift > 21:
            fail(_E_VARINT)
        b = buf[i]
        n |= (b & 0x7F) << shift
        if not b & 0x80:
            if not b and shift:
                fail(_E_VARINT_NOT_MINIMAL)
            return n
        shift += 7
        i += 1


def varint_end(buf, i):
    while buf[i] & 0x80:
        i += 1
    return i + 1


def _value_end(buf, i, end, t):
    """End offset of a value of type t at i (validating strings)."""
    if t == _BYTE:
        i += 1
    elif t == _U16:
        i += 2
    elif t == _U32:
        i += 4
    elif t == _VARINT:
        read_varint(buf, i, end)
        i = varint_end(buf, i)
    else:
        if t == _BIN:
            if i + 2 > end:
                fail(_E_BINARY_TRUNCATED)
            i += 2 + ((buf[i] << 8) | buf[i + 1])
            if i > end:
                fail(_E_BINARY_PAST_END)
        else:
            i = str_end(buf, i, end)
            if t == _PAIR:
                i = str_end(buf, i, end)
    if i > end:
        fail(_E_PROP_PAST_LIST)
    return i


def check(buf, off, end, ptype):
    """Validate the property list buf[off:end] for packet type ptype (0 for
    will properties): known ids, allowed in this packet, no duplicates except
    User Property (and Subscription Identifier in PUBLISH), legal values."""
    seen_lo = 0  # two small-int masks: ids 0..29 and 30..42
    seen_hi = 0
    bit = 1 << ptype
    while off < end:
        pid = buf[off]
        if pid & 0x80 or pid >= len(TYPES) or not TYPES[pid]:
            fail(_E_PROP_UNKNOWN)
        if not WHERE[pid] & bit:
            fail(_E_PROP_NOT_ALLOWED)  # Malformed Packet, 0x81 (2.2.2.2 of 5.0)
        t = TYPES[pid]
        if pid != USER_PROPERTY and not (pid == SUBSCRIPTION_ID and ptype == 3):
            if pid < 30:
                m = 1 << pid
                if seen_lo & m:
                    fail(_E_PROP_DUPLICATE, 0x82)
                seen_lo |= m
            else:
                m = 1 << (pid - 30)
                if seen_hi & m:
                    fail(_E_PROP_DUPLICATE, 0x82)
                seen_hi |= m
        v0 = off + 1
        off = _value_end(buf, v0, end, t)
        if t == _BYTE and buf[v0] > 1 and pid != MAXIMUM_QOS:
            fail(_E_PROP_NOT_0_1, 0x82)
        if pid == MAXIMUM_QOS and buf[v0] > 1:
            fail(_E_PROP_MAX_QOS, 0x82)
        if (pid == RECEIVE_MAXIMUM or pid == TOPIC_ALIAS) and not (buf[v0] | buf[v0 + 1]):
            fail(_E_PROP_ZERO, 0x94 if pid == TOPIC_ALIAS and ptype == 3 else 0x82)  # [MQTT-3.3.2-8]
        if pid == MAXIMUM_PACKET_SIZE and not (buf[v0] | buf[v0 + 1] | buf[v0 + 2] | buf[v0 + 3]):
            fail(_E_PROP_MAX_PACKET_0, 0x82)
        if pid == SUBSCRIPTION_ID and buf[v0] == 0:
            fail(_E_PROP_SUB_ID_0, 0x82)
    if off != end:
        fail(_E_PROP_LIST_LENGTH)


def _read(buf, i, t):
    # (value, next offset) for a value of type t at i; allocates
    if t == _BYTE:
        return buf[i], i + 1
    if t == _U16:
        return (buf[i] << 8) | buf[i + 1], i + 2
    if t == _U32:
        return (buf[i] << 24) | (buf[i + 1] << 16) | (buf[i + 2] << 8) | buf[i + 3], i + 4
    if t == _VARINT:
        return read_varint(buf, i, len(buf)), varint_end(buf, i)
    n = (buf[i] << 8) | buf[i + 1]
    raw = bytes(buf[i + 2:i + 2 + n])
    i += 2 + n
    if t == _BIN:
        return raw, i
    if t == _UTF8:
        return raw.decode(), i
    k = raw.decode()
    n = (buf[i] << 8) | buf[i + 1]
    return (k, bytes(buf[i + 2:i + 2 + n]).decode()), i + 2 + n


def parse(buf, off, n):
    """The property list buf[off:off+n] (already checked) as a dict
    {id: value}: ints, str for strings, bytes for binary data, and lists for
    User Property ((name, value) pairs) and Subscription Identifier."""
    d = {}  # type: dict
    end = off + n
    while off < end:
        pid = buf[off]
        v, off = _read(buf, off + 1, TYPES[pid])
        if pid == USER_PROPERTY or pid == SUBSCRIPTION_ID:
            d.setdefault(pid, []).append(v)
        else:
            d[pid] = v
    return d


def get(buf, off, n, want, default=None):
    """One property's value (the first, for repeatable ones) without building
    a dict. Integer properties are read without allocating."""
    end = off + n
    while off < end:
        pid = buf[off]
        t = TYPES[pid]
        if pid == want:
            return _read(buf, off + 1, t)[0] if t > _VARINT else _int_at(buf, off + 1, t)
        off = _value_end(buf, off + 1, end, t)
    return default


def find(buf, off, n, want):
    """Offset of the value of property `want` (the first) in the checked
    list buf[off:off+n], or -1. No allocation."""
    end = off + n
    while off < end:
        pid = buf[off]
        if pid == want:
            return off + 1
        off = _value_end(buf, off + 1, end, TYPES[pid])
    return -1


def wild_response_topic(buf, off, n):
    """Whether the checked list buf[off:off+n] has a Response Topic with a
    wildcard, which a topic name may not have [MQTT-3.3.2-14] (5.0). No
    allocation."""
    i = find(buf, off, n, RESPONSE_TOPIC)
    if i < 0:
        return False
    end = i + 2 + ((buf[i] << 8) | buf[i + 1])
    i += 2
    while i < end:
        if buf[i] == 0x23 or buf[i] == 0x2B:
            return True
        i += 1
    return False


def expiry_in(f, i):
    """Offset of the message expiry interval's value in the checked
    property list whose length is at f[i] (a level-5 PUBLISH the broker
    built), or -1."""
    n = read_varint(f, i, len(f))
    return find(f, varint_end(f, i), n, MESSAGE_EXPIRY)


def _int_at(buf, i, t):
    if t == _BYTE:
        return buf[i]
    if t == _U16:
        return (buf[i] << 8) | buf[i + 1]
    if t == _U32:
        return (buf[i] << 24) | (buf[i + 1] << 16) | (buf[i + 2] << 8) | buf[i + 3]
    return read_varint(buf, i, len(buf))


def _put_varint(out, n):
    while n > 127:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _put_str(out, s):
    s = as_bytes(s)
    if len(s) > 65535:
        fail(_E_PROP_STRING_LONG)
    out.append(len(s) >> 8)
    out.append(len(s) & 0xFF)
    out.extend(s)


def encode(props):
    """A dict {id: value} as property bytes (without the length prefix), in
    the dict's order. Lists give repeated properties."""
    out = bytearray()
    for pid, v in props.items():
        t = TYPES[pid] if 0 < pid < len(TYPES) else 0
        if not t:
            fail(_E_PROP_UNKNOWN)
        vals = v if isinstance(v, list) else (v,)
        for v in vals:
            # out.append() would wrap a bad value silently on MicroPython
            if t < _UTF8 and (v < 0 or v >> (8, 16, 32, 28)[t - 1]):
                fail(_E_PROP_VALUE)
            out.append(pid)
            if t == _BYTE:
                out.append(v)
            elif t == _U16:
                out.append(v >> 8)
                out.append(v & 0xFF)
            elif t == _U32:
                for s in (24, 16, 8, 0):
                    out.append((v >> s) & 0xFF)
            elif t == _VARINT:
                _put_varint(out, v)
            elif t == _PAIR:
                _put_str(out, v[0])
                _put_str(out, v[1])
            else:
                _put_str(out, v)
    return bytes(out)


# ---------------------------------------------------------------- framing
# A packet's property list is None (absent: an empty list where one is
# required), a bytes-like of encoded properties (copied as is: the
# zero-allocation form), or a dict for encode().

def encoded(props):
    """props as bytes for size() and put(): a dict is encoded (allocates)."""
    return encode(props) if isinstance(props, dict) else props


def size(p):
    """Bytes the property list p takes in a packet, its length included."""
    if p is None:
        return 1
    n = len(p)
    return n + (1 if n < 128 else 2 if n < 16384 else 3 if n < 2097152 else 4)


def put(buf, off, p):
    """Write the property list p (length first) at off; return the end."""
    if p is None:
        buf[off] = 0
        return off + 1
    n = len(p)
    v = n
    while v > 127:
        buf[off] = (v & 0x7F) | 0x80
        v >>= 7
        off += 1
    buf[off] = v
    off += 1
    buf[off:off + n] = p
    return off + n


def shared(f, opts):
    """A SUBSCRIBE's (opts: its options byte) or UNSUBSCRIBE's (opts -1)
    filter f, bytes, as a client may send it: a shared subscription
    "$share/{ShareName}/{filter}" has a ShareName of one character or more
    without wildcards [MQTT-4.8.2-1, MQTT-4.8.2-2] and no No Local
    [MQTT-3.8.3-4]. Raises MQTTError 0x82 (client_codec.encode_filter).
    Byte by byte: a slice would allocate per SUBSCRIBE."""
    n = len(f)
    i = 0
    while i < 7:
        if i >= n or f[i] != b"$share/"[i]:
            return  # any other filter
        i += 1
    while i < n and f[i] != 0x2F:
        if f[i] == 0x2B or f[i] == 0x23:
            break  # a wildcard in the ShareName
        i += 1
    if i == 7 or i + 1 >= n or f[i] != 0x2F or (opts > 0 and opts & 4):
        fail(_E_SHARED, 0x82)


def put_in(buf, o, end, props, will_props=None):
    """The packet buf[o:end] that client_codec encoded as 3.1.1 has it
    (CONNECT, PUBLISH, SUBSCRIBE, UNSUBSCRIBE) made MQTT 5's: its property
    list after the variable header (CONNECT: the will's too, before the
    will topic), the bytes behind moved up and the remaining length grown.
    Returns the new end. Allocates nothing for properties as bytes."""
    i = varint_end(buf, o + 1)  # the body's start
    t = buf[o] >> 4
    if t == 1:
        k = 10  # CONNECT: after "MQTT", the level, the flags, keepalive
        if buf[i + 7] & 4:
            # the will's properties, first: after the client id
            end = _put_in(buf, o, i, end, 12 + ((buf[i + 10] << 8) | buf[i + 11]),
                          encoded(will_props))
            i = varint_end(buf, o + 1)
    elif t == 3:
        n = (buf[i] << 8) | buf[i + 1]
        props = encoded(props)
        if not n and (not props or find(props, 0, len(props), TOPIC_ALIAS) < 0):
            # an empty topic name without a Topic Alias (5.0, 3.3.2.1)
            fail(_E_TOPIC, 0x82)
        k = n + (4 if buf[o] & 6 else 2)  # PUBLISH: after the topic and the packet id
    else:
        k = 2  # SUBSCRIBE, UNSUBSCRIBE: after the packet id
    return _put_in(buf, o, i, end, k, encoded(props))


def _put_in(buf, o, i, end, k, p):
    # p (bytes or None) put k bytes into the body at buf[i:end]
    n = size(p)
    rl = end - i + n
    h = 2 if rl < 128 else 3 if rl < 16384 else 4 if rl < 2097152 else 5
    if o + h + rl > len(buf):
        fail(_E_BUFFER, 0x95)  # put_header's refusal, before anything moves
    d = o + h - i  # the header's growth
    move(buf, i + d + k + n, buf, i + k, end - i - k)
    if d:
        move(buf, i + d, buf, i, k)
    put(buf, put_header(buf, o, buf[o], rl) + k, p)
    return o + h + rl


def read(pkt, buf, off, end, ptype):
    """Read the property list at off into pkt.props_off/len, checking it for
    packet type ptype; return its end."""
    if off < end and not buf[off]:
        pkt.props_off = off + 1  # empty, as most PUBLISHes and acks have it
        pkt.props_len = 0
        return off + 1
    n = read_varint(buf, off, end)
    off = varint_end(buf, off)
    if off + n > end:
        fail(_E_PROPS_PAST_END)
    pkt.props_off = off
    pkt.props_len = n
    if n:
        check(buf, off, off + n, ptype)
    return off + n


def tail(pkt, buf, i, end, ptype):
    """The reason code at i, then properties up to end; either may be
    absent when the packet ends first. Returns ptype."""
    if i < end:
        c = buf[i]
        if not reason_ok(ptype, c):
            fail(_E_REASON_CODE, 0x82)
        pkt.rc = c
        if i + 1 < end and read(pkt, buf, i + 1, end, ptype) != end:
            fail(_E_LENGTH)  # bytes after the properties
    return ptype


def decode5(p, buf, i, end, t):
    """The body (buf[i:end]) of packet type t at level 5, for
    client_codec.decode(): every type but PUBLISH and what only a server
    decodes. The acks, CONNACK, DISCONNECT and AUTH may carry a reason code
    and properties; SUBACK and UNSUBACK a reason code per filter. Returns t."""
    n = end - i
    if 4 <= t <= 7:  # PUBACK, PUBREC, PUBREL, PUBCOMP
        if n < 2:
            fail(_E_LENGTH)
        i = read_pid(p, buf, i, end)
        return tail(p, buf, i, end, t) if i < end else t
    if t == 12 or t == 13:  # PINGREQ, PINGRESP
        if n:
            fail(_E_LENGTH)
        return t
    if t >= 14:  # DISCONNECT, AUTH
        return tail(p, buf, i, end, t) if n else t
    if t == 2:  # CONNACK
        if n < 2:
            fail(_E_LENGTH)
        if buf[i] & 0xFE:
            fail(_E_CONNACK_BITS)  # [MQTT-3.2.2-1]
        p.session_present = buf[i] == 1
        if n < 3:
            fail(_E_LENGTH)  # 5.0 always has reason code and properties
        return tail(p, buf, i + 1, end, t)
    # SUBACK, UNSUBACK: packet id, properties, a reason code per filter
    i = read(p, buf, read_pid(p, buf, i, end), end, t)
    p.payload_off = i
    p.payload_len = end - i
    if i == end:
        fail(_E_NO_CODES)  # one per filter, and there is at least one
    while i < end:
        if not reason_ok(t, buf[i]):
            fail(_E_RETURN_CODE)  # [MQTT-3.9.3-2]
        i += 1
    return t


def encode_rc(buf, off, first, rc, props):
    """DISCONNECT or AUTH (first byte `first`): reason code and properties,
    both left out when rc and props are None."""
    props = encoded(props)
    rl = 0
    if rc is not None or props is not None:
        rl = 1 if props is None else 1 + size(props)
    off = put_header(buf, off, first, rl)
    if rl:
        buf[off] = rc or 0
        off += 1
        if props is not None:
            off = put(buf, off, props)
    return off


# ------------------------------------------------------------ what we send
# What a client may send, checked before anything is stored or queued: a
# property the server would close the connection on must not reach a store
# that resends it after every reconnect.


def _refuse(t, pid, why, code=0x82):
    # MQTTError naming the property, with the code the server would say:
    # 0x94 (Topic Alias invalid) for a Topic Alias in PUBLISH, 0x81
    # (Malformed Packet) for one not defined for the packet (section
    # 2.2.2.2 of 5.0), else 0x82 (Protocol Error)
    name = {0: "will", 3: "PUBLISH", 8: "SUBSCRIBE", 14: "DISCONNECT"}.get(t, t)
    raise MQTTError("%s property 0x%02x: %s" % (name, pid, why),
                    0x94 if pid == TOPIC_ALIAS and t == 3 else code)


def outgoing(props, t, alias_max=0):
    """props (a dict or encoded bytes) checked for packet type t sent by a
    client (0: the will's properties); returns them encoded. Raises
    MQTTError naming the first property the server would refuse: unknown,
    not defined for t (section 2.2.2.2), a bad value, repeated, a Response
    Topic with a wildcard [MQTT-3.3.2-14]; in PUBLISH
    a Subscription Identifier [MQTT-3.3.4-6] or a Topic Alias that is 0
    [MQTT-3.3.2-8], above alias_max, the server's Topic Alias Maximum
    [MQTT-3.3.2-9], or one of the 8 the client assigns itself
    (client_core.queue); in DISCONNECT a Server Reference (the server's).
    Allocates nothing for bytes that pass."""
    try:
        b = encoded(props)
    except (MQTTError, TypeError) as x:  # an unknown id, a value its type cannot hold
        for k in props:  # (a dict: bytes are not encoded) which one?
            try:
                encode({k: props[k]})
            except (MQTTError, TypeError):
                _refuse(t, k, getattr(x, "reason", "bad value"), getattr(x, "code", 0x82))
        raise
    i = 0
    n = len(b)
    while i < n:
        pid = b[i]
        try:
            if pid >= len(TYPES) or not TYPES[pid]:
                fail(_E_PROP_UNKNOWN)
            e = _value_end(b, i + 1, n, TYPES[pid])
            # the list up to this one: defined for t, a legal value, no
            # repeat (what passed before did, so this one is at fault)
            check(b, 0, e, t)
        except MQTTError as x:
            _refuse(t, pid, x.reason, x.code)
        if t == 3 and pid == SUBSCRIPTION_ID:
            _refuse(t, pid, "sent by the server only")
        if t == 3 and pid == TOPIC_ALIAS:
            v = (b[i + 1] << 8) | b[i + 2]
            if v > alias_max or v <= min(alias_max, 8):
                _refuse(t, pid, "%d: the server allows 1..%d, the client's own are 1..8"
                        % (v, alias_max))
        if t == 14 and pid == SERVER_REFERENCE:
            _refuse(t, pid, "sent by the server only")
        if pid == RESPONSE_TOPIC:
            for j in range(i + 3, e):  # a topic name [MQTT-3.3.2-14]
                if b[j] == 0x23 or b[j] == 0x2B:
                    _refuse(t, pid, "wildcard in a topic name")
        i = e
    return b


def encode_auth(buf, off, rc=None, props=None):
    """AUTH [MQTT 5.0 section 3.15]: two bytes when rc and props are None."""
    return encode_rc(buf, off, 0xF0, rc, props)
