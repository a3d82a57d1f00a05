# umqtt3.conn -- one framed, non-blocking MQTT connection over a stream.
#
# A "link" is anything with MicroPython's stream methods: readinto(buf, n)
# and write(buf, off, n), returning None when they would block and 0 bytes
# read at end of stream. MicroPython sockets (plain and TLS) are links as
# they are; on CPython compat.link() adapts a socket; transport.Pipe is an
# in-memory link pair for tests and for running broker and clients in one
# process (kept apart so that a device client never loads it).
#
# Reads are exact: the 2-byte header start, then any further length bytes,
# then the body, each read landing where it belongs in the receive buffer.
# So a packet is whole in rx[0:n] with no compaction, and reads at offsets
# 0..5 use views made once; only a packet that arrives in pieces costs a
# memoryview slice.
from .codec import frame_len


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
