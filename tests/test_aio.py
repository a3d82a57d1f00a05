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
        assert pub.inflight() == 0  # QoS 1/2 awaited their acknowledgements
        for _ in range(400):
            if len(got) == 3:
                break
            await asyncio.sleep(0.01)
        await pub.disconnect()
        await sub.disconnect()
        await asyncio.wait_for(server, 2)  # run() ends after disconnect()

    asyncio.run(asyncio.wait_for(main(), 20))
    assert sorted(got) == [(b"aio/0", b"m0"), (b"aio/1", b"m1"), (b"aio/2", b"m2")]


class _Silent:
    """A TCP server on 127.0.0.1 that accepts connections and never answers:
    no CONNACK, no TLS ServerHello."""

    def __init__(self):
        import socket
        import threading
        self.srv = socket.socket()
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(4)
        self.port = self.srv.getsockname()[1]
        self.conns = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        try:
            while True:
                self.conns.append(self.srv.accept()[0])
        except OSError:
            pass  # closed

    def close(self):
        self.srv.close()
        for s in self.conns:
            s.close()


async def _ticks_during(coro):
    """Run coro next to a task that counts 10 ms sleeps; returns (ticks,
    exception raised by coro or None)."""
    ticks = [0]
    stop = []

    async def ticker():
        while not stop:
            await asyncio.sleep(0.01)
            ticks[0] += 1

    t = asyncio.ensure_future(ticker())
    err = None
    try:
        await coro
    except OSError as e:
        err = e
    stop.append(1)
    await t
    return ticks[0], err


@pytest.mark.parametrize("tls", [False, True], ids=["no-connack", "tls-handshake"])
def test_connect_to_a_silent_server_leaves_the_loop_running(tls):
    # the blocking client would hold the event loop for the whole timeout:
    # the ticker would not run once before connect() gave up
    srv = _Silent()
    try:
        c = AsyncClient("aio-slow", "127.0.0.1", port=srv.port, ssl=tls or None,
                        timeout_ms=600)
        ticks, err = asyncio.run(_ticks_during(c.connect()))
    finally:
        srv.close()
    assert isinstance(err, OSError), err
    assert not c.is_connected()
    assert ticks >= 10, ticks  # about 60 expected; 0 if the loop was blocked


def test_run_waits_on_the_socket_instead_of_polling(broker):
    # idle, with no keepalive due, run() sleeps until the socket has data
    async def main():
        c = AsyncClient("aio-idle", "127.0.0.1", port=broker.port)
        await c.connect()
        polls = [0]
        real = c._io  # one round of reading, once per wake-up

        def counting():
            polls[0] += 1
            return real()

        c._io = counting
        server = asyncio.ensure_future(c.run())
        await asyncio.sleep(0.5)
        idle = polls[0]
        await c.disconnect()
        await asyncio.wait_for(server, 2)
        return idle

    idle = asyncio.run(asyncio.wait_for(main(), 10))
    assert idle <= 3, idle  # a 5 ms polling loop made about 100


def test_reconnect_through_a_broker_restart(broker_factory):
    # run() notices the dead link, backs off while connections are refused
    # (dialling without blocking the loop), reconnects and resends: a QoS 1
    # message published while the broker was away arrives after the restart
    b = broker_factory(persistence=True)
    got = []

    async def main():
        sub = AsyncClient("aio-rsub", "127.0.0.1", port=b.port, reconnect=True,
                          backoff_ms=(50, 200))
        sub.set_callback(lambda t, m: got.append(m))
        await sub.connect(clean_session=False)
        await sub.subscribe(b"aio/r", 1)
        pub = AsyncClient("aio-rpub", "127.0.0.1", port=b.port, reconnect=True,
                          backoff_ms=(50, 200))
        await pub.connect(clean_session=False)
        tasks = [asyncio.ensure_future(sub.run()), asyncio.ensure_future(pub.run())]
        b.stop(5)
        for _ in range(100):  # both notice the broker is gone
            if not sub.is_connected() and not pub.is_connected():
                break
            await asyncio.sleep(0.02)
        assert not sub.is_connected() and not pub.is_connected()
        pub.queue(b"aio/r", b"while away", qos=1)  # stored, sent after the reconnect
        await asyncio.sleep(0.3)  # a few refused attempts
        b.start()
        for _ in range(500):
            if got and pub.inflight() == 0:
                break
            await asyncio.sleep(0.02)
        await pub.disconnect()
        await sub.disconnect()
        await asyncio.wait_for(asyncio.gather(*tasks), 2)

    asyncio.run(asyncio.wait_for(main(), 30))
    assert got == [b"while away"]
