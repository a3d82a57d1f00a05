# MQTT 3.1.1 conformance of umqtt3's broker: CONNECT and CONNACK, client
# ids, authentication, keepalive, wills, DISCONNECT (sections 3.1, 3.2,
# 3.12, 3.14 of the OASIS text). One test per normative statement the broker
# must honour, cited as [MQTT-x.x.x-y]; packets built with umqtt3.codec (or
# by hand where the encoder refuses to build them) so the broker sees exactly
# the bytes a test means.
#
# The same bodies run over pipes with the broker in this thread (pytest and
# tests/mp/testrunner.py under MicroPython) and over real sockets
# (tests/test_broker.py); tests/portable/broker_harness.py is the harness.
from umqtt3.broker_auth import digest
from broker_harness import running, Raw, advance, wait_for, connect_bytes, build, string, frame
from umqtt3.codec import encode_publish, CONNACK, PUBACK, PINGREQ, PINGRESP, DISCONNECT


def test_first_packet_must_be_connect():
    # [MQTT-3.1.0-1] anything else first closes the connection
    with running() as b, Raw(b) as c:
        c.simple(PINGREQ)
        assert c.recv() is None


def test_second_connect_is_a_protocol_violation():
    # [MQTT-3.1.0-2]
    with running() as b, Raw(b) as c:
        assert c.connect("twice").rc == 0
        c.send(connect_bytes("twice"))
        assert c.closed()


def test_no_connect_in_time_closes():
    # 3.1: a server closes a connection that sends no CONNECT in a
    # reasonable time; here the broker's connect timeout, 1 s. Half a
    # CONNECT that then stalls is no CONNECT.
    with running(connect_timeout_ms=1000) as b, Raw(b) as idle, Raw(b) as half:
        half.send(connect_bytes("half")[:7])
        advance(400)
        assert not idle.closed(0.1) and not half.closed(0.1)
        advance(800)
        assert idle.closed() and half.closed()


def test_unsupported_protocol_level_gets_connack_1():
    # [MQTT-3.1.2-2] CONNACK 0x01, with session present 0 [MQTT-3.2.2-4],
    # then the connection is closed [MQTT-3.2.2-5]
    with running() as b, Raw(b) as c:
        raw = connect_bytes("lv")
        raw[8] = 6  # protocol level byte of "MQTT"
        c.send(raw)
        p = c.expect(CONNACK)
        assert p.rc == 1 and not p.session_present
        assert c.closed()


def test_protocol_name_wrong_closes():
    # [MQTT-3.1.2-1] not "MQTT": closed without CONNACK
    with running() as b, Raw(b) as c:
        raw = connect_bytes("nm")
        raw[4:8] = b"MQTX"
        c.send(raw)
        assert c.recv() is None


def test_mqtt31_level3_accepted():
    # MQTT 3.1 ("MQIsdp", level 3) is spoken too; no session-present bit
    with running() as b, Raw(b) as c:
        p = c.connect("old-client", level=3)
        assert p.rc == 0 and not p.session_present
        assert c.subscribe(1, "x/y", 1) == b"\x01"


def test_reserved_connect_flag_closes():
    # [MQTT-3.1.2-3] the reserved flag must be 0
    with running() as b, Raw(b) as c:
        raw = connect_bytes("rf")
        raw[9] |= 1
        c.send(raw)
        assert c.recv() is None


def test_malformed_connect_flags_close_without_connack():
    # [MQTT-3.1.4-1] a CONNECT that does not conform is closed without
    # CONNACK: will QoS or will retain without the will flag
    # [MQTT-3.1.2-11] [MQTT-3.1.2-13] [MQTT-3.1.2-15], will QoS 3
    # [MQTT-3.1.2-14], a password without a user name [MQTT-3.1.2-22]; a
    # flag whose field is missing [MQTT-3.1.2-9] [MQTT-3.1.2-19], a field
    # whose flag is not set [MQTT-3.1.2-18] [MQTT-3.1.2-20]
    plain = connect_bytes("f")
    will = connect_bytes("f", will_topic="w", will_msg=b"m")
    user = connect_bytes("f", user="u", password="p")
    # (CONNECT, connect-flag bits to set, bits to clear)
    cases = [(plain, 0x08, 0), (plain, 0x20, 0), (will, 0x18, 0), (user, 0, 0x80),
             (plain, 0x04, 0), (plain, 0x80, 0), (user, 0, 0xC0), (user, 0, 0x40)]
    with running() as b:
        for raw, on, off in cases:
            raw = bytearray(raw)
            raw[9] = (raw[9] | on) & ~off
            with Raw(b) as c:
                c.send(raw)
                assert c.recv() is None, raw[9]
        assert b.connected == 0 and not b.sessions()


def _connect_by_hand(cid, will_topic=None):
    # CONNECT level 4, CleanSession 1, no keepalive; the encoder would
    # refuse these strings
    flags = 0x06 if will_topic is not None else 0x02
    body = string(b"MQTT") + bytes([4, flags, 0, 0]) + string(cid)
    if will_topic is not None:
        body += string(will_topic) + string(b"m")
    return frame(0x10, body)


def test_ill_formed_utf8_in_connect_closes():
    # [MQTT-1.5.3-1] ill-formed UTF-8 and [MQTT-1.5.3-2] U+0000 close the
    # connection: in the client id [MQTT-3.1.3-4] and in the will topic
    # [MQTT-3.1.3-10]; the well-formed one next to them is accepted
    with running() as b:
        with Raw(b) as c:
            c.send(_connect_by_hand(b"ok", b"w/\xc3\xa9"))
            assert c.expect(CONNACK).rc == 0
        for cid, wt in ((b"a\xffb", None), (b"a\x00b", None), (b"a\xc0\xafb", None),
                        (b"ok", b"w/\xed\xa0\x80"), (b"ok", b"w/\x00")):
            with Raw(b) as c:
                c.send(_connect_by_hand(cid, wt))
                assert c.recv() is None, (cid, wt)
        assert b.connected == 0


def test_empty_client_id_with_clean_session_is_assigned():
    # [MQTT-3.1.3-6] [MQTT-3.1.3-7] accepted and given a unique id
    with running() as b, Raw(b) as c1, Raw(b) as c2:
        assert c1.connect("", clean=True).rc == 0
        assert c2.connect("", clean=True).rc == 0
        assert wait_for(lambda: b.connected == 2)
        assert c1.subscribe(1, "e/t", 1) == b"\x01"
        c2.publish("e/t", b"hi", 1, pid=3)
        c2.expect(PUBACK, 3)
        assert c1.messages(1)[0][:3] == (b"e/t", b"hi", 1)


def test_assigned_client_id_is_not_one_a_client_would_name():
    # [MQTT-3.1.3-6]: the id is unique, and a 3.1.1 client is never told
    # it, so no other client can mean to take its session over
    # [MQTT-3.1.4-2]: clients named as a fleet counts (the ids once given
    # out in order, umqtt3-1, umqtt3-2, ...) leave it connected
    with running(max_clients=12) as b, Raw(b) as c:
        assert c.connect("", clean=True).rc == 0
        assert wait_for(lambda: b.connected == 1)
        cid = list(b.sessions())[0]
        others = [Raw(b) for _ in range(9)]
        try:
            for n, o in enumerate(others):
                assert o.connect("umqtt3-%d" % (n + 1)).rc == 0
            assert wait_for(lambda: b.connected == 10)
            assert c.subscribe(1, "e/t", 0) == b"\x00"  # still its own connection
            with Raw(b) as d:
                assert d.connect("", clean=True).rc == 0
                assert wait_for(lambda: b.connected == 11)
                assert len(b.sessions()) == 11
        finally:
            for o in others:
                o.close()
        assert cid.startswith(b"auto-") and len(cid) == 21, cid  # (as mosquitto's auto-<uuid>)


def test_empty_client_id_without_clean_session_rejected():
    # [MQTT-3.1.3-8] CONNACK 0x02, then close
    with running() as b, Raw(b) as c:
        raw = connect_bytes("", clean=True)
        raw[9] &= ~2  # CleanSession 0 (the encoder refuses to build this)
        c.send(raw)
        p = c.expect(CONNACK)
        assert p.rc == 2
        assert c.closed()
        assert not b.sessions()


def test_empty_client_id_at_level_3_rejected():
    # MQTT 3.1 wants a client id of 1 to 23 characters: CONNACK 2
    with running() as b, Raw(b) as c:
        c.send(b"\x10\x0e\x00\x06MQIsdp\x03\x02\x00\x00\x00\x00")
        assert c.expect(CONNACK).rc == 2
        assert c.closed()


def test_client_ids_the_server_must_allow():
    # [MQTT-3.1.3-5] 1 to 23 bytes of 0-9, a-z, A-Z are accepted, and each
    # names its own session [MQTT-3.1.3-2]
    ids = ("0123456789abcdefghijklm", "nopqrstuvwxyzABCDEFGHIJ", "KLMNOPQRSTUVWXYZ", "a")
    with running() as b:
        conns = [Raw(b) for _ in ids]
        for c, cid in zip(conns, ids):
            assert c.connect(cid, clean=False).rc == 0
        assert sorted(b.sessions()) == sorted(i.encode() for i in ids)
        for c in conns:
            c.close()


def test_takeover_closes_the_older_connection():
    # [MQTT-3.1.4-2] the existing client with the same id is disconnected
    with running() as b, Raw(b) as old, Raw(b) as new:
        assert old.connect("same").rc == 0
        assert new.connect("same").rc == 0
        assert old.closed()
        new.simple(PINGREQ)
        new.expect(PINGRESP)
        assert wait_for(lambda: b.connected == 1)


def test_takeover_publishes_the_old_will():
    # the older connection is closed without DISCONNECT, so its will goes
    with running() as b, Raw(b) as watch:
        watch.connect("watch")
        watch.subscribe(1, "wills/#", 0)
        with Raw(b) as old, Raw(b) as new:
            old.connect("dev", will_topic="wills/dev", will_msg=b"lost")
            new.connect("dev")
            assert watch.messages(1)[0][:2] == (b"wills/dev", b"lost")


def test_user_password_checked_before_any_state():
    # CONNACK 4 (bad user name or password), 5 (not authorized); a refused
    # client leaves no session and does not take over the id
    users = {b"alice": b"secret", b"bob": b""}
    with running(users=users) as b:
        with Raw(b) as c:
            assert c.connect("x", clean=False).rc == 5  # anonymous
            assert c.closed()
        with Raw(b) as c:
            assert c.connect("x", clean=False, user="alice", password="wrong").rc == 4
            assert c.closed()
        with Raw(b) as c:
            assert c.connect("x", clean=False, user="mallory", password="secret").rc == 4
        assert not b.sessions()
        with Raw(b) as good, Raw(b) as evil:
            assert good.connect("dev", user="alice", password="secret").rc == 0
            assert evil.connect("dev", user="alice", password="nope").rc == 4
            good.simple(PINGREQ)
            good.expect(PINGRESP)  # still connected: no takeover by a refused client
        with Raw(b) as c:
            assert c.connect("b", user="bob").rc == 0


def test_refused_connack_has_session_present_0():
    # [MQTT-3.2.2-4] a non-zero return code comes with session present 0,
    # even when the id has a stored session, which stays as it was
    users = {b"alice": b"secret"}
    with running(users=users) as b:
        with Raw(b) as c:
            assert c.connect("dev", clean=False, user="alice", password="secret").rc == 0
            c.subscribe(1, "cmd/#", 1)
            c.simple(DISCONNECT)
        with Raw(b) as c:
            p = c.connect("dev", clean=False, user="alice", password="bad")
            assert p.rc == 4 and not p.session_present
            assert c.closed()  # [MQTT-3.2.2-5]
        with Raw(b) as c:
            p = c.connect("dev", clean=False, user="alice", password="secret")
            assert p.rc == 0 and p.session_present
            assert b.sessions()[b"dev"].filters == [b"cmd/#"]


def test_refused_connect_processes_nothing_after_it():
    # [MQTT-3.1.4-5] what the client sent after a CONNECT that was refused
    # (here in the same segment) is not acted on
    later = build(encode_publish, "r/late", b"v", 0, 0, True)
    with running(users={b"alice": b"secret"}) as b:
        for raw, rc in ((connect_bytes("x"), 5),
                        (connect_bytes("x", user="alice", password="no"), 4)):
            with Raw(b) as c:
                c.send(bytes(raw) + later)
                assert c.expect(CONNACK).rc == rc
                assert c.closed()
        lv = connect_bytes("y", user="alice", password="secret")
        lv[8] = 7
        with Raw(b) as c:
            c.send(bytes(lv) + later)
            assert c.expect(CONNACK).rc == 1
            assert c.closed()
        assert b"r/late" not in b.retained and b.received == 0


def test_keepalive_enforced_at_one_and_a_half():
    # [MQTT-3.1.2-24] nothing within 1.5 x keepalive: disconnected, and as
    # the client did not send DISCONNECT its will is published. Keepalive
    # 2 s: still there at 2.4 s, gone by 3.3 s.
    with running() as b, Raw(b) as watch, Raw(b) as c:
        watch.connect("watch")
        watch.subscribe(1, "ka/#", 0)
        c.connect("sleepy", keepalive=2, will_topic="ka/sleepy", will_msg=b"timeout")
        advance(2400)
        assert not c.closed(0.1)
        advance(900)
        assert c.closed()
        assert watch.messages(1)[0][:2] == (b"ka/sleepy", b"timeout")


def test_keepalive_kept_by_pings():
    # a PINGREQ every 0.5 s keeps a 1 s keepalive alive for 2 s, each
    # answered with PINGRESP [MQTT-3.12.4-1]
    with running() as b, Raw(b) as c:
        c.connect("pinger", keepalive=1)
        for _ in range(4):
            advance(500)
            c.simple(PINGREQ)
            c.expect(PINGRESP)


def test_will_on_abnormal_close_not_on_disconnect():
    # [MQTT-3.1.2-8] published when the connection is lost;
    # [MQTT-3.1.2-10] [MQTT-3.14.4-3] discarded on DISCONNECT
    with running() as b, Raw(b) as watch:
        watch.connect("watch")
        watch.subscribe(1, "w/#", 1)
        with Raw(b) as polite:
            polite.connect("polite", will_topic="w/polite", will_msg=b"bye", will_qos=1)
            polite.simple(DISCONNECT)
            assert polite.closed()
        with Raw(b) as rude:
            rude.connect("rude", will_topic="w/rude", will_msg=b"lost", will_qos=1, will_retain=True)
        msgs = watch.messages(1)
        assert msgs[0][:3] == (b"w/rude", b"lost", 1)
        assert watch.nothing()
        # the will was retained [MQTT-3.1.2-17]
        with Raw(b) as late:
            late.connect("late")
            late.subscribe(1, "w/#", 1)
            assert late.messages(1)[0][:4] == (b"w/rude", b"lost", 1, True)


def test_will_not_retained_unless_asked_and_none_without_the_flag():
    # [MQTT-3.1.2-16] will retain 0: published as a non-retained message;
    # [MQTT-3.1.2-12] no will flag: nothing is published when the
    # connection ends. The will goes at its own QoS, capped by the grant.
    with running() as b, Raw(b) as watch:
        watch.connect("watch")
        watch.subscribe(1, [("w/#", 2)])
        with Raw(b) as c:
            c.connect("plain")
        with Raw(b) as c:
            c.connect("w1", will_topic="w/w1", will_msg=b"gone", will_qos=1)
        assert watch.messages(1)[0][:4] == (b"w/w1", b"gone", 1, False)
        assert watch.nothing()
        assert b"w/w1" not in b.retained
        with Raw(b) as late:
            late.connect("late")
            late.subscribe(1, "w/#", 1)
            assert late.nothing()


def test_will_on_protocol_error():
    # a server closing the connection for a protocol error publishes the will
    with running() as b, Raw(b) as watch, Raw(b) as bad:
        watch.connect("watch")
        watch.subscribe(1, "w/#", 0)
        bad.connect("bad", will_topic="w/bad", will_msg=b"x")
        bad.send(b"\x30\x02\x00\x05")  # PUBLISH whose topic runs past the packet
        assert bad.closed()
        assert watch.messages(1)[0][:2] == (b"w/bad", b"x")


def test_disconnect_with_reserved_bits_is_no_disconnect():
    # [MQTT-3.14.1-1] DISCONNECT's reserved bits must be 0: one that is not
    # closes the connection as a protocol error, so the will is published
    # (it is not the DISCONNECT that would discard it)
    with running() as b, Raw(b) as watch:
        watch.connect("watch")
        watch.subscribe(1, "w/#", 0)
        for first in (b"\xe1\x00", b"\xe0\x01\x00"):
            with Raw(b) as c:
                c.connect("d", will_topic="w/d", will_msg=first)
                c.send(first)
                assert c.closed()
            assert watch.messages(1)[0][:2] == (b"w/d", first)


def test_retained_messages_outlive_the_session():
    # [MQTT-3.1.2-7] retained messages are not session state: they stay when
    # the session that published them ends
    with running() as b:
        with Raw(b) as c:
            c.connect("p", clean=True)
            c.publish("keep/me", b"v", 1, pid=1, retain=True)
            c.expect(PUBACK, 1)
            c.simple(DISCONNECT)
        assert wait_for(lambda: not b.sessions())
        with Raw(b) as c:
            c.connect("s")
            c.subscribe(1, "keep/#", 0)
            assert c.messages(1)[0][:4] == (b"keep/me", b"v", 0, True)


def test_hashed_password_from_umqtt3_passwd():
    # an entry umqtt3_cli.passwd writes ($sha256$rounds$salt$hex) is checked
    # with hashlib on the device too; only the right password passes
    entry = b"$sha256$3$73616c74$" + digest(3, b"salt", b"secret")
    with running(users={b"alice": entry}) as b:
        with Raw(b) as c:
            assert c.connect("a", user="alice", password="secret").rc == 0
        with Raw(b) as c:
            assert c.connect("a", user="alice", password="secreT").rc == 4
        with Raw(b) as c:
            assert c.connect("a", user="alice", password=entry.decode()).rc == 4
