# umqtt3.broker_subs -- who is subscribed to what, and who gets a topic.
#
# Each session keeps its own filters (Session.filters / fqos, in the order
# they were made: the store saves them so). fqos holds each subscription's
# options byte: its QoS, and at MQTT 5 no local (4), retain as published
# (8) and retain handling (0x30). Subs changes them and answers
# match(): the sessions a topic goes to, each once at its highest granted
# QoS [MQTT-3.3.5-1]. match() scans the sessions that have a subscription
# and their filters; on CPython (compat.TOPIC_MEMO) it remembers what the
# scan found per topic until the next change of any subscription, so a
# topic published again costs a dict lookup. On a device nothing is
# remembered: no RAM per topic, no allocation per match.
from .topic import match_span
from .compat import TOPIC_MEMO

# An options bit no SUBSCRIBE carries (bits 6-7 are reserved
# [MQTT-3.8.3-5]): a deny pattern of the ACL meets this filter, so each
# topic it matches is checked against its session's grants before it is
# delivered (broker_acl.Grants.may_receive). Set at SUBSCRIBE and when a
# client resumes its session; a filter without it costs no check.
ACL_CHECK = 0x40
# In Subs.hq, beside the QoS and retain as published: the session got it by
# a shared group's turn (its copy carries that subscription's identifier).
SHARED = 0x10


def _acl_ok(s, tsrc, toff, tn):
    g = s.grants
    return g is not None and g.may_receive(tsrc, toff, tn)


_SHARE = b"$share/"


def shared_at(f):
    """Where the filter of a shared subscription "$share/group/filter"
    starts in f, 0 for any other filter, -1 for a malformed one (no
    group, a wildcard in it, or no filter) [MQTT-4.8.2-1, MQTT-4.8.2-2]."""
    n = len(f)
    if n < 7 or f[0] != 36:
        return 0
    i = 1
    while i < 7:
        if f[i] != _SHARE[i]:
            return 0  # (byte by byte: a slice would allocate per message, _scan)
        i += 1
    while i < n and f[i] != 47:
        if f[i] == 43 or f[i] == 35:
            return -1
        i += 1
    if i == 7 or i + 1 >= n:
        return -1
    return i + 1


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
        self.hit = self._hit = []
        self.hq = self._hq = bytearray(8)
        # hit[i] a shared group's member (hq[i] & SHARED): hf[i] is the
        # group's filter, whose subscription identifier its copy carries
        self.hf = []
        # topic bytes -> (sessions, their hq) of the scan; None on a device
        self.memo = {} if TOPIC_MEMO else None
        self.added = False  # whether the last add() made a new subscription
        self.local = 0  # whether the last scan met a subscription with no local
        # shared subscriptions: [filter "$share/g/f", where f starts, member
        # sessions, the next to get one] per group and filter
        self.groups = []
        self.po = 0  # the options byte of the member _pick chose
        # hits of the last scan before the shared groups' (hq & SHARED)
        self.np = 0

    def add(self, s, buf, off, n, opts, sid=0):
        """Add or replace [MQTT-3.8.4-3] a subscription of s with options
        byte opts (and MQTT 5 subscription identifier sid, 0: none); return
        the granted QoS, or 0x80 when a per-session limit is reached: max_subs
        filters, or max_sub_bytes of them [MQTT-3.9.3-1]."""
        i = find_filter(s, buf, off, n)
        self.added = False
        self.forget()
        if i >= 0:
            s.fqos[i] = opts
            if sid or s.fsid is not None:
                self._sid(s)[i] = sid
            return opts & 3
        fl = s.filters
        if len(fl) >= self.max_subs:
            return 0x80
        mb = s.lim.max_sub_bytes
        if mb:
            k = n
            for f in fl:
                k += len(f)
            if k > mb:
                return 0x80
        self.restore(s, bytes(buf[off:off + n]), opts, sid)
        self.added = True
        return opts & 3

    def forget(self):
        """Subscriptions changed: what match() remembered is stale."""
        if self.memo:
            self.memo.clear()

    def _sid(self, s):
        # the session's subscription identifiers, made on first use
        if s.fsid is None:
            s.fsid = [0] * len(s.filters)
        return s.fsid

    def restore(self, s, f, qos, sid=0):
        """A filter back from the store (no limit: it was granted)."""
        self.forget()
        if not s.filters:
            self.subscribers.append(s)
        if sid or s.fsid is not None:
            self._sid(s).append(sid)
        s.filters.append(f)
        s.fqos.append(qos)
        k = shared_at(f)
        if k > 0:
            for g in self.groups:
                if g[0] == f:
                    g[2].append(s)
                    return
            self.groups.append([f, k, [s], 0])

    def remove(self, s, buf, off, n):
        i = find_filter(s, buf, off, n)
        if i < 0:
            return False
        self.forget()
        self._leave(s, s.filters[i])
        del s.filters[i]
        del s.fqos[i]
        if s.fsid is not None:
            del s.fsid[i]
        if not s.filters:
            self.subscribers.remove(s)
        return True

    def _leave(self, s, f):
        if shared_at(f) <= 0:
            return
        gs = self.groups
        for i in range(len(gs)):
            g = gs[i]
            if g[0] == f:
                g[2].remove(s)
                if not g[2]:
                    del gs[i]
                return

    def drop(self, s):
        """The session ended: its subscriptions go with it."""
        if s.filters:
            self.forget()
            self.subscribers.remove(s)
            for f in s.filters:
                self._leave(s, f)

    def ids(self, s, tsrc, toff, tn, gf=None, src=None):
        """The subscription identifiers one copy to s carries [MQTT-3.3.4-3
        (5.0)]: those of its subscriptions that are not shared and match
        the topic, in order, but a no local one's when s is the publisher
        (src), as it delivers nothing [MQTT-3.8.3-3 (5.0)]; or, for the
        copy a shared group's turn gave it (gf: the group's filter), that
        subscription's alone: each copy the identifier of the subscription
        it came by [MQTT-3.3.4-5]. (Allocates: only sessions that gave
        some.)"""
        out = []
        if gf is not None:
            sid = s.fsid[find_filter(s, gf, 0, len(gf))]
            if sid:
                out.append(sid)
            return out
        fl = s.filters
        for j in range(len(fl)):
            f = fl[j]
            if s.fsid[j] and not shared_at(f) and not (s.fqos[j] & 4 and s is src) \
                    and match_span(f, 0, len(f), tsrc, toff, tn):
                out.append(s.fsid[j])
        return out

    def match(self, tsrc, toff, tn, src=None):
        """Fill hit/hq with the sessions topic tsrc[toff:toff+tn] goes to;
        return how many. hq[i] is the highest granted QoS, plus 8 when a
        matching subscription retains as published. A subscription with no
        local does not get what its own session (src) published
        [MQTT-3.8.3-3 (5.0)]. Allocates nothing once hit has grown to the
        largest number of subscribers seen (and memo is None). With
        shared groups, their hits come last, from np on."""
        memo = self.memo
        if memo is None or self.groups:
            return self._scan(tsrc, toff, tn, src)
        key = bytes(tsrc[toff:toff + tn])
        e = memo.get(key)
        if e is None:
            # kept as anyone but a subscriber gets it: no local matters
            # only when the publisher is among the hits (a bridge's
            # subscriptions all have it: its topics are kept too)
            n = self._scan(tsrc, toff, tn, None)
            e = (self.hit[:n], bytes(self.hq[:n]), self.local)
            self.release(n)
            if len(memo) >= TOPIC_MEMO:
                memo.clear()
            memo[key] = e
        if e[2] and src is not None and src in e[0]:
            return self._scan(tsrc, toff, tn, src)  # what it gets depends on who publishes
        # the remembered lists, read-only, until release()
        self.hit = e[0]
        self.hq = e[1]
        return len(e[0])

    def _scan(self, tsrc, toff, tn, src):
        # match() by every filter of every subscriber; local: whether a
        # subscription with no local was among them
        sl = self.subscribers
        hit = self._hit
        hq = self._hq
        k = 0
        i = 0
        nl = 0
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
                nl |= o
                g = o & 3
                if f[0] == 36 and len(f) > 7 and f[1] == 115 and shared_at(f) > 0:
                    j += 1
                    continue  # a shared subscription: its group's turn, below
                if (g > best or (o & 8 and not rap)) and not (o & 4 and s is src) \
                        and match_span(f, 0, len(f), tsrc, toff, tn) \
                        and (o < 64 or _acl_ok(s, tsrc, toff, tn)):
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
                    self._hq = hq = hq + bytearray(len(hq))
                hq[k] = best | rap
                k += 1
        self.local = nl & 4
        self.hit = hit
        self.hq = hq
        self.np = k  # the shared groups' hits come after these
        for g in self.groups:
            f = g[0]
            fo = g[1]
            if match_span(f, fo, len(f) - fo, tsrc, toff, tn):
                k = self._one(g, k, tsrc, toff, tn)
        return k

    def _one(self, g, k, tsrc, toff, tn):
        # one member of a shared subscription's group gets it, in turn
        # [MQTT-4.8.2-3 (5.0): one delivery per group]: hit[k]
        s = self._pick(g, tsrc, toff, tn, None)
        if s is None:
            return k  # no member may read it
        hit = self._hit
        if k < len(hit):
            hit[k] = s
        else:
            hit.append(s)
        if k >= len(self._hq):
            self.hq = self._hq = self._hq + bytearray(len(self._hq))
        self._hq[k] = (self.po & 11) | SHARED  # QoS and retain as published
        hf = self.hf
        while len(hf) <= k:
            hf.append(None)
        hf[k] = g[0]
        return k + 1

    def _pick(self, g, tsrc, toff, tn, skip):
        # the member of group g whose turn it is, a connected one first; a
        # member the ACL does not let read the topic is passed over, and so
        # is skip (a session that is ending). None when no member may have
        # it; else the turn moves on and po is the member's options byte.
        m = g[2]
        n = len(m)
        i = g[3]
        f = g[0]
        first = -1  # the first member that may have it, connected or not
        fo = o = 0
        s = None
        j = 0
        while j < n:
            s = m[(i + j) % n]
            if s is not skip:
                o = s.fqos[find_filter(s, f, 0, len(f))]
                if not o & 64 or _acl_ok(s, tsrc, toff, tn):
                    if first < 0:
                        first = j
                        fo = o
                    if s.client is not None:
                        break
            j += 1
        if j >= n:
            if first < 0:
                return None
            j = first
            o = fo
            s = m[(i + j) % n]
        g[3] = (i + j + 1) % n
        self.po = o
        return s

    def turn(self, f, tsrc, toff, tn, skip):
        """The member of shared subscription f's group that gets the topic
        tsrc[toff:toff+tn] now, as match() would choose it, skip passed
        over; po its options byte. None: no other member may have it."""
        for g in self.groups:
            if g[0] == f:
                return self._pick(g, tsrc, toff, tn, skip)
        return None

    def mark(self, s, on):
        """Mark every subscription of s ACL_CHECK (on) or none. On: with
        s.grants None, a session restored from the store (whose user the
        ACL's grants need) gets nothing through them until its client
        connects (recheck). None: a mark stored under an ACL goes."""
        fq = s.fqos
        for j in range(len(fq)):
            fq[j] = fq[j] | 64 if on else fq[j] & ~64
        if fq:
            self.forget()

    def recheck(self, s, g):
        """A client with the ACL's Grants g resumes session s: its
        subscriptions g no longer grants go, those a deny pattern meets
        are marked ACL_CHECK, the others are not; s.grants is g. Returns
        how many went."""
        s.grants = g
        gone = 0
        fl = s.filters
        j = len(fl) - 1
        while j >= 0:
            f = fl[j]
            k = shared_at(f)
            ff = f[k:] if k > 0 else f
            if not g.may_read(ff):
                self.remove(s, f, 0, len(f))
                gone += 1
            elif g.partly_denied(ff):
                s.fqos[j] |= 64
            else:
                s.fqos[j] &= ~64
            j -= 1
        if fl:
            self.forget()
        return gone

    def release(self, n):
        """Forget the first n hits (no session is kept alive by them)."""
        hit = self._hit
        if self.hit is not hit:
            # remembered lists (forget() drops them with their sessions)
            self.hit = hit
            self.hq = self._hq
            return
        i = 0
        while i < n:
            hit[i] = None
            i += 1
