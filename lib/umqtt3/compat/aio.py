# umqtt3.compat.aio -- dialling without blocking, for the asyncio client
# (umqtt3.aio) and the gateway's bridges (umqtt3.bridge, inside the broker's
# one loop): a TCP connect started and checked without waiting, the TLS
# handshake run step by step; and, for asyncio, waiting for a socket and the
# running task. Kept apart from compat so that a blocking client loads it
# only to reconnect from poll() (client_more.redial: the dial in steps);
# CPython's asyncio half is in compat/cpython.py with the rest.
from . import MICROPYTHON, socket, errno, poll, nodelay, tls_params

_POLLOUT = 4
_POLLERR = 8
_POLLHUP = 16


def dial_start(host, port):
    """A non-blocking socket whose TCP connect to host:port is under way.
    The name lookup blocks (MicroPython has no asynchronous resolver):
    give an address to never wait, or look it up first (lookup_start)."""
    return dial_addr(socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)[0])


def lookup_done(r):
    """The getaddrinfo() entry of a lookup_start() once it is there, None
    while it runs; OSError when the name does not resolve."""
    if r[1] is not None:
        raise OSError(r[1])
    return r[0]


def dial_addr(ai):
    """dial_start() to a getaddrinfo() entry: nothing waits."""
    s = socket.socket(ai[0], socket.SOCK_STREAM, ai[2])
    s.setblocking(False)
    try:
        s.connect(ai[-1])
    except OSError as e:
        if e.errno != errno.EINPROGRESS:
            s.close()
            raise
    return s


def dial_done(s):
    """Without waiting: True once s's connect succeeded, False while it is
    under way; OSError when it failed (refused, unreachable)."""
    p = poll()
    p.register(s, _POLLOUT)
    ev = p.poll(0)
    if not ev:
        return False
    if ev[0][1] & (_POLLERR | _POLLHUP):
        e = errno.ECONNREFUSED
        if not MICROPYTHON:
            e = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) or e
        raise OSError(e, "connect failed")
    nodelay(s)  # one write per packet, no Nagle stall on QoS 1
    return True


def tls_start(s, host, ctx, params):
    """s wrapped in TLS (ctx: True or an ssl context), its handshake not
    yet run: tls_step() runs it."""
    ctx, host, params = tls_params(ctx, host, params)  # (umqtt.simple's ssl_params)
    return ctx.wrap_socket(s, server_hostname=host, do_handshake_on_connect=False, **params)


def event():
    # an asyncio.Event (umqtt3.aio: the tasks that wait for the one
    # waiting on the socket)
    from asyncio import Event
    return Event()


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
            r[1] = e.errno or 2
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

    def tls_step(s):
        # MicroPython's ssl runs the handshake within the first reads and
        # writes of a non-blocking socket: nothing to step here
        return 0

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
    from .cpython import (tls_client, tls_step, wait_io, wait_event, dial_async,  # noqa: F401
                          current_task, lookup_start)
