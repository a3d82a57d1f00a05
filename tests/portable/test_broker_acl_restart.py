# A persistent session under an ACL, across a restart of the broker with
# its store: the session's record keeps the user name of its client
# (broker_store), so the restored session has that user's grants at once
# and queues what the ACL lets it read while its client is away, as
# mosquitto does [MQTT-3.1.2-4] [MQTT-4.4.0-1]. A record without the user
# name (written without an ACL, or by a version before the record kept it)
# gives the restored session nothing until its client connects, which
# writes the name. A client that resumes the session with another user name
# gets that user's grants, on disk too. Each test runs with both layouts of
# the store: the log (the default here) and one file per record (OSFiles,
# as on littlefs). Runs over pipes on CPython and MicroPython.
from umqtt3 import props as P
from broker_harness import running, Raw, tempdir, rmtree
from restart_harness import layouts as _layouts, leave, record_key as _record_key
from test_broker5_connect import connect5
from umqtt3.codec import PUBACK, DISCONNECT

ACL = "pattern read in/%u/#\ntopic read pub/#\nuser w\ntopic write #\n"


def _publish(b, topic, pid):
    # w publishes at QoS 1: acknowledged, so routed to every session
    with Raw(b) as w:
        w.connect("w", user="w")
        w.publish(topic, b"m", 1, pid=pid)
        w.expect(PUBACK, pid)


def _leave(b, cid, filters, user=None, level=4):
    leave(b, cid, filters, level, user=user)


def _topics(c, n):
    return sorted(bytes(m[0]) for m in c.messages(n))


def _queued_after_restart(files):
    store = tempdir("umqtt3-acl-restart")
    with running(store=store, files=files) as b:
        b.set_acl(ACL)
        _leave(b, "a", ["in/alice/#"], user="alice")
        _leave(b, "a5", ["in/bob/#"], user="bob", level=5)
        _leave(b, "anon", ["pub/#"])
    with running(store=store, files=files) as b:
        b.set_acl(ACL)
        _publish(b, "in/alice/x", 1)
        _publish(b, "in/bob/x", 2)
        _publish(b, "pub/x", 3)
        s = b.sessions()
        # each queues what its own user may read, and nothing else
        assert (s[b"a"].queued(), s[b"a5"].queued(), s[b"anon"].queued()) == (1, 1, 1)
        with Raw(b) as c:
            assert c.connect("a", clean=False, user="alice").session_present
            assert _topics(c, 1) == [b"in/alice/x"]
            assert c.nothing()
        with Raw(b) as c:
            assert connect5(c, "a5", clean=False, props={P.SESSION_EXPIRY: 600},
                            user="bob").session_present
            assert _topics(c, 1) == [b"in/bob/x"]
        with Raw(b) as c:
            assert c.connect("anon", clean=False).session_present
            assert _topics(c, 1) == [b"pub/x"]
    rmtree(store)


def test_restored_session_queues_what_its_user_may_read():
    for files in _layouts():
        _queued_after_restart(files)


def _unknown_user_then_known(files):
    # written without an ACL: the record does not say who the client was
    # (the same bytes as before records kept it), so the restored session
    # gets nothing until its client connects under the ACL
    store = tempdir("umqtt3-acl-unknown")
    with running(store=store, files=files) as b:
        _leave(b, "a", ["in/alice/#"], user="alice")
    if files is not None:
        assert _record_key(store, b"a") == 1  # the level alone
    with running(store=store, files=files) as b:
        b.set_acl(ACL)
        _publish(b, "in/alice/x", 1)
        assert b.sessions()[b"a"].queued() == 0
        with Raw(b) as c:
            assert c.connect("a", clean=False, user="alice").session_present
            assert c.nothing()
            c.simple(DISCONNECT)
    if files is not None:
        assert _record_key(store, b"a") == 1 | 4  # with the user name now
    with running(store=store, files=files) as b:
        b.set_acl(ACL)
        _publish(b, "in/alice/y", 2)
        assert b.sessions()[b"a"].queued() == 1
    rmtree(store)


def test_record_without_the_user_name_restores_as_before():
    for files in _layouts():
        _unknown_user_then_known(files)


def _another_user(files):
    store = tempdir("umqtt3-acl-other")
    with running(store=store, files=files) as b:
        b.set_acl(ACL)
        _leave(b, "a", ["in/alice/#"], user="alice")
    with running(store=store, files=files) as b:
        b.set_acl(ACL)
        # bob resumes alice's session (no password file: names are not
        # bound to client ids): its subscriptions are checked against
        # bob's grants, and its record names bob
        with Raw(b) as c:
            assert c.connect("a", clean=False, user="bob").session_present
            assert b.sessions()[b"a"].filters == []
            assert c.subscribe(2, [("in/bob/#", 1)]) == b"\x01"
            c.simple(DISCONNECT)
    with running(store=store, files=files) as b:
        b.set_acl(ACL)
        _publish(b, "in/alice/x", 1)
        _publish(b, "in/bob/x", 2)
        assert b.sessions()[b"a"].queued() == 1
        with Raw(b) as c:
            assert c.connect("a", clean=False, user="bob").session_present
            assert _topics(c, 1) == [b"in/bob/x"]
    rmtree(store)


def test_resumed_by_another_user_restores_with_that_users_grants():
    for files in _layouts():
        _another_user(files)


def _revoked_while_down(files):
    # the restored session's subscriptions are checked at start-up as at a
    # resume: one the ACL no longer grants goes, on disk too
    store = tempdir("umqtt3-acl-revoked")
    with running(store=store, files=files) as b:
        b.set_acl(ACL + "user alice\ntopic read old/#\n")
        _leave(b, "a", ["in/alice/#", "old/#"], user="alice")
    with running(store=store, files=files) as b:
        b.set_acl(ACL)
        assert b.sessions()[b"a"].filters == [b"in/alice/#"]
    with running(store=store, files=files) as b:
        assert b.sessions()[b"a"].filters == [b"in/alice/#"]
    rmtree(store)


def test_permission_revoked_while_down_goes_at_start_up():
    for files in _layouts():
        _revoked_while_down(files)
