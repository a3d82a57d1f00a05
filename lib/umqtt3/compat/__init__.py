# umqtt3.compat -- the only module that knows which Python it runs on.
#
# On MicroPython it re-exports the built-ins; on CPython it takes the
# emulation from compat/cpython.py, kept apart so that a device never loads
# it. Every other module imports from here what differs between the two
# Pythons; store.py's file layer uses os and vfs directly for what does not.
import sys

MICROPYTHON = sys.implementation.name == "micropython"

if MICROPYTHON:
    from micropython import const
    import time
    import errno
    import select

    try:
        import socket
    except ImportError:  # the WebAssembly port has no sockets
        socket = None

    ticks_ms = time.ticks_ms
    ticks_add = time.ticks_add
    ticks_diff = time.ticks_diff
    sleep_ms = time.sleep_ms

    def wall_s():
        # the wall clock in whole seconds, None while it is not set (no RTC,
        # or before NTP: before 2024, whichever epoch the port counts from)
        try:
            t = int(time.time())
            return t if t >= (757382400 if time.gmtime(0)[0] == 2000 else 1704067200) else None
        except Exception:
            return None
    poll = select.poll

    def copy(dst, doff, src, soff, n):
        # A memoryview slice would allocate; a byte loop does not. Replaced by a
        # native (viper) loop below on ports that have a native emitter.
        # Backwards when moving up within one buffer, like memmove.
        if doff + n > len(dst) or soff + n > len(src):
            raise IndexError
        if dst is src and soff < doff:
            for i in range(n - 1, -1, -1):
                dst[doff + i] = src[soff + i]
        else:
            for i in range(n):
                dst[doff + i] = src[soff + i]

    try:
        # Compiled on the device from a string so that every file still builds
        # with a plain `mpy-cross` (no -march) and on ports without viper.
        _g = {}  # type: dict
        exec(
            "import micropython\n"
            "@micropython.viper\n"
            "def _v(d: ptr8, doff: int, s: ptr8, soff: int, n: int, back: int):\n"
            "    if back:\n"
            "        i = n - 1\n"
            "        while i >= 0:\n"
            "            d[doff + i] = s[soff + i]\n"
            "            i -= 1\n"
            "    else:\n"
            "        i = 0\n"
            "        while i < n:\n"
            "            d[doff + i] = s[soff + i]\n"
            "            i += 1\n",
            _g,
        )
        _v = _g["_v"]
        del _g

        def copy(dst, doff, src, soff, n):
            # viper does no bounds checks: check here, then copy natively
            if doff < 0 or soff < 0 or n < 0 or doff + n > len(dst) or soff + n > len(src):
                raise IndexError
            _v(dst, doff, src, soff, n, dst is src and soff < doff)
    except Exception:
        pass

    # CPython has a strict decoder; MicroPython checks UTF-8 in codec.py.
    valid_utf8 = None
    topic_ok = None  # codec and broker_core check names byte by byte
    name_levels = None

    def as_bytes(s):
        return s.encode() if isinstance(s, str) else s

    def fsync(f):
        # littlefs commits a file's data and metadata on flush.
        f.flush()

    def fsync_dir(path):
        # littlefs and FAT have no directory handles; littlefs renames and
        # removes are atomic metadata commits.
        pass

    def replace(src, dst):
        import os
        os.rename(src, dst)

    def asleep_ms(ms):
        import asyncio
        return asyncio.sleep_ms(ms)

    def link(sock):
        # MicroPython sockets (and TLS sockets) already have readinto(buf, n)
        # and write(buf, off, n), returning None when they would block.
        return sock

    def nodelay(sock):
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except Exception:
            pass  # not every port has TCP_NODELAY

    # ------------------------------------------------------------ the broker's
    # platform differences (broker.py, broker_core.py)
    def mem_free():
        import gc
        return gc.mem_free()

    def sndbuf(sock, n):
        # not every port has SO_SNDBUF: the lwIP default stays
        so = getattr(socket, "SO_SNDBUF", None)
        if so is not None:
            sock.setsockopt(socket.SOL_SOCKET, so, n)

    LINK_BUFFERS = False
    TOPIC_MEMO = 0  # broker_subs remembers no topic's subscribers: RAM before CPU

    def server_link(sock):
        # read exactly what each packet needs, straight from the socket
        return sock

    # -- opening a connection (the client's drivers): TLS and timeouts
    def tls_context(ctx):
        # ssl=True: a context that encrypts but, with no CA bundle on the
        # device, cannot authenticate the broker (docs/client.md)
        if ctx is True:
            import ssl
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.verify_mode = ssl.CERT_NONE
        return ctx

    # -- the broker's TLS listener: ssl.SSLContext server side (mbedTLS;
    # ESP32 and RP2040 ports from MicroPython 1.23, docs/broker.md)
    def tls_server(certfile, keyfile, cafile=None, require=False):
        import ssl
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(_read(certfile), _read(keyfile))
        if cafile:
            ctx.load_verify_locations(cadata=_read(cafile))
        # (ssl.py's SSLContext has verify_mode; the stubs have only tls's)
        setattr(ctx, "verify_mode", ssl.CERT_REQUIRED if require else ssl.CERT_NONE)
        return ctx

    def _read(path):
        with open(path, "rb") as f:
            return f.read()

    def tls_accept(ctx, sock):
        # the handshake runs within the first reads, never blocking the broker
        return ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)

    def tls_held(link):
        return 0  # poll() sees the bytes mbedTLS holds

else:
    # the emulation lives in its own module, which MicroPython never loads
    from .cpython import *  # noqa: F401,F403


def dial(host, port, ctx, params, timeout_ms):
    # blocking TCP connect (+ TLS handshake) for the blocking client; on
    # MicroPython the network stack's own timeout applies
    ai = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)[0]
    s = socket.socket(ai[0], socket.SOCK_STREAM, ai[2])
    try:
        if not MICROPYTHON:
            s.settimeout(timeout_ms / 1000)
        s.connect(ai[-1])
        nodelay(s)  # one write per packet, no Nagle stall on QoS 1
        if ctx:
            s = tls_context(ctx).wrap_socket(s, server_hostname=host, **params)
    except BaseException:
        s.close()
        raise
    return s


POLLIN = 1
POLLOUT = 4
POLLERR = 8
POLLHUP = 16
