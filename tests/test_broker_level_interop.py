"""A persistent session resumed at another protocol level, with paho-mqtt
against umqtt3's broker and mosquitto in the same test: what was in flight
comes again [MQTT-4.4.0-1] well-formed for the new level, with the right
payloads, QoS 2 state kept (a PUBREL due is a PUBREL at either level).

paho withholds its acknowledgements where the test says: PUBACK and
PUBCOMP through its manual_ack option, PUBREC (which paho always sends)
through a subclass that skips it. Byte-level checks of the same are in
tests/portable/test_broker_resume_level.py.
"""
import queue
import threading

import pytest

from mosq import MOSQUITTO, Broker as Mosquitto
from test_broker_harness import running

mqtt = pytest.importorskip("paho.mqtt.client")
from paho.mqtt.properties import Properties  # noqa: E402
from paho.mqtt.packettypes import PacketTypes  # noqa: E402

pytestmark = pytest.mark.interop
need_mosquitto = pytest.mark.skipif(MOSQUITTO is None, reason="mosquitto not installed")
TIMEOUT = 10
CID = "resume-level"


class _Client(mqtt.Client):
    # paho answers every QoS 2 PUBLISH with PUBREC; this one skips the
    # first hold_rec of them, so that the PUBLISH stays in flight
    hold_rec = 0

    def _send_pubrec(self, mid):
        if self.hold_rec:
            self.hold_rec -= 1
            return mqtt.MQTTErrorCode.MQTT_ERR_SUCCESS
        return mqtt.Client._send_pubrec(self, mid)


class Sub:
    """The persistent subscriber at `level`; hold: acknowledge nothing
    (no PUBACK, no PUBCOMP, no PUBREC for the first hold_rec QoS 2)."""

    def __init__(self, port, level, hold, hold_rec=0):
        kw = {"protocol": mqtt.MQTTv5} if level == 5 else {"clean_session": False}
        c = self.c = _Client(mqtt.CallbackAPIVersion.VERSION2, client_id=CID, **kw)
        c.hold_rec = hold_rec
        c.manual_ack_set(hold)
        self.msgs = queue.Queue()
        self.log = []
        self.up = threading.Event()
        self.gone = threading.Event()
        self.present = None
        c.on_message = lambda c, u, m: self.msgs.put((m.topic, bytes(m.payload), m.qos, m.dup))
        c.on_log = lambda c, u, lvl, s: self.log.append(s)
        c.on_connect = self._on_connect
        c.on_disconnect = lambda *a: self.gone.set()
        if level == 5:
            p = Properties(PacketTypes.CONNECT)
            p.SessionExpiryInterval = 3600
            c.connect("127.0.0.1", port, keepalive=30, clean_start=False, properties=p)
        else:
            c.connect("127.0.0.1", port, keepalive=30)
        c.loop_start()
        assert self.up.wait(TIMEOUT), "no CONNACK"

    def _on_connect(self, c, u, flags, rc, props):
        self.present = flags.session_present
        self.up.set()

    def get(self, n):
        return sorted(self.msgs.get(timeout=TIMEOUT) for _ in range(n))

    def logged(self, what, n):
        # n log lines that start with what, within the timeout
        ev = threading.Event()
        for _ in range(TIMEOUT * 20):
            got = [s for s in self.log if s.startswith(what)]
            if len(got) >= n:
                return got
            ev.wait(0.05)
        raise AssertionError("%d x %r not logged: %r" % (n, what, self.log))

    def close(self):
        # DISCONNECT goes after what paho queued before it (the acks of step
        # 3): wait until it is written and the link closed, or loop_stop()
        # may end paho's thread first and leave the acks unsent, the broker
        # then sending those messages again in step 4
        try:
            self.c.disconnect()
            self.gone.wait(TIMEOUT)
        finally:
            self.c.loop_stop()


def _publish(port):
    # a: QoS 1, b: QoS 2, c: QoS 2, d: QoS 1, from an MQTT 5 publisher
    # with properties (which a 3.1.1 subscriber never sees)
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="pub", protocol=mqtt.MQTTv5)
    c.connect("127.0.0.1", port, keepalive=30)
    c.loop_start()
    try:
        for t, q in (("a", 1), ("b", 2), ("c", 2), ("d", 1)):
            p = Properties(PacketTypes.PUBLISH)
            p.ContentType = "text/plain"
            p.UserProperty = ("k", "v" * 20)
            info = c.publish("lv/" + t, ("payload " + t).encode(), q, properties=p)
            info.wait_for_publish(TIMEOUT)
            assert info.is_published()
    finally:
        c.disconnect()
        c.loop_stop()


def _m(t, q, dup):
    return ("lv/" + t, ("payload " + t).encode(), q, dup)


def _levels(port, path):
    first, second, third = path
    s = Sub(port, first, True)
    s.c.subscribe("lv/#", 2)
    s.logged("Received SUBACK", 1)
    s.close()
    # 1: a, d delivered and not acknowledged; b's PUBREC withheld; c
    # delivered on PUBREL, PUBCOMP withheld
    s = Sub(port, first, True, hold_rec=1)
    try:
        _publish(port)
        assert s.get(3) == [_m("a", 1, False), _m("c", 2, False), _m("d", 1, False)]
        s.logged("Received PUBLISH (d0, q2", 2)
    finally:
        s.close()
    # 2: at the other level, still acknowledging nothing but b's PUBREC:
    # a, b, d again with DUP, b delivered on its PUBREL; c's PUBREL again
    s = Sub(port, second, True)
    try:
        assert s.present
        assert s.get(3) == [_m("a", 1, True), _m("b", 2, True), _m("d", 1, True)]
        s.logged("Received PUBREL", 2)
    finally:
        s.close()
    # 3: back at the first level, acknowledging: a, d again; PUBREL for b, c
    s = Sub(port, third, False)
    try:
        assert s.get(2) == [_m("a", 1, True), _m("d", 1, True)]
        s.logged("Received PUBREL", 2)
        s.logged("Sending PUBCOMP", 2)
        s.logged("Sending PUBACK", 2)
    finally:
        s.close()
    # 4: everything was completed: nothing comes
    s = Sub(port, second, False)
    try:
        with pytest.raises(queue.Empty):
            s.msgs.get(timeout=0.5)
        assert not [x for x in s.log if x.startswith("Received PUBREL")]
    finally:
        s.close()


@need_mosquitto
@pytest.mark.parametrize("path", [(4, 5, 4), (5, 4, 5)])
def test_in_flight_resent_well_formed_at_the_other_level(tmp_path, path):
    with running() as b:
        _levels(b.port, path)
    m = Mosquitto(tmp_path / "mosq")
    m.start()
    try:
        _levels(m.port, path)
    finally:
        m.stop()
