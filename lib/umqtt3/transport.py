# umqtt3.transport -- Pipe, an in-memory link pair: tests, and broker and
# clients in one process. The framed connection itself is umqtt3.conn
# (re-exported here for the imports that name this module).
from .conn import Conn, Closed  # noqa: F401


class Pipe:
    """One end of an in-memory link pair: Pipe.pair() -> (a, b). Bounded, so
    a reader that never reads makes the writer see "would block"."""

    def __init__(self, size=4096):
        self.buf = bytearray(size)
        self.head = 0  # next byte to read
        self.n = 0  # bytes held
        self.peer = None
        self.closed = False

    @staticmethod
    def pair(size=4096):
        a = Pipe(size)
        b = Pipe(size)
        a.peer = b
        b.peer = a
        return a, b

    def readinto(self, buf, n):
        if not self.n:
            return 0 if (self.closed or self.peer.closed) else None
        size = len(self.buf)
        if n > self.n:
            n = self.n
        h = self.head
        for i in range(n):
            buf[i] = self.buf[(h + i) % size]
        self.head = (h + n) % size
        self.n -= n
        return n

    def write(self, buf, off=0, n=-1):
        if self.closed or self.peer.closed:
            raise Closed("pipe closed")
        if n < 0:
            n = len(buf) - off
        p = self.peer
        size = len(p.buf)
        free = size - p.n
        if not free:
            return None
        if n > free:
            n = free
        t = (p.head + p.n) % size
        for i in range(n):
            p.buf[(t + i) % size] = buf[off + i]
        p.n += n
        return n

    def close(self):
        self.closed = True

    def readable(self):
        return self.n > 0 or self.closed or self.peer.closed
