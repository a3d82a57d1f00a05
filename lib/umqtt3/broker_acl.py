# umqtt3.broker_acl -- who may publish and subscribe to what: a topic ACL
# as mosquitto's acl_file writes it.
#
#     # before any user line: anonymous clients
#     topic read $SYS/#
#     user alice
#     topic readwrite home/#
#     topic deny home/secret
#     # every user: %u its user name, %c its client id
#     pattern write devices/%u/%c/#
#
# b.set_acl(text) (broker_core) parses it and loads this module. At CONNECT the core asks
# acl.grants(user, cid) for one client's Grants, its patterns with %u and
# %c filled in, so that checking a PUBLISH (may_write) scans byte patterns
# with topic.match_span and allocates nothing. A SUBSCRIBE is granted when a
# read pattern covers the whole filter (may_read) and no deny pattern covers
# it; when a deny pattern meets it (partly_denied), broker_subs checks each
# topic it delivers (may_receive). A '#' or '+' first level never covers nor
# meets a topic starting with '$' [MQTT-4.7.2-1]. No ACL: everything is
# allowed.
from .topic import match_span

READ = 1
WRITE = 2
DENY = 4
_ACCESS = {"read": READ, "write": WRITE, "readwrite": READ | WRITE, "deny": DENY}


def _bad_filter(t):
    # why t (str, %c / %u still in it) is no topic filter, or None:
    # '#' only as the whole last level, '+' only as a whole level
    levels = t.split("/")
    last = len(levels) - 1
    for i in range(len(levels)):
        v = levels[i]
        if v == "+" or (v == "#" and i == last):
            continue
        if "#" in v or "+" in v:
            return "'#' only as the whole last level and '+' only as a whole level " \
                   "(a comment goes on a line of its own)"
    return None


def parse(text):
    """An Acl from the text of an ACL file; ValueError names the line. A
    UTF-8 byte order mark at the start is taken off (mosquitto refuses it)."""
    if text[:1] == "\ufeff":
        text = text[1:]
    rules = []  # (user name or None, is a pattern, access, pattern)
    user = None
    n = 0
    for line in text.split("\n"):
        n += 1
        line = line.strip()
        if not line or line[0] == "#":
            continue
        words = line.split(None, 1)
        kw = words[0]
        rest = words[1].strip() if len(words) > 1 else ""
        if not rest:
            raise ValueError("line %d: %s without an argument" % (n, kw))
        if kw == "user":
            user = rest
            continue
        if kw != "topic" and kw != "pattern":
            raise ValueError("line %d: %r is not user, topic or pattern" % (n, kw))
        access = READ | WRITE
        parts = rest.split(None, 1)
        if parts[0] in _ACCESS:
            if len(parts) < 2:
                raise ValueError("line %d: %s %s without a topic" % (n, kw, parts[0]))
            access = _ACCESS[parts[0]]
            rest = parts[1].strip()
        why = _bad_filter(rest)
        if why is not None:
            # mosquitto would keep a trailing "# ..." as part of the topic
            # and silently grant or deny nothing
            raise ValueError("line %d: %r is no topic filter: %s" % (n, rest, why))
        rules.append((user, kw == "pattern", access, rest))
    return Acl(rules)


class Grants:
    """One client's patterns, as bytes: read, write, deny; and the user
    name they were made for (str, None: an anonymous client), which the
    broker's store keeps with a persistent session's record so that a
    restart grants the session the same (broker_store)."""

    def __init__(self, user=None):
        self.read = []
        self.write = []
        self.deny = []
        self.user = user

    def may_write(self, buf, off, n):
        """May the client publish to the topic buf[off:off+n]?"""
        return _allowed(self.deny, self.write, buf, off, n)

    def may_read(self, f):
        """May the client subscribe to filter f (bytes): a read pattern
        covers every topic it matches, and no deny pattern covers them all.
        A deny pattern that meets f (partly_denied) leaves it granted, each
        message checked at delivery (may_receive), as mosquitto does."""
        for p in self.deny:
            if covers(p, f):
                return False
        for p in self.read:
            if covers(p, f):
                return True
        return False

    def partly_denied(self, f):
        """Does a deny pattern meet filter f (bytes)? Then a granted f needs
        may_receive() for each message it matches."""
        for p in self.deny:
            if meets(p, f):
                return True
        return False

    def may_receive(self, buf, off, n):
        """May the client get a message on topic buf[off:off+n]: no deny
        pattern matches it and a read pattern does (allocates nothing)."""
        return _allowed(self.deny, self.read, buf, off, n)


def _allowed(deny, allow, buf, off, n):
    # no pattern of deny matches the topic buf[off:off+n] and one of allow does
    for p in deny:
        if match_span(p, 0, len(p), buf, off, n):
            return False
    for p in allow:
        if match_span(p, 0, len(p), buf, off, n):
            return True
    return False


def _dangerous(s):
    return s is not None and ("+" in s or "#" in s)


def _levels_to_plus(t):
    # every level naming %c or %u becomes '+': a deny pattern that cannot
    # be filled in safely denies the wider set, never less
    levels = t.split("/")
    for i in range(len(levels)):
        if "%c" in levels[i] or "%u" in levels[i]:
            levels[i] = "+"
    return "/".join(levels)


class Acl:
    def __init__(self, rules):
        self.rules = rules

    def grants(self, user, cid):
        """The Grants of a client with user name `user` (str or None) and
        client id `cid` (str). topic lines apply to their user (those before
        any user line to anonymous clients), pattern lines to everyone; a
        pattern naming %u does not apply to an anonymous client. A client
        whose id or user name has a '+' or '#' in it gets no read or write
        from pattern lines (mosquitto's rule since CVE-2017-7650: filled in,
        they would be wildcards over every client's topics), and its deny
        patterns deny every value of %c and %u."""
        g = Grants(user)
        bad = _dangerous(user) or _dangerous(cid)
        for u, pat, access, t in self.rules:
            if pat:
                if "%u" in t and user is None:
                    continue
                if bad:
                    if not access & DENY:
                        continue
                    t = _levels_to_plus(t)
                else:
                    if "%u" in t:
                        t = t.replace("%u", user)
                    t = t.replace("%c", cid)
            elif u != user:
                continue
            b = t.encode()
            if access & DENY:
                g.deny.append(b)
            if access & READ:
                g.read.append(b)
            if access & WRITE:
                g.write.append(b)
        return g


def _wild0(a, b):
    # level 0 of two filters: a wildcard there never meets nor covers a
    # name starting with '$' [MQTT-4.7.2-1]
    return (a == b"#" or a == b"+") and b[:1] == b"$"


def covers(p, f):
    """Does filter p match every topic filter f matches?"""
    pl = p.split(b"/")
    fl = f.split(b"/")
    if _wild0(pl[0], fl[0]):
        return False
    i = 0
    while i < len(pl):
        a = pl[i]
        if a == b"#":
            return True
        if i >= len(fl):
            return False
        b = fl[i]
        if b == b"#":
            return False
        if a != b"+" and (b == b"+" or a != b):
            return False
        i += 1
    return len(fl) == len(pl)


def meets(a, b):
    """Do filters a and b match some topic in common?"""
    al = a.split(b"/")
    bl = b.split(b"/")
    if _wild0(al[0], bl[0]) or _wild0(bl[0], al[0]):
        return False
    i = 0
    while i < len(al) and i < len(bl):
        x = al[i]
        y = bl[i]
        if x == b"#" or y == b"#":
            return True
        if x != b"+" and y != b"+" and x != y:
            return False
        i += 1
    # one ran out: the other must end too, or go on with "/#" alone
    # ("a/#" matches "a" [MQTT-4.7.1-2])
    rest = al[i:] if i < len(al) else bl[i:]
    return not rest or (len(rest) == 1 and rest[0] == b"#")
