# MQTTClient against a scripted in-memory peer (no sockets), and the proof
# that the steady state allocates nothing under MicroPython.
#
# Runs under pytest on CPython and under tests/mp/testrunner.py on MicroPython
# (the WebAssembly port has no sockets: connect_link gives the client one end
# of a transport.Pipe). Plain functions and assert, no pytest import.
#
# Everything runs in one thread: the client's link is wrapped so that a read
# finding no data first lets the peer handle one packet. The peer decodes with
# umqtt3.codec and answers from preallocated buffers, so it allocates nothing
# either once it runs.
import sys

from support import locked, answer_qos
from umqtt3.client import MQTTClient
from umqtt3.transport import Pipe, Conn
from umqtt3.codec import (Packet, decode, encode_publish, encode_ack, encode_simple,
                          CONNECT, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP,
                          SUBSCRIBE, UNSUBSCRIBE, PINGREQ, PINGRESP, DISCONNECT)
from umqtt3.codec_server import encode_connack, encode_suback, encode_unsuback

try:
    from unittest import SkipTest  # pytest reports it as a skip
except ImportError:
    class SkipTest(Exception):
        pass

MICROPYTHON = sys.implementation.name == "micropython"

TOPIC = b"dev/x"
MSG = b"0123456789abcdef"


class Peer:
    """A broker stand-in driven one packet at a time. Counts what it got by
    packet type; records PUBLISHes only while `record` is set (recording
    allocates)."""

    def __init__(self, level=4):
        self.client_end, end = Pipe.pair(4096)
        self.conn = Conn(end, 1024, 1024)
        self.pkt = Packet(level)
        self.got = [0] * 16
        self.dup = 0  # PUBLISHes that arrived with DUP set
        self.record = True
        self.published = []  # (topic, payload, qos, dup)
        self.ack = True  # answer QoS 1/2 PUBLISHes
        self.session = False
        self.pid = 0
        self.last_len = 0  # payload length of the last PUBLISH
        self.answer_sub = True  # False: SUBSCRIBEs go unanswered
        self.sub_pids = []

    def step(self):
        """Handle one packet from the client if a whole one is there."""
        c = self.conn
        if c.link.closed:
            return False
        n = c.recv()
        if not n:
            return False
        p = self.pkt
        decode(p, c.rx, 0, n)
        t = p.type
        self.got[t] += 1
        if t == PUBLISH:
            self.last_len = p.payload_len
            if p.dup:
                self.dup += 1
            if self.record:
                self.published.append((bytes(p.topic), bytes(p.payload), p.qos, p.dup))
        answer_qos(c, p, self.ack)
        if t == PINGREQ:
            c.tlen = encode_simple(c.tx, c.tlen, PINGRESP)
        elif t == CONNECT:
            c.tlen = encode_connack(c.tx, c.tlen, self.session, 0)
        elif t == SUBSCRIBE:
            if self.answer_sub:
                c.tlen = encode_suback(c.tx, c.tlen, p.pid, bytes([p.opts & 3]))
            self.sub_pids.append(p.pid)
        elif t == UNSUBSCRIBE:
            c.tlen = encode_unsuback(c.tx, c.tlen, p.pid)
        elif t == DISCONNECT:
            c.link.close()
        c.done()
        c.flush()
        return True

    def publish(self, topic, msg, qos):
        """Send the client a PUBLISH."""
        c = self.conn
        pid = 0
        if qos:
            self.pid = self.pid % 65535 + 1
            pid = self.pid
        c.tlen = encode_publish(c.tx, c.tlen, topic, msg, qos, pid)
        c.flush()

    def drop(self):
        """The connection breaks: a fresh pipe for the next connect."""
        self.conn.link.close()
        self.client_end, end = Pipe.pair(4096)
        self.conn.link = end
        self.conn.done()
        self.conn.tlen = self.conn.sent = 0


class Link:
    """The client's end of the pipe; a read that finds nothing lets the peer
    handle one packet first, so blocking calls work in one thread."""

    def __init__(self, pipe, peer):
        self.pipe = pipe
        self.peer = peer

    def readinto(self, buf, n):
        r = self.pipe.readinto(buf, n)
        if r is None:
            self.peer.step()
            r = self.pipe.readinto(buf, n)
        return r

    def write(self, buf, off=0, n=-1):
        return self.pipe.write(buf, off, n)

    def close(self):
        self.pipe.close()


def _client(peer, **kw):
    def connect_link():
        return Link(peer.client_end, peer)
    return MQTTClient("dev1", "peer", connect_link=connect_link, timeout_ms=2000, **kw)


class Inbox:
    def __init__(self):
        self.msgs = []

    def cb(self, topic, msg):
        self.msgs.append((topic, msg))


class RawCount:
    """A raw callback that allocates nothing: counts and sums lengths."""

    def __init__(self):
        self.n = 0
        self.bytes = 0
        self.redelivered = 0

    def cb(self, pkt, redelivered):
        self.n += 1
        self.bytes += pkt.payload_len
        if redelivered:
            self.redelivered += 1


def _settle(c, peer, typ, count, limit=50):
    # poll until the peer has seen `count` packets of type `typ`
    for _ in range(limit):
        if peer.got[typ] >= count:
            return
        c.poll(0)
    raise AssertionError("peer got %d of packet type %d, wanted %d" % (peer.got[typ], typ, count))


# ---------------------------------------------------------------- behaviour

def test_connect_and_disconnect():
    peer = Peer()
    c = _client(peer)
    assert c.connect() is False
    assert peer.got[CONNECT] == 1 and c.is_connected()
    c.disconnect()
    peer.step()
    assert peer.got[DISCONNECT] == 1 and not c.is_connected()


def test_session_present():
    peer = Peer()
    peer.session = True
    c = _client(peer)
    assert c.connect(clean_session=False) is True


def test_publish_qos0_1_2():
    peer = Peer()
    c = _client(peer)
    c.connect()
    assert c.publish(TOPIC, b"zero") == 0
    pid1 = c.publish(TOPIC, b"one", qos=1)
    assert pid1 and c.inflight() == 0
    pid2 = c.publish(TOPIC, b"two", qos=2, retain=True)
    assert pid2 and pid2 != pid1 and c.inflight() == 0
    assert peer.published == [(TOPIC, b"zero", 0, False), (TOPIC, b"one", 1, False),
                              (TOPIC, b"two", 2, False)]
    assert peer.got[PUBREL] == 1


def test_publish_str_topic_and_message():
    peer = Peer()
    c = _client(peer)
    c.connect()
    c.publish("dev/s", "text", qos=1)
    assert peer.published[-1][:2] == (b"dev/s", b"text")


def test_publish_no_wait_then_acks():
    peer = Peer()
    c = _client(peer, window=4)
    c.connect()
    for i in range(3):
        c.publish(TOPIC, b"m%d" % i, qos=2, wait=False)
    assert c.inflight() == 3
    _settle(c, peer, PUBREL, 3)
    for _ in range(5):
        c.poll(0)
    assert c.inflight() == 0
    assert [m[1] for m in peer.published] == [b"m0", b"m1", b"m2"]


def test_window_full_is_busy():
    from umqtt3.flow import Busy
    peer = Peer()
    peer.ack = False
    c = _client(peer, window=2)
    c.connect()
    c.publish(TOPIC, b"a", qos=1, wait=False)
    c.publish(TOPIC, b"b", qos=1, wait=False)
    try:
        c.publish(TOPIC, b"c", qos=1, wait=False)
    except Busy:
        pass
    else:
        raise AssertionError("third publish in a window of 2 was taken")
    assert c.inflight() == 2


def test_receive_qos0_1_2():
    peer = Peer()
    c = _client(peer)
    box = Inbox()
    c.set_callback(box.cb)
    c.connect()
    peer.publish(b"in/0", b"zero", 0)
    c.wait_msg()
    peer.publish(b"in/1", b"one", 1)
    c.wait_msg()
    _settle(c, peer, PUBACK, 1)
    peer.publish(b"in/2", b"two", 2)
    c.wait_msg()
    _settle(c, peer, PUBCOMP, 1)
    assert peer.got[PUBREC] == 1  # the client answered the QoS 2 message
    assert box.msgs == [(b"in/0", b"zero"), (b"in/1", b"one"), (b"in/2", b"two")]


def test_receive_qos2_resent_is_delivered_once():
    peer = Peer()
    c = _client(peer)
    box = Inbox()
    c.set_callback(box.cb)
    c.connect()
    # the same id twice (a resend), before the PUBREL
    co = peer.conn
    co.tlen = encode_publish(co.tx, 0, b"in/2", b"once", 2, 77)
    co.tlen = encode_publish(co.tx, co.tlen, b"in/2", b"once", 2, 77, False, True)
    co.flush()
    c.check_msg()
    c.check_msg()
    assert box.msgs == [(b"in/2", b"once")]
    _settle(c, peer, PUBCOMP, 1)
    assert box.msgs == [(b"in/2", b"once")]


def test_callback_that_raises_has_not_taken_the_message():
    # A QoS 2 message whose callback raises is forgotten, not answered with
    # PUBREC, and the connection is dropped: a broker resends only on a new
    # connection [MQTT-4.4.0-1]. The resend (DUP) is then delivered, once.
    peer = Peer()
    c = _client(peer)
    got = []

    def cb(topic, msg):
        if not got:
            got.append("failed")
            raise ValueError("application not ready")
        got.append(msg)

    c.set_callback(cb)
    c.connect(clean_session=False)
    co = peer.conn
    co.tlen = encode_publish(co.tx, 0, b"in/2", b"later", 2, 9)
    co.flush()
    try:
        c.check_msg()
        raise AssertionError("the callback's error was swallowed")
    except ValueError:
        pass
    assert peer.got[PUBREC] == 0
    assert not c.is_connected()
    peer.drop()
    peer.session = True
    c.connect(clean_session=False)
    co.tlen = encode_publish(co.tx, 0, b"in/2", b"later", 2, 9, False, True)
    co.flush()
    c.check_msg()
    _settle(c, peer, PUBCOMP, 1)
    assert got == ["failed", b"later"]
    assert peer.got[PUBREC] == 1


def test_sync_runs_once_per_burst_before_the_acks_leave():
    # set_sync: a callback may buffer what it takes; the acks of a whole burst
    # leave only after one sync() made it durable (group commit), and a
    # PUBREL's release is made durable before its PUBCOMP [MQTT-4.3.3-2]
    peer = Peer()
    c = _client(peer)
    taken = []
    durable = []
    seen = []  # (PUBACK+PUBREC, PUBCOMP) the peer had when sync() ran

    def sync():
        seen.append((peer.got[PUBACK] + peer.got[PUBREC], peer.got[PUBCOMP]))
        durable.extend(taken)
        del taken[:]

    c.set_callback(lambda t, m: taken.append(m))
    c.set_sync(sync)
    c.connect()
    co = peer.conn
    co.tlen = encode_publish(co.tx, 0, b"s", b"a", 1, 1)
    co.tlen = encode_publish(co.tx, co.tlen, b"s", b"b", 1, 2)
    co.tlen = encode_publish(co.tx, co.tlen, b"s", b"c", 2, 3)
    co.flush()
    c.poll(1000)  # the whole burst in one call (poll(0) stops at the next ms)
    assert seen == [(0, 0)]  # one sync for the burst, before any ack left
    assert durable == [b"a", b"b", b"c"]
    _settle(c, peer, PUBCOMP, 1)
    assert peer.got[PUBACK] == 2 and peer.got[PUBREC] == 1
    assert seen == [(0, 0), (3, 0)]  # the PUBREL's sync, before its PUBCOMP
    c.ping()  # nothing delivered or released: no sync for other traffic
    _settle(c, peer, PINGREQ, 1)
    assert len(seen) == 2


def test_raw_callback():
    peer = Peer()
    c = _client(peer)
    got = []
    c.set_callback(lambda pkt, red: got.append((bytes(pkt.topic), bytes(pkt.payload), pkt.qos, red)),
                   raw=True)
    c.connect()
    peer.publish(b"r", b"raw", 2)
    c.wait_msg()
    assert got == [(b"r", b"raw", 2, False)]


def test_unknown_pubrel_answered():
    peer = Peer()
    c = _client(peer)
    c.connect()
    co = peer.conn
    co.tlen = encode_ack(co.tx, 0, PUBREL, 4242)
    co.flush()
    _settle(c, peer, PUBCOMP, 1)


def test_subscribe_unsubscribe():
    peer = Peer()
    c = _client(peer)
    c.connect()
    try:
        c.subscribe(b"a/#", 1)
        raise AssertionError("subscribe without a callback was accepted")
    except AssertionError as e:
        assert "set_callback" in str(e)
    c.set_callback(lambda t, m: None)
    assert c.subscribe(b"a/#", 1) == 1
    assert c.subscribe("b/+", 2) == 2
    c.unsubscribe(b"a/#")
    assert peer.got[SUBSCRIBE] == 2 and peer.got[UNSUBSCRIBE] == 1


def test_ping():
    peer = Peer()
    c = _client(peer)
    c.connect()
    c.ping()
    assert c.ping_at is not None
    _settle(c, peer, PINGREQ, 1)
    c.poll(0)
    assert c.ping_at is None


def test_resend_after_reconnect():
    peer = Peer()
    peer.ack = False
    c = _client(peer, window=4)
    c.connect(clean_session=False)
    c.publish(TOPIC, b"q1", qos=1, wait=False)
    c.publish(TOPIC, b"q2", qos=2, wait=False)
    _settle(c, peer, PUBLISH, 2)
    peer.drop()
    peer.ack = True
    peer.session = True
    c.connect(clean_session=False)
    _settle(c, peer, PUBREL, 1)
    for _ in range(5):
        c.poll(0)
    assert c.inflight() == 0
    assert peer.published[2:] == [(TOPIC, b"q1", 1, True), (TOPIC, b"q2", 2, True)]


def test_without_a_store_qos_0_1_2_within_a_connection():
    peer = Peer()
    c = _client(peer, store=False)
    assert type(c.store).__name__ == "NoStore"
    box = Inbox()
    c.set_callback(box.cb)
    c.connect()
    assert c.publish(TOPIC, b"zero") == 0
    assert c.publish(TOPIC, b"one", qos=1) and c.inflight() == 0
    assert c.publish(TOPIC, b"two", qos=2) and c.inflight() == 0
    assert peer.got[PUBREL] == 1
    for q in (1, 2, 2):
        peer.publish(TOPIC, b"in", q)
        for _ in range(4):
            c.poll(0)
    assert box.msgs == [(TOPIC, b"in")] * 3 and peer.got[PUBREC] == 2


def test_without_a_store_nothing_is_resent_after_a_reconnect():
    # store=False: what was in flight when the link dropped is gone (as
    # with umqtt.simple), and its ids do not hold the window
    peer = Peer()
    peer.ack = False
    c = _client(peer, window=2, store=False)
    c.connect(clean_session=False)
    c.publish(TOPIC, b"q1", qos=1, wait=False)
    c.publish(TOPIC, b"q2", qos=2, wait=False)
    _settle(c, peer, PUBLISH, 2)
    assert c.inflight() == 2
    peer.drop()
    peer.ack = True
    peer.session = True
    c.connect(clean_session=False)
    for _ in range(5):
        c.poll(0)
    assert len(peer.published) == 2 and c.inflight() == 0
    assert c.publish(TOPIC, b"q3", qos=1) and peer.published[2] == (TOPIC, b"q3", 1, False)


# ---------------------------------------------------------------- no allocation

def _steady(c, peer, box, n):
    # one round of everything the steady state does
    p = peer
    for _ in range(n):
        c.publish(TOPIC, MSG, False, 0)
        c.publish(TOPIC, MSG, False, 1)
        c.publish(TOPIC, MSG, False, 2)
        p.publish(TOPIC, MSG, 0)
        c.wait_msg()
        p.publish(TOPIC, MSG, 1)
        p.publish(TOPIC, MSG, 2)
        want = box.n + 2
        for _ in range(20):
            if box.n >= want and p.got[PUBCOMP] >= p.pid:
                break
            c.poll(0)
        c.ping()
        for _ in range(20):
            if c.ping_at is None:
                break
            c.poll(0)


def _one(c, peer, box, what):
    # the parts of _steady one at a time, to say which one allocates
    p = peer
    if what == "publish qos0":
        c.publish(TOPIC, MSG, False, 0)
        c.poll(0)
    elif what == "publish qos1":
        c.publish(TOPIC, MSG, False, 1)
    elif what == "publish qos2":
        c.publish(TOPIC, MSG, False, 2)
    elif what == "receive qos0":
        p.publish(TOPIC, MSG, 0)
        c.wait_msg()
    elif what == "receive qos1":
        p.publish(TOPIC, MSG, 1)
        c.poll(0)
        c.poll(0)
    elif what == "receive qos2":
        p.publish(TOPIC, MSG, 2)
        for _ in range(4):
            c.poll(0)
    elif what == "ping":
        c.ping()
        c.poll(0)
        c.poll(0)


PARTS = ("publish qos0", "publish qos1", "publish qos2", "receive qos0",
         "receive qos1", "receive qos2", "ping")


def test_steady_state_allocates_nothing():
    _allocates_nothing()


def test_steady_state_without_a_store_allocates_nothing():
    _allocates_nothing(store=False)


def _allocates_nothing(**kw):
    if not MICROPYTHON:
        raise SkipTest("needs micropython.heap_lock")
    peer = Peer()
    peer.record = False
    c = _client(peer, keepalive=60, **kw)  # the keepalive checks run too
    box = RawCount()
    c.set_callback(box.cb, raw=True)
    c.connect()
    _steady(c, peer, box, 3)  # warm-up
    # each part alone first, so a failure names the part that allocates
    for what in PARTS:
        _one(c, peer, box, what)
        try:
            locked(_one, c, peer, box, what)
        except MemoryError:
            raise AssertionError("allocates: " + what)
    sent = peer.got[PUBLISH]
    n0 = box.n
    locked(_steady, c, peer, box, 20)
    assert peer.got[PUBLISH] - sent == 60
    assert box.n - n0 == 60 and box.redelivered == 0
    assert c.inflight() == 0 and c.ping_at is None


def test_pubrec_d_message_not_resent_when_session_lost():
    # A QoS 2 message the broker acknowledged with PUBREC (PUBREL sent),
    # then a broker that lost the session: the sender MUST NOT send the
    # PUBLISH again once it sent the PUBREL [MQTT-4.3.3-1] (the broker
    # took the message at PUBREC and may have forwarded it already), and a
    # PUBREL would meet nothing. The message is complete: dropped from the
    # store and reported done.
    peer = Peer()
    c = _client(peer, reconnect=True)
    acks = []
    c.set_ack_callback(lambda pid, rc: acks.append((pid, rc)))
    c.connect(clean_session=False)
    peer.ack = False  # the peer does not answer the PUBLISH
    pid = c.publish(b"out/2", b"keep", qos=2, wait=False)
    for _ in range(5):
        peer.step()
    c.store.out_rel(pid)  # as if its PUBREC had arrived
    assert c.inflight() == 1
    before = len(peer.published)
    rels = peer.got[PUBREL]
    peer.drop()
    peer.session = False  # the broker lost it
    peer.ack = True
    c.connect(clean_session=False)
    for _ in range(5):
        c.poll(0)
        peer.step()
    assert peer.published[before:] == [], peer.published[before:]
    assert peer.got[PUBREL] == rels
    assert c.inflight() == 0
    assert acks == [(pid, 0)], acks
    assert c.ack_pid == pid


def test_pubrec_d_message_released_when_session_kept():
    # The same with the session kept: PUBREL again, no PUBLISH [MQTT-4.4.0-1]
    peer = Peer()
    c = _client(peer, reconnect=True)
    c.connect(clean_session=False)
    peer.ack = False
    pid = c.publish(b"out/2", b"keep", qos=2, wait=False)
    for _ in range(5):
        peer.step()
    c.store.out_rel(pid)
    before = len(peer.published)
    rels = peer.got[PUBREL]
    peer.drop()
    peer.session = True
    peer.ack = True
    c.connect(clean_session=False)
    _settle(c, peer, PUBREL, rels + 1)  # the peer answers it with PUBCOMP
    for _ in range(5):
        c.poll(0)
    assert peer.published[before:] == []
    assert c.inflight() == 0


def test_subscribe_cut_off_by_a_reconnect_is_asked_again():
    # The link drops between SUBSCRIBE and SUBACK: after reconnecting (the
    # session kept), the client asks again with the same packet id, so the
    # waiting caller gets its answer instead of a timeout.
    peer = Peer()
    c = _client(peer, reconnect=True, backoff_ms=(1, 2))
    c.set_callback(lambda t, m: None)
    c.connect(clean_session=False)
    peer.answer_sub = False
    pid = c.subscribe_start(b"cmd/#", 1)
    peer.step()
    assert peer.sub_pids == [pid] and c.wait_pid == pid
    peer.drop()
    peer.session = True
    peer.answer_sub = True
    for _ in range(200):
        c.poll(1)
        if c.wait_pid != pid:
            break
    assert c.wait_pid == 0, "no SUBACK after the reconnect"
    assert peer.sub_pids == [pid, pid]
    assert c.subscribe_end(b"cmd/#") == 1
