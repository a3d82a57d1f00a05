# The failover's move of QoS 2 state between the upstream client's store and
# the store kept for an address (bridge_failover._move, docs/bridge.md
# "Several upstream addresses"), CPython and the WebAssembly MicroPython: the
# PUBRELs owed (state "r") and the released inbound ids move, each copied
# before it is removed; a message not yet past PUBREC stays; a copy the other
# side holds already (a move a power loss cut short) is only removed; an id
# the other side holds for another message stays where it is [MQTT-4.3.3-1].
from umqtt3.bridge_failover import _move, _held
from umqtt3.bridge_queue import RamFiles
from umqtt3.memstore import MemoryStore
from umqtt3.store import FileStore

M1 = b"\x34\x07\x00\x01s\x00\x01m1"  # QoS 2 PUBLISH s, id 1
M2 = b"\x34\x07\x00\x01s\x00\x02m2"  # id 2
OTHER = b"\x34\x07\x00\x01s\x00\x01xx"  # another message under id 1


def _stores():
    fs = RamFiles()
    return [(MemoryStore(4, 64, 4), MemoryStore(4, 64, 4)),
            (FileStore("/c", fs, 8, allow_fat=True), FileStore("/k", fs, 8, allow_fat=True))]


def _out(st, pid, body, rel):
    st.out_add(pid, 7, body, 0, len(body))
    if rel:
        st.out_rel(pid)


def test_past_pubrec_and_released_inbound_move_the_rest_stays():
    for st, k in _stores():
        _out(st, 1, M1, True)
        _out(st, 2, M2, False)  # no PUBREC yet: goes to whichever broker is next
        st.in_add(5, b"", 0, 0)
        st.in_done(5)
        assert _move(st, k) == 2
        assert not st.out_has(1) and st.out_has(2) and not st.in_has(5)
        assert [r[:2] for r in k.recover()] == [(1, "r")] and k.in_has(5)
        assert _move(k, st) == 2  # back
        assert st.out_has(1) and st.in_has(5) and _held(k) == 0
        assert [r[:2] for r in st.recover()] == [(2, "p"), (1, "r")]


def test_an_id_taken_for_another_message_stays_owed():
    for st, k in _stores():
        _out(k, 1, M1, True)  # owed to the other broker
        _out(st, 1, OTHER, False)  # the client took id 1 again meanwhile
        assert _move(k, st) == 0
        assert k.out_has(1) and _held(k) == 1
        assert [r[3] for r in st.recover()] == [OTHER]


def test_a_move_cut_short_ends_once():
    for st, k in _stores():
        _out(st, 1, M1, True)
        _out(k, 1, M1, True)  # copied, not yet removed: the power loss came
        k.in_add(5, b"", 0, 0)
        k.in_done(5)
        st.in_add(5, b"", 0, 0)
        st.in_done(5)
        assert _move(k, st) == 2
        assert _held(k) == 0 and st.out_count() == 1 and st.in_has(5)


def test_the_kept_state_is_on_the_files():
    fs = RamFiles()
    st = FileStore("/c", fs, 8, allow_fat=True)
    k = FileStore("/k", fs, 8, allow_fat=True)
    _out(st, 3, M1[:5] + b"\x00\x03m1", True)
    st.in_add(9, b"", 0, 0)
    st.in_done(9)
    assert _move(st, k) == 2
    k = FileStore("/k", fs, 8, allow_fat=True)  # as after a restart
    st = FileStore("/c", fs, 8, allow_fat=True)
    assert [r[:2] for r in k.recover()] == [(3, "r")] and k.in_has(9)
    assert st.out_count() == 0 and not st.in_has(9)
