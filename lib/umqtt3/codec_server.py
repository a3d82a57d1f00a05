# umqtt3.codec_server -- the packets only a server reads or writes.
#
# codec.decode() loads this module the first time it meets a CONNECT,
# SUBSCRIBE or UNSUBSCRIBE, so a device that only runs the client never pays
# for it. The rules and the Packet fields are codec.py's.
from .compat import const, as_bytes
from .codec import (fail, str_end, bin_end, read_pid, put_str, filter_len,
                    check_pid, put_header, mqtt5, head_pid, encode_ack)
from .topic import valid_filter

# The packet types and reason codes by name (codec.py has them as private
# consts, and hands these out as codec.PUBLISH etc. through its __getattr__).
CONNECT = const(1)
CONNACK = const(2)
PUBLISH = const(3)
PUBACK = const(4)
PUBREC = const(5)
PUBREL = const(6)
PUBCOMP = const(7)
SUBSCRIBE = const(8)
SUBACK = const(9)
UNSUBSCRIBE = const(10)
UNSUBACK = const(11)
PINGREQ = const(12)
PINGRESP = const(13)
DISCONNECT = const(14)
AUTH = const(15)
MALFORMED = const(0x81)
PROTOCOL_ERROR = const(0x82)
BAD_PROTOCOL_VERSION = const(0x84)
TOO_LARGE = const(0x95)
MAX_REMAINING = const(268435455)

# indexes into umqtt3.codec_errors, as in codec.py
_E_FILTER = const(7)
_E_SUB_OPTIONS = const(8)
_E_WILL_QOS = const(12)
_E_SUB_NO_FILTERS = const(17)
_E_UNSUB_NO_FILTERS = const(18)
_E_PASSWORD = const(13)
_E_NO_FILTERS = const(35)
_E_NO_OPTIONS = const(36)
_E_CONNECT_TRUNCATED = const(37)
_E_PROTOCOL_NAME = const(38)
_E_PROTOCOL_LEVEL = const(39)
_E_CONNECT_FLAG = const(40)
_E_WILL_FLAGS = const(41)
_E_EMPTY_WILL = const(42)
_E_WILL_WILDCARD = const(43)
_E_CONNECT_TAIL = const(44)
_E_BRIDGE_5 = const(61)


def encode_filters(buf, off, first, pid, topics, level=4, props=None):
    """SUBSCRIBE (first 0x82, topics: (filter, options) pairs) or
    UNSUBSCRIBE (0xA2, topics: filters) for a list of filters: what
    codec.encode_subscribe and encode_unsubscribe hand over."""
    check_pid(pid)
    sub = first == 0x82
    if not topics:
        # [MQTT-3.8.3-3] [MQTT-3.10.3-2]
        fail(_E_SUB_NO_FILTERS if sub else _E_UNSUB_NO_FILTERS, PROTOCOL_ERROR)
    rl = 0
    for t in topics:
        rl += filter_len(as_bytes(t[0]), t[1], level) + 1 if sub else \
            filter_len(as_bytes(t), 0, level)
    off = head_pid(buf, off, first, rl, pid, level, props)
    for t in topics:
        if sub:
            off = put_str(buf, off, as_bytes(t[0]))
            buf[off] = t[1]
            off += 1
        else:
            off = put_str(buf, off, as_bytes(t))
    return off


def encode_connack(buf, off, session_present, rc, level=4, props=None):
    rl = 2
    if level == 5:
        p5 = mqtt5()
        props = p5.encoded(props)
        rl += p5.size(props)
    off = put_header(buf, off, 0x20, rl)
    buf[off] = 1 if session_present else 0
    buf[off + 1] = rc
    off += 2
    if level == 5:
        off = p5.put(buf, off, props)
    return off


def encode_suback(buf, off, pid, codes, level=4, props=None):
    """SUBACK, and UNSUBACK for v5 (pass ptype via encode_unsuback)."""
    return _encode_codes(buf, off, 0x90, pid, codes, level, props)


def encode_unsuback(buf, off, pid, codes=None, level=4, props=None):
    if level < 5:
        return encode_ack(buf, off, UNSUBACK, pid)
    return _encode_codes(buf, off, 0xB0, pid, codes or b"", level, props)


def _encode_codes(buf, off, first, pid, codes, level, props):
    check_pid(pid)
    n = len(codes)
    off = head_pid(buf, off, first, n, pid, level, props)
    for i in range(n):
        buf[off + i] = codes[i]
    return off + n


def decode_server(pkt, buf, i, end, v5):
    """The body of what only a server receives (called by decode()): CONNECT,
    or SUBSCRIBE/UNSUBSCRIBE: packet id, v5 properties, then at least one
    entry [MQTT-3.8.3-3, MQTT-3.10.3-2], each checked by read_filter."""
    if pkt.type == 1:
        return decode_connect(pkt, buf, i, end)
    i = read_pid(pkt, buf, i, end)
    if v5:
        i = mqtt5().read(pkt, buf, i, end, pkt.type)
    pkt.payload_off = i
    pkt.payload_len = end - i
    if i == end:
        fail(_E_NO_FILTERS, PROTOCOL_ERROR)
    while i < end:
        i = read_filter(pkt, i)
    return pkt.type


def read_filter(pkt, i):
    """Read the SUBSCRIBE/UNSUBSCRIBE entry at i into pkt.f_off, f_len and
    opts (SUBSCRIBE only), validating it; return the next entry's offset."""
    buf = pkt.buf
    end = pkt.end
    f0 = i + 2
    i = str_end(buf, i, end)
    pkt.f_off = f0
    pkt.f_len = i - f0
    if not valid_filter(buf, f0, i - f0):
        fail(_E_FILTER)  # [MQTT-4.7.1-2, MQTT-4.7.1-3, MQTT-4.7.3-1]
    if pkt.type == SUBSCRIBE:
        if i >= end:
            fail(_E_NO_OPTIONS)
        o = buf[i]
        if (o & 3) == 3 or o & (0xC0 if pkt.level == 5 else 0xFC) or (o & 0x30) == 0x30:
            fail(_E_SUB_OPTIONS)  # [MQTT-3.8.3-4], v5 3.8.3.1
        pkt.opts = o
        i += 1
    return i


def decode_connect(pkt, buf, i, end):
    """CONNECT body at buf[i:end] (called by codec.decode)."""
    # Protocol name and level [MQTT-3.1.2-1, MQTT-3.1.2-2]
    n0 = i + 2
    i = str_end(buf, i, end)
    if i + 4 > end:
        fail(_E_CONNECT_TRUNCATED)
    nl = i - n0
    level = buf[i] & 0x7F  # 0x80: the bridge bit, below
    name_mqtt = nl == 4 and buf[n0] == 77 and buf[n0 + 1] == 81 and buf[n0 + 2] == 84 and buf[n0 + 3] == 84
    name_31 = nl == 6 and buf[n0] == 77 and buf[n0 + 1] == 81 and buf[n0 + 2] == 73 and \
        buf[n0 + 3] == 115 and buf[n0 + 4] == 100 and buf[n0 + 5] == 112
    if not (name_mqtt or name_31):
        fail(_E_PROTOCOL_NAME, PROTOCOL_ERROR)
    if not ((name_mqtt and (level == 4 or level == 5)) or (name_31 and level == 3)):
        fail(_E_PROTOCOL_LEVEL, BAD_PROTOCOL_VERSION)
    # The bridge bit (0x83, 0x84): a broker's bridge, as mosquitto's
    # try_private sends it, which the broker serves as mosquitto does
    # (Core._subscribe). Not an MQTT 5 level [MQTT-3.1.2-2]: mosquitto
    # 2.0.11 closes a well-formed 0x85 CONNECT without a CONNACK, and so
    # does this (a protocol error). pkt.bridge is a server's field only.
    pkt.bridge = buf[i] > 0x7F
    if pkt.bridge and level == 5:
        fail(_E_BRIDGE_5, PROTOCOL_ERROR)
    pkt.level = level
    fl = buf[i + 1]
    if fl & 1 and level > 3:
        fail(_E_CONNECT_FLAG)  # [MQTT-3.1.2-3]; MQTT 3.1 leaves the bit unused
    will = fl & 4
    wq = (fl >> 3) & 3
    if not will and (wq or fl & 32):
        fail(_E_WILL_FLAGS)  # [MQTT-3.1.2-11, MQTT-3.1.2-13]
    if wq == 3:
        fail(_E_WILL_QOS)  # [MQTT-3.1.2-14] (5.0: MQTT-3.1.2-12)
    if fl & 64 and not fl & 128 and level < 5:
        fail(_E_PASSWORD)  # [MQTT-3.1.2-22]
    pkt.flags = fl
    pkt.will = will != 0
    pkt.qos = wq
    pkt.retain = fl & 32 != 0
    pkt.clean = fl & 2 != 0
    pkt.keepalive = (buf[i + 2] << 8) | buf[i + 3]
    i += 4
    if level == 5:
        i = mqtt5().read(pkt, buf, i, end, CONNECT)
    po = pkt.props_off
    pn = pkt.props_len
    pkt.cid_off = i + 2
    i = str_end(buf, i, end)  # [MQTT-3.1.3-3, MQTT-3.1.3-4]
    pkt.cid_len = i - pkt.cid_off
    pkt.topic_off = pkt.payload_off = -1
    pkt.topic_len = pkt.payload_len = pkt.wprops_len = 0
    if will:
        if level == 5:
            i = mqtt5().read(pkt, buf, i, end, 0)  # 0: the will's property set
            pkt.wprops_off = pkt.props_off
            pkt.wprops_len = pkt.props_len
            pkt.props_off = po
            pkt.props_len = pn
        pkt.topic_off = i + 2
        i = str_end(buf, i, end)  # [MQTT-3.1.3-10]
        pkt.topic_len = i - pkt.topic_off
        if not pkt.topic_len:
            fail(_E_EMPTY_WILL)
        j = pkt.topic_off
        while j < i:
            if buf[j] == 0x23 or buf[j] == 0x2B:
                fail(_E_WILL_WILDCARD)
            j += 1
        pkt.payload_off = i + 2
        i = bin_end(buf, i, end)
        pkt.payload_len = i - pkt.payload_off
    pkt.user_off = pkt.pw_off = -1
    pkt.user_len = pkt.pw_len = 0
    if fl & 128:
        pkt.user_off = i + 2
        i = str_end(buf, i, end)  # [MQTT-3.1.3-11]
        pkt.user_len = i - pkt.user_off
    if fl & 64:
        pkt.pw_off = i + 2
        i = bin_end(buf, i, end)
        pkt.pw_len = i - pkt.pw_off
    if i != end:
        fail(_E_CONNECT_TAIL)
    return CONNECT
