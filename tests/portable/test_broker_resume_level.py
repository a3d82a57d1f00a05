# A persistent session resumed at another protocol level than the one its
# messages in flight were sent at: what is resent [MQTT-4.4.0-1] is built
# for the connection it goes on (MQTT 3.1.1 has no property list after the
# packet id, MQTT 5 has one), byte for byte what a first send at that level
# gives with DUP set, with the same packet ids, in the same order, in the
# same QoS 2 state; also from the broker's store after a restart.
#
# The same bodies run over pipes (pytest, and tests/mp/testrunner.py under
# the WebAssembly MicroPython); tests/test_broker_level_interop.py checks
# the same with paho-mqtt against this broker and mosquitto.
from broker_harness import running, Raw, wait_for, build, tempdir, rmtree
from umqtt3 import props as P
from umqtt3.codec import (encode_publish, encode_subscribe, PUBLISH, SUBACK, PUBACK, PUBREC,
                          PUBREL, PUBCOMP)

EXPIRY = {P.SESSION_EXPIRY: 3600}


def _connect(c, cid, level, **kw):
    if level == 5:
        return c.connect(cid, False, level=5, props=EXPIRY, **kw)
    return c.connect(cid, False, level=level)


def _subscriber(b, cid, level, qos=2):
    # a persistent session subscribed to q/#, its client gone
    with Raw(b) as c:
        _connect(c, cid, level)
        c.put(encode_subscribe, 1, [("q/#", qos)], 0, level, None)
        c.expect(SUBACK, 1)
    _gone(b, cid)


def _gone(b, cid):
    assert wait_for(lambda: b.sessions()[cid.encode()].client is None)


def _publish(b, msgs, level=4):
    # msgs: (topic, payload, qos, MQTT 5 properties or None), acknowledged
    with Raw(b) as p:
        p.connect("pub", level=level)
        pid = 0
        for t, m, q, pr in msgs:
            pid += 1
            p.put(encode_publish, t, m, q, pid, False, False, level, pr if level == 5 else None)
            if q == 1:
                p.expect(PUBACK, pid)
            elif q == 2:
                p.expect(PUBREC, pid)
                p.ack(PUBREL, pid)
                p.expect(PUBCOMP, pid)


def _frames(c, n):
    # the next n packets as they came, bytes and decoded
    out = []
    while len(out) < n:
        p = c.recv()
        assert p is not None, "closed"
        out.append(p)
    return out


def _expect(level, t, m, q, pid, props=None):
    # the PUBLISH a first send at level gives, DUP set (no topic alias)
    return build(encode_publish, t, m, q, pid, False, True, level, props)


MSGS = [("q/a", b"one", 1, {P.CONTENT_TYPE: "text/plain"}),
        ("q/b", b"two", 2, {P.USER_PROPERTY: [("k", "v")]}),
        ("q/c", b"three", 1, None)]


def _first_delivery(b, level, msgs, rec=()):
    # the subscriber at level gets msgs, acknowledges none but answers
    # PUBREC for the QoS 2 ones whose payload is in rec, and goes; the
    # packets as they came
    with Raw(b) as c:
        _connect(c, "s", level)
        ps = _frames(c, len(msgs))
        for p in ps:
            assert p.type == PUBLISH and not p.dup
            if bytes(p.payload) in rec:
                c.ack(PUBREC, p.pid)
                c.expect(PUBREL, p.pid)
    _gone(b, "s")
    return [(bytes(p.topic), bytes(p.payload), p.qos, p.pid) for p in ps]


def _resumed(b, level, sent, rec=(), ack=False):
    # the subscriber back at level: each message again, built for level, in
    # order with its packet id; a PUBREL for those whose PUBREC went; all
    # acknowledged after when ack
    with Raw(b) as c:
        # (3.1 has no session present flag)
        assert _connect(c, "s", level).session_present or level == 3
        for t, m, q, pid in sent:
            p = c.recv()
            assert p is not None
            if m in rec:
                assert bytes(p.buf) == bytes([0x62, 2, pid >> 8, pid & 255]), bytes(p.buf)
            else:
                assert bytes(p.buf) == _expect(level, t, m, q, pid, {} if level == 5 else None), \
                    (level, bytes(p.buf))
        if ack:
            _ack_all(c, sent, rec)
        assert c.nothing()
    _gone(b, "s")


def _ack_all(c, sent, rec=()):
    rels = []
    for t, m, q, pid in sent:
        if m in rec:
            c.ack(PUBCOMP, pid)
        elif q == 1:
            c.ack(PUBACK, pid)
        else:
            c.ack(PUBREC, pid)
            rels.append(pid)
    for pid in rels:
        c.expect(PUBREL, pid)
        c.ack(PUBCOMP, pid)


def test_3_1_1_in_flight_resent_at_5():
    # built at 3.1.1, resent at 5: an empty property list after the id
    with running() as b:
        _subscriber(b, "s", 4)
        _publish(b, MSGS, 4)
        sent = _first_delivery(b, 4, MSGS)
        _resumed(b, 5, sent, ack=True)
        assert b.sessions()[b"s"].inflight() == 0


def test_5_in_flight_resent_at_3_1_1_without_properties():
    # built at 5 with the publisher's properties, resent at 3.1.1 without
    with running() as b:
        _subscriber(b, "s", 5)
        _publish(b, MSGS, 5)
        sent = _first_delivery(b, 5, MSGS)
        _resumed(b, 4, sent, ack=True)


def test_back_and_forth_keeps_ids_order_and_qos2_state():
    # 3.1.1 -> 5 -> 3.1 -> 5, never acknowledged until the end; the QoS 2
    # message whose PUBREC came is a PUBREL at every level
    msgs = MSGS + [("q/d", b"four", 2, None)]
    with running() as b:
        _subscriber(b, "s", 4)
        _publish(b, msgs, 4)
        sent = _first_delivery(b, 4, msgs, rec=(b"four",))
        _resumed(b, 5, sent, rec=(b"four",))
        _resumed(b, 3, sent, rec=(b"four",))
        _resumed(b, 5, sent, rec=(b"four",), ack=True)
        assert b.sessions()[b"s"].inflight() == 0


def test_resumed_at_5_over_its_maximum_packet_size_is_dropped():
    # [MQTT-3.1.2-25]: a frame the client's maximum packet size no longer
    # takes is discarded as if sent; the others go
    big = ("q/big", b"x" * 60, 1, None)
    with running() as b:
        _subscriber(b, "s", 4)
        _publish(b, [MSGS[0], big, MSGS[2]], 4)
        sent = _first_delivery(b, 4, [MSGS[0], big, MSGS[2]])
        with Raw(b) as c:
            props = dict(EXPIRY)
            props[P.MAXIMUM_PACKET_SIZE] = 40
            c.connect("s", False, level=5, props=props)
            for t, m, q, pid in (sent[0], sent[2]):
                p = c.recv()
                assert bytes(p.buf) == _expect(5, t, m, q, pid, {})
                c.ack(PUBACK, pid)
            assert c.nothing()
        assert b.sessions()[b"s"].inflight() == 0


def test_in_flight_and_queued_through_restarts_at_either_level():
    # the store keeps each frame with the level it was built for: after a
    # restart, whatever level the session's record says, each is resent
    # built for the client's level; what waited in the queue too
    d = tempdir("brl")
    try:
        with running(store=d, max_inflight=3, max_inflight_v5=3) as b:
            _subscriber(b, "s", 4)
            _publish(b, MSGS + [("q/d", b"four", 2, None), ("q/e", b"five", 1, None)], 5)
            sent = _first_delivery(b, 4, MSGS)  # q/d and q/e wait in the queue
        with running(store=d, max_inflight=3, max_inflight_v5=3) as b:
            with Raw(b) as c:
                # at 5: the 3 in flight, then the queued ones as a first send
                assert _connect(c, "s", 5).session_present
                for t, m, q, pid in sent:
                    assert bytes(c.recv().buf) == _expect(5, t, m, q, pid, {})
                c.ack(PUBACK, sent[0][3])
                p = c.recv()
                assert p.type == PUBLISH and bytes(p.payload) == b"four" and not p.dup
                assert bytes(p.buf) == build(encode_publish, "q/d", b"four", 2, p.pid, False,
                                             False, 5, {})
                c.ack(PUBREC, p.pid)
                c.expect(PUBREL, p.pid)
                four = p.pid
            _gone(b, "s")
        with running(store=d, max_inflight=3, max_inflight_v5=3) as b:
            with Raw(b) as c:
                # back at 3.1.1 after another restart: frames written at 3.1.1
                # and at 5, a PUBREL due, and the one still queued
                assert _connect(c, "s", 4).session_present
                for t, m, q, pid in sent[1:]:
                    assert bytes(c.recv().buf) == _expect(4, t, m, q, pid)
                c.expect(PUBREL, four)
                _ack_all(c, sent[1:])
                c.ack(PUBCOMP, four)
                p = c.recv()
                assert p.type == PUBLISH and bytes(p.payload) == b"five"
                assert bytes(p.buf) == build(encode_publish, "q/e", b"five", 1, p.pid, False,
                                             False, 4, None)
                c.ack(PUBACK, p.pid)
                assert c.nothing()
            assert wait_for(lambda: b.sessions()[b"s"].inflight() == 0)
    finally:
        rmtree(d)


def _as_type_3(d):
    # the store as a broker that wrote every frame with first byte type 3
    # (the level of the session's record) would have left it
    from broker_harness import listdir, read_file, write_file
    from umqtt3.store import frame, unframe
    for s in listdir(d):
        if s[:1] != "s":
            continue
        for name in listdir(d + "/" + s):
            if name[:1] != "o":
                continue
            path = d + "/" + s + "/" + name
            seq, key, body = unframe(read_file(path))
            body = bytearray(body)
            i = 1 if body[0] == 0xF0 else 0  # a reference keeps the first byte after 0xF0
            assert body[i] >> 4 in (1, 2), body[i]
            body[i] = 0x30 | (body[i] & 15)
            write_file(path, frame(seq, key, bytes(body)))


def test_store_written_before_frames_said_their_level():
    # a store whose frames say no level (type 3) holds them at the level
    # of the session's record, and keeps that level in the record while
    # it may hold such frames, whatever level its client comes back at
    from umqtt3.store import OSFiles
    d = tempdir("brl3")
    try:
        with running(store=d, files=OSFiles()) as b:
            _subscriber(b, "s", 5)
            _publish(b, MSGS, 5)
            with Raw(b) as c:
                _connect(c, "s", 5)
                first = [bytes(p.buf) for p in _frames(c, 3)]  # not acknowledged
            _gone(b, "s")
        _as_type_3(d)
        with running(store=d, files=OSFiles()) as b:
            with Raw(b) as c:
                assert _connect(c, "s", 4).session_present
                for (t, m, q, pr), f in zip(MSGS, first):
                    pid = (f[4 + len(t)] << 8) | f[5 + len(t)]  # after the topic
                    assert bytes(c.recv().buf) == _expect(4, t, m, q, pid)
                c.put(encode_subscribe, 2, [("other", 0)], 0, 4, None)  # the record rewritten
                c.expect(SUBACK, 2)
            _gone(b, "s")
        with running(store=d, files=OSFiles()) as b:
            with Raw(b) as c:
                assert _connect(c, "s", 5).session_present
                for f in first:
                    p = c.recv()
                    assert bytes(p.buf) == bytes([f[0] | 8]) + f[1:]  # as first sent, DUP set
                    c.ack(PUBACK if p.qos == 1 else PUBREC, p.pid)
                c.expect(PUBREL)
    finally:
        rmtree(d)


def _queued_sent_at(level, granted=2):
    # QoS 1/2 messages queued for a 3.1.1 session while it was away (the
    # broker keeps each as its publisher's frame) go out when it comes back
    # at level as a first send at that level gives them: its own packet
    # ids in order, DUP clear [MQTT-3.3.1-3] even where the publisher's
    # frame had it, RETAIN clear [MQTT-3.3.1-9], at 5 an empty property list;
    # at the QoS granted where it is lower [MQTT-3.8.4-6]
    msgs = [("q/a", b"one", 1), ("q/b", b"two", 2), ("q/c", b"x" * 200, 1)]
    with running() as b:
        _subscriber(b, "s", 4, granted)
        with Raw(b) as p:
            p.connect("pub", level=4)
            for i, (t, m, q) in enumerate(msgs):
                pid = 300 + i  # not the ids the subscriber gets
                p.put(encode_publish, t, m, q, pid, False, i == 0, 4, None)
                p.expect(PUBACK if q == 1 else PUBREC, pid)
                if q == 2:
                    p.ack(PUBREL, pid)
                    p.expect(PUBCOMP, pid)
        with Raw(b) as c:
            assert _connect(c, "s", level).session_present
            ps = _frames(c, len(msgs))
            msgs = [(t, m, q if q < granted else granted) for t, m, q in msgs]
            pids = [p.pid for p in ps]
            assert pids == sorted(set(pids)) and 0 not in pids, pids
            for (t, m, q), p in zip(msgs, ps):
                assert bytes(p.buf) == build(encode_publish, t, m, q, p.pid, False, False, level,
                                             {} if level == 5 else None), bytes(p.buf)
            _ack_all(c, [(t, m, q, p.pid) for (t, m, q), p in zip(msgs, ps)])
            assert c.nothing()
        assert b.sessions()[b"s"].inflight() == 0


def test_queued_at_3_1_1_sent_at_3_1_1_as_a_first_send():
    _queued_sent_at(4)


def test_queued_at_3_1_1_sent_at_5_as_a_first_send():
    _queued_sent_at(5)


def test_queued_at_3_1_1_sent_at_the_qos_granted():
    _queued_sent_at(4, 1)
