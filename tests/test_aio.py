"""The asyncio client (umqtt3.aio) against mosquitto: the same state machine
as MQTTClient, driven from an event loop. QoS 0/1/2 both ways, and run()
serving the connection while other tasks work."""
import asyncio

import pytest

from umqtt3.aio import AsyncClient

pytestmark = pytest.mark.interop


def test_async_client_qos_both_ways(broker):
    got = []

    async def main():
        sub = AsyncClient("aio-sub", "127.0.0.1", port=broker.port, keepalive=10)
        sub.set_callback(lambda t, m: got.append((t, m)))
        assert await sub.connect() is False
        assert await sub.subscribe(b"aio/#", 2) == 2
        server = asyncio.ensure_future(sub.run())  # serves sub while pub works

        pub = AsyncClient("aio-pub", "127.0.0.1", port=broker.port)
        await pub.connect()
        for q in (0, 1, 2):
            pid = await pub.publish(b"aio/%d" % q, b"m%d" % q, qos=q)
            assert (pid == 0) == (q == 0)
        assert pub.c.inflight() == 0  # QoS 1/2 awaited their acknowledgements
        for _ in range(400):
            if len(got) == 3:
                break
            await asyncio.sleep(0.01)
        await pub.disconnect()
        await sub.disconnect()
        await asyncio.wait_for(server, 2)  # run() ends after disconnect()

    asyncio.run(asyncio.wait_for(main(), 20))
    assert sorted(got) == [(b"aio/0", b"m0"), (b"aio/1", b"m1"), (b"aio/2", b"m2")]
