# Bridges from a mosquitto-style configuration file and from the broker's
# command line (umqtt3.bridge_config): what is accepted, and the one-line
# refusal of what is not.
import pytest

from certs import self_signed
from refusal import refused
from umqtt3.bridge_config import parse, address

CONF = """
# the site's cloud broker
connection cloud
address broker.example:8883
topic sensors/# out 2 gw/ site1/
topic cmd/# in 1 "" site1/
remote_clientid gw1
remote_username gw
remote_password pw
bridge_protocol_version mqttv50
bridge_tls true
keepalive_interval 30
restart_timeout 2 60
notification_topic site1/gw/state
bridge_queue_size 500
bridge_queue_qos0 10
bridge_window 4
bridge_inflight_in 20

connection second
address 10.0.0.3
topic # both 1
notifications false
cleansession false
"""


def test_a_file_with_two_connections():
    a, b = parse(CONF)
    assert (a["name"], a["host"], a["port"], a["client_id"]) == ("cloud", "broker.example", 8883, "gw1")
    assert a["rules"][1] == 'cmd/# in 1 "" site1/'
    assert (a["user"], a["password"], a["level"], a["tls"]) == ("gw", "pw", 5, True)
    assert (a["keepalive"], a["backoff_ms"]) == (30, (2000, 60000))
    assert (a["status_topic"], a["queue_size"], a["queue_qos0"], a["window"]) == (
        "site1/gw/state", 500, 10, 4)
    assert a["inflight_in"] == 20
    assert (b["host"], b["port"], b["status_topic"]) == ("10.0.0.3", 0, None)


@pytest.mark.parametrize("text, what", [
    ("topic a out 1", "before the first `connection NAME`"),
    ("connection x\ntopic a out 3", "line 2: topic rule 'a out 3': QoS '3'"),
    ("connection x\ntopic a out 1\ncleansession true", "persistent session"),
    ("connection x\ntopic a\nbridge_cafile /nonexistent/ca.pem", "bridge x: cafile /nonexistent/ca.pem"),
    ("connection x\ntopic a\nbridge_capath /etc/ssl", "bridge_capath: not supported"),
    ("connection x\ntopic a\nbridge_certfile c.pem", "bridge x: certfile and keyfile go together"),
    ("connection x\ntopic a\nbridge_keyfile c.key", "bridge x: certfile and keyfile go together"),
    ("connection x\ntopic a\nbridge_certfile c.pem\nbridge_keyfile c.key",
     "bridge x: certfile needs cafile"),
    ("connection x\ntopic a\ntry_private maybe", "line 3: try_private: 'maybe' is not true or "
                                                  "false"),
    ("connection x\ntopic a\nbridge_insecure true", "bridge_insecure true: not supported; "
                                                     "the upstream's name is always checked"),
    ("connection x\ntopic a\nstart_type lazy", "start_type lazy: not supported"),
    ("connection x\ntopic a\nstart_type once", "start_type once: not supported"),
    ("connection x\ntopic a\nbridge_attempt_unsubscribe true",
     "bridge_attempt_unsubscribe true: not supported; the bridge never unsubscribes"),
    ("connection x\ntopic a\nbridge_outgoing_retain maybe", "line 3: bridge_outgoing_retain: "
                                                             "'maybe' is not true or false"),
    ("connection x\ntopic a\nlocal_clientid gw", "local_clientid is not a bridge setting"),
    ("connection x\naddress h:99999", "port outside"),
    ("connection x\ntopic a\nbridge_inflight_in 0", "line 3: bridge_inflight_in: 0 is below 1"),
    ("connection x\naddress h", "no topic rule"),
    ("# nothing", "no `connection NAME`"),
])
def test_bad_files_are_refused_by_line(text, what):
    with pytest.raises(ValueError) as e:
        parse(text)
    assert what in str(e.value)


def test_address():
    assert address("h") == ("h", 0) and address("[::1]:1884") == ("::1", 1884)


def test_cli_refuses_bad_bridge_arguments_in_one_line(tmp_path):
    bad = tmp_path / "b.conf"
    bad.write_text("connection x\ntopic a sideways\n")
    refused("umqtt3.broker", ["--port", "0", "--bridge-config", str(bad)],
            "line 2: topic rule 'a sideways'", 1)
    refused("umqtt3.broker", ["--port", "0", "--bridge-config", str(tmp_path / "none")],
            "--bridge-config", 1)
    refused("umqtt3.broker", ["--port", "0", "--bridge-topic", "a out 1"],
            "--bridge-topic without --bridge", 1)
    refused("umqtt3.broker", ["--port", "0", "--bridge", "h:1"], "no topic rule", 1)


def test_client_certificate_files_are_read_at_start_up(tmp_path):
    # bridge_certfile / bridge_keyfile: loaded into the bridge_cafile
    # context when the file is read; a missing file or a key that is not
    # the certificate's stops the broker in one line
    ca, _ = self_signed(tmp_path, "ca")
    cert, key = self_signed(tmp_path, "gw")
    _, other_key = self_signed(tmp_path, "other")
    conf = "connection x\ntopic a\nbridge_cafile %s\nbridge_certfile %s\nbridge_keyfile %s\n"
    (c,) = parse(conf % (ca, cert, key))
    assert (c["cafile"], c["certfile"], c["keyfile"]) == (ca, cert, key)
    from umqtt3.bridge import settings
    assert settings(c)["tls"] is not None
    for cf, kf, what in ((cert, other_key, "bridge x: certfile %s, keyfile %s" % (cert, other_key)),
                         (str(tmp_path / "none.pem"), key, "none.pem")):
        with pytest.raises(ValueError) as e:
            parse(conf % (ca, cf, kf))
        assert what in str(e.value)
    bad = tmp_path / "b.conf"
    bad.write_text(conf % (ca, cert, other_key))
    refused("umqtt3.broker", ["--port", "0", "--bridge-config", str(bad)],
            "keyfile %s" % other_key, 1)


def test_lines_that_say_what_the_bridge_does_anyway_are_accepted():
    # a mosquitto bridge section as users copy it starts: these lines say
    # what this bridge always does; bridge_outgoing_retain false is kept
    (c,) = parse("connection x\naddress h\ntopic a out 1\n"
                 "bridge_insecure false\nstart_type automatic\n"
                 "bridge_attempt_unsubscribe false\nbridge_outgoing_retain false\n")
    assert c["outgoing_retain"] is False
    for k in ("bridge_insecure", "start_type", "bridge_attempt_unsubscribe"):
        assert k not in c
    (c,) = parse("connection x\ntopic a\nbridge_outgoing_retain true\n")
    assert c["outgoing_retain"] is True


# ---- settings mosquitto refuses, or that cannot work: refused at start-up in
# one line naming the line or the key, never accepted and failing later

BASE = "connection up\naddress 127.0.0.1:1\ntopic x/# out 1\n"


@pytest.mark.parametrize("extra, what", [
    # Keep Alive is a Two Byte Integer (3.1.1 section 3.1.2.10); mosquitto:
    # "Bridge keepalive value too high"
    ("keepalive_interval 70000", "line 4: keepalive_interval: 70000 is above 65535"),
    ("keepalive_interval -1", "line 4: keepalive_interval: -1 is below 0"),
    # no password without a user name at 3.1.1 [MQTT-3.1.2-22]
    ("remote_password pw", "bridge up: a password needs a user name at MQTT 3.1.1"),
    ("bridge_protocol_version mqttv311\nremote_password pw", "a password needs a user name"),
    # a prefix is part of topic names: no wildcard [MQTT-4.7.1-1]
    ("topic t/# out 1 a/+/ up/", "line 4: topic rule 't/# out 1 a/+/ up/': local prefix 'a/+/' "
                                 "has a wildcard"),
    ("topic t/# in 1 a/ +/", "remote prefix '+/' has a wildcard"),
    ("topic t/# both 1 a/#/ up/", "local prefix 'a/#/' has a wildcard"),
    ("topic t in 1 \"\" up/#/", "remote prefix 'up/#/' has a wildcard"),
    # the will and the status go on it: a topic name [MQTT-3.3.2-2]
    ("notification_topic st/#", "bridge up: status topic 'st/#' is not a topic name"),
    ("notification_topic st/+/x", "status topic 'st/+/x' is not a topic name"),
    ("remote_clientid gw+1", "status topic 'umqtt3/bridge/gw+1/state' is not a topic name"),
    # one upstream session and one queue per name (mosquitto: "Duplicate bridge name")
    ("connection up\ntopic y/# out 1", "line 4: connection up: a second bridge of that name"),
    # several addresses (failover): each one checked, round_robin a boolean
    ("address 127.0.0.1:1 h2:0", "line 4: address h2:0: port outside 1-65535"),
    ("addresses h1 ::1", "line 4: address ::1: an IPv6 address needs its port: [ADDR]:PORT"),
    ("addresses h1 h2:x", "address h2:x: port 'x' is not a whole number"),
    ("round_robin maybe", "line 4: round_robin: 'maybe' is not true or false"),
    ("restart_timeout 1 2 3", "line 4: restart_timeout: one value (constant) or two"),
    ("restart_timeout 60 30", "restart_timeout: 30 is below 60"),
    # the upstream client's RAM pool is 1 KiB for the whole window
    ("bridge_window 1025", "line 4: bridge_window: 1025 is above 1024"),
])
def test_settings_that_cannot_work_are_refused(extra, what):
    with pytest.raises(ValueError) as e:
        parse(BASE + extra + "\n")
    assert what in str(e.value)


@pytest.mark.parametrize("key", [
    "address", "addresses", "topic", "remote_clientid", "remote_username", "remote_password",
    "bridge_protocol_version", "keepalive_interval", "restart_timeout", "cleansession",
    "notifications", "notification_topic", "bridge_tls", "bridge_cafile", "bridge_certfile",
    "bridge_keyfile", "bridge_outgoing_retain", "bridge_queue_size", "bridge_queue_qos0",
    "bridge_window", "bridge_inflight_in", "try_private", "start_type", "round_robin"])
def test_a_setting_without_its_value_is_refused(key):
    # never a traceback, never a default in its place (a bare bridge_cafile
    # is not plain TCP)
    with pytest.raises(ValueError) as e:
        parse(BASE + key + "\n")
    assert str(e.value) == "line 4: %s without its value" % key
    with pytest.raises(ValueError) as e:
        parse(BASE + key + "   \t \n")
    assert str(e.value) == "line 4: %s without its value" % key


def test_the_cli_refuses_them_in_one_line_before_it_serves(tmp_path):
    for n, (extra, what) in enumerate([
            ("keepalive_interval 70000", "line 4: keepalive_interval: 70000 is above 65535"),
            ("remote_password secret", "a password needs a user name at MQTT 3.1.1"),
            ("address", "line 4: address without its value"),
            ("restart_timeout", "line 4: restart_timeout without its value"),
            ("bridge_cafile", "line 4: bridge_cafile without its value"),
            ("connection up\ntopic y/# out 1", "line 4: connection up: a second bridge"),
            ("notification_topic st/#", "status topic 'st/#' is not a topic name")]):
        f = tmp_path / ("b%d.conf" % n)
        f.write_text(BASE + extra + "\n")
        refused("umqtt3.broker", ["--port", "0", "--bridge-config", str(f)], what, 1)
    f = tmp_path / "bridge.conf"
    f.write_text("connection bridge\ntopic x/# out 1\n")
    refused("umqtt3.broker", ["--port", "0", "--bridge-config", str(f), "--bridge", "h:1",
                              "--bridge-topic", "y out 1"],
            "--bridge: --bridge-config has a `connection bridge` already", 1)


def test_keepalive_below_5_is_raised_to_5_as_mosquitto_does():
    # 0 would switch keep-alive off [MQTT-3.1.2-10]: a hung upstream never
    # noticed while idle; mosquitto: "keepalive interval too low, using 5 seconds"
    from umqtt3.bridge import settings
    for v, want in (("0", 5), ("2", 5), ("5", 5), ("6", 6), ("65535", 65535)):
        (c,) = parse(BASE + "keepalive_interval %s\n" % v)
        assert settings(c)["keepalive"] == want
    assert settings({"rules": ["a"], "keepalive": 0})["keepalive"] == 5


def test_a_password_without_a_user_name_is_taken_at_mqtt5():
    # MQTT 5 allows it (3.1.2.9); 3.1.1 does not [MQTT-3.1.2-22]
    from umqtt3.bridge import settings
    (c,) = parse(BASE + "bridge_protocol_version mqttv50\nremote_password pw\n")
    assert settings(c)["password"] == "pw" and settings(c)["user"] is None
    (c,) = parse(BASE + "remote_username u\nremote_password pw\n")
    assert settings(c)["password"] == "pw"


def test_notifications_false_stays_false_whatever_the_order():
    # mosquitto: notifications switches them, notification_topic only names the topic
    for lines in ("notifications false\nnotification_topic gw/st",
                  "notification_topic gw/st\nnotifications false"):
        (c,) = parse(BASE + lines + "\n")
        assert c["status_topic"] is None
    (c,) = parse(BASE + "notifications false\nnotification_topic gw/st\nnotifications true\n")
    assert c["status_topic"] == "gw/st"
    (c,) = parse(BASE + "notifications false\nnotifications true\n")
    from umqtt3.bridge import settings
    assert settings(c)["status_topic"].startswith("umqtt3/bridge/")


def test_restart_timeout_one_value_is_a_constant_delay():
    # mosquitto.conf(5): "restart_timeout 20 ... a constant timeout of 20 seconds"
    (c,) = parse(BASE + "restart_timeout 2\n")
    assert c["backoff_ms"] == (2000, 2000)
    (c,) = parse(BASE + "restart_timeout 60\n")
    assert c["backoff_ms"] == (60000, 60000)
    (c,) = parse(BASE + "restart_timeout 10 30\n")
    assert c["backoff_ms"] == (10000, 30000)


def test_bridge_window_up_to_1024():
    from umqtt3.bridge import settings
    (c,) = parse(BASE + "bridge_window 1024\n")
    assert settings(c)["window"] == 1024
    with pytest.raises(ValueError) as e:
        settings({"rules": ["a"], "window": 1025})
    assert "window must be a whole number 1-1024, not 1025" in str(e.value)


def test_the_default_client_id_is_hostname_dot_name_as_mosquitto():
    # two gateways with the same file: two upstream sessions, not one stolen
    # back and forth (mosquitto's default remote_clientid)
    import socket
    from umqtt3.bridge import settings
    from umqtt3.bridge_config import from_args
    (c,) = parse(BASE)
    host = socket.gethostname()
    assert settings(c)["client_id"] == host + ".up"
    assert settings(c)["status_topic"] == "umqtt3/bridge/%s.up/state" % host
    (c,) = parse(BASE + "remote_clientid gw1\n")
    assert settings(c)["client_id"] == "gw1"

    class A:
        bridge_config = None
        bridge = "h:1"
        bridge_topic = ["a out 1"]
    (c,) = from_args(A)
    assert c["client_id"] == host + ".bridge"
    # the API's dict (a device has no host name): umqtt3-NAME, as before
    assert settings({"rules": ["a"], "name": "n1"})["client_id"] == "umqtt3-n1"


def test_cli_bridge_takes_several_addresses_for_failover():
    # --bridge H1[:P1],H2[:P2]: one bridge, the first address the main one,
    # as an `address H1 H2` line; one address stays host and port
    from umqtt3.bridge_config import from_args

    class A:
        bridge_config = None
        bridge = "10.0.0.2:1883,[::1]:1884,backup"
        bridge_topic = ["a out 1"]
    (c,) = from_args(A)
    assert c["addresses"] == ["10.0.0.2:1883", "[::1]:1884", "backup"]
    assert "host" not in c and "port" not in c
    A.bridge = "10.0.0.2:1883"
    (c,) = from_args(A)
    assert (c["host"], c["port"]) == ("10.0.0.2", 1883) and "addresses" not in c
    for bad, what in (("h:1,:1883", "--bridge: address ':1883': no host"),
                      ("h:1,h2:x", "--bridge: address h2:x: port 'x' is not a whole number"),
                      (",", "--bridge: no address")):
        A.bridge = bad
        with pytest.raises(ValueError) as e:
            from_args(A)
        assert str(e.value).startswith(what), e.value
    refused("umqtt3.broker", ["--port", "0", "--bridge", "h:1,h2:0", "--bridge-topic", "a out 1"],
            "--bridge: address h2:0: port outside 1-65535", 1)


@pytest.mark.parametrize("key, value, what", [
    # a device's /config.json "bridge" dict, typed by hand: refused when the
    # settings are checked (at boot), never by a raise in the broker's loop
    ("rules", "sensors/#", "bridge up: rules must be a list of rule lines, not 'sensors/#'"),
    ("rules", [1], "rules must be a list of rule lines"),
    ("backoff_ms", [1000], "bridge up: backoff_ms must be two whole numbers 0 < LO <= HI"),
    ("backoff_ms", ["1", "2"], "backoff_ms must be two whole numbers"),
    ("backoff_ms", [2000, 1000], "backoff_ms must be two whole numbers"),
    ("backoff_ms", 1000, "backoff_ms must be two whole numbers"),
    ("keepalive", "60", "bridge up: keepalive must be a whole number 0-65535, not '60'"),
    ("keepalive", 70000, "keepalive must be a whole number 0-65535, not 70000"),
    ("keepalive", 60.0, "keepalive must be a whole number"),
    ("timeout_ms", "3000", "timeout_ms must be a whole number"),
    ("port", "1883", "port must be a whole number 0-65535, not '1883'"),
    ("port", 70000, "port must be a whole number 0-65535"),
    ("host", 10, "host must be a host name or address"),
    ("window", "8", "window must be a whole number 1-1024"),
    ("queue_size", True, "queue_size must be a whole number"),
    ("outgoing_retain", "no", "outgoing_retain must be true or false"),
    ("cafile", "", "cafile must be a text, not ''"),
    ("user", 7, "user must be a text, not 7"),
    ("status_topic", "a/#", "status topic 'a/#' is not a topic name"),
    ("password", "pw", "a password needs a user name at MQTT 3.1.1"),
    ("name", 5, "bridge name 5: letters, digits"),
])
def test_a_device_dict_with_a_wrongly_typed_value_is_refused(key, value, what):
    from umqtt3.bridge import settings
    cfg = {"name": "up", "host": "10.0.0.2", "rules": ["sensors/# out 1"]}
    cfg[key] = value
    with pytest.raises(ValueError) as e:
        settings(cfg)
    assert what in str(e.value)


def test_a_device_dict_that_is_right_is_taken():
    from umqtt3.bridge import settings
    c = settings({"name": "up", "host": "10.0.0.2", "port": 1883, "rules": ("a/# out 1",),
                  "backoff_ms": [1000, 30000], "keepalive": 30, "level": 5, "password": "pw",
                  "outgoing_retain": False, "status_topic": None, "timeout_ms": 3000})
    assert (c["backoff_ms"], c["keepalive"], c["password"], c["status_topic"]) == (
        [1000, 30000], 30, "pw", None)
