# Property tests for umqtt3.codec (CPython only: hypothesis).
#
# Round trips of every packet type at levels 3, 4 and 5; decode() fed random
# bytes and mutated valid packets raises nothing but MQTTError and always
# returns; frame_len() on every prefix; the portable UTF-8 checker against
# CPython's decoder.
import signal
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from umqtt3 import codec, client_codec, compat, props
from support import span, entries
from umqtt3.codec import (
    MQTTError, Packet, decode, frame_len, encode_connect, encode_publish, encode_ack,
    encode_subscribe, encode_unsubscribe, encode_simple, encode_disconnect,
    CONNECT, CONNACK, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP, SUBSCRIBE, SUBACK,
    UNSUBSCRIBE, UNSUBACK, PINGREQ, PINGRESP, DISCONNECT, AUTH)
from umqtt3.props import encode_auth  # AUTH is MQTT 5 only
from umqtt3.codec_server import encode_connack, encode_suback, encode_unsuback

FUZZ = settings(deadline=None, max_examples=150,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
MORE = settings(FUZZ, max_examples=400)

LEVELS = st.sampled_from([3, 4, 5])
QOS = st.integers(0, 2)
PIDS = st.integers(1, 65535)
PAYLOADS = st.binary(max_size=300)

# text without surrogates (not encodable) or U+0000 [MQTT-1.5.3-2]
_CHARS = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
_NAME_CHARS = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00+#")
_LEVEL_CHARS = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00+#/")
TEXT = st.text(_CHARS, max_size=12)
# topic names: no wildcards [MQTT-3.3.2-2], at least one character [MQTT-4.7.3-1]
TOPICS = st.text(_NAME_CHARS, min_size=1, max_size=24)


@st.composite
def filters(draw):
    """Valid topic filters: '+' fills a level, '#' is the last level."""
    levels = draw(st.lists(st.one_of(st.just("+"), st.text(_LEVEL_CHARS, max_size=6)),
                           min_size=1, max_size=5))
    f = "/".join(levels)
    if draw(st.booleans()):
        f = f + "/#" if f else "#"
    return f or "+"


# ---------------------------------------------------------------- v5 properties

def _value(pid):
    t = props.TYPES[pid]
    if pid == props.MAXIMUM_QOS or t == 1:
        return st.integers(0, 1)
    if pid in (props.RECEIVE_MAXIMUM, props.TOPIC_ALIAS):
        return st.integers(1, 65535)
    if t == 2:
        return st.integers(0, 65535)
    if pid == props.MAXIMUM_PACKET_SIZE:
        return st.integers(1, 2 ** 32 - 1)
    if t == 3:
        return st.integers(0, 2 ** 32 - 1)
    if t == 4:
        return st.integers(1, 268435455)
    if t == 5:
        return TEXT
    if t == 6:
        return st.binary(max_size=16)
    return st.lists(st.tuples(TEXT, TEXT), min_size=1, max_size=3)


def property_dicts(ptype):
    """Property dicts valid for packet type ptype (0: will properties)."""
    bit = 1 << ptype
    optional = {}
    for pid in range(1, len(props.TYPES)):
        if props.TYPES[pid] and props.WHERE[pid] & bit:
            v = _value(pid)
            if pid == props.SUBSCRIPTION_ID and ptype == PUBLISH:
                v = st.lists(v, min_size=1, max_size=3)
            optional[pid] = v
    return st.fixed_dictionaries({}, optional=optional)


def canon(d):
    out = {}
    for k, v in d.items():
        if k in (props.USER_PROPERTY, props.SUBSCRIPTION_ID) and not isinstance(v, list):
            v = [v]
        out[k] = v
    return out


def got_props(pkt, off=None, n=None):
    if off is None:
        off, n = pkt.props_off, pkt.props_len
    return props.parse(pkt.buf, off, n)


# reason codes by packet type, from the 5.0 tables
RC5 = {t: list(props._RC[t]) for t in range(16) if props._RC[t]}


# ---------------------------------------------------------------- helpers

def enc(fn, *args, **kw):
    buf = bytearray(4096)
    end = fn(buf, 0, *args, **kw)
    return bytes(buf[:end])


def dec(data, level):
    pkt = Packet(level)
    assert decode(pkt, data, 0, len(data)) == pkt.type
    return pkt





@contextmanager
def time_limit(seconds):
    """Fail instead of hanging if the code under test loops forever."""
    def boom(signum, frame):
        raise TimeoutError("no return within %s s" % seconds)

    old = signal.signal(signal.SIGALRM, boom)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def decode_or_refuse(data, level, max_size=0):
    """decode() either succeeds with spans inside the packet or raises
    MQTTError; nothing else, and it returns."""
    pkt = Packet(level)
    with time_limit(2):
        try:
            t = decode(pkt, data, 0, len(data), max_size)
        except MQTTError as e:
            assert e.code in (0x81, 0x82, 0x84, 0x95), e.code
            return None
    assert t == pkt.type and 1 <= t <= 15
    assert pkt.end == len(data)
    for off, n in ((pkt.topic_off, pkt.topic_len), (pkt.payload_off, pkt.payload_len),
                   (pkt.props_off, pkt.props_len)):
        if off >= 0:
            assert 0 <= n and off + n <= len(data), (off, n, len(data))
    return pkt


# ---------------------------------------------------------------- packets

@st.composite
def connect_packets(draw):
    level = draw(LEVELS)
    clean = draw(st.booleans())
    cid = draw(st.text(_CHARS, min_size=1 if level == 3 or not clean else 0, max_size=23))
    kw = {"level": level, "clean": clean, "keepalive": draw(st.integers(0, 65535))}
    if draw(st.booleans()):
        kw["user"] = draw(TEXT)
    if draw(st.booleans()) and ("user" in kw or level == 5):
        kw["password"] = draw(st.binary(max_size=20))
    if draw(st.booleans()):
        kw["will_topic"] = draw(TOPICS)
        kw["will_msg"] = draw(PAYLOADS)
        kw["will_qos"] = draw(QOS)
        kw["will_retain"] = draw(st.booleans())
        if level == 5:
            kw["will_props"] = draw(property_dicts(0))
    if level == 5:
        kw["props"] = draw(property_dicts(CONNECT))
    return cid, kw


@given(connect_packets())
@FUZZ
def test_roundtrip_connect(case):
    cid, kw = case
    level = kw["level"]
    p = dec(enc(encode_connect, cid, **kw), 4)
    assert p.type == CONNECT and p.level == level
    assert p.clean == kw["clean"] and p.keepalive == kw["keepalive"]
    assert span(p, p.cid_off, p.cid_len) == cid.encode()
    assert span(p, p.user_off, p.user_len) == (kw["user"].encode() if "user" in kw else None)
    assert span(p, p.pw_off, p.pw_len) == kw.get("password")
    assert p.will == ("will_topic" in kw)
    if p.will:
        assert bytes(p.topic) == kw["will_topic"].encode()
        assert bytes(p.payload) == kw["will_msg"]
        assert p.qos == kw["will_qos"] and p.retain == kw["will_retain"]
        if level == 5:
            assert got_props(p, p.wprops_off, p.wprops_len) == canon(kw["will_props"])
    if level == 5:
        assert got_props(p) == canon(kw["props"])


@given(LEVELS, st.booleans(), st.data())
@FUZZ
def test_roundtrip_connack(level, sp, data):
    rc = data.draw(st.sampled_from(RC5[CONNACK]) if level == 5 else st.integers(0, 5))
    pr = data.draw(property_dicts(CONNACK)) if level == 5 else None
    p = dec(enc(encode_connack, sp, rc, level=level, props=pr), level)
    assert p.type == CONNACK and p.session_present == sp and p.rc == rc
    if level == 5:
        assert got_props(p) == canon(pr)


@given(LEVELS, TOPICS, PAYLOADS, QOS, PIDS, st.booleans(), st.booleans(), st.data())
@MORE
def test_roundtrip_publish(level, topic, payload, qos, pid, retain, dup, data):
    pr = data.draw(property_dicts(PUBLISH)) if level == 5 else None
    p = dec(enc(encode_publish, topic, payload, qos=qos, pid=pid, retain=retain, dup=dup,
                level=level, props=pr), level)
    assert p.type == PUBLISH and p.qos == qos and p.retain == retain
    assert p.dup == (dup and qos > 0)
    assert p.pid == (pid if qos else 0)
    assert bytes(p.topic) == topic.encode() and bytes(p.payload) == payload
    if level == 5:
        assert got_props(p) == canon(pr)


@given(LEVELS, st.sampled_from([PUBACK, PUBREC, PUBREL, PUBCOMP]), PIDS, st.data())
@FUZZ
def test_roundtrip_acks(level, ptype, pid, data):
    rc = pr = None
    if level == 5:
        rc = data.draw(st.none() | st.sampled_from(RC5[ptype]))
        pr = data.draw(st.none() | st.just(b"") | property_dicts(ptype))
    p = dec(enc(encode_ack, ptype, pid, rc=rc, level=level, props=pr), level)
    assert p.type == ptype and p.pid == pid and p.rc == (rc or 0)
    assert p.flags == (2 if ptype == PUBREL else 0)
    if isinstance(pr, dict):
        assert got_props(p) == canon(pr)
    else:
        assert p.props_len == 0


@st.composite
def subscribe_packets(draw):
    level = draw(LEVELS)
    subs = []
    for f in draw(st.lists(filters(), min_size=1, max_size=5)):
        o = draw(QOS)
        if level == 5:
            o |= draw(st.sampled_from([0, 4])) | draw(st.sampled_from([0, 8]))
            o |= draw(st.integers(0, 2)) << 4
        subs.append((f, o))
    pr = None
    if level == 5:
        pr = draw(property_dicts(SUBSCRIBE))
    return level, draw(PIDS), subs, pr


@given(subscribe_packets())
@FUZZ
def test_roundtrip_subscribe(case):
    level, pid, subs, pr = case
    p = dec(enc(encode_subscribe, pid, subs, level=level, props=pr), level)
    assert p.type == SUBSCRIBE and p.pid == pid
    assert entries(p) == [(f.encode(), o) for f, o in subs]
    if level == 5:
        assert got_props(p) == canon(pr)
    f, o = subs[0]
    p = dec(enc(encode_subscribe, pid, f, qos=o, level=level), level)
    assert entries(p) == [(f.encode(), o)]


@given(LEVELS, PIDS, st.lists(filters(), min_size=1, max_size=5), st.data())
@FUZZ
def test_roundtrip_unsubscribe(level, pid, fs, data):
    pr = data.draw(property_dicts(UNSUBSCRIBE)) if level == 5 else None
    p = dec(enc(encode_unsubscribe, pid, fs, level=level, props=pr), level)
    assert p.type == UNSUBSCRIBE and p.pid == pid
    assert entries(p) == [f.encode() for f in fs]
    if level == 5:
        assert got_props(p) == canon(pr)


@given(LEVELS, PIDS, st.data())
@FUZZ
def test_roundtrip_suback_unsuback(level, pid, data):
    codes = st.sampled_from(RC5[SUBACK] if level == 5 else [0, 1, 2, 0x80])
    cs = bytes(data.draw(st.lists(codes, min_size=1, max_size=8)))
    pr = data.draw(property_dicts(SUBACK)) if level == 5 else None
    p = dec(enc(encode_suback, pid, cs, level=level, props=pr), level)
    assert p.type == SUBACK and p.pid == pid
    assert span(p, p.payload_off, p.payload_len) == cs
    if level == 5:
        assert got_props(p) == canon(pr)
        us = bytes(data.draw(st.lists(st.sampled_from(RC5[UNSUBACK]), min_size=1, max_size=8)))
        pr = data.draw(property_dicts(UNSUBACK))
        p = dec(enc(encode_unsuback, pid, us, level=5, props=pr), 5)
        assert span(p, p.payload_off, p.payload_len) == us
        assert got_props(p) == canon(pr)
    else:
        p = dec(enc(encode_unsuback, pid, level=level), level)
    assert p.type == UNSUBACK and p.pid == pid


@given(LEVELS, st.data())
@FUZZ
def test_roundtrip_ping_disconnect_auth(level, data):
    assert dec(enc(encode_simple, PINGREQ), level).type == PINGREQ
    assert dec(enc(encode_simple, PINGRESP), level).type == PINGRESP
    rc = pr = None
    if level == 5:
        rc = data.draw(st.none() | st.sampled_from(RC5[DISCONNECT]))
        pr = data.draw(st.none() | property_dicts(DISCONNECT))
    p = dec(enc(encode_disconnect, rc, level=level, props=pr), level)
    assert p.type == DISCONNECT and p.rc == (rc or 0)
    if pr:
        assert got_props(p) == canon(pr)
    if level == 5:
        rc = data.draw(st.none() | st.sampled_from(RC5[AUTH]))
        pr = data.draw(st.none() | property_dicts(AUTH))
        p = dec(enc(encode_auth, rc, props=pr), 5)
        assert p.type == AUTH and p.rc == (rc or 0)
        if pr:
            assert got_props(p) == canon(pr)


# ---------------------------------------------------------------- hostile input

@st.composite
def valid_packets(draw):
    """(bytes, level) of any valid packet."""
    kind = draw(st.integers(0, 8))
    if kind == 0:
        cid, kw = draw(connect_packets())
        return enc(encode_connect, cid, **kw), kw["level"]
    level = draw(LEVELS)
    pr5 = (lambda t: draw(property_dicts(t))) if level == 5 else (lambda t: None)
    if kind == 1:
        return enc(encode_publish, draw(TOPICS), draw(PAYLOADS), qos=draw(QOS), pid=draw(PIDS),
                   retain=draw(st.booleans()), dup=draw(st.booleans()), level=level,
                   props=pr5(PUBLISH)), level
    if kind == 2:
        t = draw(st.sampled_from([PUBACK, PUBREC, PUBREL, PUBCOMP]))
        rc = draw(st.sampled_from(RC5[t])) if level == 5 else None
        return enc(encode_ack, t, draw(PIDS), rc=rc, level=level, props=pr5(t)), level
    if kind == 3:
        level, pid, subs, pr = draw(subscribe_packets())
        return enc(encode_subscribe, pid, subs, level=level, props=pr), level
    if kind == 4:
        return enc(encode_unsubscribe, draw(PIDS), draw(st.lists(filters(), min_size=1,
                   max_size=3)), level=level, props=pr5(UNSUBSCRIBE)), level
    if kind == 5:
        return enc(encode_suback, draw(PIDS), b"\x00\x01\x02", level=level,
                   props=pr5(SUBACK)), level
    if kind == 6:
        rc = draw(st.sampled_from(RC5[CONNACK])) if level == 5 else 0
        return enc(encode_connack, draw(st.booleans()), rc, level=level,
                   props=pr5(CONNACK)), level
    if kind == 7:
        return enc(encode_disconnect, 0 if level == 5 else None, level=level,
                   props=pr5(DISCONNECT)), level
    return enc(encode_simple, draw(st.sampled_from([PINGREQ, PINGRESP]))), level


@given(st.binary(max_size=200), LEVELS)
@MORE
def test_random_bytes_only_mqtterror(data, level):
    decode_or_refuse(data, level)
    decode_or_refuse(data, level, max_size=64)


@given(st.sampled_from(range(16)), st.binary(max_size=120), LEVELS)
@MORE
def test_random_bodies_only_mqtterror(ptype, body, level):
    # a well-framed packet of every type with a random body reaches the
    # type's own parser instead of the framing checks
    for flags in (0, 2, ptype & 15):
        hdr = bytearray(5)
        n = codec.put_varint(hdr, 0, len(body))
        decode_or_refuse(bytes([ptype << 4 | flags]) + bytes(hdr[:n]) + body, level)


@given(valid_packets(), st.data())
@MORE
def test_mutated_packets_only_mqtterror(pkt_level, data):
    pkt, level = pkt_level
    assert decode_or_refuse(pkt, level) is not None
    n = len(pkt)
    i = data.draw(st.integers(0, n - 1))
    b = data.draw(st.integers(0, 255))
    mutants = [
        pkt[:i] + bytes([b]) + pkt[i + 1:],  # one byte changed
        pkt[:i] + bytes([pkt[i] ^ (1 << (b & 7))]) + pkt[i + 1:],  # one bit flipped
        pkt[:i],  # truncated
        pkt[:i] + pkt[i + 1:],  # one byte dropped
        pkt[:i] + bytes([b]) + pkt[i:],  # one byte inserted
    ]
    for m in mutants:
        for lv in (level, data.draw(LEVELS)):
            decode_or_refuse(m, lv)


@given(valid_packets())
@FUZZ
def test_frame_len_on_prefixes(pkt_level):
    pkt, _ = pkt_level
    n = len(pkt)
    hdr = 2
    while pkt[hdr - 1] & 0x80:
        hdr += 1
    for k in range(n + 1):
        got = frame_len(pkt, 0, k)
        assert got == (n if k >= hdr else 0), (k, got)
    # at an offset, and with the packet's own size as the limit
    assert frame_len(b"\x00" * 3 + pkt, 3, 3 + n, n) == n
    if n > 2:
        with pytest.raises(MQTTError) as e:
            frame_len(pkt, 0, n, n - 1)
        assert e.value.code == 0x95


@given(st.binary(max_size=8))
@MORE
def test_frame_len_random(data):
    with time_limit(2):
        try:
            n = frame_len(data, 0, len(data))
        except MQTTError:
            return
    if n:
        hdr = 2
        while data[hdr - 1] & 0x80:
            hdr += 1
        assert n >= hdr and n - hdr <= codec.MAX_REMAINING


@given(st.binary(max_size=24) | st.text(_CHARS, max_size=8).map(str.encode))
@MORE
def test_utf8_checkers_agree(data):
    assert client_codec._utf8_ok(data, 0, len(data)) == compat.valid_utf8(data, 0, len(data))
