# The asyncio client (umqtt3.aio) on an in-memory link, under CPython and the
# WebAssembly MicroPython (whose asyncio is MicroPython's own): connect,
# subscribe, publish at QoS 1 and 2, receive while run() serves the
# connection, and disconnect() ending run().
from test_client_mem import Peer, Link
from umqtt3.aio import AsyncClient
from umqtt3.compat import asleep_ms


async def test_async_client_on_a_pipe():
    import asyncio
    peer = Peer()
    c = AsyncClient("dev1", "peer", interval_ms=1, timeout_ms=2000,
                    connect_link=lambda: Link(peer.client_end, peer))
    got = []
    c.set_callback(lambda t, m: got.append((t, m)))
    assert await c.connect() is False
    assert await c.subscribe(b"cmd/#", 1) == 1
    server = asyncio.create_task(c.run())
    for q in (0, 1, 2):
        pid = await c.publish(b"dev/x", b"m%d" % q, qos=q)
        assert (pid == 0) == (q == 0)
    assert c.inflight() == 0  # QoS 1/2 awaited their acknowledgements
    peer.publish(b"cmd/a", b"hello", 1)
    for _ in range(200):
        if got:
            break
        await asleep_ms(2)
    assert got == [(b"cmd/a", b"hello")]
    await c.disconnect()
    for _ in range(200):
        if server.done():
            break
        await asleep_ms(2)
    assert server.done()  # run() ended with the connection
    assert [p[:3] for p in peer.published] == [(b"dev/x", b"m0", 0), (b"dev/x", b"m1", 1),
                                                (b"dev/x", b"m2", 2)]
