# mqtt-packet's byte-level test vectors, run against umqtt3's codec.
#
# The vectors come from mqttjs/mqtt-packet (MIT License, Copyright (c) 2014
# mqtt-packet contributors; the full notice is in
# ../shared/vectors/mqtt-packet/LICENSE.md). They are read from
# ../shared/vectors at test time and are not copied into this repository.
#
# Each case's object (mqtt-packet's field names) is mapped onto our encoder
# arguments and onto the fields of a decoded codec.Packet:
#   parse+generate          decode(hex) gives the object, encode(object) gives hex
#   parse+generate-defaults the same, the decoded side compared with `generated`
#   parse / generate        one half only
#   parse-error             decode must raise MQTTError, nothing else
#   generate-error          encode must raise MQTTError; TypeError/ValueError
#                           only for the cases in NOT_ENCODABLE
# Cases where mqtt-packet departs from the spec, or that our API cannot even
# pose, are listed in SKIP with the reason.
#
# Portable: runs under pytest and under MicroPython (tests/mp/testrunner.py).
import json

from support import SkipTest, unhex, tohex, have_shared, shared_path, MICROPYTHON

from umqtt3 import props
from umqtt3.codec import (
    MQTTError, Packet, decode, frame_len, varint_size, encode_connect, encode_publish,
    encode_ack, encode_subscribe, encode_unsubscribe, encode_simple, encode_disconnect,
    CONNECT, CONNACK, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP, SUBSCRIBE,
    SUBACK, UNSUBSCRIBE, UNSUBACK, PINGREQ, PINGRESP, DISCONNECT, AUTH)
from umqtt3.props import encode_auth  # AUTH is MQTT 5 only
from umqtt3.codec_server import encode_connack, encode_suback, encode_unsuback, read_filter

VECTORS = "vectors/mqtt-packet/vectors.json"

# Keys are "<index> <name>" (names repeat). Value: (part, reason); part is
# "all" or "generate" (the parse half is still checked).
SKIP = {
    # -- mqtt-packet's API, not the protocol
    "0 Unknown command": (
        "all", "an object without cmd: we have one encoder per packet type, no dispatch"),
    "135 Invalid protocolId": (
        "all", "protocolId 42: the protocol name is not an argument of ours, it follows "
               "from the level [MQTT-3.1.2-1]"),
    "141 Invalid will": (
        "all", "will=42: our will is given as separate arguments, so a will that is not "
               "an object cannot be posed"),
    "142 Invalid will topic": (
        "all", "a will without a topic: will_topic=None means 'no will' in our API"),
    "157 Invalid command": ("all", "mqtt-packet's stream writer (writeToStream)"),
    "158 Invalid protocolId": ("all", "mqtt-packet's stream writer (writeToStream)"),
    # -- mqtt-packet more lenient than the spec
    "10 connect MQTT bridge 131": (
        "generate", "the 0x80 'bridge' bit on the level is a broker extension outside "
                    "MQTT 3.1/3.1.1 [MQTT-3.1.2-2]; the decoder keeps it apart (pkt.bridge), the "
                    "encoder never writes it (the bridge sets it on its own CONNECT)"),
    "11 connect MQTT bridge 132": (
        "all", "\"MQIsdp\" with level 4 (| 0x80): 3.1.1's name is \"MQTT\" [MQTT-3.1.2-1], "
               "\"MQIsdp\" belongs to level 3; we refuse the mix (0x84)"),
    "21 Version 4 CONACK in Version 5 mode": (
        "all", "a 5.0 CONNACK without Property Length: 5.0 section 3.2.2 has no omission "
               "rule (unlike PUBACK, 3.4.2.1), and 0x01 is not a 5.0 Connect Reason Code "
               "[MQTT-3.2.2-8]"),
    "26 Version 5 CONNACK test 1": (
        "all", "a CONNACK of one byte has no Connect Reason Code (5.0 section 3.2.2.2)"),
    "27 Version 5 CONNACK test 2": (
        "all", "a 5.0 CONNACK without Property Length (5.0 section 3.2.2.3.1)"),
    "62 connack MQTT 5 with properties": (
        "all", "Maximum QoS 2: 'a Protocol Error to have a value other than 0 or 1' "
               "(5.0 section 3.2.2.3.4)"),
    "63 connack MQTT 5 with properties and doubled user properties": (
        "all", "Maximum QoS 2, as above (5.0 section 3.2.2.3.4)"),
    # -- too big for a test
    "76 Max payload publish packet": (
        "all", "a 256 MB packet; test_mqtt_packet_max_publish_header checks its header"),
}

# generate-error cases whose object is not even encodable: a wrong Python
# type reaches the encoder, which raises TypeError (or ValueError) instead of
# MQTTError. Keyed by name (each applies to every case of that name).
NOT_ENCODABLE = {
    "Invalid return code": "returnCode '5' is a string",
    "unsubscribe with unsubscriptions not an array": "unsubscriptions=5 is not a filter",
    "unsubscribe with unsubscriptions as an object": "filters 1, 2 are numbers",
    "Invalid keepalive": "keepalive 'hello' or 3.1416 is not an int",
    "Invalid will payload": "will payload 42 is a number",
    "Invalid username": "username 42 is a number",
    "Invalid password": "password 42 is a number",
    "Invalid messageId (publish)": "messageId 'a'",
    "Invalid messageId (puback)": "messageId 'a'",
    "Invalid messageId (pubrec)": "messageId 'a'",
    "Invalid messageId (pubrel)": "messageId 'a'",
    "Invalid messageId (subscribe)": "messageId 'a'",
    "Invalid messageId (suback)": "messageId 'a'",
    "Invalid messageId (unsubscribe)": "messageId 'a'",
    "Invalid messageId (unsuback)": "messageId 'a'",
}

# 167 cases, 13 skipped whole: the rest must really be checked.
MIN_CHECKED = 150

CMDS = {
    "connect": CONNECT, "connack": CONNACK, "publish": PUBLISH, "puback": PUBACK,
    "pubrec": PUBREC, "pubrel": PUBREL, "pubcomp": PUBCOMP, "subscribe": SUBSCRIBE,
    "suback": SUBACK, "unsubscribe": UNSUBSCRIBE, "unsuback": UNSUBACK,
    "pingreq": PINGREQ, "pingresp": PINGRESP, "disconnect": DISCONNECT, "auth": AUTH,
}

# mqtt-packet's property names -> our property ids (umqtt3/props.py)
PROPS = {
    "payloadFormatIndicator": props.PAYLOAD_FORMAT,
    "messageExpiryInterval": props.MESSAGE_EXPIRY,
    "contentType": props.CONTENT_TYPE,
    "responseTopic": props.RESPONSE_TOPIC,
    "correlationData": props.CORRELATION_DATA,
    "subscriptionIdentifier": props.SUBSCRIPTION_ID,
    "sessionExpiryInterval": props.SESSION_EXPIRY,
    "assignedClientIdentifier": props.ASSIGNED_CLIENT_ID,
    "serverKeepAlive": props.SERVER_KEEPALIVE,
    "authenticationMethod": props.AUTH_METHOD,
    "authenticationData": props.AUTH_DATA,
    "requestProblemInformation": props.REQUEST_PROBLEM_INFO,
    "willDelayInterval": props.WILL_DELAY,
    "requestResponseInformation": props.REQUEST_RESPONSE_INFO,
    "responseInformation": props.RESPONSE_INFO,
    "serverReference": props.SERVER_REFERENCE,
    "reasonString": props.REASON_STRING,
    "receiveMaximum": props.RECEIVE_MAXIMUM,
    "topicAliasMaximum": props.TOPIC_ALIAS_MAXIMUM,
    "topicAlias": props.TOPIC_ALIAS,
    "maximumQoS": props.MAXIMUM_QOS,
    "retainAvailable": props.RETAIN_AVAILABLE,
    "userProperties": props.USER_PROPERTY,
    "maximumPacketSize": props.MAXIMUM_PACKET_SIZE,
    "wildcardSubscriptionAvailable": props.WILDCARD_SUB_AVAILABLE,
    "subscriptionIdentifiersAvailable": props.SUB_ID_AVAILABLE,
    "sharedSubscriptionAvailable": props.SHARED_SUB_AVAILABLE,
}


class Unmapped(Exception):
    """The case asks for something our API cannot express (see SKIP)."""


class Big:
    """A {"$bigBuffer": N} payload: only its length is ever used, because the
    encoder refuses the packet before copying it."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


# ---------------------------------------------------------------- values

def _join_surrogates(b):
    # MicroPython's json turns "\ud83d\udf04" into two 3-byte surrogate
    # sequences; CPython combines the pair into one code point. Do the same.
    out = bytearray()
    i = 0
    n = len(b)
    while i < n:
        if (i + 6 <= n and b[i] == 0xED and 0xA0 <= b[i + 1] <= 0xAF
                and b[i + 3] == 0xED and 0xB0 <= b[i + 4] <= 0xBF):
            hi = ((b[i + 1] & 0x0F) << 6) | (b[i + 2] & 0x3F)
            lo = ((b[i + 4] & 0x0F) << 6) | (b[i + 5] & 0x3F)
            cp = 0x10000 + (hi << 10) + lo
            out.append(0xF0 | cp >> 18)
            out.append(0x80 | (cp >> 12) & 0x3F)
            out.append(0x80 | (cp >> 6) & 0x3F)
            out.append(0x80 | cp & 0x3F)
            i += 6
        else:
            out.append(b[i])
            i += 1
    return bytes(out)


def utf8(s):
    b = s.encode()
    return _join_surrogates(b) if MICROPYTHON else b


def blob(v):
    """A JSON string or {"$hex"} / {"$bigBuffer"} as bytes (or Big); any
    other value is passed on as it is, for the encoder to refuse."""
    if isinstance(v, str):
        return utf8(v)
    if isinstance(v, dict):
        if "$hex" in v:
            return unhex(v["$hex"])
        if "$bigBuffer" in v:
            return Big(v["$bigBuffer"])
    return v


def pvalue(v):
    if v is True:
        return 1
    if v is False:
        return 0
    if isinstance(v, list):
        return [pvalue(x) for x in v]
    if isinstance(v, dict):
        return blob(v)
    return v


def props_in(d):
    """mqtt-packet properties -> {id: value} for props.encode."""
    out = {}
    for name in d:
        if name not in PROPS:
            raise Unmapped("property " + name)
        v = d[name]
        if name == "userProperties":
            pairs = []
            for k in v:
                vals = v[k] if isinstance(v[k], list) else [v[k]]
                for x in vals:
                    pairs.append((k, x))
            out[PROPS[name]] = pairs
        else:
            out[PROPS[name]] = pvalue(v)
    return out


def canon(d):
    """{id: value} in one form for comparing: strings as UTF-8 bytes, User
    Property as a sorted list of byte pairs, Subscription Identifier a list."""
    out = {}
    for k in d:
        v = d[k]
        if k == props.USER_PROPERTY:
            v = sorted([(blob(a), blob(b)) for a, b in v])
        elif k == props.SUBSCRIPTION_ID:
            v = v if isinstance(v, list) else [v]
        elif isinstance(v, str):
            v = utf8(v)
        out[k] = v
    return out


def level_of(case):
    opts = case.get("opts") or {}
    obj = case.get("object")
    lv = opts.get("protocolVersion")
    if lv is None and isinstance(obj, dict):
        lv = obj.get("protocolVersion")
    return lv or 4


# ---------------------------------------------------------------- decoding side

def _span(pkt, off, n):
    return None if off < 0 else bytes(pkt.buf[off:off + n])


def _want(cond, what, got, want):
    if not cond:
        raise AssertionError("%s: got %r, want %r" % (what, got, want))


def _eq(what, got, want):
    _want(got == want, what, got, want)


def check_fields(pkt, data, obj, level):
    """The decoded packet (and its bytes) against an mqtt-packet object."""
    t = CMDS[obj["cmd"]]
    _eq("type", pkt.type, t)
    if "length" in obj:
        n = obj["length"]
        _eq("length", len(data), 1 + varint_size(n) + n)
    fl = data[0] & 15
    if t != CONNECT:
        if "qos" in obj:
            _eq("qos bits", (fl >> 1) & 3, obj["qos"])
        if "dup" in obj:
            _eq("dup bit", fl & 8 != 0, obj["dup"])
        if "retain" in obj:
            _eq("retain bit", fl & 1 != 0, obj["retain"])
    if obj.get("messageId") is not None:
        _eq("messageId", pkt.pid, obj["messageId"])
    if t == CONNECT:
        _check_connect(pkt, obj)
    elif t == PUBLISH:
        _eq("qos", pkt.qos, obj.get("qos", 0))
        _eq("dup", pkt.dup, obj.get("dup", False))
        _eq("retain", pkt.retain, obj.get("retain", False))
        _eq("topic", bytes(pkt.topic), blob(obj["topic"]))
        _eq("payload", bytes(pkt.payload), blob(obj.get("payload", {"$hex": ""})))
    elif t == CONNACK:
        _eq("sessionPresent", pkt.session_present, obj.get("sessionPresent", False))
    elif t == SUBSCRIBE:
        got = []
        i = pkt.payload_off
        while i < pkt.end:
            i = read_filter(pkt, i)
            o = pkt.opts
            e = {"topic": _span(pkt, pkt.f_off, pkt.f_len), "qos": o & 3}
            if level == 5:
                e["nl"] = o & 4 != 0
                e["rap"] = o & 8 != 0
                e["rh"] = (o >> 4) & 3
            got.append(e)
        want = []
        for s in obj["subscriptions"]:
            e = {"topic": blob(s["topic"]), "qos": s["qos"]}
            if level == 5:
                e["nl"] = s.get("nl", False)
                e["rap"] = s.get("rap", False)
                e["rh"] = s.get("rh", 0)
            want.append(e)
        _eq("subscriptions", got, want)
    elif t == UNSUBSCRIBE:
        got = []
        i = pkt.payload_off
        while i < pkt.end:
            i = read_filter(pkt, i)
            got.append(_span(pkt, pkt.f_off, pkt.f_len))
        _eq("unsubscriptions", got, [blob(u) for u in obj["unsubscriptions"]])
    if t in (SUBACK, UNSUBACK) and obj.get("granted") is not None:
        _eq("granted", list(_span(pkt, pkt.payload_off, pkt.payload_len)), obj["granted"])
    rc = obj.get("returnCode", obj.get("reasonCode"))
    if rc is not None and t != CONNECT:
        _eq("return/reason code", pkt.rc, rc)
    if level == 5 or (t == CONNECT and pkt.level == 5):
        got = canon(props.parse(pkt.buf, pkt.props_off, pkt.props_len))
        _eq("properties", got, canon(props_in(obj.get("properties") or {})))


def _check_connect(pkt, obj):
    lv = obj.get("protocolVersion", 4)
    # the 0x80 "bridge" bit (bridgeMode) is kept apart from the level
    _eq("protocolVersion", pkt.level, lv & 0x7F)
    _eq("bridge bit", pkt.bridge, bool(obj.get("bridgeMode")))
    if obj.get("protocolId"):
        _eq("protocolId", "MQIsdp" if pkt.level == 3 else "MQTT", obj["protocolId"])
    _eq("clean", pkt.clean, obj.get("clean", True))
    _eq("keepalive", pkt.keepalive, obj.get("keepalive", 0))
    _eq("clientId", _span(pkt, pkt.cid_off, pkt.cid_len), blob(obj.get("clientId", "")))
    w = obj.get("will")
    _eq("will flag", pkt.will, w is not None)
    if w is not None:
        _eq("will topic", bytes(pkt.topic), blob(w["topic"]))
        _eq("will payload", bytes(pkt.payload), blob(w["payload"]))
        _eq("will qos", pkt.qos, w.get("qos", 0))
        _eq("will retain", pkt.retain, w.get("retain", False))
        if pkt.level == 5:
            got = canon(props.parse(pkt.buf, pkt.wprops_off, pkt.wprops_len))
            _eq("will properties", got, canon(props_in(w.get("properties") or {})))
    u = obj.get("username")
    _eq("username", _span(pkt, pkt.user_off, pkt.user_len), None if u is None else blob(u))
    p = obj.get("password")
    _eq("password", _span(pkt, pkt.pw_off, pkt.pw_len), None if p is None else blob(p))


def decode_hex(data, level):
    pkt = Packet(level)
    decode(pkt, data, 0, len(data))
    return pkt


# ---------------------------------------------------------------- encoding side

def _props_arg(obj, level):
    p = obj.get("properties")
    return props_in(p) if level == 5 and p else None


def _ack_tail(obj, level):
    # mqtt-packet's choice among the valid 5.0 forms: success without
    # properties is written short (remaining length 2); any other reason code
    # gets an explicit empty property list.
    if level < 5:
        return None, None
    rc = obj.get("reasonCode")
    p = _props_arg(obj, level)
    if p:
        return rc, p
    if not rc:
        return None, None
    return rc, b""


def _rc_tail(obj, level):
    # DISCONNECT and AUTH: mqtt-packet writes reason code and property
    # length whenever a reason code is given
    rc = obj.get("reasonCode") if level == 5 else None
    p = _props_arg(obj, level)
    if p:
        return rc, p
    return rc, (b"" if rc is not None else None)


def encode_obj(obj, level):
    cmd = obj.get("cmd")
    if cmd not in CMDS:
        raise Unmapped("cmd %r" % (cmd,))
    t = CMDS[cmd]
    buf = bytearray(8192)
    if t == CONNECT:
        end = _encode_connect(buf, obj)
    elif t == PUBLISH:
        end = encode_publish(buf, 0, blob(obj.get("topic")), blob(obj.get("payload", b"")),
                             obj.get("qos", 0), obj.get("messageId", 0), obj.get("retain", False),
                             obj.get("dup", False), level, _props_arg(obj, level))
    elif t in (PUBACK, PUBREC, PUBREL, PUBCOMP):
        rc, pr = _ack_tail(obj, level)
        end = encode_ack(buf, 0, t, obj.get("messageId"), rc, level, pr)
    elif t == CONNACK:
        rc = obj.get("returnCode", obj.get("reasonCode"))
        end = encode_connack(buf, 0, obj.get("sessionPresent", False), rc, level,
                             _props_arg(obj, level))
    elif t == SUBSCRIBE:
        subs = []
        for s in obj.get("subscriptions", []):
            o = s.get("qos", 0)
            if level == 5:
                o |= (4 if s.get("nl") else 0) | (8 if s.get("rap") else 0) | s.get("rh", 0) << 4
            subs.append((blob(s["topic"]), o))
        end = encode_subscribe(buf, 0, obj.get("messageId"), subs, 0, level, _props_arg(obj, level))
    elif t == SUBACK:
        end = encode_suback(buf, 0, obj.get("messageId"), bytes(obj.get("granted", [])), level,
                            _props_arg(obj, level))
    elif t == UNSUBSCRIBE:
        end = encode_unsubscribe(buf, 0, obj.get("messageId"), obj.get("unsubscriptions", []),
                                 level, _props_arg(obj, level))
    elif t == UNSUBACK:
        g = obj.get("granted")
        end = encode_unsuback(buf, 0, obj.get("messageId"), None if g is None else bytes(g),
                              level, _props_arg(obj, level))
    elif t in (PINGREQ, PINGRESP):
        end = encode_simple(buf, 0, t)
    elif t == DISCONNECT:
        rc, pr = _rc_tail(obj, level)
        end = encode_disconnect(buf, 0, rc, level, pr)
    else:
        rc, pr = _rc_tail(obj, level)
        end = encode_auth(buf, 0, rc, pr)
    return bytes(buf[:end])


def _encode_connect(buf, obj):
    lv = obj.get("protocolVersion", 4)
    if obj.get("bridgeMode"):
        raise Unmapped("bridge bit")
    if "protocolId" in obj and lv in (3, 4, 5):
        if obj["protocolId"] != ("MQIsdp" if lv == 3 else "MQTT"):
            raise Unmapped("protocolId %r at level %r" % (obj["protocolId"], lv))
    kw = {}
    w = obj.get("will")
    if w is not None:
        if not isinstance(w, dict) or "topic" not in w:
            raise Unmapped("will %r" % (w,))
        kw["will_topic"] = blob(w["topic"])
        kw["will_msg"] = blob(w.get("payload", b""))
        kw["will_qos"] = w.get("qos", 0)
        kw["will_retain"] = w.get("retain", False)
        if lv == 5 and w.get("properties"):
            kw["will_props"] = props_in(w["properties"])
    if "username" in obj:
        kw["user"] = blob(obj["username"])
    if "password" in obj:
        kw["password"] = blob(obj["password"])
    return encode_connect(buf, 0, blob(obj.get("clientId", "")), level=lv,
                          clean=obj.get("clean", True), keepalive=obj.get("keepalive", 0),
                          props=_props_arg(obj, lv), **kw)


# ---------------------------------------------------------------- running

def _has_props(obj):
    w = obj.get("will")
    return bool(obj.get("properties")) or (isinstance(w, dict) and bool(w.get("properties")))


class Tally:
    def __init__(self):
        self.checked = 0
        self.skipped = 0
        self.half = 0  # cases with one half skipped
        self.reordered = 0  # MicroPython: same packet, properties in another order
        self.not_encodable = 0


def run_case(case, level, skip_part, tally):
    kind = case["kind"]
    obj = case.get("object")
    hx = case.get("hex")
    data = unhex(hx) if isinstance(hx, str) else None
    if kind in ("parse+generate", "parse+generate-defaults", "parse"):
        pkt = decode_hex(data, level)
        check_fields(pkt, data, case.get("generated") or obj, level)
    if kind in ("parse+generate", "parse+generate-defaults", "generate"):
        if skip_part == "generate":
            tally.half += 1
        else:
            got = encode_obj(obj, level)
            if got != data:
                # MicroPython's dicts do not keep insertion order, so the
                # properties may come out in another (equally valid) order:
                # then the packet must have the same length and decode to
                # the same object. CPython must match byte for byte.
                if not (MICROPYTHON and _has_props(obj) and len(got) == len(data)):
                    raise AssertionError("encoded %s, want %s" % (tohex(got), hx))
                check_fields(decode_hex(got, level), got, obj, level)
                tally.reordered += 1
    elif kind == "parse-error":
        try:
            decode_hex(data, level)
        except MQTTError:
            pass
        else:
            raise AssertionError("decoded without error")
    elif kind == "generate-error":
        try:
            encode_obj(obj, level)
        except MQTTError:
            pass
        except (TypeError, ValueError) as e:
            if case["name"] not in NOT_ENCODABLE:
                raise AssertionError("%s instead of MQTTError: %s" % (type(e).__name__, e))
            tally.not_encodable += 1
        else:
            raise AssertionError("encoded without error")
    elif kind not in ("parse+generate", "parse+generate-defaults", "parse", "generate"):
        raise AssertionError("unknown kind " + kind)
    tally.checked += 1


def load_cases():
    if not have_shared(VECTORS):
        raise SkipTest("no ../shared/" + VECTORS)
    with open(shared_path(VECTORS)) as f:
        return json.load(f)


def test_mqtt_packet_vectors():
    cases = load_cases()
    tally = Tally()
    fails = []
    used = {}
    for i, case in enumerate(cases):
        key = "%d %s" % (i, case["name"])
        skip = SKIP.get(key)
        if skip is not None:
            used[key] = True
            if skip[0] == "all":
                tally.skipped += 1
                continue
        try:
            run_case(case, level_of(case), skip and skip[0], tally)
        except Exception as e:
            fails.append("%s [%s]: %s: %s" % (key, case["kind"], type(e).__name__, e))
    print("mqtt-packet vectors: %d checked (%d with the generate half skipped, %d not "
          "encodable by type, %d with properties reordered), %d skipped, of %d"
          % (tally.checked, tally.half, tally.not_encodable, tally.reordered,
             tally.skipped, len(cases)))
    assert not fails, "\n".join(fails)
    for key in SKIP:
        assert key in used, "SKIP names no case: " + key
    assert tally.checked + tally.skipped == len(cases)
    assert tally.checked >= MIN_CHECKED, tally.checked


def test_mqtt_packet_max_publish_header():
    # The 256 MB case (skipped above): its header alone, and our refusal to
    # write it into a buffer that cannot hold it.
    cases = load_cases()
    case = cases[76]
    assert case["name"] == "Max payload publish packet"
    total = case["hex"]["$bigBuffer"]
    hdr = bytes([case["hex"]["$firstByte"]]) + b"\xff\xff\xff\x7f"
    assert frame_len(hdr, 0, len(hdr)) == total
    e = None
    try:
        frame_len(hdr, 0, len(hdr), total - 1)
    except MQTTError as x:
        e = x
    assert e is not None and e.code == 0x95
    obj = case["object"]
    assert varint_size(obj["length"]) == 4
    try:
        encode_publish(bytearray(64), 0, obj["topic"], Big(obj["payload"]["$bigBuffer"]))
    except MQTTError as x:
        e = x
    assert e.code == 0x95 and e.reason == "buffer too small"
