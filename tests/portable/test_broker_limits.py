# umqtt3's broker at its limits and under abuse: each limit is refused the
# way docs/broker.md says, and a misbehaving client never disturbs the
# others. A malformed packet or a protocol violation closes that one
# connection [MQTT-4.8.0-1].
#
# The same bodies run over pipes with the broker in this thread (pytest and
# tests/mp/testrunner.py under MicroPython) and over real sockets
# (tests/test_broker.py); tests/portable/broker_harness.py is the harness.
from broker_harness import (running, Raw, advance, wait_for, settle, pub_sub, junk,
                            over_sockets)
from umqtt3 import codec
from umqtt3.broker_session import MSG_COST, ENTRY_COST
from umqtt3.codec import (PUBACK, PUBREC, PUBREL, PUBCOMP, PINGREQ, PINGRESP, DISCONNECT,
                          PUBLISH)


def test_max_clients_connack_3():
    with running(max_clients=2) as b:
        with Raw(b) as a, Raw(b) as c, Raw(b) as d:
            assert a.connect("a").rc == 0
            assert c.connect("c").rc == 0
            assert d.connect("d").rc == 3  # server unavailable
            assert d.closed()
            c.simple(PINGREQ)
            c.expect(PINGRESP)
            # a takeover is not a new client
            with Raw(b) as a2:
                assert a2.connect("a").rc == 0


def test_max_packet_closes():
    with running(max_packet=256) as b:
        sub, pub = pub_sub(b, filters=[("t", 0)])
        with Raw(b) as big:
            big.connect("big")
            big.publish("t", b"x" * 300)
            assert big.closed()
        pub.publish("t", b"y" * 200)
        assert sub.messages(1)[0][1] == b"y" * 200


def test_header_claiming_10_mb_closes_at_once():
    # refused as soon as the header is read: none of the body is awaited
    with running(max_packet=1024) as b, Raw(b) as c:
        c.connect("liar")
        head = bytearray(5)
        head[0] = 0x30
        c.send(head[:codec.put_varint(head, 1, 10 * 1024 * 1024)])
        assert c.closed(timeout=2)


def test_max_subscriptions_suback_0x80():
    with running(max_subs=2) as b, Raw(b) as c:
        c.connect("s")
        assert c.subscribe(1, [("a", 1), ("b", 1), ("c", 1)]) == b"\x01\x01\x80"
        assert c.subscribe(2, "a", 2) == b"\x02"  # replacing one is fine
        assert c.subscribe(3, "d", 0) == b"\x80"


def test_max_inflight_holds_the_rest_back():
    with running(max_inflight=2) as b:
        sub, pub = pub_sub(b, filters=[("t", 1)])
        for i in range(5):
            pub.publish("t", b"%d" % i, 1, pid=i + 1)
        first = sub.messages(2, ack=False)
        assert sub.nothing()
        sub.ack(PUBACK, first[0][5])
        third = sub.messages(1, ack=False)
        assert third[0][1] == b"2"
        sub.ack(PUBACK, first[1][5])
        sub.ack(PUBACK, third[0][5])
        assert [m[1] for m in sub.messages(2)] == [b"3", b"4"]


def test_max_qos2_in_closes():
    # 3.1.1 has no receive maximum: a client holding more QoS 2 ids than
    # allowed (no PUBREL) is disconnected
    with running(max_qos2_in=3) as b, Raw(b) as c:
        c.connect("q2")
        for pid in (1, 2, 3):
            c.publish("t", b"x", 2, pid=pid)
            c.expect(PUBREC, pid)
        c.ack(PUBREL, 1)
        c.expect(PUBCOMP, 1)
        c.publish("t", b"x", 2, pid=4)  # 3 held again: still fine
        c.expect(PUBREC, 4)
        c.publish("t", b"x", 2, pid=5)
        assert c.closed()


def test_max_queued_drops_oldest_qos0_first():
    # offline queue of 3 with QoS 0 queueing on: the oldest QoS 0 goes first;
    # QoS 1/2 messages already queued are never pushed out
    with running(max_queued=3, queue_qos0=True) as b:
        with Raw(b) as sub:
            sub.connect("q", clean=False)
            sub.subscribe(1, [("t", 1)])
            sub.simple(DISCONNECT)
        with Raw(b) as pub:
            pub.connect("p")
            for i, (name, q) in enumerate([("A", 0), ("B", 1), ("C", 0), ("D", 1), ("E", 1), ("G", 0)]):
                pub.publish("t", name.encode(), q, pid=i + 1 if q else 0)
                if q:
                    pub.expect(PUBACK, i + 1)
        assert wait_for(lambda: b.dropped == 3)  # A, C, and G: a QoS 0 message finds no room
        assert b.queue_full == 0
        with Raw(b) as sub:
            sub.connect("q", clean=False)
            assert [m[1] for m in sub.messages(3)] == [b"B", b"D", b"E"]
            assert sub.nothing()


def test_full_queue_refuses_qos1_and_qos2_publisher_at_311():
    # never a silent loss of an acknowledged QoS 1/2 message: 3.1.1 has no
    # refusing PUBACK, so the broker closes the publisher's connection with
    # no PUBACK / PUBREC; the publisher resends it (DUP) on its next
    # connection [MQTT-4.4.0-1], and once the subscriber has drained its
    # queue the message is routed and acknowledged [MQTT-4.3.2-2]
    for qos, ack in ((1, PUBACK), (2, PUBREC)):
        with running(max_queued=2) as b:
            with Raw(b) as sub:
                sub.connect("q", clean=False)
                sub.subscribe(1, [("t", 2)])
                sub.simple(DISCONNECT)
            with Raw(b) as pub:
                pub.connect("p", clean=False)
                for pid, name in ((1, b"A"), (2, b"B")):
                    pub.publish("t", name, qos, pid=pid)
                    pub.expect(ack, pid)
                pub.publish("t", b"C", qos, pid=3)
                assert pub.closed()
            assert b.queue_full == 1 and b.dropped == 0 and b.dropped_full == 0
            with Raw(b) as sub:
                sub.connect("q", clean=False)
                got = sub.messages(2)
                assert [m[1] for m in got] == [b"A", b"B"]
                assert sub.nothing()
                with Raw(b) as pub:
                    pub.connect("p", clean=False)
                    pub.publish("t", b"C", qos, pid=3, dup=True)
                    pub.expect(ack, 3)
                    assert [m[1] for m in sub.messages(1)] == [b"C"]
            assert b.queue_full == 1 and b.dropped == 0


def test_full_queue_drops_for_that_session_alone_with_queue_full_drop():
    # queue_full "drop" (mosquitto's way): an absent persistent 3.1.1
    # subscriber whose queue is full does not get the QoS 1/2 message; its
    # publisher gets PUBACK / PUBREC [MQTT-4.3.2-2] [MQTT-4.3.3-2] and
    # every other subscriber gets it. Counted in messages/dropped and
    # messages/dropped/queue_full; logged once until that queue drains.
    for qos, ack in ((1, PUBACK), (2, PUBREC)):
        lines = []
        with running(max_queued=2, queue_full="drop", log=lines.append) as b:
            _offline(b, ["q"], qos=2)
            with Raw(b) as live, Raw(b) as pub:
                live.connect("live")
                live.subscribe(1, [("t/#", 2)])
                pub.connect("p", clean=False)
                for pid, name in enumerate((b"A", b"B", b"C", b"D"), 1):
                    pub.publish("t/x", name, qos, pid=pid)
                    pub.expect(ack, pid)
                    if qos == 2:
                        pub.ack(PUBREL, pid)
                        pub.expect(PUBCOMP, pid)
                assert [m[1] for m in live.messages(4)] == [b"A", b"B", b"C", b"D"]
                assert not pub.closed(timeout=0)
            assert b.queue_full == 0 and b.dropped == 2 and b.dropped_full == 2
            said = [x for x in lines if "dropped for client q" in x]
            assert len(said) == 1, lines
            with Raw(b) as sub:
                sub.connect("q", clean=False)
                assert [m[1] for m in sub.messages(2)] == [b"A", b"B"]
                assert sub.nothing()
                sub.simple(DISCONNECT)
            # drained: the next drop is logged again
            with Raw(b) as pub:
                pub.connect("p")
                for pid, name in enumerate((b"E", b"F", b"G"), 1):
                    pub.publish("t/x", name, qos, pid=pid)
                    pub.expect(ack, pid)
            assert b.dropped_full == 3
            assert len([x for x in lines if "dropped for client q" in x]) == 2, lines


def test_full_queue_of_the_only_subscriber_drops_with_queue_full_drop():
    # the same where the message goes to that one session (fan-in's
    # routing, Session.admit_send): acknowledged, not queued
    with running(max_queued=2, queue_full="drop") as b:
        _offline(b, ["q"])
        with Raw(b) as pub:
            pub.connect("p")
            for pid in (1, 2, 3, 4):
                pub.publish("t/x", b"%d" % pid, 1, pid=pid)
                pub.expect(PUBACK, pid)
        assert b.queue_full == 0 and b.dropped_full == 2 and b.dropped == 2
        with Raw(b) as sub:
            sub.connect("q", clean=False)
            assert [m[1] for m in sub.messages(2)] == [b"1", b"2"]
            assert sub.nothing()


def test_full_queue_of_a_shared_member_drops_for_the_group():
    # queue_full "drop" and a shared group [MQTT-4.8.2 (5.0)]: the member
    # whose turn it is has a full queue: the group does not get that
    # message (it is not passed to the next member); the publisher is
    # acknowledged and a plain subscriber gets every message
    with running(max_queued=2, queue_full="drop") as b:
        _offline(b, ["m1", "m2"], filt="$share/g/t/#")
        with Raw(b) as live, Raw(b) as pub:
            live.connect("live")
            live.subscribe(1, [("t/#", 1)])
            pub.connect("p")
            for pid in range(1, 7):
                pub.publish("t/x", b"%d" % pid, 1, pid=pid)
                pub.expect(PUBACK, pid)
            assert len(live.messages(6)) == 6
        assert b.dropped_full == 2 and b.queue_full == 0
        got = []
        for cid in ("m1", "m2"):
            with Raw(b) as sub:
                sub.connect(cid, clean=False)
                got += [m[1] for m in sub.messages(2)]
                assert sub.nothing()
        assert sorted(got) == [b"1", b"2", b"3", b"4"]


def test_slow_consumer_does_not_stall_others():
    # a subscriber that never reads: its buffers fill, its queue stays
    # bounded, and everyone else gets every message. Over sockets it takes
    # 4 MB to fill the kernel's buffers; a pipe holds 4 KB. It takes QoS 0
    # (a QoS 1 subscriber's full queue refuses the QoS 1 publisher instead:
    # test_full_queue_refuses_qos1_and_qos2_publisher_at_311).
    batches, per = (40, 100) if over_sockets() else (4, 30)
    with running(max_queued=50, max_packet=2048, max_queued_bytes=0, mem_budget=0) as b:
        with Raw(b, rcvbuf=4096) as slow, Raw(b) as fast, Raw(b) as pub:
            slow.connect("slow")
            slow.subscribe(1, [("load/#", 0)])
            fast.connect("fast")
            fast.subscribe(1, [("load/#", 0)])
            pub.connect("pub")
            payload = b"p" * 1000
            for batch in range(batches):
                for i in range(per):
                    pub.publish("load/x", payload, i % 2, pid=i + 1 if i % 2 else 0)
                got = fast.messages(per, timeout=10)
                assert len(got) == per
                for i in range(per // 2):
                    pub.expect(PUBACK)
            s = b.sessions()[b"slow"]
            assert s.queued() <= 50
            assert b.dropped > 0 and b.queue_full == 0
            assert wait_for(lambda: b.connected == 3)


def test_blocked_reader_resumes_when_it_drains():
    # a client whose send buffer is full is not read from (its answers would
    # not fit); once it drains, a packet already read whole is handled even
    # though nothing more arrives to wake poll
    with running(max_packet=1024, max_queued=128, max_queued_bytes=0, mem_budget=0,
                 sndbuf=4096) as b:
        with Raw(b, rcvbuf=4096) as slow, Raw(b) as pub:
            slow.connect("slow")
            slow.subscribe(1, "fill", 0)
            pub.connect("pub")
            s = b.sessions()[b"slow"]
            # frames of a quarter of the send buffer (1112 bytes: max_packet
            # and broker_limits.grow; 278 = 3 + 2 + 4 + 269) fill it to the
            # last byte, and the queue's drain writes whole frames: as
            # long as 4 wait, each refill leaves the buffer full. The buffers
            # under it are not full for good: over TCP they take more when
            # the PINGREQ's ACK reopens the window, or a timer does (up to
            # 2 x SO_SNDBUF + 2 x SO_RCVBUF on Linux, about 17 KB here).
            # 100 queued frames (27.8 KB) outlast that, so the PINGREQ still
            # finds the buffer full whatever the kernel takes meanwhile.
            c = s.client
            tx = b.limits.tx
            assert tx % 4 == 0
            payload = b"z" * (tx // 4 - 9)
            for _ in range(200):
                for _ in range(20):
                    pub.publish("fill", payload)
                settle()
                if s.queued() >= 100 and c.conn.space() == 0:
                    break
            assert s.queued() >= 100 and c.conn.space() == 0
            slow.simple(PINGREQ)
            assert wait_for(lambda: c.blocked)
            # it drains: every message written before the PINGRESP arrives,
            # then the PINGRESP, though the PINGREQ came long before
            n = 0
            for _ in range(2000):
                p = slow.recv()
                assert p is not None
                if p.type == PINGRESP:
                    break
                assert p.type == PUBLISH and len(p.payload) == len(payload)
                n += 1
            assert p.type == PINGRESP
            assert n == b.sent and s.queued() == 0 and not c.blocked


def test_garbage_closes_only_that_connection():
    # whatever the bytes, only their connection closes: at once, or at the
    # connect timeout when they look like the start of a long packet
    with running(connect_timeout_ms=500) as b:
        sub, pub = pub_sub(b, filters=[("t", 0)])
        conns = []
        for data in (b"\x00\x00", b"\xff" * 64, b"GET / HTTP/1.1\r\n\r\n", junk(512, 1),
                     junk(512, 2)):
            g = Raw(b)
            g.send(data)
            conns.append(g)
        advance(700)
        for g in conns:
            assert g.closed()
            g.close()
        pub.publish("t", b"still here")
        assert sub.messages(1)[0][1] == b"still here"


def test_stalled_half_packet_after_connect_is_bounded():
    # a connected client that sends half a PUBLISH and stalls holds only its
    # own buffers; keepalive (1 s, so 1.5 s) then closes it
    with running() as b:
        sub, pub = pub_sub(b, filters=[("t", 0)])
        with Raw(b) as st:
            st.connect("stall", keepalive=1)
            st.send(b"\x30\x7f\x00\x01t")
            pub.publish("t", b"ok")
            assert sub.messages(1)[0][1] == b"ok"
            assert not st.closed(0.1)
            advance(1700)
            assert st.closed()


def _offline(b, cids, qos=1, filt="t/#"):
    # persistent sessions subscribed to filt, their clients gone
    for cid in cids:
        with Raw(b) as s:
            s.connect(cid, clean=False)
            s.subscribe(1, [(filt, qos)])
            s.simple(DISCONNECT)


def test_queued_message_held_once_for_every_session():
    # one message queued by 5 offline sessions is one object: the byte count
    # ($SYS messages/queued/bytes) grows by its size once, and by a small
    # reference per session; it drains in order and the count goes back to 0
    with running(max_queued_bytes=0, mem_budget=0) as b:
        _offline(b, ["s%d" % i for i in range(5)])
        with Raw(b) as pub:
            pub.connect("p")
            for i in range(3):
                pub.publish("t/x", b"%d" % i * 500, 1, pid=i + 1)
                pub.expect(PUBACK, i + 1)
        ss = [b.sessions()[("s%d" % i).encode()] for i in range(5)]
        assert all(s.queued() == 3 for s in ss)
        assert all(s.q[s.qh] is ss[0].q[ss[0].qh] for s in ss)  # the same Msg
        m = ss[0].q[ss[0].qh]
        assert m.refs == 5 and m.size == 3 + 500 + MSG_COST
        assert b.qbytes == 3 * m.size + 5 * 3 * ENTRY_COST  # not 5 copies
        for i, s in enumerate(ss):
            with Raw(b) as c:
                c.connect("s%d" % i, clean=False)
                assert [m[1] for m in c.messages(3)] == [b"%d" % k * 500 for k in range(3)]
                c.simple(DISCONNECT)
        assert wait_for(lambda: b.qbytes == 0)


def test_max_queued_bytes_drops_oldest_qos0_then_refuses_qos1():
    # a per-client budget in bytes: QoS 0 messages queued (queue_qos0) go
    # oldest first to make room for what comes; once only QoS 1/2 are left,
    # a QoS 1 publisher is refused (3.1.1: closed without PUBACK) and counted
    # in messages/refused/queue_full; nothing acknowledged is lost
    with running(max_queued_bytes=2000, mem_budget=0, queue_qos0=True) as b:
        _offline(b, ["q"])
        with Raw(b) as pub:
            pub.connect("p", clean=False)
            pub.publish("t/a", b"a" * 600, 0)
            pub.publish("t/b", b"b" * 600, 1, pid=1)
            pub.expect(PUBACK, 1)
            pub.publish("t/c", b"c" * 600, 1, pid=2)  # no room: t/a (QoS 0) goes
            pub.expect(PUBACK, 2)
            assert wait_for(lambda: b.dropped == 1)
            pub.publish("t/d", b"d" * 600, 1, pid=3)  # no room, and no QoS 0 to drop
            assert pub.closed()
        assert b.queue_full == 1 and b.dropped == 1
        with Raw(b) as sub:
            sub.connect("q", clean=False)
            assert [m[1][:1] for m in sub.messages(2)] == [b"b", b"c"]
            assert sub.nothing()


def test_mem_budget_refuses_qos1_and_drops_qos0():
    # the broker-wide budget: a message held once however many sessions
    # queue it; once the budget is spent a QoS 1 publisher is refused
    # (messages/refused/mem_budget) and a QoS 0 message is not queued
    # (messages/dropped/mem_budget); what was accepted is delivered
    unit = 3 + 800 + MSG_COST + 3 * ENTRY_COST  # one message queued by three sessions
    # both queue_full modes: mem_budget's refusal stays a refusal
    for mode in ("refuse", "drop"):
        with running(max_queued_bytes=0, mem_budget=3 * unit + 50, queue_qos0=True,
                     queue_full=mode) as b:
            _offline(b, ["a", "b", "c"])
            with Raw(b) as pub:
                pub.connect("p")
                for pid in (1, 2, 3):
                    pub.publish("t/x", b"%d" % pid * 800, 1, pid=pid)
                    pub.expect(PUBACK, pid)
                pub.publish("t/x", b"0" * 800, 0)  # for each of the three sessions
                assert wait_for(lambda: b.dropped_mem == 3)
                assert b.qbytes == 3 * unit
                pub.publish("t/x", b"4" * 800, 1, pid=4)
                assert pub.closed()
            assert b.refused_mem == 1 and b.queue_full == 0 and b.dropped_full == 0
            for cid in ("a", "b", "c"):
                with Raw(b) as sub:
                    sub.connect(cid, clean=False)
                    assert [m[1][:1] for m in sub.messages(3)] == [b"1", b"2", b"3"]
                    assert sub.nothing()
            assert wait_for(lambda: b.qbytes == 0)


def test_mem_budget_refuses_qos1_to_its_only_session():
    # the same budget where the message goes to one session (fan-in's
    # routing, Session.admit_send): refused before it is queued
    unit = 3 + 800 + MSG_COST + ENTRY_COST
    # (in both queue_full modes)
    for mode in ("refuse", "drop"):
        with running(max_queued_bytes=0, queue_full=mode, mem_budget=2 * unit + 50) as b:
            _offline(b, ["a"])
            with Raw(b) as pub:
                pub.connect("p")
                for pid in (1, 2):
                    pub.publish("t/x", b"%d" % pid * 800, 1, pid=pid)
                    pub.expect(PUBACK, pid)
                assert b.qbytes == 2 * unit
                pub.publish("t/x", b"3" * 800, 1, pid=3)
                assert pub.closed()  # no PUBACK at 3.1.1 [MQTT-3.3.5-2]
            assert b.refused_mem == 1 and b.queue_full == 0 and b.dropped_full == 0
            with Raw(b) as sub:
                sub.connect("a", clean=False)
                assert [m[1][:1] for m in sub.messages(2)] == [b"1", b"2"]
                assert sub.nothing()
            assert wait_for(lambda: b.qbytes == 0)


def test_max_retained_at_3_1_1_delivers_and_does_not_keep_a_new_topic():
    # [MQTT-3.3.1-5]: what is acknowledged as retained is kept, and MQTT 5
    # refuses one past max_retained (test_broker5_pubsub). 3.1.1 has no
    # refusing PUBACK: a refusal would close the link, and the publisher
    # sends the same message first on every connection after
    # [MQTT-4.4.0-1], so nothing behind it would ever pass. There it is
    # delivered and not kept (dropped, logged), QoS 0 and QoS 1/2 alike; an
    # update of a kept topic still goes; and what follows it gets through
    with running(max_retained=2) as b:
        with Raw(b) as sub, Raw(b) as pub:
            sub.connect("s")
            sub.subscribe(1, "r/#", 1)
            pub.connect("p")
            for i in range(2):
                pub.publish("r/%d" % i, b"%d" % i, 1, pid=i + 1, retain=True)
                pub.expect(PUBACK, i + 1)
            assert [m[1] for m in sub.messages(2)] == [b"0", b"1"]
            pub.publish("r/0", b"new", 1, pid=3, retain=True)  # replaces: kept
            pub.expect(PUBACK, 3)
            pub.publish("r/2", b"two", 0, retain=True)  # QoS 0: delivered, not kept
            pub.publish("r/2", b"two", 1, pid=4, retain=True)  # QoS 1: the same
            pub.expect(PUBACK, 4)
            pub.publish("r/3", b"after", 1, pid=5)
            pub.expect(PUBACK, 5)
            assert [m[1] for m in sub.messages(4)] == [b"new", b"two", b"two", b"after"]
            assert sub.nothing()
        assert b.refused_retained == 0 and b.refused_mem == 0 and b.queue_full == 0
        assert b.dropped == 2
        assert sorted(b.retained) == [b"r/0", b"r/1"]


def test_mem_budget_takes_a_retained_message_that_replaces_one():
    # [MQTT-3.3.1-5]: a retained message replaces the topic's; what it
    # costs the budget is what it adds, so with retained messages filling
    # mem_budget an update of the same size is kept (at QoS 0 and at QoS 1,
    # acknowledged), while one for a new topic is not
    unit = 3 + 100 + MSG_COST  # one retained message on "r/N"
    with running(max_packet=512, max_queued_bytes=0, mem_budget=3 * unit + 10) as b:
        with Raw(b) as pub:
            pub.connect("p")
            for i in range(4):  # the last, a new topic: no room
                pub.publish("r/%d" % i, b"%d" % i * 100, 0, retain=True)
            pub.publish("r/0", b"a" * 100, 0, retain=True)
            pub.publish("r/1", b"b" * 100, 1, pid=5, retain=True)
            pub.expect(PUBACK, 5)
        assert b"r/3" not in b.retained and b.dropped_mem == 1 and b.refused_mem == 0
        with Raw(b) as sub:
            sub.connect("s")
            sub.subscribe(1, "r/#", 0)
            got = sorted((m[0], m[1][:1]) for m in sub.messages(3))
            assert got == [(b"r/0", b"a"), (b"r/1", b"b"), (b"r/2", b"2")]
            assert sub.nothing()


def test_message_the_bridge_queue_refuses_is_not_retained():
    # a QoS 1 PUBLISH that a bridge's full queue refuses is nobody's: not
    # acknowledged [MQTT-3.3.5-2], not routed, and not retained either
    # [MQTT-3.3.1-5]; the topic keeps the message it had
    from test_bridge import World
    w = World(["s/# out 1"], queue_size=1, window=1)
    w.run(50)  # connected once: the upstream's limits known, the client takes its window
    w.cut()
    w.run(10)
    node = w.open_on(w.gw)
    node.connect("n1")
    for i in range(2):  # one to the client's window, one on the queue
        node.publish("s/state", b"v%d" % i, 1, pid=i + 1, retain=True)
        node.expect(PUBACK, i + 1)
    node.publish("s/state", b"refused", 1, pid=3, retain=True)
    assert node.closed()
    assert w.bridge.refused == 1
    assert w.gw.retained[b"s/state"][1] == b"v1"


def test_send_buffer_grows_on_demand():
    # a connected client's send buffer starts small (broker.TX_START) and
    # grows when a message does not fit, up to Limits.tx, and so does its
    # in-flight ring (broker_session.RING_START, up to Limits.ring); the
    # message arrives whole
    with running(max_packet=16384, max_queued_bytes=0, mem_budget=0) as b:
        with Raw(b) as sub, Raw(b) as pub:
            sub.connect("s")
            sub.subscribe(1, [("big", 1)])
            pub.connect("p")
            conn = b.sessions()[b"s"].client.conn
            assert len(conn.tx) <= 4096
            pub.publish("big", b"0", 1, pid=9)
            pub.expect(PUBACK, 9)
            sub.messages(1)
            assert len(b.sessions()[b"s"].rbuf) == 4096
            for pid, n in ((1, 100), (2, 7000), (3, 6000)):
                pub.publish("big", b"%d" % pid * n, 1, pid=pid)
                pub.expect(PUBACK, pid)
                assert [m[1] for m in sub.messages(1)] == [b"%d" % pid * n]
            assert 4096 < len(conn.tx) <= 16384
            assert 4096 < len(b.sessions()[b"s"].rbuf) <= 16384


# ---------------------------------------------------------------- fairness: fanout

def _enc(fn, *a, **kw):
    buf = bytearray(256)
    return bytes(buf[:fn(buf, 0, *a, **kw)])


def _drain(end):
    out = bytearray(4096)
    got = b""
    while True:
        n = end.readinto(out, len(out))
        if not n:
            return got
        got += bytes(out[:n])


def _types(data):
    # the packet types in data, whole packets of a one-byte remaining length
    ts = []
    i = 0
    while i + 1 < len(data):
        ts.append(data[i] >> 4)
        i += 2 + data[i + 1]
    return ts


def _fan_burst(fanout):
    # Over pipes (the device's driver: one packet per recv): 8 sessions on
    # t, a publisher's 10 QoS 1 PUBLISHes to t and another client's PINGREQ
    # all waiting before the first step. Returns the PUBACKs the publisher
    # had after each step until all came, and the step that answered the
    # PINGREQ.
    from umqtt3.broker import Broker
    from umqtt3.transport import Pipe
    from broker_harness import connect_bytes
    b = Broker(port=None, sys_interval=0, max_clients=12, burst=16, fanout=fanout)
    try:
        ends = []
        for i in range(10):
            mine, theirs = Pipe.pair(4096)
            b.attach(theirs)
            mine.write(connect_bytes("c%d" % i))
            ends.append(mine)
        subs = ends[:8]
        pub = ends[8]
        other = ends[9]
        for s in subs:
            s.write(_enc(codec.encode_subscribe, 1, "t", 0))
        b.poll_once(0)
        b.poll_once(0)
        for e in ends:
            _drain(e)  # CONNACKs, SUBACKs
        for k in range(10):
            pub.write(_enc(codec.encode_publish, "t", b"%d" % k, 1, k + 1))
        other.write(b"\xc0\x00")  # PINGREQ
        acks = []
        pong = None
        seen = [b""] * 8
        for step in range(1, 30):
            b.poll_once(0)
            acks.append(_types(_drain(pub)).count(PUBACK))
            if pong is None and PINGRESP in _types(_drain(other)):
                pong = step
            for i in range(8):
                seen[i] += _drain(subs[i])
            if sum(acks) == 10:
                break
        for i in range(8):
            assert _types(seen[i]) == [3] * 10  # every message to every session, none lost
            assert seen[i].count(b"t") == 10
        return acks, pong
    finally:
        b.close()


def test_fanout_limit_lets_the_other_connections_in():
    # A publisher whose packets routed `fanout` deliveries (here 8: one
    # PUBLISH to 8 sessions) ends its turn: the rest of its burst waits for
    # its next turn while the others' packets are read. At least one packet
    # is read per turn, so nothing starves and nothing is lost.
    acks, pong = _fan_burst(8)
    assert pong == 1
    assert acks == [1] * 10
    # the limit is what does it: a large one routes the whole burst in one turn
    acks, pong = _fan_burst(1000)
    assert pong == 1
    assert acks == [10]


def test_dropping_for_a_full_queue_allocates_nothing():
    # queue_full "drop" in steady state: a persistent subscriber away with
    # its queue full is passed over for every QoS 1 message (Core._route_but)
    # while the one that keeps up gets each, and that allocates nothing
    # under MicroPython's heap_lock (test_broker_mem's proof, with a second
    # matching session)
    import gc
    from support import locked
    from test_broker_mem import MICROPYTHON, Peer, _broker, _Steady, run

    class Away(_Steady):
        def __init__(self):
            self.qos = 1
            b = self.b = _broker(max_inflight=4, max_queued=2, queue_full="drop")
            away = Peer(b)
            away.connect("away", clean=False)
            away.subscribe(1, [("sensors/#", 1)])
            run(b, [away])
            away.disconnect()
            run(b, [away])
            sub = self.sub = Peer(b)
            pub = self.pub = Peer(b)
            sub.connect("sub")
            pub.connect("pub")
            sub.subscribe(1, [("sensors/+/temp", 1)])
            run(b, [sub, pub])
            self.frame = bytearray(64)
            self.n = codec.encode_publish(self.frame, 0, "sensors/n1/temp", b"21.5", 1, 1)
            self.pid_at = self.n - 4 - 2
            self.pid = 1
            sub.record = False
            pub.record = False

    st = Away()
    st.go(20)  # warm up: the away session's queue fills, its marks are made
    b = st.b
    assert b.dropped_full == 18 and b.sessions()[b"away"].queued() == 2
    before = st.sub.got[PUBLISH]
    if MICROPYTHON:
        locked(st.go, 200)
        gc.collect()
        a0 = gc.mem_alloc()
        st.go(200)
        assert gc.mem_alloc() - a0 == 0
        n = 400
    else:
        st.go(200)
        n = 200
    assert st.sub.got[PUBLISH] - before == n
    assert st.pub.got[PUBACK] >= 20 + n
    assert b.dropped_full == 18 + n and b.queue_full == 0 and b.errors == 0
