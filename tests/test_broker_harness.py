"""Shared helpers for the broker tests (no tests here).

- running(**kw): a umqtt3 Broker on 127.0.0.1, a free port, polled by one
  background thread (the broker itself stays single-task); stopped and
  closed on exit, and it must not have hit an internal error.
- Raw: a raw-socket MQTT client: packets built with umqtt3.codec, replies
  read frame by frame and decoded; every read has a timeout.
"""
import contextlib
import os
import socket
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
LIB = os.path.join(os.path.dirname(HERE), "lib")
if LIB not in sys.path:
    sys.path.insert(0, LIB)

from umqtt3 import codec  # noqa: E402
from umqtt3.codec import (Packet, decode, frame_len, encode_connect, encode_publish,  # noqa: E402
                          encode_ack, encode_subscribe, encode_unsubscribe, encode_simple)
from umqtt3.broker import Broker  # noqa: E402

TIMEOUT = 5.0


class BrokerThread:
    def __init__(self, broker):
        self.b = broker
        self.port = broker.port
        self.stopping = False
        self.exc = None
        self.t = threading.Thread(target=self._loop, daemon=True)
        self.t.start()

    def _loop(self):
        try:
            while not self.stopping:
                self.b.poll_once(10)
        except BaseException as e:  # reported by stop()
            self.exc = e
        finally:
            self.b.close()

    def stop(self):
        self.stopping = True
        self.t.join(10)
        assert not self.t.is_alive(), "broker thread did not stop"
        if self.exc is not None:
            raise self.exc


@contextlib.contextmanager
def running(**kw):
    kw.setdefault("host", "127.0.0.1")
    kw.setdefault("port", 0)
    kw.setdefault("sys_interval", 0)
    kw.setdefault("connect_timeout_ms", 3000)
    b = Broker(**kw)
    bt = BrokerThread(b)
    try:
        yield b
    finally:
        bt.stop()
    assert b.errors == 0, "the broker hit an internal error"


def wait_for(cond, timeout=TIMEOUT, step=0.005):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return cond()


class Raw:
    """A client speaking bytes: send() what codec encoders produce, recv()
    decoded packets (each with its own buffer)."""

    def __init__(self, port, timeout=TIMEOUT, rcvbuf=None):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.settimeout(timeout)
        s.connect(("127.0.0.1", port))
        self.s = s
        self.level = 4
        self.tx = bytearray(1 << 17)

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, data):
        self.s.sendall(data)

    def put(self, fn, *args, **kw):
        """Encode with a codec function (buf, off, ...) and send."""
        n = fn(self.tx, 0, *args, **kw)
        self.s.sendall(self.tx[:n])
        return bytes(self.tx[:n])

    def connect(self, cid, clean=True, keepalive=0, level=4, expect=True, **kw):
        self.level = level
        self.put(encode_connect, cid, level, clean, keepalive, **kw)
        if not expect:
            return None
        p = self.recv()
        assert p is not None and p.type == codec.CONNACK, p
        return p

    def publish(self, topic, payload, qos=0, pid=0, retain=False, dup=False):
        return self.put(encode_publish, topic, payload, qos, pid, retain, dup)

    def subscribe(self, pid, topics, qos=0):
        self.put(encode_subscribe, pid, topics, qos)
        p = self.recv()
        assert p is not None and p.type == codec.SUBACK and p.pid == pid, p
        return bytes(p.payload)

    def unsubscribe(self, pid, topics):
        self.put(encode_unsubscribe, pid, topics)
        p = self.recv()
        assert p is not None and p.type == codec.UNSUBACK and p.pid == pid, p

    def ack(self, ptype, pid):
        self.put(encode_ack, ptype, pid)

    def simple(self, ptype):
        self.put(encode_simple, ptype)

    def _read(self, n):
        out = bytearray()
        while len(out) < n:
            b = self.s.recv(n - len(out))
            if not b:
                return None
            out += b
        return out

    def recv(self, timeout=TIMEOUT):
        """The next packet, or None when the broker closed the connection.
        socket.timeout when nothing comes within timeout."""
        self.s.settimeout(timeout)
        try:
            head = self._read(2)
            if head is None:
                return None
            while True:
                n = frame_len(head, 0, len(head))
                if n:
                    break
                b = self._read(1)
                if b is None:
                    return None
                head += b
            body = self._read(n - len(head)) if n > len(head) else bytearray()
            if body is None:
                return None
        except ConnectionResetError:
            return None
        buf = bytes(head + body)
        p = Packet(self.level)
        decode(p, buf, 0, len(buf))
        return p

    def nothing(self, timeout=0.2):
        """True when no PUBLISH arrives within timeout (and the link stays
        open); a PUBREL meanwhile is answered with PUBCOMP."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            try:
                p = self.recv(left)
            except socket.timeout:
                return True
            if p is None or p.type == codec.PUBLISH:
                return False
            if p.type == codec.PUBREL:
                self.ack(codec.PUBCOMP, p.pid)

    def closed(self, timeout=TIMEOUT):
        """True when the broker closes the connection within timeout; what
        arrives before is skipped."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.s.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                b = self.s.recv(65536)
            except socket.timeout:
                return False
            except ConnectionResetError:
                return True
            if not b:
                return True
        return False

    def messages(self, count, timeout=TIMEOUT, ack=True):
        """count PUBLISHes as (topic, payload, qos, retain, dup, pid); QoS 1/2
        acknowledged (QoS 2 through to PUBCOMP) when ack."""
        out = []
        while len(out) < count:
            p = self.recv(timeout)
            assert p is not None, "closed after %d of %d messages" % (len(out), count)
            if p.type == codec.PUBLISH:
                out.append((bytes(p.topic), bytes(p.payload), p.qos, p.retain, p.dup, p.pid))
                if ack and p.qos == 1:
                    self.ack(codec.PUBACK, p.pid)
                elif ack and p.qos == 2:
                    self.ack(codec.PUBREC, p.pid)
            elif p.type == codec.PUBREL and ack:
                self.ack(codec.PUBCOMP, p.pid)
        return out

    def expect(self, ptype, pid=None, timeout=TIMEOUT):
        p = self.recv(timeout)
        assert p is not None, "closed while waiting for packet type %d" % ptype
        assert p.type == ptype, (p.type, ptype)
        if pid is not None:
            assert p.pid == pid, (p.pid, pid)
        return p


def connect_bytes(cid, level=4, clean=True, keepalive=0, **kw):
    buf = bytearray(4096)
    n = encode_connect(buf, 0, cid, level, clean, keepalive, **kw)
    return bytearray(buf[:n])
