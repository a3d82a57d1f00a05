# Pending connections (accepted, no CONNECT yet) are cheap and never keep a
# client out: what one costs the broker (measured on MicroPython's heap and
# with CPython's tracemalloc), the oldest pending connection closed at the
# pending limit, a CONNECT that trickles in closed at the connect timeout,
# and CONNECTs larger than the small pending buffer still accepted.
#
# Attached links are pending connections here (Broker.pend_links), as
# accepted sockets always are.
#
# Runs under pytest on CPython and under MicroPython with
#     node tests/mp/run.mjs tests/mp/testrunner.py test_broker_pending
# and over sockets in tests/test_broker_abuse.py (the harness bodies).
import gc
import sys

from support import collect
from broker_harness import running as _running, Raw, advance, connect_bytes, over_sockets
from umqtt3.broker import Broker, PENDING_RX
from umqtt3.transport import Pipe, Conn
from umqtt3.codec import encode_connect, PINGREQ, PINGRESP

MICROPYTHON = sys.implementation.name == "micropython"


class running(_running):
    """The harness's running(), its attached links pending connections."""

    def __enter__(self):
        b = _running.__enter__(self)
        b.pend_links = True
        return b


def _heap():
    if MICROPYTHON:
        return gc.mem_alloc()
    import tracemalloc
    return tracemalloc.get_traced_memory()[0]


async def test_ram_per_pending_connection():
    # the broker's part of a connection that has sent nothing: its
    # Connection, a Conn with a PENDING_RX receive buffer and no send buffer
    n = 16
    b = Broker(port=None, max_clients=4, max_pending=n, max_packet=1024, sys_interval=0)
    links = [Pipe.pair(64) for _ in range(n)]
    if not MICROPYTHON:
        import tracemalloc
        tracemalloc.start()
    try:
        await collect()
        m0 = _heap()
        for i in range(n):
            b.attach(links[i][1], pending=True)
        b.poll_once(0)
        await collect()
        per = (_heap() - m0) // n
    finally:
        if not MICROPYTHON:
            tracemalloc.stop()
    print("RAM per pending connection (%s, max_packet=1024): %d bytes"
          % ("MicroPython" if MICROPYTHON else "CPython", per))
    assert len(b.clients) == n and b.connected == 0
    # well under 1 KB (CPython's objects are larger than MicroPython's)
    assert per < (512 if MICROPYTHON else 1024), per
    # a CONNECT brings the connection's own buffers (max_packet each way)
    a = links[0][0]
    c = Conn(a, 256, 256)
    c.tlen = encode_connect(c.tx, 0, "real", 4, True, 0)
    c.flush()
    await collect()
    m1 = _heap() if MICROPYTHON else 0
    for _ in range(3):
        b.poll_once(0)
    assert b.connected == 1
    if MICROPYTHON:
        await collect()
        assert _heap() - m1 >= 2048
    b.close()


def test_oldest_pending_closed_at_the_limit():
    # max_clients + max_pending connections open, none with a CONNECT: the
    # next one closes the oldest
    with running(max_clients=1, max_pending=2) as b:
        with Raw(b) as old, Raw(b) as mid, Raw(b) as young:
            advance(10)
            with Raw(b) as real:
                assert real.connect("real").rc == 0
                assert old.closed()
                assert not mid.closed(0.1) and not young.closed(0.1)
                real.simple(PINGREQ)
                real.expect(PINGRESP)


def test_flood_of_idle_connections_never_keeps_a_client_out():
    # each round: more idle connections than the pending limit, then a
    # client that sends its CONNECT at once
    with running(max_clients=2, max_pending=4, connect_timeout_ms=0) as b:
        idle = []
        try:
            for r in range(12):
                for _ in range(6):
                    idle.append(Raw(b))
                with Raw(b) as c:
                    assert c.connect("legit%d" % r).rc == 0
                advance(10)
        finally:
            for i in idle:
                i.close()
        # the connections kept never exceed the limit
        assert len([c for c in b.clients if c.state != 2]) <= 6


def test_trickled_connect_closed_at_connect_timeout():
    # a CONNECT sent a byte at a time, slower than the connect timeout
    # allows: closed when the timeout runs out, whatever came meanwhile
    data = connect_bytes("slowpoke")
    with running(connect_timeout_ms=1000) as b, Raw(b) as slow:
        for i in range(4):
            slow.send(data[i:i + 1])
            advance(300)
        assert slow.closed()


def test_connect_larger_than_the_pending_buffer():
    # a will and credentials that take the CONNECT past PENDING_RX, sent in
    # pieces: the connection gets its buffers at the header, and is served
    big = b"w" * (PENDING_RX * 3)
    data = connect_bytes("big", will_topic="w/t", will_msg=big, user="u" * 40,
                         password=b"p" * 40)
    assert len(data) > PENDING_RX
    # (a will past the device's max_will_bytes, which the test is not about)
    with running(max_packet=1024, max_will_bytes=1024) as b, Raw(b) as c:
        k = 0
        while k < len(data):
            c.send(data[k:k + 50])
            k += 50
            if not over_sockets():
                advance(10)
        p = c.recv()
        assert p is not None and p.type == 2 and bytes(p.buf)[3] == 0  # CONNACK 0
        c.simple(PINGREQ)
        c.expect(PINGRESP)


def test_pending_header_over_max_packet_closes():
    # the CONNECT's fixed header claims more than max_packet: closed before
    # any buffer is given [MQTT-4.8.0-1]
    with running(max_packet=512) as b, Raw(b) as c:
        c.send(b"\x10\x80\x10")  # 2048 bytes to come
        assert c.closed()
        assert b.connected == 0


def test_first_packet_not_connect_closes():
    # [MQTT-3.1.0-1]: no buffers for it either
    with running() as b, Raw(b) as c:
        c.send(b"\xc0\x00")  # PINGREQ
        assert c.closed()
