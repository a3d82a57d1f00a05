"""The asyncio client's dials against mosquitto: disconnect() while another
task is redialling stops that dial (its socket closed before CONNECT, the
awaited publish() raising OSError 107), as docs/client.md promises
("stops reconnecting until the next connect()"); and after a first
connect() that failed, run() with reconnect=True dials once the broker is
up, as the blocking client's poll() does."""
import asyncio

import pytest

from tests.certs import self_signed
from aio_pipe import pipe
from umqtt3.aio import AsyncClient

pytestmark = pytest.mark.interop


class _Gate:
    """A TCP proxy on 127.0.0.1 to the broker that joins a new connection
    to it only while `open` is set: meanwhile a TLS dial through it waits
    for the broker's ServerHello. cut() drops the connections joined."""

    def __init__(self, upstream):
        self.upstream = upstream
        self.open = asyncio.Event()
        self.waiting = 0  # connections held at the gate
        self.pipes = 0  # pipes still running (two per connection joined)
        self.writers = []
        self.tasks = []

    async def start(self):
        self.srv = await asyncio.start_server(self._join, "127.0.0.1", 0)
        self.port = self.srv.sockets[0].getsockname()[1]

    async def _join(self, cr, cw):
        self.waiting += 1
        await self.open.wait()
        self.waiting -= 1
        br, bw = await asyncio.open_connection("127.0.0.1", self.upstream)
        self.writers += [cw, bw]
        self.pipes += 2
        self.tasks += [asyncio.ensure_future(pipe(cr, bw, ended=self._ended)),
                       asyncio.ensure_future(pipe(br, cw, ended=self._ended))]

    def _ended(self):
        self.pipes -= 1

    def cut(self):
        for w in self.writers:
            w.close()
        self.writers = []

    def close(self):
        self.srv.close()
        for t in self.tasks:
            t.cancel()


async def _until(cond, seconds=5):
    for _ in range(int(seconds * 100)):
        if cond():
            return True
        await asyncio.sleep(0.01)
    return cond()


def test_disconnect_stops_a_redial_under_way_in_another_task(broker_factory, tmp_path):
    import ssl
    cert, key = self_signed(tmp_path)
    b = broker_factory(tls=(cert, key))

    async def main():
        gate = _Gate(b.port)
        await gate.start()
        gate.open.set()
        c = AsyncClient("aio-gate", "127.0.0.1", gate.port,
                        ssl=ssl.create_default_context(cafile=cert), reconnect=True,
                        backoff_ms=(50, 50), timeout_ms=8000)
        await c.connect()
        gate.open.clear()
        gate.cut()  # the link drops

        async def publisher():
            try:
                await c.publish(b"aio/gate", b"m", qos=1)
                return "acknowledged"
            except OSError as e:
                return e
        p = asyncio.ensure_future(publisher())
        assert await _until(lambda: gate.waiting == 1)  # its task redials: the handshake waits
        await c.disconnect()
        gate.open.set()  # the handshake completes after disconnect()
        r = await asyncio.wait_for(p, 10)
        closed = await _until(lambda: gate.pipes == 0)  # the client closed the new link
        up = c.is_connected()
        gate.close()
        return r, closed, up

    r, closed, up = asyncio.run(asyncio.wait_for(main(), 30))
    assert isinstance(r, OSError) and r.errno == 107, r  # not sent: disconnect() came first
    assert not up and closed
    assert b.log_text().count("as aio-gate (") == 1  # no CONNECT after disconnect()


def test_run_connects_after_a_failed_first_connect(broker_factory):
    b = broker_factory()
    b.stop(5)  # not up at the first connect()

    async def main():
        c = AsyncClient("aio-late", "127.0.0.1", b.port, reconnect=True,
                        backoff_ms=(50, 100), timeout_ms=4000)
        try:
            await c.connect()
            assert False, "connected to no broker"
        except OSError as e:
            assert e.errno == 111  # refused
        assert not c.is_connected()
        b.start()
        run = asyncio.ensure_future(c.run())
        await _until(lambda: c.is_connected() or run.done())
        assert not run.done(), run  # run() did not give up with OSError 107
        assert c.is_connected()
        assert await c.publish(b"aio/late", b"up", qos=1) == 1
        await c.disconnect()
        await asyncio.wait_for(run, 2)

    asyncio.run(asyncio.wait_for(main(), 30))
