# The client core (umqtt3.client_core) against the rules a server's CONNACK
# sets and the rules of a resume after a reconnect: bytes in, bytes out, no
# socket (the helpers of test_client_core). Runs under pytest and under
# MicroPython (tests/mp/testrunner.py).
from test_client_core import core, feed, take, connected, puback, Log, UP
from umqtt3.codec import MQTTError, Busy


def connack5(props=b"", sp=0, rc=0):
    body = bytes((sp, rc, len(props))) + props
    return bytes((0x20, len(body))) + body


def packets(b):
    """[(first byte, body)] of the packets in b."""
    out = []
    i = 0
    while i < len(b):
        n = sh = 0
        j = i + 1
        while True:
            x = b[j]
            n |= (x & 0x7F) << sh
            j += 1
            if not x & 0x80:
                break
            sh += 7
        out.append((b[i], bytes(b[j:j + n])))
        i = j + n
    return out


def publishes(out):
    return [(t, body) for t, body in packets(out) if t >> 4 == 3]


def reconnect(c, connack, now=100000):
    """The link drops and a new one opens with this CONNACK: what the
    client sends after it."""
    c.lost(0)
    c.start(now)
    take(c, now)
    feed(c, connack, now)
    assert c.state == UP
    return take(c, now)


# ------------------------------------------------ the resume after a reconnect

def test_resend_keeps_the_new_receive_maximum():
    # [MQTT-3.3.4-7]: no more unacknowledged QoS 1/2 PUBLISHes than the
    # Receive Maximum of the new connection's CONNACK (the quota starts anew
    # on each connection [MQTT-4.9.0-1]); the rest go as acks come, in order
    # [MQTT-4.6.0-1]
    c = core(level=5, reconnect=True)
    c.clean = False  # a persistent session
    connected(c, 0, connack5())
    pids = [c.queue(b"t", b"m%d" % i, qos=1) for i in range(5)]
    take(c, 0)
    out = publishes(reconnect(c, connack5(b"\x21\x00\x02", sp=1)))
    assert [b[-2:] for t, b in out] == [b"m0", b"m1"], out
    assert all(t & 8 for t, b in out)  # DUP [MQTT-3.3.1-1]
    assert c.backlog is None  # the driver reads meanwhile: the acks can come
    try:
        c.queue(b"t", b"new", qos=1)  # a new one does not overtake the resend
    except Busy:
        pass
    else:
        raise AssertionError("a new publish overtook the resend")
    feed(c, puback(pids[0]), 1)
    assert [b[-2:] for t, b in publishes(take(c, 1))] == [b"m2"]
    feed(c, puback(pids[1]) + puback(pids[2]), 2)
    assert [b[-2:] for t, b in publishes(take(c, 2))] == [b"m3", b"m4"]
    feed(c, puback(pids[3]) + puback(pids[4]), 3)
    assert take(c, 3) == b"" and c.store.out_count() == 0


def test_resend_waiting_for_acks_ends_with_the_link():
    # a resume held by the quota belongs to its connection: an ack on the
    # next one does not wake it
    c = core(level=5, reconnect=True)
    c.clean = False  # a persistent session
    connected(c, 0, connack5())
    pids = [c.queue(b"t", b"m%d" % i, qos=1) for i in range(3)]
    take(c, 0)
    assert len(publishes(reconnect(c, connack5(b"\x21\x00\x01", sp=1)))) == 1
    assert c.held is not None
    c.lost(1)
    assert c.held is None
    out = publishes(reconnect(c, connack5(b"\x21\x00\x01", sp=1), 200000))
    assert [b[-2:] for t, b in out] == [b"m0"], out
    feed(c, puback(pids[0]), 200001)
    assert [b[-2:] for t, b in publishes(take(c, 200001))] == [b"m1"]


def test_resend_refuses_what_the_new_maximum_packet_size_forbids():
    # [MQTT-3.2.2-15]: nothing larger than the Maximum Packet Size of the
    # new connection goes out; the message is refused (0x95, reported as an
    # ack) instead of closing every connection to come; the others go
    c = core(level=5, reconnect=True)
    c.clean = False  # a persistent session
    log = Log()
    c.set_ack_callback(log.ack)
    connected(c, 0, connack5())
    big = c.queue(b"t", b"x" * 300, qos=1)
    c.queue(b"t", b"small", qos=1)
    take(c, 0)
    out = publishes(reconnect(c, connack5(b"\x27\x00\x00\x00\xc8", sp=1)))  # 200 bytes
    assert [b[-5:] for t, b in out] == [b"small"], out
    assert log.acks == [(big, 0x95)]
    assert c.store.out_count() == 1


# ------------------------------------------------ CONNACK's Maximum QoS, Retain Available

def _refused(f, *args, **kw):
    try:
        f(*args, **kw)
    except MQTTError as e:
        return e.code
    raise AssertionError("not refused")


def test_publish_above_maximum_qos_or_retained_is_refused_before_it_is_stored():
    # [MQTT-3.2.2-11]: no PUBLISH with a QoS above the server's Maximum QoS;
    # [MQTT-3.2.2-14]: no retained PUBLISH when Retain Available is 0. Refused
    # (MQTTError with the server's own reason codes) before anything is
    # stored or queued, and the connection stays up.
    c = core(level=5, reconnect=True)
    c.clean = False  # a persistent session
    connected(c, 0, connack5(b"\x24\x01\x25\x00"))
    assert _refused(c.queue, b"t", b"m", qos=2) == 0x9B
    assert _refused(c.queue, b"t", b"m", True, 1) == 0x9A
    assert _refused(c.queue, b"t", b"m", True, 0) == 0x9A
    assert c.store.out_count() == 0 and take(c, 0) == b""
    pid = c.queue(b"t", b"m", qos=1)  # within the limits: sent
    assert [t for t, b in publishes(take(c, 0))] == [0x32]
    feed(c, puback(pid), 0)
    # the next connection's CONNACK says nothing: the defaults, QoS 2 and retain
    reconnect(c, connack5())
    c.queue(b"t", b"m", True, 2)
    assert [t for t, b in publishes(take(c, 100000))] == [0x35]


def test_resend_refuses_what_the_new_server_does_not_support():
    # stored under one server, resent to one with Maximum QoS 1 and no
    # retain: refused (0x9B, 0x9A, reported as acks) rather than sent, so
    # the server does not close on them at every reconnect; the rest go
    c = core(level=5, reconnect=True)
    c.clean = False  # a persistent session
    log = Log()
    c.set_ack_callback(log.ack)
    connected(c, 0, connack5())
    q2 = c.queue(b"t", b"two", qos=2)
    ret = c.queue(b"t", b"ret", True, 1)
    c.queue(b"t", b"one", qos=1)
    take(c, 0)
    out = publishes(reconnect(c, connack5(b"\x24\x01\x25\x00", sp=1)))
    assert [b[-3:] for t, b in out] == [b"one"], out
    assert log.acks == [(q2, 0x9B), (ret, 0x9A)], log.acks
    assert c.store.out_count() == 1


# ------------------------------------------------ CONNACK

def test_session_present_after_a_clean_start_closes():
    # [MQTT-3.2.2-4] (5.0; 3.1.1 section 3.2.2.2 says the same): a client
    # with no session state that gets Session Present 1 closes the
    # connection: a protocol error, never connected
    for level, ack in ((4, b"\x20\x02\x01\x00"), (5, connack5(sp=1))):
        c = core(level=level)  # clean session by default
        c.start(0)
        take(c, 0)
        try:
            feed(c, ack, 0)
        except MQTTError as e:
            assert e.code == 0x82
        else:
            raise AssertionError("Session Present 1 accepted on a clean start")
        assert not c.is_connected()
    # not clean: a session the client asked for is fine
    c = core(level=4)
    c.clean = False
    connected(c, 0, b"\x20\x02\x01\x00")
    assert c.session_present


# ------------------------------------------------ inbound PUBLISH

def test_inbound_topic_alias_or_empty_topic_ends_the_link():
    # The client sends no Topic Alias Maximum: the server may send it no
    # Topic Alias [MQTT-3.1.2-27]; one is invalid, 0x94, whether it names a
    # topic or stands for an empty one, and an empty topic without one is
    # a protocol error (5.0 section 3.3.2.3.4) [MQTT-3.3.2-12]. Nothing is
    # delivered and the connection ends; other properties pass.
    for topic, props, code in ((b"", b"\x03\x23\x00\x01", 0x94), (b"", b"\x00", 0x82),
                               (b"t", b"\x03\x23\x00\x01", 0x94),
                               (b"t", b"\x02\x01\x01", None)):  # a payload format
        c = core(level=5)
        log = Log()
        c.set_callback(log.cb)
        connected(c, 0, connack5())
        body = bytes((0, len(topic))) + topic + props + b"data"
        try:
            feed(c, bytes((0x30, len(body))) + body, 0)
        except MQTTError as e:
            assert e.code == code, (topic, props, e.code)
            assert log.msgs == []
        else:
            assert code is None and log.msgs == [(b"t", b"data")], (topic, props)


# ------------------------------------------------ too large, or not now

def _error(f, *args, **kw):
    try:
        f(*args, **kw)
    except MQTTError as e:  # (Busy is one)
        return e
    raise AssertionError("not refused")


def test_too_large_is_refused_as_such_even_behind_queued_bytes():
    # Busy means "retry after poll()"; a PUBLISH larger than the server's
    # Maximum Packet Size [MQTT-3.2.2-15] or the whole send buffer can never
    # go: MQTTError 0x95, whatever else waits in the buffer. Exactly at the
    # limit it is Busy (it goes once the buffer is empty).
    for level, limit, props in ((4, 120, b""), (5, 60, b"\x27\x00\x00\x00\x3c")):
        c = core(level=level, bufsize=128)
        connected(c, 0, connack5(props) if level == 5 else b"\x20\x02\x00\x00")
        head = 5 if level == 4 else 6  # QoS 0, topic b"t", no properties
        c.queue(b"t", b"x" * (limit - head))  # fits an empty buffer exactly
        take(c, 0)
        e = _error(c.queue, b"t", b"x" * (limit - head + 1))
        assert e.code == 0x95 and not isinstance(e, Busy)
        while c.conn.space() >= limit + 8:
            c.queue(b"t", b"x" * 20)  # queued, not yet written
        e = _error(c.queue, b"t", b"x" * (limit - head))
        assert isinstance(e, Busy), e
        e = _error(c.queue, b"t", b"x" * (limit - head + 1))
        assert e.code == 0x95 and not isinstance(e, Busy), e
        e = _error(c.queue, b"t", b"x" * (limit - head + 1), qos=1)
        assert e.code == 0x95 and not isinstance(e, Busy), e
        assert c.store.out_count() == 0


# ------------------------------------------------ SUBSCRIBE from the callback

def test_subscribe_from_the_callback_leaves_the_waiting_answer_alone():
    # subscribe() waits for its SUBACK; a message arrives first and its
    # callback subscribes too. The waiting call gets its own SUBACK's code
    # (the packet id of the SUBACK is the SUBSCRIBE's [MQTT-3.8.4-2]): a
    # refusal (0x80) is raised and the filter leaves subs, instead of the
    # inner request's answer taking its place.
    c = core(level=4)
    connected(c)
    inner = []

    def cb(topic, msg):
        inner.append(c.subscribe_start(b"inner", 0))

    c.set_callback(cb)
    pid = c.subscribe_start(b"outer", 1)
    take(c, 0)
    feed(c, b"\x30\x05\x00\x01tgo", 0)  # the message, then the SUBACKs
    assert len(inner) == 1 and inner[0] != pid
    assert c.wait_pid == pid
    feed(c, bytes((0x90, 3, pid >> 8, pid & 255, 0x80)), 0)
    assert c.wait_pid == 0 and c.answer == 0x80
    feed(c, bytes((0x90, 3, inner[0] >> 8, inner[0] & 255, 0)), 0)
    assert c.answer == 0x80
    assert _refused(c.subscribe_end, b"outer") == 0x80
    assert b"outer" not in c.subs and b"inner" in c.subs


# ------------------------------------------------ limits per connection

def test_receive_maximum_and_server_keepalive_hold_for_one_connection():
    # The send quota starts anew with each connection [MQTT-4.9.0-1] and the
    # Server Keep Alive [MQTT-3.2.2-21] is that server's answer: the next
    # connection asks with the client's own keepalive and window again.
    c = core(level=5, reconnect=True, keepalive=60)
    connected(c, 0, connack5(b"\x21\x00\x01\x13\x00\x0a"))  # Receive Maximum 1, keepalive 10
    assert c.window == 1 and c.keepalive == 10
    c.lost(0)
    c.start(100000)
    out = take(c, 100000)
    assert out[0] == 0x10 and out[10:12] == b"\x00\x3c", out  # CONNECT asks for 60 again
    feed(c, connack5(), 100000)  # no limits this time
    assert c.window == 8 and c.keepalive == 60
    c.lost(0)
    c.start(200000)
    take(c, 200000)
    feed(c, connack5(b"\x21\x00\x63"), 200000)  # 99: more than our own 8
    assert c.window == 8


def test_connect_declares_the_receive_buffer_as_maximum_packet_size():
    # [MQTT-3.1.2-24]: the server sends nothing larger than the Maximum
    # Packet Size in CONNECT; the client's is its receive buffer
    from umqtt3 import props
    c = core(level=5, bufsize=300)
    c.start(0)
    t, body = packets(take(c, 0))[0]
    assert t == 0x10
    n = body[10]  # after 'MQTT', level, flags, keepalive: the properties
    assert props.parse(body, 11, n)[0x27] == 300


def test_no_local_on_a_shared_subscription_is_refused_before_it_is_sent():
    # [MQTT-3.8.3-4]: No Local set on a $share filter is a protocol error
    # (the server closes): refused at the call, nothing sent or kept
    c = core(level=5)
    c.set_callback(Log().cb)
    connected(c, 0, connack5())
    for topic in (b"$share/g/t", "$share/g/t"):
        e = _error(c.subscribe_start, topic, 1 | 4)
        assert e.code == 0x82 and not isinstance(e, Busy)
    assert take(c, 0) == b"" and c.subs == {} and c.wait_pid == 0
    c.subscribe_start(b"$share/g/t", 1)  # without No Local: sent
    c.subscribe_start(b"t", 1 | 4)  # No Local on a plain filter: sent
    assert [t for t, b in packets(take(c, 0))] == [0x82, 0x82]


def test_a_malformed_shared_subscription_is_refused_before_it_is_sent():
    # a ShareName of one character or more, without wildcards, then "/" and
    # a filter [MQTT-4.8.2-1] [MQTT-4.8.2-2]: refused (0x82) at the call,
    # nothing sent or kept for a re-subscribe; at 3.1.1 "$share/..." is an
    # ordinary filter
    c = core(level=5)
    c.set_callback(Log().cb)
    connected(c, 0, connack5())
    for topic in ("$share//a", "$share/g", "$share/g/", "$share/g+/a", b"$share/#/a"):
        e = _error(c.subscribe_start, topic, 1)
        assert e.code == 0x82 and not isinstance(e, Busy), topic
    assert take(c, 0) == b"" and c.subs == {} and c.wait_pid == 0
    c.subscribe_start("$share/g/a/#", 1)
    assert [t for t, b in packets(take(c, 0))] == [0x82] and list(c.subs) == ["$share/g/a/#"]
    c = core()
    c.set_callback(Log().cb)
    connected(c, 0)
    c.subscribe_start("$share//a", 1)
    assert [t for t, b in packets(take(c, 0))] == [0x82]


# ------------------------------------------------ PUBREC's reason code (MQTT 5)

def test_pubrec_reason_code_ends_or_continues_the_flow():
    # a PUBREC below 0x80 is answered with PUBREL [MQTT-4.3.3-4] and the
    # message completes at PUBCOMP; 0x80 or more: no PUBREL, the message is
    # refused (reported with that code) and leaves the store
    c = core(level=5)
    log = Log()
    c.set_ack_callback(log.ack)
    connected(c, 0, connack5())
    pid = c.queue(b"t", b"m", qos=2)
    take(c, 0)
    feed(c, bytes((0x50, 3, pid >> 8, pid & 255, 0x87)), 0)  # not authorized
    assert take(c, 0) == b"" and log.acks == [(pid, 0x87)] and c.store.out_count() == 0
    pid = c.queue(b"t", b"m", qos=2)
    take(c, 0)
    feed(c, bytes((0x50, 3, pid >> 8, pid & 255, 0x10)), 0)  # no matching subscribers
    assert take(c, 0) == bytes((0x62, 2, pid >> 8, pid & 255))  # PUBREL
    assert log.acks == [(pid - 1, 0x87)] and c.store.out_count() == 1
    feed(c, bytes((0x70, 2, pid >> 8, pid & 255)), 0)  # PUBCOMP
    assert log.acks[-1] == (pid, 0) and c.store.out_count() == 0
