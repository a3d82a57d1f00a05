# Power loss at every step of the bridge (tests/test_bridge_crash.py's world)
# with an MQTT 5 upstream that, from its second connection on, keeps no
# retained messages (CONNACK Retain Available 0 [MQTT-3.2.2-14]), and a
# node whose QoS 2 messages are all retained. Every power loss of the
# gateway makes a new connection, on which what the bridge's client holds
# from the first one (sent retained) goes again lowered: under its packet
# id, without the retain flag (bridge.Bridge._lower). The upstream still
# takes QoS 2 and knows the ids it holds, so it must take every message
# exactly once, in order [MQTT-4.3.3-2], and never one retained after a
# CONNACK that said it keeps none. A refusal (the client's own resend)
# loses such a message; a resend under a new packet id duplicates it.
# And with an upstream that takes at most QoS 1 from its second connection
# on (AWS IoT Core's limit): every message at least once, in order of first
# arrival, none above QoS 1 [MQTT-3.2.2-11].
import pytest

import test_bridge_crash
from crashsim import BrokerTx, explore, sized, ack, key_of
from test_bridge_crash import BridgeWorld, FileBridgeWorld, Upstream
from umqtt3.bridge import Bridge, install
from umqtt3.codec import CONNECT, PUBLISH, PUBACK

pytestmark = pytest.mark.powerloss


def _varint(b, i):
    n = sh = 0
    while True:
        x = b[i]
        i += 1
        n |= (x & 0x7F) << sh
        if not x & 0x80:
            return n, i
        sh += 7


def _retained(out, start):
    # the node's PUBLISHes among out[start:], with the retain flag
    for i in range(start, len(out)):
        if out[i][0] >> 4 == PUBLISH:
            out[i] = bytes((out[i][0] | 1,)) + out[i][1:]


class RetainTx(BrokerTx):
    """The node (crashsim.BrokerTx): its QoS 2 messages retained."""

    def copy(self):
        b = BrokerTx.copy(self)
        b.__class__ = RetainTx
        return b

    def send(self, out):
        n = len(out)
        BrokerTx.send(self, out)
        _retained(out, n)

    def resend(self, out):
        n = len(out)
        BrokerTx.resend(self, out)
        _retained(out, n)


class Upstream5(Upstream):
    """The upstream at MQTT 5: Retain Available 0 from the second CONNACK
    on. A PUBLISH is checked for the retain flag, then taken as the 3.1.1
    stand-in takes it (its property length dropped)."""

    links = 0  # CONNECTs so far
    LIMITS = b"\x25\x00"  # the CONNACK's properties from the second connection on

    def copy(self):
        u = Upstream.copy(self)
        u.__class__ = type(self)
        u.links = self.links
        return u

    def packet(self, data, out):
        t = data[0] >> 4
        if t == CONNECT:
            self.links += 1
            props = self.LIMITS if self.session else b""
            out.append(bytes((0x20, 3 + len(props), 1 if self.session else 0, 0, len(props)))
                       + props)
            self.session = True
            return
        if t == PUBLISH:
            if data[0] & 1 and self.links > 1:
                self.errors.append("retained where none is kept [MQTT-3.2.2-14]: %r" % data)
            rl, i = _varint(data, 1)
            j = i + 2 + ((data[i] << 8) | data[i + 1]) + 2  # past the topic and the id
            pn, k = _varint(data, j)
            body = data[i:j] + data[k + pn:]
            data = bytes((data[0], len(body))) + body  # as 3.1.1 (short packets)
        Upstream.packet(self, data, out)


class UpstreamQoS1(Upstream5):
    """Maximum QoS 1 (AWS IoT Core's) from the second CONNACK on, retained
    messages kept: a QoS 1 PUBLISH is handed on and acknowledged; one
    under an id held from a QoS 2 PUBLISH ends that id's QoS 2 flow (the
    sender gave it up), as mosquitto takes a reused id."""

    LIMITS = b"\x24\x01"

    def packet(self, data, out):
        q = (data[0] >> 1) & 3
        if data[0] >> 4 != PUBLISH or q == 2 and self.links < 2:
            Upstream5.packet(self, data, out)
            return
        if q != 1:
            self.errors.append("QoS %d above the upstream's Maximum QoS 1: %r" % (q, data))
            return
        rl, i = _varint(data, 1)
        j = i + 2 + ((data[i] << 8) | data[i + 1])
        pid = (data[j] << 8) | data[j + 1]
        pn, k = _varint(data, j + 2)
        self.held.pop(pid, None)
        self.delivered.append(key_of(bytes(data[i + 2:j]), bytes(data[k + pn:])))
        out.append(ack(PUBACK, pid))


def _world(base, up=Upstream5):
    class LowerWorld(base):
        def __init__(self, cfg=None, seed=1):
            base.__init__(self, cfg, seed)
            n, window, ids, inflight, up_window = self.CONFIGS[seed]
            self.tx = RetainTx(n, window, ids)
            self.up = up(up_window)

        def _final(self):
            if up is Upstream5:
                base._final(self)
                return
            # lowered to QoS 1: at least once, in order of first arrival
            p = self.problems
            p.extend(self.tx.errors)
            p.extend(self.up.errors)
            d = self.up.delivered
            first = [k for i, k in enumerate(d) if k not in d[:i]]
            if first != list(range(self.tx.n)):
                p.append("upstream got %r: lost %r" % (d, sorted(set(range(self.tx.n)) - set(d))))
    return LowerWorld


def _install5(b, cfgs, files=None):
    return install(b, [dict(cfgs[0], level=5)], files)


@pytest.fixture
def level5(monkeypatch):
    # the crash world's bridge at MQTT 5
    monkeypatch.setattr(test_bridge_crash, "install", _install5)


WORLDS = pytest.mark.parametrize("base", [
    pytest.param(BridgeWorld, id="log", marks=pytest.mark.slow),
    pytest.param(FileBridgeWorld, id="files")])


@WORLDS
def test_runs_without_a_crash(level5, base):
    w = _world(base)()
    done, steps = w.boot(0)
    assert done and not w.problems, w.problems
    assert w.up.links == 1 and w.up.delivered == list(range(w.tx.n))


@WORLDS
def test_power_loss_then_an_upstream_without_retain(level5, base):
    st = explore(_world(base), None, *sized((1, 2, 3)), double=False)
    print("bridge crash points, upstream lowering its limits: %d single, interrupted: %r"
          % (st.single, st.kinds))
    assert st.single > 500
    assert not st.failures, st.failures[:3]


@WORLDS
def test_power_loss_then_an_upstream_of_maximum_qos_1(level5, base):
    # AWS IoT Core's limit: what the client held at QoS 2 goes again at QoS
    # 1 under its packet id, at least once, in order
    st = explore(_world(base, UpstreamQoS1), None, *sized((1, 2, 3)), double=False)
    print("bridge crash points, upstream lowering to QoS 1: %d single" % st.single)
    assert st.single > 500
    assert not st.failures, st.failures[:3]


def test_teeth_refused_held_messages_are_lost(level5, monkeypatch):
    # without the bridge's hook the client's resend refuses (0x9A) what it
    # sent retained on the first connection: a power loss loses messages
    monkeypatch.setattr(Bridge, "_lower", lambda self, body, rc: None)
    for up in (Upstream5, UpstreamQoS1):
        st = explore(_world(FileBridgeWorld, up), None, (1,), 0, double=False, stop=True)
        assert st.failures, "no power loss lost a held message"
        assert "lost" in str(st.failures[0][2]), st.failures[0]
