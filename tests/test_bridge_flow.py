# The bridge's forwarding while the uplink is up, with and without a store:
# nothing a node sends is dropped, refused or stuck for the gateway's own
# pace (the queue's limits are for outages). Over in-memory pipes
# (tests/portable/test_bridge.py's World), a gateway Broker on a store
# directory where one is named.
from broker_harness import Memory, Raw, Timeout
from test_bridge import World, _sub
from umqtt3.bridge import install
from umqtt3.broker import Broker
from umqtt3.codec import PUBACK, PUBREC, PUBREL, PUBCOMP
from umqtt3.transport import Pipe


def _world(tmp_path, rules, store=True, gw_kw=None, **cfg):
    d = tmp_path / "gw"
    d.mkdir(parents=True)
    kw = dict(gw_kw or {})
    if store:
        kw["store"] = str(d)
    w = World(rules, gw_kw=kw, up_kw={"max_packet": 8192}, **cfg)
    w.run(50)
    assert w.bridge.up
    return w


def test_qos0_goes_up_with_a_store_and_no_qos0_queue(tmp_path):
    # bridge_queue_qos0 0 is what may wait while the uplink is down; with
    # it up every QoS 0 message goes up, with a store as without one
    for store in (True, False):
        w = _world(tmp_path / str(store), ["x/# out 1"], store, queue_qos0=0)
        sub = _sub(w, "x/#", 0)
        node = w.open_on(w.gw)
        node.connect("n1")
        for i in range(3):
            node.publish("x/%d" % i, b"m", 0)
        w.run(100)
        assert [m[0] for m in sub.messages(3)] == [b"x/0", b"x/1", b"x/2"], store
        assert sub.nothing() and w.bridge.dropped == 0


def test_qos0_burst_with_a_store_loses_nothing_while_up(tmp_path):
    # the broker reads up to 16 packets of a node per step: more than the
    # 4 that may wait; they go up as they come, nothing waits
    w = _world(tmp_path, ["x/# out 1"], queue_qos0=4)
    sub = _sub(w, "x/#", 0)
    node = w.open_on(w.gw)
    node.connect("n1")
    for i in range(200):
        node.publish("x/b", b"%d" % i, 0)
    w.run(400)
    got = [m[1] for m in sub.messages(200)]
    assert got == [b"%d" % i for i in range(200)]
    assert w.bridge.dropped == 0


def test_a_large_qos1_message_without_a_store_goes_up_and_so_does_the_next(tmp_path):
    # the upstream client's RAM pool holds any message the broker takes
    # (max_packet): a 2000-byte one does not stop the queue behind it, also
    # at the largest window the settings take (the pool was 1 KiB shared by
    # the window: at 1024 a slot of one byte)
    for window in (8, 1024):
        w = _world(tmp_path / str(window), ["x/# out 1"], False, gw_kw={"max_packet": 4096},
                   window=window)
        sub = _sub(w, "x/#", 1)
        node = w.open_on(w.gw)
        node.connect("n1")
        node.publish("x/big", b"B" * 2000, 1, pid=1)
        node.expect(PUBACK, 1)
        node.publish("x/small", b"after", 1, pid=2)
        node.expect(PUBACK, 2)
        w.run(200)
        got = [(m[0], len(m[1])) for m in sub.messages(2)]
        assert got == [(b"x/big", 2000), (b"x/small", 5)], (window, got)
        assert not w.bridge.q.keys


class Relay(World):
    """A gateway with two bridges, `a` to upstream A (self.up) and `b` to
    upstream B (self.up2); B down at first unless down2=False."""

    def __init__(self, store, a, b, down2=True):
        Memory.__init__(self)
        self.up = Broker(port=None, sys_interval=0)
        self.up2 = Broker(port=None, sys_interval=0)
        self.gw = Broker(port=None, sys_interval=0, store=store)
        self.down = False
        self.down2 = down2
        self.links = []
        a = dict(a, name="a", link=self.uplink, backoff_ms=(1, 1))
        b = dict(b, name="b", link=self.uplink2, backoff_ms=(1, 1))
        self.hub = install(self.gw, [a, b])
        self.a, self.b = self.hub.all

    def uplink2(self):
        if self.down2:
            raise OSError(111)
        x, y = Pipe.pair(4096)
        self.up2.attach(y)
        return x

    def poll_once(self, t=0):
        return self.gw.poll_once(0) + self.up.poll_once(0) + self.up2.poll_once(0)


def test_a_relayed_message_is_not_acknowledged_upstream_when_the_next_queue_is_full(tmp_path):
    # [MQTT-4.3.2] / [MQTT-4.3.3] the receiver owns a message once it sent
    # PUBACK / PUBREC: bridge a acknowledges upstream only what it could
    # route, so what b's full queue cannot take stays with upstream A, which
    # sends it again on a's next connection [MQTT-4.4.0-1], until b's queue
    # has room. QoS 1 at least once, QoS 2 exactly once [MQTT-4.3.3-2].
    for store in (True, False):
        for qos in (1, 2):
            d = tmp_path / ("%s%d" % (store, qos))
            d.mkdir()
            w = Relay(str(d) if store else None, {"rules": ["r/# in %d" % qos]},
                      {"rules": ["r/# out %d" % qos], "queue_size": 1})
            w.run(50)
            assert w.a.up and not w.b.up
            w.side = w.up2
            sub = Raw(w, transport=w)
            sub.connect("far")
            sub.subscribe(1, [("r/#", qos)])
            ctl = w.open_on(w.up)
            ctl.connect("ctl")
            for i in range(3):
                ctl.publish("r/x", b"m%d" % i, qos, pid=i + 1)
                if qos == 1:
                    ctl.expect(PUBACK, i + 1)
                else:
                    ctl.expect(PUBREC, i + 1)
                    ctl.ack(PUBREL, i + 1)
                    ctl.expect(PUBCOMP, i + 1)
            w.run(100)
            assert len(w.b.q.keys) == 1 and w.b.refused >= 1
            w.down2 = False
            w.run(600)
            got = []
            while len(set(got)) < 3 and len(got) < 20:
                got += [m[1] for m in sub.messages(1)]
            assert sorted(set(got)) == [b"m0", b"m1", b"m2"], (store, qos, got)
            if qos == 2:
                assert got == [b"m0", b"m1", b"m2"] and sub.nothing(), (store, got)


def test_two_both_bridges_at_311_do_not_pass_echoes_on():
    # At 3.1.1 each upstream sends the bridge its own message back (no No
    # Local); that echo must not go up the other bridge, whose upstream
    # would echo it back in turn: one node message, once to each upstream.
    # Plain 3.1.1 connections (try_private false); the bridge bit's case is
    # tests/test_bridge_private.py's
    w = Relay(None, {"rules": ["x/# both 1"], "try_private": False},
              {"rules": ["x/# both 1"], "try_private": False}, down2=False)
    w.run(50)
    assert w.a.up and w.b.up
    subs = []
    for side in (w.up, w.up2):
        w.side = side
        s = Raw(w, transport=w)
        s.connect("far")
        s.subscribe(1, [("x/#", 1)])
        subs.append(s)
    local = w.open_on(w.gw)
    local.connect("app")
    local.subscribe(1, [("x/#", 1)])
    node = w.open_on(w.gw)
    node.connect("n1")
    node.publish("x/a", b"one", 1, pid=1)
    node.expect(PUBACK, 1)
    w.run(400)
    for s in subs:
        assert [m[1] for m in s.messages(1)] == [b"one"]
        assert s.nothing()
    # locally: the node's and each upstream's echo (3.1.1, documented)
    assert [m[1] for m in local.messages(3)] == [b"one"] * 3
    assert local.nothing()
    assert (w.a.sent, w.b.sent, w.a.received, w.b.received) == (1, 1, 1, 1)


def test_a_relay_from_one_upstream_to_another_still_goes_at_311(tmp_path):
    # only a possible echo stays local: a's `in` topic that a does not
    # send up goes on up b (plain 3.1.1 connections, as above)
    w = Relay(None, {"rules": ["r/# in 1"], "try_private": False},
              {"rules": ["r/# both 1"], "try_private": False}, down2=False)
    w.run(50)
    w.side = w.up2
    far = Raw(w, transport=w)
    far.connect("far")
    far.subscribe(1, [("r/#", 1)])
    ctl = w.open_on(w.up)
    ctl.connect("ctl")
    ctl.publish("r/x", b"relayed", 1, pid=1)
    ctl.expect(PUBACK, 1)
    w.run(300)
    assert [m[1] for m in far.messages(1)] == [b"relayed"]
    assert far.nothing()


def test_properties_kept_on_the_store_and_an_expired_message_not_sent(tmp_path):
    # MQTT 5: the queue record keeps a node's properties; a message whose
    # Message Expiry Interval passed while the uplink was down is not sent
    # [MQTT-3.3.2-5], one that has time left goes with what is left
    # [MQTT-3.3.2-6]; QoS 0 waiting in RAM the same
    import time
    from test_broker5_connect import sub5
    from umqtt3 import props as P
    from umqtt3.codec import PUBLISH, encode_publish
    from umqtt3.compat import ticks_diff, ticks_ms
    w = _world(tmp_path, ["x/# out 1"], level=5)
    w.side = w.up
    far = Raw(w, transport=w)
    far.connect("far", level=5)
    sub5(far, 1, [("x/#", 1)])
    w.cut()
    w.run(10)
    node = w.open_on(w.gw)
    node.connect("n5", level=5)
    short = P.encode({P.MESSAGE_EXPIRY: 1, P.USER_PROPERTY: [("k", "v")]})
    long_ = P.encode({P.MESSAGE_EXPIRY: 100, P.USER_PROPERTY: [("k", "v")]})
    t0 = ticks_ms()  # before the gateway took them: the bridge's clock
    for i, (t, pr) in enumerate((("x/a", short), ("x/b", long_), ("x/c", None))):
        node.put(encode_publish, t, b"m", 1, i + 1, False, False, 5, pr)
        node.expect(PUBACK, i + 1)
    node.put(encode_publish, "x/z", b"m", 0, 0, False, False, 5, short)
    w.run(10)
    time.sleep(1.1)
    w.down = False
    w.run(300)
    got = {}
    while True:
        try:
            m = far.recv(0.3)
        except Timeout:
            break
        if m.type != PUBLISH:
            continue
        got[bytes(m.topic)] = P.parse(m.buf, m.props_off, m.props_len)
        if m.qos:
            far.ack(PUBACK, m.pid)
    waited = ticks_diff(ticks_ms(), t0)  # at least x/b's wait (busy: over 2 s)
    assert sorted(got) == [b"x/b", b"x/c"], got
    # the whole seconds it waited taken off: the sleep's one, at most all
    assert 100 - waited // 1000 <= got[b"x/b"][P.MESSAGE_EXPIRY] <= 99, waited
    assert got[b"x/b"][P.USER_PROPERTY] == [("k", "v")]
    assert w.bridge.expired == 2
