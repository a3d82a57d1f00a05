# umqtt3.broker_subs -- who is subscribed to what, and who gets a topic.
#
# Each session keeps its own filters (Session.filters / fqos, in the order
# they were made: the store saves them so). Subs changes them and answers
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

    def add(self, s, buf, off, n, qos):
        """Add or replace [MQTT-3.8.4-3] a subscription of s; return the
        granted QoS, or 0x80 when the per-client limit is reached."""
        i = find_filter(s, buf, off, n)
        if i >= 0:
            s.fqos[i] = qos
            return qos
        if len(s.filters) >= self.max_subs:
            return 0x80
        self.restore(s, bytes(buf[off:off + n]), qos)
        return qos

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

    def match(self, tsrc, toff, tn):
        """Fill hit/hq with the sessions topic tsrc[toff:toff+tn] goes to;
        return how many. Allocates nothing once hit has grown to the
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
            j = 0
            m = len(fl)
            while j < m:
                f = fl[j]
                g = fq[j]
                if g > best and match_span(f, 0, len(f), tsrc, toff, tn):
                    best = g
                j += 1
            if best >= 0:
                if k < len(hit):
                    hit[k] = s
                else:
                    hit.append(s)
                if k >= len(hq):
                    self.hq = hq = hq + bytearray(len(hq))
                hq[k] = best
                k += 1
        return k

    def release(self, n):
        """Forget the first n hits (no session is kept alive by them)."""
        hit = self.hit
        i = 0
        while i < n:
            hit[i] = None
            i += 1
