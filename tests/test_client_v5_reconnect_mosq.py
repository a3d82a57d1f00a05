"""What the client asks and sends again on the next connection, against
mosquitto 2.0 (tests/relay.py breaks the link and shows each CONNECT):
a subscription it refused itself is not kept, so the reconnects come up and
re-subscribe the others; a SUBSCRIBE (and an UNSUBSCRIBE) above the server's
Maximum Packet Size is refused before it is sent, and a kept filter above the next server's
is left out of the re-subscribe; a stored message with the application's
Topic Alias reaches a server that allows none; Clean Start on the first
connect only when a session expiry keeps the session (level 4: clean every
time). tests/portable/test_client_v5_reconnect.py has the same rules
against a scripted server."""
import time

import pytest

from umqtt3.client import MQTTClient
from umqtt3.codec import MQTTError

import paho_peer  # tests/paho_peer.py
from relay import Relay

pytestmark = pytest.mark.interop
HOST = "127.0.0.1"


def _client(port, cid, level=5, **kw):
    return MQTTClient(cid, HOST, port, level=level, reconnect=True, backoff_ms=(50, 200),
                      timeout_ms=5000, **kw)


def _poll_until(c, cond, seconds=10):
    end = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < end, "timed out"
        c.poll(10)


def _clean_flags(r):
    # the Clean Start flag of each CONNECT through relay r
    flags = []

    def seen(connect):
        i = 1
        while connect[i] & 0x80:
            i += 1
        flags.append(connect[i + 1 + 7] & 2 != 0)  # after "MQTT" and the level
        return None  # passed on to the broker

    r.answer = seen
    return flags


@pytest.mark.parametrize("level", [4, 5])
def test_a_subscription_the_client_refused_is_not_asked_again(broker, level):
    # a bad filter [MQTT-4.7.1-2] and (MQTT 5) Retain Handling 3 [MQTT-3.8.3-5]
    # are refused unsent; kept, they failed the re-subscribe at every CONNACK
    r = Relay(broker.port)
    got = []
    c = _client(r.port, "rs%d" % level, level)
    c.set_callback(lambda t, m: got.append(m))
    try:
        c.connect()
        with pytest.raises(MQTTError) as e:
            c.subscribe(b"rs/#/x", 1)
        assert e.value.code == 0x82
        if level == 5:
            with pytest.raises(MQTTError) as e:
                c.subscribe(b"rs/a", 1, retain_handling=3)
            assert e.value.code == 0x82
        assert not c.subs and c.is_connected()
        c.publish(b"rs/kept", b"retained", retain=True, qos=1)
        c.subscribe(b"rs/kept", 1)
        _poll_until(c, lambda: got == [b"retained"])
        r.break_links()
        # the broker kept no session (clean): the re-subscribe brings the
        # retained message again, once the reconnect is up
        _poll_until(c, lambda: len(got) == 2)
        assert c.is_connected() and list(c.subs) == [b"rs/kept"]
    finally:
        c.reconnect = False
        c.disconnect()
        r.close()


def test_a_subscribe_above_the_server_maximum_packet_size_is_refused_unsent(broker_factory):
    # [MQTT-3.2.2-15]: MQTTError 0x95 as for a PUBLISH; sent, mosquitto
    # closed the connection (DISCONNECT 0x95) and the kept filter did it
    # again at every reconnect
    b = broker_factory(extra=["max_packet_size 100"])
    got = []
    c = _client(b.port, "mp-sub")
    c.set_callback(lambda t, m: got.append(m))
    try:
        c.connect()
        assert c.max_packet == 100
        with pytest.raises(MQTTError) as e:
            c.subscribe(b"mp/" + b"x" * 100, 1)
        assert e.value.code == 0x95
        assert not c.subs and c.is_connected() and c.disconnect_rc is None
        c.subscribe(b"mp/x", 1)
        # so is an UNSUBSCRIBE. (Sent, mosquitto closed on it, and the
        # reconnect's resume refused the request it cut off, also 0x95: no
        # reconnect here, so that a drop raises OSError)
        c.reconnect = False
        with pytest.raises(MQTTError) as e:
            c.unsubscribe(b"mp/" + b"x" * 100)
        assert e.value.code == 0x95
        assert list(c.subs) == [b"mp/x"] and c.is_connected() and c.disconnect_rc is None
        c.reconnect = True
        c.publish(b"mp/x", b"still up", qos=1)
        _poll_until(c, lambda: got == [b"still up"])
        assert c.disconnect_rc is None
    finally:
        c.reconnect = False
        c.disconnect()


def test_a_stored_message_with_a_topic_alias_reaches_a_server_that_allows_none(broker_factory):
    # the alias mapping lasted the first connection [MQTT-3.3.2-7]; the
    # next server's Topic Alias Maximum is 0 [MQTT-3.3.2-9]: the resend goes
    # with the topic alone. (It went with the alias: DISCONNECT 0x94 at
    # every reconnect.)
    b1 = broker_factory()
    port = b1.port
    c = _client(port, "alias-resend")
    acks = []
    c.set_ack_callback(lambda pid, rc: acks.append(rc))
    w = None
    try:
        c.connect()
        assert c.alias_max == 10
        # an empty topic on the alias at QoS 1 is refused: a stored copy
        # could not be resent on the next connection
        c.publish(b"al/t", b"first", qos=1, props={0x23: 9})
        with pytest.raises(MQTTError) as e:
            c.publish(b"", b"no", qos=1, props={0x23: 9})
        assert e.value.code == 0x94 and c.inflight() == 0 and c.is_connected()
        b1.stop()
        _poll_until(c, lambda: not c.is_connected())
        c.publish(b"al/t", b"stored", qos=1, props={0x23: 9}, wait=False)
        assert c.inflight() == 1
        b2 = broker_factory(port=port, extra=["max_topic_alias 0"])
        w = paho_peer.Watch(b2.port, "al/#", "alias-watch")
        _poll_until(c, lambda: c.inflight() == 0, 20)
        assert w.take(1)[0][:2] == ("al/t", b"stored")
        assert acks[-1] < 0x80 and c.alias_max == 0 and c.disconnect_rc is None
    finally:
        if w is not None:
            w.close()
        c.reconnect = False
        c.disconnect()


@pytest.mark.parametrize("level", [4, 5])
def test_clean_start_on_the_first_connect_only_when_the_session_is_kept(broker, level):
    # MQTT 5 with a session expiry: the reconnect sends Clean Start 0 and
    # resumes the session the broker kept [MQTT-3.1.2-5], with what was
    # published meanwhile; Clean Start 1 discarded it [MQTT-3.1.2-4]. At
    # 3.1.1 a clean session ends with the link: clean every time
    r = Relay(broker.port)
    flags = _clean_flags(r)
    got = []
    kw = {"session_expiry": 3600} if level == 5 else {}
    c = _client(r.port, "cs%d" % level, level, **kw)
    c.set_callback(lambda t, m: got.append(m))
    try:
        assert c.connect() is False
        c.subscribe(b"cs/cmd", 1)
        r.refusing = True  # an outage: the link goes, no connection until open()
        r.break_links()
        _poll_until(c, lambda: not c.is_connected())
        paho_peer.publish(broker.port, "cs/cmd", b"during the outage", qos=1)
        r.open()
        _poll_until(c, c.is_connected)
        if level == 5:
            assert flags == [True, False] and c.session_present
            _poll_until(c, lambda: got == [b"during the outage"])
        else:
            assert flags == [True, True] and not c.session_present
        c.disconnect()
        c.connect()  # a new connect(): a clean session again
        assert flags[-1] is True and not c.session_present
    finally:
        c.reconnect = False
        c.disconnect()
        r.close()


def test_a_kept_filter_too_large_for_the_next_server_is_forgotten(broker_factory):
    # the broker comes back (session lost) with max_packet_size 100: the
    # re-subscribe leaves out the filter whose SUBSCRIBE is larger and
    # reports it (0, 0x95) [MQTT-3.2.2-15]; sent, mosquitto closed on it
    # and CONNACK's reset backoff made a reconnect storm (227 in 5 s)
    b = broker_factory()
    got = []
    acks = []
    c = _client(b.port, "resub-big")
    c.set_callback(lambda t, m: got.append(m))
    c.set_ack_callback(lambda pid, rc: acks.append((pid, rc)))
    try:
        c.connect()
        c.subscribe(b"big/" + b"x" * 150, 1)
        c.subscribe(b"ok/#", 1)
        b.stop()
        b.extra = ["max_packet_size 100"]
        b._write_conf()
        b.start()
        _poll_until(c, lambda: acks)
        assert acks == [(0, 0x95)] and list(c.subs) == [b"ok/#"]
        paho_peer.publish(b.port, "ok/x", b"re-subscribed", qos=1)
        _poll_until(c, lambda: got == [b"re-subscribed"])
        assert c.is_connected() and c.max_packet == 100 and c.disconnect_rc is None
        connects = b.log_text().count("as resub-big ")
        assert connects == 2, connects
    finally:
        c.reconnect = False
        c.disconnect()
