# The broker with its heap spent: a MemoryError while one client's packet
# is handled closes that client (as a protocol error would: DISCONNECT 0x97
# at MQTT 5) and nothing leaves Broker.poll_once; the timers' work ($SYS,
# a will at a keep-alive timeout) waits for memory instead of ending the
# broker. Its other clients are served all along.
#
# Under MicroPython the heap is spent for real: every broker step runs
# inside micropython.heap_lock(), so whatever the error paths allocate
# fails too (the review's heapfull*.py). On CPython, where allocation does
# not fail, a stand-in raises MemoryError where the step would allocate.
#
#     node tests/mp/run.mjs --heap 2m tests/mp/testrunner.py test_broker_heap_spent
import sys

from broker_harness import running, Raw, settle, advance, Timeout  # noqa: F401
from umqtt3.codec import PUBACK, DISCONNECT, encode_subscribe

MICROPYTHON = sys.implementation.name == "micropython"


def _raise(*args, **kw):
    raise MemoryError()


class spent:
    """with spent(b, obj, name): every broker step runs with the heap spent
    (MicroPython: heap_lock around poll_once; CPython: obj.name, a method
    the step calls, replaced by a stand-in that raises MemoryError, or by
    `standin`)."""

    def __init__(self, b, obj, name, standin=_raise):
        self.b = b
        self.obj = obj
        self.name = name
        self.standin = standin
        self.old = None

    def __enter__(self):
        b = self.b
        if MICROPYTHON:
            import micropython
            orig = b.poll_once

            def poll(t=0):
                micropython.heap_lock()
                try:
                    return orig(t)
                finally:
                    micropython.heap_unlock()
            b.poll_once = poll
        else:
            self.old = self.obj.__dict__.get(self.name)  # (an instance's own)
            setattr(self.obj, self.name, self.standin)
        return self

    def __exit__(self, *exc):
        if MICROPYTHON:
            del self.b.poll_once  # the class's again
        elif self.old is not None:
            setattr(self.obj, self.name, self.old)
        else:
            delattr(self.obj, self.name)
        return False


def _others_served(b, pub, other):
    # a QoS 1 PUBLISH of another client is acknowledged and delivered
    pub.publish("keep/x", b"after", 1, 7)
    p = pub.recv()
    assert p is not None and p.type == PUBACK and p.pid == 7, p
    assert other.messages(1)[0][:2] == (b"keep/x", b"after")


def _case(act, level=4, log=None, nomem=True):
    # act(b, c) sends c's packet with the heap spent; returns what c got
    with running(log=log) as b:
        other = Raw(b)
        assert other.connect("other").rc == 0
        other.subscribe(1, [("keep/#", 1)])
        pub = Raw(b)
        assert pub.connect("pub").rc == 0
        c = Raw(b)
        assert c.connect("c", clean=False, level=level).rc == 0
        settle()
        got = act(b, c)
        assert b.nomem >= 1 if nomem else b.nomem == 0, b.nomem
        assert b.errors == 0  # not a bug of the broker's: counted apart
        _others_served(b, pub, other)
        return got


def _subscribe(b, c):
    with spent(b, b.subs, "add"):
        c.put(encode_subscribe, 2, [("new/filter/" + "y" * 40, 1)], 0, c.level)
        p = c.recv()
        assert c.closed()
    return p


def test_a_protocol_error_with_the_heap_spent_closes_only_its_client():
    # the error's own reason ("protocol error: " + what) cannot be built:
    # closed all the same [MQTT-4.8.0-1]
    def act(b, c):
        with spent(b, b.subs, "add"):
            c.send(b"\x82\x08\x00\x02\x00\x09news")  # a filter running past the packet
            assert c.closed()
        return None
    _case(act, nomem=MICROPYTHON)  # (on CPython no allocation fails here)


def test_a_subscribe_with_the_heap_spent_closes_only_its_client():
    # [MQTT-4.8.0-1]: the connection is closed; nothing leaves poll_once
    assert _case(_subscribe) is None  # MQTT 3.1.1 has no reason to give


def test_with_a_log_set_too():
    # the CLI's default: the log line of the close must not allocate either
    lines = []
    assert _case(_subscribe, log=lines.append) is None


def test_at_mqtt5_the_client_gets_disconnect_0x97():
    # [MQTT-4.13.1-1]: DISCONNECT with a reason code before the close
    # (0x97, quota exceeded: the server's memory, not a bug of the client's)
    p = _case(_subscribe, level=5)
    assert p is not None and p.type == DISCONNECT and p.rc == 0x97, p


def test_a_retained_publish_on_a_new_topic_with_the_heap_spent():
    def act(b, c):
        with spent(b, b.ret, "set"):
            c.publish("r/" + "t" * 30, b"v" * 50, 1, 3, retain=True)
            assert c.closed()  # never acknowledged: nothing accepted is lost
        return None
    _case(act)


def test_a_new_persistent_connect_with_the_heap_spent():
    def act(b, c):
        d = Raw(b)
        with spent(b, b.sess, "add"):
            assert d.connect("newcomer-with-a-long-id", clean=False, expect=False) is None
            assert d.closed()
        # room again: it connects
        e = Raw(b)
        assert e.connect("newcomer-with-a-long-id", clean=False).rc == 0
        return None
    _case(act)


def test_a_sys_update_with_the_heap_spent_is_skipped():
    with running(sys_interval=10) as b:
        s = Raw(b)
        s.connect("dash")
        s.subscribe(1, [("$SYS/broker/uptime", 0)])
        settle()
        assert s.messages(1)[0][1] == b"0 seconds"
        with spent(b, b.ret, "set"):
            advance(11000)  # the update is due: it is skipped, not raised
        assert b.nomem >= 1
        advance(10000)  # the next one goes out
        up = s.messages(1)[0][1]
        assert up.endswith(b" seconds") and int(up.split()[0]) >= 20, up


def test_nomem_is_published_in_sys():
    # $SYS/broker/heap/nomem: the MemoryErrors the broker went on from,
    # beside its other counts, so that a gateway short of heap says so
    with running(sys_interval=1) as b:
        s = Raw(b)
        s.connect("dash")
        advance(1100)
        assert b.retained[b"$SYS/broker/heap/nomem"][1] == b"0"
        c = Raw(b)
        c.connect("c")
        with spent(b, b.subs, "add"):
            c.put(encode_subscribe, 2, [("new/filter", 1)], 0, 4)
            assert c.closed()
        n = b.nomem
        assert n >= 1
        advance(1100)
        assert b.retained[b"$SYS/broker/heap/nomem"][1] == str(b.nomem).encode()
        assert b.nomem == n  # (nothing else ran short since)


def test_a_will_at_a_keepalive_timeout_with_the_heap_spent_goes_later():
    # [MQTT-3.1.2-8]: the will is published when the network connection
    # is closed for a keep-alive timeout; with the heap spent it waits for
    # memory, it is not lost
    with running() as b:
        s = Raw(b)
        s.connect("sub")
        s.subscribe(1, [("will/#", 1)])
        n = Raw(b)
        n.connect("node", keepalive=2, will_topic="will/node", will_msg=b"gone", will_qos=1)
        settle()
        sess = b.sess.by_id[b"sub"]
        with spent(b, sess, "send"):
            advance(4000)
            assert n.closed()
        assert b.nomem >= 1
        advance(1000)
        m = s.messages(1)
        assert m[0][:3] == (b"will/node", b"gone", 1), m


def _will_part_way(b, delay=0):
    # watchers a (connected) and z (a persistent session offline: queuing
    # for it allocates) of will/#; client "node" ends with the heap spent
    # at z's delivery, after a has its will: a retry must not give a a
    # second copy [MQTT-3.1.2-8] (a will is one message, published once)
    from umqtt3 import props as P
    from test_broker5_connect import connect5
    a = Raw(b)
    a.connect("a")
    a.subscribe(1, [("will/#", 0)])
    z = Raw(b)
    z.connect("z", clean=False)
    z.subscribe(1, [("will/#", 1)])
    z.close()
    n = Raw(b)
    if delay:
        connect5(n, "node", clean=False, props={P.SESSION_EXPIRY: 60}, will_topic="will/node",
                 will_msg=b"gone", will_qos=1, will_props={P.WILL_DELAY: delay})
    else:
        n.connect("node", keepalive=2, will_topic="will/node", will_msg=b"gone", will_qos=1)
    settle()
    with spent(b, b.sess.by_id[b"z"], "send"):
        if delay:
            n.close()
            advance(1000 * delay + 1000)  # its delay passes with the heap spent
        else:
            advance(4000)  # the keep-alive timeout [MQTT-3.1.2-24]
            assert n.closed()
    assert b.nomem >= 1 and b.nlate + len(b.wills) == 1  # (held, not lost)
    return a


def _once_each(b, a):
    advance(1000)  # a tick with the heap back: the will finishes
    assert b.nlate == 0 and not b.wills
    m = a.messages(1)
    assert m[0][:2] == (b"will/node", b"gone"), m
    assert a.nothing()  # once
    z = Raw(b)
    assert z.connect("z", clean=False).session_present
    assert [x[:2] for x in z.messages(1)] == [(b"will/node", b"gone")]
    assert z.nothing()


def test_a_will_cut_short_by_the_heap_resumes_where_it_stopped():
    with running() as b:
        _once_each(b, _will_part_way(b))


def test_a_session_a_cut_short_will_reached_gets_the_next_will_of_its_slot():
    # the will reaches a, is cut short at z; a unsubscribes before the
    # retry, which reaches z only: a's mark from the first try must still go
    # with the slot, or the slot's next will passes a over as reached
    with running() as b:
        a = _will_part_way(b)
        reached = not a.nothing()
        # (under heap_lock the routing may find the heap spent before a's copy)
        assert reached or MICROPYTHON
        a.unsubscribe(2, ["will/#"])
        settle()
        advance(1000)  # the retry: z only
        assert b.nlate == 0
        a.subscribe(3, [("will/#", 0)])
        n2 = Raw(b)
        n2.connect("node2", keepalive=2, will_topic="will/node2", will_msg=b"gone too")
        settle()
        advance(4000)  # its keep-alive timeout: its will goes, from the same slot
        assert n2.closed()
        m = a.messages(1)
        assert m[0][:2] == (b"will/node2", b"gone too"), m


def test_a_delayed_will_cut_short_by_the_heap_resumes_where_it_stopped():
    # the same for a will published at the end of its delay (3.1.3.2.2)
    with running() as b:
        _once_each(b, _will_part_way(b, delay=2))


class _NoRoom(list):
    def append(self, x):
        raise MemoryError()


def _delayed_will_put_off(b, cid, delay):
    # a watcher of will/#, and client cid (MQTT 5, session 60 s, a will
    # with a delay) that vanishes while the heap is spent: its will can go
    # neither out nor into the delayed wills
    from umqtt3 import props as P
    from test_broker5_connect import connect5, sub5
    w = Raw(b)
    connect5(w, "w")
    sub5(w, 1, [("will/#", 0)])
    c = Raw(b)
    connect5(c, cid, clean=False, props={P.SESSION_EXPIRY: 60},
             will_topic="will/" + cid, will_msg=b"bye", will_props={P.WILL_DELAY: delay})
    with spent(b, b, "wills", _NoRoom()):
        c.close()
        settle()
    assert b.nomem >= 1 and b.nlate == 1
    return w


def test_a_delayed_will_put_off_goes_when_its_delay_has_passed():
    # 3.1.3.2.2 and [MQTT-3.1.2-8]: not before its delay, not lost
    with running() as b:
        w = _delayed_will_put_off(b, "gone", 3)
        advance(1000)
        assert w.nothing()
        advance(3000)
        m = w.messages(1)
        assert m[0][:2] == (b"will/gone", b"bye"), m
        assert b.nlate == 0


def test_a_delayed_will_put_off_is_not_sent_when_the_session_resumes():
    # [MQTT-3.1.3-9]: reconnected within the will delay, no will
    from umqtt3 import props as P
    from test_broker5_connect import connect5
    with running() as b:
        w = _delayed_will_put_off(b, "flaky", 5)
        advance(2000)
        c = Raw(b)
        assert connect5(c, "flaky", clean=False, props={P.SESSION_EXPIRY: 60}).session_present
        advance(6000)
        assert w.nothing()
        assert b.nlate == 0


def test_a_will_whose_new_alias_cannot_be_recorded_reaches_its_subscriber_once():
    # a level-5 subscriber that takes topic aliases gets the will with a new
    # one: its PUBLISH is written, then the alias's topic kept, which
    # allocates; with the heap spent there the PUBLISH is still on its way,
    # so the will's retry must not send it again [MQTT-3.1.2-8] (a will is
    # one message), and the next PUBLISH of that topic sets the alias anew
    from umqtt3 import props as P
    from test_broker5_connect import connect5, sub5
    with running() as b:
        s = Raw(b)
        connect5(s, "sub", props={P.TOPIC_ALIAS_MAXIMUM: 3})
        sub5(s, 1, [("will/#", 0)])
        n = Raw(b)
        n.connect("node", keepalive=2, will_topic="will/node", will_msg=b"gone")
        w = Raw(b)
        w.connect("warm")
        w.publish("warm/x", b".")  # the routing's hit list grown beforehand
        settle()
        with spent(b, b.sess.by_id[b"sub"], "oal", _NoRoom()):
            advance(4000)  # the keep-alive timeout [MQTT-3.1.2-24]: the will goes
            assert n.closed()
        advance(1000)  # a tick with the heap back: nothing left to retry
        m = s.messages(1)
        assert m[0][:2] == (b"will/node", b"gone"), m
        assert s.nothing()  # once
        assert b.nlate == 0
        w.publish("will/node", b"again")  # the alias set anew, with its topic
        m = s.messages(1)
        assert m[0][:2] == (b"will/node", b"again"), m
