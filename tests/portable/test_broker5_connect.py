# MQTT 5.0 conformance of umqtt3's broker: CONNECT and CONNACK properties,
# session expiry, DISCONNECT with reason codes both ways, keep alive, wills
# with a delay, enhanced authentication (sections 3.1, 3.2, 3.14, 4.13 of
# the OASIS MQTT 5.0 text). One test per normative statement, cited as
# [MQTT-x.x.x-y] (5.0 numbering).
#
# The same bodies run over pipes (pytest, and tests/mp/testrunner.py under
# the WebAssembly MicroPython) and over sockets (tests/test_broker5.py).
from broker_harness import running, Raw, advance, wait_for, build, connect_bytes
from umqtt3 import props as P
from umqtt3.codec import (encode_disconnect, encode_subscribe, encode_publish, encode_ack,
                          CONNACK, DISCONNECT, SUBACK, PUBLISH, PUBACK, PINGREQ, AUTH)


def props_of(p):
    return P.parse(p.buf, p.props_off, p.props_len)


def connect5(c, cid, clean=True, keepalive=0, props=None, **kw):
    p = c.connect(cid, clean, keepalive, level=5, props=props, **kw)
    return p


def sub5(c, pid, filters, props=None):
    """SUBSCRIBE at level 5 with (filter, options byte) pairs; the codes."""
    c.put(encode_subscribe, pid, filters, 0, 5, props)
    p = c.expect(SUBACK, pid)
    return bytes(p.payload)


def pub5(c, topic, payload, qos=0, pid=0, retain=False, props=None):
    return c.put(encode_publish, topic, payload, qos, pid, retain, False, 5, props)


def disconnect5(c, rc=None, props=None):
    c.put(encode_disconnect, rc, 5, props)


def leave(b, cid, expiry, filters):
    """A level-5 session with an expiry interval and subscriptions, whose
    client has gone (DISCONNECT)."""
    with Raw(b) as c:
        connect5(c, cid, clean=False, props={P.SESSION_EXPIRY: expiry})
        sub5(c, 1, filters)
        disconnect5(c)


def next_publish(c):
    while True:
        p = c.recv()
        assert p is not None, "closed"
        if p.type == PUBLISH:
            return p


def test_connack_says_what_the_broker_allows():
    # [MQTT-3.2.2-*]: receive maximum, maximum packet size, topic alias
    # maximum; every feature is available (the default: not sent)
    with running(max_qos2_in=5, max_packet=2048, max_aliases=3) as b, Raw(b) as c:
        p = connect5(c, "caps")
        assert p.rc == 0 and not p.session_present
        d = props_of(p)
        assert d[P.RECEIVE_MAXIMUM] == 5
        assert d[P.MAXIMUM_PACKET_SIZE] == 2048
        assert d[P.TOPIC_ALIAS_MAXIMUM] == 3
        for f in (P.SUB_ID_AVAILABLE, P.SHARED_SUB_AVAILABLE, P.RETAIN_AVAILABLE,
                  P.WILDCARD_SUB_AVAILABLE, P.MAXIMUM_QOS):
            assert f not in d
        assert P.ASSIGNED_CLIENT_ID not in d
        # no method asked for: none in CONNACK [MQTT-4.12.0-6], and no Response
        # Information, never asked for either [MQTT-3.1.2-28]
        assert P.AUTH_METHOD not in d and P.RESPONSE_INFO not in d


def test_empty_client_id_is_assigned():
    # [MQTT-3.1.3-6] [MQTT-3.2.2-16]: an empty id gets one, in CONNACK, even
    # with Clean Start 0 (5.0 allows it)
    with running() as b, Raw(b) as c:
        p = connect5(c, "", clean=False, props={P.SESSION_EXPIRY: 30})
        assert p.rc == 0
        cid = props_of(p)[P.ASSIGNED_CLIENT_ID]
        assert cid and cid.encode() in b.sessions()


def test_session_expiry_zero_ends_with_the_connection():
    # [MQTT-3.1.2-23 (5.0)]: no session expiry interval: the session ends
    # when the connection closes, even with Clean Start 0
    with running() as b:
        with Raw(b) as c:
            connect5(c, "short", clean=False)
            sub5(c, 1, [("t", 1)])
            disconnect5(c)
            assert c.closed()
        assert wait_for(lambda: b"short" not in b.sessions())
        with Raw(b) as c:
            assert not connect5(c, "short", clean=False).session_present


def test_session_kept_for_its_expiry_interval_then_ends():
    # [MQTT-3.1.2-23 (5.0)] [MQTT-3.2.2-2]: resumed within the interval,
    # with what was queued; gone after it [MQTT-4.1.0-2]
    with running() as b:
        leave(b, "exp", 10, [("t", 1)])
        with Raw(b) as pub:
            pub.connect("pub")
            pub.publish("t", b"while away", 1, pid=1)
            pub.expect(PUBACK, 1)
        advance(5000)
        with Raw(b) as c:
            p = connect5(c, "exp", clean=False, props={P.SESSION_EXPIRY: 2})
            assert p.session_present
            m = next_publish(c)
            assert bytes(m.payload) == b"while away"
            c.put(encode_ack, PUBACK, m.pid)
            disconnect5(c)
        advance(3500)
        assert b"exp" not in b.sessions()
        with Raw(b) as c:
            assert not connect5(c, "exp", clean=False).session_present


def test_session_resumed_with_expiry_zero_keeps_what_was_queued():
    # [MQTT-3.1.2-4 (5.0)] [MQTT-4.4.0-1]: Clean Start 0 resumes the session,
    # queued QoS 1 messages included, even when the new CONNECT sets the
    # expiry to 0 (the session now ends with this connection)
    with running() as b:
        resume_with_expiry_zero(b)


def resume_with_expiry_zero(b):
    """A session left with queued QoS 1 messages, resumed by a CONNECT with
    no expiry: all of them come; the session ends with the connection."""
    leave(b, "resume0", 60, [("t", 1)])
    with Raw(b) as pub:
        pub.connect("pub")
        for i in range(3):
            pub.publish("t", b"m%d" % i, 1, pid=i + 1)
            pub.expect(PUBACK, i + 1)
    with Raw(b) as c:
        assert connect5(c, "resume0", clean=False).session_present
        got = []
        for i in range(3):
            m = next_publish(c)
            got.append(bytes(m.payload))
            c.put(encode_ack, PUBACK, m.pid)
        assert got == [b"m0", b"m1", b"m2"]
        disconnect5(c)
        assert c.closed()
    assert wait_for(lambda: b"resume0" not in b.sessions())


def test_session_expiry_zero_at_disconnect_ends_it():
    # 3.14.2.2.2: DISCONNECT may set the interval to 0: the session ends
    with running() as b:
        with Raw(b) as c:
            connect5(c, "bye", clean=False, props={P.SESSION_EXPIRY: 100})
            disconnect5(c, 0, {P.SESSION_EXPIRY: 0})
            assert c.closed()
        assert wait_for(lambda: b"bye" not in b.sessions())


def test_session_expiry_from_zero_at_disconnect_is_a_protocol_error():
    # [MQTT-3.14.2-2]: 0 at CONNECT, more at DISCONNECT: protocol error,
    # the broker's DISCONNECT says 0x82
    with running() as b, Raw(b) as c:
        connect5(c, "sneaky")
        disconnect5(c, 0, {P.SESSION_EXPIRY: 60})
        p = c.expect(DISCONNECT)
        assert p.rc == 0x82
        assert c.closed()


def test_take_over_gets_disconnect_0x8e():
    # [MQTT-3.1.4-3]: the older connection is closed with 0x8E (session
    # taken over) [MQTT-4.13.1-1]
    with running() as b, Raw(b) as old, Raw(b) as new:
        connect5(old, "twin")
        connect5(new, "twin")
        p = old.expect(DISCONNECT)
        assert p.rc == 0x8E
        assert old.closed()


def test_keep_alive_timeout_gets_disconnect_0x8d():
    # [MQTT-3.1.2-22 (5.0)]: one and a half keep alives of silence; no
    # Server Keep Alive given, the client's is the one [MQTT-3.2.2-22]
    with running() as b, Raw(b) as c:
        assert P.SERVER_KEEPALIVE not in props_of(connect5(c, "sleepy", keepalive=2))
        advance(3100)
        p = c.expect(DISCONNECT)
        assert p.rc == 0x8D


def test_server_keep_alive_is_imposed():
    # [MQTT-3.2.2-21]: CONNACK's server keep alive is the one the client
    # must use, and the broker holds it to it
    with running(max_keepalive=2) as b, Raw(b) as c:
        p = connect5(c, "lazy", keepalive=600)
        assert props_of(p)[P.SERVER_KEEPALIVE] == 2
        advance(2000)
        c.simple(PINGREQ)
        c.recv()
        advance(3100)
        assert c.expect(DISCONNECT).rc == 0x8D


def test_reason_string_only_when_problem_information_requested():
    # [MQTT-3.1.2-29]: request problem information 0: no reason string
    with running() as b, Raw(b) as quiet, Raw(b) as chatty:
        connect5(quiet, "q", props={P.REQUEST_PROBLEM_INFO: 0})
        connect5(chatty, "c")
        for c in (quiet, chatty):
            disconnect5(c, 0, {P.SESSION_EXPIRY: 5})
        assert P.REASON_STRING not in props_of(quiet.expect(DISCONNECT))
        assert P.REASON_STRING in props_of(chatty.expect(DISCONNECT))


def test_malformed_packet_gets_disconnect_0x81():
    # [MQTT-4.13.1-1]: a malformed packet: DISCONNECT 0x81, then nothing
    # more, and close [MQTT-3.14.4-1] [MQTT-3.14.4-2]
    with running() as b, Raw(b) as c:
        connect5(c, "bad")
        c.send(b"\x30\x03\x00\x05a")  # topic longer than the packet
        assert c.expect(DISCONNECT).rc == 0x81
        assert c.recv() is None


def test_bad_utf8_and_reserved_flags_get_disconnect_0x81():
    # a Malformed Packet at 5.0, DISCONNECT 0x81: a topic with ill-formed
    # UTF-8 or a surrogate [MQTT-1.5.4-1], with U+0000 [MQTT-1.5.4-2];
    # reserved fixed-header flags set [MQTT-2.1.3-1], AUTH's too [MQTT-3.15.1-1]
    for raw in (b"\x30\x06\x00\x02t\x00\x00x", b"\x30\x06\x00\x02t\xff\x00x",
                b"\x30\x07\x00\x03\xed\xa0\x80\x00x", b"\xc1\x00", b"\xf1\x00"):
        with running() as b, Raw(b) as c:
            connect5(c, "bad")
            c.send(raw)
            assert c.expect(DISCONNECT).rc == 0x81, raw
            assert c.recv() is None


def test_property_not_allowed_in_its_packet_is_malformed_0x81():
    # 2.2.2.2 (5.0): a property the packet does not define makes it a
    # Malformed Packet (0x81, as mosquitto says); one given twice is a
    # Protocol Error (0x82)
    for send, rc in ((lambda c: pub5(c, "t", b"x", props=bytes([0x11, 0, 0, 0, 5])), 0x81),
                     (lambda c: c.put(encode_subscribe, 1, [("t", 0)], 0, 5,
                                      bytes([0x02, 0, 0, 0, 9])), 0x81),
                     (lambda c: pub5(c, "t", b"x", props=bytes([0x02, 0, 0, 0, 9] * 2)), 0x82)):
        with running() as b, Raw(b) as c:
            connect5(c, "bad")
            send(c)
            assert c.expect(DISCONNECT).rc == rc
            assert c.closed()


def test_packet_too_large_gets_disconnect_0x95():
    # [MQTT-3.2.2-15 ... 4.13]: larger than CONNACK's maximum packet size
    with running(max_packet=256) as b, Raw(b) as c:
        connect5(c, "big")
        pub5(c, "t", b"x" * 400)
        assert c.expect(DISCONNECT).rc == 0x95
        assert c.closed()


def test_unsupported_authentication_method_gets_0x8c():
    # 4.12: an authentication method the broker does not know; a CONNACK
    # of 0x80 or more is followed by the close [MQTT-4.13.2-1]
    with running() as b, Raw(b) as c:
        p = connect5(c, "a", props={P.AUTH_METHOD: "SCRAM-SHA-1"})
        assert p.rc == 0x8C
        assert c.closed()


def test_nothing_sent_behind_a_refused_connect_is_processed():
    # [MQTT-3.1.4-6]: a retained PUBLISH sent right behind a CONNECT the
    # broker refuses (0x8C here) is neither delivered nor kept; no
    # DISCONNECT follows a refusing CONNACK [MQTT-3.14.0-1]
    with running() as b, Raw(b) as watcher, Raw(b) as c:
        connect5(watcher, "w")
        sub5(watcher, 1, [("r", 0)])
        c.send(bytes(connect_bytes("x", level=5, props={P.AUTH_METHOD: "nope"})) +
               build(encode_publish, "r", b"sneaked in", 0, 0, True, False, 5))
        c.level = 5
        assert c.recv().rc == 0x8C
        assert c.recv() is None
        assert watcher.nothing()
        assert b"r" not in b.retained


def test_authentication_hook_accepts():
    # 4.12: a method the application registered decides
    with running() as b, Raw(b) as good, Raw(b) as bad:
        b.auth_methods["token"] = lambda data: 0 if data == b"s3cret" else 0x87
        assert connect5(good, "g", props={P.AUTH_METHOD: "token", P.AUTH_DATA: b"s3cret"}).rc == 0
        assert connect5(bad, "b", props={P.AUTH_METHOD: "token", P.AUTH_DATA: b"guess"}).rc == 0x87


def test_bad_password_gets_0x86():
    # 3.2.2.2: the 5.0 reason code for a bad user name or password
    from umqtt3.broker_auth import digest  # noqa: F401  (the users file form)
    with running(users={b"u": b"pw"}) as b, Raw(b) as c:
        p = connect5(c, "x", user="u", password=b"no")
        assert p.rc == 0x86


def test_will_sent_on_disconnect_with_will_reason():
    # [MQTT-3.14.4-3] and 3.14.2.1: DISCONNECT 0x04 publishes the will
    with running() as b, Raw(b) as watcher, Raw(b) as c:
        connect5(watcher, "w")
        sub5(watcher, 1, [("will/#", 0)])
        connect5(c, "dying", will_topic="will/x", will_msg=b"gone",
                 will_props={P.CONTENT_TYPE: "text/plain"})
        disconnect5(c, 0x04)
        m = next_publish(watcher)
        assert bytes(m.topic) == b"will/x" and bytes(m.payload) == b"gone"
        assert props_of(m)[P.CONTENT_TYPE] == "text/plain"


def _will_watched(b, cid, delay):
    """A watcher subscribed to will/#, and a client cid that vanished (no
    DISCONNECT) leaving a session of 60 s and a will with a delay."""
    w = Raw(b)
    connect5(w, "w")
    sub5(w, 1, [("will/#", 0)])
    with Raw(b) as c:
        connect5(c, cid, clean=False, props={P.SESSION_EXPIRY: 60},
                 will_topic="will/" + cid, will_msg=b"bye", will_props={P.WILL_DELAY: delay})
    return w


def test_will_delay_not_sent_when_the_session_resumes():
    # [MQTT-3.1.3-9]: reconnected within the will delay: no will
    with running() as b:
        with _will_watched(b, "flaky", 5) as watcher:
            advance(2000)
            with Raw(b) as c:
                assert connect5(c, "flaky", clean=False,
                                props={P.SESSION_EXPIRY: 60}).session_present
                advance(6000)
                assert watcher.nothing()


def test_will_delay_sent_after_the_delay():
    # 3.1.3.2.2: the will goes when the delay has passed
    with running() as b:
        with _will_watched(b, "gone", 3) as watcher:
            advance(1000)
            assert watcher.nothing()
            advance(3000)
            m = next_publish(watcher)
            assert bytes(m.payload) == b"bye"
            assert P.WILL_DELAY not in props_of(m)


def test_session_expiry_kept_through_a_restart():
    # [MQTT-3.1.2-23 (5.0)] with a store: the interval and the session's
    # end are on disk; after a restart it ends then (the time down counts:
    # test_broker5_store.py)
    from broker_harness import tempdir, rmtree
    d = tempdir("b5exp")
    try:
        with running(store=d) as b:
            leave(b, "dur", 3, [("t", 1)])
        with running(store=d) as b:
            s = b.sessions()[b"dur"]
            assert s.expiry == 3 and s.filters == [b"t"]
            advance(4500)  # 3 s, + up to 1 (never early)
            assert b"dur" not in b.sessions()
        with running(store=d) as b:
            assert b"dur" not in b.sessions()
    finally:
        rmtree(d)


def test_retained_properties_kept_through_a_restart():
    # the retained message, properties included, comes back from the store
    from broker_harness import tempdir, rmtree
    d = tempdir("b5ret")
    try:
        with running(store=d) as b, Raw(b) as c:
            connect5(c, "p")
            pub5(c, "r", b"v", 1, 1, retain=True, props={P.CONTENT_TYPE: "t/p"})
            c.expect(PUBACK, 1)
        with running(store=d) as b, Raw(b) as c:
            connect5(c, "s")
            sub5(c, 1, [("r", 0)])
            m = next_publish(c)
            assert bytes(m.payload) == b"v" and props_of(m) == {P.CONTENT_TYPE: "t/p"}
    finally:
        rmtree(d)


def test_will_sent_on_disconnect_with_an_error_code():
    # [MQTT-3.14.4-3]: only 0x00 discards the will
    with running() as b, Raw(b) as watcher, Raw(b) as c, Raw(b) as ok:
        connect5(watcher, "w")
        sub5(watcher, 1, [("will/#", 0)])
        connect5(ok, "fine", will_topic="will/ok", will_msg=b"no")
        disconnect5(ok, 0x00)
        connect5(c, "err", will_topic="will/err", will_msg=b"yes")
        disconnect5(c, 0x83)
        m = next_publish(watcher)
        assert bytes(m.topic) == b"will/err"
        assert watcher.nothing()


def test_auth_packet_without_a_method_is_a_protocol_error():
    # 4.12: AUTH only within an authentication exchange begun at CONNECT
    from umqtt3.props import encode_auth
    with running() as b, Raw(b) as c:
        connect5(c, "a")
        c.put(encode_auth, 0x19)
        assert c.expect(DISCONNECT).rc == 0x82


def test_authentication_data_without_a_method_gets_0x82():
    # 3.1.2.11.10 (5.0): "It is a Protocol Error to include Authentication
    # Data if there is no Authentication Method": CONNACK 0x82, then close
    # [MQTT-4.13.1-1]; nothing of the session stays
    with running() as b, Raw(b) as c:
        p = connect5(c, "a", props={P.AUTH_DATA: b"secret"})
        assert p.rc == 0x82
        assert c.closed()
        assert b"a" not in b.sessions()


def _challenge(b):
    # an authentication method of two steps: the server's challenge, then
    # the client's answer; accepted with data of its own
    def answer(data):
        return (0, b"welcome") if data == b"response" else 0x87

    def first(data):
        return (0x18, b"challenge:" + (data or b""), answer)
    b.auth_methods["chal"] = first


def test_auth_exchange_of_several_steps_at_connect():
    # 4.12: the server continues with AUTH 0x18 [MQTT-4.12.0-2], the client
    # answers with AUTH 0x18 and the same method [MQTT-4.12.0-5]; CONNACK
    # ends it, with the method and the server's data (3.2.2.3.17)
    from umqtt3.props import encode_auth
    with running() as b, Raw(b) as c, Raw(b) as bad:
        _challenge(b)
        connect5(c, "a", props={P.AUTH_METHOD: "chal", P.AUTH_DATA: b"hi"}, expect=False)
        p = c.expect(AUTH)
        assert p.rc == 0x18
        assert props_of(p) == {P.AUTH_METHOD: "chal", P.AUTH_DATA: b"challenge:hi"}
        assert b"a" not in b.sessions()  # no session before the exchange ends
        c.put(encode_auth, 0x18, {P.AUTH_METHOD: "chal", P.AUTH_DATA: b"response"})
        p = c.expect(CONNACK)
        assert p.rc == 0
        assert props_of(p)[P.AUTH_METHOD] == "chal" and props_of(p)[P.AUTH_DATA] == b"welcome"
        c.put(encode_subscribe, 1, [("t", 0)], 0, 5)
        c.expect(SUBACK, 1)
        connect5(bad, "b", props={P.AUTH_METHOD: "chal"}, expect=False)
        assert bad.expect(AUTH).rc == 0x18
        bad.put(encode_auth, 0x18, {P.AUTH_METHOD: "chal", P.AUTH_DATA: b"guess"})
        assert bad.expect(CONNACK).rc == 0x87
        assert bad.closed()


def test_auth_with_another_method_in_the_exchange_closes():
    # [MQTT-4.12.0-5]: the AUTH of an exchange carries the CONNECT's method
    from umqtt3.props import encode_auth
    with running() as b, Raw(b) as c:
        _challenge(b)
        connect5(c, "a", props={P.AUTH_METHOD: "chal"}, expect=False)
        assert c.expect(AUTH).rc == 0x18
        c.put(encode_auth, 0x18, {P.AUTH_METHOD: "other", P.AUTH_DATA: b"response"})
        assert c.closed()
        assert b"a" not in b.sessions()


def test_reauthentication():
    # 4.12.1: a connected client starts again with AUTH 0x19 and its
    # CONNECT's method; success: AUTH 0x00; failure: DISCONNECT with the
    # reason code [MQTT-4.12.1-2]; another method: protocol error
    # [MQTT-4.12.1-1]
    from umqtt3.props import encode_auth
    with running() as b, Raw(b) as c, Raw(b) as d, Raw(b) as e:
        b.auth_methods["token"] = lambda data: 0 if data == b"s3cret" else 0x87
        _challenge(b)
        connect5(c, "c", props={P.AUTH_METHOD: "token", P.AUTH_DATA: b"s3cret"})
        c.put(encode_auth, 0x19, {P.AUTH_METHOD: "token", P.AUTH_DATA: b"s3cret"})
        p = c.expect(AUTH)
        assert p.rc == 0 and props_of(p)[P.AUTH_METHOD] == "token"
        c.put(encode_auth, 0x19, {P.AUTH_METHOD: "token", P.AUTH_DATA: b"stale"})
        assert c.expect(DISCONNECT).rc == 0x87
        assert c.closed()
        connect5(d, "d", props={P.AUTH_METHOD: "chal"}, expect=False)
        assert d.expect(AUTH).rc == 0x18
        d.put(encode_auth, 0x18, {P.AUTH_METHOD: "chal", P.AUTH_DATA: b"response"})
        assert d.expect(CONNACK).rc == 0
        d.put(encode_auth, 0x19, {P.AUTH_METHOD: "chal", P.AUTH_DATA: b"again"})
        p = d.expect(AUTH)
        assert p.rc == 0x18 and props_of(p)[P.AUTH_DATA] == b"challenge:again"
        d.put(encode_auth, 0x18, {P.AUTH_METHOD: "chal", P.AUTH_DATA: b"response"})
        p = d.expect(AUTH)
        assert p.rc == 0 and props_of(p)[P.AUTH_DATA] == b"welcome"
        d.put(encode_auth, 0x19, {P.AUTH_METHOD: "token", P.AUTH_DATA: b"s3cret"})
        assert d.expect(DISCONNECT).rc == 0x82
        connect5(e, "e", props={P.AUTH_METHOD: "token", P.AUTH_DATA: b"s3cret"})
        e.put(encode_auth, 0x18, {P.AUTH_METHOD: "token", P.AUTH_DATA: b"x"})
        assert e.expect(DISCONNECT).rc == 0x82  # 0x18 with no exchange under way


def test_will_delay_zero_is_not_published_as_a_property():
    # the will delay interval is not a PUBLISH property (2.2.2.2): a will
    # whose properties carry it, even as 0, goes without it, the others
    # kept in order [MQTT-3.1.3-10 .. (will properties)]
    with running() as b, Raw(b) as watcher:
        connect5(watcher, "w")
        sub5(watcher, 1, [("will/#", 0)])
        with Raw(b) as c:
            connect5(c, "z", will_topic="will/z", will_msg=b"bye",
                     will_props={P.WILL_DELAY: 0, P.USER_PROPERTY: [("a", "2"), ("c", "3")]})
        m = next_publish(watcher)
        assert bytes(m.payload) == b"bye"
        assert props_of(m) == {P.USER_PROPERTY: [("a", "2"), ("c", "3")]}


def test_will_delay_is_never_cut_short():
    # 3.1.3.2.2: the will goes once the delay has passed, not at the next
    # whole second of the broker's clock before it
    with running() as b:
        advance(500)
        with _will_watched(b, "half", 2) as watcher:
            advance(1600)
            assert watcher.nothing()
            advance(1000)
            assert bytes(next_publish(watcher).payload) == b"bye"
