# umqtt3.compat.dial_steps -- a TCP connect and a TLS handshake that never wait:
# started, then checked step by step. The blocking client's reconnect inside
# poll() (client_more.redial), the asyncio client and the gateway's bridges
# dial this way (compat/aio.py re-exports these names). Kept apart from
# compat/aio.py and compat/gateway.py, so that a reconnecting sensor node
# loads these few functions and not the asyncio or broker halves.
import errno
from . import MICROPYTHON, socket, poll

_POLLOUT = 4
_POLLERR = 8
_POLLHUP = 16


def dial_start(host, port):
    """A non-blocking socket whose TCP connect to host:port is under way.
    The name lookup blocks (MicroPython has no asynchronous resolver):
    give an address to never wait, or look it up first (compat.aio's
    lookup_start)."""
    return dial_addr(socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)[0])


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
    try:
        # one write per packet, no Nagle stall on QoS 1 (as compat.dial)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except Exception:
        pass  # not every port has TCP_NODELAY
    return True


def tls_params(ctx, host, params):
    """umqtt.simple's ssl_params (the keywords of its wrap_socket) applied
    to an SSL context: (context, name to check and send, the keywords left
    for wrap_socket). server_hostname replaces the name; cert and key (data
    or file paths) go to load_cert_chain, cadata to load_verify_locations,
    cert_reqs to verify_mode. ctx True: the platform's default context
    (tls_context)."""
    ctx = tls_context(ctx)
    p = dict(params or ())
    host = p.pop("server_hostname", host)
    cert = p.pop("cert", None)
    key = p.pop("key", None)
    if cert:
        ctx.load_cert_chain(cert, key)
    ca = p.pop("cadata", None)
    if ca:
        ctx.load_verify_locations(cadata=ca)
    if "cert_reqs" in p:
        r = p.pop("cert_reqs")
        if not r and not MICROPYTHON:
            ctx.check_hostname = False  # (CPython's, before CERT_NONE)
        setattr(ctx, "verify_mode", r)  # (not in the device stubs)
    p.pop("do_handshake", None)  # (the drivers run it)
    return ctx, host, p


def tls_wrap(s, host, ctx, params):
    """compat.dial's TLS half: s wrapped in TLS, its handshake run within
    the socket's timeout (the blocking client's connect)."""
    ctx, host, params = tls_params(ctx, host, params)
    return ctx.wrap_socket(s, server_hostname=host, **params)


def tls_start(s, host, ctx, params):
    """s wrapped in TLS (ctx: True or an ssl context), its handshake not
    yet run: tls_step() runs it."""
    ctx, host, params = tls_params(ctx, host, params)
    return ctx.wrap_socket(s, server_hostname=host, do_handshake_on_connect=False, **params)


if MICROPYTHON:
    def tls_context(ctx):
        # ssl=True: a context that encrypts but, with no CA bundle on the
        # device, cannot authenticate the broker (docs/client.md)
        if ctx is True:
            import ssl
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.verify_mode = ssl.CERT_NONE
        return ctx

    def tls_step(s):
        # MicroPython's ssl runs the handshake within the first reads and
        # writes of a non-blocking socket: nothing to step here
        return 0

else:
    from .cpython import tls_context, tls_step  # noqa: F401
