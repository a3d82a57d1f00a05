# The Receive Maximum the client announces in CONNECT, against a scripted
# server (v5_peer, no sockets) that honours it [MQTT-3.3.4-9, the server's
# rule]: never more than the store holds inbound QoS 2 ids for, so a server
# that sends that many QoS 2 messages and withholds every PUBREL gets a
# PUBREC for each, the link kept. Runs under pytest and under MicroPython.
from support import tempdir, rmtree
from v5_peer import Server
from umqtt3.client import MQTTClient
from umqtt3.codec import encode_publish
from umqtt3.memstore import MemoryStore
from umqtt3.store import FileStore
from umqtt3 import props


def _filled(**kw):
    # connect, read the Receive Maximum, send that many QoS 2 messages
    # without releasing one: (the Receive Maximum, PUBRECs, delivered)
    s = Server()
    s.release = False
    c = MQTTClient("rx", "peer", level=5, connect_link=s.link, timeout_ms=2000, **kw)
    got = []
    c.set_callback(lambda t, m: got.append(m))
    c.connect()
    pr = s.connects[0]
    rm = props.get(pr, 0, len(pr), 0x21)
    buf = bytearray(32)
    for pid in range(1, rm + 1):
        n = encode_publish(buf, 0, b"q", b"%d" % pid, 2, pid, False, False, 5, None)
        s.send(buf[:n])
        c.poll(0)
    for _ in range(20):
        c.poll(0)
    assert c.is_connected() and s.links == 1 and c.err is None, c.err
    return rm, s.pubrecs, len(got)


def test_the_receive_maximum_is_no_more_than_the_store_holds():
    # window 64 with the default store's 32 inbound ids: 32, not 64 (a
    # server honouring 64 would fill the table at the 33rd); the window
    # when it is smaller; a MemoryStore's or store=False's table
    for kw, want in (({"window": 64}, 32), ({}, 8), ({"window": 64, "store": False}, 32),
                     ({"store": MemoryStore(8, 64, 3)}, 3)):
        rm, recs, n = _filled(**kw)
        assert rm == want, (kw, rm)
        assert recs == list(range(1, want + 1)) and n == want, (kw, recs, n)


def test_a_filestore_keeps_room_for_the_window_outbound():
    # FileStore(max_messages=) shares its records between both directions:
    # room for the window's outbound messages, the rest inbound; at least
    # 1 (a Receive Maximum of 0 is a Protocol Error)
    for window, most, want in ((8, 32, 8), (16, 20, 4), (8, 8, 1)):
        d = tempdir("rmfs")
        try:
            rm, recs, n = _filled(window=window, store=FileStore(d, max_messages=most))
            assert rm == want and recs == list(range(1, want + 1)) and n == want, \
                (window, most, rm, recs)
        finally:
            rmtree(d)
