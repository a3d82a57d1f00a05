# umqtt3.compat.aio -- what the asyncio driver (umqtt3.aio) needs from the
# platform: waiting for a socket, connecting without blocking the event loop,
# the running task. Kept apart from compat so that a blocking client never
# loads it; CPython's half is in compat/cpython.py with the rest.
from . import MICROPYTHON

if MICROPYTHON:
    from . import socket, errno, nodelay, tls_context

    async def _ready(sock, write):
        # MicroPython's asyncio waits for a socket through its IO queue, as
        # its own Stream does
        from asyncio import core  # type: ignore[attr-defined]
        q = core._io_queue
        yield q.queue_write(sock) if write else q.queue_read(sock)

    async def wait_io(sock, write, timeout_ms):
        # True once sock is readable (writable), False when timeout_ms has
        # passed first; other tasks run meanwhile
        import asyncio
        try:
            await asyncio.wait_for_ms(_ready(sock, write), timeout_ms)
        except asyncio.TimeoutError:
            return False
        return True

    async def dial_async(host, port, ctx, params, timeout_ms):
        # TCP connect and TLS handshake without blocking the event loop (the
        # name lookup still blocks: MicroPython has no asynchronous resolver)
        ai = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)[0]
        s = socket.socket(ai[0], socket.SOCK_STREAM, ai[2])
        s.setblocking(False)
        try:
            try:
                s.connect(ai[-1])
            except OSError as e:
                if e.errno != errno.EINPROGRESS:
                    raise
            if not await wait_io(s, True, timeout_ms):
                raise OSError(110, "connect timed out")
            nodelay(s)
            if ctx:
                # the handshake goes on as the client reads and writes
                s = tls_context(ctx).wrap_socket(s, server_hostname=host,
                                                 do_handshake_on_connect=False, **params)
        except BaseException:
            s.close()
            raise
        return s

    def current_task():
        # the running asyncio task (umqtt3.aio stops its run() task with it)
        import asyncio
        return asyncio.current_task()

else:
    from .cpython import wait_io, dial_async, current_task  # noqa: F401
