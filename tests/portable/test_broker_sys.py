# The broker's $SYS figures that mosquitto's dashboards read beyond the
# packet counts (test_broker_pubsub.py has those): bytes/*, the clients
# without a connection, subscriptions/count and the load/* moving averages
# (mosquitto(8), BROKER STATUS). In memory, the broker's clock moved by the
# test; tests/test_broker_sys_mosquitto.py compares the counts with
# mosquitto's own for one scenario.
from math import exp

from broker_harness import running, Raw, advance, wait_for, Timeout, TIMEOUT
from test_broker5_connect import connect5, sub5, pub5
from umqtt3 import props as P
from umqtt3.codec import PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP, PINGREQ, PINGRESP


class Tally(Raw):
    """A Raw client that counts the bytes it sends and receives."""

    def __init__(self, b):
        Raw.__init__(self, b)
        self.sent = self.got = 0
        ch = self.ch
        send = ch.send
        read = ch.read

        def counted_send(data):
            self.sent += len(data)
            send(data)

        def counted_read(n, timeout):
            d = read(n, timeout)
            if d is not None:
                self.got += len(d)
            return d
        ch.send = counted_send
        ch.read = counted_read


def _sys(b, name):
    m = b.retained.get(b"$SYS/broker/" + name)
    return m and m[1]


def _num(b, name):
    v = _sys(b, name)
    return None if v is None else int(v)


def test_sys_bytes_count_every_byte_each_way():
    # bytes/received and bytes/sent: every byte of every packet, each way
    # (CONNECT, PUBLISH at each QoS and its acks, SUBSCRIBE, PINGREQ,
    # DISCONNECT), as mosquitto counts them
    with running(sys_interval=1) as b, Tally(b) as a, Tally(b) as c:
        a.connect("a")
        a.subscribe(1, "t", 2)
        c.connect("c")
        c.publish("t", b"one", 1, pid=1)
        c.expect(PUBACK, 1)
        assert a.messages(1)[0][1] == b"one"  # (a's PUBACK sent by messages())
        c.publish("t", b"two" * 50, 2, pid=2)  # a payload past 127: a longer header
        c.expect(PUBREC, 2)
        c.ack(PUBREL, 2)
        c.expect(PUBCOMP, 2)
        p = a.recv()
        assert p.type == PUBLISH and p.qos == 2
        a.ack(PUBREC, p.pid)
        a.expect(PUBREL, p.pid)
        a.ack(PUBCOMP, p.pid)
        c.publish("t", b"three", 0)
        assert a.messages(1)[0][1] == b"three"
        a.simple(PINGREQ)
        a.expect(PINGRESP)
        c.send(b"\xe0\x00")  # DISCONNECT
        assert c.closed()
        advance(1100)
        assert wait_for(lambda: _num(b, b"clients/connected") == 1)
        assert _num(b, b"bytes/received") == a.sent + c.sent
        assert _num(b, b"bytes/sent") == a.got + c.got
        assert a.got + c.got > 0


def test_sys_bytes_go_on_counting_past_a_small_int():
    # the counts carry into a count of CARRY bytes once a second: on a
    # device the int counted at each packet stays small (no allocation),
    # and bytes/received and bytes/sent go on from where they were
    from umqtt3.broker_core import CARRY
    with running(sys_interval=1) as b, Tally(b) as c:
        b.bytes_in = CARRY - 10
        b.bytes_out = CARRY - 3
        c.connect("c")
        c.simple(PINGREQ)
        c.expect(PINGRESP)
        advance(1100)
        assert wait_for(lambda: _num(b, b"bytes/received") == CARRY - 10 + c.sent)
        assert _num(b, b"bytes/sent") == CARRY - 3 + c.got
        assert b.bytes_in < CARRY and b.bytes_out < CARRY


def test_sys_packet_counts_go_on_counting_past_a_small_int():
    # the packet counts carry too: a gateway passes 2^30 packets (where a
    # device's small int ends) in months; messages/* go on from where they were
    from umqtt3.broker_core import CARRY
    with running(sys_interval=1) as b, Tally(b) as c:
        b.received = CARRY - 1
        b.others_in = CARRY - 2
        b.sent = CARRY + 5
        b.others_out = CARRY + 7
        c.connect("c")  # CONNECT in, CONNACK out
        c.publish("t", b"x", 0)  # a PUBLISH in
        advance(1100)
        assert wait_for(lambda: _num(b, b"publish/messages/received") == CARRY)
        assert _num(b, b"messages/received") == 2 * CARRY - 1  # + the CONNECT
        assert _num(b, b"publish/messages/sent") == CARRY + 5
        assert _num(b, b"messages/sent") == 2 * CARRY + 13  # + the CONNACK
        assert max(b.received, b.others_in, b.sent, b.others_out) < CARRY


def test_sys_sessions_without_a_client_and_subscriptions():
    # clients/disconnected (and its older name clients/inactive): persistent
    # sessions whose client is gone; clients/active is clients/connected;
    # subscriptions/count: every session's subscriptions, those of the
    # sessions without a client too; shared_subscriptions/count the shared
    # ones [MQTT-4.8.2-1], which subscriptions/count leaves out (mosquitto)
    with running(sys_interval=1) as b, Raw(b) as a, Raw(b) as c:
        a.connect("a", clean=False)
        a.subscribe(1, "x/#", 1)
        a.subscribe(2, "y", 0)
        c.connect("c")
        c.subscribe(1, "z", 0)
        c.subscribe(2, "$share/g/z", 0)  # counted apart, as mosquitto's
        a.send(b"\xe0\x00")  # DISCONNECT: its session stays [MQTT-3.1.2-4]
        assert a.closed()
        advance(1100)
        assert wait_for(lambda: _num(b, b"clients/disconnected") == 1)
        assert _num(b, b"clients/inactive") == 1
        assert _num(b, b"clients/connected") == 1
        assert _num(b, b"clients/active") == 1
        assert _num(b, b"clients/total") == 2
        assert _num(b, b"subscriptions/count") == 3
        assert _num(b, b"shared_subscriptions/count") == 1
        c.send(b"\xe0\x00")
        assert c.closed()
        advance(1100)
        assert wait_for(lambda: _num(b, b"clients/connected") == 0)
        assert _num(b, b"clients/disconnected") == 1
        assert _num(b, b"subscriptions/count") == 2  # c's clean session went with it
        assert _num(b, b"shared_subscriptions/count") == 0


def test_sys_clients_expired_counts_sessions_whose_interval_ran_out():
    # clients/expired, as mosquitto's: sessions ended by their expiry
    # interval with no client [MQTT-3.1.2-23 (5.0)]; one that is resumed in
    # time is not counted
    from test_broker5_connect import leave
    with running(sys_interval=1) as b:
        leave(b, "short", 1, [("a", 0)])
        leave(b, "long", 600, [("b", 0)])
        advance(2100)
        assert wait_for(lambda: _num(b, b"clients/expired") == 1)
        assert _num(b, b"clients/disconnected") == 1  # "long" is still there
        assert _num(b, b"subscriptions/count") == 1


def _uptime(b):
    return int(_sys(b, b"uptime").split()[0])


def test_sys_load_is_mosquittos_moving_average():
    # load/...: a rate per minute, averaged over 1, 5 and 15 minutes with
    # mosquitto's formula; 0.00 at the first update once something reads $SYS
    with running(sys_interval=10) as b, Raw(b) as w:
        w.connect("w")
        w.subscribe(1, "$SYS/broker/load/publish/#", 0)
        advance(10000)
        assert wait_for(lambda: _sys(b, b"load/publish/received/1min") is not None)
        t0 = _uptime(b)
        for span in (b"1min", b"5min", b"15min"):
            assert _sys(b, b"load/publish/received/" + span) == b"0.00"
            assert _sys(b, b"load/bytes/sent/" + span) == b"0.00"
        with Raw(b) as c:
            c.connect("c")
            for i in range(60):
                c.publish("t", b"x", 0)
            c.simple(PINGREQ)
            c.expect(PINGRESP)  # all 60 handled
            advance(10000)
            assert wait_for(lambda: _uptime(b) > t0)
            dt = _uptime(b) - t0
            rate = 60 * 60.0 / dt
            avg = {}
            for span, secs in ((b"1min", 60), (b"5min", 300), (b"15min", 900)):
                avg[span] = rate * (1 - exp(-dt / secs))
                got = float(_sys(b, b"load/publish/received/" + span))
                assert abs(got - avg[span]) < 0.011, (span, got, avg[span])
            t1 = _uptime(b)
            # nothing published for a while: each average decays towards 0
            advance(10000)
            assert wait_for(lambda: _uptime(b) > t1)
            dt = _uptime(b) - t1
            for span, secs in ((b"1min", 60), (b"5min", 300), (b"15min", 900)):
                want = avg[span] * exp(-dt / secs)
                got = float(_sys(b, b"load/publish/received/" + span))
                assert abs(got - want) < 0.011, (span, got, want)
            assert float(_sys(b, b"load/messages/received/1min")) > 0
            assert float(_sys(b, b"load/bytes/received/1min")) > 0
            assert float(_sys(b, b"load/connections/1min")) > 0



def _no_uplink():
    raise OSError(111)  # (the bridge never connects: its rules are what count)


def test_sys_load_starts_for_a_bridge_that_takes_sys_up():
    # a bridge with an out rule for some of $SYS/broker/load/ reads the
    # averages as a subscriber does; one for "#" does not ($SYS/ is not in
    # it [MQTT-4.7.2-1]), nor one for other $SYS/ topics
    from umqtt3.bridge import install
    for rule, loads in (("# out 0", False), ("$SYS/# out 0 \"\" gw/", True),
                        ("$SYS/broker/load/bytes/# out 0", True),
                        ("$SYS/broker/load/+/+/5min out 0", True),
                        ("+/broker/load/# out 0", False), ("$SYS/broker/uptime out 0", False),
                        ("$SYS/broker/load/# in 0", False)):
        with running(sys_interval=1) as b:
            install(b, [{"name": "up", "rules": [rule], "link": _no_uplink,
                         "backoff_ms": (1000, 1000)}])
            for _ in range(2):
                t = _uptime(b) if _sys(b, b"uptime") else -1
                advance(1100)
                assert wait_for(lambda: _sys(b, b"uptime") and _uptime(b) > t)
            assert (b.load is not None) == loads, rule

class Wire(Raw):
    """A Raw client that counts what it receives: packets, PUBLISHes and
    their payloads' bytes."""

    def __init__(self, b, tally):
        Raw.__init__(self, b)
        self.tally = tally  # [packets, PUBLISHes, payload bytes], shared

    def recv(self, timeout=TIMEOUT):
        p = Raw.recv(self, timeout)
        if p is not None:
            t = self.tally
            t[0] += 1
            if p.type == PUBLISH:
                t[1] += 1
                t[2] += len(p.payload)
        return p

    def drain(self):
        """Read and acknowledge whatever comes, until nothing does."""
        while True:
            try:
                p = self.recv(0.3)
            except Timeout:
                return
            if p is None:
                return
            if p.type == PUBLISH and p.qos:
                self.ack(PUBACK if p.qos == 1 else PUBREC, p.pid)
            elif p.type == PUBREL:
                self.ack(PUBCOMP, p.pid)


def test_sys_sent_counts_every_packet_that_leaves():
    # messages/sent, publish/messages/sent and publish/bytes/sent against
    # what the clients received, over the ways the broker sends: every ack,
    # a refused CONNACK, retained delivery, QoS 0/1/2 straight through,
    # in-flight messages and a PUBREL sent again on a session's return, its
    # queue, MQTT 5 PUBLISHes with properties. A way of sending that does
    # not count what it sends makes the figures fall short.
    tally = [0, 0, 0]
    with running(sys_interval=1) as b, Wire(b, tally) as a, Wire(b, tally) as c, \
            Wire(b, tally) as v, Wire(b, tally) as x:
        a.connect("a", clean=False)
        a.subscribe(1, "t/#", 2)
        c.connect("c")
        c.publish("r", b"kept", 1, pid=1, retain=True)
        c.expect(PUBACK, 1)
        a.subscribe(2, "r", 1)  # the retained message
        assert a.messages(1)[0][1] == b"kept"
        c.publish("t/0", b"zero", 0)
        c.publish("t/1", b"one", 1, pid=2)
        c.expect(PUBACK, 2)
        c.publish("t/2", b"two" * 50, 2, pid=3)
        c.expect(PUBREC, 3)
        c.ack(PUBREL, 3)
        c.expect(PUBCOMP, 3)
        assert len(a.messages(3)) == 3  # acknowledged
        p = a.expect(PUBREL)  # (the QoS 2 one's)
        a.ack(PUBCOMP, p.pid)
        # in flight when a goes: sent again when it comes back
        c.publish("t/3", b"three", 1, pid=4)
        c.expect(PUBACK, 4)
        c.publish("t/4", b"four", 2, pid=5)
        c.expect(PUBREC, 5)
        c.ack(PUBREL, 5)
        c.expect(PUBCOMP, 5)
        got = [a.recv(), a.recv()]
        assert [p.type for p in got] == [PUBLISH, PUBLISH]
        a.ack(PUBREC, got[1].pid)
        a.expect(PUBREL, got[1].pid)  # not completed: sent again too
        a.send(b"\xe0\x00")  # DISCONNECT
        a.drain()
        # queued while a is away
        c.publish("t/5", b"five", 1, pid=6)
        c.expect(PUBACK, 6)
        c.publish("t/6", b"six", 2, pid=7)
        c.expect(PUBREC, 7)
        c.ack(PUBREL, 7)
        c.expect(PUBCOMP, 7)
        with Wire(b, tally) as a2:
            assert a2.connect("a", clean=False).session_present
            a2.simple(PINGREQ)
            a2.drain()
            a2.unsubscribe(3, "r")
            # MQTT 5, a property list in each PUBLISH; its queue too
            connect5(v, "v", clean=False, props={P.SESSION_EXPIRY: 60})
            sub5(v, 1, [("t/#", 1)])
            pub5(v, "t/7", b"seven", 1, pid=1)
            v.drain()  # its PUBACK, and the message (v subscribes to it too)
            v.send(b"\xe0\x00")  # DISCONNECT
            v.drain()
            c.publish("t/8", b"eight" * 30, 1, pid=8)
            c.expect(PUBACK, 8)
            with Wire(b, tally) as v2:
                assert connect5(v2, "v", clean=False, props={P.SESSION_EXPIRY: 60}).session_present
                v2.drain()
            a2.drain()
            # refused: protocol level 9 [MQTT-3.1.2-2]
            x.send(b"\x10\x0c\x00\x04MQTT\x09\x02\x00\x00\x00\x00")
            assert x.recv().rc == 1
            x.drain()
            advance(1100)
            assert wait_for(lambda: _num(b, b"clients/connected") == 2)
            assert tally[1] == 13 and tally[0] > 2 * tally[1], tally
            assert _num(b, b"messages/sent") == tally[0]
            assert _num(b, b"publish/messages/sent") == tally[1]
            assert _num(b, b"publish/bytes/sent") == tally[2]


def test_sys_update_publishes_what_changed():
    # as mosquitto's: after the first, an update publishes the figures that
    # changed (a new subscriber gets every one retained), so that a $SYS/#
    # subscriber's queue (max_queued 32) takes each update whole
    with running(sys_interval=1) as b, Raw(b) as c:
        c.connect("c")
        assert wait_for(lambda: _sys(b, b"uptime") is not None)
        c.subscribe(1, "$SYS/broker/#", 0)
        first = set()
        while True:
            try:
                p = c.recv(0.3)
            except Timeout:
                break
            first.add(bytes(p.topic))
        assert b"$SYS/broker/version" in first and len(first) > 20
        d = b.dropped  # (the retained ones beyond the queue, at the SUBSCRIBE)
        advance(1100)
        got = []
        while True:
            try:
                p = c.recv(0.3)
            except Timeout:
                break
            assert not p.retain  # [MQTT-3.3.1-9]
            got.append(bytes(p.topic)[12:])
        assert b"uptime" in got and b"messages/sent" in got  # (the SUBACK, the retained ones)
        assert b"version" not in got and b"clients/total" not in got
        assert b.dropped == d

def test_sys_load_waits_for_a_reader():
    # the averages (broker_load, 1.5 KB of code on a device) start at the
    # first update after a session subscribes to a $SYS/ filter, a shared
    # one too: a gateway that nobody watches never loads them
    with running(sys_interval=1) as b, Raw(b) as c:
        c.connect("c")
        c.subscribe(1, "sensors/#", 0)
        c.subscribe(2, "#", 0)  # (# does not match $SYS/ [MQTT-4.7.2-1])
        for _ in range(3):
            t = _uptime(b) if _sys(b, b"uptime") else -1
            advance(1100)
            assert wait_for(lambda: _sys(b, b"uptime") and _uptime(b) > t)
        assert b.load is None
        assert not [k for k in b.retained if k.startswith(b"$SYS/broker/load/")]
        c.subscribe(3, "$share/g/$SYS/broker/uptime", 0)
        advance(1100)
        assert wait_for(lambda: _sys(b, b"load/sockets/1min") == b"0.00")
        assert b.load is not None

