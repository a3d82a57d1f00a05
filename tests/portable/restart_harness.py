# Shared by the tests of what a broker's store keeps across a restart
# (test_broker_acl_restart, test_broker_auth_restart): the two layouts of
# the store, a persistent session left behind, and the key field of a
# session's record. Runs on CPython and MicroPython.
from umqtt3.store import OSFiles, unframe
from umqtt3 import props as P
from umqtt3.codec import DISCONNECT
from broker_harness import Raw, listdir
from test_broker5_connect import connect5, sub5, disconnect5


def layouts():
    return (None, OSFiles())  # the log; one file per record (as on littlefs)


def leave(b, cid, filters, level=4, **login):
    # a persistent session subscribed to filters at QoS 1, its client gone
    with Raw(b) as c:
        if level == 5:
            assert connect5(c, cid, clean=False, props={P.SESSION_EXPIRY: 600}, **login).rc == 0
            assert sub5(c, 1, [(f, 1) for f in filters]) == b"\x01" * len(filters)
            disconnect5(c)
        else:
            assert c.connect(cid, clean=False, **login).rc == 0
            assert c.subscribe(1, [(f, 1) for f in filters]) == b"\x01" * len(filters)
            c.simple(DISCONNECT)


def record_key(store, cid):
    # the key field of cid's session record (one file per record)
    for name in listdir(store):
        if name[:1] == "s" and name[1:].isdigit():
            with open(store + "/" + name + "/sess", "rb") as f:
                rec = unframe(f.read())
            n = (rec[2][0] << 8) | rec[2][1]
            if bytes(rec[2][2:2 + n]) == cid:
                return rec[1]
    raise AssertionError("no record of %r" % cid)
