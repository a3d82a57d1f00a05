# A deny rule of the ACL holds at delivery (broker_acl, broker_subs), as
# with mosquitto: under "topic read #" and "topic deny secret/#" a filter a
# deny pattern only meets ("+/x", "#") is granted, and each topic it matches
# is checked before it is delivered: secret/x reaches no such subscription,
# whether published, retained, a will, queued for an offline session or
# shared. A filter the deny pattern covers is refused (0x80). The
# subscriptions of a resumed session are checked again against the ACL in
# force: a revoked permission reaches them, after a restart too. Runs over
# pipes on CPython and MicroPython.
from umqtt3.store import OSFiles
from broker_harness import running, Raw, tempdir, rmtree
from umqtt3.codec import PUBACK, DISCONNECT

ACL = "topic read #\ntopic deny secret/#\nuser alice\ntopic readwrite #\n"


def _broker(**kw):
    return running(users={b"alice": b"pw"}, allow_anonymous=True, **kw)


def _topics(c):
    out = []
    while True:
        try:
            m = c.messages(1)[0]
        except Exception:
            return sorted(out)
        out.append(bytes(m[0]))


def test_partly_denied_filters_granted_denied_topics_withheld():
    with _broker() as b, Raw(b) as spy, Raw(b) as w:
        b.set_acl(ACL)
        spy.connect("spy")
        assert spy.subscribe(1, [("+/x", 0), ("+/+/x", 0), ("#", 0), ("secret/#", 0),
                                 ("secret/a", 0)]) == b"\x00\x00\x00\x80\x80"
        w.connect("w", user="alice", password=b"pw")
        for t in ("secret/x", "public/x", "secret/a/x", "public/a/x", "secret"):
            w.publish(t, b"m")
        assert _topics(spy) == [b"public/a/x", b"public/x"]


def test_retained_and_will_withheld():
    with _broker() as b, Raw(b) as w, Raw(b) as spy:
        b.set_acl(ACL)
        w.connect("w", user="alice", password=b"pw")
        w.publish("secret/x", b"r", 1, pid=1, retain=True)
        w.expect(PUBACK, 1)
        w.publish("public/x", b"r", 1, pid=2, retain=True)
        w.expect(PUBACK, 2)
        spy.connect("spy")
        assert spy.subscribe(1, [("+/x", 1)]) == b"\x01"
        m = spy.messages(1)[0]
        assert (bytes(m[0]), m[3]) == (b"public/x", True)
        assert spy.nothing()
        with Raw(b) as d:
            d.connect("dying", user="alice", password=b"pw", will_topic="secret/x", will_msg=b"w")
        # its connection ended without DISCONNECT: the will goes, not to spy
        assert spy.nothing()


def test_offline_session_queues_no_denied_topic():
    with _broker() as b, Raw(b) as w:
        b.set_acl(ACL)
        with Raw(b) as spy:
            spy.connect("spy", clean=False)
            assert spy.subscribe(1, [("+/x", 1)]) == b"\x01"
            spy.simple(DISCONNECT)
        w.connect("w", user="alice", password=b"pw")
        w.publish("secret/x", b"s", 1, pid=1)
        w.expect(PUBACK, 1)
        w.publish("public/x", b"p", 1, pid=2)
        w.expect(PUBACK, 2)
        assert b.sessions()[b"spy"].queued() == 1
        with Raw(b) as spy:
            assert spy.connect("spy", clean=False).session_present
            assert [bytes(m[0]) for m in spy.messages(1)] == [b"public/x"]
            assert spy.nothing()


def test_shared_subscription_member_the_acl_denies_is_passed_over():
    with _broker() as b, Raw(b) as spy, Raw(b) as a, Raw(b) as w:
        b.set_acl(ACL)
        spy.connect("spy")
        a.connect("a", user="alice", password=b"pw")
        assert spy.subscribe(1, [("$share/g/+/x", 0)]) == b"\x00"
        assert a.subscribe(1, [("$share/g/+/x", 0)]) == b"\x00"
        w.connect("w", user="alice", password=b"pw")
        for _ in range(4):
            w.publish("secret/x", b"s")
        assert len(a.messages(4)) == 4
        assert spy.nothing()


def test_revoked_permission_reaches_stored_subscriptions():
    store = tempdir("umqtt3-acl-revoke")
    with _broker(store=store, files=OSFiles()) as b:
        b.set_acl("topic read #\nuser alice\ntopic readwrite #\n")
        with Raw(b) as spy:
            spy.connect("spy", clean=False)
            assert spy.subscribe(1, [("secret/#", 1), ("#", 1)]) == b"\x01\x01"
            spy.simple(DISCONNECT)
    # restarted with secret/# denied
    with _broker(store=store, files=OSFiles()) as b, Raw(b) as w:
        b.set_acl(ACL)
        w.connect("w", user="alice", password=b"pw")
        # restored with the grants of its (anonymous) client, kept with its
        # record: secret/# went at start-up, # queues what it may read
        assert b.sessions()[b"spy"].filters == [b"#"]
        w.publish("secret/k", b"key", 1, pid=1)
        w.expect(PUBACK, 1)
        w.publish("public/k", b"ok", 1, pid=2)
        w.expect(PUBACK, 2)
        assert b.sessions()[b"spy"].queued() == 1
        with Raw(b) as spy:
            assert spy.connect("spy", clean=False).session_present
            assert b.sessions()[b"spy"].filters == [b"#"]
            assert [bytes(m[0]) for m in spy.messages(1)] == [b"public/k"]
            w.publish("secret/k", b"key", 1, pid=3)
            w.expect(PUBACK, 3)
            assert spy.nothing()
    # the change is on disk: restarted without the ACL, secret/# is gone
    with _broker(store=store, files=OSFiles()) as b:
        assert b.sessions()[b"spy"].filters == [b"#"]
    rmtree(store)


def test_no_acl_after_restart_delivers_as_before():
    # the mark a stored subscription had under an ACL does not outlive it
    store = tempdir("umqtt3-acl-none")
    with _broker(store=store, files=OSFiles()) as b:
        b.set_acl(ACL)
        with Raw(b) as spy:
            spy.connect("spy", clean=False)
            assert spy.subscribe(1, [("+/x", 1)]) == b"\x01"
            spy.simple(DISCONNECT)
    with _broker(store=store, files=OSFiles()) as b, Raw(b) as w:
        w.connect("w", user="alice", password=b"pw")
        w.publish("secret/x", b"s", 1, pid=1)
        w.expect(PUBACK, 1)
        assert b.sessions()[b"spy"].queued() == 1
    rmtree(store)
