"""The asyncio client's tasks against mosquitto over a real socket: run()
serving the connection while another task awaits QoS 1 publishes. asyncio
keeps one reader per socket (CPython's add_reader, one callback per file
number): if an awaited publish() waited on the socket too, the end of its
wait removed run()'s reader, and an incoming message then waited for run()'s
next deadline (60 s without keepalive). A proxy that delays the broker's
packets by 5 ms (a LAN) makes the publishes' waits end by readiness."""
import asyncio
import time

import pytest

from aio_pipe import pipe
from umqtt3.aio import AsyncClient
from umqtt3.client import MQTTClient

pytestmark = pytest.mark.interop


def test_run_reads_while_another_task_awaits_publishes(broker):
    got = []

    async def main():
        tasks = []

        async def proxy(cr, cw):
            br, bw = await asyncio.open_connection("127.0.0.1", broker.port)
            tasks.append(asyncio.ensure_future(pipe(cr, bw)))
            tasks.append(asyncio.ensure_future(pipe(br, cw, 0.005)))
        srv = await asyncio.start_server(proxy, "127.0.0.1", 0)
        c = AsyncClient("aio-two", "127.0.0.1", port=srv.sockets[0].getsockname()[1])
        c.set_callback(lambda t, m: got.append((time.monotonic(), m)))
        await c.connect()
        await c.subscribe(b"two/in", 1)
        server = asyncio.ensure_future(c.run())
        await asyncio.sleep(0.1)
        for _ in range(50):
            await c.publish(b"two/out", b"x", qos=1)  # waits while run() waits
        other = MQTTClient("aio-two-pub", "127.0.0.1", broker.port)
        other.connect()
        t0 = time.monotonic()
        other.publish(b"two/in", b"hello", qos=1)
        other.disconnect()
        while not got and time.monotonic() - t0 < 3:
            await asyncio.sleep(0.01)
        assert not server.done()
        await c.disconnect()
        srv.close()
        for t in tasks:
            t.cancel()
        return t0

    t0 = asyncio.run(asyncio.wait_for(main(), 30))
    assert [m for _, m in got] == [b"hello"]
    assert got[0][0] - t0 < 1  # handed over at once, not at run()'s next deadline
