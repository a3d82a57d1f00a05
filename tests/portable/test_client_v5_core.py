# MQTT 5 in the client against a scripted in-memory server (no sockets):
# what mosquitto cannot be made to do (refuse a subscription, run an
# enhanced-authentication exchange), and the proof that MQTT 5 publish,
# topic aliases, receive and reading properties in a raw callback allocate
# nothing in steady state. Runs under pytest and under MicroPython.
import sys

from support import locked, answer_qos
from umqtt3.client import MQTTClient
from umqtt3.transport import Pipe, Conn
from umqtt3.codec import (Packet, decode, encode_publish, MQTTError, CONNECT, PUBLISH,
                          SUBSCRIBE, AUTH)
from umqtt3.codec_server import encode_connack, encode_suback
from umqtt3 import client5, props

MICROPYTHON = sys.implementation.name == "micropython"


class Server:
    """Answers one packet at a time, at MQTT 5. connack_props: the CONNACK's
    properties (bytes); suback: the reason code for every filter; auth: the
    data of an AUTH continue (0x18) sent before CONNACK."""

    def __init__(self, connack_props=b"", suback=1, auth=None):
        self.end, other = Pipe.pair(4096)
        self.conn = Conn(other, 1024, 1024)
        self.pkt = Packet(5)
        self.connack_props = connack_props
        self.suback = suback
        self.auth = auth
        self.got_auth = None  # the client's AUTH data
        self.published = 0
        self.topics = []  # topic length of each PUBLISH (0: an alias)
        self.sub_ids = []  # the Subscription Identifier of each SUBSCRIBE

    def step(self):
        c = self.conn
        n = c.recv()
        if not n:
            return
        p = self.pkt
        decode(p, c.rx, 0, n)
        t = p.type
        if t == CONNECT and self.auth is not None:
            c.tlen = props.encode_auth(c.tx, c.tlen, 0x18, {0x15: "M", 0x16: self.auth})
        elif t == CONNECT or t == AUTH:
            if t == AUTH:
                self.got_auth = props.get(p.buf, p.props_off, p.props_len, 0x16)
            c.tlen = encode_connack(c.tx, c.tlen, False, 0, 5, self.connack_props)
        elif t == SUBSCRIBE:
            self.sub_ids.append(props.get(p.buf, p.props_off, p.props_len, 0x0B))
            c.tlen = encode_suback(c.tx, c.tlen, p.pid, bytes([self.suback]), 5)
        elif t == PUBLISH:
            self.published += 1
            if not MICROPYTHON or len(self.topics) < 8:
                self.topics.append(p.topic_len)
        answer_qos(c, p)
        c.done()
        c.flush()

    def send(self, data):
        c = self.conn
        c.tx[c.tlen:c.tlen + len(data)] = data
        c.tlen += len(data)
        c.flush()


class Link:
    def __init__(self, server):
        self.s = server

    def readinto(self, buf, n):
        r = self.s.end.readinto(buf, n)
        if r is None:
            self.s.step()
            r = self.s.end.readinto(buf, n)
        return r

    def write(self, buf, off=0, n=-1):
        return self.s.end.write(buf, off, n)

    def close(self):
        self.s.end.close()


def _client(server, **kw):
    return MQTTClient("v5dev", "peer", level=5, connect_link=lambda: Link(server),
                      timeout_ms=2000, **kw)


def _raises(exc, fn, *args):
    try:
        fn(*args)
    except exc as e:
        return e
    raise AssertionError("%s not raised" % exc.__name__)


def test_suback_refusal_is_raised_per_filter():
    s = Server(suback=0x87)
    c = _client(s)
    c.set_callback(lambda t, m: None)
    c.connect()
    e = _raises(MQTTError, c.subscribe, b"a/#", 1)
    assert e.code == 0x87  # [MQTT-3.9.3-1]: one reason code per filter
    assert b"a/#" not in c.subs  # not subscribed again after a reconnect
    s.suback = 1
    assert c.subscribe(b"b/#", 1) == 1


def test_resubscribe_sends_the_subscription_properties_again():
    # the broker kept no session: the client subscribes again
    # [MQTT-3.2.2-3], with the options and properties it first used
    s = Server()

    def fresh_link():
        s.end, other = Pipe.pair(4096)
        s.conn = Conn(other, 1024, 1024)
        return Link(s)

    c = MQTTClient("v5dev", "peer", level=5, connect_link=fresh_link, timeout_ms=2000,
                   reconnect=True, backoff_ms=(0, 0))
    c.set_callback(lambda t, m: None)
    c.connect()
    assert c.subscribe(b"a/#", 1, props={0x0B: 7}) == 1
    s.end.close()  # the link drops
    for _ in range(100):
        c.poll(0)
        if len(s.sub_ids) == 2:
            break
    assert s.sub_ids == [7, 7]


def test_enhanced_auth_continue_asks_the_hook():
    # CONNECT carries the method and data; AUTH 0x18 from the server goes to
    # the hook, whose answer goes back in AUTH 0x18 [MQTT-4.12.0-2]
    seen = []

    def hook(data):
        seen.append(data)
        return b"response"

    s = Server(auth=b"challenge")
    c = _client(s, auth=("M", b"first", hook))
    c.connect()
    assert c.is_connected()
    assert seen == [b"challenge"] and s.got_auth == b"response"


def test_connack_limits_and_assigned_id():
    # Receive Maximum 3, Maximum Packet Size 100, Topic Alias Maximum 2,
    # Assigned Client Identifier "given"
    s = Server(connack_props=bytes([0x21, 0, 3, 0x27, 0, 0, 0, 100, 0x22, 0, 2,
                                    0x12, 0, 5]) + b"given")
    c = _client(s)
    c.connect()
    assert c.window == 3 and c.max_packet == 100 and c.client_id == "given"
    # the server's Receive Maximum bounds what we send, not what we take:
    # a reconnect's CONNECT still offers our own window (3.1.2.11.3;
    # [MQTT-3.3.4-7] binds only what we send)
    mine = client5.event(c, 1, None)  # CONNECT's properties
    assert props.get(mine, 0, len(mine), 0x21) == 8
    e = _raises(MQTTError, c.publish, b"t", b"x" * 120)
    assert e.code == 0x95 and s.published == 0
    for t in (b"a/1", b"a/1", b"a/2", b"a/3", b"a/3", b"a/1"):
        c.publish(t, b"v")
    for _ in range(10):
        if s.published == 6:
            break
        c.poll(0)
    # a/1 and a/2 get the two aliases; a/3 (no alias left) goes in full
    assert s.topics == [3, 0, 3, 3, 3, 0], s.topics


def test_alias_not_kept_for_a_refused_publish():
    # an alias is the server's only once the PUBLISH that sets it is queued:
    # after one refused (here: larger than the send buffer) the next PUBLISH
    # on that topic must still carry the topic
    s = Server(connack_props=bytes([0x22, 0, 4]))
    c = _client(s)
    c.connect()
    e = _raises(MQTTError, c.publish, b"t/new", b"y" * 2000)
    assert e.code == 0x95
    c.publish(b"t/new", b"z")
    c.publish(b"t/new", b"z")
    for _ in range(10):
        if s.published == 2:
            break
        c.poll(0)
    assert s.topics == [5, 0], s.topics  # the topic (setting the alias), then the alias


class RawProps:
    """A raw callback that reads Correlation Data and Subscription
    Identifier without allocating."""

    def __init__(self):
        self.n = 0
        self.corr_len = -1
        self.sub_id = -1

    def cb(self, pkt, redelivered):
        o = client5.value_at(pkt, 0x09)
        b = pkt.buf
        self.corr_len = (b[o] << 8) | b[o + 1]
        self.sub_id = props.get(b, pkt.props_off, pkt.props_len, 0x0B)
        self.n += 1


def _round(c, s, box, inbound, m):
    c.publish(b"dev/x", b"0123", False, 0)  # an alias after the first
    c.publish(b"dev/x", b"0123", False, 1, None, False)
    s.send(inbound)
    for _ in range(10):
        if box.n > m and not c.inflight():
            break
        c.poll(0)


def test_v5_steady_state_allocates_nothing():
    s = Server(connack_props=bytes([0x22, 0, 4]))
    c = _client(s)
    box = RawProps()
    c.set_callback(box.cb, raw=True)
    c.connect()
    buf = bytearray(64)
    n = encode_publish(buf, 0, b"in/x", b"data", 1, 9, False, False, 5,
                       bytes([0x09, 0, 3]) + b"abc" + bytes([0x0B, 7]))
    inbound = bytes(buf[:n])
    for i in range(3):  # warm up: alias table, props module, acks
        _round(c, s, box, inbound, i)
    assert box.n == 3 and box.corr_len == 3 and box.sub_id == 7
    if MICROPYTHON:
        locked(_round, c, s, box, inbound, 3)
        assert box.n == 4
