# A store log the broker cannot read whole: a torn tail (what a power loss
# leaves: the start of an append) is cut, said and kept in log.bad; anything
# else (a file that does not begin as a record does, a bad record with whole
# ones after it) is refused with the file left as it was, as mosquitto
# refuses a persistence file it does not recognise.
import os
import subprocess
import sys

import pytest

from tools import procs
from umqtt3.broker_log import LogFiles, AppendFiles, replay, damage


def _store(d):
    log = LogFiles(d, AppendFiles())
    log.write(d + "/r0", b"one")
    log.commit()
    log.write(d + "/r1", b"two")
    log.commit()
    with open(d + "/log", "rb") as f:
        return f.read()


def _put(d, data):
    with open(d + "/log", "wb") as f:
        f.write(data)


def _refused(d, data, words):
    _put(d, data)
    with pytest.raises(ValueError) as e:
        LogFiles(d, AppendFiles())
    assert words in str(e.value) and d + "/log" in str(e.value)
    with open(d + "/log", "rb") as f:
        assert f.read() == data  # left as it was
    assert not os.path.exists(d + "/log.bad")


def test_a_file_that_is_not_a_log_is_refused_and_kept(tmp_path):
    d = str(tmp_path)
    _refused(d, b"my notes, not a store\n", "no whole record at byte 0")
    _refused(d, b"Log of the day\n", "no whole record at byte 0")


def test_a_first_record_damaged_is_refused(tmp_path):
    d = str(tmp_path)
    data = _store(d)
    _refused(d, b"X" + data[1:], "byte 0")
    # whole by its length, bad by its CRC, the second record whole
    _refused(d, data[:10] + b"?" + data[11:], "no whole record at byte 0")


def test_a_bad_record_before_whole_ones_is_refused(tmp_path):
    d = str(tmp_path)
    log = LogFiles(d, AppendFiles())
    for k in range(3):
        log.write(d + "/r%d" % k, b"x%d" % k)
        log.commit()
    with open(d + "/log", "rb") as f:
        data = f.read()
    one = len(data) // 3
    for at in (one + 1, one + 10, one + one - 1):  # op, path, CRC
        bad = data[:at] + bytes([data[at] ^ 0x40]) + data[at + 1:]
        assert replay(bad)[1] == one
        _refused(d, bad, "bad record at byte %d" % one)
    # a data length made larger reaches past the end, as a torn record's
    # does: the records inside it cannot be told from its data (below), so
    # it is cut as a torn tail, and its bytes are kept in log.bad
    at = one + 5
    bad = data[:at] + bytes([data[at] ^ 0x40]) + data[at + 1:]
    _put(d, bad)
    assert LogFiles(d, AppendFiles()).cut == (one, len(data) - one)
    with open(d + "/log.bad", "rb") as f:
        assert f.read() == bad[one:]


def test_a_torn_record_whose_data_holds_records_is_a_torn_tail(tmp_path):
    # a client's payload may hold a record's bytes: a power loss that tears
    # the append of such a message leaves whole "records" inside the torn
    # one's extent, which are its data, not records after it
    d = str(tmp_path)
    data = _store(d)
    other = os.path.join(d, "other")
    os.mkdir(other)
    inner = _store(other)  # two whole records, as a payload
    log = LogFiles(d, AppendFiles())
    log.write(d + "/r2", b"<" + bytes(inner) + b">" * 50)
    log.commit()
    with open(d + "/log", "rb") as f:
        full = f.read()
    for cut in (len(data) + 12 + len(d + "/r2") + len(inner), len(full) - 1):
        _put(d, full[:cut])
        log = LogFiles(d, AppendFiles())
        assert log.cut == (len(data), cut - len(data))
        assert sorted(log.contents()) == [d + "/r0", d + "/r1"]
        os.remove(d + "/log.bad")


def test_a_torn_tail_is_cut_and_kept_aside(tmp_path):
    d = str(tmp_path)
    data = _store(d)
    whole = replay(data)[1]
    assert whole == len(data)
    for cut in range(1, len(data)):  # every prefix a power loss may leave
        if os.path.exists(d + "/log.bad"):
            os.remove(d + "/log.bad")
        _put(d, data[:cut])
        files, good = replay(data[:cut])
        assert damage(data[:cut], good) is None
        log = LogFiles(d, AppendFiles())
        assert log.contents() == files
        if good == cut:
            assert log.cut is None and not os.path.exists(d + "/log.bad")
            continue
        assert log.cut == (good, cut - good)
        with open(d + "/log.bad", "rb") as f:
            assert f.read() == data[good:cut]
        with open(d + "/log", "rb") as f:
            assert f.read() == data[:good]  # rewritten without the tail


def test_garbage_after_whole_records_is_a_torn_tail(tmp_path):
    # unsynced bytes a file system may leave as zeros or stale data
    d = str(tmp_path)
    data = _store(d)
    for tail in (b"\0" * 40, b"\xff\x4c\x57junk", b"\x4c"):
        _put(d, data + tail)
        log = LogFiles(d, AppendFiles())
        assert log.cut == (len(data), len(tail))
        assert sorted(log.contents()) == [d + "/r0", d + "/r1"]
    with open(d + "/log.bad", "rb") as f:
        assert f.read() == b"\0" * 40 + b"\xff\x4c\x57junk" + b"\x4c"  # each cut appended


def _broker(d, wait_for="listening", more=()):
    p = subprocess.Popen([sys.executable, "-m", "umqtt3.broker", "--port", "0", "--store", d]
                         + list(more),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         cwd=procs.ROOT, env=procs.python_env(), stdin=subprocess.DEVNULL)
    out = []
    for line in p.stdout:
        out.append(line)
        if wait_for in line:
            break
    p.terminate()
    rest, err = p.communicate(timeout=30)
    return p.returncode, "".join(out) + rest, err


def test_the_broker_refuses_a_damaged_log_in_one_line(tmp_path):
    d = str(tmp_path)
    data = _store(d)
    _put(d, b"X" + data[1:])
    rc, out, err = _broker(d)
    assert rc == 1 and "listening" not in out, (rc, out, err)
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert "--store %s" % d in err and d + "/log" in err and "byte 0" in err
    with open(d + "/log", "rb") as f:
        assert f.read() == b"X" + data[1:]


@pytest.mark.parametrize("bridge", [False, True])
def test_the_broker_says_it_cut_a_torn_tail(tmp_path, bridge):
    # with a bridge, the bridge's start-up opens the log first (to take
    # back routings a power loss cut short): the cut is said all the same
    d = str(tmp_path)
    data = _store(d)
    _put(d, data + data[:7])
    # (an upstream nobody answers: the broker starts, its bridge retries)
    more = ["--bridge", "127.0.0.1:9", "--bridge-topic", "t/# out 1"] if bridge else []
    rc, out, err = _broker(d, more=more)
    assert "listening" in out and "Traceback" not in err, (out, err)
    assert "cut a torn tail of 7 bytes at byte %d, kept in %s/log.bad" % (len(data), d) in out
    assert out.count("torn tail") == 1, out
    with open(d + "/log.bad", "rb") as f:
        assert f.read() == data[:7]
