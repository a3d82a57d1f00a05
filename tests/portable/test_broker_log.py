# The broker store's log layout (umqtt3.broker_log) on the real `os`: on
# CPython under /tmp, on MicroPython under / (the WebAssembly port keeps its
# files in memory). Plain functions and assert, as every portable test.
# Power loss at every byte is tests/test_broker_crash.py's job.
import os

from support import tempdir, rmtree
from umqtt3.broker_log import LogFiles, AppendFiles, replay, layout

_n = [0]


def _dir():
    _n[0] += 1
    d = tempdir("umqtt3-test-log-%d" % _n[0])
    try:
        os.mkdir(d)
    except OSError:
        pass  # made already (CPython's tempdir)
    return d


def test_changes_come_back_after_a_commit():
    d = _dir()
    base = AppendFiles()
    assert layout(d, base) == "log"
    log = LogFiles(d, base)
    log.mkdir(d + "/s0")
    log.write(d + "/s0/a", b"one")
    log.write(d + "/r0", b"two")
    log.rename(d + "/s0/a", d + "/s0/b")
    log.commit()
    log.remove(d + "/r0")
    log.commit()
    again = LogFiles(d, AppendFiles())
    assert again.contents() == {d + "/s0/b": b"one"}
    assert again.listdir(d) == ["s0"] and again.listdir(d + "/s0") == ["b"]
    assert sorted(os.listdir(d)) == ["log"]  # the layout: one file
    rmtree(d)


def test_a_torn_tail_reads_as_the_changes_before_it():
    d = _dir()
    log = LogFiles(d, AppendFiles())
    log.write(d + "/a", b"one")
    log.commit()
    with open(d + "/log", "rb") as f:
        whole = f.read()
    log.write(d + "/b", b"two")
    log.commit()
    with open(d + "/log", "rb") as f:
        data = f.read()
    for j in range(len(whole), len(data)):
        assert replay(data[:j])[0] == {d + "/a": b"one"}
    assert replay(data)[0] == {d + "/a": b"one", d + "/b": b"two"}
    rmtree(d)


def test_the_broker_keeps_a_session_in_the_log():
    # a QoS 1 message for an offline persistent session, acknowledged, is
    # there after a restart [MQTT-3.1.2-5]
    from umqtt3.broker import Broker
    from umqtt3.broker_bytes import feed, take
    from umqtt3.codec import encode_connect, encode_subscribe, encode_publish
    from umqtt3.transport import Pipe
    d = _dir()
    buf = bytearray(256)

    def session(b, cid, *pkts):
        mine, theirs = Pipe.pair(4096)
        c = b.attach(theirs)
        n = encode_connect(buf, 0, cid, 4, False, 0)
        for p in pkts:
            n = p(buf, n)
        feed(b, c, bytes(buf[:n]), 0)
        return c, take(b, c)

    b = Broker(port=None, store=d, sys_interval=0)
    c, out = session(b, b"s", lambda t, o: encode_subscribe(t, o, 1, [(b"t", 1)]))
    b.disconnect(c, "gone", False)
    c, out = session(b, b"p", lambda t, o: encode_publish(t, o, b"t", b"kept", 1, 5))
    assert out[-4:] == b"\x40\x02\x00\x05"  # PUBACK, after the commit
    b.close()
    assert sorted(os.listdir(d)) == ["log"]
    b2 = Broker(port=None, store=d, sys_interval=0)
    c, out = session(b2, b"s")
    assert b"kept" in out
    b2.close()
    rmtree(d)
