# umqtt3.codec: the byte-exact examples of the specification texts in
# ../shared/seeds, the remaining-length table, one test per malformed-input
# rule (named by its normative statement), round trips of every packet type at
# protocol levels 3, 4 and 5, and (MicroPython only) zero allocation.
#
# Portable: runs under pytest and under MicroPython (tests/mp/testrunner.py).
from support import SkipTest, raises, unhex, tohex, MICROPYTHON, locked, span, entries

from umqtt3 import codec, client_codec, compat, props, topic
from umqtt3.codec import (
    MQTTError, Packet, decode, frame_len, put_varint, varint_size,
    encode_connect, encode_publish, encode_ack, encode_subscribe,
    encode_unsubscribe, encode_simple, encode_disconnect,
    CONNECT, CONNACK, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP, SUBSCRIBE,
    SUBACK, UNSUBSCRIBE, UNSUBACK, PINGREQ, PINGRESP, DISCONNECT, AUTH)
from umqtt3.props import encode_auth  # AUTH is MQTT 5 only
from umqtt3.codec_server import encode_connack, encode_suback, encode_unsuback

MALFORMED = 0x81
PROTOCOL_ERROR = 0x82
BAD_VERSION = 0x84
TOO_LARGE = 0x95


# ---------------------------------------------------------------- helpers

def enc(fn, *args, **kw):
    """bytes of one packet written by an encoder at offset 0."""
    buf = bytearray(1024)
    end = fn(buf, 0, *args, **kw)
    return bytes(buf[:end])


def dec(data, level=4):
    pkt = Packet(level)
    assert decode(pkt, data, 0, len(data)) == pkt.type
    return pkt


def bad(data, level=4, code=None):
    """data must not decode; returns the MQTTError."""
    e = raises(MQTTError, dec, data, level)
    if code is not None:
        assert e.code == code, (tohex(data), e.code, e.reason)
    return e


def pprops(pkt):
    return props.parse(pkt.buf, pkt.props_off, pkt.props_len)





def frame(first, body):
    """A packet from its first byte and body (remaining length computed)."""
    hdr = bytearray(5)
    n = put_varint(hdr, 0, len(body))
    return bytes([first]) + bytes(hdr[:n]) + body


def s16(b):
    """A two-byte length and b."""
    return bytes([len(b) >> 8, len(b) & 0xFF]) + b


# ---------------------------------------------------------------- seeds
# Every byte-exact example of ../shared/seeds is reproduced here.

def test_seed_311_publish_qos0():
    # 3.1.1 section 3.3 example 1 (seed 001): "sensors/temp" / "22.5". The
    # text states Remaining Length 0x10 (16), but the layout it lists after
    # the length byte is 2 + 12 + 4 = 18 bytes. The spec's definition (variable
    # header plus payload [MQTT-2.2.3]) wins: we must write 0x12.
    want = unhex("30 12 00 0c") + b"sensors/temp" + b"22.5"
    assert enc(encode_publish, "sensors/temp", b"22.5") == want
    p = dec(want)
    assert p.type == PUBLISH and p.qos == 0 and not p.dup and not p.retain
    assert bytes(p.topic) == b"sensors/temp" and bytes(p.payload) == b"22.5"


def test_seed_311_publish_qos0_stated_length_is_refused():
    # The seed's literal bytes with its stated 0x10: the remaining length then
    # disagrees with the 18 bytes that follow, which must be refused.
    seed = unhex("30 10 00 0c") + b"sensors/temp" + b"22.5"
    assert frame_len(seed, 0, len(seed)) == 18 != len(seed)
    bad(seed, code=MALFORMED)


def test_seed_311_publish_qos1_retain():
    # Example 2 (seed 001): "status" / "online", packet id 1, RETAIN. The text
    # states 0x0E (14); its layout has 2 + 6 + 2 + 6 = 16 bytes -> 0x10.
    want = unhex("33 10 00 06") + b"status" + unhex("00 01") + b"online"
    assert enc(encode_publish, "status", b"online", qos=1, pid=1, retain=True) == want
    p = dec(want)
    assert p.qos == 1 and p.retain and not p.dup and p.pid == 1
    assert bytes(p.topic) == b"status" and bytes(p.payload) == b"online"


def test_seed_311_publish_qos1_stated_length_is_refused():
    seed = unhex("33 0e 00 06") + b"status" + unhex("00 01") + b"online"
    bad(seed, code=MALFORMED)


def test_seed_publish_variable_header_a_b_pid_10():
    # Seeds 000 (MQTT 3.1), 001 (3.1.1) and 004: topic "a/b", packet id 10.
    for level in (3, 4):
        data = enc(encode_publish, "a/b", b"", qos=1, pid=10, level=level)
        assert data == unhex("32 07 00 03 61 2f 62 00 0a"), (level, tohex(data))
        p = dec(data, level)
        assert bytes(p.topic) == b"a/b" and p.pid == 10 and p.payload_len == 0


def test_seed_31_connect_mqisdp():
    # Seed 003, CONNECT: protocol name "MQIsdp", version 3, connect flags
    # will retain 0, will QoS 01, will flag 1, clean 1 (0000 1110), keep
    # alive 10; a 12-byte variable header. Client id, will topic and message
    # are ours (the seed leaves them open).
    vh = s16(b"MQIsdp") + unhex("03 0e 00 0a")
    assert len(vh) == 12
    body = vh + s16(b"sensor-17") + s16(b"status/sensor-17") + s16(b"offline")
    want = frame(0x10, body)
    got = enc(encode_connect, "sensor-17", level=3, clean=True, keepalive=10,
              will_topic="status/sensor-17", will_msg=b"offline", will_qos=1)
    assert got == want, tohex(got)
    p = dec(want)
    assert p.type == CONNECT and p.level == 3
    assert p.will and p.qos == 1 and not p.retain and p.clean and p.keepalive == 10
    assert span(p, p.cid_off, p.cid_len) == b"sensor-17"
    assert bytes(p.topic) == b"status/sensor-17" and bytes(p.payload) == b"offline"
    assert p.user_off < 0 and p.pw_off < 0


def test_seed_31_subscribe_suback_unsubscribe():
    # Seed 003: SUBSCRIBE id 10 to "a/b" QoS 1 and "c/d" QoS 2; SUBACK
    # granting 0 and 2; UNSUBSCRIBE "a/b", "c/d". The fixed header carries
    # QoS 1 (0x82, 0xA2) as in every later version.
    sub = unhex("82 0e 00 0a 00 03 61 2f 62 01 00 03 63 2f 64 02")
    for level in (3, 4):
        assert enc(encode_subscribe, 10, [("a/b", 1), ("c/d", 2)], level=level) == sub
        p = dec(sub, level)
        assert p.pid == 10 and entries(p) == [(b"a/b", 1), (b"c/d", 2)]
        ack = unhex("90 04 00 0a 00 02")
        assert enc(encode_suback, 10, b"\x00\x02", level=level) == ack
        p = dec(ack, level)
        assert p.pid == 10 and span(p, p.payload_off, p.payload_len) == b"\x00\x02"
        uns = unhex("a2 0c 00 0a 00 03 61 2f 62 00 03 63 2f 64")
        assert enc(encode_unsubscribe, 10, ["a/b", "c/d"], level=level) == uns
        p = dec(uns, level)
        assert p.pid == 10 and entries(p) == [b"a/b", b"c/d"]


def test_seed_v5_publish_capture():
    # Seed 002: MQTTX's QoS 0 PUBLISH to "request" with Message Expiry
    # Interval 300 and Response Topic "response", as captured by Wireshark.
    want = unhex(
        "30 31 00 07 72 65 71 75 65 73 74 10 02 00 00 01 2c 08 00 08 72 65 73 70"
        "6f 6e 73 65 54 68 69 73 20 69 73 20 61 20 51 6f 53 20 30 20 6d 65 73 73"
        "61 67 65")
    msg = b"This is a QoS 0 message"
    got = enc(encode_publish, "request", msg, level=5,
              props={props.MESSAGE_EXPIRY: 300, props.RESPONSE_TOPIC: "response"})
    assert got == want, tohex(got)
    p = dec(want, 5)
    assert p.qos == 0 and bytes(p.topic) == b"request" and bytes(p.payload) == msg
    assert pprops(p) == {2: 300, 8: "response"}
    assert props.get(p.buf, p.props_off, p.props_len, props.MESSAGE_EXPIRY) == 300
    # The same message at QoS 1 and 2 starts "32 33" and "34 33" (seed 002).
    for qos in (1, 2):
        got = enc(encode_publish, "request", msg, qos=qos, pid=7, level=5,
                  props={props.MESSAGE_EXPIRY: 300, props.RESPONSE_TOPIC: "response"})
        assert got[:2] == bytes([0x30 | qos << 1, 0x33])


def test_seed_v5_acks():
    # Seed 002: PUBACK 0x644a reason 0x10 (no matching subscribers) and the
    # QoS 2 exchange for 0x11c2. PUBACK, PUBREC and PUBCOMP carry an explicit
    # empty property list (props=b""); PUBREL stops after the reason code.
    cases = (
        ("40 04 64 4a 10 00", PUBACK, 0x644A, 0x10, b""),
        ("50 04 11 c2 10 00", PUBREC, 0x11C2, 0x10, b""),
        ("62 03 11 c2 00", PUBREL, 0x11C2, 0, None),
        ("70 04 11 c2 00 00", PUBCOMP, 0x11C2, 0, b""),
    )
    for hx, ptype, pid, rc, pr in cases:
        want = unhex(hx)
        assert enc(encode_ack, ptype, pid, rc=rc, level=5, props=pr) == want, hx
        p = dec(want, 5)
        assert p.type == ptype and p.pid == pid and p.rc == rc and p.props_len == 0


# ---------------------------------------------------------------- remaining length

# value, its encoding: the 3.1.1 table (section 2.2.3; seed 003 has the same).
_VARINTS = (
    (0, "00"), (127, "7f"), (128, "80 01"), (16383, "ff 7f"), (16384, "80 80 01"),
    (2097151, "ff ff 7f"), (2097152, "80 80 80 01"), (268435455, "ff ff ff 7f"),
)


def test_remaining_length_table():
    for n, hx in _VARINTS:
        want = unhex(hx)
        buf = bytearray(6)
        end = put_varint(buf, 1, n)
        assert bytes(buf[1:end]) == want, (n, tohex(buf))
        assert varint_size(n) == len(want)
        # frame_len needs only the fixed header; it counts the header too
        hdr = b"\x30" + want
        assert frame_len(hdr, 0, len(hdr)) == 1 + len(want) + n
        assert frame_len(b"xx" + hdr, 2, 2 + len(hdr)) == 1 + len(want) + n
        for cut in range(len(hdr)):  # incomplete header: not known yet
            assert frame_len(hdr, 0, cut) == 0


def test_remaining_length_spec_examples():
    # 3.1 (seed 003) and 3.1.1: 64 is the single byte 0x40; 321 = 65 + 2*128
    # is 0xC1 0x02, least significant group first. (Seed 003's prose says the
    # bytes are 130 then 65, contradicting its own algorithm; 3.1.1 corrected
    # this to 193, 2.) 0x82 0x41 is therefore 2 + 65*128 = 8322, not 321.
    buf = bytearray(4)
    assert bytes(buf[:put_varint(buf, 0, 64)]) == b"\x40"
    assert bytes(buf[:put_varint(buf, 0, 321)]) == b"\xc1\x02"
    assert frame_len(b"\x30\xc1\x02", 0, 3) == 3 + 321
    assert frame_len(b"\x30\x82\x41", 0, 3) == 3 + 8322


def test_remaining_length_too_large():
    e = raises(MQTTError, varint_size, 268435456)
    assert e.code == TOO_LARGE
    # a fifth length byte is refused as soon as the fourth says "more follows"
    e = raises(MQTTError, frame_len, b"\x30\x80\x80\x80\x80\x01", 0, 6)
    assert e.code == MALFORMED
    raises(MQTTError, frame_len, b"\x30\xff\xff\xff\xff", 0, 5)
    bad(unhex("10ffffffff01"))


def test_remaining_length_not_minimal():
    # [MQTT-1.5.5-1] (5.0): the fewest bytes; 0x80 0x00 is zero spelt long
    raises(MQTTError, frame_len, b"\x30\x80\x00", 0, 3)
    raises(MQTTError, frame_len, b"\xc0\x80\x80\x00", 0, 4)


def test_frame_len_max_size_before_body():
    # A header claiming 10 MB is refused from its 5 bytes alone (0x95), so a
    # receiver never buffers the body.
    hdr = bytearray(5)
    hdr[0] = 0x30
    n = put_varint(hdr, 1, 10 * 1024 * 1024)
    assert n == 5
    assert frame_len(hdr, 0, 5) == 5 + 10 * 1024 * 1024
    e = raises(MQTTError, frame_len, hdr, 0, 5, 1 << 20)
    assert e.code == TOO_LARGE
    pkt = Packet()
    e = raises(MQTTError, decode, pkt, hdr, 0, 5, 1 << 20)
    assert e.code == TOO_LARGE
    # max_size counts the whole packet, header included
    p = enc(encode_publish, "t", b"x" * 10)
    assert frame_len(p, 0, len(p), len(p)) == len(p)
    raises(MQTTError, frame_len, p, 0, len(p), len(p) - 1)


# ---------------------------------------------------------------- malformed input

def test_publish_qos3_MQTT_3_3_1_4():
    bad(unhex("36 06 00 04") + b"test")
    bad(unhex("37 08 00 04") + b"test" + b"\x00\x01", 5)
    raises(MQTTError, encode_publish, bytearray(64), 0, "t", b"", qos=3, pid=1)


def test_publish_dup_on_qos0_MQTT_3_3_1_2():
    bad(unhex("38 06 00 04") + b"test")
    # the encoder never sets DUP on QoS 0
    assert enc(encode_publish, "t", b"", dup=True)[0] == 0x30


def _valid_per_type(level):
    # a minimal valid packet of every type but PUBLISH (5.0 adds property
    # lengths to CONNACK, SUBSCRIBE, SUBACK, UNSUBSCRIBE and UNSUBACK)
    v5 = level == 5
    return (
        (CONNECT, enc(encode_connect, "c", level=level)),
        (CONNACK, unhex("20 03 00 00 00" if v5 else "20 02 00 00")),
        (PUBACK, unhex("40 02 00 01")),
        (PUBREC, unhex("50 02 00 01")),
        (PUBREL, unhex("62 02 00 01")),
        (PUBCOMP, unhex("70 02 00 01")),
        (SUBSCRIBE, unhex("82 07 00 01 00 00 01 61 00" if v5 else "82 06 00 01 00 01 61 00")),
        (SUBACK, unhex("90 04 00 01 00 00" if v5 else "90 03 00 01 00")),
        (UNSUBSCRIBE, unhex("a2 06 00 01 00 00 01 61" if v5 else "a2 05 00 01 00 01 61")),
        (UNSUBACK, unhex("b0 04 00 01 00 00" if v5 else "b0 02 00 01")),
        (PINGREQ, unhex("c0 00")),
        (PINGRESP, unhex("d0 00")),
        (DISCONNECT, unhex("e0 00")),
    )


def test_reserved_flags_MQTT_2_2_2_1_and_2():
    # SUBSCRIBE, UNSUBSCRIBE and PUBREL carry 0b0010, every other type but
    # PUBLISH 0b0000; anything else is malformed [MQTT-2.2.2-1, MQTT-2.2.2-2].
    for level in (4, 5):
        for t, data in _valid_per_type(level):
            want = 2 if t in (SUBSCRIBE, UNSUBSCRIBE, PUBREL) else 0
            assert data[0] & 15 == want
            assert dec(data, level).type == t
            for fl in range(16):
                if fl != want:
                    bad(bytes([t << 4 | fl]) + data[1:], level, MALFORMED)
    assert dec(b"\xf0\x00", 5).type == AUTH
    for fl in range(1, 16):
        bad(bytes([0xF0 | fl, 0]), 5)


def test_flags_ignored_at_level_3():
    # MQTT 3.1 (seed 003) marks DUP/QoS/RETAIN "not used" outside PUBLISH and
    # has the sender set DUP on a resent SUBSCRIBE, so level 3 accepts them.
    assert dec(unhex("8a 06 00 01 00 01 61 00"), 3).type == SUBSCRIBE
    assert dec(unhex("6a 02 00 01"), 3).type == PUBREL
    assert dec(unhex("40 02 00 01"), 3).type == PUBACK
    assert dec(unhex("c1 00"), 3).type == PINGREQ


def test_reserved_packet_types():
    bad(b"\x00\x00")
    bad(b"\xf0\x00", 4)  # AUTH is 5.0 only
    bad(b"\xf0\x00", 3)


def test_fifth_remaining_length_byte_MQTT_2_2_3():
    bad(unhex("30 80 80 80 80 01 00"))
    bad(unhex("c0 80 80 80 80 00"))


def test_remaining_length_disagrees():
    good = enc(encode_publish, "a/b", b"xyz", qos=1, pid=3)
    dec(good)
    # claims more than there is (truncated packet)
    bad(good[:-1])
    bad(bytes([good[0], good[1] + 1]) + good[2:])
    # claims less than there is (trailing bytes)
    bad(good + b"\x00")
    bad(bytes([good[0], good[1] - 1]) + good[2:])
    bad(unhex("c0 01 00"))  # PINGREQ has no body
    bad(unhex("40 03 00 01 00"), 4)  # 3.1.1 PUBACK is exactly 2
    bad(unhex("20 03 00 00 00"), 4)
    bad(unhex("e0 01 00"), 4)


def test_truncated_fields():
    bad(unhex("30 03 00 05 61"))  # topic length past the end
    bad(unhex("30 01 00"))  # half a length
    bad(unhex("32 03 00 01 61"))  # QoS 1 without packet id
    bad(unhex("32 04 00 01 61 00"))  # half a packet id
    bad(unhex("40 01 00"))
    bad(unhex("40 00"))
    bad(unhex("90 02 00 01"))  # SUBACK without codes
    bad(unhex("82 05 00 01 00 01 61"))  # SUBSCRIBE entry without options
    bad(unhex("10 09 00 04 4d 51 54 54 04 02 00"))  # CONNECT cut in the keep alive
    bad(unhex("10 0c 00 04 4d 51 54 54 04 02 00 00 00 05"))  # client id past the end


def test_wildcards_in_publish_topic_MQTT_3_3_2_2():
    for t in (b"a/+", b"+", b"a/#", b"#", b"a+b", b"sport/tennis#"):
        bad(frame(0x30, s16(t) + b"x"))
        bad(frame(0x30, s16(t) + b"\x00"), 5)
    assert bytes(dec(frame(0x30, s16(b"a/b/c") + b"x")).topic) == b"a/b/c"


def test_empty_topic_MQTT_4_7_3_1():
    bad(frame(0x30, s16(b"") + b"x"))
    # 5.0 allows it when a Topic Alias stands in
    p = dec(frame(0x30, s16(b"") + unhex("03 23 00 01") + b"x"), 5)
    assert p.topic_len == 0 and pprops(p) == {props.TOPIC_ALIAS: 1}


# ill-formed UTF-8 [MQTT-1.5.3-1] and U+0000 [MQTT-1.5.3-2]
_BAD_UTF8 = (
    b"\xc0\xaf",  # overlong "/"
    b"\xc1\xbf",  # overlong
    b"\xe0\x80\xaf",  # overlong, three bytes
    b"\xf0\x80\x80\xaf",  # overlong, four bytes
    b"\xed\xa0\x80",  # U+D800, a surrogate
    b"\xed\xbf\xbf",  # U+DFFF
    b"\xe2\x82",  # truncated euro sign
    b"a\xe2",  # truncated at the end
    b"\xf0\x9f\x98",  # truncated four-byte sequence
    b"\xff",
    b"\xfe",
    b"\x80",  # lone continuation byte
    b"\xc2\x41",  # lead byte without its continuation
    b"\xe2\x28\xa1",
    b"\xf4\x90\x80\x80",  # past U+10FFFF
    b"\xf5\x80\x80\x80",
    b"a\x00b",  # U+0000
    b"\x00",
)
_GOOD_UTF8 = (
    b"", b"a/b", b"\x7f", b"\xc2\x80", b"\xc3\xa9", b"\xe2\x82\xac",
    b"\xed\x9f\xbf",  # U+D7FF, just below the surrogates
    b"\xee\x80\x80",  # U+E000, just above
    b"\xef\xbf\xbf",  # U+FFFF (a noncharacter, but well-formed)
    b"\xf0\x90\x80\x80",  # U+10000
    b"\xf0\x9d\x84\x9e",  # U+1D11E
    b"\xf4\x8f\xbf\xbf",  # U+10FFFF
)


def _checkers():
    # the portable checker, and CPython's fast one (compat.valid_utf8) if any
    out = [client_codec._utf8_ok]
    if compat.valid_utf8 is not None:
        out.append(compat.valid_utf8)
    return out


def test_utf8_checker_direct_MQTT_1_5_3():
    for check in _checkers():
        for b in _BAD_UTF8:
            assert not check(b, 0, len(b)), b
            # and in the middle of a buffer, at an offset
            buf = b"ab" + b + b"cd"
            assert not check(buf, 2, len(b)), b
        for b in _GOOD_UTF8:
            assert check(b, 0, len(b)), b
            buf = b"\xff" + b + b"\xff"
            assert check(buf, 1, len(b)), b
    # a span ends where it says, even inside a sequence
    assert not client_codec._utf8_ok(b"\xe2\x82\xac", 0, 2)


def test_utf8_through_decode_MQTT_1_5_3_1_and_2():
    # str_end() asks compat.valid_utf8 when there is one (CPython), else
    # its own checker: both ways, by setting the name it reads
    saved = client_codec.valid_utf8
    try:
        for check in _checkers():
            client_codec.valid_utf8 = None if check is client_codec._utf8_ok else check
            for b in _BAD_UTF8:
                t = b"t" + b
                bad(frame(0x30, s16(t)))  # PUBLISH topic
                bad(frame(0x10, s16(b"MQTT") + b"\x04\x02\x00\x00" + s16(t)))  # client id
                bad(frame(0x82, b"\x00\x01" + s16(t) + b"\x00"))  # topic filter
            for b in _GOOD_UTF8:
                t = b"t" + b
                assert bytes(dec(frame(0x30, s16(t))).topic) == t
                p = dec(frame(0x10, s16(b"MQTT") + b"\x04\x02\x00\x00" + s16(t)))
                assert span(p, p.cid_off, p.cid_len) == t
    finally:
        client_codec.valid_utf8 = saved


def test_packet_id_zero_MQTT_2_3_1_1():
    bad(unhex("32 05 00 01 61 00 00"), code=PROTOCOL_ERROR)
    for first in (0x40, 0x50, 0x62, 0x70, 0xB0):
        bad(bytes([first]) + b"\x02\x00\x00", code=PROTOCOL_ERROR)
    bad(unhex("82 06 00 00 00 01 61 00"))
    bad(unhex("a2 05 00 00 00 01 61"))
    bad(unhex("90 03 00 00 00"))
    buf = bytearray(64)
    for fn, args in ((encode_publish, ("t", b"", 1, 0)), (encode_ack, (PUBACK, 0)),
                     (encode_subscribe, (0, "t")), (encode_unsubscribe, (0, "t")),
                     (encode_suback, (0, b"\x00")), (encode_publish, ("t", b"", 2, 65536))):
        e = raises(MQTTError, fn, buf, 0, *args)
        assert e.code == PROTOCOL_ERROR


def test_subscribe_without_filters_MQTT_3_8_3_3():
    bad(unhex("82 02 00 01"), code=PROTOCOL_ERROR)
    bad(unhex("82 03 00 01 00"), 5, PROTOCOL_ERROR)
    raises(MQTTError, encode_subscribe, bytearray(64), 0, 1, [])


def test_unsubscribe_without_filters_MQTT_3_10_3_2():
    bad(unhex("a2 02 00 01"), code=PROTOCOL_ERROR)
    bad(unhex("a2 03 00 01 00"), 5, PROTOCOL_ERROR)
    raises(MQTTError, encode_unsubscribe, bytearray(64), 0, 1, [])


def test_invalid_topic_filters_MQTT_4_7_1():
    for f in (b"", b"a/#/b", b"a#", b"a+", b"+a", b"a/+b", b"#/"):
        bad(frame(0x82, b"\x00\x01" + s16(f) + b"\x00"))
        bad(frame(0xA2, b"\x00\x01" + s16(f)))
    for f in (b"#", b"+", b"a/+/c", b"a/#", b"/", b"+/+", b"$SYS/#"):
        assert entries(dec(frame(0x82, b"\x00\x01" + s16(f) + b"\x01"))) == [(f, 1)]


def test_subscribe_options_reserved_MQTT_3_8_3_4():
    # 3.1.1: the six upper bits are reserved and QoS 3 is invalid
    # [MQTT-3.8.3-4]; 5.0: bits 6-7 reserved and Retain Handling 3 invalid
    # (5.0 section 3.8.3.1, [MQTT-3.8.3-5])
    def sub(opts):
        return frame(0x82, b"\x00\x01" + s16(b"a") + bytes([opts]))

    def sub5(opts):
        return frame(0x82, b"\x00\x01\x00" + s16(b"a") + bytes([opts]))

    for o in (3, 4, 8, 0x10, 0x40, 0x80, 0xFC):
        bad(sub(o), 4)
    for o in (3, 0x30, 0x40, 0x80, 0xC0):
        bad(sub5(o), 5)
    for o in (0, 1, 2):
        assert entries(dec(sub(o)))[0][1] == o
    for o in (0x04, 0x08, 0x10, 0x20, 0x2E):
        assert entries(dec(sub5(o), 5))[0][1] == o


def _connect(flags, level=4, rest=b""):
    name = b"MQIsdp" if level == 3 else b"MQTT"
    body = s16(name) + bytes([level, flags]) + b"\x00\x3c"
    if level == 5:
        body += b"\x00"
    return frame(0x10, body + s16(b"cid") + rest)


def test_connect_reserved_flag_MQTT_3_1_2_3():
    dec(_connect(0x02))
    bad(_connect(0x03))
    bad(_connect(0x01, 5), 5)


def test_will_qos_retain_without_will_MQTT_3_1_2_11_and_13():
    bad(_connect(0x02 | 0x08))  # will QoS 1
    bad(_connect(0x02 | 0x10))  # will QoS 2
    bad(_connect(0x02 | 0x20))  # will retain
    bad(_connect(0x20, 5), 5)


def test_will_qos3_MQTT_3_1_2_14():
    will = s16(b"w") + s16(b"m")
    p = dec(_connect(0x02 | 0x04 | 0x10, 4, will))
    assert p.will and p.qos == 2
    bad(_connect(0x02 | 0x04 | 0x18, 4, will))
    raises(MQTTError, encode_connect, bytearray(64), 0, "c", will_topic="w", will_qos=3)


def test_will_topic_rules():
    bad(_connect(0x06, 4, s16(b"") + s16(b"m")))  # empty [MQTT-4.7.3-1]
    bad(_connect(0x06, 4, s16(b"a/#") + s16(b"m")))  # wildcard [MQTT-4.7.1-1]
    # and the client's encoder refuses to write one (a server closes on it,
    # so a node with such a will would never connect) [MQTT-3.1.3-10]
    for level in (3, 4, 5):
        for t in ("", "site/+/status", b"a/#", "a\x00b"):
            e = raises(MQTTError, encode_connect, bytearray(64), 0, "c", level=level,
                       will_topic=t, will_msg=b"offline")
            assert e.code == 0x82, (level, t, e.code)
        p = dec(enc(encode_connect, "c", level=level, will_topic="site/n1/status",
                    will_msg=b"offline"), level)
        assert p.will and span(p, p.topic_off, p.topic_len) == b"site/n1/status"


def test_connect_id_and_user_name_are_checked_utf8_MQTT_1_5_4_1_MQTT_1_5_4_2():
    # the client's encoder refuses what a server closes on (3.1.1:
    # MQTT-1.5.3-1, MQTT-1.5.3-2): a client id or a user name with U+0000
    # or ill-formed UTF-8 (a surrogate, a stray byte); the password is binary
    for level in (3, 4, 5):
        for cid, user in (("a\x00b", None), (b"a\xed\xa0\x80", None), ("c", "u\x00"),
                          ("c", b"\xff")):
            raises(MQTTError, encode_connect, bytearray(64), 0, cid, level=level, user=user)
        p = dec(enc(encode_connect, "n\u00e9", level=level, user="\u00fc", password=b"\xff\x00"),
                level)
        assert span(p, p.cid_off, p.cid_len) == "n\u00e9".encode()
        assert span(p, p.pw_off, p.pw_len) == b"\xff\x00"


def test_password_without_user_MQTT_3_1_2_22():
    pw = s16(b"secret")
    bad(_connect(0x42, 4, pw))
    bad(_connect(0x42, 3, pw), 3)
    p = dec(_connect(0x42, 5, pw))  # 5.0 allows a password alone
    assert p.user_off < 0 and span(p, p.pw_off, p.pw_len) == b"secret"
    for level in (3, 4):
        raises(MQTTError, encode_connect, bytearray(64), 0, "c", level=level, password=b"x")
    p = dec(enc(encode_connect, "c", level=5, password=b"x"), 5)
    assert span(p, p.pw_off, p.pw_len) == b"x"


def test_user_and_password_MQTT_3_1_2_18_to_21():
    bad(_connect(0x82))  # user name flag without the field
    bad(_connect(0xC2, 4, s16(b"u")))  # password flag without the field
    bad(_connect(0x02, 4, s16(b"u")))  # bytes after the payload
    p = dec(_connect(0xC2, 4, s16(b"u") + s16(b"\xff\x00")))  # password is binary
    assert span(p, p.user_off, p.user_len) == b"u"
    assert span(p, p.pw_off, p.pw_len) == b"\xff\x00"
    bad(_connect(0x82, 4, s16(b"\xff")))  # but the user name is UTF-8


def test_unknown_protocol_level_0x84():
    for name, level in ((b"MQTT", 3), (b"MQTT", 6), (b"MQTT", 0), (b"MQIsdp", 4),
                        (b"MQIsdp", 5), (b"MQTT", 0x7F)):
        data = frame(0x10, s16(name) + bytes([level, 2]) + b"\x00\x00" + s16(b"c"))
        bad(data, code=BAD_VERSION)
    # an unknown protocol name is a protocol error
    bad(frame(0x10, s16(b"MQTX") + b"\x04\x02\x00\x00" + s16(b"c")), code=PROTOCOL_ERROR)
    # the encoder knows levels 3, 4 and 5 only
    for level in (0, 2, 6):
        e = raises(MQTTError, encode_connect, bytearray(64), 0, "c", level=level)
        assert e.code == BAD_VERSION


def test_bridge_bit_kept_apart_from_the_level_MQTT_3_1_2_2():
    # mosquitto's bridges set 0x80 on the level (try_private): the level is
    # the rest, the bit pkt.bridge; at level 5 it is a protocol error, as
    # mosquitto 2.0.11 treats a well-formed 0x85 CONNECT (closed, no CONNACK)
    for name, level in ((b"MQTT", 4), (b"MQIsdp", 3)):
        for bit in (0, 0x80):
            p = dec(frame(0x10, s16(name) + bytes([level | bit, 2]) + b"\x00\x3c" + s16(b"c")))
            assert p.level == level and p.bridge == (bit != 0)
    bad(frame(0x10, s16(b"MQTT") + b"\x85\x02\x00\x3c\x00" + s16(b"c")), code=PROTOCOL_ERROR)
    p = dec(frame(0x10, s16(b"MQTT") + b"\x05\x02\x00\x3c\x00" + s16(b"c")))
    assert p.level == 5 and not p.bridge


def test_connect_client_id_rules_MQTT_3_1_3_7():
    # 3.1.1: an empty client id needs CleanSession 1 [MQTT-3.1.3-7]; 3.1:
    # 1..23 characters; 5.0: the server may assign one, any Clean Start
    buf = bytearray(64)
    raises(MQTTError, encode_connect, buf, 0, "", level=4, clean=False)
    raises(MQTTError, encode_connect, buf, 0, "", level=3)
    assert dec(enc(encode_connect, "", level=4)).cid_len == 0
    assert dec(enc(encode_connect, "", level=5, clean=False), 5).cid_len == 0


def test_connack_rules():
    bad(unhex("20 02 02 00"))  # reserved acknowledge flags (5.0: MQTT-3.2.2-1)
    bad(unhex("20 02 80 00"))
    bad(unhex("20 01 00"))
    bad(unhex("20 02 00 00"), 5)  # 5.0 always has the property length
    p = dec(unhex("20 02 01 05"))
    assert p.session_present and p.rc == 5


def test_v5_unknown_property():
    bad(frame(0x30, s16(b"t") + b"\x02\x7e\x00"), 5)
    bad(frame(0x30, s16(b"t") + b"\x01\x00"), 5)  # 0 is no property
    bad(frame(0x30, s16(b"t") + b"\x02\x04\x00"), 5)  # a gap in the table
    bad(frame(0x30, s16(b"t") + b"\x03\x81\x01\x00"), 5)  # two-byte identifier


def test_v5_duplicate_property():
    one = b"\x02\x00\x00\x00\x3c"  # Message Expiry 60
    dec(frame(0x30, s16(b"t") + bytes([len(one)]) + one), 5)
    e = bad(frame(0x30, s16(b"t") + bytes([2 * len(one)]) + one + one), 5)
    assert e.code == PROTOCOL_ERROR
    # Subscription Identifier may repeat in PUBLISH, not in SUBSCRIBE
    two = b"\x0b\x01\x0b\x02"
    p = dec(frame(0x30, s16(b"t") + b"\x04" + two), 5)
    assert pprops(p) == {props.SUBSCRIPTION_ID: [1, 2]}
    bad(frame(0x82, b"\x00\x01\x04" + two + s16(b"a") + b"\x00"), 5)


def test_v5_property_not_allowed_in_packet():
    # Topic Alias belongs to PUBLISH; Session Expiry to CONNECT/CONNACK/DISCONNECT.
    # A property the packet does not define makes it malformed (2.2.2.2 of 5.0)
    ta = b"\x03\x23\x00\x01"
    dec(frame(0x30, s16(b"t") + ta), 5)
    e = bad(frame(0x40, b"\x00\x01\x00" + ta), 5)
    assert e.code == MALFORMED
    e = bad(frame(0x30, s16(b"t") + b"\x05\x11\x00\x00\x00\x01"), 5)
    assert e.code == MALFORMED
    bad(frame(0xE0, b"\x00" + ta), 5)
    # Will Delay only among the will properties; Topic Alias never there
    will = b"\x05\x18\x00\x00\x00\x05" + s16(b"w") + s16(b"m")
    p = dec(_connect(0x06, 5, will), 5)
    assert props.parse(p.buf, p.wprops_off, p.wprops_len) == {props.WILL_DELAY: 5}
    bad(_connect(0x06, 5, ta + s16(b"w") + s16(b"m")), 5)
    bad(frame(0x10, s16(b"MQTT") + b"\x05\x02\x00\x00\x05\x18\x00\x00\x00\x05" + s16(b"c")), 5)


def test_v5_user_property_may_repeat():
    up = b"\x26" + s16(b"k") + s16(b"v1") + b"\x26" + s16(b"k") + s16(b"v2")
    p = dec(frame(0x30, s16(b"t") + bytes([len(up)]) + up + b"pl"), 5)
    assert pprops(p) == {props.USER_PROPERTY: [("k", "v1"), ("k", "v2")]}
    assert bytes(p.payload) == b"pl"
    p = dec(frame(0x40, b"\x00\x01\x00" + bytes([len(up)]) + up), 5)
    assert p.pid == 1 and p.rc == 0


def test_v5_property_values():
    def pub(pr):
        return frame(0x30, s16(b"t") + bytes([len(pr)]) + pr)

    bad(pub(b"\x01\x02"), 5)  # Payload Format Indicator is 0 or 1
    bad(pub(b"\x23\x00\x00"), 5)  # Topic Alias 0
    bad(pub(b"\x0b\x00"), 5)  # Subscription Identifier 0
    bad(pub(b"\x0b\x80\x00"), 5)  # ... spelt long [MQTT-1.5.5-1]
    bad(pub(b"\x0b\xff\xff\xff\xff\x01"), 5)  # five-byte varint
    bad(pub(b"\x02\x00\x00"), 5)  # cut value
    bad(pub(b"\x08\x00\x03a"), 5)  # string past the property list
    bad(pub(b"\x08\x00\x01\xff"), 5)  # ill-formed UTF-8 in a property
    bad(frame(0x20, b"\x00\x00\x02\x24\x02"), 5)  # Maximum QoS is 0 or 1
    bad(frame(0x20, b"\x00\x00\x03\x21\x00\x00"), 5)  # Receive Maximum 0
    bad(frame(0x20, b"\x00\x00\x05\x27\x00\x00\x00\x00"), 5)  # Maximum Packet Size 0
    # property length longer than the packet, and spelt long
    bad(frame(0x30, s16(b"t") + b"\x05\x01\x00"), 5)
    bad(frame(0x30, s16(b"t") + b"\x80\x00"), 5)


def test_v5_bytes_after_properties():
    # the property list of an ack, CONNACK, DISCONNECT and AUTH ends the packet
    bad(unhex("40 05 00 01 00 00 ff"), 5)
    bad(unhex("20 04 00 00 00 ff"), 5)
    bad(unhex("e0 03 00 00 ff"), 5)
    bad(unhex("f0 03 00 00 ff"), 5)
    dec(unhex("40 04 00 01 00 00"), 5)
    dec(unhex("20 03 00 00 00"), 5)


def test_v5_reason_codes_MQTT_3_4_2_1():
    # a packet may carry only its own reason codes (5.0 section 2.4)
    dec(unhex("40 03 00 01 10"), 5)
    bad(unhex("40 03 00 01 11"), 5, PROTOCOL_ERROR)  # not a PUBACK code
    dec(unhex("62 03 00 01 92"), 5)
    bad(unhex("62 03 00 01 10"), 5)  # PUBREL: 0x00 or 0x92 only
    bad(unhex("70 03 00 01 10"), 5)
    dec(unhex("90 04 00 01 00 a2"), 5)
    bad(unhex("90 04 00 01 00 79"), 5)
    bad(unhex("90 04 00 01 00 11"), 5)
    dec(unhex("b0 04 00 01 00 11"), 5)
    bad(unhex("b0 04 00 01 00 84"), 5)
    bad(unhex("b0 03 00 01 00"), 5)  # one code per filter, at least one
    dec(unhex("e0 01 04"), 5)
    bad(unhex("e0 01 05"), 5)
    dec(unhex("f0 01 18"), 5)
    bad(unhex("f0 01 17"), 5)
    dec(unhex("20 03 00 8c 00"), 5)
    bad(unhex("20 03 00 01 00"), 5)  # 3.1.1's return code 1 is not a 5.0 code
    # 3.1.1 SUBACK: 0, 1, 2 or 0x80 [MQTT-3.9.3-2]
    dec(unhex("90 06 00 01 00 01 02 80"))
    bad(unhex("90 03 00 01 03"))
    bad(unhex("90 03 00 01 81"))


def test_props_encode_refuses_bad_values():
    buf = bytearray(64)
    for pr in ({props.MESSAGE_EXPIRY: -1}, {props.MESSAGE_EXPIRY: 1 << 32},
               {props.TOPIC_ALIAS: 65536}, {props.TOPIC_ALIAS: -100},
               {props.SUBSCRIPTION_ID: 268435456}, {props.SUBSCRIPTION_ID: [1, -120]},
               {props.PAYLOAD_FORMAT: 256}, {0x7E: 1}, {0: 1},
               {props.CONTENT_TYPE: "x" * 65536}):
        raises(MQTTError, encode_publish, buf, 0, "t", b"", level=5, props=pr)
    p = dec(enc(encode_publish, "t", b"", level=5,
                props={props.MESSAGE_EXPIRY: 4294967295, props.SUBSCRIPTION_ID: 268435455}), 5)
    assert pprops(p) == {props.MESSAGE_EXPIRY: 4294967295, props.SUBSCRIPTION_ID: [268435455]}


def test_encode_buffer_too_small_never_grows():
    # encoders refuse (0x95) instead of growing the caller's bytearray
    calls = (
        (encode_publish, ("sensors/temp", b"22.5")),
        (encode_publish, ("t", b"x" * 40, 1, 5)),
        (encode_connect, ("client",)),
        (encode_subscribe, (1, [("a/b", 1), ("c/#", 2)])),
        (encode_unsubscribe, (1, ["a/b", "c/#"])),
        (encode_ack, (PUBACK, 1)),
        (encode_simple, (PINGREQ,)),
        (encode_disconnect, ()),
        (encode_connack, (False, 0)),
        (encode_suback, (1, b"\x00\x01")),
    )
    for fn, args in calls:
        need = len(enc(fn, *args))
        for size, off in ((need - 1, 0), (need + 9, 10), (0, 0), (need, 1)):
            buf = bytearray(size)
            e = raises(MQTTError, fn, buf, off, *args)
            assert e.code == TOO_LARGE
            assert len(buf) == size and buf == bytearray(size), (fn, size)
        buf = bytearray(need + 3)
        assert fn(buf, 3, *args) == need + 3
    buf = bytearray(10)
    raises(MQTTError, encode_publish, buf, 0, "t", b"", level=5,
           props={props.USER_PROPERTY: [("k", "v" * 20)]})
    assert len(buf) == 10


def test_encode_string_too_long():
    buf = bytearray(70000)
    e = raises(MQTTError, encode_publish, buf, 0, "t" * 65536, b"")
    assert e.code == PROTOCOL_ERROR
    assert len(buf) == 70000
    assert dec(enc_big(encode_publish, "t" * 65535, b"")).topic_len == 65535


def enc_big(fn, *args, **kw):
    buf = bytearray(70000)
    return bytes(buf[:fn(buf, 0, *args, **kw)])


# ---------------------------------------------------------------- round trips

_P5 = {props.SESSION_EXPIRY: 3600, props.RECEIVE_MAXIMUM: 20,
       props.MAXIMUM_PACKET_SIZE: 65536, props.USER_PROPERTY: [("a", "1"), ("a", "2")],
       props.AUTH_METHOD: "none", props.AUTH_DATA: b"\x00\x01"}
_W5 = {props.WILL_DELAY: 30, props.PAYLOAD_FORMAT: 1, props.CONTENT_TYPE: "text/plain",
       props.RESPONSE_TOPIC: "r/t", props.CORRELATION_DATA: b"\xff"}


def _same_props(got, want):
    # props.parse lists User Property and Subscription Identifier
    want = dict(want)
    for k in (props.USER_PROPERTY, props.SUBSCRIPTION_ID):
        if k in want and not isinstance(want[k], list):
            want[k] = [want[k]]
    return got == want


def test_roundtrip_connect():
    for level in (3, 4, 5):
        kw = {}
        if level == 5:
            kw = {"props": _P5, "will_props": _W5}
        data = enc(encode_connect, "client-\xe9", level=level, clean=False, keepalive=65535,
                   user="user", password=b"\x00pw\xff", will_topic="will/topic",
                   will_msg=b"\x00bye", will_qos=2, will_retain=True, **kw)
        p = dec(data, 4)  # the server learns the level from CONNECT
        assert p.type == CONNECT and p.level == level
        assert not p.clean and p.keepalive == 65535
        assert p.will and p.qos == 2 and p.retain
        assert span(p, p.cid_off, p.cid_len) == "client-\xe9".encode()
        assert bytes(p.topic) == b"will/topic" and bytes(p.payload) == b"\x00bye"
        assert span(p, p.user_off, p.user_len) == b"user"
        assert span(p, p.pw_off, p.pw_len) == b"\x00pw\xff"
        if level == 5:
            assert _same_props(pprops(p), _P5)
            assert _same_props(props.parse(p.buf, p.wprops_off, p.wprops_len), _W5)
        # and the smallest CONNECT
        p = dec(enc(encode_connect, "c", level=level), 4)
        assert p.level == level and p.clean and not p.will and p.keepalive == 0
        assert p.user_off < 0 and p.pw_off < 0 and p.topic is None
        if level == 5:
            assert p.props_len == 0


def _frame(first, body):
    # a fixed header by hand: the first byte, the remaining length 7 bits a byte
    n = len(body)
    h = bytearray([first])
    while True:
        h.append((n & 0x7F) | (0x80 if n > 127 else 0))
        n >>= 7
        if not n:
            return bytes(h) + body


def _plist(p):
    return _frame(0, p)[1:]  # a property list: its length as a variable byte integer


def test_v5_properties_put_in_after_encoding():
    # The encoders write the 3.1.1 form and props.put_in() puts MQTT 5's
    # properties in, moving what follows and growing the remaining length,
    # whose bytes grow past 127 and 16383 [MQTT-1.5.5-1] (5.0 sections
    # 3.1.2.11, 3.1.3.2, 3.3.2.3, 3.8.2.1, 3.10.2.1): byte-exact against
    # packets built by hand, in a buffer of exactly their size, at an offset
    for n in [0] + list(range(88, 136, 3)) + list(range(16340, 16390, 7)):
        pr = b"\x26" + s16(b"k") + s16(b"v" * n)  # a User Property
        wpr = b"\x18\x00\x00\x00\x1e" + pr  # Will Delay Interval 30, the same
        cases = (
            (_frame(0x32, s16(b"t") + b"\x00\x07" + _plist(pr) + b"pl"),
             encode_publish, ("t", b"pl", 1, 7), {}),
            (_frame(0x30, s16(b"a/b") + _plist(pr) + b"x" * 20),
             encode_publish, ("a/b", b"x" * 20), {}),
            (_frame(0x10, s16(b"MQTT") + b"\x05\x86\x00\x3c" + _plist(pr) + s16(b"c")
                    + _plist(wpr) + s16(b"w") + s16(b"m") + s16(b"u")),
             encode_connect, ("c",), {"keepalive": 60, "will_topic": "w", "will_msg": b"m",
                                      "user": "u", "will_props": wpr}),
            (_frame(0x10, s16(b"MQTT") + b"\x05\x02\x00\x00" + _plist(pr) + s16(b"c")),
             encode_connect, ("c",), {}),
            (_frame(0x82, b"\x00\x07" + _plist(pr) + s16(b"a/#") + b"\x01"),
             encode_subscribe, (7, "a/#", 1), {}),
            (_frame(0xA2, b"\x00\x07" + _plist(pr) + s16(b"a/#")),
             encode_unsubscribe, (7, "a/#"), {}),
        )
        for want, fn, args, kw in cases:
            buf = bytearray(len(want) + 3)
            buf[:3] = b"abc"
            assert fn(buf, 3, *args, level=5, props=pr, **kw) == len(buf), (fn, n)
            assert buf == b"abc" + want, (fn, n, tohex(buf[:12]))
            # a byte less: refused as too large, nothing past the end
            buf = bytearray(len(want) - 1)
            e = raises(MQTTError, fn, buf, 0, *args, level=5, props=pr, **kw)
            assert e.code == TOO_LARGE and len(buf) == len(want) - 1, (fn, n)
    # no properties: the empty list, one byte
    assert enc(encode_publish, "t", b"", level=5) == b"\x30\x04\x00\x01t\x00"
    assert enc(encode_subscribe, 1, "t", level=5) == b"\x82\x07\x00\x01\x00\x00\x01t\x00"


def test_roundtrip_connack():
    for level in (3, 4, 5):
        for sp, rc in ((False, 0), (True, 0), (False, 5 if level < 5 else 0x87)):
            p = dec(enc(encode_connack, sp, rc, level=level), level)
            assert p.type == CONNACK and p.session_present == sp and p.rc == rc
    pr = {props.ASSIGNED_CLIENT_ID: "auto-1", props.MAXIMUM_QOS: 1, props.RETAIN_AVAILABLE: 0,
          props.TOPIC_ALIAS_MAXIMUM: 10, props.SERVER_KEEPALIVE: 30,
          props.WILDCARD_SUB_AVAILABLE: 1, props.REASON_STRING: "welcome"}
    p = dec(enc(encode_connack, True, 0, level=5, props=pr), 5)
    assert p.session_present and _same_props(pprops(p), pr)


def test_roundtrip_publish():
    payload = bytes(range(256)) * 3
    for level in (3, 4, 5):
        for qos in (0, 1, 2):
            for dup in (False, True):
                for retain in (False, True):
                    pid = 65535 if qos == 2 else 1
                    pr = {props.TOPIC_ALIAS: 7, props.SUBSCRIPTION_ID: [1, 268435455],
                          props.USER_PROPERTY: ("k", "v")} if level == 5 else None
                    data = enc(encode_publish, "a/b/\xfc", payload, qos=qos, pid=pid,
                               retain=retain, dup=dup, level=level, props=pr)
                    p = dec(data, level)
                    assert p.type == PUBLISH and p.qos == qos and p.retain == retain
                    assert p.dup == (dup and qos > 0)
                    assert p.pid == (pid if qos else 0)
                    assert bytes(p.topic) == "a/b/\xfc".encode()
                    assert bytes(p.payload) == payload
                    if level == 5:
                        assert _same_props(pprops(p), pr)
    # an empty payload, and pre-encoded property bytes
    pb = props.encode({props.CONTENT_TYPE: "x"})
    p = dec(enc(encode_publish, "t", b"", qos=1, pid=9, level=5, props=pb), 5)
    assert p.payload_len == 0 and span(p, p.props_off, p.props_len) == pb


def test_roundtrip_acks():
    for level in (3, 4, 5):
        for ptype in (PUBACK, PUBREC, PUBREL, PUBCOMP):
            data = enc(encode_ack, ptype, 0x1234, level=level)
            assert len(data) == 4
            p = dec(data, level)
            assert p.type == ptype and p.pid == 0x1234 and p.rc == 0
            assert p.flags == (2 if ptype == PUBREL else 0)
    for ptype, rc in ((PUBACK, 0x10), (PUBREC, 0x97), (PUBREL, 0x92), (PUBCOMP, 0x92)):
        for pr, size in ((None, 5), (b"", 6), ({props.REASON_STRING: "why"}, 12),
                         ({props.USER_PROPERTY: [("a", "b")]}, 13)):
            data = enc(encode_ack, ptype, 1, rc=rc, level=5, props=pr)
            assert len(data) == size, (ptype, pr, tohex(data))
            p = dec(data, 5)
            assert p.pid == 1 and p.rc == rc
            if isinstance(pr, dict):
                assert _same_props(pprops(p), pr)
        # reason code 0 with properties is written out
        p = dec(enc(encode_ack, ptype, 2, level=5, props={props.REASON_STRING: "x"}), 5)
        assert p.rc == 0 and pprops(p) == {props.REASON_STRING: "x"}


def test_roundtrip_subscribe():
    subs = [("a/+", 1), ("b/#", 2), ("c", 0), ("+/+/x", 1)]
    for level in (3, 4, 5):
        pr = {props.SUBSCRIPTION_ID: 5, props.USER_PROPERTY: [("u", "v")]} if level == 5 else None
        data = enc(encode_subscribe, 300, subs, level=level, props=pr)
        assert data[0] == 0x82
        p = dec(data, level)
        assert p.type == SUBSCRIBE and p.pid == 300
        assert entries(p) == [(f.encode(), o) for f, o in subs]
        if level == 5:
            assert _same_props(pprops(p), pr)
        p = dec(enc(encode_subscribe, 1, "one/#", qos=2, level=level), level)
        assert entries(p) == [(b"one/#", 2)]
    # 5.0 subscription options: QoS 1, No Local, Retain As Published, Retain Handling 2
    p = dec(enc(encode_subscribe, 1, [("x", 0x2D)], level=5), 5)
    assert entries(p) == [(b"x", 0x2D)]


def test_roundtrip_suback():
    for level in (3, 4, 5):
        codes = b"\x00\x01\x02\x80"
        pr = {props.REASON_STRING: "ok"} if level == 5 else None
        p = dec(enc(encode_suback, 7, codes, level=level, props=pr), level)
        assert p.type == SUBACK and p.pid == 7
        assert span(p, p.payload_off, p.payload_len) == codes
        if level == 5:
            assert pprops(p) == pr
    p = dec(enc(encode_suback, 7, [0x97, 0xA2], level=5), 5)
    assert span(p, p.payload_off, p.payload_len) == b"\x97\xa2"


def test_roundtrip_unsubscribe():
    for level in (3, 4, 5):
        pr = {props.USER_PROPERTY: [("u", "v")]} if level == 5 else None
        data = enc(encode_unsubscribe, 65535, ["a/+", "b/#", "c"], level=level, props=pr)
        assert data[0] == 0xA2
        p = dec(data, level)
        assert p.type == UNSUBSCRIBE and p.pid == 65535
        assert entries(p) == [b"a/+", b"b/#", b"c"]
        assert entries(dec(enc(encode_unsubscribe, 2, "x", level=level), level)) == [b"x"]


def test_roundtrip_unsuback():
    for level in (3, 4):
        data = enc(encode_unsuback, 8, level=level)
        assert data == unhex("b0 02 00 08")
        assert dec(data, level).pid == 8
    p = dec(enc(encode_unsuback, 8, b"\x00\x11\x87", level=5,
                props={props.REASON_STRING: "r"}), 5)
    assert p.type == UNSUBACK and p.pid == 8
    assert span(p, p.payload_off, p.payload_len) == b"\x00\x11\x87"


def test_roundtrip_ping_disconnect_auth():
    for level in (3, 4, 5):
        assert enc(encode_simple, PINGREQ) == b"\xc0\x00"
        assert enc(encode_simple, PINGRESP) == b"\xd0\x00"
        assert dec(b"\xc0\x00", level).type == PINGREQ
        assert dec(b"\xd0\x00", level).type == PINGRESP
        data = enc(encode_disconnect, level=level)
        assert data == b"\xe0\x00"
        assert dec(data, level).type == DISCONNECT
    # 3.1.1 has no reason code: rc and props are ignored below level 5
    assert enc(encode_disconnect, 0x04, level=4) == b"\xe0\x00"
    pr = {props.SESSION_EXPIRY: 0, props.REASON_STRING: "bye", props.SERVER_REFERENCE: "other"}
    p = dec(enc(encode_disconnect, 0x04, level=5, props=pr), 5)
    assert p.type == DISCONNECT and p.rc == 4 and _same_props(pprops(p), pr)
    assert enc(encode_disconnect, 0x8E, level=5) == b"\xe0\x01\x8e"
    pr = {props.AUTH_METHOD: "SCRAM-SHA-1", props.AUTH_DATA: b"\x01\x02\x03"}
    p = dec(enc(encode_auth, 0x18, props=pr), 5)
    assert p.type == AUTH and p.rc == 0x18 and _same_props(pprops(p), pr)
    assert enc(encode_auth) == b"\xf0\x00"
    assert dec(b"\xf0\x00", 5).rc == 0


def test_decode_at_offset_and_reuse():
    # one Packet decodes packets that sit at any offset of a larger buffer
    a = enc(encode_publish, "a", b"1", qos=1, pid=1)
    b = enc(encode_ack, PUBACK, 2)
    c = enc(encode_subscribe, 3, "s/#", qos=1)
    buf = b"\xff" + a + b + c + b"\xff"
    pkt = Packet()
    off = 1
    for want in (a, b, c):
        n = frame_len(buf, off, len(buf))
        assert n == len(want)
        decode(pkt, buf, off, off + n)
        off += n
    assert pkt.type == SUBSCRIBE and pkt.pid == 3
    assert entries(pkt) == [(b"s/#", 1)]
    decode(pkt, buf, 1, 1 + len(a))
    assert pkt.type == PUBLISH and bytes(pkt.topic) == b"a" and bytes(pkt.payload) == b"1"


# ---------------------------------------------------------------- no allocation
# Module-level functions, not closures: calling a MicroPython closure with
# more than five closed-over variables and arguments allocates its arguments.

class _Z:
    """What the locked loop works on, made before the heap is locked."""

    def __init__(self):
        self.out = bytearray(300)
        self.p4 = Packet(4)
        self.p5 = Packet(5)
        self.pre = props.encode({props.MESSAGE_EXPIRY: 60, props.RESPONSE_TOPIC: "re/sp",
                                 props.USER_PROPERTY: [("k", "v")],
                                 props.CORRELATION_DATA: b"\x01", props.SUBSCRIPTION_ID: [3]})
        self.ackp = props.encode({props.REASON_STRING: "ok"})
        self.t = b"sensors/temp"
        self.pl = b"22.5"
        self.subs = [(b"a/+", 1), (b"b/#", 2)]
        self.filt = b"sensors/+"
        self.step = 0  # the step that was running, for the failure message


def _z_publishes(z, level, pkt, pr):
    out = z.out
    n = 0
    qos = 0
    while qos < 3:
        z.step = 10 + qos
        end = encode_publish(out, 0, z.t, z.pl, qos, 5, True, qos > 0, level, pr)
        decode(pkt, out, 0, end)
        n += pkt.payload_len + pkt.pid
        qos += 1
    return n


def _z_acks(z, level, pkt, rc, pr):
    out = z.out
    n = 0
    ptype = PUBACK
    while ptype <= PUBCOMP:
        z.step = 20 + ptype
        end = encode_ack(out, 0, ptype, 77, rc, level, pr)
        decode(pkt, out, 0, end)
        n += pkt.pid
        ptype += 1
    return n


def _z_others(z, level, pkt):
    out = z.out
    z.step = 30
    end = encode_simple(out, 0, PINGREQ)
    decode(pkt, out, 0, end)
    z.step = 31
    end = encode_simple(out, 0, PINGRESP)
    decode(pkt, out, 0, end)
    z.step = 32
    end = encode_subscribe(out, 0, 9, z.filt, 1, level)
    decode(pkt, out, 0, end)
    n = pkt.opts
    z.step = 33
    end = encode_subscribe(out, 0, 9, z.subs, 0, level)
    decode(pkt, out, 0, end)
    n += pkt.opts
    z.step = 34
    f = z.filt
    t = z.t
    if topic.match_span(f, 0, len(f), t, 0, len(t)):
        n += 1
    z.step = 35
    if frame_len(out, 0, end, 1000) == end:
        n += 1
    return n


def _z_round(z):
    n = _z_publishes(z, 4, z.p4, None)
    n += _z_publishes(z, 5, z.p5, z.pre)
    n += _z_acks(z, 4, z.p4, None, None)
    n += _z_acks(z, 5, z.p5, 0, z.ackp)
    n += _z_acks(z, 5, z.p5, None, None)
    n += _z_others(z, 4, z.p4)
    n += _z_others(z, 5, z.p5)
    return n


def _z_rounds(z, k):
    total = 0
    while k:
        total += _z_round(z)
        k -= 1
    return total


def test_no_allocation_micropython():
    # The hot paths allocate nothing once warmed up: a device encodes and
    # decodes PUBLISH (QoS 0/1/2, 3.1.1 and 5.0 with pre-encoded properties),
    # the four acks, PINGREQ/PINGRESP and SUBSCRIBE, and matches topics, with
    # the heap locked.
    if not MICROPYTHON:
        raise SkipTest("heap_lock is MicroPython's")
    z = _Z()
    one = _z_round(z)  # warm-up, unlocked (imports props and codec_server)
    try:
        total = locked(_z_rounds, z, 20)
    except MemoryError:
        raise AssertionError("allocated in step %d" % z.step)
    assert total == 20 * one, (total, one)


def test_encoders_refuse_invalid_topics_and_filters():
    # Refused before a flow stores them: a broker closes the connection on
    # them, and a stored one would be resent after every reconnect.
    b = bytearray(64)
    for t in (b"a/+", b"#", b"a/#/b", b"", b"a\x00b"):
        e = raises(codec.MQTTError, codec.encode_publish, b, 0, t, b"x")  # [MQTT-3.3.2-2, MQTT-4.7.3-1/2]
        assert e.code == codec.PROTOCOL_ERROR
    assert codec.encode_publish(b, 0, b"", b"x", level=5, props=b"\x23\x00\x01") > 0  # v5 topic alias
    for f in (b"a+", b"a/#/b", b"#a", b""):
        raises(codec.MQTTError, codec.encode_subscribe, b, 0, 1, f, 0)  # [MQTT-4.7.1-2, MQTT-4.7.1-3]
        raises(codec.MQTTError, codec.encode_unsubscribe, b, 0, 1, f)
    raises(codec.MQTTError, codec.encode_subscribe, b, 0, 1, b"a/+", 3)  # [MQTT-3.8.3-4]
    raises(codec.MQTTError, codec.encode_subscribe, b, 0, 1, [(b"a", 0), (b"b", 4)])
    assert codec.encode_subscribe(b, 0, 1, [(b"a/+", 1), (b"#", 2)]) > 0


def test_encode_publish_checks_a_changed_topic_again():
    # encode_publish() skips the topic rules for the bytes object it last
    # found valid (immutable: still valid); anything else is checked
    # again [MQTT-3.3.2-2, MQTT-4.7.3-1, MQTT-4.7.3-2]
    b = bytearray(64)
    t = b"a/b"
    n = codec.encode_publish(b, 0, t, b"x", 1, 1)
    assert codec.encode_publish(b, 0, t, b"x", 1, 1) == n and b[4:7] == b"a/b"
    ba = bytearray(b"a/b")  # mutable: never taken as checked
    codec.encode_publish(b, 0, ba, b"x")
    ba[1] = 0x2B  # "a+b"
    raises(codec.MQTTError, codec.encode_publish, b, 0, ba, b"x")
    mv = memoryview(bytearray(b"c/d"))
    codec.encode_publish(b, 0, mv, b"x")
    mv[1] = 0x23
    raises(codec.MQTTError, codec.encode_publish, b, 0, mv, b"x")
    # an empty topic, valid at level 5 with an alias, is still refused at 4
    e = b""
    assert codec.encode_publish(b, 0, e, b"x", level=5, props=b"\x23\x00\x01") > 0
    raises(codec.MQTTError, codec.encode_publish, b, 0, e, b"x")
    # a str is encoded each time, and checked each time
    codec.encode_publish(b, 0, "s/t", b"x")
    raises(codec.MQTTError, codec.encode_publish, b, 0, "s/#", b"x")


# ---------------------------------------------------------------- refusal texts

def test_refusals_carry_their_text():
    # The codec raises with a number that indexes codec_errors.TEXT; each
    # refusal must still read as what went wrong, at both ends of the table
    # and from codec_server's own numbers.
    b = bytearray(64)
    assert raises(MQTTError, encode_publish, b, 0, b"t", b"x", 3).reason == "QoS 3"
    e = bad(frame(0x30, b"\x00\x03a/+"))
    assert e.reason == "wildcard in topic name", e.reason
    assert raises(MQTTError, frame_len, b"\x30\xff\xff\xff\xff\x01", 0, 6).reason == \
        "remaining length over 4 bytes"
    e = bad(frame(0x10, b"\x00\x04MQTT\x04\x03\x00\x00\x00\x01a"))  # [MQTT-3.1.2-3]
    assert e.reason == "CONNECT reserved flag", e.reason
    e = bad(frame(0x10, b"\x00\x04MQTT\x04\x02\x00\x00\x00\x01a\x00"))
    assert e.reason == "bytes after CONNECT payload", e.reason
    e = bad(frame(0x82, b"\x00\x01\x00\x01a\x03"))  # [MQTT-3.8.3-4]
    assert e.reason == "bad subscription options", e.reason
    e = bad(frame(0x40, b"\x00\x01\x05"), 5)  # props.py's numbers
    assert e.reason == "bad reason code", e.reason
    e = bad(frame(0x30, b"\x00\x01t\x02\x7f\x00"), 5)
    assert e.reason == "unknown property", e.reason


def test_refusal_numbers_agree():
    # codec.py, codec_server.py and props.py each define the numbers they
    # raise with (MicroPython folds const() names away, so they cannot be
    # shared): the same name must have the same number, and the numbers
    # must cover codec_errors.TEXT exactly, one distinct text each.
    if MICROPYTHON:
        raise SkipTest("const() names exist only on CPython")
    from umqtt3 import codec_errors, codec_server
    seen = {}
    for mod in (client_codec, codec, codec_server, props):
        for name, v in sorted(vars(mod).items()):
            if name.startswith("_E_"):
                assert seen.setdefault(name, v) == v, (mod.__name__, name)
    assert sorted(seen.values()) == list(range(len(codec_errors.TEXT)))
    assert len(set(codec_errors.TEXT)) == len(codec_errors.TEXT)
