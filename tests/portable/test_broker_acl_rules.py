# The ACL's rules at their edges (broker_acl), on CPython and MicroPython:
# - a client id or user name with '+' or '#' gets nothing from pattern lines
#   (mosquitto's rule since CVE-2017-7650), so "pattern readwrite
#   devices/%c/#" does not become "devices/+/#" for client id "+";
# - a '#' or '+' first level never grants a topic starting with '$'
#   [MQTT-4.7.2-1];
# - an ACL line whose topic is no filter (a trailing "# comment" makes it
#   one) is refused with its line number;
# - which filters a deny pattern meets, so that a granted filter is known to
#   need a read check per message (Grants.partly_denied, may_receive).
from broker_harness import running, Raw
from umqtt3.broker_acl import parse, covers, meets


def _broker():
    return running(users={b"alice": b"pw", b"a+b": b"pw"}, allow_anonymous=True)


def test_meets_table():
    # (a, b, a and b match a common topic)
    for a, b, want in (
            (b"secret/#", b"+/x", True), (b"secret/#", b"+/+/x", True),
            (b"secret/#", b"public/#", False), (b"a/+", b"+/b", True),
            (b"a/b", b"a/b/c", False), (b"a/#", b"a", True), (b"a/+", b"a", False),
            (b"#", b"x/y", True), (b"a/b/c", b"a/+/c", True), (b"a/b/c", b"a/+/d", False),
            (b"#", b"$SYS/x", False), (b"+/x", b"$SYS/x", False), (b"$SYS/#", b"$SYS/+", True),
            (b"+", b"#", True), (b"$SYS/#", b"#", False)):
        assert meets(a, b) == want, (a, b)
        assert meets(b, a) == want, (b, a)


def test_covers_keeps_dollar_topics_out():
    # [MQTT-4.7.2-1]: "#" and "+/..." match no topic starting with '$'
    assert covers(b"#", b"a/b") and covers(b"+/#", b"a/b")
    assert not covers(b"#", b"$SYS/#") and not covers(b"#", b"$SYS/broker/uptime")
    assert not covers(b"+/#", b"$SYS/x") and not covers(b"+", b"$x")
    assert covers(b"$SYS/#", b"$SYS/broker/+") and not covers(b"$SYS/#", b"#")


def test_read_everything_is_not_read_dollar_topics():
    g = parse("topic read #\n").grants(None, "x")
    assert g.may_read(b"#") and g.may_read(b"a/+/b")
    assert not g.may_read(b"$SYS/#") and not g.may_read(b"$SYS/broker/uptime")
    assert not g.may_receive(b"$SYS/broker/uptime", 0, 18)
    g = parse("topic read #\ntopic read $SYS/#\n").grants(None, "x")
    assert g.may_read(b"$SYS/#") and g.may_receive(b"$SYS/broker/uptime", 0, 18)
    with _broker() as b, Raw(b) as c:
        b.set_acl("topic read #\n")
        c.connect("spy")
        assert c.subscribe(1, [("$SYS/#", 0), ("#", 0)]) == b"\x80\x00"


def test_pattern_ids_with_wildcards_get_no_patterns():
    acl = parse("pattern readwrite devices/%c/#\npattern read users/%u/#\n"
                "pattern deny devices/%c/lock\n")
    for user, cid in ((None, "+"), (None, "#"), (None, "a/+"), ("a+b", "dev9"), ("#", "dev9")):
        g = acl.grants(user, cid)
        assert g.read == [] and g.write == [], (user, cid)
        assert not g.may_read(b"devices/+/#") and not g.may_write(b"devices/dev7/cmd", 0, 16)
        assert g.deny == [b"devices/+/lock"]  # denies every client's, never less
    g = acl.grants("alice", "dev7")
    assert g.may_write(b"devices/dev7/cmd", 0, 16) and g.may_read(b"users/alice/x")
    assert not g.may_write(b"devices/dev7/lock", 0, 17)
    with _broker() as b, Raw(b) as spy, Raw(b) as dev, Raw(b) as w:
        b.set_acl("pattern readwrite devices/%c/#\n")
        spy.connect("+")
        assert spy.subscribe(1, [("devices/+/#", 0), ("devices/dev7/#", 0)]) == b"\x80\x80"
        dev.connect("dev7")
        assert dev.subscribe(1, [("devices/dev7/cmd", 0)]) == b"\x00"
        w.connect("x", user="a+b", password=b"pw")
        w.publish("devices/dev7/cmd", b"unlock")  # a+b's %c is x, and it gets no patterns
        dev.publish("devices/dev7/cmd", b"mine")
        assert [m[1] for m in dev.messages(1)] == [b"mine"]
        assert dev.nothing() and spy.nothing()


def test_inline_comment_refused_with_its_line():
    for text, line in (("user alice\ntopic readwrite home/#          # read, write\n", 2),
                       ("topic deny home/secret   # not this one\n", 1),
                       ("topic read a/#/b\n", 1), ("pattern write dev+/%c\n", 1)):
        try:
            parse(text)
        except ValueError as e:
            assert ("line %d:" % line) in str(e) and "comment" in str(e), str(e)
        else:
            raise AssertionError(text)
    # a comment on its own line, and '#' / '+' as whole levels, are fine
    parse("# c\ntopic read a/+/b\n  # c\ntopic read #\npattern read d/%c/#\n")


def test_partly_denied_filters_need_a_check_per_message():
    g = parse("topic read #\ntopic deny secret/#\n").grants(None, "x")
    assert g.partly_denied(b"+/x") and g.partly_denied(b"#") and g.partly_denied(b"secret/a")
    assert not g.partly_denied(b"public/#") and not g.partly_denied(b"$SYS/#")
    assert g.may_receive(b"public/x", 0, 8) and not g.may_receive(b"secret/x", 0, 8)
    assert not g.may_receive(b"secret", 0, 6)  # "secret/#" matches its parent [MQTT-4.7.1-2]
    buf = bytearray(b"..top/x..")
    assert g.may_receive(buf, 2, 5)

