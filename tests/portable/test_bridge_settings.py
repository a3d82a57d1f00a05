# The bridge's settings as a device gives them (a /config.json dict, or a
# file read with bridge_config.parse): each value's type and range checked
# by bridge.settings() at boot, in one line naming the key; the same file
# under CPython and the WebAssembly MicroPython (where there is no host name).
from support import raises
from umqtt3.bridge import settings, MAX_WINDOW
from umqtt3.bridge_config import parse

GOOD = {"name": "up", "host": "10.0.0.2", "rules": ["sensors/# out 1"]}


def _refused(what, **kw):
    cfg = dict(GOOD)
    cfg.update(kw)
    try:
        settings(cfg)
    except ValueError as e:
        assert what in str(e), (what, str(e))
        return
    raise AssertionError("taken: %r" % (kw,))


def test_wrong_types_are_refused_by_key():
    _refused("rules must be a list of rule lines", rules="sensors/#")
    _refused("backoff_ms must be two whole numbers", backoff_ms=[1000])
    _refused("backoff_ms must be two whole numbers", backoff_ms=(2000, 1000))
    _refused("keepalive must be a whole number 0-65535", keepalive="60")
    _refused("keepalive must be a whole number 0-65535", keepalive=70000)
    _refused("port must be a whole number 0-65535", port="1883")
    _refused("window must be a whole number 1-%d" % MAX_WINDOW, window=MAX_WINDOW + 1)
    _refused("outgoing_retain must be true or false", outgoing_retain=1)
    _refused("cafile must be a text", cafile="")
    _refused("a password needs a user name at MQTT 3.1.1", password="pw")  # [MQTT-3.1.2-22]
    _refused("status topic 'a/+' is not a topic name", status_topic="a/+")  # [MQTT-3.3.2-2]
    _refused("local prefix 'a/#/' has a wildcard", rules=["t out 1 a/#/ b/"])  # [MQTT-4.7.1-1]


def test_what_is_right_is_taken_keepalive_at_least_5():
    c = settings(dict(GOOD, keepalive=0, backoff_ms=[1000, 1000], level=5, password="pw"))
    assert (c["keepalive"], c["backoff_ms"], c["user"]) == (5, [1000, 1000], None)
    assert settings(dict(GOOD, keepalive=65535, window=MAX_WINDOW))["keepalive"] == 65535


def test_a_file_on_the_device():
    (c,) = parse("connection up\naddress 10.0.0.2\ntopic a out 1\nrestart_timeout 5\n"
                 "notifications false\nnotification_topic gw/st\n")
    assert c["backoff_ms"] == (5000, 5000) and c["status_topic"] is None
    # the default client id: HOSTNAME.NAME where Python knows a host name
    # (CPython), umqtt3-NAME where it does not (MicroPython)
    cid = settings(c)["client_id"]
    assert cid == "umqtt3-up" or cid.endswith(".up") and len(cid) > 3, cid
    raises(ValueError, parse, "connection up\ntopic a out 1\nbridge_cafile\n")
    # several addresses (failover), the main one first; each checked
    (c,) = parse("connection up\ntopic a out 1\naddress h1 [fe80::1]:1884 h3:1885\n"
                 "round_robin true\n")
    assert c["addresses"] == ["h1", "[fe80::1]:1884", "h3:1885"] and c["round_robin"] is True
    raises(ValueError, parse, "connection up\ntopic a out 1\naddress h1 ::1\n")
    raises(ValueError, parse, "connection up\ntopic a out 1\naddress h1 h2:0\n")
    raises(ValueError, parse, "connection up\ntopic a out 1\nround_robin 2\n")
    raises(ValueError, parse, "connection up\ntopic a\nconnection up\ntopic b\n")


def test_several_addresses_in_the_dict():
    from umqtt3.bridge import address
    cfg = {"name": "up", "addresses": ["10.0.0.2", "10.0.0.3:1884"], "rules": ["a out 1"]}
    c = settings(cfg)
    assert c["round_robin"] is False and [address(a) for a in c["addresses"]] == [
        ("10.0.0.2", 0), ("10.0.0.3", 1884)]
    assert address("[::1]") == ("::1", 0) and address("::1:1883") == ("::1", 1883)
    del cfg["addresses"]
    _refused('addresses must be a list of "HOST[:PORT]"', addresses="10.0.0.2 10.0.0.3")
    _refused("addresses or host and port, not both", addresses=["10.0.0.3"])  # GOOD has host
    _refused("round_robin must be true or false", round_robin=1)
    _refused("address 10.0.0.3:x: port 'x' is not a whole number", host="127.0.0.1",
             addresses=["10.0.0.3:x"])


def test_an_address_without_a_host_is_refused():
    # as `host ""` is: empty after the brackets, empty before the port, or
    # with whitespace (a dict from a device; the file splits on spaces)
    for a in ("[]", "[]:1883", ":1883", " 10.0.0.2", "10.0.0.2 ", "[ ]:1883"):
        _refused("address %r: no host" % a, host="127.0.0.1", addresses=["10.0.0.2", a])
    raises(ValueError, parse, "connection up\ntopic a out 1\naddress 10.0.0.2 :1883\n")
    raises(ValueError, parse, "connection up\ntopic a out 1\naddress []:1883\n")
