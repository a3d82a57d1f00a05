# The client's protocol core (umqtt3.client_core) driven with bytes and a
# number for the time only: no socket, no clock, no sleeping. Bytes go in
# through the core's receive buffer (a link that hands out what the test
# fed), bytes come out of its send buffer, and tick() gives the deadlines.
# Runs under pytest and under MicroPython (tests/mp/testrunner.py).
from umqtt3.client_core import Core
from umqtt3.conn import Closed
from umqtt3.flow import Busy

DOWN, UP = 0, 2  # Core.state (underscored consts in client_core)

CONNACK = b"\x20\x02\x00\x00"
CONNACK_SP = b"\x20\x02\x01\x00"  # session present
PINGREQ = b"\xc0\x00"
PINGRESP = b"\xd0\x00"


def puback(pid):
    return bytes((0x40, 2, pid >> 8, pid & 255))


def ack(t, pid):
    return bytes((t << 4 | (2 if t == 6 else 0), 2, pid >> 8, pid & 255))


def publish(topic, msg, qos, pid=0, dup=False):
    var = bytes((0, len(topic))) + topic + (bytes((pid >> 8, pid & 255)) if qos else b"")
    body = var + msg
    return bytes((0x30 | dup << 3 | qos << 1, len(body))) + body


class Bytes:
    """The driver's side of the test: what feed() got, handed to the core's
    buffer in whatever pieces the core asks for. It has no write() nor
    close(): a core that wrote or closed by itself would fail every test."""

    def __init__(self):
        self.data = bytearray()

    def readinto(self, buf, n):
        if not self.data:
            return None
        k = min(n, len(self.data))
        buf[:k] = self.data[:k]
        self.data = self.data[k:]
        return k


def core(**kw):
    c = Core("dev1", **kw)
    c.conn.link = Bytes()
    return c


def feed(c, data, now):
    """Bytes received; returns the number of packets handled."""
    c.conn.link.data += data
    n = 0
    k = c.conn.recv()
    while k:
        c.packet(k, now)
        n += 1
        k = c.conn.recv()
    return n


def take(c, now):
    """Bytes ready to send, as if the driver wrote them all (and the resume
    backlog that follows)."""
    out = b""
    while True:
        k = c.out(now)
        conn = c.conn
        out += bytes(conn.tx[conn.sent:conn.tlen])
        conn.tlen = conn.sent = 0
        if not k or not c.refill():
            return out


def connected(c, now=0, connack=CONNACK):
    c.start(now)
    assert take(c, now)[0] == 0x10  # CONNECT
    feed(c, connack, now)
    assert c.state == UP
    return c


class Log:
    def __init__(self):
        self.msgs = []
        self.acks = []

    def cb(self, topic, msg):
        self.msgs.append((topic, msg))

    def ack(self, pid, rc):
        self.acks.append((pid, rc))


def test_connect_connack_and_its_deadline():
    c = core(timeout_ms=100)
    c.start(1000)
    out = take(c, 1000)
    assert out[0] == 0x10 and b"MQTT" in out and out.endswith(b"dev1")
    assert c.state != DOWN and not c.is_connected()  # CONNACK awaited
    assert c.tick(1040) == 60  # the CONNACK is due within timeout_ms
    feed(c, CONNACK, 1050)
    assert c.is_connected() and c.session_present is False
    assert c.tick(1050) == 60000  # no keepalive: nothing due


def test_no_connack_in_time_is_a_dead_link():
    c = core(timeout_ms=100)
    c.start(0)
    take(c, 0)
    try:
        c.tick(101)
    except Closed as e:
        assert e.args[0] == 110
    else:
        raise AssertionError("no CONNACK went unnoticed")


def test_refused_connack_is_final_unless_the_server_is_busy():
    from umqtt3.codec import MQTTError
    for rc, again in ((5, False), (3, True)):
        c = core(reconnect=True)
        c.start(0)
        try:
            feed(c, bytes((0x20, 2, 0, rc)), 0)
        except MQTTError as e:
            assert e.code == rc
        else:
            raise AssertionError("a refusal was accepted")
        assert c.reconnect is again


def test_keepalive_pingreq_then_dead_link_without_pingresp():
    # PINGREQ after keepalive seconds without sending [MQTT-3.1.2-23]; no
    # PINGRESP within keepalive more: the link is dead
    c = connected(core(keepalive=2), 0)
    assert c.tick(500) == 1500
    assert take(c, 500) == b""
    assert c.tick(2000) == 2000
    assert take(c, 2000) == PINGREQ
    feed(c, PINGRESP, 2100)
    assert c.ping_at is None
    # sending and receiving both count: the next PINGREQ is due 2 s after
    # the older of the two (here the PINGRESP at 2100)
    c.queue(b"t", b"x")
    take(c, 3000)
    assert c.tick(3500) == 600
    feed(c, publish(b"t", b"y", 0), 3500)
    assert c.tick(3500) == 1500  # now the send at 3000 is the older
    assert c.tick(5000) == 2000 and take(c, 5000) == PINGREQ
    c.tick(6000)
    try:
        c.tick(7001)
    except Closed as e:
        assert e.args[0] == 110
    else:
        raise AssertionError("a missing PINGRESP went unnoticed")


def test_pings_the_application_sends_do_not_move_the_pingresp_deadline():
    # umqtt.simple's keepalive idiom, ping() every few seconds: each call
    # queues a PINGREQ, but the deadline counts from the first one still
    # unanswered, so a server gone silent is noticed (MQTT 3.1.1 3.1.2.10:
    # no PINGRESP in reasonable time, close the connection)
    c = connected(core(keepalive=1), 0)
    now = 0
    while now < 5000:
        now += 400
        c.pingreq(now)
        assert take(c, now) == PINGREQ
        try:
            c.tick(now)
        except Closed as e:
            assert e.args[0] == 110
            break
    else:
        raise AssertionError("ping() calls kept a dead link up")
    assert now <= 1600  # a keepalive after the first unanswered PINGREQ
    # answered, the next ping() starts a deadline of its own
    c = connected(core(keepalive=1), 0)
    c.pingreq(400)
    feed(c, PINGRESP, 500)
    assert c.ping_at is None
    c.pingreq(3000)
    assert c.ping_at == 3000


def test_a_server_gone_silent_is_noticed_while_the_client_keeps_sending():
    # QoS 0 readings every 200 ms keep the client sending, so [MQTT-3.1.2-23]
    # alone never asks for a PINGREQ; nothing received for keepalive seconds
    # does, and its missing PINGRESP ends the link (3.1.2.10: a client that
    # gets no PINGRESP in reasonable time should close the connection)
    c = connected(core(keepalive=1), 0)
    now = 0
    sent = b""
    while now < 3000:
        now += 200
        c.queue(b"t", b"21.5")
        sent += take(c, now)
        try:
            c.tick(now)
        except Closed as e:
            assert e.args[0] == 110
            break
        sent += take(c, now)
    else:
        raise AssertionError("a silent server went unnoticed")
    assert PINGREQ in sent and now <= 2200
    # a server that answers keeps the link: its PINGRESP counts as received
    c = connected(core(keepalive=1), 0)
    now = 0
    while now < 5000:
        now += 200
        c.queue(b"t", b"21.5")
        take(c, now)
        c.tick(now)
        if take(c, now) == PINGREQ:
            feed(c, PINGRESP, now + 50)
    assert c.state == UP


def test_qos1_publish_acknowledged_and_reported():
    c = connected(core())
    log = Log()
    c.set_ack_callback(log.ack)
    pid = c.queue(b"dev/t", b"21.5", qos=1)
    assert take(c, 0) == publish(b"dev/t", b"21.5", 1, pid)
    assert c.inflight() == 1
    feed(c, puback(pid), 5)
    assert c.inflight() == 0 and log.acks == [(pid, 0)] and c.ack_pid == pid


def test_puback_without_decode_keeps_every_rule():
    # The four-byte PUBACK is handled without decode(): the same answers
    from umqtt3.codec import MQTTError
    c = connected(core())
    log = Log()
    c.set_ack_callback(log.ack)
    syncs = []
    c.set_sync(lambda: syncs.append(1))
    p1 = c.queue(b"t", b"1", qos=1)
    p2 = c.queue(b"t", b"2", qos=1)
    take(c, 0)
    syncs.clear()
    feed(c, puback(999), 1)  # an id not in flight: nothing completes
    assert log.acks == [] and c.inflight() == 2 and c.ack_pid == 0
    # two in one read (the first read takes a byte of the second): both, in order
    assert feed(c, puback(p1) + puback(p2), 2) == 2
    assert log.acks == [(p1, 0), (p2, 0)] and c.inflight() == 0 and c.ack_pid == p2
    # the removal is made durable before the next bytes leave
    c.queue(b"t", b"3", qos=0)
    take(c, 3)
    assert syncs == [1]
    # packet id 0 is malformed [MQTT-2.3.1-1]
    try:
        feed(c, puback(0), 4)
        raise AssertionError("PUBACK with packet id 0 taken")
    except MQTTError as e:
        assert e.reason == "packet id 0" and e.code == 0x82
    # a PUBACK before CONNACK is a protocol error
    c = core()
    c.start(0)
    take(c, 0)
    try:
        feed(c, puback(1), 0)
        raise AssertionError("PUBACK before CONNACK taken")
    except MQTTError as e:
        assert e.reason == "protocol error" and e.code == 0x82


def test_qos2_both_ways():
    c = connected(core())
    log = Log()
    c.set_callback(log.cb)
    pid = c.queue(b"a", b"1", qos=2)
    take(c, 0)
    feed(c, ack(5, pid), 1)  # PUBREC: PUBREL goes out [MQTT-4.3.3-1]
    assert take(c, 1) == ack(6, pid)
    feed(c, ack(7, pid), 2)  # PUBCOMP
    assert c.inflight() == 0
    # inbound: delivered once, PUBREC; a resend before PUBREL is answered,
    # not delivered again [MQTT-4.3.3-2]
    feed(c, publish(b"b", b"hi", 2, 7), 3)
    assert log.msgs == [(b"b", b"hi")] and take(c, 3) == ack(5, 7)
    feed(c, publish(b"b", b"hi", 2, 7, dup=True), 4)
    assert log.msgs == [(b"b", b"hi")] and take(c, 4) == ack(5, 7)
    feed(c, ack(6, 7), 5)
    assert take(c, 5) == ack(7, 7)


def test_sync_runs_before_the_acknowledgements_leave():
    c = connected(core())
    seen = []
    c.set_callback(lambda t, m: seen.append("msg"))
    c.set_sync(lambda: seen.append("sync"))
    feed(c, publish(b"t", b"1", 1, 1) + publish(b"t", b"2", 1, 2), 0)
    assert seen == ["msg", "msg"]  # nothing synced while the burst is read
    assert take(c, 0) == puback(1) + puback(2)
    assert seen == ["msg", "msg", "sync"]  # once, before the acks


def test_a_failed_sync_lets_no_acknowledgement_leave_later():
    # durable before the acknowledgement: a sync that raised (a full flash)
    # made nothing durable, so the next packet's acknowledgement waits for a
    # sync that succeeds, also when the message is a QoS 2 resend the store
    # already knows (PUBREC without a new record) [MQTT-4.3.3-2]
    c = core()
    c.clean = False  # a persistent session: the broker keeps it (CONNACK_SP)
    connected(c)
    c.set_callback(lambda t, m: None)
    calls = []

    def sync():
        calls.append(1)
        if len(calls) == 1:
            raise OSError(28)
    c.set_sync(sync)
    feed(c, publish(b"t", b"1", 2, 7), 0)
    try:
        c.out(0)
        raise AssertionError("the sync's error was not raised")
    except OSError:
        pass
    c.lost(0)  # the driver's answer to the error: the link goes
    connected(c, 1, CONNACK_SP)
    feed(c, publish(b"t", b"1", 2, 7, dup=True), 2)
    assert take(c, 2) == ack(5, 7) and len(calls) == 2  # synced again first


def test_callback_that_raises_drops_the_connection_for_qos1():
    c = connected(core(reconnect=True))

    def cb(t, m):
        raise ValueError("not taken")

    c.set_callback(cb)
    try:
        feed(c, publish(b"t", b"1", 1, 1), 10)
    except ValueError:
        pass
    else:
        raise AssertionError("the callback's exception was swallowed")
    assert c.state == DOWN and take(c, 10) == b""  # no PUBACK


def test_the_backoff_late_in_a_device_s_tick_range_allocates_nothing():
    # ticks_ms() runs up to 2**30 on a device: the jitter's arithmetic
    # must stay in small ints there, or a lost link on a spent heap raises
    # MemoryError instead of waiting to redial
    from support import MICROPYTHON, locked
    c = connected(core(reconnect=True, backoff_ms=(400, 10000)))
    now = (1 << 30) - 7
    if MICROPYTHON:
        locked(c.lost, now)
    else:
        c.lost(now)
    wait = c.tick(now)
    assert 300 <= wait <= 500, wait  # 400 ms, jitter 75..125 %


def test_reconnect_backs_off_then_resends_with_dup():
    c = connected(core(reconnect=True, backoff_ms=(400, 10000)))
    c.clean = False  # a persistent session: the broker keeps it (CONNACK_SP)
    pid = c.queue(b"t", b"m", qos=1)
    first = take(c, 0)
    c.lost(1000)
    assert c.state == DOWN
    wait = c.tick(1000)
    assert 300 <= wait <= 500, wait  # 400 ms, jitter 75..125 %
    c.lost(1000 + wait)
    wait2 = c.tick(1000 + wait)
    assert 600 <= wait2 <= 1000, wait2  # doubled
    # while down, a QoS 1 message is stored, not sent
    pid2 = c.queue(b"t", b"n", qos=1)
    c.start(5000)
    take(c, 5000)
    feed(c, CONNACK_SP, 5001)
    # in the original order, DUP set [MQTT-3.3.1-1, MQTT-4.4.0-1]
    assert take(c, 5001) == bytes((first[0] | 8,)) + first[1:] + publish(b"t", b"n", 1, pid2,
                                                                         dup=True)
    feed(c, puback(pid) + puback(pid2), 5002)
    assert c.inflight() == 0


def test_without_a_store_a_reconnect_reports_what_it_forgot():
    # store=False keeps no message: what was in flight is not resent on the
    # next connection, and each one completes as lost (0x100): on_ack
    # hears it, and so does a caller waiting for it (waits), as of a PUBACK
    c = connected(core(reconnect=True, store=False))
    c.clean = False  # a persistent session: the broker keeps it (CONNACK_SP)
    got = []
    c.set_ack_callback(lambda pid, rc: got.append((pid, rc)))
    p1 = c.queue(b"t", b"m", qos=1)
    p2 = c.queue(b"t", b"n", qos=2)
    p3 = c.queue(b"t", b"o", qos=1)
    take(c, 0)
    feed(c, puback(p3), 1)
    c.waits[p1] = 0  # p1's publish() waits
    c.lost(10)
    c.start(1000)
    take(c, 1000)
    feed(c, CONNACK_SP, 1001)
    assert take(c, 1001) == b""  # nothing resent
    assert got == [(p3, 0), (p1, 0x100), (p2, 0x100)]
    assert c.waits == {p1: 0x100} and c.inflight() == 0


def test_without_a_store_a_qos1_publish_while_down_is_refused():
    # store=False keeps no bytes, so a QoS 1/2 message taken while the link
    # is down could never be sent (the reconnect would report it lost): it
    # is refused at once with OSError(107), as a QoS 0 one, not accepted
    c = connected(core(reconnect=True, store=False))
    c.lost(10)
    for qos in (1, 2, 0):
        try:
            c.queue(b"t", b"reading", qos=qos)
            raise AssertionError("accepted while down, to be lost")
        except OSError as e:
            assert e.args[0] == 107
    assert c.inflight() == 0
    # a store that keeps the bytes takes it, and the reconnect sends it
    c = connected(core(reconnect=True))
    c.lost(10)
    assert c.queue(b"t", b"reading", qos=1) and c.inflight() == 1


def test_a_message_larger_than_the_memory_pool_is_refused_as_too_large():
    # bufsize takes it, the default MemoryStore's 1 KB pool never can: 0x95
    # at once, nothing stored, and a message that fits still goes
    from umqtt3.codec import MQTTError, StoreFull
    c = connected(core(bufsize=2048))
    c.queue(b"t", b"queued first", qos=0)  # bytes wait in the send buffer: still never Busy
    for _ in range(2):
        try:
            c.queue(b"t", b"x" * 1100, qos=1)
            raise AssertionError("taken")
        except MQTTError as e:
            assert e.code == 0x95 and not isinstance(e, StoreFull), e  # (Busy is 0x97)
        assert c.inflight() == 0
        assert take(c, 0) in (publish(b"t", b"queued first", 0), b"")
    pid = c.queue(b"t", b"x" * 900, qos=1)
    out = take(c, 0)  # header 0x32 and a two-byte remaining length of 905
    assert pid and out[0] == 0x32 and len(out) == 908 and c.inflight() == 1


def _resuming():
    # six QoS 1 messages in flight when the link broke; the new connection
    # (a persistent session) is resending them, a backlog that waits for
    # room in a 64-byte send buffer. Returns the core and their ids.
    c = connected(core(reconnect=True, bufsize=64, window=8))
    c.clean = False  # a persistent session: the broker keeps it (CONNACK_SP)
    pids = []
    for i in range(6):
        pids.append(c.queue(b"topic/x", b"payload-%d" % i, qos=1))
        take(c, 0)
    c.lost(0)
    c.start(100)
    take(c, 100)
    feed(c, CONNACK_SP, 100)
    assert c.backlog is not None  # six 21-byte PUBLISHes do not fit in 64
    return c, pids


def test_resend_larger_than_the_send_buffer_goes_out_in_turns():
    # the resume waits for room (the backlog) and keeps its order: a new
    # publish is Busy until it is out
    c, pids = _resuming()
    try:
        c.queue(b"topic/x", b"late", qos=1)
    except Busy:
        pass
    else:
        raise AssertionError("a new publish overtook the resend")
    out = take(c, 100)  # takes the rest as room comes
    assert c.backlog is None
    want = b"".join(publish(b"topic/x", b"payload-%d" % i, 1, pids[i], dup=True)
                    for i in range(6))
    assert out == want


def test_resubscribe_when_the_session_is_gone():
    # [MQTT-3.2.2-3]: no session, so the client subscribes again
    c = connected(core(reconnect=True))
    c.set_callback(lambda t, m: None)
    pid = c.subscribe_start(b"cmd/#", 1)
    take(c, 0)
    feed(c, bytes((0x90, 3, 0, pid, 1)), 1)
    assert c.wait_pid == 0 and c.subscribe_end(b"cmd/#") == 1
    c.lost(2)
    c.start(1000)
    take(c, 1000)
    feed(c, CONNACK, 1000)  # session present 0
    out = take(c, 1000)
    assert out[0] == 0x82 and b"cmd/#" in out  # SUBSCRIBE again


def test_a_flood_is_handled_one_packet_at_a_time():
    # the core hands over exactly the packets that are whole and keeps a
    # partial one for later: a driver decides how many to take per call
    c = connected(core())
    log = Log()
    c.set_callback(log.cb)
    flood = publish(b"t/x", b"0123", 0) * 50
    c.conn.link.data += flood + flood[:5]  # and the start of one more
    n = 0
    k = c.conn.recv()
    while k and n < 10:
        c.packet(k, n)
        n += 1
        k = c.conn.recv()
    assert len(log.msgs) == 10  # the rest waits, intact
    assert feed(c, b"", 20) == 40
    assert len(log.msgs) == 50
    feed(c, flood[5:len(publish(b"t/x", b"0123", 0))], 21)
    assert len(log.msgs) == 51


def test_bye_queues_disconnect_and_ends_reconnecting():
    c = connected(core(reconnect=True))
    assert c.bye() is True
    assert take(c, 0) == b"\xe0\x00"  # DISCONNECT: the broker drops the will
    assert c.reconnect is False
    c.down()
    assert c.bye() is False and take(c, 0) == b""  # nothing to say when down


def test_bye_during_a_resend_sends_nothing_after_disconnect():
    # a reconnect's resend waiting for room (a device's small send buffer)
    # when disconnect() comes: DISCONNECT is the last packet on the link
    # [MQTT-3.14.4-1]; the rest stays stored and goes out after the next
    # connect()
    c = _resuming()[0]
    assert c.bye() is True
    out = take(c, 100)  # what the driver's drain writes, refilling as it goes
    assert out.endswith(b"\xe0\x00") and out.count(b"\xe0\x00") == 1
    sent = out.count(b"topic/x")
    assert 0 < sent < 6  # what was queued before DISCONNECT went first
    assert c.inflight() == 6  # all still stored
    c.down()
    c.reconnect = True
    c.start(200)
    take(c, 200)
    feed(c, CONNACK_SP, 200)
    assert take(c, 200).count(b"topic/x") == 6  # resent on the next connection


def test_a_qos1_message_without_a_callback_is_not_acknowledged():
    # nobody took it: no PUBACK (it would tell the server the message was
    # taken [MQTT-4.3.2-2]); the link is dropped and the server sends it
    # again, once a callback is set. Before, it was acknowledged and lost.
    from umqtt3.codec import MQTTError
    c = connected(core())
    feed(c, publish(b"cmd/a", b"qos0", 0), 1)  # QoS 0: nothing to keep
    try:
        feed(c, publish(b"cmd/a", b"on", 1, 7), 2)
    except MQTTError as e:
        assert e.reason == "no callback"
    else:
        raise AssertionError("a message nobody took was accepted")
    assert c.state == DOWN and take(c, 2) == b""
    # with a callback, the server's resend is delivered and acknowledged
    got = []
    c.set_callback(lambda t, m: got.append(m))
    c.clean = False  # (the persistent session the resend comes in)
    c.start(3)
    take(c, 3)
    feed(c, CONNACK_SP, 3)
    feed(c, publish(b"cmd/a", b"on", 1, 7, dup=True), 4)
    assert got == [b"on"] and take(c, 4) == puback(7)


def test_an_async_callback_is_refused_and_its_message_not_taken():
    # the core cannot await an async def: the coroutine it gets back
    # (MicroPython: a generator) would be dropped unrun. The message counts
    # as not taken, as for a callback that raises: no PUBACK (it would tell
    # the server we took it [MQTT-4.3.2-2]), the link dropped for QoS 1;
    # the application hears why (TypeError)
    ran = []

    async def on_msg(topic, msg):
        ran.append(msg)
    try:
        import warnings
    except ImportError:
        warnings = None  # MicroPython warns about nothing here
    for qos in (1, 0):
        c = connected(core())
        c.set_callback(on_msg)
        if warnings is not None:
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                err = _fed(c, publish(b"cmd/a", b"on", qos, 7 if qos else 0))
                import gc
                gc.collect()
            assert not w, [str(x.message) for x in w]  # closed: never "was never awaited"
        else:
            err = _fed(c, publish(b"cmd/a", b"on", qos, 7 if qos else 0))
        assert isinstance(err, TypeError) and "async" in str(err)
        assert err is c.cur  # the callback's, not the link's (the drivers read it)
        assert take(c, 2) == b"" and not ran
        assert c.state == (DOWN if qos else UP)  # QoS 0: nothing to resend, the link stays


def test_an_oserror_from_the_callback_is_marked_as_the_callbacks():
    # a sensor's OSError (machine.I2C raises one) is the application's:
    # the core marks it (cur), so that the drivers do not take it for the
    # link's and the link stays up for a QoS 0 message
    c = connected(core())

    def cb(t, m):
        raise OSError(19)
    c.set_callback(cb)
    err = _fed(c, publish(b"cmd/a", b"x", 0))
    assert isinstance(err, OSError) and err.args[0] == 19 and err is c.cur
    assert c.state == UP
    c.set_callback(lambda t, m: None)
    err = _fed(c, b"\xe0\x00")  # the server's DISCONNECT: the link's, not marked
    assert isinstance(err, Closed) and err is not c.cur


def _fed(c, data):
    # what feed() raised, or None
    try:
        feed(c, data, 2)
    except Exception as e:
        return e
    return None


def test_a_filter_as_bytearray_or_memoryview():
    # umqtt.simple takes any bytes-like filter; subs keys it as bytes
    c = connected(core())
    c.set_callback(lambda t, m: None)
    for f in (bytearray(b"cmd/a"), memoryview(b"cmd/b")):
        pid = c.subscribe_start(f, 1)
        assert b"cmd/" in take(c, 0)
        feed(c, bytes((0x90, 3, 0, pid, 0x80)), 1)  # refused
        try:
            c.subscribe_end(f)
        except Exception as e:
            assert e.code == 0x80
        else:
            raise AssertionError("a refusal was taken")
    assert not c.subs
    pid = c.subscribe_start(bytearray(b"cmd/c"), 1)
    take(c, 2)
    feed(c, bytes((0x90, 3, 0, pid, 1)), 3)
    assert c.subscribe_end(bytearray(b"cmd/c")) == 1 and list(c.subs) == [b"cmd/c"]


def test_a_pingresp_behind_a_stream_of_messages_is_late_not_lost():
    # after PINGREQ the server keeps sending: the link is alive, and the
    # wait for PINGRESP counts from the last packet received
    c = connected(core(keepalive=1), 0)
    c.set_callback(lambda t, m: None)
    c.tick(1000)
    assert take(c, 1000) == PINGREQ
    now = 1000
    while now < 4000:
        now += 100
        feed(c, publish(b"t", b"x", 0), now)
        c.tick(now)  # raised Closed(110) at 2001 before
    feed(c, PINGRESP, now)
    assert c.ping_at is None and c.state == UP
    c.tick(now + 1000)
    assert take(c, now + 1000) == PINGREQ
    try:
        c.tick(now + 2001)  # silence: the link is dead
    except Closed as e:
        assert e.args[0] == 110
    else:
        raise AssertionError("a silent server went unnoticed")


def test_more_qos2_in_flight_than_the_store_holds_waits_for_the_pubrels():
    # MQTT 3.1.1 cannot tell the broker how many QoS 2 ids the client holds
    # (an id stays from PUBREC to PUBREL [MQTT-4.3.3-2]). One that finds the
    # store full goes unanswered, and so does every QoS 1/2 message behind
    # it (their order [MQTT-4.6.0-2]); QoS 0 is delivered; PUBRELs are
    # answered; once none is held, the link ends and the next one may start
    # at once: the broker sends the unanswered messages again [MQTT-4.4.0-1]
    from umqtt3.memstore import MemoryStore
    c = connected(core(store=MemoryStore(2, 64, 2), reconnect=True))
    c.clean = False  # a persistent session: the broker keeps it (CONNACK_SP)
    log = Log()
    c.set_callback(log.cb)
    feed(c, publish(b"q", b"1", 2, 1) + publish(b"q", b"2", 2, 2), 1)
    assert take(c, 1) == ack(5, 1) + ack(5, 2)
    feed(c, publish(b"q", b"3", 2, 3) + publish(b"q", b"4", 1, 4) + publish(b"q", b"5", 0), 2)
    assert take(c, 2) == b""  # 3 and 4 unanswered, not delivered
    assert log.msgs == [(b"q", b"1"), (b"q", b"2"), (b"q", b"5")] and c.state == UP
    feed(c, ack(6, 1), 3)
    assert take(c, 3) == ack(7, 1) and c.state == UP  # id 2 still held
    try:
        feed(c, ack(6, 2), 40)
        assert False, "the link should end"
    except Exception as e:
        assert e.args[1] == 0x97  # the store's refusal: "store full"
    assert c.state == DOWN and c.tick(40) == 0  # the next attempt: now, no backoff
    # the new link takes them again, in order, and delivers them once each
    connected(c, 41, CONNACK_SP)
    feed(c, publish(b"q", b"3", 2, 3, dup=True) + publish(b"q", b"4", 1, 4, dup=True), 42)
    assert take(c, 42) == ack(5, 3) + puback(4)
    assert log.msgs[3:] == [(b"q", b"3"), (b"q", b"4")]


def test_a_store_full_of_our_own_messages_still_drops_the_link():
    # nothing inbound held, so no PUBREL will free room: as before, the
    # refusal ends the link (a FileStore shares its room with outbound)
    from umqtt3.memstore import MemoryStore
    c = connected(core(store=MemoryStore(2, 64, 0)))
    c.set_callback(Log().cb)
    try:
        feed(c, publish(b"q", b"1", 2, 1), 1)
        assert False, "the refusal should leave packet()"
    except Exception as e:
        assert e.args[1] == 0x97
    assert take(c, 1) == b""

