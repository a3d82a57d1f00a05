# With a users file, a client id belongs to the user whose session it is
# (Core.owners), also across a restart of the broker with its store: the
# session's record keeps the user name (broker_store), and start-up restores
# the owner from it. Another user's CONNECT with that id is refused with
# CONNACK 5 (0x87 at MQTT 5: the server's authorization check
# [MQTT-3.1.4-2 (5.0)]; section 3.1.4 of 3.1.1 says the same without a
# number), with session present 0 [MQTT-3.2.2-4] [MQTT-3.2.2-6 (5.0)], and
# the connection is closed [MQTT-3.2.2-5] [MQTT-3.2.2-7 (5.0)]; the session
# and what it queued stay its user's [MQTT-3.1.2-4] [MQTT-4.4.0-1]. A record
# without the name (written with no users file, or by a version before
# records kept it) restores as before: the first user to resume it owns it,
# and its record names that user from then on. Each test runs with both
# layouts of the store: the log (the default here) and one file per record
# (OSFiles, as on littlefs). Runs over pipes on CPython and MicroPython.
from umqtt3 import props as P
from broker_harness import running, Raw, tempdir, rmtree
from restart_harness import layouts as _layouts, leave, record_key as _record_key
from test_broker5_connect import connect5, disconnect5
from umqtt3.codec import PUBACK, DISCONNECT

USERS = {b"alice": b"a-pw", b"bob": b"b-pw", b"w": b"w-pw"}
PW = {"alice": "a-pw", "bob": "b-pw", "w": "w-pw"}


def _login(user):
    return {} if user is None else {"user": user, "password": PW[user]}


def _publish(b, topic, pid):
    with Raw(b) as w:
        assert w.connect("w", **_login("w")).rc == 0
        w.publish(topic, b"m", 1, pid=pid)
        w.expect(PUBACK, pid)


def _leave(b, cid, user, level=4):
    # a persistent session subscribed to t/#, whose client has gone
    leave(b, cid, ["t/#"], level, **_login(user))


def _refused(b, cid, user, level=4):
    # another user's CONNECT with cid: refused, session present 0, closed
    with Raw(b) as c:
        if level == 5:
            p = connect5(c, cid, clean=False, props={P.SESSION_EXPIRY: 600}, **_login(user))
            assert p.rc == 0x87, p.rc
        else:
            p = c.connect(cid, clean=False, **_login(user))
            assert p.rc == 5, p.rc
        assert not p.session_present
        assert c.closed()


def _resumes(b, cid, user, n, level=4):
    # cid's own user resumes it and gets the n messages it queued
    with Raw(b) as c:
        if level == 5:
            p = connect5(c, cid, clean=False, props={P.SESSION_EXPIRY: 600}, **_login(user))
        else:
            p = c.connect(cid, clean=False, **_login(user))
        assert p.rc == 0 and p.session_present
        got = c.messages(n)
        assert [m[0] for m in got] == [b"t/x"] * n
        assert c.nothing()
        if level == 5:
            disconnect5(c)
        else:
            c.simple(DISCONNECT)


def _owned_after_restart(files):
    store = tempdir("umqtt3-auth-restart")
    with running(store=store, files=files, users=USERS, allow_anonymous=True) as b:
        _leave(b, "a", "alice")
        _leave(b, "a5", "alice", level=5)
        _leave(b, "anon", None)
    if files is not None:
        assert _record_key(store, b"a") == 1 | 4  # with the user name
        assert _record_key(store, b"a5") == 2 | 4
        assert _record_key(store, b"anon") == 1 | 8  # an anonymous client's
    with running(store=store, files=files, users=USERS, allow_anonymous=True) as b:
        _publish(b, "t/x", 1)
        s = b.sessions()
        assert (s[b"a"].queued(), s[b"a5"].queued(), s[b"anon"].queued()) == (1, 1, 1)
        _refused(b, "a", "bob")
        _refused(b, "a", None)
        _refused(b, "a5", "bob", level=5)
        _refused(b, "anon", "bob")
        # nothing taken: the sessions and what they queued are as they were
        s = b.sessions()
        assert (s[b"a"].queued(), s[b"a5"].queued(), s[b"anon"].queued()) == (1, 1, 1)
        assert s[b"a"].filters == [b"t/#"]
        _resumes(b, "a", "alice", 1)
        _resumes(b, "a5", "alice", 1, level=5)
        _resumes(b, "anon", None, 1)
    rmtree(store)


def test_restored_session_id_stays_its_users():
    for files in _layouts():
        _owned_after_restart(files)


def _unnamed_then_named(files):
    # written with no users file: the record names nobody (the same bytes
    # as before records kept it), so the first user to resume the session
    # owns it; its record names that user from then on
    store = tempdir("umqtt3-auth-unnamed")
    with running(store=store, files=files) as b:
        _leave(b, "a", "alice")
    if files is not None:
        assert _record_key(store, b"a") == 1  # the level alone
    with running(store=store, files=files, users=USERS) as b:
        _publish(b, "t/x", 1)
        _resumes(b, "a", "bob", 1)  # the first to resume it: bob
        _refused(b, "a", "alice")
    if files is not None:
        assert _record_key(store, b"a") == 1 | 4
    with running(store=store, files=files, users=USERS) as b:
        _publish(b, "t/x", 2)
        _refused(b, "a", "alice")
        _resumes(b, "a", "bob", 1)
    rmtree(store)


def test_record_without_the_user_name_goes_to_the_first_user():
    for files in _layouts():
        _unnamed_then_named(files)


def _unbound(files):
    # with ids not bound to users (--unbound-client-ids), another user may
    # resume the session; its record names that user from then on
    store = tempdir("umqtt3-auth-unbound")
    with running(store=store, files=files, users=USERS) as b:
        _leave(b, "a", "alice")
    with running(store=store, files=files, users=USERS) as b:
        b.bind_ids = False
        _publish(b, "t/x", 1)
        _resumes(b, "a", "bob", 1)
    if files is not None:
        assert _record_key(store, b"a") == 1 | 4
    with running(store=store, files=files, users=USERS) as b:
        _refused(b, "a", "alice")  # bound again: bob's now
        _resumes(b, "a", "bob", 0)
    rmtree(store)


def test_unbound_ids_let_another_user_resume_and_the_record_follows():
    for files in _layouts():
        _unbound(files)


def _acl_from_owner(files):
    # written with users and no ACL: the record names the user, so an ACL
    # given after the restart grants the restored session that user's
    # topics at once, as one written under the ACL
    store = tempdir("umqtt3-auth-acl")
    with running(store=store, files=files, users=USERS) as b:
        _leave(b, "a", "alice")
    with running(store=store, files=files, users=USERS) as b:
        b.set_acl("user alice\ntopic read t/#\nuser w\ntopic write #\n")
        _publish(b, "t/x", 1)
        assert b.sessions()[b"a"].queued() == 1
        _resumes(b, "a", "alice", 1)
    rmtree(store)


def test_acl_after_restart_grants_the_owner_at_once():
    for files in _layouts():
        _acl_from_owner(files)
