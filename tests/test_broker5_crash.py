# Power loss at every step of the broker's store, for what MQTT 5 adds to
# it: a persistent session's expiry interval, and the properties of
# retained and queued messages. tests/crashsim.py's SimFiles keeps only
# what is durable; the broker runs over pipes (tests/portable/broker_harness).
#
# The run: a level-5 subscriber makes a session (expiry 100 s) with one
# subscription and goes away; a level-5 publisher sends a retained QoS 1
# message and a plain QoS 1 message, both with properties. The power goes
# at step k, for every k until a run completes. A new broker then starts on
# the durable files, and what the clients were told must hold:
#   - a CONNACK promised the session: it is there, with its expiry interval
#     [MQTT-3.1.2-23 (5.0)], and after a SUBACK with its subscription and
#     its subscription identifier [MQTT-3.3.4-3];
#   - a PUBACK promised the message: the retained one is kept with its
#     properties, the queued one reaches the subscriber with its
#     properties, byte for byte [MQTT-3.3.2-17 .. 20 (5.0)], and the
#     subscription identifier after them.
from broker_harness import running, Raw, Timeout
from crashsim import SimFiles, PowerLoss
from test_broker5_connect import connect5, sub5, pub5, disconnect5, next_publish
from umqtt3 import props as P
from umqtt3.codec import encode_ack, PUBACK

RPROPS = P.encode({P.CONTENT_TYPE: "text/plain", P.USER_PROPERTY: [("k", "v")]})
QPROPS = P.encode({P.CORRELATION_DATA: b"\x01\x02", P.RESPONSE_TOPIC: "re"})
SID = P.encode({P.SUBSCRIPTION_ID: 9})


def _run(files, crash_at, seen):
    """One run until it is done or the power goes; seen collects what the
    clients were told. True when the power went."""
    sim = SimFiles(files, crash_at)
    try:
        b = None
        with running(store="/b", files=sim) as b:
            with Raw(b) as s:
                connect5(s, "s", clean=False, props={P.SESSION_EXPIRY: 100})
                seen.add("connack")
                sub5(s, 1, [("t/#", 1)], {P.SUBSCRIPTION_ID: 9})
                seen.add("suback")
                disconnect5(s)
            with Raw(b) as p:
                connect5(p, "p")
                pub5(p, "t/r", b"kept", 1, 1, retain=True, props=RPROPS)
                p.expect(PUBACK, 1)
                seen.add("retained")
                pub5(p, "t/q", b"queued", 1, 2, props=QPROPS)
                p.expect(PUBACK, 2)
                seen.add("queued")
        return False
    except PowerLoss:
        return True


def _check(files, seen):
    got = {}
    with running(store="/b", files=SimFiles(files)) as b:
        sess = b.sessions().get(b"s")
        if "connack" in seen:
            assert sess is not None and sess.expiry == 100
        if "suback" in seen:
            assert sess.filters == [b"t/#"] and sess.fsid == [9]
        if "retained" in seen:
            assert b.retained[b"t/r"] == (1, b"kept")
            assert b.ret.props[b"t/r"] == RPROPS
        if sess is not None:
            with Raw(b) as s:
                assert connect5(s, "s", clean=False, props={P.SESSION_EXPIRY: 100}).session_present
                while True:
                    try:
                        m = next_publish(s)
                    except Timeout:
                        break  # nothing more is queued
                    got[bytes(m.topic)] = bytes(m.buf[m.props_off:m.props_off + m.props_len])
                    s.put(encode_ack, PUBACK, m.pid)
    if "queued" in seen:
        assert got[b"t/q"] == QPROPS + SID
    if "retained" in seen and "suback" in seen:
        assert got[b"t/r"] == RPROPS + SID
    return got


def test_mqtt5_records_survive_power_loss_at_every_step():
    k = 1
    while True:
        files = {}
        seen = set()
        crashed = _run(files, k, seen)
        _check(files, seen)
        if not crashed:
            break
        k += 1
    assert k > 20  # the run has that many steps: the test reached them all
