"""The socket transport of the broker harness (no tests here; CPython only).

tests/portable/broker_harness.py holds the client (Raw) and the memory
transport; this adds Sockets: a umqtt3 Broker on 127.0.0.1, a free port,
polled by one background thread (the broker itself stays single-task), and
clients that are TCP sockets whose every read has a timeout.

For the other broker tests (interop, crash) the names they use stay here:
- running(**kw): a Broker over sockets; stopped and closed on exit, and it
  must not have hit an internal error.
- Raw(port or broker): a raw-socket client; recv() raises socket.timeout
  (broker_harness.Timeout too) when nothing comes.
- wait_for(cond, timeout): polls cond in real time.
"""
import os
import socket
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
LIB = os.path.join(os.path.dirname(HERE), "lib")
for _p in (LIB, os.path.join(HERE, "portable")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import broker_harness  # noqa: E402
from broker_harness import TIMEOUT, Timeout, connect_bytes  # noqa: E402,F401
from umqtt3.broker import Broker  # noqa: E402


class SocketTimeout(Timeout, socket.timeout):
    """Nothing came in time: both the harness's Timeout and socket.timeout."""


class BrokerThread:
    def __init__(self, broker):
        self.b = broker
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


def wait_for(cond, timeout=TIMEOUT, step=0.005):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return cond()


class _SockLink:
    def __init__(self, port, rcvbuf=None):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.settimeout(TIMEOUT)
        s.connect(("127.0.0.1", port))
        self.s = s

    def send(self, data):
        self.s.sendall(data)

    def read(self, n, timeout):
        self.s.settimeout(timeout)
        out = bytearray()
        try:
            while len(out) < n:
                b = self.s.recv(n - len(out))
                if not b:
                    return None
                out += b
        except socket.timeout:
            raise SocketTimeout("nothing came in %.1f s" % timeout)
        except ConnectionResetError:
            return None
        return out

    def closed(self, timeout):
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

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass


class Sockets:
    """Broker on 127.0.0.1 (a free port) polled by a background thread;
    clients over TCP; time is real."""

    name = "sockets"

    def __init__(self):
        self.threads = {}  # broker -> its BrokerThread

    def start(self, kw):
        kw = dict(kw)
        kw.setdefault("host", "127.0.0.1")
        kw.setdefault("port", 0)
        b = Broker(**kw)
        self.threads[b] = BrokerThread(b)
        return b

    def stop(self, b):
        self.threads.pop(b).stop()

    def open(self, where, rcvbuf):
        return _SockLink(where if isinstance(where, int) else where.port, rcvbuf)

    def advance(self, ms):
        time.sleep(ms / 1000)

    def now(self):
        from umqtt3.compat import ticks_ms
        return ticks_ms()

    def wait_for(self, cond, timeout):
        return wait_for(cond, timeout)

    def settle(self):
        time.sleep(0.02)


SOCKETS = Sockets()


def running(**kw):
    return broker_harness.running(transport=SOCKETS, **kw)


def Raw(where, rcvbuf=None):
    """A raw-socket client of the broker b (or of a broker on 127.0.0.1:port)."""
    return broker_harness.Raw(where, rcvbuf=rcvbuf, transport=SOCKETS)
