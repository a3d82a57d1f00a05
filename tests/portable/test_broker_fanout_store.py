# A message fanned out to persistent sessions through the broker's store,
# on the real file system (CPython, and the WebAssembly MicroPython under
# tests/mp/testrunner.py), in both layouts: the message is kept once, in a
# record m<k> each session's record refers to, and comes back for every
# session after a restart; the record goes with the last reference
# (docs/store.md). tests/test_broker_store_fanout.py adds the bytes written
# and a power loss at every step.
from umqtt3.store import OSFiles
from umqtt3.broker_log import AppendFiles
from broker_harness import running, Raw, wait_for, tempdir, rmtree, listdir
from umqtt3.codec import PUBACK, DISCONNECT

N = 6  # persistent sessions


def _mrecords(b, store):
    """The m<k> records live in the store, in either layout."""
    b.commit()
    log = b.disk.log
    names = listdir(store) if log is None else [k[len(store) + 1:] for k in log.contents()]
    return sorted(n for n in names if n[:1] == "m" and n[1:].isdigit())


def _fan_out(files, tag):
    store = tempdir("umqtt3-fan-" + tag)
    try:
        with running(store=store, files=files) as b:
            for i in range(N):
                with Raw(b) as c:
                    c.connect("f%d" % i, clean=False)
                    c.subscribe(1, [("fan/#", 1)])
                    c.simple(DISCONNECT)
            assert wait_for(lambda: all(b.sessions()[b"f%d" % i].client is None
                                        for i in range(N)))
            with Raw(b) as p:
                p.connect("pub")
                for k in range(3):
                    p.publish("fan/x", b"m%d" % k, 1, pid=k + 1)
                    p.expect(PUBACK, k + 1)
            assert len(_mrecords(b, store)) == 3  # once each, not once per session
        with running(store=store, files=files) as b:  # a restart
            assert len(_mrecords(b, store)) == 3
            for i in range(N):
                with Raw(b) as c:
                    assert c.connect("f%d" % i, clean=False).session_present
                    got = c.messages(3)  # (each acknowledged)
                    assert [m[1] for m in got] == [b"m0", b"m1", b"m2"], (tag, i, got)
                    c.simple(DISCONNECT)
                # each message record stays while a session still refers to it
                assert wait_for(lambda: len(_mrecords(b, store)) == (3 if i < N - 1 else 0))
    finally:
        rmtree(store)


def test_fan_out_kept_once_one_file_per_record():
    _fan_out(OSFiles(), "files")


def test_fan_out_kept_once_in_the_log():
    _fan_out(AppendFiles(), "log")
