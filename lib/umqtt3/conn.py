# umqtt3.conn -- one framed, non-blocking MQTT connection over a stream.
#
# A "link" is anything with MicroPython's stream methods: readinto(buf, n)
# and write(buf, off, n), returning None when they would block and 0 bytes
# read at end of stream. MicroPython sockets (plain and TLS) are links as
# they are; on CPython compat.link() adapts a socket; transport.Pipe is an
# in-memory link pair for tests and for running broker and clients in one
# process (kept apart so that a device client never loads it).
#
# Reads land where they belong in the receive buffer: the start of a packet
# (`head` bytes asked for, 2 by default: exact reads), then any further
# length bytes, then the body. So a packet is whole in rx[0:n], and reads at
# offsets 0..5 use views made once; only a packet that arrives in pieces
# costs a memoryview slice. With a larger `head` (the client's) a small
# packet, such as the PUBACK a QoS 1 publish waits for, comes in one read
# instead of two; the few bytes read past it are moved to the front on the
# next recv(), so the packet handed out stays intact until then.
from .compat import move
from .client_codec import frame_len


class Closed(OSError):
    """The peer closed the connection (or the link failed): errno 104, or 32
    when a write failed; no text, to keep strings out of RAM."""


class Conn:
    def __init__(self, link, rx=1024, tx=1024, max_packet=0, head=2):
        self.link = link
        # bytes asked for at a packet's start: at most 5, so that what follows
        # lands at an offset with a view made once (_at)
        self.head = min(head, 5, rx)
        self.last = 0  # length of the packet recv() returned
        self.spent = 0  # of rx[0:got], bytes done() consumed
        self.rx = bytearray(rx)
        self.tx = bytearray(tx)
        # views at the offsets a header can end at: reads there never allocate
        v = memoryview(self.rx)
        self._at = [self.rx] + [v[i:] for i in range(1, 6)]
        self.max_packet = min(max_packet or rx, rx)
        self.got = 0  # bytes of the current packet in rx
        self.need = 2  # bytes wanted before looking again
        self.tlen = 0  # bytes queued in tx
        self.sent = 0  # of which already written

    # ------------------------------------------------------------ receive
    def recv(self):
        """Read what is available; return the length of a whole packet now in
        rx[0:n], or 0 if none is complete yet. Call done() after decoding."""
        link = self.link
        s = self.spent
        if s:
            # bytes read past the last packet: the start of the next one
            self.got -= s
            move(self.rx, 0, self.rx, s, self.got)
            self.spent = 0
        while True:
            got = self.got
            if got >= 2:
                n = frame_len(self.rx, 0, got, self.max_packet)
                if n:
                    if got >= n:
                        self.last = n
                        return n
                    self.need = n
                else:
                    self.need = got + 1  # one more remaining-length byte
            want = self.need - got if got else self.head
            buf = self._at[got] if got < 6 else self._at[1][got - 1:]
            r = link.readinto(buf, want)
            if r is None:
                return 0
            if not r:
                raise Closed(104)  # closed by the peer
            self.got = got + r

    def done(self):
        """The packet recv() returned is consumed (set got to 0 first to
        drop everything read)."""
        if self.got > self.last > 0:
            self.spent = self.last  # moved at the next recv(): rx stays intact
        else:
            self.got = 0
            self.spent = 0  # (dropped with the rest: a read-ahead of a link now gone)
        self.last = 0
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
                raise Closed(32)  # write failed
            self.sent += r
        self.sent = self.tlen = 0
        return True

    def close(self):
        try:
            self.link.close()
        except Exception:
            pass
