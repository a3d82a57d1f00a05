# client5.request() against a scripted server (v5_peer, no sockets): its
# Correlation Data starts anew at random for each client object (a reset
# cannot make an old answer match); from the message callback it raises at
# once; a client with no callback of its own takes a late answer instead of
# dropping the link on it; a response topic given as a bytearray, found in
# subs by the core's own rule.
# Runs under pytest and under MicroPython.
from support import raises
from v5_peer import Server
from umqtt3.client import MQTTClient
from umqtt3.codec import MQTTError, encode_publish
from umqtt3 import client5, props


def _client(s, cid="rq", **kw):
    return MQTTClient(cid, "peer", level=5, connect_link=s.link, timeout_ms=2000, **kw)


def _timed_out(c, *args, **kw):
    # nobody answers: OSError(110) once timeout_ms has passed
    e = raises(OSError, client5.request, c, *args, timeout_ms=0, **kw)
    assert e.args[0] == 110, e


def _corr(s, i):
    # the Correlation Data of the server's i-th PUBLISH
    pr = s.publishes[i][1]
    return props.get(pr, 0, len(pr), 0x09)


def _answer(s, topic, corr, pid=1):
    # the server delivers a QoS 1 message carrying corr (None: none)
    buf = bytearray(64)
    n = encode_publish(buf, 0, topic, b"late", 1, pid, False, False, 5,
                       None if corr is None else {0x09: corr})
    s.send(buf[:n])


def test_correlation_data_differs_after_a_reset():
    # a node that resets makes a new client object: its first request must
    # not carry the first request's data of the last boot, which an answer
    # still on its way would match [MQTT-4.10.0-1]
    firsts = []
    for i in range(3):
        s = Server()
        c = _client(s, "rq%d" % i)
        c.connect()
        _timed_out(c, b"svc/t", b"now?", b"rq/answers")
        _timed_out(c, b"svc/t", b"now?", b"rq/answers")
        a, b = _corr(s, 0), _corr(s, 1)
        assert a != b  # two requests of one client differ too
        firsts.append(a)
    assert len(set(firsts)) == 3, firsts


def test_request_in_the_message_callback_raises_at_once():
    # nothing is read while the callback runs, so the answer could never
    # come: RuntimeError before anything is sent (not a wait of timeout_ms)
    s = Server()
    c = _client(s)
    seen = []

    def cb(topic, msg):
        try:
            client5.request(c, b"svc/t", b"now?", b"rq/answers")
        except RuntimeError as e:
            seen.append(e)

    c.set_callback(cb)
    c.connect()
    c.subscribe(b"cmd", 1)
    _answer(s, b"cmd", None)
    for _ in range(10):
        c.poll(0)
    assert len(seen) == 1 and "callback" in str(seen[0])
    assert s.publishes == [] and s.subscribes == [[(b"cmd", 1)]]
    assert s.pubacks == [1] and c.is_connected()  # the message was taken


def test_a_late_answer_to_a_client_without_a_callback_is_taken():
    # the answer comes after request() gave up: the client, which never
    # had a callback, acknowledges it instead of refusing it (a persistent
    # session would send it again at every connect); a QoS 1 message
    # without Correlation Data is still refused, as with no callback
    s = Server()
    c = _client(s)
    c.connect()
    _timed_out(c, b"svc/t", b"now?", b"rq/answers")
    _answer(s, b"rq/answers", _corr(s, 0), 7)
    for _ in range(10):
        c.poll(0)
    assert s.pubacks == [7] and c.is_connected()
    # the next request still finds its own answer
    _answer(s, b"rq/answers", b"stale", 8)
    _timed_out(c, b"svc/t", b"again?", b"rq/answers")
    assert s.pubacks == [7, 8] and c.is_connected()
    _answer(s, b"rq/answers", None, 9)
    e = raises(MQTTError, c.poll, 0)
    assert e.code == 0x80 and 9 not in s.pubacks  # [MQTT-4.3.2-2]


def test_a_bytearray_response_topic():
    # subscribe() takes a bytearray filter; so does request(), and it
    # subscribes to it once
    s = Server()
    c = _client(s)
    c.connect()
    t = bytearray(b"rq/answers")
    _timed_out(c, b"svc/t", b"now?", t)
    _timed_out(c, b"svc/t", b"again?", t)
    assert s.subscribes == [[(b"rq/answers", 1)]] and len(s.publishes) == 2
    pr = s.publishes[1][1]
    assert props.get(pr, 0, len(pr), 0x08) in ("rq/answers", b"rq/answers")


def test_subscribed_finds_a_filter_by_the_core_rule():
    # one rule for how subs keeps a filter (a buffer's as bytes): the
    # core's key(), which subscribed() asks with, not a copy of it
    from umqtt3 import client_core
    assert client5.key is client_core.key
    s = Server()
    c = _client(s)
    c.set_callback(lambda t, m: None)
    c.connect()
    c.subscribe(bytearray(b"rq/a"), 1)
    c.subscribe("rq/s", 1)
    for t in (b"rq/a", bytearray(b"rq/a"), memoryview(b"rq/a"), "rq/s"):
        assert client5.subscribed(c, t), t
    assert not client5.subscribed(c, memoryview(b"rq/b"))


def test_subscribe_still_wants_the_application_callback_after_a_request():
    # request() leaves late_answers as the callback of a client that had
    # none: a stand-in for its answers, not the application's, so its own
    # subscribe() is refused as before (its messages would be refused and
    # the link dropped at every connect), unsent and not kept
    s = Server()
    c = _client(s)
    c.connect()
    raises(AssertionError, c.subscribe, b"mine", 1)
    _timed_out(c, b"svc/t", b"now?", b"rq/answers")
    raises(AssertionError, c.subscribe, b"mine", 1)
    assert s.subscribes == [[(b"rq/answers", 1)]] and list(c.subs) == [b"rq/answers"]
    # a second request subscribes to its own response topic as the first
    _timed_out(c, b"svc/t", b"now?", b"rq/other")
    assert s.subscribes[1:] == [[(b"rq/other", 1)]]
    c.set_callback(lambda t, m: None)
    assert c.subscribe(b"mine", 1) == 1 and c.is_connected()
