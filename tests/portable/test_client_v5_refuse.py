# MQTT 5: what the client refuses to send, against a scripted in-memory
# server (no sockets): properties a client may not put in PUBLISH, SUBSCRIBE,
# the will or DISCONNECT raise MQTTError naming the property, and nothing is
# sent, stored or kept; DISCONNECT's reason code and properties; CONNACK's
# Authentication Data reaches the auth hook, which may reject the server;
# disconnect_rc is the reason of the connection that ended. Runs under pytest
# and under MicroPython (where pre-encoded properties are checked without
# allocating, under heap_lock).
import sys

from support import locked, answer_qos, raises
from v5_peer import PipePeer
from umqtt3.client import MQTTClient
from umqtt3.codec import (decode, encode_disconnect, MQTTError, CONNECT, PUBLISH,
                          SUBSCRIBE, AUTH, DISCONNECT)
from umqtt3.codec_server import encode_connack, encode_suback
from umqtt3 import props

MICROPYTHON = sys.implementation.name == "micropython"


class Server(PipePeer):
    """One MQTT 5 server on a fresh pipe per connection; records the type,
    reason code and properties of every packet the client sends."""
    size = 1024

    def __init__(self, connack_props=b"", auth=None):
        self.connack_props = connack_props
        self.auth = auth  # the data of an AUTH continue sent before CONNACK
        self.got = []  # (type, rc, property bytes)
        self.published = 0

    def step(self):
        c = self.conn
        n = c.recv()
        if not n:
            return
        p = self.pkt
        decode(p, c.rx, 0, n)
        t = p.type
        if not MICROPYTHON or t != PUBLISH:  # (no allocation in the locked rounds)
            self.got.append((t, p.rc, bytes(c.rx[p.props_off:p.props_off + p.props_len])))
        if t == CONNECT and self.auth is not None:
            c.tlen = props.encode_auth(c.tx, c.tlen, 0x18, {0x15: "M", 0x16: self.auth})
        elif t == CONNECT or t == AUTH:
            c.tlen = encode_connack(c.tx, c.tlen, False, 0, 5, self.connack_props)
        elif t == SUBSCRIBE:
            c.tlen = encode_suback(c.tx, c.tlen, p.pid, b"\x01", 5)
        elif t == PUBLISH:
            self.published += 1
        answer_qos(c, p)
        c.done()
        c.flush()

    def types(self):
        return [g[0] for g in self.got]

    def send_disconnect(self, rc):
        c = self.conn
        c.tlen = encode_disconnect(c.tx, c.tlen, rc, 5)
        c.flush()


def _client(s, **kw):
    return MQTTClient("v5r", "peer", level=5, connect_link=s.link, timeout_ms=2000, **kw)


def _poll(c, s, n=10):
    for _ in range(n):
        c.poll(0)
        s.step()


def test_publish_property_a_client_may_not_send_is_refused_unsent_unstored():
    s = Server(connack_props=bytes([0x22, 0, 10]))  # Topic Alias Maximum 10
    c = _client(s, reconnect=True)
    c.connect()
    # 0x81 (Malformed Packet) for a property not defined for PUBLISH or
    # unknown (section 2.2.2.2 of 5.0), 0x82 for the rest, 0x94 for an alias
    for bad, code in (({0x11: 5}, 0x81), ({0x0B: 3}, 0x82), ({0x23: 0}, 0x94),
                      ({0x23: 11}, 0x94), ({0x23: 8}, 0x94), ({0x01: 2}, 0x82),
                      ({0x26: ("k", "v"), 0x24: 1}, 0x81), ({0x7F: 1}, 0x81),
                      ({0x08: "answers/+"}, 0x82), ({0x08: "a/#", 0x09: b"1"}, 0x82),
                      (bytes([0x11, 0, 0, 0, 5]), 0x81), (bytes([0x0B, 3]), 0x82),
                      (bytes([0x01, 1, 0x01, 1]), 0x82)):
        for qos in (0, 1):
            e = raises(MQTTError, c.publish, b"a/b", b"x", False, qos, None, False, bad)
            assert e.code == code, (bad, e.code)
            assert "PUBLISH property 0x" in e.reason, e.reason
    assert c.inflight() == 0 and not c.waits  # nothing stored
    _poll(c, s)
    assert s.published == 0 and c.is_connected() and s.links == 1
    # what a client may send goes out: an alias above the client's own 8
    c.publish(b"a/b", b"x", False, 1, None, False, {0x23: 9, 0x01: 1, 0x26: [("k", "v")]})
    _poll(c, s)
    assert s.published == 1 and c.inflight() == 0


def test_an_empty_topic_without_a_topic_alias_is_refused_unsent_unstored():
    # 5.0 3.3.2.1: a zero-length Topic Name is a Protocol Error unless a
    # Topic Alias gives the topic
    s = Server(connack_props=bytes([0x22, 0, 10]))  # Topic Alias Maximum 10
    c = _client(s, reconnect=True)
    c.connect()
    for qos in (0, 1):
        for pr in (None, {0x01: 1}):
            e = raises(MQTTError, c.publish, b"", b"x", False, qos, None, False, pr)
            assert e.code == 0x82, e.code
    assert c.inflight() == 0 and not c.waits  # nothing stored
    _poll(c, s)
    assert s.published == 0 and c.is_connected()
    # with its alias set by an earlier message, an empty topic goes out (at
    # QoS 0: a stored one could not be resent, test_client_v5_reconnect)
    c.publish(b"a/b", b"x", False, 1, None, False, {0x23: 9})
    c.publish(b"", b"y", False, 0, None, False, {0x23: 9})
    _poll(c, s)
    assert s.published == 2 and c.inflight() == 0


def test_subscribe_property_a_client_may_not_send_is_not_kept():
    s = Server()
    c = _client(s)
    c.set_callback(lambda t, m: None)
    c.connect()
    for bad, code in (({0x0B: 0}, 0x82), ({0x0B: 1 << 28}, 0x81), ({0x0B: [1, 2]}, 0x82),
                      ({0x11: 1}, 0x81), ({0x23: 1}, 0x81), (bytes([0x0B, 0]), 0x82)):
        e = raises(MQTTError, c.subscribe, b"s/x", 1, False, False, 0, bad)
        assert e.code == code and "SUBSCRIBE property 0x" in e.reason, (bad, e.code, e.reason)
    # No Local on a shared subscription, as before [MQTT-3.8.3-4]
    e = raises(MQTTError, c.subscribe, "$share/g/s/x", 1, True)
    assert e.code == 0x82
    assert not c.subs and SUBSCRIBE not in s.types()
    assert c.subscribe(b"s/y", 1, props={0x0B: 268435455, 0x26: [("k", "v")]}) == 1
    assert list(c.subs) == [b"s/y"]


def test_will_property_a_will_may_not_carry_is_refused_at_connect():
    s = Server()
    c = _client(s)
    c.set_last_will(b"w", b"gone", props={0x18: 5, 0x11: 5})
    e = raises(MQTTError, c.connect)
    assert e.code == 0x81 and "will property 0x11" in e.reason, e.reason  # not a will property
    assert CONNECT not in s.types() and not c.is_connected()
    c.set_last_will(b"w", b"x", props={0x08: "r/#"})  # a wildcard in its Response Topic
    e = raises(MQTTError, c.connect)
    assert "will property 0x08" in e.reason, e.reason
    c.set_last_will(b"w", b"gone", props={0x18: 5, 0x02: 60})
    c.connect()
    assert c.is_connected()


def test_disconnect_reason_code_and_properties():
    s = Server()
    c = _client(s, session_expiry=60)
    c.connect()
    c.disconnect(0x04, {0x11: 0, 0x1F: "bye"})
    s.step()
    t, rc, pr = s.got[-1]
    assert t == DISCONNECT and rc == 0x04
    assert props.get(pr, 0, len(pr), 0x11) == 0 and props.get(pr, 0, len(pr), 0x1F) == "bye"
    c.connect()
    c.disconnect()  # as before: two bytes, reason 0x00
    s.step()
    assert s.got[-1] == (DISCONNECT, 0, b"")


def test_disconnect_refuses_what_a_client_may_not_send():
    s = Server()
    c = _client(s)  # clean session, no session_expiry: CONNECT had 0
    c.connect()
    for rc, pr in ((0x8E, None), (0x05, None), (300, None), (None, {0x11: 10}),
                   (None, {0x1C: "other"}), (None, {0x02: 5}), (0, bytes([0x11, 0, 0, 0, 1]))):
        e = raises(MQTTError, c.disconnect, rc, pr)
        assert e.code == (0x81 if pr == {0x02: 5} else 0x82), (rc, pr)  # 0x02: not DISCONNECT's
        assert c.is_connected()
    c.disconnect(None, {0x11: 0})  # 0 is no change: allowed
    s.step()
    assert s.got[-1][0] == DISCONNECT and not c.is_connected()
    d = MQTTClient("v4", "peer", reconnect=True)  # level 4: no reason code, no properties
    assert raises(MQTTError, d.disconnect, 0x04).code == 0x82
    assert raises(MQTTError, d.disconnect, None, {0x11: 0}).code == 0x82
    assert d.reconnect  # refused before anything changed


def test_connack_authentication_data_reaches_the_hook():
    # section 4.12's exchange: CONNECT (client-first) -> AUTH 0x18
    # (server-first) -> AUTH 0x18 (client-final) -> CONNACK (server-final)
    seen = []

    def hook(data):
        seen.append(bytes(data))
        return b"client-final"

    s = Server(auth=b"server-first", connack_props=bytes([0x15, 0, 1]) + b"M" +
               bytes([0x16, 0, 12]) + b"server-final")
    c = _client(s, auth=("M", b"client-first", hook))
    c.connect()
    assert c.is_connected() and seen == [b"server-first", b"server-final"]


def test_a_hook_that_rejects_connack_data_ends_the_connection():
    def hook(data):
        if data == b"forged":
            raise ValueError("bad server signature")
        return b"client-final"

    s = Server(auth=b"server-first", connack_props=bytes([0x15, 0, 1]) + b"M" +
               bytes([0x16, 0, 6]) + b"forged")
    c = _client(s, auth=("M", b"client-first", hook))
    e = raises(MQTTError, c.connect)
    assert e.code == 0x87 and "bad server signature" in e.reason, e.reason
    assert not c.is_connected() and c.conn.link is None


def test_a_hook_that_rejects_an_auth_challenge_ends_the_connection():
    def hook(data):
        raise ValueError("unknown challenge")

    s = Server(auth=b"server-first")
    c = _client(s, auth=("M", b"client-first", hook))
    e = raises(MQTTError, c.connect)
    assert e.code == 0x87 and "unknown challenge" in e.reason, e.reason
    assert not c.is_connected() and c.conn.link is None and AUTH not in s.types()


def test_disconnect_rc_is_cleared_by_the_next_connack():
    s = Server()
    c = _client(s)
    c.connect()
    s.send_disconnect(0x8B)  # server shutting down
    raises(OSError, _poll, c, s)
    assert c.disconnect_rc == 0x8B
    c.connect()
    assert c.disconnect_rc is None  # this connection has not ended
    s.close()  # ends without DISCONNECT
    raises(OSError, _poll, c, s)
    assert c.disconnect_rc is None


def _publish_with_props(c, s, pr):
    c.publish(b"dev/x", b"0123", False, 1, None, False, pr)
    for _ in range(10):
        if not c.inflight():
            break
        c.poll(0)


def test_checked_pre_encoded_properties_allocate_nothing():
    s = Server()
    c = _client(s)
    c.connect()
    pr = bytes([0x01, 1, 0x02, 0, 0, 0, 60, 0x26, 0, 1]) + b"k" + bytes([0, 1]) + b"v"
    for _ in range(3):  # warm up: client_more, the acks
        _publish_with_props(c, s, pr)
    n = s.published
    if MICROPYTHON:
        locked(_publish_with_props, c, s, pr)
    else:
        _publish_with_props(c, s, pr)
    assert s.published == n + 1 and not c.inflight()
