# Back-pressure on a node while the bridge's uplink is up: a node's QoS 1/2
# PUBLISH that the bridge's full queue cannot take is held (not routed, not
# acknowledged, the connection read no further) until the upstream's acks
# make room, then handled as if it had just arrived; a lost uplink turns the
# hold into today's refusal. Over in-memory pipes with an upstream Broker
# that the test can freeze (not polled: its acks wait, the uplink stays up);
# the same file under CPython and the WebAssembly MicroPython.
from broker_harness import Timeout
from umqtt3.codec import PUBACK, PUBREC, PUBREL, PUBCOMP, DISCONNECT, encode_publish
from umqtt3.compat import ticks_add, ticks_ms
from test_bridge import World, _sub


class Slow(World):
    """A gateway whose upstream freezes while `frozen`: nothing of it is
    polled, so the bridge's messages go unacknowledged on a link that stays
    up. The gateway's clock is the real one plus what advance() added."""

    frozen = False

    def __init__(self, rules, gw_kw=None, **cfg):
        self.skew = 0
        kw = {"clock": self.clock}
        kw.update(gw_kw or {})
        World.__init__(self, rules, gw_kw=kw, **cfg)

    def clock(self):
        return ticks_add(ticks_ms(), self.skew)

    def advance(self, ms):
        while ms > 0:  # in steps under the broker's 100 ms timer period
            self.skew += 50
            self.gw.poll_once(0)
            ms -= 50

    def poll_once(self, t=0):
        return self.gw.poll_once(0) + (0 if self.frozen else self.up.poll_once(0))


def quiet(node):
    """Nothing comes to the node, and its connection stays open."""
    try:
        p = node.recv()
    except Timeout:
        return True
    assert False, "got %r" % (None if p is None else p.type)


def held(level=4, qos=1, clean=True):
    # window 1, queue 2: the upstream frozen, the node's 4th message (QoS
    # qos) finds the queue full with the uplink up
    w = Slow(["s/# out 2"], queue_size=2, window=1)
    w.run(50)
    assert w.bridge.up
    sub = _sub(w, "s/#")
    node = w.open_on(w.gw)
    node.connect("n1", keepalive=1, level=level, clean=clean)
    w.frozen = True
    for i in range(3):  # one in the client's window, two on the queue
        node.put(encode_publish, "s/a", b"m%d" % i, 1, i + 1, level=level)
        node.expect(PUBACK, i + 1)
    node.put(encode_publish, "s/a", b"m3", qos, 4, level=level)
    return w, sub, node


def test_a_full_queue_with_the_uplink_up_holds_the_node_then_routes_in_order():
    w, sub, node = held()
    node.publish("s/a", b"m4", 2, pid=5)  # behind it, unread in the link
    assert quiet(node)  # not acknowledged, not closed
    b = w.bridge
    assert (b.held, b.refused, len(w.gw.holds)) == (1, 0, 1)
    assert len(b.q.keys) == 2  # nothing of m3 queued
    figures = {}
    w.hub.sys(lambda k, v: figures.__setitem__(k, v))
    assert figures["bridge/up/held"] == 1 and figures["bridge/up/refused"] == 0
    w.frozen = False  # the upstream's acks make room: m3 goes, then m4
    node.expect(PUBACK, 4)
    node.expect(PUBREC, 5)
    node.ack(PUBREL, 5)
    node.expect(PUBCOMP, 5)
    got = sub.messages(5)
    assert [m[1] for m in got] == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert [m[2] for m in got] == [1, 1, 1, 1, 2]
    assert sub.nothing()  # each once [MQTT-4.3.3-2]
    assert b.refused == 0 and len(w.gw.holds) == 0 and not b.q.keys
    # $SYS publish/messages/received and publish/bytes/received: each
    # message counted once, when it was handled, not also when held
    assert (w.gw.received, w.gw.pub_in) == (5, 10)


def test_a_held_qos2_id_is_not_taken_so_its_resend_is_routed_once():
    w, sub, node = held(qos=2, clean=False)
    assert quiet(node)
    s = w.gw.sessions()[b"n1"]
    assert not s.in_has(4)  # not received yet [MQTT-4.3.3-2]
    node.close()  # the node gives up on this connection, m3 unacknowledged
    node = w.open_on(w.gw)
    node.connect("n1", clean=False)  # the held one is taken over [MQTT-3.1.4-2]
    assert len(w.gw.holds) == 0
    node.publish("s/a", b"m3", 2, pid=4, dup=True)  # its resend [MQTT-4.4.0-1]
    assert quiet(node)  # held again: the queue is still full
    w.frozen = False
    node.expect(PUBREC, 4)
    node.ack(PUBREL, 4)
    node.expect(PUBCOMP, 4)
    got = sub.messages(4)
    assert [m[1] for m in got] == [b"m0", b"m1", b"m2", b"m3"]
    assert sub.nothing()  # m3 once


def test_the_uplink_lost_while_held_refuses_as_before():
    w, sub, node = held()
    assert quiet(node)
    w.cut()  # the link breaks with m3 held: the bridge's queue stays full
    assert node.recv() is None  # closed unacknowledged: its client sends m3 again
    b = w.bridge
    assert not b.up and (b.held, b.refused, len(w.gw.holds)) == (1, 1, 0)
    assert len(b.q.keys) == 2  # m1, m2: m3 was not queued


def test_the_uplink_lost_while_held_at_mqtt5_is_quota_exceeded():
    w, sub, node = held(level=5)
    assert quiet(node)
    w.cut()
    p = node.recv()
    assert p is not None and p.type == DISCONNECT and p.rc == 0x97, p  # [MQTT-4.13.1-1]
    assert node.closed() and w.bridge.refused == 1


def test_keepalive_does_not_close_a_held_connection():
    w, sub, node = held()  # keepalive 1 s: closed after 1.5 s of silence [MQTT-3.1.2-24]
    w.advance(4000)
    assert quiet(node)  # its silence is the broker's
    w.frozen = False
    node.expect(PUBACK, 4)
    w.advance(1000)
    assert quiet(node)  # counted from the end of the hold
    w.advance(1000)
    assert node.closed()  # then silence is its own again


def test_a_full_local_queue_is_still_refused_with_the_uplink_up():
    # the hold is the bridge's alone: a subscriber's full queue refuses as before
    w = Slow(["s/# out 1"], gw_kw={"max_queued": 1}, queue_size=50)
    w.run(50)
    slow = w.open_on(w.gw)
    slow.connect("slow", clean=False)
    slow.subscribe(1, [("s/#", 1)])
    slow.close()
    w.run(5)
    node = w.open_on(w.gw)
    node.connect("n1")
    node.publish("s/a", b"q", 1, pid=1)
    node.expect(PUBACK, 1)
    node.publish("s/a", b"refused", 1, pid=2)
    assert node.recv() is None  # closed unacknowledged, as without a bridge
    assert w.bridge.held == 0 and len(w.gw.holds) == 0 and w.gw.queue_full == 1


def test_the_oldest_hold_goes_first():
    # B, accepted before A, keeps a backlog; A's PUBLISH was held first. The
    # room the upstream's acks make goes to the oldest hold, then B's: A's
    # message is not passed over by everything B sends after it was held
    w = Slow(["s/# out 1"], queue_size=2, window=1)
    w.run(50)
    sub = _sub(w, "s/#")
    b = w.open_on(w.gw)
    b.connect("B")  # accepted first: first in the broker's list
    a = w.open_on(w.gw)
    a.connect("A")
    w.frozen = True
    for i in range(3):  # B fills the window and the queue
        b.put(encode_publish, "s/b", b"b%02d" % i, 1, i + 1)
        b.expect(PUBACK, i + 1)
    a.put(encode_publish, "s/a", b"a00", 1, 1)
    assert quiet(a) and len(w.gw.holds) == 1  # A held
    for i in range(3, 23):  # B's backlog, sent after A's message was held
        b.put(encode_publish, "s/b", b"b%02d" % i, 1, i + 1)
    w.run(5)
    assert len(w.gw.holds) == 2
    w.frozen = False
    got = [m[1] for m in sub.messages(24)]
    # what was queued before the holds, then A's, then B's backlog in order
    assert got == [b"b00", b"b01", b"b02", b"a00"] + [b"b%02d" % i for i in range(3, 23)], got
    a.expect(PUBACK, 1)
    assert not w.gw.holds
