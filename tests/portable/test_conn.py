# conn.Conn's reads: exact by default; with a larger head a small packet
# comes in one read, and what was read past it waits, intact, for the next
# recv(). Runs under pytest and under MicroPython.
from umqtt3.conn import Conn


class Chunks:
    """A link that hands out the given byte strings, one per read at most,
    and counts the reads."""

    def __init__(self, *chunks):
        self.data = b"".join(chunks)
        self.cuts = []
        n = 0
        for c in chunks:
            n += len(c)
            self.cuts.append(n)
        self.pos = 0
        self.reads = 0

    def readinto(self, buf, n):
        self.reads += 1
        if self.pos == len(self.data):
            return None
        end = min(self.pos + n, [c for c in self.cuts if c > self.pos][0])
        k = end - self.pos
        buf[:k] = self.data[self.pos:end]
        self.pos = end
        return k


PUBACK = b"\x40\x02\x00\x07"
PINGRESP = b"\xd0\x00"
PUBLISH = b"\x30\x07\x00\x01tabcd"  # QoS 0, topic "t", payload "abcd"


def test_default_reads_are_exact():
    link = Chunks(PUBACK + PINGRESP)
    c = Conn(link, 64, 64)
    assert c.recv() == 4 and link.reads == 2  # header, then body
    c.done()
    assert c.recv() == 2 and bytes(c.rx[0:2]) == PINGRESP


def _ahead(c):
    # bytes read past the packet last consumed (rx[spent:got])
    return c.got - c.spent if c.spent else 0


def test_head_reads_a_small_packet_at_once_and_keeps_the_rest():
    link = Chunks(PUBACK + PINGRESP + PUBLISH)
    c = Conn(link, 64, 64, 0, 5)
    assert c.recv() == 4 and link.reads == 1  # the PUBACK in one read
    assert bytes(c.rx[0:4]) == PUBACK
    c.done()
    assert bytes(c.rx[0:4]) == PUBACK  # intact until the next recv()
    assert _ahead(c) == 1  # the first byte of the PINGRESP was read with it
    assert c.recv() == 2 and bytes(c.rx[0:2]) == PINGRESP
    c.done()
    assert _ahead(c) == 0
    assert c.recv() == len(PUBLISH) and bytes(c.rx[0:len(PUBLISH)]) == PUBLISH
    c.done()
    assert c.recv() == 0


def test_a_packet_cut_after_the_read_ahead_is_completed():
    # PUBACK and the first byte of a PUBLISH, then the rest
    link = Chunks(PUBACK + PUBLISH[:1], PUBLISH[1:])
    c = Conn(link, 64, 64, 0, 5)
    assert c.recv() == 4
    c.done()
    assert c.recv() == len(PUBLISH) and bytes(c.rx[0:len(PUBLISH)]) == PUBLISH


def test_dropping_what_was_read():
    link = Chunks(PUBACK + PINGRESP)
    c = Conn(link, 64, 64, 0, 5)
    assert c.recv() == 4
    c.got = 0
    c.done()  # a closed link: nothing of it is kept
    assert _ahead(c) == 0 and c.recv() == 0


def test_dropping_what_was_read_past_a_packet():
    # the link breaks after a packet whose read-ahead waits (a reconnect
    # drops it: got = 0, done()); the next link's first packet is read whole
    c = Conn(Chunks(PUBACK + PINGRESP), 64, 64, 0, 5)
    assert c.recv() == 4
    c.done()  # the PINGRESP's first byte waits
    c.got = 0
    c.done()
    c.link = Chunks(PUBLISH)
    assert c.recv() == len(PUBLISH) and bytes(c.rx[0:len(PUBLISH)]) == PUBLISH


def test_lengths_one_byte_and_longer_and_over_the_maximum():
    # recv() reads a one-byte remaining length itself and leaves longer
    # ones, and any packet over max_packet, to frame_len(), which refuses
    # before the body is read
    from umqtt3.client_codec import MQTTError
    body = b"\x00\x01t" + b"p" * 200  # remaining length 203: two bytes
    big = b"\x30\xcb\x01" + body
    link = Chunks(PUBACK + big + b"\x30\x7f" + b"\x00\x01t" + b"q" * 124)
    c = Conn(link, 512, 64, 0, 5)
    assert c.recv() == 4
    c.done()
    assert c.recv() == len(big) and bytes(c.rx[0:len(big)]) == big
    c.done()
    assert c.recv() == 129 and c.rx[128] == 0x71  # 127: the largest one-byte length
    c.done()
    for packet in (b"\x30\x0a" + b"\x00\x01t" + b"x" * 7, b"\x30\xcb\x01" + body):
        c = Conn(Chunks(packet), 512, 64, 11, 5)  # at most 11 bytes a packet
        try:
            c.recv()
        except MQTTError:
            pass
        else:
            raise AssertionError("a packet of %d bytes passed max_packet 11" % len(packet))
    c = Conn(Chunks(b"\x30\x09" + b"\x00\x01t" + b"x" * 6), 512, 64, 11, 5)
    assert c.recv() == 11  # exactly the maximum
