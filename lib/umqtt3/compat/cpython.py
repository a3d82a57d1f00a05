# umqtt3.compat.cpython -- compat's CPython half: MicroPython's built-ins
# emulated with the same semantics (ticks wrap like MicroPython's, poll has
# ipoll), so the library runs and is tested on the desktop. Only
# umqtt3.compat imports it, and only on CPython: a device never loads it.
import time as _time
import errno  # noqa: F401  (re-exported)
import os as _os
import socket  # noqa: F401  (re-exported)
import select as _select
import re as _re


def const(x):
    return x


# select's event bits by name, for the broker (compat/gateway.py's on
# MicroPython; here, not in compat/__init__.py, which a device compiles)
POLLIN = 1
POLLOUT = 4
POLLERR = 8
POLLHUP = 16


# MicroPython's ticks live in [0, 2**30) and wrap; emulate that exactly so
# wrap-around bugs show up on the desktop too. _ticks_base lets tests start
# the clock just before the wrap.
TICKS_PERIOD = 1 << 30
_TICKS_MAX = TICKS_PERIOD - 1
_TICKS_HALF = TICKS_PERIOD // 2
_ticks_base = 0


_mono_ns = _time.monotonic_ns


def ticks_ms():
    # one C call and integer arithmetic: the drivers read it per message
    return (_mono_ns() // 1000000 + _ticks_base) & _TICKS_MAX


def ticks_add(t, delta):
    # MicroPython refuses a delta ticks_diff could not give back
    if not -_TICKS_HALF < delta < _TICKS_HALF:
        raise OverflowError("ticks interval overflow")
    return (t + delta) & _TICKS_MAX


def ticks_diff(a, b):
    return ((a - b + _TICKS_HALF) & _TICKS_MAX) - _TICKS_HALF


def sleep_ms(ms):
    _time.sleep(ms / 1000)


def on_term(fn):
    # fn() on SIGTERM (the broker's CLI stops cleanly); not from a thread
    # other than the main one, where signal handlers cannot be set
    import signal
    try:
        signal.signal(signal.SIGTERM, lambda *_: fn())
    except ValueError:
        pass


def wall_s():
    # the wall clock in whole seconds, None while it is not set (before 2024)
    t = int(_time.time())
    return t if t >= 1704067200 else None


class poll:
    """select.poll with MicroPython's ipoll() (yields (obj, events) pairs)."""

    def __init__(self):
        self._p = _select.poll()
        self._objs = {}
        self._one = None  # the object while it is the only one registered

    def register(self, obj, mask=_select.POLLIN | _select.POLLOUT):
        fd = obj if isinstance(obj, int) else obj.fileno()
        self._objs[fd] = obj
        self._p.register(fd, mask)
        self._single()

    def modify(self, obj, mask):
        self._p.modify(obj if isinstance(obj, int) else obj.fileno(), mask)

    def unregister(self, obj):
        fd = obj if isinstance(obj, int) else obj.fileno()
        self._objs.pop(fd, None)
        self._p.unregister(fd)
        self._single()

    def _single(self):
        o = self._objs
        self._one = next(iter(o.values())) if len(o) == 1 else None

    def _named(self, r):
        # select.poll's list with the objects registered in place of their
        # file descriptors: changed in place, no second list
        o = self._objs
        i = 0
        for fd, ev in r:
            r[i] = (o[fd], ev)
            i += 1
        return r

    def poll(self, timeout=-1):
        r = self._p.poll(timeout)
        return self._named(r) if r else r

    def ipoll(self, timeout=-1, flags=0):
        # poll() without its call; for the one object a client polls, no
        # loop, no len() and no look-up (MicroPython's one-shot flag is not
        # emulated). The list itself, not iter() of it: every caller (the
        # drivers, the broker) runs a for loop over it, which a list serves
        # as well as MicroPython's iterator.
        r = self._p.poll(timeout)
        if r:
            one = self._one
            if one is not None:
                r[0] = (one, r[0][1])
            else:
                self._named(r)
        return r


def waiter(p):
    # select's poll itself: the pairs carry file numbers, not the objects
    # (the client reads only the events), and no Python call wraps it
    return p._p.poll


def copy(dst, doff, src, soff, n):
    # as on the device: out of range is an error, never a resized buffer
    if doff < 0 or soff < 0 or n < 0 or doff + n > len(dst) or soff + n > len(src):
        raise IndexError("copy out of range")
    if n < 1024:
        dst[doff:doff + n] = src[soff:soff + n]  # a small slice is cheaper than a view
    else:
        dst[doff:doff + n] = memoryview(src)[soff:soff + n]


def move(dst, off, buf, start, n):
    # the client's copy (Conn's read-ahead, MemoryStore's messages), with
    # the checks of MicroPython's byte loop: a range past either end is an
    # error, never a resized buffer; offsets and lengths are the caller's
    # own, never negative
    if off + n > len(dst) or start + n > len(buf):
        raise IndexError("move out of range")
    dst[off:off + n] = buf[start:start + n] if n < 1024 else memoryview(buf)[start:start + n]


def valid_utf8(buf, off, n):
    # Strict UTF-8: rejects overlong forms and surrogates [MQTT-1.5.3-1];
    # U+0000 is refused separately [MQTT-1.5.3-2].
    try:
        s = bytes(buf[off:off + n]).decode("utf-8")
    except UnicodeError:
        return False
    return "\x00" not in s


def topic_ok(buf, off, n):
    # A topic name in one pass in C: valid UTF-8 [MQTT-1.5.3-1] without
    # U+0000 [MQTT-1.5.3-2] nor a wildcard [MQTT-3.3.2-2]. False: the codec
    # looks again, one rule at a time, to name the one broken.
    try:
        s = bytes(buf[off:off + n]).decode("utf-8")
    except UnicodeError:
        return False
    return "\x00" not in s and "+" not in s and "#" not in s


# what the broker refuses in names [MQTT-1.5.3-2]: U+0001-U+001F, U+007F
# and U+0080-U+009F (0xC2 then a byte below 0xA0), as broker_core.Core.name_ok
_CTL = _re.compile(rb"[\x00-\x1f\x7f]|\xc2[\x00-\x9f]")


def name_levels(buf, off, n):
    """The levels of the name buf[off:off+n] (its '/' plus one), or -1 when
    it holds a control character; in C."""
    if _CTL.search(buf, off, off + n) is not None:
        return -1
    return bytes(buf[off:off + n]).count(b"/") + 1


def as_bytes(s):
    # exact bytes, what a client publishes, without the call to isinstance()
    return s if s.__class__ is bytes or not isinstance(s, str) else s.encode()


def fsync(f):
    f.flush()
    _os.fsync(f.fileno())


def fsync_dir(path):
    fd = _os.open(path, _os.O_RDONLY)
    try:
        _os.fsync(fd)
    finally:
        _os.close(fd)


def replace(src, dst):
    _os.replace(src, dst)


try:
    import ssl as _ssl
    _WOULD_BLOCK = (BlockingIOError, InterruptedError,
                    _ssl.SSLWantReadError, _ssl.SSLWantWriteError)  # type: tuple
except ImportError:
    _WOULD_BLOCK = (BlockingIOError, InterruptedError)


def asleep_ms(ms):
    import asyncio
    return asyncio.sleep(ms / 1000)


class link:
    """A CPython socket with MicroPython's stream methods."""

    def __init__(self, sock):
        self.sock = sock
        # the socket's methods, bound once: the client calls these per packet
        self._recv_into = sock.recv_into
        self._send = sock.send

    def readinto(self, buf, n):
        try:
            return self._recv_into(buf, n)
        except _WOULD_BLOCK:
            return None

    def write(self, buf, off=0, n=-1):
        if n < 0:
            n = len(buf) - off
        try:
            # a packet's copy costs less than a view of the buffer and its
            # slice; a large write goes through a view
            return self._send(buf[off:off + n] if n < 1024 else memoryview(buf)[off:off + n])
        except _WOULD_BLOCK:
            return None

    def close(self):
        self.sock.close()

    def fileno(self):
        return self.sock.fileno()


def nodelay(sock):
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


# ---------------------------------------------------------------- the broker's
# platform differences (broker.py, broker_core.py)

def mem_free():
    return None  # no fixed heap to report in $SYS


def sndbuf(sock, n):
    """SO_SNDBUF of a client socket: bounds what a reader that stalls
    holds in the kernel too."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, n)


# the hashes of mosquitto_passwd's files (broker_auth): $6$ is one SHA-512,
# $7$ PBKDF2-HMAC-SHA512 (compat/gateway.py: where a port's hashlib has them)
from hashlib import sha512  # noqa: E402,F401  (re-exported)


def pbkdf2_sha512(password, salt, rounds):
    import hashlib
    return hashlib.pbkdf2_hmac("sha512", password, salt, rounds)


LINK_BUFFERS = True  # server_link() reads ahead: poll does not see what it holds
# topics whose subscribers broker_subs remembers between subscription
# changes (a dict lookup instead of matching every filter): CPU before RAM
TOPIC_MEMO = 1024


class server_link:
    """A broker's socket link read in large gulps: fill() reads up to 16 KB
    into buf, and the broker core handles the whole packets in buf[pos:end]
    where they lie (Core.consume); readinto() hands the bytes out to exact
    reads too. Saves the two recv calls and the copy per packet that exact
    reads cost; a MicroPython broker reads the socket directly and keeps the
    RAM. held(): bytes read and not handed out."""

    def __init__(self, sock, size=16384):
        self.link = link(sock)
        self.buf = bytearray(size)
        self.mv = memoryview(self.buf)
        self.pos = 0
        self.end = 0

    def readinto(self, buf, n):
        if self.pos >= self.end:
            r = self.link.readinto(self.buf, len(self.buf))
            if not r:
                return r
            self.pos = 0
            self.end = r
        k = self.end - self.pos
        if k > n:
            k = n
        buf[:k] = self.mv[self.pos:self.pos + k]
        self.pos += k
        return k

    def held(self):
        return self.end - self.pos

    def fill(self):
        """Read what the socket has into buf: the bytes read, 0 when it
        would block; OSError when the peer closed."""
        r = self.link.readinto(self.buf, len(self.buf))
        if r is None:
            return 0
        if not r:
            raise OSError(104, "closed by peer")
        self.pos = 0
        self.end = r
        return r

    def write(self, buf, off=0, n=-1):
        return self.link.write(buf, off, n)

    def close(self):
        self.link.close()

    def tls_held(self):
        # bytes a TLS socket has decrypted and poll() does not see
        p = getattr(self.link.sock, "pending", None)
        return p() if p is not None else 0


# -- the broker's TLS listener
def tls_server(certfile, keyfile, cafile=None, require=False):
    """A server-side context: the broker's certificate and key (PEM files),
    and the CA that client certificates must be signed by (cafile); with
    require, a client without a valid certificate fails the handshake."""
    ctx = _ssl.SSLContext(_ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(certfile, keyfile)
    if cafile:
        ctx.load_verify_locations(cafile)
    ctx.verify_mode = _ssl.CERT_REQUIRED if require else (
        _ssl.CERT_OPTIONAL if cafile else _ssl.CERT_NONE)
    return ctx


def tls_accept(ctx, sock):
    # the handshake runs within the first reads, never blocking the broker
    return ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)


def tls_held(link):
    return link.tls_held() if isinstance(link, server_link) else 0


# -- opening a connection (the client's drivers): TLS and timeouts
def tls_context(ctx):
    # ssl=True: CPython's default context, which verifies the broker
    if ctx is True:
        ctx = _ssl.create_default_context()
    return ctx


def dial(server, port, ssl, params, timeout_ms):
    # blocking TCP connect (+ TLS handshake) for the blocking client
    ai = socket.getaddrinfo(server, port, 0, socket.SOCK_STREAM)[0]
    s = socket.socket(ai[0], socket.SOCK_STREAM, ai[2])
    try:
        s.settimeout(timeout_ms / 1000)
        s.connect(ai[-1])
        nodelay(s)  # one write per packet, no Nagle stall on QoS 1
        if ssl:
            from .dial_steps import tls_wrap
            s = tls_wrap(s, server, ssl, params)
    except BaseException as e:
        s.close()
        if isinstance(e, TimeoutError) and e.errno is None:
            # the socket's own timeout (TCP connect or TLS handshake) has no
            # errno here; MicroPython's is ETIMEDOUT, as dial_async's
            raise OSError(110, "connect timed out") from None
        raise
    return s


def tls_client(cafile):
    """A client context that trusts the CA certificates in cafile (PEM)
    alone and checks the peer's chain and name."""
    return _ssl.create_default_context(cafile=cafile)


def tls_step(s):
    """One step of s's TLS handshake (compat.aio.tls_start), never waiting:
    0 once done, else what it waits for (1: readable, 4: writable)."""
    try:
        s.do_handshake()
    except _ssl.SSLWantReadError:
        return 1
    except _ssl.SSLWantWriteError:
        return 4
    return 0


async def wait_io(sock, write, timeout_ms):
    """True once sock is readable (writable), False when timeout_ms has
    passed first; other tasks run meanwhile."""
    import asyncio
    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    fd = sock.fileno()

    def ready():
        if not fut.done():
            fut.set_result(None)

    (loop.add_writer if write else loop.add_reader)(fd, ready)
    try:
        await asyncio.wait_for(fut, max(0, timeout_ms) / 1000)
    except asyncio.TimeoutError:
        return False
    finally:
        (loop.remove_writer if write else loop.remove_reader)(fd)
    return True


async def wait_event(ev, timeout_ms):
    """Until asyncio.Event ev is set or timeout_ms has passed."""
    import asyncio
    try:
        await asyncio.wait_for(ev.wait(), max(0, timeout_ms) / 1000)
    except asyncio.TimeoutError:
        pass


async def dial_async(host, port, ctx, params, timeout_ms):
    """TCP connect, name lookup and TLS handshake without blocking the event
    loop; OSError(110) after timeout_ms."""
    import asyncio
    loop = asyncio.get_running_loop()

    async def go():
        ai = (await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM))[0]
        s = socket.socket(ai[0], socket.SOCK_STREAM, ai[2])
        s.setblocking(False)
        try:
            await loop.sock_connect(s, ai[-1])
            nodelay(s)
            if ctx:
                from .dial_steps import tls_start
                s = tls_start(s, host, ctx, params)
                while True:
                    w = tls_step(s)
                    if not w:
                        break
                    await wait_io(s, w == 4, timeout_ms)  # (wait_for bounds them all)
        except BaseException:
            s.close()
            raise
        return s

    try:
        return await asyncio.wait_for(go(), timeout_ms / 1000)
    except asyncio.TimeoutError:
        raise OSError(110, "connect timed out")


def current_task():
    import asyncio
    return asyncio.current_task()


def lookup_start(host, port):
    """The name lookup of host:port in a worker thread, so that the
    caller's loop (the gateway's bridges) goes on meanwhile; compat.aio's
    lookup_done() reads the result: [getaddrinfo entry, OSError]."""
    import threading
    r = [None, None]  # type: list

    def look():
        try:
            r[0] = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)[0]
        except OSError as e:
            r[1] = e  # socket.gaierror: its errno and its words
        except UnicodeError as e:  # a name IDNA cannot encode
            r[1] = OSError(2, str(e))
    threading.Thread(target=look, daemon=True).start()
    return r
