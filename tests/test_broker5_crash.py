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
import pytest

from broker_harness import running, Raw, Timeout
from crashsim import SimFiles, PowerLoss
from test_broker5_connect import connect5, sub5, pub5, disconnect5, next_publish
from test_broker5_store import wall_clock, T0
from umqtt3 import props as P
from umqtt3.codec import encode_ack, PUBACK

# CPU-bound power-loss explorations on simulated files and clocks: make test
# runs them in a process of their own, beside the rest (Makefile)
pytestmark = pytest.mark.powerloss

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


# A delayed will and the end of a session across power loss: a client with
# a will delay of 30 s and a session of 60 s vanishes, the power goes at
# step k, and the broker restarts 100 s of wall clock later. The will is
# sent at most once, and once the broker had it on disk, it is sent (it
# fell due while the broker was down) [MQTT-3.1.3-9, 3.1.2.5]; the
# session, whose end is on disk with it and passed too, is gone
# [MQTT-3.1.2-23 (5.0)].
def _will_run(files, crash_at, seen):
    from broker_harness import wait_for
    sim = SimFiles(files, crash_at)
    try:
        with running(store="/w", files=sim) as b:
            with Raw(b) as s:
                connect5(s, "watch", clean=False, props={P.SESSION_EXPIRY: 1000})
                sub5(s, 1, [("will/#", 1)])
                disconnect5(s)
            seen.add("watcher")
            with Raw(b) as c:
                connect5(c, "dev", clean=False, props={P.SESSION_EXPIRY: 60},
                         will_topic="will/dev", will_msg=b"gone", will_qos=1,
                         will_props={P.WILL_DELAY: 30})
            assert wait_for(lambda: b.wills)
            seen.add("will")
        return False
    except PowerLoss:
        return True


def _will_check(files, seen):
    n = 0
    with running(store="/w", files=SimFiles(files)) as b:
        if "will" in seen:
            # its end was on disk and passed while the broker was down (a
            # session whose client never left on disk counts from start-up)
            assert b"dev" not in b.sessions()
        if "watcher" in seen:
            with Raw(b) as s:
                assert connect5(s, "watch", clean=False,
                                props={P.SESSION_EXPIRY: 1000}).session_present
                while True:
                    try:
                        m = next_publish(s)
                    except Timeout:
                        break
                    assert bytes(m.topic) == b"will/dev" and bytes(m.payload) == b"gone"
                    n += 1
                    s.put(encode_ack, PUBACK, m.pid)
    assert n <= 1
    if "will" in seen:
        assert n == 1
    return n


def test_delayed_will_survives_power_loss_at_every_step():
    k = 1
    sent = 0
    while True:
        files = {}
        seen = set()
        with wall_clock(T0) as w:
            crashed = _will_run(files, k, seen)
            w.t += 100
            sent += _will_check(files, seen)
        if not crashed:
            break
        k += 1
    assert k > 5 and sent >= 1  # the run had steps, and wills came through
