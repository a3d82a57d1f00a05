# A gateway's bridge with the heap spent: a MemoryError in the bridge's
# step (a dial, the hand-over of its queue to the upstream client, an
# upstream message routed to the gateway's sessions) is counted in nomem
# and drops that bridge's link, as a broken one; nothing leaves
# Broker.poll_once, and nothing accepted is lost: a QoS 1/2 message the
# gateway acknowledged to a node still reaches the upstream, one the
# upstream sent is sent again on the next link [MQTT-4.4.0-1] and reaches
# the local subscriber.
#
# Under MicroPython the heap is spent for real (micropython.heap_lock()
# around the gateway's steps); on CPython a stand-in raises MemoryError
# where the step would allocate.
#
#     node tests/mp/run.mjs --heap 2m tests/mp/testrunner.py test_bridge_heap_spent
import sys

from test_bridge import World, _sub
from test_broker_heap_spent import _raise
from umqtt3.codec import PUBACK

MICROPYTHON = sys.implementation.name == "micropython"


def _spent_steps(w, obj, name, steps):
    # steps of the gateway (and its upstream) with the heap spent in the
    # gateway's: MicroPython, heap_lock around them; CPython, obj.name
    # replaced by a stand-in that raises MemoryError
    if MICROPYTHON:
        import micropython
        for _ in range(steps):
            micropython.heap_lock()
            try:
                w.gw.poll_once(0)
            finally:
                micropython.heap_unlock()
            w.up.poll_once(0)
        return
    old = obj.__dict__.get(name)
    setattr(obj, name, _raise)
    try:
        for _ in range(steps):
            w.poll_once()
    finally:
        if old is not None:
            setattr(obj, name, old)
        else:
            delattr(obj, name)


def test_the_queue_handed_over_with_the_heap_spent_loses_nothing():
    # QoS 1/2 messages a node had acknowledged while the uplink was down
    # wait on the bridge's queue; the heap is spent as the link comes back
    # and the queue is handed to the client: the link drops, the broker
    # goes on, and once the heap is back every message goes up, in order
    w = World(["sensors/# out 2 gw/ site/"])
    w.run(50)
    sub = _sub(w, "site/#", 1)
    node = w.open_on(w.gw)
    node.connect("n1", clean=False)
    w.cut()
    w.run(20)
    assert not w.bridge.up
    for i in range(4):
        node.publish("gw/sensors/t", b"m%d" % i, 1, pid=i + 1)
        node.expect(PUBACK, i + 1)  # accepted: it must arrive
    w.down = False
    _spent_steps(w, w.bridge, "_queue", 40)
    assert w.gw.nomem >= 1 and w.gw.errors == 0
    w.run(400)
    got = sub.messages(4)
    assert [m[1] for m in got] == [b"m%d" % i for i in range(4)], got
    assert w.bridge.up and not w.bridge.q.keys


def test_an_upstream_message_routed_with_the_heap_spent_comes_again():
    # an `in` message for an offline persistent session (queued: that
    # allocates) while the heap is spent: not acknowledged, the link drops,
    # and the upstream sends it again on the next one [MQTT-4.4.0-1]
    w = World(["cmd/# in 1 dev/ site/"])
    w.run(50)
    assert w.bridge.up
    app = w.open_on(w.gw)
    app.connect("app", clean=False)
    app.subscribe(1, [("dev/#", 1)])
    app.close()
    w.run(20)
    u = w.open_on(w.up)
    u.connect("ctl")
    u.publish("site/cmd/reboot", b"now", 1, pid=7)
    u.expect(PUBACK, 7)  # the upstream took it: it owes it to the bridge
    sess = w.gw.sess.by_id[b"app"]
    _spent_steps(w, sess, "send", 10)
    assert w.gw.nomem >= 1 and w.gw.errors == 0
    w.run(400)
    assert w.bridge.up
    app = w.open_on(w.gw)
    assert app.connect("app", clean=False).session_present
    m = app.messages(1)[0]
    assert m[:2] == (b"dev/cmd/reboot", b"now"), m


def test_a_bridge_that_cannot_start_for_want_of_heap_starts_once_it_is_back():
    # the first step starts the bridge (its client's module and store made):
    # with the heap spent there, the bridge has no client yet, and dropping
    # its link must not need one; the broker goes on, and the bridge starts
    # and links once the heap is back
    import umqtt3.bridge as B
    w = World(["a/# out 1"])  # (not started: the first step starts it)
    assert not w.bridge.started and w.bridge.client is None
    if MICROPYTHON:
        import micropython
        micropython.heap_lock()
        try:
            w.gw.poll_once(0)
        finally:
            micropython.heap_unlock()
    else:
        old = B._up_class
        B._up_class = _raise
        try:
            w.gw.poll_once(0)
        finally:
            B._up_class = old
    assert w.gw.nomem >= 1 and w.gw.errors == 0
    w.run(100)
    assert w.bridge.up


class _Clock:
    t = 1000

    def __call__(self):
        return self.t


def _unreachable():
    raise OSError(111)


def test_a_will_cut_short_at_a_second_bridge_goes_up_the_first_once():
    # two bridges take will/# up: "a" linked (a QoS 0 copy goes straight to
    # its client), "b" not (its copy waits in its queue, which allocates);
    # the heap is spent as a node's will is routed: "a" has it, "b" does
    # not; the retry must pass over "a" [MQTT-3.1.2-8] (a will is one
    # message) and still give "b" its copy
    from umqtt3.bridge import install
    clk = _Clock()
    w = World(["will/# out 0"], gw_kw={"clock": clk})
    w.hub = install(w.gw, [{"name": "a", "rules": ["will/# out 0"], "link": w.uplink,
                            "backoff_ms": (1, 1)},
                           {"name": "b", "rules": ["will/# out 0"], "link": _unreachable,
                            "backoff_ms": (60000, 60000)}])
    a, b = w.hub.all
    w.run(50)
    assert a.up and not b.up
    p = w.open_on(w.gw)
    p.connect("prime")
    p.publish("will/xxxx", b"gone")  # a message up first: the bridges' buffers grown
    w.run(20)
    up = _sub(w, "will/#", 0)
    node = w.open_on(w.gw)
    node.connect("node", keepalive=2, will_topic="will/node", will_msg=b"gone")
    w.run(20)
    clk.t += 3100  # its keep-alive timeout [MQTT-3.1.2-24]: its will goes
    _spent_steps(w, b, "put", 10)
    assert w.gw.nomem >= 1 and w.gw.nlate == 1
    clk.t += 1000  # ticks with the heap back: the will goes on
    w.run(50)
    assert w.gw.nlate == 0
    assert [m[:2] for m in up.messages(1)] == [(b"will/node", b"gone")]
    assert up.nothing()  # once
    # and "b" has its copy, after the first message's, waiting for its link
    assert [m[0] for m in b.q0] == [b"will/xxxx", b"will/node"], b.q0
