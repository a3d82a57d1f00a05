# umqtt3.broker5 -- what only MQTT 5.0 asks of the broker: CONNECT and
# CONNACK properties, reason codes and DISCONNECT both ways, topic aliases
# from clients, the checks of an inbound PUBLISH.
#
# broker_core imports this module on the first level-5 CONNECT, so a
# broker serving only 3.1 / 3.1.1 clients never loads it (nor props.py).
# Each level-5 connection holds one V5 (Connection.v5): what its client
# asked for and allows. Forwarding itself is the core's and the sessions'
# (broker_session.put_publish writes the property list).
from .codec import encode_ack, encode_disconnect, publish_size, MQTTError, PUBACK, PUBREC, PUBCOMP
from .codec_server import encode_connack
from .compat import const, valid_utf8
from .props import (get, find, encode, encode_auth, TYPES, SESSION_EXPIRY, RECEIVE_MAXIMUM, MAXIMUM_PACKET_SIZE,
                    TOPIC_ALIAS_MAXIMUM, TOPIC_ALIAS, REQUEST_PROBLEM_INFO, AUTH_METHOD,
                    AUTH_DATA, ASSIGNED_CLIENT_ID, SERVER_KEEPALIVE, REASON_STRING,
                    PAYLOAD_FORMAT, WILL_DELAY,
                    SUBSCRIPTION_ID, MESSAGE_EXPIRY, wild_response_topic)

NEVER = const(0xFFFFFFFF)  # a session expiry interval that never ends

# CONNACK reason codes for the 3.1.1 return codes broker_core refuses with
# (index: the 3.1.1 code): unsupported version, client id not valid,
# server unavailable, bad user name or password, not authorized
_CONNACK5 = b"\x00\x84\x85\x88\x86\x87"


class V5:
    """One level-5 connection: what its CONNECT asked for and allows."""

    # Class attributes: a client that uses none of these holds no slot.
    tam = 0  # the client's topic alias maximum: aliases the broker may set
    am = None  # the authentication method agreed at CONNECT
    adata = None  # authentication data for CONNACK / the next AUTH
    pend = None  # the hook that takes the client's next AUTH data
    cbytes = None  # the CONNECT held while its exchange goes on
    authed = False  # the exchange at CONNECT accepted it
    abytes = 0  # bytes of the topics in aliases (max_alias_bytes)

    def __init__(self):
        self.rmax = 65535  # the client's receive maximum [MQTT-3.1.2-19]
        self.maxpkt = 0  # the client's maximum packet size, 0: none given
        self.problem = True  # request problem information
        self.sx = 0  # session expiry interval at CONNECT
        self.aliases = None  # inbound topic aliases: alias -> topic bytes
        self.wprops = None  # the will's properties, as received
        self.wdelay = 0  # will delay interval, seconds


def _utf8(buf, off, n):
    # a payload the publisher says is UTF-8 [MQTT-3.3.2-4 (5.0)]
    if valid_utf8 is not None:
        return valid_utf8(buf, off, n)
    try:
        t = str(bytes(buf[off:off + n]), "utf-8")
    except UnicodeError:
        return False
    return "\x00" not in t


def refuse_code(rc):
    """The CONNACK reason code for a 3.1.1 return code."""
    return _CONNACK5[rc] if rc < len(_CONNACK5) else rc


def connect(core, c, p):
    """Read a level-5 CONNECT's properties into c.v5. Returns 0, or the
    CONNACK reason code that refuses it."""
    old = c.v5  # set when this is a CONNECT held for its authentication
    v = c.v5 = V5()
    buf = p.buf
    po = p.props_off
    pn = p.props_len
    v.sx = get(buf, po, pn, SESSION_EXPIRY, 0)
    v.rmax = get(buf, po, pn, RECEIVE_MAXIMUM, 65535)
    v.maxpkt = get(buf, po, pn, MAXIMUM_PACKET_SIZE, 0)
    tam = get(buf, po, pn, TOPIC_ALIAS_MAXIMUM, 0)  # [MQTT-3.3.2-11]
    if tam:
        v.tam = tam
    v.problem = get(buf, po, pn, REQUEST_PROBLEM_INFO, 1) == 1
    if p.will and p.wprops_len:
        v.wprops = bytes(buf[p.wprops_off:p.wprops_off + p.wprops_len])
        v.wdelay = get(buf, p.wprops_off, p.wprops_len, WILL_DELAY, 0)
        if get(buf, p.wprops_off, p.wprops_len, PAYLOAD_FORMAT, 0) == 1 and \
                not _utf8(buf, p.payload_off, p.payload_len):
            return 0x99  # payload format invalid [MQTT-3.1.3-11 (will payload)]
        if wild_response_topic(buf, p.wprops_off, p.wprops_len):
            return 0x82  # a will's Response Topic is a topic name too [MQTT-3.3.2-14]
    method = get(buf, po, pn, AUTH_METHOD)
    if method is not None:
        if old is not None and old.authed and old.am == method:
            v.am = method  # the held CONNECT again, its exchange over
            v.adata = old.adata
            v.authed = True
            return 0
        hook = core.auth_methods.get(method)
        if hook is None:
            return 0x8C  # bad authentication method
        v.am = method
        return _step(c, hook(get(buf, po, pn, AUTH_DATA)))  # -1: CONNACK waits
    if get(buf, po, pn, AUTH_DATA) is not None:
        return 0x82  # data without a method: a Protocol Error (3.1.2.11.10 of 5.0)
    return 0


def _step(c, res):
    """One step of an enhanced authentication (4.12): a hook returns a
    reason code, (rc, data), or (0x18, data, next) to go on, where next
    takes the client's next authentication data. 0x18: AUTH sent and -1
    returned (nothing more to do now); otherwise the final reason code,
    the data to send with it kept in c.v5.adata."""
    v = c.v5
    if type(res) is int:
        v.pend = None
        return res
    rc = res[0]
    v.adata = res[1]
    if rc != 0x18:
        v.pend = None
        return rc
    v.pend = res[2]
    send_auth(c, 0x18)  # [MQTT-4.12.0-2]
    return -1


def send_auth(c, rc):
    """AUTH with reason code rc, the agreed method and c.v5.adata
    [MQTT-4.12.0-5]."""
    v = c.v5
    d = {AUTH_METHOD: v.am}
    if v.adata is not None:
        d[AUTH_DATA] = v.adata
        v.adata = None
    conn = c.conn
    pr = encode(d)
    if conn.space() >= 6 + len(pr):
        conn.tlen = encode_auth(conn.tx, conn.tlen, rc, pr)


def auth_in(core, c, p):
    """A client's AUTH. While its CONNECT waits: the exchange goes on
    (0x18), then the CONNECT is accepted (and handled now) or refused
    (CONNACK). Once connected: re-authentication (0x19, then 0x18s); a
    failure closes the connection with DISCONNECT [MQTT-4.12.1-2]. The
    method must be the CONNECT's [MQTT-4.12.0-5, MQTT-4.12.1-1]; without
    an exchange AUTH is a protocol error."""
    v = c.v5
    buf = p.buf
    po = p.props_off
    pn = p.props_len
    if v is None or v.am is None or get(buf, po, pn, AUTH_METHOD) != v.am:
        raise MQTTError("AUTH outside an authentication exchange", 0x82)
    data = get(buf, po, pn, AUTH_DATA)
    waiting = v.cbytes is not None
    if p.rc == 0x18 and v.pend is not None:
        rc = _step(c, v.pend(data))
    elif p.rc == 0x19 and not waiting and v.pend is None:
        rc = _step(c, core.auth_methods[v.am](data))  # re-authentication (4.12.1)
    else:
        raise MQTTError("AUTH out of its exchange", 0x82)
    if rc < 0:
        core.others_out += 1
        return  # AUTH 0x18 sent: the client goes on
    if waiting:
        cb = v.cbytes
        v.cbytes = None
        if rc:
            refuse(c, rc, "authentication")
            core.others_out += 1
            core.refused += 1
            core.disconnect(c, "refused (CONNACK 0x%02x): authentication" % rc, False)
            return
        v.authed = True
        core.others_in -= 1  # (counted when it came)
        core.bytes_in -= len(cb)
        core.packet_at(c, cb, 0, len(cb), c.t_last)  # the held CONNECT, accepted now
    elif rc:
        core.disconnect(c, "re-authentication failed", True, rc)
    else:
        send_auth(c, 0)  # re-authenticated
        core.others_out += 1


def connack(core, c, present, assigned, ka):
    """CONNACK 0x00 with what the broker allows [MQTT-3.2.2-*]: its receive
    maximum, maximum packet size, topic alias maximum, an assigned client
    id and the keep alive it imposes. Retain, wildcards, subscription
    identifiers, shared subscriptions and QoS 2 are all available: the
    defaults, not sent."""
    lim = core.limits
    d = {RECEIVE_MAXIMUM: lim.max_qos2_in if lim.max_qos2_in < 65535 else 65535,
         MAXIMUM_PACKET_SIZE: lim.max_packet}
    if lim.max_aliases:
        d[TOPIC_ALIAS_MAXIMUM] = lim.max_aliases
    if assigned is not None:
        d[ASSIGNED_CLIENT_ID] = assigned  # [MQTT-3.2.2-16]
    if ka >= 0:
        d[SERVER_KEEPALIVE] = ka  # the client uses this one [MQTT-3.2.2-21]
    v = c.v5
    if v.am is not None:
        d[AUTH_METHOD] = v.am  # the CONNECT's method (3.2.2.3.17)
        if v.adata is not None:
            d[AUTH_DATA] = v.adata
            v.adata = None
    conn = c.conn
    conn.tlen = encode_connack(conn.tx, conn.tlen, present, 0, 5, encode(d))


def refuse(c, rc, why):
    """CONNACK with a reason code of 0x80 or above; a reason string only
    when the client asked for problem information."""
    conn = c.conn
    pr = _reason(c, why, 8)
    if conn.space() >= 8 + (len(pr) if pr else 0):
        conn.tlen = encode_connack(conn.tx, conn.tlen, False, refuse_code(rc), 5, pr)


def _reason(c, why, size):
    # a reason string property, when asked for and when the packet stays
    # within the client's maximum packet size [MQTT-3.1.2-29, MQTT-3.2.2-19]
    v = c.v5
    if v is None or not v.problem or not why:
        return None
    pr = encode({REASON_STRING: why})
    if v.maxpkt and size + len(pr) > v.maxpkt:
        return None
    return pr


def acks_fit(c, p, opts):
    """Whether the SUBACK (opts 1: each filter has an options byte) or
    UNSUBACK (opts 0) answering p, a reason code per filter and no
    properties, is within the client's maximum packet size
    [MQTT-3.1.2-24]. The spec has no smaller answer to send instead."""
    mp = c.v5.maxpkt
    if not mp:
        return True
    buf = p.buf
    i = p.payload_off
    end = i + p.payload_len
    n = 0
    while i + 1 < end:
        i += 2 + ((buf[i] << 8) | buf[i + 1]) + opts
        n += 1
    rl = 3 + n  # packet id, property length 0, the codes
    return 1 + (1 if rl < 128 else 2 if rl < 16384 else 3) + rl <= mp


def send_disconnect(c, rc, why):
    """The broker's DISCONNECT with reason code rc [MQTT-3.14.2-1]; the
    driver closes the connection after it."""
    conn = c.conn
    pr = _reason(c, why, 8)
    if conn.space() >= 8 + (len(pr) if pr else 0):
        conn.tlen = encode_disconnect(conn.tx, conn.tlen, rc, 5, pr)


def on_disconnect(core, c, p):
    """The client's DISCONNECT: the will goes unless its reason code is
    0x00 [MQTT-3.14.4-3] (0x04 asks for it; an error code ends the
    connection abnormally), and it may change the session expiry interval,
    but not from 0 to more [MQTT-3.14.2-2]."""
    sx = get(p.buf, p.props_off, p.props_len, SESSION_EXPIRY, -1)
    if sx >= 0:
        if not c.v5.sx and sx:
            raise MQTTError("session expiry set at DISCONNECT", 0x82)
        core.set_expiry(c.sess, sx)
    core.disconnect(c, "DISCONNECT 0x%02x" % p.rc, p.rc != 0)


def publish_in(core, c, p):
    """Check a level-5 PUBLISH and resolve its topic alias
    [MQTT-3.3.2-7..12]. Returns True when it is refused (answered, or the
    connection closed); otherwise core.atopic / core.aprops are the
    topic and properties to route with when the alias changed them (None
    when the packet's own serve)."""
    core.atopic = None
    core.aprops = None
    buf = p.buf
    po = p.props_off
    pn = p.props_len
    if pn:
        a = get(buf, po, pn, TOPIC_ALIAS, 0)
        if get(buf, po, pn, SUBSCRIPTION_ID) is not None:
            raise MQTTError("subscription identifier in PUBLISH", 0x82)  # [MQTT-3.3.4-6]
        if wild_response_topic(buf, po, pn):
            # (the broker would forward it; a client takes one, as from mosquitto)
            raise MQTTError("wildcard in the Response Topic", 0x82)  # [MQTT-3.3.2-14]
        if a:
            if a > core.limits.max_aliases:
                raise MQTTError("topic alias out of range", 0x94)  # [MQTT-3.3.2-9, MQTT-3.3.2-10]
            v = c.v5
            if v.aliases is None:
                v.aliases = {}
            if p.topic_len:
                t = bytes(buf[p.topic_off:p.topic_off + p.topic_len])
                old = v.aliases.get(a)
                ab = v.abytes + len(t) - (0 if old is None else len(old))
                mb = core.limits.max_alias_bytes
                if mb and ab > mb:
                    raise MQTTError("topic aliases over max_alias_bytes", 0x97)  # quota exceeded
                v.aliases[a] = t  # [MQTT-3.3.2-12]
                v.abytes = ab
            else:
                t = v.aliases.get(a)
                if t is None:
                    raise MQTTError("unknown topic alias", 0x82)
                # written out (less its 3-byte alias), larger than any
                # PUBLISH the broker takes: it could be neither forwarded
                # nor kept, so it is refused in its PUBACK / PUBREC, not
                # acknowledged and lost [MQTT-3.3.1-5]; 0x83, as 0x95 is
                # no PUBACK code (3.4.2.1), nor 0x97, which says "later"
                if publish_size(len(t), p.payload_len, p.qos, pn - 3) > core.limits.max_packet:
                    if p.qos:
                        core.others_out += 1  # its PUBACK / PUBREC
                    else:
                        core.dropped += 1
                    return ack_refuse(c, p, 0x83)  # implementation specific error
            core.atopic = t
            core.aprops = without(buf, po, pn, TOPIC_ALIAS)  # not forwarded [MQTT-3.3.2-*]
        if get(buf, po, pn, PAYLOAD_FORMAT, 0) == 1 and \
                not _utf8(buf, p.payload_off, p.payload_len):
            if p.qos:
                core.others_out += 1  # its PUBACK / PUBREC
            return ack_refuse(c, p, 0x99)  # payload format invalid
    if not p.topic_len and core.atopic is None:
        raise MQTTError("empty topic without alias", 0x82)  # [MQTT-3.3.2-8 (5.0: 3.3.4)]
    return False


def no_pid(conn, p):
    """PUBREL for an id the session does not hold: PUBCOMP 0x92, packet
    identifier not found (3.7.2.1)."""
    conn.tlen = encode_ack(conn.tx, conn.tlen, PUBCOMP, p.pid, 0x92, 5)


def ack_refuse(c, p, rc):
    """Refuse a PUBLISH with reason code rc in its PUBACK / PUBREC (QoS 0:
    dropped) [MQTT-3.3.4-8 ... see 3.4.2.1]; nothing is routed."""
    if p.qos:
        conn = c.conn
        conn.tlen = encode_ack(conn.tx, conn.tlen, PUBACK if p.qos == 1 else PUBREC, p.pid, rc, 5)
    return True


def without(buf, off, n, drop):
    """The property list buf[off:off+n] without property `drop`, as bytes
    (the list was checked by the codec). Allocates: topic aliases only."""
    out = bytearray()
    end = off + n
    while off < end:
        pid = buf[off]
        j = _next(buf, off + 1, TYPES[pid])
        if pid != drop:
            out += buf[off:j]
        off = j
    return bytes(out)


def _next(buf, i, t):
    # the end of a property value of type t at i (props.TYPES numbering)
    if t == 1:
        return i + 1
    if t == 2:
        return i + 2
    if t == 3:
        return i + 4
    if t == 4:
        while buf[i] & 0x80:
            i += 1
        return i + 1
    i += 2 + ((buf[i] << 8) | buf[i + 1])
    if t == 7:
        i += 2 + ((buf[i] << 8) | buf[i + 1])
    return i


def will_props(c):
    """The will's properties to publish it with: the will delay interval,
    even 0, is the broker's and no PUBLISH property (a PUBLISH with it is
    malformed, 2.2.2.2)."""
    v = c.v5
    if v is None or v.wprops is None:
        return None
    pr = v.wprops
    if find(pr, 0, len(pr), WILL_DELAY) >= 0:
        pr = without(pr, 0, len(pr), WILL_DELAY)
    return pr or None


def subscription_id(p):
    """A level-5 SUBSCRIBE's subscription identifier, 0 for none."""
    return get(p.buf, p.props_off, p.props_len, SUBSCRIPTION_ID, 0)


def with_ids(r, ids):
    """Route r's properties followed by a subscription identifier per id
    [MQTT-3.3.4-3 (5.0)], as bytes."""
    out = bytearray()
    if r.prs is not None:
        out += r.prs[r.pro:r.pro + r.prn]
    for i in ids:
        out += encode({SUBSCRIPTION_ID: i})
    return bytes(out)


def hand_on_props(pr, left):
    """The property list pr of a shared group's copy going to another
    member (broker_core.Core._hand_on): without the subscription
    identifiers it carried for the member that had it (the next member's
    own are added as for any copy [MQTT-3.3.4-3 (5.0)]), its message expiry
    interval what is left of it, left seconds (-1: it has none)
    [MQTT-3.3.2-6]."""
    if find(pr, 0, len(pr), SUBSCRIPTION_ID) >= 0:
        pr = without(pr, 0, len(pr), SUBSCRIPTION_ID)
    k = find(pr, 0, len(pr), MESSAGE_EXPIRY) if left >= 0 else -1
    if k < 0:
        return pr
    b = bytearray(pr)
    b[k] = left >> 24
    b[k + 1] = (left >> 16) & 255
    b[k + 2] = (left >> 8) & 255
    b[k + 3] = left & 255
    return bytes(b)
