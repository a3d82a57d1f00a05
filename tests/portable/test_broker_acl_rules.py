# The ACL's rules at their edges (broker_acl), on CPython and MicroPython:
# - a '#' or '+' first level never grants a topic starting with '$'
#   [MQTT-4.7.2-1].
from broker_harness import running, Raw
from umqtt3.broker_acl import parse, covers


def _broker():
    return running(users={b"alice": b"pw", b"a+b": b"pw"}, allow_anonymous=True)


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
    g = parse("topic read #\ntopic read $SYS/#\n").grants(None, "x")
    assert g.may_read(b"$SYS/#")
    with _broker() as b, Raw(b) as c:
        b.set_acl("topic read #\n")
        c.connect("spy")
        assert c.subscribe(1, [("$SYS/#", 0), ("#", 0)]) == b"\x80\x00"
