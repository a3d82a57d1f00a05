# umqtt3.compat.aio -- what the asyncio client (umqtt3.aio) and the
# gateway's bridges (umqtt3.bridge, inside the broker's one loop) need to
# wait without blocking: a name lookup started and read later, waiting for a
# socket, an event, the running task; and compat/dial_steps.py's dial in steps,
# re-exported. CPython's asyncio half is in compat/cpython.py with the rest.
from . import MICROPYTHON, socket
from .dial_steps import dial_start, dial_addr, dial_done, tls_start, tls_step  # noqa: F401


def lookup_done(r):
    """The getaddrinfo() entry of a lookup_start() once it is there, None
    while it runs; the lookup's own OSError (its errno and text) when the
    name does not resolve."""
    if r[1] is not None:
        raise r[1]
    return r[0]


def event():
    # an asyncio.Event (umqtt3.aio: the tasks that wait for the one
    # waiting on the socket)
    from asyncio import Event
    return Event()


def lock():
    # an asyncio.Lock (umqtt3.aio: one SUBSCRIBE/UNSUBSCRIBE waiting for
    # its answer at a time)
    from asyncio import Lock
    return Lock()


def report(e):
    # an exception no task raises (the message callback's, in run()): to
    # the event loop's exception handler, which prints it by default
    import asyncio
    asyncio.get_event_loop().call_exception_handler(
        {"message": "message callback", "exception": e, "future": asyncio.current_task()})


if MICROPYTHON:
    def lookup_start(host, port):
        # MicroPython has no asynchronous resolver, and a device no thread
        # to spare for one: the lookup is done here, blocking the caller
        # for as long as it takes (an address literal takes no time)
        r = [None, None]  # type: list
        try:
            r[0] = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)[0]
        except OSError as e:
            r[1] = e
        return r

    def tls_client(cafile):
        # a context that checks the upstream's certificate chain against
        # the CA certificate in cafile (PEM) and, with server_hostname, its
        # name (MicroPython 1.23's ssl module; mbedTLS)
        import ssl
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        with open(cafile, "rb") as f:
            ctx.load_verify_locations(cadata=f.read())
        setattr(ctx, "verify_mode", ssl.CERT_REQUIRED)  # (not in the stubs)
        return ctx

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

    async def _set_ready(sock, write, ev):
        await _ready(sock, write)
        ev.set()

    async def wait_sock(sock, write, ev, timeout_ms):
        # until sock is readable (writable), ev is set by another task (a
        # wake-up: look again) or timeout_ms has passed; ev is set after
        import asyncio
        t = asyncio.create_task(_set_ready(sock, write, ev))
        try:
            await wait_event(ev, timeout_ms)
        finally:
            t.cancel()  # (out of the IO queue, if still in it)
            ev.set()

    async def wait_event(ev, timeout_ms):
        # until ev is set or timeout_ms has passed
        import asyncio
        try:
            await asyncio.wait_for_ms(ev.wait(), timeout_ms)
        except asyncio.TimeoutError:
            pass

    async def dial_async(host, port, ctx, params, timeout_ms):
        # TCP connect and TLS handshake without blocking the event loop (the
        # name lookup still blocks: MicroPython has no asynchronous resolver)
        s = dial_start(host, port)
        try:
            if not await wait_io(s, True, timeout_ms):
                raise OSError(110, "connect timed out")
            dial_done(s)
            if ctx:
                s = tls_start(s, host, ctx, params)
        except BaseException:
            s.close()
            raise
        return s

    def current_task():
        # the running asyncio task (umqtt3.aio stops its run() task with it)
        import asyncio
        return asyncio.current_task()

else:
    from .cpython import (tls_client, wait_io, wait_event, dial_async,  # noqa: F401
                          current_task, lookup_start)

    async def wait_sock(sock, write, ev, timeout_ms):
        """Until sock is readable (writable), ev is set by another task (a
        wake-up: look again) or timeout_ms has passed; ev is set after."""
        import asyncio
        loop = asyncio.get_running_loop()
        fd = sock.fileno()
        (loop.add_writer if write else loop.add_reader)(fd, ev.set)
        try:
            await wait_event(ev, timeout_ms)
        finally:
            (loop.remove_writer if write else loop.remove_reader)(fd)
            ev.set()
