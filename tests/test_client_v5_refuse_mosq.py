"""MQTT 5: what a client may not send is refused locally, against mosquitto 2.0.
Without the checks each of these made mosquitto close the connection and,
with reconnect=True, the stored message or the kept subscription was sent
again on every reconnect: the client never got its other messages through.
Also DISCONNECT's reason code and properties, and disconnect_rc describing
only the connection that just ended."""
import os
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))

from umqtt3.client import MQTTClient  # noqa: E402
from umqtt3.codec import MQTTError  # noqa: E402

pytestmark = pytest.mark.interop
HOST = "127.0.0.1"
V5_TIMEOUT_MS = 2000  # the v5 fixture's (tests/conftest.py): refusals come at once


def _sink(v5, port, topic, cid):
    got = []
    s = v5(port, cid)
    s.set_callback(lambda t, m: got.append(m))
    s.connect()
    s.subscribe(topic, 1)
    return s, got


def _run(clients, seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for c in clients:
            c.poll(10)


def _run_until(clients, cond, seconds=10):
    """Poll until cond() holds (what must come: a busy broker may take
    longer than any fixed wait), at most `seconds`."""
    end = time.monotonic() + seconds
    while not cond() and time.monotonic() < end:
        for c in clients:
            c.poll(10)


@pytest.mark.parametrize("bad, code", [
    ({0x11: 5}, 0x81),  # Session Expiry Interval: not a PUBLISH property (2.2.2.2): malformed
    ({0x0B: 3}, 0x82),  # Subscription Identifier: the server's [MQTT-3.3.4-6]
    ({0x23: 0}, 0x94),  # Topic Alias 0 [MQTT-3.3.2-8]
    ({0x23: 50}, 0x94),  # above mosquitto's Topic Alias Maximum (10) [MQTT-3.3.2-9]
    ({0x01: 2}, 0x82),  # Payload Format Indicator is 0 or 1
])
def test_bad_publish_property_is_refused_unsent_and_unstored(broker, v5, bad, code):
    s, got = _sink(v5, broker.port, b"rp/#", "rp-sink")
    c = v5(broker.port, "rp-pub", reconnect=True, backoff_ms=(50, 100))
    c.connect(clean_session=False)
    with pytest.raises(MQTTError) as e:
        c.publish(b"rp/x", b"bad", qos=1, props=bad, wait=False)
    assert e.value.code == code and "PUBLISH property 0x%02x" % list(bad)[0] in e.value.reason
    assert c.inflight() == 0  # not stored: nothing to resend
    c.publish(b"rp/x", b"good", qos=1)
    _run([c, s], 0.5)
    assert got == [b"good"] and c.is_connected()
    assert broker.log_text().count("New client connected") == 2  # no reconnect


def test_bad_subscription_property_is_refused_before_it_is_kept(broker, v5):
    c = v5(broker.port, "rs-sub", reconnect=True, backoff_ms=(50, 100))
    c.set_callback(lambda t, m: None)
    c.connect()
    c.subscribe(b"rs/ok", 1)
    for bad, code in (({0x0B: 0}, 0x82), ({0x0B: 1 << 28}, 0x81), ({0x11: 1}, 0x81),
                      ({0x0B: [1, 2]}, 0x82)):
        with pytest.raises(MQTTError) as e:
            c.subscribe(b"rs/x", 1, props=bad)
        assert e.value.code == code and "SUBSCRIBE property 0x" in e.value.reason
    assert list(c.subs) == [b"rs/ok"]  # not asked again after a reconnect
    _run([c], 0.5)
    assert c.is_connected() and broker.log_text().count("New client connected") == 1
    assert c.subscribe(b"rs/y", 1, props={0x0B: 268435455, 0x26: [("k", "v")]}) == 1


def test_bad_will_property_is_refused_at_connect(broker, v5):
    for rec in (False, True):
        c = v5(broker.port, "rw-%d" % rec, reconnect=rec, backoff_ms=(50, 100))
        c.set_last_will(b"rw/w", b"x", props={0x11: 5})
        t0 = time.monotonic()
        with pytest.raises(MQTTError) as e:
            c.connect()
        assert e.value.code == 0x81 and "will property 0x11" in e.value.reason
        assert time.monotonic() - t0 < 1 and not c.is_connected()
    assert broker.log_text().count("New client connected") == 0  # no CONNECT reached it


def test_disconnect_with_will_message(broker, v5):
    # 0x04: the server publishes the will although the client said goodbye
    s, got = _sink(v5, broker.port, b"rd/will", "rd-sink")
    c = v5(broker.port, "rd-c")
    c.set_last_will(b"rd/will", b"bye", qos=1)
    c.connect()
    c.disconnect(0x04)
    _run_until([s], lambda: got)  # the will: once mosquitto has read the DISCONNECT
    assert got == [b"bye"] and not c.is_connected()
    # a plain disconnect() still discards the will [MQTT-3.14.4-3]
    c.connect()
    c.disconnect()
    _run([s], 0.3)
    assert got == [b"bye"]


def test_disconnect_ends_the_session_with_session_expiry_0(broker, v5):
    c = v5(broker.port, "rd-sess", session_expiry=3600)
    c.connect(clean_session=False)
    c.disconnect()
    assert c.connect(clean_session=False) is True  # kept for an hour
    c.disconnect(props={0x11: 0})  # ... unless DISCONNECT ends it now
    assert c.connect(clean_session=False) is False


def test_disconnect_refuses_what_a_client_may_not_send(broker, v5):
    c = v5(broker.port, "rd-bad")  # clean session, no expiry: CONNECT's is 0
    c.connect()
    for rc, pr in ((0x8E, None), (0x05, None), (None, {0x11: 10}), (None, {0x1C: "x"}),
                   (None, {0x02: 1})):
        with pytest.raises(MQTTError) as e:
            c.disconnect(rc, pr)
        assert e.value.code == (0x81 if pr == {0x02: 1} else 0x82)
        assert c.is_connected()  # nothing sent, still connected
    c.disconnect(0, {0x1F: "done", 0x26: [("k", "v")]})
    assert not c.is_connected()
    end = time.monotonic() + 3
    while "rd-bad disconnected" not in broker.log_text() and time.monotonic() < end:
        time.sleep(0.02)  # (mosquitto logs it once it has read the DISCONNECT)
    log = broker.log_text()
    assert "rd-bad disconnected" in log and "protocol error" not in log.lower()
    d = MQTTClient("rd-v4", HOST, broker.port)  # below level 5: no reason code
    d.connect()
    with pytest.raises(MQTTError):
        d.disconnect(0x04)
    d.disconnect()


def test_disconnect_rc_belongs_to_the_connection_that_ended(broker_factory, v5):
    b = broker_factory(extra=["max_packet_size 200"])
    c = v5(b.port, "rc-c")
    c.connect()
    c.max_packet = 0  # (our own check off, so that mosquitto closes)
    c.publish(b"rc/big", b"x" * 300)
    with pytest.raises(OSError):
        _run([c], 3)
    assert c.disconnect_rc == 0x95
    c.connect()
    assert c.disconnect_rc is None  # a new connection: no DISCONNECT yet
    other = v5(b.port, "rc-c")
    other.connect()  # takes the session over: mosquitto 2.0 closes ours without DISCONNECT
    with pytest.raises(OSError):
        _run([c], 3)
    assert c.disconnect_rc is None
