# What the client keeps for the next connection, and how it asks again,
# against a scripted server (v5_peer, no sockets): Clean Start on the first
# connect only when the session outlives the link; a stored message resent
# without the application's Topic Alias; a subscription the client itself
# refused (a bad filter, bad options, above the server's Maximum Packet
# Size) never kept for the re-subscribe, and a kept one above the next
# server's Maximum Packet Size forgotten there; an UNSUBSCRIBE above it
# refused unsent by both drivers, the subscription kept; an empty topic at
# QoS 1/2 refused.
# Runs under pytest and under MicroPython.
from support import raises
from v5_peer import Server
from umqtt3.client import MQTTClient, MQTTException
from umqtt3.aio import AsyncClient
from umqtt3.codec import MQTTError, encode_publish
from umqtt3.memstore import MemoryStore


def _client(s, level=5, **kw):
    return MQTTClient("rc", "peer", level=level, connect_link=s.link, timeout_ms=2000,
                      reconnect=True, backoff_ms=(0, 0), **kw)


def _until(c, cond, n=200):
    for _ in range(n):
        if cond():
            return
        c.poll(0)
    assert cond()


def _reconnected(c, s, links):
    s.drop()
    _until(c, lambda: s.links == links and c.is_connected())


def test_clean_start_on_the_first_connect_only_when_the_session_outlives_the_link():
    # a session kept after the link goes is resumed by the automatic
    # reconnects (Clean Start 0 [MQTT-3.1.2-5]), which Clean Start 1 would
    # discard [MQTT-3.1.2-4]; connect() asks for a clean one again. No
    # session kept (3.1.1's clean session, MQTT 5 without an expiry): clean
    # every time
    for level, kw, want in ((5, {"session_expiry": 3600}, [True, False, False, True]),
                            (5, {}, [True, True, True, True]),
                            (5, {"session_expiry": 0}, [True, True, True, True]),
                            (4, {}, [True, True, True, True])):
        s = Server(level=level)
        c = _client(s, level, **kw)
        c.connect()
        _reconnected(c, s, 2)
        _reconnected(c, s, 3)
        c.disconnect()
        c.connect()
        assert s.cleans == want, (level, kw, s.cleans)
    # a persistent session from the start stays one
    s = Server()
    c = _client(s, session_expiry=60)
    c.connect(clean_session=False)
    _reconnected(c, s, 2)
    assert s.cleans == [False, False]


def test_a_stored_message_is_resent_without_the_application_topic_alias():
    # a Topic Alias mapping lasts one connection [MQTT-3.3.2-7] and the
    # next server may allow none [MQTT-3.3.2-9]: the resend names the topic
    s = Server(connack_props=bytes([0x22, 0, 10]))  # Topic Alias Maximum 10
    c = _client(s)
    acks = []
    c.set_ack_callback(lambda pid, rc: acks.append(rc))
    c.connect()
    c.publish(b"t/a", b"1", qos=1, wait=False, props={0x23: 9, 0x01: 1})
    s.connack_props = b""  # the next connection: no alias allowed
    _reconnected(c, s, 2)  # (the server never read the first PUBLISH)
    _until(c, lambda: acks)
    assert acks == [0] and s.publishes == [(b"t/a", bytes([0x01, 1]), b"1")], s.publishes


def test_a_stored_empty_topic_is_refused_at_the_resend():
    # only a store written before publish() refused it holds one: nothing
    # names its topic on a new connection, so it completes refused (0x94)
    # and what is behind it goes out
    st = MemoryStore(8, 128, 8)
    buf = bytearray(64)
    n = encode_publish(buf, 0, b"", b"old", 1, 1, False, False, 5, {0x23: 9})
    st.out_add(1, None, buf, 0, n)
    n = encode_publish(buf, 0, b"t/b", b"next", 1, 2, False, False, 5, None)
    st.out_add(2, None, buf, 0, n)
    s = Server(connack_props=bytes([0x22, 0, 10]))
    c = _client(s, store=st)
    acks = []
    c.set_ack_callback(lambda pid, rc: acks.append((pid, rc)))
    c.connect()
    _until(c, lambda: len(acks) == 2)
    assert acks == [(1, 0x94), (2, 0)], acks
    assert [p[0] for p in s.publishes] == [b"t/b"] and c.inflight() == 0


def test_an_empty_topic_at_qos_1_or_2_is_refused_unsent_unstored():
    # it stands on an alias of this connection: a stored copy could not be
    # resent on the next [MQTT-3.3.2-7]. At QoS 0 (never stored) it goes
    s = Server(connack_props=bytes([0x22, 0, 10]))
    c = _client(s)
    c.connect()
    c.publish(b"t/a", b"x", qos=1, props={0x23: 9})
    for qos in (1, 2):
        e = raises(MQTTError, c.publish, b"", b"y", False, qos, None, False, {0x23: 9})
        assert e.code == 0x94, e.code
    assert c.inflight() == 0 and not c.waits
    c.publish(b"", b"z", props={0x23: 9})
    _until(c, lambda: len(s.publishes) == 2)
    assert [(p[0], p[2]) for p in s.publishes] == [(b"t/a", b"x"), (b"", b"z")]
    assert c.is_connected() and s.links == 1


def test_a_subscription_the_client_refused_is_not_asked_again():
    # a bad filter [MQTT-4.7.1-2], Retain Handling 3 [MQTT-3.8.3-5] (a
    # Protocol Error), both levels: refused before anything is sent, and
    # not kept, so the re-subscribe of the next connection sends only the
    # good filter (and is not refused at every reconnect)
    for level, bad in ((4, ((b"a/#/b", 1), (b"a", 3))),
                       (5, ((b"a/#/b", 1), (b"a", 1 | 3 << 4), (b"a", 3)))):
        s = Server(level=level)
        c = _client(s, level)
        c.set_callback(lambda t, m: None)
        c.connect()
        for f, opts in bad:
            e = raises(MQTTError, c.subscribe, f, opts & 3, False, False, opts >> 4)
            assert e.code == 0x82, e.code
        assert not c.subs and not s.subscribes
        assert c.subscribe(b"good", 1) == 1
        _reconnected(c, s, 2)
        _until(c, lambda: len(s.subscribes) == 2)
        assert s.subscribes == [[(b"good", 1)], [(b"good", 1)]], s.subscribes
        assert list(c.subs) == [b"good"]


def test_a_subscribe_above_the_server_maximum_packet_size_is_refused():
    # [MQTT-3.2.2-15], as a PUBLISH is: MQTTError 0x95, unsent, not kept
    s = Server(connack_props=bytes([0x27, 0, 0, 0, 40]))  # Maximum Packet Size 40
    c = _client(s)
    c.set_callback(lambda t, m: None)
    c.connect()
    f = b"f/" + b"x" * 31  # 41 bytes: 2 of fixed header, the packet id (2), no
    # properties (1), the filter (2 + 33), the options (1)
    for sub_id in (None, {0x0B: 7}):
        e = raises(MQTTError, c.subscribe, f, 1, False, False, 0, sub_id)
        assert e.code == 0x95, e.code
    assert not c.subs and not s.subscribes
    assert c.subscribe(f[:-1], 1) == 1  # 40 bytes: fits
    assert len(s.subscribes) == 1 and c.is_connected()


def test_an_unsubscribe_above_the_server_maximum_packet_size_is_refused():
    # [MQTT-3.2.2-15], as a SUBSCRIBE is: MQTTError 0x95, nothing sent, the
    # subscription kept. It was made before the server's maximum fell (a
    # session kept across the reconnect: no re-subscribe forgets it)
    s = Server()
    s.session = True
    c = _client(s, session_expiry=3600)
    c.set_callback(lambda t, m: None)
    c.connect(clean_session=False)
    big = b"f/" + b"x" * 32  # an UNSUBSCRIBE of 41 bytes: 2 of fixed header,
    # the packet id (2), no properties (1), the filter (2 + 34)
    c.subscribe(big, 1)
    s.connack_props = bytes([0x27, 0, 0, 0, 40])  # Maximum Packet Size 40
    _reconnected(c, s, 2)
    assert c.max_packet == 40 and list(c.subs) == [big]
    e = raises(MQTTError, c.unsubscribe, big)
    assert e.code == 0x95, e.code
    assert list(c.subs) == [big] and not s.unsubscribes and c.wait_pid == 0
    assert c.unsubscribe(big[:-1]) == 0  # 40 bytes: fits
    assert s.unsubscribes == [[big[:-1]]] and c.is_connected() and s.links == 2


async def test_an_unsubscribe_above_the_server_maximum_packet_size_is_refused_async():
    # the asyncio driver: the same refusal, nothing sent
    s = Server(connack_props=bytes([0x27, 0, 0, 0, 40]))
    c = AsyncClient("rc", "peer", level=5, connect_link=s.link, timeout_ms=2000,
                    interval_ms=1)
    c.set_callback(lambda t, m: None)
    await c.connect()
    await c.subscribe(b"a", 1)
    big = b"f/" + b"x" * 32
    try:
        await c.unsubscribe(big)
        raise AssertionError("did not raise MQTTError")
    except MQTTError as e:
        assert e.code == 0x95, e.code
    assert list(c.subs) == [b"a"] and not s.unsubscribes and c.wait_pid == 0
    assert await c.unsubscribe(big[:-1]) == 0
    assert await c.unsubscribe(b"a") == 0
    assert s.unsubscribes == [[big[:-1]], [b"a"]] and not c.subs and c.is_connected()
    await c.disconnect()


def test_a_kept_filter_too_large_for_the_next_server_is_forgotten():
    # the re-subscribe after a lost session meets the new server's Maximum
    # Packet Size as a first subscribe() does [MQTT-3.2.2-15]: a filter
    # above it is not sent (the server would close, at every reconnect) but
    # forgotten, reported to the ack callback as (0, 0x95), as a resent
    # PUBLISH too large is; the others are asked again, the link kept
    s = Server()
    c = _client(s)
    c.set_callback(lambda t, m: None)
    acks = []
    c.set_ack_callback(lambda pid, rc: acks.append((pid, rc)))
    c.connect()
    big = b"f/" + b"x" * 31  # a SUBSCRIBE of 41 bytes
    for f in (b"a", big, b"b"):
        c.subscribe(f, 1)
    s.connack_props = bytes([0x27, 0, 0, 0, 40])  # Maximum Packet Size 40
    _reconnected(c, s, 2)
    _until(c, lambda: len(s.subscribes) == 5)
    for _ in range(10):
        c.poll(0)
    assert s.subscribes[3:] == [[(b"a", 1)], [(b"b", 1)]], s.subscribes
    assert acks == [(0, 0x95)] and list(c.subs) == [b"a", b"b"]
    assert s.links == 2 and c.is_connected()


def test_a_cut_off_subscribe_too_large_for_the_next_server_is_refused():
    # the SUBSCRIBE a caller waits for, cut off by the link: asked again on
    # the next connection unless above its Maximum Packet Size, then
    # answered 0x95 without a send, and not kept
    s = Server()
    c = _client(s)
    c.set_callback(lambda t, m: None)
    c.connect()
    big = b"f/" + b"x" * 31
    c.subscribe(b"a", 1)
    c.subscribe_start(big, 1)  # sent; the server has not read it
    s.connack_props = bytes([0x27, 0, 0, 0, 40])
    _reconnected(c, s, 2)
    _until(c, lambda: len(s.subscribes) == 2)
    assert c.wait_pid == 0
    e = raises(MQTTException, c.subscribe_end, big)
    assert e.args[0] == 0x95, e.args
    assert s.subscribes == [[(b"a", 1)], [(b"a", 1)]] and list(c.subs) == [b"a"]
    assert s.links == 2 and c.is_connected()
