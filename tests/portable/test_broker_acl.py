# Topic access control (broker_acl): a mosquitto-style ACL file, read
# (SUBSCRIBE), write (PUBLISH), deny, per user and with %u / %c patterns.
# A denied SUBSCRIBE gets SUBACK 0x80 (0x87 at MQTT 5) [MQTT-3.9.3-*]; a
# denied PUBLISH is dropped, acknowledged at 3.1.1 so it is not resent,
# with PUBACK 0x87 at MQTT 5. Runs over pipes on CPython and MicroPython.
from broker_harness import running, Raw
from test_broker5_connect import connect5, sub5, pub5
from umqtt3.broker_acl import parse, covers
from umqtt3.codec import PUBACK

ACL = """
# anonymous
topic read public/#
user alice
topic readwrite home/#
topic deny home/secret
pattern write devices/%u/%c/#
pattern read devices/%c/cmd
"""


def _broker(**kw):
    b = running(users={b"alice": b"pw", b"bob": b"pw"}, allow_anonymous=True, **kw)
    return b


def test_parse_and_cover():
    acl = parse(ACL)
    g = acl.grants("alice", "dev1")
    assert g.may_write(b"home/x", 0, 6) and not g.may_write(b"home/secret", 0, 11)
    assert g.may_write(b"devices/alice/dev1/t", 0, 20)
    assert not g.may_write(b"devices/bob/dev1/t", 0, 18)
    assert g.may_read(b"home/+/t") and g.may_read(b"devices/dev1/cmd")
    assert not g.may_read(b"#") and not g.may_read(b"home/secret")
    # home/# meets the deny: granted, each message checked at delivery
    assert g.may_read(b"home/#") and g.partly_denied(b"home/#")
    assert not g.partly_denied(b"home/+/t")
    anon = acl.grants(None, "x")
    assert anon.may_read(b"public/a") and not anon.may_write(b"public/a", 0, 8)
    assert covers(b"a/#", b"a/+/b") and not covers(b"a/+", b"a/#")
    for bad in ("topic", "user", "topik x", "topic read"):
        try:
            parse(bad)
        except ValueError as e:
            assert "line 1" in str(e)
        else:
            raise AssertionError(bad)


def test_denied_subscribe_gets_0x80():
    # [MQTT-3.9.3-*]: a filter the ACL does not grant: 0x80 in its place
    with _broker() as b, Raw(b) as c:
        b.set_acl(ACL)
        c.connect("dev1", user="alice", password=b"pw")
        assert c.subscribe(1, [("home/a", 1), ("other/#", 0), ("home/secret", 0)]) == \
            b"\x01\x80\x80"


def test_denied_publish_dropped_at_311():
    with _broker() as b, Raw(b) as sub, Raw(b) as c:
        b.set_acl(ACL)
        sub.connect("s", user="alice", password=b"pw")
        sub.subscribe(1, [("home/#", 0)])
        c.connect("dev1", user="bob", password=b"pw")
        c.publish("home/x", b"no", 1, pid=1)
        c.expect(PUBACK, 1)  # acknowledged, not forwarded
        assert sub.nothing()
        assert b.dropped == 1


def test_denied_at_mqtt5_gets_0x87():
    with _broker() as b, Raw(b) as c:
        b.set_acl(ACL)
        connect5(c, "dev1", user="bob", password=b"pw")
        assert sub5(c, 1, [("home/#", 0)]) == b"\x87"
        pub5(c, "home/x", b"no", 1, 1)
        assert c.expect(PUBACK, 1).rc == 0x87


def test_pattern_with_user_and_client_id():
    with _broker() as b, Raw(b) as sub, Raw(b) as c:
        b.set_acl(ACL + "user bob\ntopic read devices/#\n")
        sub.connect("watch", user="bob", password=b"pw")
        assert sub.subscribe(1, [("devices/#", 0)]) == b"\x00"
        c.connect("dev9", user="alice", password=b"pw")
        c.publish("devices/alice/dev9/t", b"ok")
        c.publish("devices/alice/dev8/t", b"not mine")
        assert [m[1] for m in sub.messages(1)] == [b"ok"]
        assert sub.nothing()


def test_will_topic_not_allowed_is_refused():
    with _broker() as b, Raw(b) as c:
        b.set_acl(ACL)
        p = c.connect("w", user="bob", password=b"pw", will_topic="x", will_msg=b"m")
        assert p.rc == 5


def test_a_new_acl_applies_to_connected_clients():
    # set_acl again (the CLI's reload on SIGHUP, as mosquitto's): a
    # connected client stays connected, and what it does next is checked
    # under the new ACL; a subscription it no longer may read goes
    with _broker() as b, Raw(b) as sub, Raw(b) as c:
        b.set_acl(ACL)
        sub.connect("s", user="alice", password=b"pw")
        assert sub.subscribe(1, [("home/#", 0)]) == b"\x00"
        c.connect("dev1", user="alice", password=b"pw")
        c.publish("home/x", b"one")
        assert [m[1] for m in sub.messages(1)] == [b"one"]
        b.set_acl("user alice\ntopic write home/#\n")  # read revoked
        c.publish("home/x", b"two")
        assert sub.nothing()
        assert sub.subscribe(2, [("home/#", 0)]) == b"\x80"
        b.set_acl("user alice\ntopic read home/#\n")  # write revoked, read again
        assert sub.subscribe(3, [("home/#", 0)]) == b"\x00"
        c.publish("home/x", b"three")
        assert sub.nothing()
        assert b.connected == 2
