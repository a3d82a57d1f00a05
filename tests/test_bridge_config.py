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
    ("connection x\ntopic a\ntry_private true", "try_private true: not supported; the bridge "
                                                 "connects as a plain client"),
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
    (c,) = parse("connection x\naddress h\ntopic a out 1\ntry_private false\n"
                 "bridge_insecure false\nstart_type automatic\n"
                 "bridge_attempt_unsubscribe false\nbridge_outgoing_retain false\n")
    assert c["outgoing_retain"] is False
    for k in ("try_private", "bridge_insecure", "start_type", "bridge_attempt_unsubscribe"):
        assert k not in c
    (c,) = parse("connection x\ntopic a\nbridge_outgoing_retain true\n")
    assert c["outgoing_retain"] is True
