# umqtt3.codec -- MQTT control packets to and from bytes. No I/O, no state.
#
# The broker's codec: umqtt3.client_codec (every packet a client sends or
# receives, the Packet and decode(); re-exported here, the same objects)
# plus the wire primitives by public name that codec_server, the broker and
# its sessions build on, and the forms only they use (a list of filters,
# DISCONNECT with a reason). A client loads client_codec alone.
#
# Encoders write one packet into a caller's bytearray at `off` and return the
# end offset; they refuse (MQTTError, code 0x95) rather than grow the buffer.
# Protocol levels: 3 (MQTT 3.1, "MQIsdp"), 4 (3.1.1) and 5 (5.0); what only
# 5.0 has (properties, reason codes, AUTH) is umqtt3.props's.
from .compat import const
from .client_codec import encode_ack as encode_ack4  # the four-byte form, all a client sends
from .client_codec import (MQTTError, Busy, StoreFull, fail, mqtt5, frame_len,  # noqa: F401
                           put_header, encode_connect, encode_publish,
                           encode_filter, Packet, str_end, read_pid, decode)

_PROTOCOL_ERROR = const(0x82)
_TOO_LARGE = const(0x95)
_MAX_REMAINING = const(268435455)

# indexes into umqtt3.codec_errors, as in client_codec
_E_LENGTH_TOO_LARGE = const(0)
_E_STRING_TOO_LONG = const(6)
_E_FILTER = const(7)
_E_SUB_OPTIONS = const(8)
_E_PID_RANGE = const(9)
_E_BINARY_TRUNCATED = const(22)
_E_BINARY_PAST_END = const(23)

# topic names and filters (umqtt3.topic matches them; it defines these
# bytes again, as const() names cannot be imported on MicroPython)
_SLASH = const(0x2F)
_PLUS = const(0x2B)
_HASH = const(0x23)


def valid_name(buf, off, n):
    """A topic name: 1..65535 bytes, no wildcards, no U+0000
    [MQTT-4.7.3-1, MQTT-4.7.3-2, MQTT-3.3.2-2]. UTF-8 is checked by the codec."""
    if not 0 < n < 65536:
        return False
    if not off and n == len(buf) and type(buf) is not memoryview:
        # a whole bytes/bytearray: find() runs in C and allocates nothing
        return buf.find(b"+") < 0 and buf.find(b"#") < 0 and buf.find(b"\x00") < 0
    for i in range(off, off + n):
        c = buf[i]
        if c == _PLUS or c == _HASH or c == 0:
            return False
    return True


def valid_filter(buf, off, n):
    """A topic filter: 1..65535 bytes; '+' fills a whole level
    [MQTT-4.7.1-3]; '#' is last and fills a whole level [MQTT-4.7.1-2]."""
    if not 0 < n < 65536:
        return False
    end = off + n
    for i in range(off, end):
        c = buf[i]
        if c == _PLUS or c == _HASH:
            if i > off and buf[i - 1] != _SLASH:
                return False
            if c == _HASH:
                if i != end - 1:
                    return False
            elif i + 1 < end and buf[i + 1] != _SLASH:
                return False
        elif c == 0:
            return False
    return True


# ---------------------------------------------------------------- framing
# The wire primitives (fail, varint_size, put_varint, put_header, put_str,
# check_pid, head_pid, str_end, bin_end, read_pid, mqtt5, publish_size) are public:
# codec_server, props and the broker build on them.

def varint_size(n):
    if n < 128:
        return 1
    if n < 16384:
        return 2
    if n < 2097152:
        return 3
    if n <= _MAX_REMAINING:
        return 4
    fail(_E_LENGTH_TOO_LARGE, _TOO_LARGE)


def publish_size(tn, pn, qos, prn=-1):
    """Bytes of a PUBLISH with a topic of tn bytes and a payload of pn;
    prn: its property list's length at MQTT 5, -1 below (no list)."""
    rl = 2 + tn + pn + (2 if qos else 0)
    if prn >= 0:
        rl += varint_size(prn) + prn
    return 1 + varint_size(rl) + rl


def put_varint(buf, off, n):
    while n > 127:
        buf[off] = (n & 0x7F) | 0x80
        n >>= 7
        off += 1
    buf[off] = n
    return off + 1


def put_str(buf, off, s):
    # s is bytes-like (as_bytes applied); 2-byte length then the bytes
    n = len(s)
    buf[off] = n >> 8
    buf[off + 1] = n & 0xFF
    off += 2
    buf[off:off + n] = s
    return off + n


def filter_len(f, opts, level):
    # a valid filter [MQTT-4.7.1-2, MQTT-4.7.1-3] with valid options
    # [MQTT-3.8.3-4]: its encoded length
    if not valid_filter(f, 0, len(f)):
        fail(_E_FILTER, _PROTOCOL_ERROR)
    if (opts & 3) == 3 or opts & (0xC0 if level == 5 else 0xFC) or (opts & 0x30) == 0x30:
        fail(_E_SUB_OPTIONS, _PROTOCOL_ERROR)
    if len(f) > 65535:
        fail(_E_STRING_TOO_LONG, _PROTOCOL_ERROR)
    return len(f) + 2


def check_pid(pid):
    if not 0 < pid < 65536:
        fail(_E_PID_RANGE, _PROTOCOL_ERROR)  # [MQTT-2.3.1-1]


_S = None


def _srv():
    # umqtt3.codec_server: what only a server reads or writes
    global _S
    if _S is None:
        from . import codec_server
        _S = codec_server
    return _S


def __getattr__(name):
    # the packet types and reason codes by name (codec.PUBLISH, ...): the
    # broker's, in codec_server; kept here after the first use. Not a
    # module's own names: the import system asks for __path__ while this
    # module's importers are half made, and codec_server imports them
    if name[:2] == "__":
        raise AttributeError(name)
    v = getattr(_srv(), name)
    globals()[name] = v
    return v


def head_pid(buf, off, first, rl, pid, level, props):
    """Fixed header, packet id and (v5) properties: the start SUBSCRIBE,
    UNSUBSCRIBE, SUBACK and UNSUBACK share. rl counts what follows them."""
    if level == 5:
        p5 = mqtt5()
        props = p5.encoded(props)
        rl += p5.size(props)
    off = put_header(buf, off, first, rl + 2)
    buf[off] = pid >> 8
    buf[off + 1] = pid & 0xFF
    if level == 5:
        return p5.put(buf, off + 2, props)
    return off + 2


def bin_end(buf, off, end):
    if off + 2 > end:
        fail(_E_BINARY_TRUNCATED)
    off += 2 + ((buf[off] << 8) | buf[off + 1])
    if off > end:
        fail(_E_BINARY_PAST_END)
    return off


# ---------------------------------------------------------------- encoders
# (CONNECT, PUBLISH, the acks, PINGREQ/PINGRESP are client_codec's)

def encode_subscribe(buf, off, pid, topics, qos=0, level=4, props=None):
    """topics: one filter (str/bytes) with `qos`, or a list of (filter,
    options) pairs (encoded by codec_server); options is the QoS for v3/v4
    and the v5 subscription options byte."""
    if isinstance(topics, list):
        return _srv().encode_filters(buf, off, 0x82, pid, topics, level, props)
    return encode_filter(buf, off, pid, topics, qos, level, props)


def encode_unsubscribe(buf, off, pid, topics, level=4, props=None):
    """topics: one filter, or a list of filters (codec_server's, as above)."""
    if isinstance(topics, list):
        return _srv().encode_filters(buf, off, 0xA2, pid, topics, level, props)
    return encode_filter(buf, off, pid, topics, -1, level, props)


def encode_ack(buf, off, t, pid, rc=None, level=4, props=None):
    """PUBACK, PUBREC, PUBREL, PUBCOMP (and v3/v4 UNSUBACK). For MQTT 5 the
    reason code and properties are omitted when rc is None and props is None
    (remaining length 2: client_codec's four bytes, which the client sends);
    props=b"" writes an explicit empty property list."""
    if level != 5 or (rc is None and props is None):
        return encode_ack4(buf, off, t, pid)
    check_pid(pid)
    p5 = mqtt5()
    props = p5.encoded(props)
    off = put_header(buf, off, (t << 4) | (2 if t == 6 else 0),  # PUBREL: flags 0010
                     3 if props is None else 3 + p5.size(props))
    buf[off] = pid >> 8
    buf[off + 1] = pid & 0xFF
    buf[off + 2] = rc or 0
    return off + 3 if props is None else p5.put(buf, off + 3, props)


def encode_simple(buf, off, ptype):
    """PINGREQ, PINGRESP and DISCONNECT without a reason: two bytes (the
    client writes them with put_header)."""
    return put_header(buf, off, ptype << 4, 0)


def encode_disconnect(buf, off, rc=None, level=4, props=None):
    """DISCONNECT. With rc None and no props the v5 form is two bytes
    (reason 0x00 implied); AUTH is umqtt3.props.encode_auth."""
    if level == 5 and (rc is not None or props is not None):
        return mqtt5().encode_rc(buf, off, 0xE0, rc, props)
    return put_header(buf, off, 0xE0, 0)
