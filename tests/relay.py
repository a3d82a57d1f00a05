"""A TCP relay on 127.0.0.1 in front of a real broker that loses one packet:
a network that drops a packet of one type in one direction once, and then,
with cut, breaks the link and refuses connections until opened again. Or a
slow upstream: hold() keeps everything the broker sends (its acks) until
release() passes it on, in order, on a link that stays up.

    r = Relay(upstream_port, drop_up=0x62, cut=True)   # the first PUBREL upward
    ... r.dropped, r.open() ... r.close()
    r.hold() ... r.kept ... r.release()
"""
import socket
import threading

from tools.procs import free_port


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


class Relay:
    def __init__(self, upstream_port, drop_up=None, drop_down=None, cut=False):
        self.port = free_port()
        self.up_port = upstream_port
        self.drop = {"up": drop_up, "down": drop_down}
        self.cut = cut
        self.dropped = []  # the packets lost (one at most)
        self.refusing = False
        self.socks = []
        self.lock = threading.Lock()
        self.holding = False
        self.kept = []  # what hold() kept from the broker: (socket, packet)
        ls = self.ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", self.port))
        ls.listen(5)
        threading.Thread(target=self._accept, daemon=True).start()

    def open(self):
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

    def close(self):
        self.refusing = True
        self.ls.close()
        self._cut()

    def _cut(self):
        for s in self.socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        self.socks = []

    def _accept(self):
        while True:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            if self.refusing:
                c.close()
                continue
            u = socket.create_connection(("127.0.0.1", self.up_port))
            self.socks += [c, u]
            threading.Thread(target=self._pump, args=(c, u, "up"), daemon=True).start()
            threading.Thread(target=self._pump, args=(u, c, "down"), daemon=True).start()

    def _pump(self, a, b, way):
        buf = b""
        try:
            while True:
                d = a.recv(4096)
                if not d:
                    break
                pk, buf = frames(buf + d)
                for p in pk:
                    if p[0] == self.drop[way] and not self.dropped:
                        self.dropped.append(p)
                        if self.cut:
                            self.refusing = True
                            self._cut()
                            return
                        continue
                    with self.lock:
                        if way == "down" and self.holding:
                            self.kept.append((b, p))
                        else:
                            b.sendall(p)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
