# umqtt3.broker_subs -- who is subscribed to what, and who gets a topic.
#
# Each session keeps its own filters (Session.filters / fqos, in the order
# they were made: the store saves them so). fqos holds each subscription's
# options byte: its QoS, and at MQTT 5 no local (4), retain as published
# (8) and retain handling (0x30). Subs changes them and answers
# match(): the sessions a topic goes to, each once at its highest granted
# QoS [MQTT-3.3.5-1]. Today match() scans the sessions that have a
# subscription and their filters; an index (a topic tree, say) can replace
# the scan behind the same three calls without the core noticing.
from .topic import match_span


def find_filter(s, buf, off, n):
    """Index of the filter buf[off:off+n] in session s, or -1."""
    fl = s.filters
    k = 0
    while k < len(fl):
        f = fl[k]
        if len(f) == n:
            j = 0
            while j < n and f[j] == buf[off + j]:
                j += 1
            if j == n:
                return k
        k += 1
    return -1


class Subs:
    def __init__(self, max_subs):
        self.max_subs = max_subs
        self.subscribers = []  # sessions with at least one filter
        # what the last match() found: hit[i] gets topic at QoS hq[i]
        self.hit = []
        self.hq = bytearray(8)
        self.added = False  # whether the last add() made a new subscription

    def add(self, s, buf, off, n, opts):
        """Add or replace [MQTT-3.8.4-3] a subscription of s with options
        byte opts; return the granted QoS, or 0x80 when the per-client limit
        is reached."""
        i = find_filter(s, buf, off, n)
        self.added = False
        if i >= 0:
            s.fqos[i] = opts
            return opts & 3
        if len(s.filters) >= self.max_subs:
            return 0x80
        self.restore(s, bytes(buf[off:off + n]), opts)
        self.added = True
        return opts & 3

    def restore(self, s, f, qos):
        """A filter back from the store (no limit: it was granted)."""
        if not s.filters:
            self.subscribers.append(s)
        s.filters.append(f)
        s.fqos.append(qos)

    def remove(self, s, buf, off, n):
        i = find_filter(s, buf, off, n)
        if i < 0:
            return False
        del s.filters[i]
        del s.fqos[i]
        if not s.filters:
            self.subscribers.remove(s)
        return True

    def drop(self, s):
        """The session ended: its subscriptions go with it."""
        if s.filters:
            self.subscribers.remove(s)

    def match(self, tsrc, toff, tn, src=None):
        """Fill hit/hq with the sessions topic tsrc[toff:toff+tn] goes to;
        return how many. hq[i] is the highest granted QoS, plus 8 when a
        matching subscription retains as published. A subscription with no
        local does not get what its own session (src) published
        [MQTT-3.8.3-3 (5.0)]. Allocates nothing once hit has grown to the
        largest number of subscribers seen."""
        sl = self.subscribers
        hit = self.hit
        hq = self.hq
        k = 0
        i = 0
        while i < len(sl):
            s = sl[i]
            i += 1
            fl = s.filters
            fq = s.fqos
            best = -1
            rap = 0
            j = 0
            m = len(fl)
            while j < m:
                f = fl[j]
                o = fq[j]
                g = o & 3
                if (g > best or (o & 8 and not rap)) and not (o & 4 and s is src) \
                        and match_span(f, 0, len(f), tsrc, toff, tn):
                    if g > best:
                        best = g
                    rap |= o & 8
                j += 1
            if best >= 0:
                if k < len(hit):
                    hit[k] = s
                else:
                    hit.append(s)
                if k >= len(hq):
                    self.hq = hq = hq + bytearray(len(hq))
                hq[k] = best | rap
                k += 1
        return k

    def release(self, n):
        """Forget the first n hits (no session is kept alive by them)."""
        hit = self.hit
        i = 0
        while i < n:
            hit[i] = None
            i += 1
