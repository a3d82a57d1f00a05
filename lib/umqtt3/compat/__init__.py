# umqtt3.compat -- the only module that knows which Python it runs on.
#
# On MicroPython it re-exports the built-ins; on CPython it takes the
# emulation from compat/cpython.py, kept apart so that a device never loads
# it. Every other module imports from here what differs between the two
# Pythons; store.py's file layer uses os and vfs directly for what does not.
import sys

MICROPYTHON = sys.implementation.name == "micropython"

if MICROPYTHON:
    # names, not modules: each name in this module's dict costs RAM (the
    # broker's errno and POLL* bits are compat/gateway.py's)
    from micropython import const
    from time import ticks_ms, ticks_add, ticks_diff, sleep_ms
    from select import poll

    try:
        import socket
    except ImportError:  # the WebAssembly port has no sockets
        socket = None

    def waiter(p):
        # p's ipoll, for a caller that reads only the events of the pairs
        # (CPython's waiter is select's own poll: file numbers, no wrapper)
        return p.ipoll

    def move(dst, off, buf, start, n):
        # n bytes from buf[start:] to dst[off:]: a memoryview slice would
        # allocate, a byte loop does not; backwards when moving up within
        # one buffer, like memmove. The client's few bytes (Conn's
        # read-ahead, MemoryStore's messages, MQTT 5's properties put in)
        # go this way; copy(), which the broker moves its blocks with, is
        # this loop or a native one (compat/gateway.py), handed out by
        # __getattr__ on first use. (Its parameters are names the client
        # has anyway: each name costs a device RAM.)
        if off + n > len(dst) or start + n > len(buf):
            raise IndexError
        if dst is buf and start < off:
            for i in range(n - 1, -1, -1):
                dst[off + i] = buf[start + i]
        else:
            for i in range(n):
                dst[off + i] = buf[start + i]

    # CPython has a strict decoder; MicroPython checks UTF-8 in codec.py.
    valid_utf8 = None
    topic_ok = None  # the codec checks names byte by byte
    # (name_levels, None here too, is compat/gateway.py's: the broker's)

    def as_bytes(s):
        return s.encode() if isinstance(s, str) else s

    def link(sock):
        # MicroPython sockets (and TLS sockets) already have readinto(buf, n)
        # and write(buf, off, n), returning None when they would block.
        return sock

    def dial(server, port, ssl, params, timeout_ms):
        # blocking TCP connect (+ TLS handshake) for the blocking client,
        # each step bounded by timeout_ms. What compat/gateway.py's
        # nodelay() does is written out here, so that a client never loads
        # that module.
        ai = socket.getaddrinfo(server, port, 0, socket.SOCK_STREAM)[0]
        s = socket.socket(ai[0], socket.SOCK_STREAM, ai[2])
        try:
            s.settimeout(timeout_ms / 1000)
            s.connect(ai[-1])
            try:
                # one write per packet, no Nagle stall on QoS 1
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except Exception:
                pass  # not every port has TCP_NODELAY
            if ssl:
                # TLS, in compat/dial_steps.py: a node without it never
                # loads the ssl half
                from .dial_steps import tls_wrap
                s = tls_wrap(s, server, ssl, params)
        except BaseException:
            s.close()
            raise
        return s

    def __getattr__(name):
        # what a client never uses (the broker's and asyncio's platform
        # differences, the wall clock) is in compat/gateway.py, loaded on
        # the first use of one of its names; kept here after that, so that
        # a hot path reading compat.NAME allocates nothing
        import umqtt3.compat.gateway as g  # (`from . import` would come back here)
        v = getattr(g, name)
        globals()[name] = v
        return v

else:
    # the emulation lives in its own module, which MicroPython never loads
    # (select's POLL* bits by name too: the broker's, as compat/gateway.py's)
    from .cpython import *  # noqa: F401,F403

del sys
