# A full disk under the store's log (broker_log.LogFiles.commit): the step
# whose changes the disk refuses is refused (no acknowledgement leaves, its
# connections close), but a later step that stores nothing is not: a clean
# session's QoS 0 traffic goes on while the disk is full, and what needs the
# disk works again, with the log rewritten, once there is room.
import errno

from test_broker_store import Raw, _broker, _publishes
from umqtt3.broker_log import LogFiles, AppendFiles, replay
from umqtt3.codec import encode_subscribe, encode_publish, PUBACK, PUBLISH


class Disk(AppendFiles):
    """The real files, until `full`: then every write and append fails with
    ENOSPC after writing what it could (half), as a full disk does."""

    def __init__(self):
        self.full = False

    def _space(self, path, data):
        if self.full:
            with open(path, "ab") as f:
                f.write(bytes(data[:len(data) // 2]))
            raise OSError(errno.ENOSPC, "No space left on device")

    def append(self, path, data):
        self._space(path, data)
        AppendFiles.append(self, path, data)

    def write(self, path, data):
        self._space(path, data)
        AppendFiles.write(self, path, data)


def test_a_commit_with_nothing_new_succeeds_after_a_refused_one(tmp_path):
    d = str(tmp_path)
    disk = Disk()
    log = LogFiles(d, disk)
    log.write(d + "/a", b"one")
    log.commit()
    disk.full = True
    log.write(d + "/b", b"two")
    try:
        log.commit()
        raise AssertionError("the full disk took the append")
    except OSError:
        pass
    log.commit()  # nothing new: nothing to refuse
    assert not log.pending()
    log.write(d + "/c", b"three")
    try:
        log.commit()  # something new: the rewrite, refused
        raise AssertionError("the full disk took the rewrite")
    except OSError:
        pass
    log.commit()
    disk.full = False
    log.write(d + "/c", b"four")
    log.commit()  # room again: the log is rewritten, with what was refused
    with open(d + "/log", "rb") as f:
        data = f.read()
    want = {d + "/a": b"one", d + "/b": b"two", d + "/c": b"four"}
    assert replay(data) == (want, len(data))
    assert LogFiles(d, AppendFiles()).contents() == want


def test_clients_that_store_nothing_go_on_while_the_disk_is_full(tmp_path):
    disk = Disk()
    b = _broker(str(tmp_path), files=disk)
    p = Raw(b, b"p", clean=True)
    p.send(encode_publish, b"keep", b"one", 1, 1, True)
    assert (PUBACK, 1, None) in p.packets()
    disk.full = True
    p.send(encode_publish, b"keep", b"two", 1, 2, True)  # needs the disk: refused
    assert (PUBACK, 2, None) not in p.packets()
    assert b.store_errors >= 1
    q = Raw(b, b"q", clean=True)  # stores nothing: served
    q.send(encode_subscribe, 1, [(b"t", 0)])
    q.publish(b"t", b"qos0", 0, 0)
    got = q.packets()
    assert (PUBLISH, 0, b"qos0") in [(t, pid, pl) for t, pid, pl in got], got
    assert q.c in b.clients
    disk.full = False
    r = Raw(b, b"r", clean=True)
    r.send(encode_publish, b"keep", b"three", 1, 3, True)
    assert (PUBACK, 3, None) in r.packets()
    b.close()
    b2 = _broker(str(tmp_path))
    s = Raw(b2, b"s", clean=True)
    s.send(encode_subscribe, 1, [(b"keep", 1)])
    assert [pl for pid, pl in _publishes(s.packets())] == [b"three"]
    b2.close()
