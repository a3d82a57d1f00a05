# The conformance harness for umqtt3's broker: one client, two transports.
#
#     with running(max_clients=2) as b, Raw(b) as c:
#         assert c.connect("dev").rc == 0
#
# running(**kw) starts a Broker with those limits; Raw(b) is a client that
# speaks bytes: packets built with umqtt3.codec, replies read frame by frame
# and decoded. Where the bytes travel is the transport in use:
#
# - Memory (the default; CPython and MicroPython): each Raw is one end of a
#   transport.Pipe whose other end the broker serves through attach(). The
#   broker runs in the test's own thread: a read that finds nothing lets it
#   poll once, and "nothing comes" means a few polls in a row did no work.
#   Its clock is the harness's: time stands still until advance(ms) moves it,
#   so keepalive and connect timeouts are exact and cost no waiting.
# - Sockets (tests/test_broker_harness.py, CPython): a Broker on 127.0.0.1
#   polled by a background thread; Raw is a TCP socket, waits are real.
#
# use(transport) picks one; the test bodies are the same for both.
import sys

try:
    import os
except ImportError:  # some MicroPython builds have no os
    os = None

from support import tempdir, rmtree  # noqa: F401  (the broker tests take them from here)
from umqtt3.broker import Broker
from umqtt3.compat import ticks_add, ticks_ms
from umqtt3.transport import Pipe, Closed
from umqtt3.codec import (Packet, decode, frame_len, encode_connect, encode_publish,
                          encode_ack, encode_subscribe, encode_unsubscribe, encode_simple,
                          CONNACK, PUBLISH, SUBACK, UNSUBACK, PUBACK, PUBREC, PUBREL, PUBCOMP)

MICROPYTHON = sys.implementation.name == "micropython"
TIMEOUT = 5.0  # seconds a socket read waits; the memory transport waits for no clock
IDLE = 3  # polls in a row that do no work: nothing more will come


class Timeout(Exception):
    """Nothing arrived (sockets: within the timeout; memory: the broker has
    nothing more to do)."""


# ---------------------------------------------------------------- memory

class _MemLink:
    """One end of a Pipe pair; the broker serves the other end."""

    def __init__(self, b, size):
        self.b = b
        self.link, end = Pipe.pair(size)
        b.attach(end)
        self.tmp = bytearray(256)

    def _poll(self, idle):
        # one broker step; the idle count goes on only if it did nothing
        return 0 if self.b.poll_once(0) else idle + 1

    def send(self, data):
        n = len(data)
        off = 0
        idle = 0
        while off < n:
            try:
                w = self.link.write(data, off, n - off)
            except Closed:
                return  # the broker closed it: the bytes are lost, as over TCP
            if w:
                off += w
                idle = 0
            elif idle >= IDLE:
                raise Timeout("the broker does not read")
            else:
                idle = self._poll(idle)

    def read(self, n, timeout):
        """n bytes, or None when the broker closed the connection."""
        out = bytearray()
        tmp = self.tmp
        idle = 0
        while len(out) < n:
            k = n - len(out)
            r = self.link.readinto(tmp, k if k < len(tmp) else len(tmp))
            if r is None:
                if idle >= IDLE:
                    raise Timeout("nothing came")
                idle = self._poll(idle)
            elif not r:
                return None
            else:
                out += tmp[:r]
                idle = 0
        return out

    def closed(self, timeout):
        tmp = self.tmp
        idle = 0
        while idle < IDLE:
            r = self.link.readinto(tmp, len(tmp))
            if r == 0:
                return True
            if r is None:
                idle = self._poll(idle)
            else:
                idle = 0
        return False

    def close(self):
        self.link.close()


class Memory:
    """Broker and clients in one thread over pipes, on a clock that moves
    only when advance() moves it (the broker's clock= is the harness's)."""

    name = "memory"

    def __init__(self, pipe=4096):
        self.pipe = pipe
        self.b = None
        self.t = 0

    def now(self):
        return self.t

    def start(self, kw):
        self.t = ticks_ms()
        self.b = Broker(port=None, clock=self.now, **kw)
        return self.b

    def stop(self, b):
        try:
            b.close()
        finally:
            self.b = None

    def open(self, b, rcvbuf):
        return _MemLink(b, rcvbuf or self.pipe)

    def advance(self, ms):
        # in steps well under the broker's 100 ms timer period
        while ms > 0:
            d = 50 if ms > 50 else ms
            self.t = ticks_add(self.t, d)
            self.b.poll_once(0)
            ms -= d

    def wait_for(self, cond, timeout):
        idle = 0
        for _ in range(10000):
            if cond():
                return True
            if idle >= IDLE:
                break
            idle = 0 if self.b.poll_once(0) else idle + 1
        return cond()

    def settle(self):
        self.wait_for(lambda: False, 0)


_cur = Memory()


def use(transport):
    """Make transport the one running() and Raw() use; returns the old one."""
    global _cur
    old = _cur
    _cur = transport
    return old


def transport():
    return _cur


def over_sockets():
    return _cur.name == "sockets"


class running:
    """with running(**limits) as b: a Broker (sys_interval=0 and a 3 s connect
    timeout unless given), served by the transport in use; closed on exit, and
    it must not have hit an internal error."""

    def __init__(self, transport=None, **kw):
        kw.setdefault("sys_interval", 0)
        kw.setdefault("connect_timeout_ms", 3000)
        self.kw = kw
        self.t = transport

    def __enter__(self):
        self.t = self.t or _cur
        self.b = self.t.start(self.kw)
        return self.b

    def __exit__(self, et, ev, tb):
        self.t.stop(self.b)
        if et is None:
            assert self.b.errors == 0, "the broker hit an internal error"
        return False


def advance(ms):
    """Let ms milliseconds pass for the broker (sockets: sleep that long)."""
    _cur.advance(ms)


def clock():
    """The broker's clock in ms (memory: the harness's, which only advance()
    moves; sockets: ticks_ms(), where a busy machine lets more pass)."""
    return _cur.now()


def wait_for(cond, timeout=TIMEOUT):
    """True once cond() holds; False when it never came to hold (memory: the
    broker ran out of work; sockets: timeout seconds passed)."""
    return _cur.wait_for(cond, timeout)


def settle():
    """Let the broker catch up with what was sent."""
    _cur.settle()


# ---------------------------------------------------------------- the client

_TX = bytearray(8192)  # one encode buffer: a packet is sent as soon as it is built


class Raw:
    """A client speaking bytes: send() what codec encoders produce, recv()
    decoded packets (each with its own buffer)."""

    def __init__(self, b, rcvbuf=None, transport=None):
        self.ch = (transport or _cur).open(b, rcvbuf)
        self.level = 4

    def close(self):
        self.ch.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def send(self, data):
        self.ch.send(data)

    def put(self, fn, *args, **kw):
        """Encode with a codec function (buf, off, ...) and send."""
        data = build(fn, *args, **kw)
        self.ch.send(data)
        return data

    def connect(self, cid, clean=True, keepalive=0, level=4, expect=True, **kw):
        self.level = level
        self.put(encode_connect, cid, level, clean, keepalive, **kw)
        if not expect:
            return None
        p = self.recv()
        assert p is not None and p.type == CONNACK, p
        return p

    def publish(self, topic, payload, qos=0, pid=0, retain=False, dup=False):
        return self.put(encode_publish, topic, payload, qos, pid, retain, dup)

    def subscribe(self, pid, topics, qos=0):
        self.put(encode_subscribe, pid, topics, qos)
        p = self.recv()
        assert p is not None and p.type == SUBACK and p.pid == pid, p
        return bytes(p.payload)

    def unsubscribe(self, pid, topics):
        self.put(encode_unsubscribe, pid, topics)
        p = self.recv()
        assert p is not None and p.type == UNSUBACK and p.pid == pid, p

    def ack(self, ptype, pid):
        self.put(encode_ack, ptype, pid)

    def simple(self, ptype):
        self.put(encode_simple, ptype)

    def recv(self, timeout=TIMEOUT):
        """The next packet, or None when the broker closed the connection.
        Timeout when nothing comes."""
        read = self.ch.read
        head = read(2, timeout)
        if head is None:
            return None
        while True:
            n = frame_len(head, 0, len(head))
            if n:
                break
            b = read(1, timeout)
            if b is None:
                return None
            head += b
        if n > len(head):
            body = read(n - len(head), timeout)
            if body is None:
                return None
            head += body
        buf = bytes(head)
        p = Packet(self.level)
        decode(p, buf, 0, len(buf))
        return p

    def nothing(self, timeout=0.2):
        """True when no PUBLISH arrives (within timeout over sockets) and the
        link stays open; a PUBREL meanwhile is answered with PUBCOMP."""
        while True:
            try:
                p = self.recv(timeout)
            except Timeout:
                return True
            if p is None or p.type == PUBLISH:
                return False
            if p.type == PUBREL:
                self.ack(PUBCOMP, p.pid)

    def closed(self, timeout=TIMEOUT):
        """True when the broker closes the connection (within timeout over
        sockets); what arrives before is skipped."""
        return self.ch.closed(timeout)

    def messages(self, count, timeout=TIMEOUT, ack=True):
        """count PUBLISHes as (topic, payload, qos, retain, dup, pid); QoS 1/2
        acknowledged (QoS 2 through to PUBCOMP) when ack."""
        out = []
        while len(out) < count:
            p = self.recv(timeout)
            assert p is not None, "closed after %d of %d messages" % (len(out), count)
            if p.type == PUBLISH:
                out.append((bytes(p.topic), bytes(p.payload), p.qos, p.retain, p.dup, p.pid))
                if ack and p.qos == 1:
                    self.ack(PUBACK, p.pid)
                elif ack and p.qos == 2:
                    self.ack(PUBREC, p.pid)
            elif p.type == PUBREL and ack:
                self.ack(PUBCOMP, p.pid)
        return out

    def expect(self, ptype, pid=None, timeout=TIMEOUT):
        p = self.recv(timeout)
        assert p is not None, "closed while waiting for packet type %d" % ptype
        assert p.type == ptype, (p.type, ptype)
        if pid is not None:
            assert p.pid == pid, (p.pid, pid)
        return p


def build(fn, *args, **kw):
    """The bytes a codec encoder (buf, off, ...) produces."""
    n = fn(_TX, 0, *args, **kw)
    return bytes(_TX[:n])


def connect_bytes(cid, level=4, clean=True, keepalive=0, **kw):
    buf = bytearray(1024)
    n = encode_connect(buf, 0, cid, level, clean, keepalive, **kw)
    return bytearray(buf[:n])


def string(b):
    """An MQTT string: two length bytes, then b (unchecked, so it can be
    what an encoder refuses)."""
    return bytes([len(b) >> 8, len(b) & 255]) + b


def frame(first, body):
    """A packet built by hand: first byte, one length byte, body."""
    return bytes([first, len(body)]) + body


def junk(n, seed):
    """n bytes that look random, the same every run."""
    out = bytearray(n)
    x = seed
    for i in range(n):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        out[i] = (x >> 16) & 255
    return out


# ---------------------------------------------------------------- store directories

def listdir(d):
    return sorted(os.listdir(d))


def write_file(path, data):
    with open(path, "wb") as f:
        f.write(data)


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def pub_sub(b, sub_id="sub", filters=(("#", 2),), **kw):
    """A connected subscriber (with its filters; kw go to its CONNECT) and a
    connected publisher."""
    sub = Raw(b)
    sub.connect(sub_id, **kw)
    sub.subscribe(1, list(filters))
    pub = Raw(b)
    pub.connect("pub-" + sub_id)
    return sub, pub
