# umqtt3.compat.gateway -- MicroPython's platform differences that a client
# never uses: the broker's (memory, socket buffers, links, the TLS listener,
# the native block copy), asyncio's sleep and the wall clock.
# compat/__init__.py hands these names out on first use (its __getattr__),
# so a client device never loads them; on CPython compat/cpython.py has
# them all.
import time
import errno  # noqa: F401  (compat.errno)
from . import socket, move

# select's event bits by name, for the broker (compat.POLLIN, ...; a client
# writes them as consts)
POLLIN = 1
POLLOUT = 4
POLLERR = 8
POLLHUP = 16

# copy(dst, doff, src, soff, n): compat.move, or on ports with a native
# emitter the same loop in viper, for the blocks the broker and the bridge
# move (a client moves a few bytes with move() and never loads this).
copy = move
_g = {}  # type: dict
try:
    # Compiled on the device from a string so that every file still builds
    # with a plain `mpy-cross` (no -march) and on ports without viper.
    exec(
        "import micropython\n"
        "@micropython.viper\n"
        "def v(d: ptr8, doff: int, s: ptr8, soff: int, n: int, b: int):\n"
        "    if b:\n"
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

    def copy(dst, doff, src, soff, n, v=_g["v"]):
        # viper does no bounds checks: check here, then copy natively
        # (v, the native loop, is bound here: no module name for it)
        if doff < 0 or soff < 0 or n < 0 or doff + n > len(dst) or soff + n > len(src):
            raise IndexError
        v(dst, doff, src, soff, n, dst is src and soff < doff)
except Exception:
    pass
del _g  # (on a port without viper too: it holds what exec() left)


def wall_s():
    # the wall clock in whole seconds, None while it is not set (no RTC,
    # or before NTP: before 2024, whichever epoch the port counts from)
    try:
        t = int(time.time())
        return t if t >= (757382400 if time.gmtime(0)[0] == 2000 else 1704067200) else None
    except Exception:
        return None


def asleep_ms(ms):
    import asyncio
    return asyncio.sleep_ms(ms)  # type: ignore[attr-defined, unused-ignore]


name_levels = None  # broker_core checks names byte by byte


def on_term(fn):
    # MicroPython has no signals: a board's broker stops by reset
    pass


def nodelay(sock):
    # one write per packet, no Nagle stall (the broker's accepted sockets)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except Exception:
        pass  # not every port has TCP_NODELAY


def fsync(f):
    # littlefs commits a file's data and metadata on flush (the broker's
    # log; store.py has its own, so that a client's compat does without)
    f.flush()


# the broker's platform differences (broker.py, broker_core.py)
def mem_free():
    import gc
    return gc.mem_free()  # type: ignore[attr-defined, unused-ignore]


def sndbuf(sock, n):
    # not every port has SO_SNDBUF: the lwIP default stays
    so = getattr(socket, "SO_SNDBUF", None)
    if so is not None:
        sock.setsockopt(socket.SOL_SOCKET, so, n)


# the hashes of mosquitto_passwd's files (broker_auth): $6$ is one SHA-512,
# $7$ PBKDF2-HMAC-SHA512. Not every port's hashlib has SHA-512 (the
# WebAssembly port's has only sha256): then both are None and broker_auth
# refuses such entries instead of checking them.
import hashlib  # noqa: E402
sha512 = getattr(hashlib, "sha512", None)
del hashlib


def _pbkdf2(password, salt, rounds):
    # PBKDF2 (RFC 8018) with HMAC-SHA512 (RFC 2104), the first 64-byte
    # block: all a $7$ entry keeps. MicroPython's hashlib has no pbkdf2_hmac.
    k = sha512(password).digest() if len(password) > 128 else password
    k = k + bytes(128 - len(k))
    ipad = bytes(b ^ 0x36 for b in k)
    opad = bytes(b ^ 0x5C for b in k)

    def mac(m):
        return sha512(opad + sha512(ipad + m).digest()).digest()

    u = mac(salt + b"\x00\x00\x00\x01")
    t = bytearray(u)
    for _ in range(rounds - 1):
        u = mac(u)
        for i in range(64):
            t[i] ^= u[i]
    return bytes(t)


pbkdf2_sha512 = _pbkdf2 if sha512 is not None else None


LINK_BUFFERS = False
TOPIC_MEMO = 0  # broker_subs remembers no topic's subscribers: RAM before CPU


def server_link(sock):
    # read exactly what each packet needs, straight from the socket
    return sock


# the broker's TLS listener: ssl.SSLContext server side (mbedTLS;
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
