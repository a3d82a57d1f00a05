# A scripted MQTT 5 (or 3.1.1) server for the client's portable tests: one
# in-memory pipe per connection, answering one packet at a time, and a
# record of what the client sent. Written apart from the broker on purpose:
# the peer that tests the client must not share its code.
#
#     s = Server(connack_props=bytes([0x22, 0, 10]))   # Topic Alias Maximum 10
#     c = MQTTClient("id", "peer", level=5, connect_link=s.link, ...)
#     s.cleans, s.connects, s.publishes, s.subscribes, s.unsubscribes, s.pubacks,
#     s.pubrecs, s.links;
#     s.drop(); s.send(data); s.release = False (PUBRECs unanswered)
from support import answer_qos, entries, span
from umqtt3.transport import Pipe, Conn
from umqtt3.codec import (Packet, decode, CONNECT, PUBLISH, PUBACK, PUBREC, SUBSCRIBE,
                          UNSUBSCRIBE)
from umqtt3.codec_server import encode_connack, encode_suback, encode_unsuback


class PipePeer:
    """A server's end of a fresh in-memory pipe per connection, handed to
    the client as connect_link; step() (the subclass's) answers what the
    client sent when the client finds nothing to read."""
    size = 2048  # the server's buffers
    level = 5
    links = 0

    def link(self):
        # connect_link: a new connection
        self.links += 1
        self.end, other = Pipe.pair(4096)
        self.conn = Conn(other, self.size, self.size)
        self.pkt = Packet(self.level)
        return self

    # the client's link
    def readinto(self, buf, n):
        r = self.end.readinto(buf, n)
        if r is None:
            self.step()
            r = self.end.readinto(buf, n)
        return r

    def write(self, buf, off=0, n=-1):
        return self.end.write(buf, off, n)

    def close(self):
        self.end.close()

    def step(self):
        raise NotImplementedError


class Server(PipePeer):
    def __init__(self, connack_props=b"", level=5):
        self.connack_props = connack_props
        self.level = level
        self.session = False  # CONNACK's Session Present when Clean Start is 0
        self.cleans = []  # the Clean Start flag of each CONNECT
        self.publishes = []  # (topic, property bytes, payload) of each PUBLISH
        self.subscribes = []  # [(filter, options), ...] of each SUBSCRIBE
        self.unsubscribes = []  # [filter, ...] of each UNSUBSCRIBE
        self.pubacks = []  # the packet id of each PUBACK
        self.pubrecs = []  # the packet id of each PUBREC
        self.connects = []  # the property bytes of each CONNECT (MQTT 5)
        self.release = True  # False: PUBRECs go unanswered (ids held)

    def drop(self):
        # the link breaks
        self.end.close()

    def send(self, data):
        # bytes from the server (a PUBLISH to deliver)
        c = self.conn
        c.tx[c.tlen:c.tlen + len(data)] = data
        c.tlen += len(data)
        c.flush()

    def step(self):
        c = self.conn
        n = c.recv()
        if not n:
            return
        rx = c.rx
        if rx[0] >> 4 == CONNECT:
            # the flags byte: after the fixed header, "MQTT" and the level
            i = 1
            while rx[i] & 0x80:
                i += 1
            clean = rx[i + 1 + 7] & 2 != 0
            self.cleans.append(clean)
            if self.level == 5:
                p = self.pkt
                decode(p, rx, 0, n)
                self.connects.append(span(p, p.props_off, p.props_len))
            c.tlen = encode_connack(c.tx, c.tlen, self.session and not clean, 0, self.level,
                                    self.connack_props if self.level == 5 else None)
        else:
            p = self.pkt
            decode(p, rx, 0, n)
            if p.type == PUBLISH:
                self.publishes.append((span(p, p.topic_off, p.topic_len),
                                       span(p, p.props_off, p.props_len),
                                       span(p, p.payload_off, p.payload_len)))
            elif p.type == PUBACK:
                self.pubacks.append(p.pid)
            elif p.type == PUBREC:
                self.pubrecs.append(p.pid)
                if not self.release:
                    c.done()
                    return
            elif p.type == SUBSCRIBE:
                got = entries(p)
                self.subscribes.append(got)
                c.tlen = encode_suback(c.tx, c.tlen, p.pid, bytes([o & 3 for f, o in got]),
                                       self.level)
            elif p.type == UNSUBSCRIBE:
                got = entries(p)
                self.unsubscribes.append(got)
                c.tlen = encode_unsuback(c.tx, c.tlen, p.pid, bytes(len(got)), self.level)
            answer_qos(c, p)
        c.done()
        c.flush()
