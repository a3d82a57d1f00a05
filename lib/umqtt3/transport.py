# umqtt3.transport -- one framed, non-blocking MQTT connection over a stream.
#
# A "link" is anything with MicroPython's stream methods: readinto(buf, n)
# and write(buf, off, n), returning None when they would block and 0 bytes
# read at end of stream. MicroPython sockets (plain and TLS) are links as
# they are; on CPython compat.link() adapts a socket; Pipe is an in-memory
# link pair for tests and for running broker and clients in one process.
#
# Reads are exact: the 2-byte header start, then any further length bytes,
# then the body, each read landing where it belongs in the receive buffer.
# So a packet is whole in rx[0:n] with no compaction, and reads at offsets
# 0..5 use views made once; only a packet that arrives in pieces costs a
# memoryview slice.
from .codec import frame_len, MQTTError, TOO_LARGE


class Closed(OSError):
    """The peer closed the connection (or the link failed)."""


class Conn:
    def __init__(self, link, rxsize=1024, txsize=1024, max_packet=0):
        self.link = link
        self.rx = bytearray(rxsize)
        self.tx = bytearray(txsize)
        self._rxv = memoryview(self.rx)
        # views at the offsets a header can end at: reads there never allocate
        self._at = [self.rx] + [self._rxv[i:] for i in range(1, 6)]
        self.max_packet = min(max_packet or rxsize, rxsize)
        self.got = 0  # bytes of the current packet in rx
        self.need = 2  # bytes wanted before looking again
        self.tlen = 0  # bytes queued in tx
        self.sent = 0  # of which already written

    # ------------------------------------------------------------ receive
    def recv(self):
        """Read what is available; return the length of a whole packet now in
        rx[0:n], or 0 if none is complete yet. Call done() after decoding."""
        link = self.link
        while True:
            got = self.got
            if got >= 2:
                n = frame_len(self.rx, 0, got, self.max_packet)
                if n:
                    if got == n:
                        return n
                    self.need = n
                else:
                    self.need = got + 1  # one more remaining-length byte
            want = self.need - got
            buf = self._at[got] if got < 6 else self._rxv[got:]
            r = link.readinto(buf, want)
            if r is None:
                return 0
            if not r:
                raise Closed("closed by peer")
            self.got = got + r

    def done(self):
        self.got = 0
        self.need = 2

    # ------------------------------------------------------------ send
    def space(self):
        return len(self.tx) - self.tlen

    def flush(self):
        """Write queued bytes; True when tx is empty afterwards."""
        while self.sent < self.tlen:
            r = self.link.write(self.tx, self.sent, self.tlen - self.sent)
            if not r:
                if r is None:
                    return False
                raise Closed("write failed")
            self.sent += r
        self.sent = self.tlen = 0
        return True

    def pending(self):
        return self.tlen - self.sent

    def close(self):
        try:
            self.link.close()
        except Exception:
            pass


def too_large():
    raise MQTTError("send buffer full", TOO_LARGE)


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
