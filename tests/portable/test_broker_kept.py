# What a connection keeps after its CONNECT is bounded (broker_limits:
# max_id_bytes, max_will_bytes): a client id, a user name or a will larger
# than its limit is refused before any of it is copied, with the CONNACK
# the level has for it, and nothing of it is kept (no session, no will).
#
# Runs over pipes under pytest and under MicroPython
# (node tests/mp/run.mjs tests/mp/testrunner.py test_broker_kept), and over
# sockets through tests/test_broker.py's harness.
from broker_harness import running, Raw, settle
from umqtt3 import props as P
from umqtt3.broker_limits import Limits
from test_broker5_connect import connect5

ID = 40  # max_id_bytes in these tests
WILL = 100  # max_will_bytes


def _kept(**kw):
    return running(max_id_bytes=ID, max_will_bytes=WILL, **kw)


def test_a_client_id_over_max_id_bytes_gets_connack_2():
    # [MQTT-3.1.3-9]: a rejected client id gets CONNACK 2, then the close
    # [MQTT-3.2.2-5]; an id at the limit is taken, and nothing of the
    # refused one is kept
    with _kept() as b, Raw(b) as ok, Raw(b) as c:
        assert ok.connect("i" * ID, clean=False).rc == 0
        p = c.connect("x" * (ID + 1), clean=False)
        assert p.rc == 2 and not p.session_present
        assert c.closed()
        assert list(b.sess.by_id) == [b"i" * ID]
        assert b.refused == 1


def test_at_mqtt5_a_client_id_over_it_gets_0x85():
    # [MQTT-3.1.3-8 (5.0)]: Client Identifier not valid
    with _kept() as b, Raw(b) as c:
        p = connect5(c, "x" * (ID + 1))
        assert p.rc == 0x85
        assert c.closed()
        assert not b.sess.by_id


def test_a_user_name_over_it_gets_connack_4():
    # 3.2.2.3: 4, the data in the user name is not taken (0x86 at MQTT 5)
    with _kept() as b, Raw(b) as c, Raw(b) as c5, Raw(b) as ok:
        assert c.connect("u", user="n" * (ID + 1)).rc == 4
        assert c.closed()
        assert connect5(c5, "u5", user="n" * (ID + 1)).rc == 0x86
        assert c5.closed()
        assert ok.connect("ok", user="n" * ID).rc == 0
        assert b.connected == 1


def test_a_will_over_max_will_bytes_closes_without_connack_at_3_1_1():
    # [MQTT-3.2.2-6]: no return code of 3.1.1 says "too large": closed
    # without CONNACK. Topic and payload count; at the limit it is taken.
    with _kept() as b, Raw(b) as ok, Raw(b) as c:
        assert ok.connect("ok", will_topic="w/ok", will_msg=b"m" * (WILL - 4)).rc == 0
        assert c.connect("big", will_topic="w/big", will_msg=b"m" * (WILL - 4),
                         expect=False) is None
        assert c.recv() is None  # closed, nothing sent
        assert b.connected == 1 and b.refused == 1
        assert b.sess.by_id[b"ok"].client.will_t == b"w/ok"


def test_at_mqtt5_a_will_over_it_gets_0x97_its_properties_counted():
    # 0x97, quota exceeded, a CONNACK reason code of 5.0 (3.2.2.2); the
    # will's properties are kept with it, so they count
    with _kept() as b, Raw(b) as ok, Raw(b) as c:
        pr = {P.CONTENT_TYPE: "text/plain"}  # 13 bytes of properties
        assert connect5(ok, "ok", will_topic="w/ok", will_msg=b"m" * (WILL - 4 - 13),
                        will_props=pr).rc == 0
        p = connect5(c, "big", will_topic="w/ok", will_msg=b"m" * (WILL - 4 - 12),
                     will_props=pr)
        assert p.rc == 0x97
        assert c.closed()
        assert b.connected == 1


def test_max_will_bytes_0_is_no_limit_but_max_packet():
    with running(max_will_bytes=0) as b, Raw(b) as c:
        assert c.connect("c", will_topic="w", will_msg=b"m" * 900).rc == 0
        settle()
        assert b.connected == 1


def test_the_limits_refuse_what_breaks_the_protocol():
    # a server takes ids of 1 to 23 bytes [MQTT-3.1.3-5]; a string is at
    # most 65535 bytes (1.5.3)
    for kw in ({"max_id_bytes": 22}, {"max_id_bytes": 0}, {"max_id_bytes": 65536},
               {"max_will_bytes": -1}):
        try:
            Limits(**kw)
        except ValueError:
            continue
        raise AssertionError(kw)
    assert Limits(max_id_bytes=23, max_will_bytes=0).max_id_bytes == 23
