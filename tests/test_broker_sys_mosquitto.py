# The broker's $SYS figures next to mosquitto 2.0's for one scripted
# scenario, the same bytes sent to each over 127.0.0.1 with sys_interval 1:
# the counts whose meaning is the same must be equal (mosquitto(8), BROKER
# STATUS). tests/portable/test_broker_sys.py has the figures on the core.
#
# The observer connects first and subscribes to $SYS/broker/# last, once
# the scenario is over and both brokers have published at least one update
# since: the retained figures it gets then are the scenario's, its own
# CONNECT and CONNACK included, its SUBSCRIBE not yet.
import time

import pytest

from broker_harness import Timeout
from test_broker_harness import running, Raw
from umqtt3.codec import PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP, PINGREQ, PINGRESP

pytestmark = pytest.mark.interop

SAME = ("messages/received", "messages/sent", "publish/messages/sent", "bytes/received",
        "bytes/sent", "clients/connected", "clients/active", "clients/disconnected",
        "clients/inactive", "clients/expired", "subscriptions/count",
        "shared_subscriptions/count", "publish/bytes/received", "publish/bytes/sent",
        "publish/messages/dropped")


def _scenario(port, want=()):
    with Raw(port) as obs:
        obs.connect("obs")
        with Raw(port) as a, Raw(port) as c:
            a.connect("a", clean=False)  # persistent: stays after a leaves
            a.subscribe(1, "t", 2)
            a.subscribe(2, "u/#", 0)
            a.subscribe(3, "$share/g/v", 1)
            c.connect("c")
            c.publish("t", b"one", 1, pid=1)
            c.expect(PUBACK, 1)
            assert a.messages(1)[0][1] == b"one"
            c.publish("t", b"two" * 60, 2, pid=2)
            c.expect(PUBREC, 2)
            c.ack(PUBREL, 2)
            c.expect(PUBCOMP, 2)
            p = a.recv()
            assert p.type == PUBLISH and p.qos == 2
            a.ack(PUBREC, p.pid)
            a.expect(PUBREL, p.pid)
            a.ack(PUBCOMP, p.pid)
            c.publish("u/x", b"three", 0)
            assert a.messages(1)[0][1] == b"three"
            c.publish("nobody", b"four", 0)  # received, sent to no one
            a.simple(PINGREQ)
            a.expect(PINGRESP)
            a.send(b"\xe0\x00")  # DISCONNECT
            assert a.closed()
            c.publish("t", b"five" * 5, 1, pid=3)  # queued for a, which has gone
            c.expect(PUBACK, 3)
            c.publish("r", b"kept", 0, retain=True)  # held as the topic's retained message
            c.send(b"\xe0\x00")
            assert c.closed()
        # mosquitto updates $SYS when more than sys_interval whole seconds
        # have passed: at most 2 s apart at sys_interval 1
        time.sleep(3.5)
        obs.subscribe(1, "$SYS/broker/#", 0)
        got = {}
        end = time.monotonic() + 10
        while True:
            try:
                m = obs.recv(1.0)
            except Timeout:
                # ours publishes load/ from the update after the first
                # $SYS subscription (mosquitto's were retained before)
                if all(k in got for k in want) or time.monotonic() > end:
                    break
                continue
            if m is None:
                break
            t = bytes(m.topic)[len(b"$SYS/broker/"):].decode()
            if m.type == PUBLISH and t not in got:  # the retained one, from before the SUBSCRIBE
                got[t] = bytes(m.payload).decode()
        return got


@pytest.mark.slow
def test_sys_counts_match_mosquitto(broker_factory):
    theirs = _scenario(broker_factory(extra=["sys_interval 1"]).port)
    # a queue as mosquitto's (max_queued_messages 1000, no byte limit): the
    # observer takes every retained figure at once
    with running(sys_interval=1, max_queued=1000, max_queued_bytes=0) as b:
        ours = _scenario(b.port, [k for k in theirs if k.startswith("load/")])
    assert theirs["clients/disconnected"] == "1"  # (mosquitto has the meaning we think)
    assert theirs["bytes/received"] != "0"
    for k in SAME:
        assert (k, ours.get(k)) == (k, theirs.get(k))
    # messages/stored (store/messages/count): the retained messages, $SYS's
    # too (whose topics differ), and one more: the message queued for a
    for x in (ours, theirs):
        assert x["store/messages/count"] == x["messages/stored"]
        assert int(x["messages/stored"]) - int(x["retained messages/count"]) == 1
    # mosquitto 2.0.11 leaves a QoS 2 PUBLISH and a retained one out of
    # publish/messages/received (its bytes/received and publish/bytes/received
    # have them); ours counts every PUBLISH received
    assert int(ours["publish/messages/received"]) == int(theirs["publish/messages/received"]) + 2
    # the averages exist where mosquitto has them, as numbers with 2 decimals
    for k in theirs:
        if k.startswith("load/") and not k.startswith("load/publish/dropped"):
            assert ours[k].count(".") == 1 and len(ours[k].split(".")[1]) == 2, (k, ours.get(k))
