# Authentication under abuse: client ids bound to the users whose sessions
# they are, and failed logins that slow their source down
# (broker_auth.Backoff, the auth_* limits).
#
# Runs under pytest on CPython and under MicroPython with
#     node tests/mp/run.mjs tests/mp/testrunner.py test_broker_security
from broker_harness import running, Raw, advance
from umqtt3.broker_auth import Backoff
from umqtt3.compat import ticks_add

USERS = {b"alice": b"a-secret", b"bob": b"b-secret"}


def test_client_id_of_another_users_session_refused():
    # bob would receive alice's queued private messages: CONNACK 5
    with running(users=USERS, allow_anonymous=True) as b:
        with Raw(b) as a:
            assert a.connect("alice-phone", clean=False, user="alice",
                             password=b"a-secret").rc == 0
            assert a.subscribe(1, "private/alice", 1) == b"\x01"
        b.publish("private/alice", b"for alice", 1)  # queued: alice is offline
        with Raw(b) as m:
            assert m.connect("alice-phone", clean=False, user="bob",
                             password=b"b-secret").rc == 5
            assert m.closed()
        with Raw(b) as anon:
            assert anon.connect("alice-phone", clean=False).rc == 5
        with Raw(b) as a:
            p = a.connect("alice-phone", clean=False, user="alice", password=b"a-secret")
            assert p.rc == 0 and p.session_present
            assert a.messages(1)[0][1] == b"for alice"


def test_client_id_bound_at_mqtt5_0x87():
    with running(users=USERS) as b:
        with Raw(b) as a:
            assert a.connect("shared", level=5, user="alice", password=b"a-secret").rc == 0
            with Raw(b) as m:
                assert m.connect("shared", level=5, user="bob", password=b"b-secret").rc == 0x87
            # alice keeps her connection; she can take her own id over
            with Raw(b) as a2:
                assert a2.connect("shared", level=5, user="alice", password=b"a-secret").rc == 0


def test_clean_session_frees_the_client_id():
    with running(users=USERS) as b:
        with Raw(b) as a:
            assert a.connect("desk", user="alice", password=b"a-secret").rc == 0
        advance(10)
        with Raw(b) as m:
            assert m.connect("desk", user="bob", password=b"b-secret").rc == 0


def test_unbound_client_ids_option():
    with running(users=USERS) as b:
        b.bind_ids = False
        with Raw(b) as a:
            assert a.connect("x", clean=False, user="alice", password=b"a-secret").rc == 0
        with Raw(b) as m:
            assert m.connect("x", clean=False, user="bob", password=b"b-secret").rc == 0


def test_failed_logins_make_the_source_wait():
    with running(users=USERS, auth_fails=3, auth_wait_ms=1000) as b:
        for i in range(3):
            with Raw(b) as c:
                assert c.connect("g%d" % i, user="alice", password=b"guess%d" % i).rc == 4
        # waiting: even the right password is refused, unchecked
        with Raw(b) as c:
            assert c.connect("g", user="alice", password=b"a-secret").rc == 4
        advance(1100)
        with Raw(b) as c:
            assert c.connect("g", user="alice", password=b"a-secret").rc == 0
        # the login that passed forgot the source: three more failures to wait
        for i in range(2):
            with Raw(b) as c:
                assert c.connect("h%d" % i, user="bob", password=b"nope").rc == 4
        with Raw(b) as c:
            assert c.connect("h", user="bob", password=b"b-secret").rc == 0


def test_backoff_doubles_and_its_table_is_bounded():
    g = Backoff(4, 2, 100)
    t = 1000
    g.failed("a", t)
    assert not g.waiting("a", t)
    g.failed("a", t)
    assert g.waiting("a", ticks_add(t, 99)) and not g.waiting("a", ticks_add(t, 101))
    g.failed("a", t)  # one more: twice as long
    assert g.waiting("a", ticks_add(t, 199)) and not g.waiting("a", ticks_add(t, 201))
    for i in range(60):
        g.failed("a", t)
    assert g.waiting("a", ticks_add(t, 6399)) and not g.waiting("a", ticks_add(t, 6401))
    for i in range(1000):  # many sources: the table stays at 4
        g.failed("src%d" % i, ticks_add(t, i))
        assert len(g) <= 4
    assert g.waiting("a", ticks_add(t, 6000))  # the longest wait is the one kept
    g.passed("a")
    assert not g.waiting("a", t)
