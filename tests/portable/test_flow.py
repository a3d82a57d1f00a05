# umqtt3.flow and MemoryStore edges, without any I/O (runs under MicroPython too).
from support import raises
from umqtt3.flow import Flow, Busy
from umqtt3.memstore import MemoryStore
from umqtt3.conn import Conn
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


class _Deferring(MemoryStore):
    """A store that keeps its own send order, as a broker session does:
    out_rel answers True while it holds something older to write."""

    def __init__(self):
        super().__init__(4, 64)
        self.defer = False
        self.rels = []

    def out_rel(self, pid):
        super().out_rel(pid)
        self.rels.append(pid)
        return self.defer


class _Ack:
    def __init__(self, t, pid):
        self.type = t
        self.pid = pid
        self.rc = 0


def test_pubrec_recorded_then_pubrel_unless_the_store_defers():
    # PUBREC is recorded before PUBREL [MQTT-4.3.3-1]; a store that keeps
    # its send order may take the PUBREL over, and Flow then writes none
    from umqtt3.codec import PUBREC, PUBCOMP
    st = _Deferring()
    f = Flow(st, _App())
    conn = Conn(None, 64, 64)
    p1 = f.publish(conn, b"t", b"a", qos=2)
    p2 = f.publish(conn, b"t", b"b", qos=2)
    conn.tlen = 0
    f.on_ack(conn, _Ack(PUBREC, p1))
    assert st.rels == [p1] and conn.tlen == 4 and conn.tx[0] == 0x62  # PUBREL
    st.defer = True
    f.on_ack(conn, _Ack(PUBREC, p2))
    assert st.rels == [p1, p2] and conn.tlen == 4  # recorded, nothing written
    assert dict((r[0], r[1]) for r in st.recover())[p2] == "r"
    f.on_ack(conn, _Ack(PUBCOMP, p1))
    assert not st.out_has(p1) and st.out_has(p2)


def test_send_stored_stores_before_it_queues():
    # rule 1 of docs/store.md in one place, for the client and the broker:
    # a store that refuses leaves nothing queued
    from umqtt3.flow import send_stored
    from umqtt3.store import StoreFull
    st = MemoryStore(1, 64)
    conn = Conn(None, 64, 64)
    conn.tx[0:4] = b"\x32\x02\x00\x01"
    send_stored(st, conn, 0, 4, 1)
    assert conn.tlen == 4 and st.out_has(1)
    raises(StoreFull, send_stored, st, conn, 4, 8, 2)
    assert conn.tlen == 4 and not st.out_has(2)
