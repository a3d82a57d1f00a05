# A burst of QoS 2 messages larger than the client's table of inbound ids,
# from Debian's mosquitto 2.0.11 at MQTT 3.1.1 (which has no Receive Maximum
# to tell the broker the table's size: it sends about 33 at a time).
#
# An id stays in the table from PUBREC until PUBREL [MQTT-4.3.3-2]. When a
# QoS 2 message finds the table full, the client leaves it unanswered and
# undelivered, and every QoS 1/2 message behind it too (their order
# [MQTT-4.6.0-2]); it goes on answering PUBRELs, and once they have freed the
# whole table it drops the link and dials again at once, and the broker sends
# the unanswered messages again on the new connection [MQTT-4.4.0-1]. Before,
# it dropped the link at the full table, before the PUBRELs came: each
# connection delivered a few messages and found the table full again (72 of
# 400 in 10 s, 21 connections).
import time

import pytest

import mosq
from umqtt3.aio import AsyncClient
from umqtt3.client import MQTTClient
from umqtt3.store import FileStore

pytestmark = pytest.mark.skipif(not mosq.MOSQUITTO, reason="no mosquitto")

HOST = "127.0.0.1"
N = 400
BOUND_S = 60  # a failure bound, not a speed claim


def _connections(broker, client_id):
    # mosquitto logs each connection: "New client connected from ... as ID"
    with open(broker.log, errors="replace") as f:
        return sum(1 for line in f if " as %s " % client_id in line and "New client" in line)


def _publish(port, n, topic=b"q/x"):
    tx = MQTTClient("burst-tx", HOST, port)
    tx.connect()
    try:
        for i in range(n):
            tx.publish(topic, b"%d" % i, qos=2)
    finally:
        tx.disconnect()


def _receive(c, got):
    end = time.monotonic() + BOUND_S
    while len(got) < N and time.monotonic() < end:
        c.poll(50)


def _check(got, broker, client_id):
    assert got == [b"%d" % i for i in range(N)]  # all, once each, in order
    # about 32 a connection (the default table); before, three or four
    assert _connections(broker, client_id) <= 2 * N // 32


@pytest.mark.parametrize("store", ["memory", "file"])
def test_an_online_burst_larger_than_the_inbound_table(broker, tmp_path, store):
    got = []
    st = FileStore(str(tmp_path / "rx"), max_messages=32) if store == "file" else None
    c = MQTTClient("burst-rx", HOST, broker.port, store=st, reconnect=True)
    c.set_callback(lambda t, m: got.append(m))
    try:
        c.connect(clean_session=False)
        c.subscribe(b"q/#", 2)
        _publish(broker.port, N)
        _receive(c, got)
        _check(got, broker, "burst-rx")
        # the table ends empty: a later message is delivered on this link
        n = _connections(broker, "burst-rx")
        _publish(broker.port, 1, b"q/last")
        end = time.monotonic() + 10
        while len(got) == N and time.monotonic() < end:
            c.poll(50)
        assert got[N:] == [b"0"] and _connections(broker, "burst-rx") == n
    finally:
        c.disconnect()


def test_a_queued_burst_for_a_persistent_session(broker):
    got = []
    c = MQTTClient("burst-q", HOST, broker.port, reconnect=True)
    c.set_callback(lambda t, m: got.append(m))
    try:
        c.connect(clean_session=False)
        c.subscribe(b"q/#", 2)
        c.disconnect()
        _publish(broker.port, N)  # queued by mosquitto for the session
        c.connect(clean_session=False)
        _receive(c, got)
        _check(got, broker, "burst-q")
    finally:
        c.disconnect()


def test_the_asyncio_client_too(broker):
    import asyncio

    got = []

    async def main():
        c = AsyncClient("burst-aio", HOST, broker.port, reconnect=True)
        c.set_callback(lambda t, m: got.append(m))
        await c.connect(clean_session=False)
        await c.subscribe(b"q/#", 2)
        await c.disconnect()
        _publish(broker.port, N)  # queued by mosquitto for the session
        await c.connect(clean_session=False)
        runner = asyncio.ensure_future(c.run())
        try:
            end = time.monotonic() + BOUND_S
            while len(got) < N and time.monotonic() < end:
                await asyncio.sleep(0.05)
        finally:
            await c.disconnect()
            runner.cancel()

    asyncio.run(main())
    _check(got, broker, "burst-aio")
