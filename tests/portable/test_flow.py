# umqtt3.flow and MemoryStore edges, without any I/O (runs under MicroPython too).
from support import raises
from umqtt3.flow import Flow, Busy
from umqtt3.store import MemoryStore
from umqtt3.transport import Conn
from umqtt3.codec import MQTTError


class _App:
    def deliver(self, pkt, redelivered):
        pass


def _flow(txsize):
    conn = Conn(None, 64, txsize)
    return Flow(MemoryStore(4, 64), _App()), conn


def test_publish_leaves_room_for_acks():
    # a PUBLISH may not take the send buffer's last 8 bytes: acks and PINGREQ
    # must always fit, or a full buffer would end the connection
    f, conn = _flow(40)
    f.publish(conn, b"t", b"x" * 20, qos=1)  # 2 + 3 + 2 + 20 = 27 bytes
    used = conn.tlen
    e = raises(Busy, f.publish, conn, b"t", b"y", 1)  # would leave < 8 bytes
    assert conn.tlen == used and f.store.out_count() == 1  # nothing half-done
    conn.tlen = conn.sent = 0
    e = raises(MQTTError, f.publish, conn, b"t", b"z" * 30, 1)  # can never fit
    assert e.code == 0x95 and not isinstance(e, Busy)
    assert f.store.out_count() == 1


def test_memory_store_sequence_stays_small():
    # after 2**29 messages the live slots are renumbered in order, so the
    # sequence never becomes a big (allocated) integer
    s = MemoryStore(4, 16)
    s.nseq = 0x20000000 - 2
    for pid in (5, 6, 7):
        s.out_add(pid, None, b"abc%d" % pid, 0, 4)
    assert s.nseq < 10, s.nseq
    assert [r[0] for r in s.recover()] == [5, 6, 7]
