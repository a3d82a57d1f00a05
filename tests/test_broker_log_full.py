# A full disk under the store's log (broker_log.LogFiles.commit): the step
# whose changes the disk refuses sends no acknowledgement (its connections
# close), and so does every later step until a rewrite of the log succeeds:
# the refused changes are in the broker's RAM, and an acknowledgement may
# stand on them (a QoS 2 resend of a refused PUBLISH is answered from the id
# the broker holds [MQTT-4.3.3-2]), so nothing leaves before they are
# durable. Once there is room, the log is rewritten with them.
import errno

from test_broker_store import Raw, _broker, _publishes
from umqtt3.broker_log import LogFiles, AppendFiles, replay
from umqtt3.codec import encode_subscribe, encode_publish, PUBACK, PUBREC


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


def refused(commit):
    try:
        commit()
    except OSError:
        return True
    return False


def test_every_commit_fails_until_the_refused_changes_are_on_disk(tmp_path):
    d = str(tmp_path)
    disk = Disk()
    log = LogFiles(d, disk)
    log.write(d + "/a", b"one")
    log.commit()
    disk.full = True
    log.write(d + "/b", b"two")
    assert refused(log.commit)
    assert refused(log.commit)  # nothing new, but "two" is not durable yet
    disk.full = False
    log.commit()  # room again: the log is rewritten, with what was refused
    with open(d + "/log", "rb") as f:
        data = f.read()
    want = {d + "/a": b"one", d + "/b": b"two"}
    assert replay(data) == (want, len(data))
    assert LogFiles(d, AppendFiles()).contents() == want


def resend(b):
    # the client reconnects and sends its QoS 2 PUBLISH again; what came back
    # (the broker may close the connection before or after the CONNACK)
    try:
        p = Raw(b, b"p", clean=False)
        p.packets()
        p.publish(b"t", b"precious", 2, 7, dup=True)
        return p.packets()
    except OSError:
        return []


def test_a_qos2_resend_of_a_refused_publish_gets_no_pubrec_until_it_is_durable(tmp_path):
    d = str(tmp_path)
    disk = Disk()
    b = _broker(d, files=disk)
    s = Raw(b, b"s", clean=False)
    s.send(encode_subscribe, 1, [(b"t", 2)])
    s.packets()
    s.lost()  # an offline persistent subscriber: the broker queues for it
    p = Raw(b, b"p", clean=False)
    p.packets()
    disk.full = True
    p.publish(b"t", b"precious", 2, 7)
    assert (PUBREC, 7, None) not in p.packets()
    assert b.store_errors >= 1
    assert (PUBREC, 7, None) not in resend(b)  # still not durable: nothing answers
    disk.full = False
    assert (PUBREC, 7, None) in resend(b)
    b.close()
    b2 = _broker(d)  # what the disk holds: the subscriber's copy is there
    s2 = Raw(b2, b"s", clean=False)
    assert [pl for _, pl in _publishes(s2.packets())] == [b"precious"]
    b2.close()


def test_room_again_and_the_refused_retained_message_is_kept(tmp_path):
    disk = Disk()
    b = _broker(str(tmp_path), files=disk)
    p = Raw(b, b"p", clean=True)
    p.send(encode_publish, b"keep", b"one", 1, 1, True)
    assert (PUBACK, 1, None) in p.packets()
    disk.full = True
    p.send(encode_publish, b"keep", b"two", 1, 2, True)  # needs the disk: refused
    assert (PUBACK, 2, None) not in p.packets()
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
