# umqtt3.client_codec -- the packets a client sends and receives, in as few
# functions and names as it takes: each function and each name costs a
# device RAM from import on (docs/client.md, "What it costs in RAM").
#
# Encoders write one packet into a caller's bytearray at `off` and return the
# end offset; they refuse (MQTTError, code 0x95) rather than grow the buffer.
# decode() reads one complete packet into a reusable Packet whose topic,
# payload and properties are spans (offset, length) of the caller's buffer:
# nothing is copied and, in steady state, nothing is allocated. Protocol
# levels 3 (MQTT 3.1), 4 (3.1.1) and 5 (5.0); what only 5.0 has is
# umqtt3.props's, imported on first use. umqtt3.codec, the broker's codec,
# is this module plus the wire primitives by name and the server's half
# (codec_server): a client never loads it.
from .compat import const, valid_utf8, as_bytes, topic_ok, move

# packet types
_CONNACK = const(2)
_PUBLISH = const(3)
_PUBACK = const(4)
_PUBREL = const(6)
_PUBCOMP = const(7)
_SUBSCRIBE = const(8)
_SUBACK = const(9)
_UNSUBSCRIBE = const(10)
_UNSUBACK = const(11)
_PINGREQ = const(12)
_PINGRESP = const(13)
_DISCONNECT = const(14)
_AUTH = const(15)

# MQTT 5 reason codes this module raises with; a v3/v4 peer just closes.
_MALFORMED = const(0x81)
_PROTOCOL_ERROR = const(0x82)
_BAD_PROTOCOL_VERSION = const(0x84)
_TOO_LARGE = const(0x95)

_MAX_REMAINING = const(268435455)

# Why a packet is refused or cannot be encoded: fail(_E_...) raises
# MQTTError with the text at that index of umqtt3.codec_errors, imported
# only then, so the texts take no RAM until something goes wrong. codec.py,
# codec_server.py and props.py number theirs in the same table.
_E_LENGTH_TOO_LARGE = const(0)
_E_LENGTH_NOT_MINIMAL = const(1)
_E_OVER_MAXIMUM = const(2)
_E_LENGTH_OVER_4 = const(3)
_E_LENGTH_DISAGREES = const(4)
_E_BUFFER = const(5)
_E_STRING_TOO_LONG = const(6)
_E_FILTER = const(7)
_E_SUB_OPTIONS = const(8)
_E_PID_RANGE = const(9)
_E_LEVEL = const(10)
_E_EMPTY_ID = const(11)
_E_WILL_QOS = const(12)
_E_PASSWORD = const(13)
_E_KEEPALIVE = const(14)
_E_QOS = const(15)
_E_TOPIC = const(16)
_E_STRING_TRUNCATED = const(19)
_E_STRING_PAST_END = const(20)
_E_UTF8 = const(21)
_E_TRUNCATED = const(24)
_E_PID_0 = const(25)
_E_RESERVED_TYPE = const(26)
_E_RESERVED_FLAGS = const(27)
_E_LENGTH = const(28)
_E_CONNACK_BITS = const(29)
_E_NO_CODES = const(30)
_E_RETURN_CODE = const(31)
_E_DUP_QOS0 = const(32)
_E_WILDCARD = const(33)
_E_EMPTY_TOPIC = const(34)


class MQTTError(Exception):
    """Every malformed, refused or unencodable packet: `reason` says what,
    `code` is the MQTT 5 reason code to send the peer (0x81 malformed,
    0x82 protocol error, 0x84 unsupported protocol version, 0x95 too large)."""

    def __init__(self, reason, code=_MALFORMED):
        # (args is (reason, code) without a super().__init__: both
        # Pythons take an exception's args from its constructor call)
        self.reason = reason
        self.code = code


class Busy(MQTTError):
    """Refused for now: the in-flight window or the send buffer is full.
    Nothing was stored or sent; try again after acknowledgements arrive.
    (Raised as Busy("busy", 0x97): no __init__ of its own to load.)"""


class StoreFull(MQTTError):
    """Refused: the store has no room. Nothing already stored is lost.
    (Raised by the stores, MemoryStore and FileStore, as
    StoreFull("store full", 0x97).)"""


class MQTTException(MQTTError):
    """A refusal by the server, as umqtt.simple raises it: a CONNACK's
    return code or a SUBACK's failure, e.args == (code,) (also e.code;
    e.reason is "refused")."""

    def __init__(self, code):
        self.reason = "refused"
        self.code = code


def fail(e, code=_MALFORMED):
    # e: one of the _E_ numbers above
    from .codec_errors import TEXT
    raise MQTTError(TEXT[e], code)


_M = [None, None, None]  # type: list  # umqtt3.props, codec_server, client_skip, once imported


def mqtt5():
    # umqtt3.props, imported on first use of protocol level 5
    if _M[0] is None:
        from . import props
        _M[0] = props
    return _M[0]


# ---------------------------------------------------------------- framing

def frame_len(buf, off, end, max_packet=0):
    """Bytes the packet starting at buf[off] occupies, header included, or 0
    while its fixed header is still incomplete. Refuses a fifth length byte
    and anything larger than max_packet (when set) before the body is read."""
    n = 0
    shift = 0
    i = off + 1
    while i < end:
        b = buf[i]
        n |= (b & 0x7F) << shift
        i += 1
        if not b & 0x80:
            # a multi-byte length whose last byte is 0 is not minimal [MQTT-1.5.5-1]
            if b == 0 and i - off > 2:
                fail(_E_LENGTH_NOT_MINIMAL)
            n += i - off
            if max_packet and n > max_packet:
                fail(_E_OVER_MAXIMUM, _TOO_LARGE)
            return n
        shift += 7
        if shift == 28:
            fail(_E_LENGTH_OVER_4)
    return 0


def put_header(buf, off, t, n):
    """The fixed header: the first byte t, then the remaining length n;
    the whole packet must fit in buf."""
    if n > _MAX_REMAINING:
        fail(_E_LENGTH_TOO_LARGE, _TOO_LARGE)
    if off + n + (2 if n < 128 else 3 if n < 16384 else 4 if n < 2097152 else 5) > len(buf):
        fail(_E_BUFFER, _TOO_LARGE)
    buf[off] = t
    off += 1
    while n > 127:
        buf[off] = (n & 0x7F) | 0x80
        n >>= 7
        off += 1
    buf[off] = n
    return off + 1


def _put(buf, off, s, n=-1):
    # a string or binary field (s bytes-like): 2-byte length, the bytes;
    # n >= 0: only the length n, for a packet id
    if n < 0:
        n = len(s)
        if n > 65535:
            fail(_E_STRING_TOO_LONG, _PROTOCOL_ERROR)
    buf[off] = n >> 8
    buf[off + 1] = n & 0xFF
    off += 2
    if s is not None:
        buf[off:off + n] = s
        off += n
    return off


# ---------------------------------------------------------------- encoders

def encode_connect(buf, off, client_id, level=4, clean=True, keepalive=0,
                   user=None, password=None, will_topic=None, will_msg=b"",
                   will_qos=0, will_retain=False, props=None, will_props=None):
    if not 3 <= level <= 5:
        fail(_E_LEVEL, _BAD_PROTOCOL_VERSION)
    f = [as_bytes(client_id)]  # the payload's fields, in their order [MQTT-3.1.3-1]
    if not f[0] and (level == 3 or (level == 4 and not clean)):
        # 3.1 wants 1..23 characters; 3.1.1 an empty id only with a clean
        # session [MQTT-3.1.3-7]; 5.0 lets the server assign one
        fail(_E_EMPTY_ID, _PROTOCOL_ERROR)
    name = b"MQIsdp" if level == 3 else b"MQTT"
    flags = 2 if clean else 0
    if will_topic is not None:
        if will_qos > 2:
            fail(_E_WILL_QOS, _PROTOCOL_ERROR)  # [MQTT-3.1.2-14] (5.0: MQTT-3.1.2-12)
        # the server publishes the will under it: refused as a PUBLISH's
        # topic would be (written where CONNECT then goes) [MQTT-3.1.3-10]
        # [MQTT-4.7.1-1], not closed on at every connect
        encode_publish(buf, off, will_topic, b"")
        flags |= 4 | (will_qos << 3) | (32 if will_retain else 0)
        f += (as_bytes(will_topic), as_bytes(will_msg))
    if user is not None:
        flags |= 128
        f.append(as_bytes(user))
    for s in (f[0], f[-1] if user is not None else b""):
        # the client id and the user name: well-formed UTF-8 without
        # U+0000, or the server closes on every CONNECT [MQTT-1.5.4-1,
        # MQTT-1.5.4-2] (3.1.1: MQTT-1.5.3-1, MQTT-1.5.3-2)
        if not (_utf8_ok(s, 0, len(s)) if valid_utf8 is None else valid_utf8(s, 0, len(s))):
            fail(_E_UTF8)
    if password is not None:
        if user is None and level < 5:
            fail(_E_PASSWORD, _PROTOCOL_ERROR)  # [MQTT-3.1.2-22]
        flags |= 64
        f.append(as_bytes(password))
    if not 0 <= keepalive < 65536:
        fail(_E_KEEPALIVE, _PROTOCOL_ERROR)
    rl = len(name) + 6  # its length, the level, the flags, keepalive
    for s in f:
        rl += len(s) + 2
    o = off
    off = _put(buf, put_header(buf, off, 0x10, rl), name)
    buf[off] = level
    buf[off + 1] = flags
    off = _put(buf, off + 2, None, keepalive)
    for s in f:
        off = _put(buf, off, s)
    if level == 5:
        return mqtt5().put_in(buf, o, off, props, will_props)  # MQTT 5's properties
    return off


_valid = None  # type: bytes | None  # the topic last found valid (bytes: it stays valid)


def encode_publish(buf, off, topic, payload, qos=0, pid=0, retain=False,
                   dup=False, level=4, props=None):
    global _valid
    if qos > 2:
        fail(_E_QOS, _MALFORMED)  # [MQTT-3.3.1-4]
    if topic is not _valid:  # (a node publishes to the same few topics)
        topic = as_bytes(topic)
        n = len(topic)
        # a topic name: 1..65535 bytes, no wildcards, no U+0000 [MQTT-4.7.3-1,
        # MQTT-4.7.3-2, MQTT-3.3.2-2] (5.0: empty with a topic alias, below). Refused
        # before the flows store it: a broker would close on it, and a stored
        # one would be resent after every reconnect.
        ok = 0 < n < 65536 or (level == 5 and not n)
        if type(topic) is memoryview:
            for i in range(n):
                c = topic[i]
                if c == 0x2B or c == 0x23 or c == 0:
                    ok = False
        elif topic.find(b"+") >= 0 or topic.find(b"#") >= 0 or topic.find(b"\x00") >= 0:
            ok = False  # find() runs in C and allocates nothing
        if not ok:
            fail(_E_TOPIC, _PROTOCOL_ERROR)
        if n and type(topic) is bytes:
            _valid = topic  # immutable: it stays valid
    if type(payload) is not bytes:  # (a call to as_bytes() less for bytes)
        payload = as_bytes(payload)
    n = len(topic)
    pl = len(payload)
    rl = n + 2 + pl
    first = 0x30 | (qos << 1)
    if qos:
        if not 0 < pid < 65536:
            fail(_E_PID_RANGE, _PROTOCOL_ERROR)  # [MQTT-2.3.1-1]
        rl += 2
        if dup:
            first |= 8
    # DUP is never set on QoS 0 [MQTT-3.3.1-2]
    if retain:
        first |= 1
    o = off
    if rl < 128 and off + rl + 2 <= len(buf):
        buf[off] = first  # a reading's header: put_header() without its call
        buf[off + 1] = rl
        off += 2
    else:
        off = put_header(buf, off, first, rl)
    # the topic's length was checked above (or when it became _valid)
    buf[off] = n >> 8
    buf[off + 1] = n & 0xFF
    off += 2
    buf[off:off + n] = topic
    off += n
    if qos:
        buf[off] = pid >> 8
        buf[off + 1] = pid & 0xFF
        off += 2
    buf[off:off + pl] = payload
    if level == 5:
        # its properties (and the check of an empty topic name: a Topic
        # Alias must stand for it) are umqtt3.props's
        return mqtt5().put_in(buf, o, off + pl, props)
    return off + pl


def encode_ack(buf, off, t, pid):
    """PUBACK, PUBREC, PUBREL, PUBCOMP (and v3/v4 UNSUBACK): the packet id
    alone, four bytes, at every level (MQTT 5 leaves out a success code
    without properties). The MQTT 5 form with a reason code and properties
    is umqtt3.codec's encode_ack, the broker's."""
    if not 0 < pid < 65536:
        fail(_E_PID_RANGE, _PROTOCOL_ERROR)  # [MQTT-2.3.1-1]
    if off + 4 > len(buf):
        fail(_E_BUFFER, _TOO_LARGE)
    buf[off] = (t << 4) | (2 if t == _PUBREL else 0)
    buf[off + 1] = 2
    buf[off + 2] = pid >> 8
    buf[off + 3] = pid & 0xFF
    return off + 4


def encode_filter(buf, off, pid, topic, qos=0, level=4, props=None):
    """SUBSCRIBE for one filter with its options (the QoS for v3/v4, the
    v5 subscription options byte), or UNSUBSCRIBE when qos is -1."""
    if not 0 < pid < 65536:
        fail(_E_PID_RANGE, _PROTOCOL_ERROR)  # [MQTT-2.3.1-1]
    f = as_bytes(topic)
    n = len(f)
    # a valid filter: 1..65535 bytes; '+' fills a whole level
    # [MQTT-4.7.1-3]; '#' is last and fills a whole level [MQTT-4.7.1-2]
    ok = 0 < n < 65536
    for i in range(n):
        c = f[i]
        if c == 0x2B or c == 0x23:
            if (i and f[i - 1] != 0x2F) or (i + 1 < n and (c == 0x23 or f[i + 1] != 0x2F)):
                ok = False
        elif not c:
            ok = False
    if not ok:
        fail(_E_FILTER, _PROTOCOL_ERROR)
    sub = qos >= 0
    if sub and ((qos & 3) == 3 or qos & (0xC0 if level == 5 else 0xFC) or (qos & 0x30) == 0x30):
        fail(_E_SUB_OPTIONS, _PROTOCOL_ERROR)  # [MQTT-3.8.3-4]
    o = off
    off = _put(buf, _put(buf, put_header(buf, off, 0x82 if sub else 0xA2, n + 4 + sub), None,
                         pid), f)
    if sub:
        buf[off] = qos
        off += 1
    if level == 5:
        m = mqtt5()
        m.shared(f, qos)  # a shared subscription's form (MQTT 5's alone)
        return m.put_in(buf, o, off, props)  # MQTT 5's properties
    return off


# ---------------------------------------------------------------- decoding

class Packet:
    """One decoded packet, reused for every decode. Spans are offsets into
    `buf`; the properties below turn them into memoryview slices on demand
    (a slice is a small heap object on MicroPython, so hot paths use spans).
    An absent optional string has offset -1."""

    # What only a server reads, set by umqtt3.codec_server when it decodes a
    # CONNECT (will, clean, keepalive, client id, user, password, the will's
    # properties) or a SUBSCRIBE/UNSUBSCRIBE entry (read_filter: f_off, f_len,
    # opts): a client's Packet never carries them (fewer slots, fewer names).
    will: bool
    clean: bool
    keepalive: int
    cid_off: int
    cid_len: int
    user_off: int
    user_len: int
    pw_off: int
    pw_len: int
    wprops_off: int
    wprops_len: int
    f_off: int
    f_len: int
    opts: int
    # What every decode() sets first (see __init__)
    buf: bytes
    type: int
    flags: int
    end: int
    rc: int
    props_off: int
    props_len: int

    def __init__(self, level=4):
        # Set by every decode() before anything else, so not here: buf,
        # type, flags, end (the offset just past the packet), rc (CONNACK's
        # return code; v5: the reason code, 0 when absent), props_off and
        # props_len (v5: the property bytes, without their length)
        self.level = level  # protocol level the bytes are decoded as
        self.qos = 0  # PUBLISH QoS; CONNECT: will QoS
        self.dup = False
        self.retain = False  # PUBLISH RETAIN; CONNECT: will retain
        self.pid = 0
        self.session_present = False
        self.topic_off = 0  # PUBLISH topic; CONNECT: will topic
        self.topic_len = 0
        self.payload_off = 0  # PUBLISH payload; CONNECT: will message;
        self.payload_len = 0  # SUB/UNSUB: the filter list; SUBACK: codes

    # memoryview slices of the spans (allocate); None for an absent one
    @property
    def topic(self):
        o = self.topic_off
        return None if o < 0 else memoryview(self.buf)[o:o + self.topic_len]

    @property
    def payload(self):
        o = self.payload_off
        return None if o < 0 else memoryview(self.buf)[o:o + self.payload_len]


def _utf8_ok(buf, off, n):
    # Well-formed UTF-8 without U+0000 [MQTT-1.5.3-1, MQTT-1.5.3-2]: no
    # overlong forms, no surrogates (U+D800..U+DFFF), nothing past U+10FFFF.
    end = off + n
    i = off
    while i < end:
        c = buf[i]
        i += 1
        if c < 0x80:
            if c == 0:
                return False
            continue
        if c < 0xC2 or c > 0xF4:
            return False
        k = 1 if c < 0xE0 else 2 if c < 0xF0 else 3
        if i + k > end:
            return False
        c2 = buf[i]
        if (c2 & 0xC0 != 0x80) or (c == 0xE0 and c2 < 0xA0) or (c == 0xED and c2 > 0x9F) or \
                (c == 0xF0 and c2 < 0x90) or (c == 0xF4 and c2 > 0x8F):
            return False
        j = 1
        while j < k:
            if buf[i + j] & 0xC0 != 0x80:
                return False
            j += 1
        i += k
    return True


def str_end(buf, off, end):
    """Check a length-prefixed UTF-8 string at off; return its end offset."""
    if off + 2 > end:
        fail(_E_STRING_TRUNCATED)
    n = (buf[off] << 8) | buf[off + 1]
    off += 2
    if off + n > end:
        fail(_E_STRING_PAST_END)
    # CPython: its strict decoder, in C
    if not (_utf8_ok(buf, off, n) if valid_utf8 is None else valid_utf8(buf, off, n)):
        fail(_E_UTF8)  # [MQTT-1.5.3-1, MQTT-1.5.3-2]
    return off + n


def read_pid(p, buf, off, end):
    if off + 2 > end:
        fail(_E_TRUNCATED)
    pid = (buf[off] << 8) | buf[off + 1]
    if not pid:
        fail(_E_PID_0, _PROTOCOL_ERROR)  # [MQTT-2.3.1-1]
    p.pid = pid
    return off + 2


def decode(p, buf, off, end, max_packet=0):
    """Decode the packet in buf[off:end] (exactly one packet) into p.
    Raises MQTTError for anything malformed; returns p.type."""
    if end <= off:
        fail(_E_LENGTH_DISAGREES)
    first = buf[off]
    p.buf = buf
    p.type = t = first >> 4
    p.flags = fl = first & 15
    p.end = end
    p.rc = 0
    p.props_off = p.props_len = 0
    # (the bytes literals below are constants of the code: no module names)
    if end - off == 4 and buf[off + 1] == 2 and first in b"\x40\x50\x62\x70":
        # the common acknowledgement: PUBACK, PUBREC, PUBREL or PUBCOMP
        # (first bytes with the flags they must carry) with a packet id and
        # nothing else, what the long way below finds too
        pid = (buf[off + 2] << 8) | buf[off + 3]
        if pid and (max_packet == 0 or max_packet > 3):
            p.pid = pid
            return t
    total = frame_len(buf, off, end, max_packet)
    if not total or off + total != end:
        fail(_E_LENGTH_DISAGREES)
    i = off + 1
    while buf[i] & 0x80:
        i += 1
    i += 1  # body start
    level = p.level
    v5 = level == 5
    if t == _PUBLISH:
        qos = (fl >> 1) & 3
        if qos == 3:
            fail(_E_QOS)  # [MQTT-3.3.1-4]
        dup = fl & 8
        if dup and not qos:
            fail(_E_DUP_QOS0)  # [MQTT-3.3.1-2]
        p.qos = qos
        p.dup = dup != 0
        p.retain = fl & 1 == 1
        t0 = i + 2
        tn = (buf[i] << 8) | buf[i + 1] if t0 <= end else 0
        if topic_ok is not None and t0 + tn <= end and topic_ok(buf, t0, tn):
            i = t0 + tn  # CPython: UTF-8, no U+0000, no wildcard, checked in C
        else:
            i = str_end(buf, i, end)
            tn = i - t0
            j = t0
            while j < i:
                c = buf[j]
                if c == 0x23 or c == 0x2B:
                    fail(_E_WILDCARD)  # [MQTT-3.3.2-2]
                j += 1
        p.topic_off = t0
        p.topic_len = tn
        if qos:
            i = read_pid(p, buf, i, end)
        else:
            p.pid = 0
        if v5:
            i = mqtt5().read(p, buf, i, end, _PUBLISH)
        elif not tn:
            fail(_E_EMPTY_TOPIC)  # [MQTT-4.7.3-1]
        p.payload_off = i
        p.payload_len = end - i
        return _PUBLISH
    if t == 0 or (t == _AUTH and not v5):
        fail(_E_RESERVED_TYPE)
    # the fixed-header flags every type but PUBLISH must carry [MQTT-2.2.2-1,
    # MQTT-2.2.2-2]; MQTT 3.1 marks these bits unused (a 3.1 sender sets DUP
    # on a resent SUBSCRIBE), so only 3.1.1 and 5.0 insist on them
    if fl != b"\x00\x00\x00\x00\x00\x00\x02\x00\x02\x00\x02\x00\x00\x00\x00\x00"[t] and \
            level > 3:
        fail(_E_RESERVED_FLAGS)
    if t in b"\x01\x08\x0a":
        # CONNECT, SUBSCRIBE, UNSUBSCRIBE: what only a server decodes, in
        # umqtt3.codec_server, which a client never loads (kept in _M after
        # the first import: an import each time would allocate)
        s = _M[1]
        if s is None:
            from . import codec_server as s
            _M[1] = s
        return s.decode_server(p, buf, i, end, v5)
    if v5:
        # the rest at level 5 (reason codes, properties): umqtt3.props's,
        # so that a 3.1.1 client carries none of it
        return mqtt5().decode5(p, buf, i, end, t)
    n = end - i
    if _PUBACK <= t <= _PUBCOMP or t == _UNSUBACK:
        if n != 2:
            fail(_E_LENGTH)
        read_pid(p, buf, i, end)
        return t
    if t == _PINGREQ or t == _PINGRESP or t == _DISCONNECT:
        if n:
            fail(_E_LENGTH)
        return t
    if t == _CONNACK:
        if n != 2:
            fail(_E_LENGTH)
        if buf[i] & 0xFE:
            fail(_E_CONNACK_BITS)  # (unnumbered in 3.1.1)
        p.session_present = buf[i] == 1
        p.rc = buf[i + 1]
        return t
    # SUBACK: the packet id, a return code per filter
    i = read_pid(p, buf, i, end)
    p.payload_off = i
    p.payload_len = end - i
    if i == end:
        fail(_E_NO_CODES)  # one per filter, and there is at least one
    while i < end:
        c = buf[i]
        if not (c < 3 or c == 0x80):
            fail(_E_RETURN_CODE)  # [MQTT-3.9.3-2]
        i += 1
    return t


# ---------------------------------------------------------------- the connection
# Conn: one framed, non-blocking MQTT connection over a stream (umqtt3.conn
# names it too; here so that a client loads one module for the wire).
#
# A "link" is anything with MicroPython's stream methods: readinto(buf, n)
# and write(buf, off, n), returning None when they would block and 0 bytes
# read at end of stream. MicroPython sockets (plain and TLS) are links as
# they are; on CPython compat.link() adapts a socket; transport.Pipe is an
# in-memory link pair for tests and for running broker and clients in one
# process (kept apart so that a device client never loads it).
#
# Reads land where they belong in the receive buffer: the start of a packet
# (`head` bytes asked for, 2 by default: exact reads), then any further
# length bytes, then the body. So a packet is whole in rx[0:n], and reads at
# offsets 0..5 use views made once; only a packet that arrives in pieces
# costs a memoryview slice. With a larger `head` (the client's) a small
# packet, such as the PUBACK a QoS 1 publish waits for, comes in one read
# instead of two; the few bytes read past it are moved to the front on the
# next recv(), so the packet handed out stays intact until then.


class Closed(OSError):
    """The peer closed the connection (or the link failed): errno 104, or 32
    when a write failed. Raised as Closed(n, ""): the empty text is interned
    (no string in RAM), and with it CPython sets e.errno too."""


class Conn:
    # A client's Conn holds its core here: a PUBLISH larger than rx is
    # discarded, and the core answers its header (client_skip). A server's
    # (None) refuses it (0x95): it must not drop a client's message unannounced.
    discard = None  # type: object
    head = 5  # (see __init__)

    def __init__(self, link, rx=1024, tx=1024, max_packet=0, head=2):
        self.link = link
        # bytes asked for at a packet's start: at most 5, so that what follows
        # lands at an offset with a view made once (_at). A client's 5 is the
        # class's: its Conn has `discard` instead, in a table of 12 slots
        if head != 5 or rx < 5:
            self.head = min(head, 5, rx)
        self.last = 0  # length of the packet recv() returned
        self.spent = 0  # of rx[0:got], bytes done() consumed
        self.rx = bytearray(rx)
        self.tx = bytearray(tx)
        # views at the offsets a header can end at: reads there never allocate
        v = memoryview(self.rx)
        self._at = [self.rx, v[1:], v[2:], v[3:], v[4:], v[5:]]
        self.max_packet = min(max_packet or rx, rx)
        self.got = 0  # bytes of the current packet in rx
        self.need = 2  # bytes wanted before looking again
        self.tlen = 0  # bytes queued in tx
        self.sent = 0  # of which already written

    # ------------------------------------------------------------ receive
    def recv(self):
        """Read what is available; return the length of a whole packet now in
        rx[0:n], or 0 if none is complete yet. Call done() after decoding."""
        if self.need < 0:
            # a PUBLISH larger than rx: -need bytes of it still to drop
            return _M[2].recv(self)
        link = self.link
        s = self.spent
        if s:
            # bytes read past the last packet: the start of the next one
            self.got -= s
            move(self.rx, 0, self.rx, s, self.got)
            self.spent = 0
        got = self.got
        while True:
            if got >= 2:
                n = self.rx[1] + 2  # a one-byte remaining length: the usual case
                if n > 129 or n > self.max_packet:
                    n = frame_len(self.rx, 0, got, self.discard is None and self.max_packet)
                    if n > self.max_packet:
                        # a client's: its header, then the rest dropped
                        m = _M[2]
                        if m is None:
                            from . import client_skip as m
                            _M[2] = m
                        n = m.head(self, n, got)
                if n:
                    if got >= n:
                        self.last = n
                        return n
                    self.need = n
                else:
                    self.need = got + 1  # one more remaining-length byte
            want = self.need - got if got else self.head
            buf = self._at[got] if got < 6 else self._at[1][got - 1:]
            r = link.readinto(buf, want)
            if r is None:
                return 0
            if not r:
                raise Closed(104, "")  # closed by the peer
            got += r
            self.got = got

    def done(self):
        """The packet recv() returned is consumed (set got to 0 first to
        drop everything read)."""
        if self.got > self.last > 0:
            self.spent = self.last  # moved at the next recv(): rx stays intact
        else:
            self.got = 0
            self.spent = 0  # (dropped with the rest: a read-ahead of a link now gone)
        self.last = 0
        self.need = 2

    # ------------------------------------------------------------ send
    def space(self):
        return len(self.tx) - self.tlen

    def flush(self):
        """Write queued bytes; True when tx is empty afterwards."""
        s = self.sent
        t = self.tlen
        while s < t:
            r = self.link.write(self.tx, s, t - s)
            if not r:
                self.sent = s
                if r is None:
                    return False
                raise Closed(32, "")  # write failed
            s += r
        self.sent = self.tlen = 0
        return True

    def close(self):
        try:
            self.link.close()
        except Exception:
            pass
