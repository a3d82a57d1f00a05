"""A TCP relay on 127.0.0.1 in front of a real broker, for the tests that
need a network that misbehaves between the bridge and its upstream. It
passes whole MQTT packets, any number of connections, and can:

- lose one packet: the first of a type in one direction (drop_up,
  drop_down), and with cut break the link there and refuse connections
  until open();
- hold what the broker sends (its acks) on a link that stays up, until
  release() passes it on, in order: a slow upstream;
- mute what the broker sends: lost, from mute() until unmute(): a
  broker that stops answering;
- answer a connection's CONNECT in the broker's place: answer(connect)
  returns the reply (the link then closes), or None to pass it on;
- break_links(): break every link, and take the next connection;
- close(): break every link and take no more connections.

    r = Relay(upstream_port, drop_up=0x62, cut=True)   # the first PUBREL upward
    ... r.dropped, r.open() ... r.close()
    r.hold() ... r.release()
    r.mute() ... r.unmute()
    r = Relay(upstream_port, answer=lambda connect: b"\x20\x02\x00\x01")  # refuse all
"""
import socket
import threading


def frames(buf):
    # the whole MQTT packets at the head of buf, and the rest
    out = []
    while len(buf) >= 2:
        i, n, m = 1, 0, 1
        while buf[i] & 0x80:
            n += (buf[i] & 0x7F) * m
            m *= 128
            i += 1
            if i >= len(buf):
                return out, buf
        n += (buf[i] & 0x7F) * m
        end = i + 1 + n
        if len(buf) < end:
            break
        out.append(buf[:end])
        buf = buf[end:]
    return out, buf


def _first_packet(s):
    # the first whole packet from socket s, and what came after it
    buf = b""
    while True:
        pk, rest = frames(buf)
        if pk:
            return pk[0], b"".join(pk[1:]) + rest
        d = s.recv(4096)
        if not d:
            raise OSError("closed before a whole packet")
        buf += d


def _shut(socks):
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class Relay:
    def __init__(self, upstream_port, drop_up=None, drop_down=None, cut=False, answer=None):
        self.up_port = upstream_port
        self.answer = answer
        self.drop = {"up": drop_up, "down": drop_down}
        self.cut = cut
        self.dropped = []  # the packets lost by drop_up or drop_down (one at most)
        self.refusing = False
        self.socks = []
        self.lock = threading.Lock()
        self.holding = False
        self.kept = []  # what hold() kept from the broker: (socket, packet)
        self.muted = False
        self.lost = []  # the first bytes of what mute() lost, one per packet
        ls = self.ls = socket.socket()
        ls.bind(("127.0.0.1", 0))
        ls.listen(5)
        self.port = ls.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def open(self):
        """Take connections again after a cut."""
        self.refusing = False

    def hold(self):
        """Keep what the broker sends from now on (its PUBACKs, PUBRECs,
        PUBCOMPs: the link stays up, the acks wait)."""
        with self.lock:
            self.holding = True

    def release(self):
        """Pass on what was kept, in order, and hold no more."""
        with self.lock:
            for s, p in self.kept:
                try:
                    s.sendall(p)
                except OSError:
                    pass
            self.kept = []
            self.holding = False

    def mute(self, only=None):
        """Lose what the broker sends from now on (its acks never reach
        the bridge, whose client keeps its messages in flight); only: the
        first bytes of the packets to lose (0x70: PUBCOMP), the rest passes."""
        with self.lock:
            self.muted = only or True

    def unmute(self):
        with self.lock:
            self.muted = False

    def break_links(self):
        """Break every link: the bridge connects again."""
        _shut(self.socks)
        for s in self.socks:
            s.close()
        self.socks = []

    def close(self):
        """Break every link and take no more connections."""
        self.refusing = True
        self.ls.close()
        self.break_links()

    def _accept(self):
        while True:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            if self.refusing:
                c.close()
                continue
            threading.Thread(target=self._link, args=(c,), daemon=True).start()

    def _link(self, c):
        # one connection: answered here, or linked to the broker
        head = b""
        try:
            if self.answer is not None:
                connect, head = _first_packet(c)
                reply = self.answer(connect)
                if reply is not None:
                    c.sendall(reply)
                    c.close()
                    return
                head = connect + head
            u = socket.create_connection(("127.0.0.1", self.up_port))
        except OSError:  # the node went, or the broker is down: so is this link
            c.close()
            return
        self.socks += [c, u]
        threading.Thread(target=self._pump, args=(u, c, "down"), daemon=True).start()
        self._pump(c, u, "up", head)

    def _pump(self, a, b, way, buf=b""):
        try:
            while True:
                pk, buf = frames(buf)
                for p in pk:
                    if p[0] == self.drop[way] and not self.dropped:
                        self.dropped.append(p)
                        if self.cut:
                            self.refusing = True
                            self.break_links()
                            return
                        continue
                    with self.lock:
                        if way == "down" and self.muted and (
                                self.muted is True or p[0] in self.muted):
                            self.lost.append(p[0])
                            continue
                        if way == "down" and self.holding:
                            self.kept.append((b, p))
                        else:
                            b.sendall(p)
                d = a.recv(4096)
                if not d:
                    break
                buf += d
        except OSError:
            pass
        _shut((a, b))
