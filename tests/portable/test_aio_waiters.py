# The asyncio client with two tasks waiting at once: run() serving the
# connection while another task awaits publish(). asyncio takes one reader
# per socket: CPython's add_reader keeps one callback per file (a second
# waiter's end removed run()'s reader), MicroPython's IO queue asserts that
# a stream has one reader. So one task at a time waits on the socket, the
# others until it wakes. The socket wait here is a stand-in for
# compat.aio.wait_sock that asserts that rule (the WebAssembly MicroPython's
# asyncio has no IO queue); with a real socket and mosquitto under CPython:
# tests/test_aio_two_tasks.py.
import umqtt3.aio as aio
from test_client_mem import Peer
from umqtt3.aio import AsyncClient
from umqtt3.compat import asleep_ms, ticks_ms, ticks_diff


def _one_reader(waiting):
    async def wait_sock(sock, write, ev, timeout_ms):
        # as MicroPython's IOQueue: one task per stream and direction
        assert write or not waiting, "a second task waits to read the socket"
        if not write:
            waiting.append(1)
        try:
            start = ticks_ms()
            while ticks_diff(ticks_ms(), start) < timeout_ms and not ev.is_set():
                if write or sock.readable():
                    break
                await asleep_ms(1)
        finally:
            if not write:
                waiting.pop()
            ev.set()
    return wait_sock


async def test_run_and_an_awaited_publish_share_the_socket():
    # in a task of its own, as under asyncio.run() (the WebAssembly port
    # awaits a test from JavaScript, which a timed-out wait cannot cancel)
    import asyncio
    await asyncio.create_task(_two_waiters())


async def _two_waiters():
    import asyncio
    peer = Peer()
    c = AsyncClient("dev1", "peer", timeout_ms=2000, connect_link=lambda: peer.client_end)
    got = []
    c.set_callback(lambda t, m: got.append(m))
    stop = []

    async def broker():  # answers when its task runs, not within the client's read
        while not stop:
            while peer.step():
                pass
            await asleep_ms(1)
    real = aio.wait_sock
    aio.wait_sock = _one_reader([])
    b = asyncio.create_task(broker())
    try:
        await c.connect()
        c.sock = peer.client_end  # wait on the pipe as on a socket
        server = asyncio.create_task(c.run())
        await asleep_ms(5)  # run() waits on the socket
        for i in range(5):
            await c.publish(b"dev/x", b"m", qos=1)  # waits too, for the PUBACK
        assert c.inflight() == 0
        peer.publish(b"cmd/a", b"hello", 0)
        for _ in range(100):
            if got:
                break
            await asleep_ms(2)
        assert got == [b"hello"]  # run() still reads
        assert not server.done()
        await c.disconnect()
    finally:
        aio.wait_sock = real
        stop.append(1)
        await b
