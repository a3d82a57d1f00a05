# One contract for every store umqtt3.flow works on (store.py's interface),
# run against each implementation: MemoryStore and FileStore (the client's),
# a broker session (broker_session.Session, its RAM ring) and one bound to a
# FileStore as a persistent session is, and the pipeline's LogStore (inbound
# ids held in the durable log). What Flow relies on:
#   - out_add stores a PUBLISH before its first send; out_has / out_count
#     see it; out_rel records PUBREC; out_del ends it;
#   - an inbound QoS 2 id, once held, is in_has until in_del, in_done
#     included; in_del of an id not held is harmless;
#   - a durable store gives it all back after a restart, in send order, in
#     the state vocabulary of qos_state.
import pytest

from umqtt3 import qos_state as Q
from umqtt3.broker_core import Stats
from umqtt3.broker_limits import Limits
from umqtt3.broker_session import Session
from umqtt3.codec import encode_publish
from umqtt3.memstore import MemoryStore
from umqtt3.store import FileStore


def publish(pid, payload=b"x"):
    buf = bytearray(64)
    n = encode_publish(buf, 0, b"t/%d" % pid, payload, 1, pid)
    return buf, n


class Impl:
    window = 3  # outbound messages it holds at once (beyond: StoreFull)
    durable = False
    records = True  # has recover()

    def hold(self, pid):
        buf, n = publish(pid)
        self.store.in_add(pid, buf, 0, n)


class Memory(Impl):
    def __init__(self, tmp):
        self.store = MemoryStore(8, 64, 8)


class File(Impl):
    durable = True

    def __init__(self, tmp):
        self.dir = str(tmp / "fs")
        self.store = FileStore(self.dir, max_messages=16)

    def restart(self):
        return FileStore(self.dir, max_messages=16)


class BrokerSession(Impl):
    records = False  # the RAM ring: its durability is the FileStore below it

    def __init__(self, tmp):
        self.store = Session(b"c", True, Limits(max_inflight=8), Stats())


class PersistentSession(Impl):
    """A session bound to its FileStore, as broker_store.Disk binds one."""
    records = False
    durable = True

    def __init__(self, tmp):
        self.dir = str(tmp / "sess")
        self.tags = 0
        self.store = self._session()

    def _session(self):
        s = Session(b"c", False, Limits(max_inflight=8), Stats())
        s.bind_store(FileStore(self.dir, max_messages=16, keep_last=False), self._tag, 0)
        return s

    def _tag(self):
        self.tags += 1
        return self.tags

    def restart(self):
        return FileStore(self.dir, max_messages=16, keep_last=False)


class Pipeline(Impl):
    durable = True
    window = 1  # the ingest publishes nothing at QoS 1/2

    def __init__(self, tmp):
        from umqtt3_pipeline.ingest import LogStore
        from umqtt3_pipeline.log import Log
        self.Log, self.LogStore = Log, LogStore
        self.dir = str(tmp / "log")
        self.log = Log(self.dir)
        self.store = LogStore(self.log)

    def hold(self, pid):
        # the ingest's application writes the message record, which holds
        # the id; Flow called in_add first
        buf, n = publish(pid)
        self.store.in_add(pid, buf, 0, n)
        self.log.append_msg(b"t", b"x", 2, False, False, pid, 0)
        self.log.sync()

    def restart(self):
        self.log.close()
        self.log = self.Log(self.dir)
        return self.LogStore(self.log)


IMPLS = [Memory, File, BrokerSession, PersistentSession, Pipeline]


@pytest.fixture(params=IMPLS, ids=[i.__name__ for i in IMPLS])
def impl(request, tmp_path):
    if request.param is Pipeline:
        pytest.importorskip("umqtt3_pipeline.ingest")
    return request.param(tmp_path)


def test_outbound_lifecycle(impl):
    st = impl.store
    pids = list(range(1, impl.window + 1))
    for pid in pids:
        buf, n = publish(pid)
        st.out_add(pid, pid, buf, 0, n)
    last = pids[-1]
    assert st.out_has(last) and st.out_count() == len(pids)
    assert st.out_rel(last) in (None, False, True)  # True: the store sends PUBREL itself
    assert st.out_has(last)
    for pid in pids:
        st.out_del(pid)
        assert not st.out_has(pid)
    assert st.out_count() == 0


def test_inbound_held_until_released(impl):
    st = impl.store
    assert not st.in_has(7)
    impl.hold(7)
    assert st.in_has(7)
    st.in_done(7)
    assert st.in_has(7)  # routed, PUBREC may have gone: a resend is answered only
    st.in_del(7)
    assert not st.in_has(7)
    st.in_del(8)  # an id never held: harmless (PUBREL is answered anyway)
    assert not st.in_has(8)


def test_recover_in_send_order_with_states(impl):
    if not impl.records:
        pytest.skip("no record of its own (a broker session's ring)")
    st = impl.store
    if isinstance(impl, Pipeline):
        pytest.skip("the ingest publishes nothing at QoS 1/2: outbound is MemoryStore's")
    for pid in (5, 3, 9):
        buf, n = publish(pid)
        st.out_add(pid, pid, buf, 0, n)
    st.out_rel(3)
    got = [(pid, state) for pid, state, key, body in st.recover() if state != Q.HELD]
    assert got == [(5, Q.STORED_PUB), (3, Q.STORED_REL), (9, Q.STORED_PUB)]


def test_durable_across_restart(impl):
    if not impl.durable:
        pytest.skip("RAM only")
    st = impl.store
    impl.hold(11)
    st.in_done(11)
    impl.hold(12)
    st.in_done(12)
    st.in_del(12)
    if not isinstance(impl, Pipeline):
        for pid in (1, 2):
            buf, n = publish(pid)
            st.out_add(pid, pid, buf, 0, n)
        st.out_rel(2)
    again = impl.restart()
    assert again.in_has(11) and not again.in_has(12)
    if not isinstance(impl, Pipeline):
        recs = [(pid, state) for pid, state, key, body in again.recover()]
        assert recs == [(1, Q.STORED_PUB), (2, Q.STORED_REL)]
