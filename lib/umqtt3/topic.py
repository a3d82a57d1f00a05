# umqtt3.topic -- topic name and filter rules, and filter matching.
#
# Everything works on a buffer, an offset and a length (bytes, bytearray or a
# receive buffer) so matching a received topic against subscriptions walks
# bytes in place: no split(), no per-call lists, no allocation.
from .compat import const, as_bytes

_SLASH = const(0x2F)
_PLUS = const(0x2B)
_HASH = const(0x23)
_DOLLAR = const(0x24)


def valid_name(buf, off, n):
    """A topic name: 1..65535 bytes, no wildcards, no U+0000
    [MQTT-4.7.3-1, MQTT-4.7.3-2, MQTT-3.3.2-2]. UTF-8 is checked by the codec."""
    if not 0 < n < 65536:
        return False
    if not off and n == len(buf) and type(buf) is not memoryview:
        # a whole bytes/bytearray (what publish() gets): find() runs in C
        # and allocates nothing
        return buf.find(b"+") < 0 and buf.find(b"#") < 0 and buf.find(b"\x00") < 0
    for i in range(off, off + n):
        c = buf[i]
        if c == _PLUS or c == _HASH or c == 0:
            return False
    return True


def valid_filter(buf, off, n):
    """A topic filter: 1..65535 bytes; '+' fills a whole level
    [MQTT-4.7.1-3]; '#' is last and fills a whole level [MQTT-4.7.1-2]."""
    if not 0 < n < 65536:
        return False
    end = off + n
    for i in range(off, end):
        c = buf[i]
        if c == _PLUS or c == _HASH:
            if i > off and buf[i - 1] != _SLASH:
                return False
            if c == _HASH:
                if i != end - 1:
                    return False
            elif i + 1 < end and buf[i + 1] != _SLASH:
                return False
        elif c == 0:
            return False
    return True


def match_span(fbuf, foff, fn, tbuf, toff, tn):
    """Does the filter fbuf[foff:foff+fn] match the topic tbuf[toff:toff+tn]?
    Both must be valid. Topics starting with '$' are not matched by a filter
    starting with a wildcard [MQTT-4.7.2-1]."""
    i = foff
    fe = foff + fn
    j = toff
    te = toff + tn
    if tn and tbuf[toff] == _DOLLAR and fn and (fbuf[foff] == _PLUS or fbuf[foff] == _HASH):
        return False
    while i < fe:
        c = fbuf[i]
        if c == _HASH:
            return True  # the rest, including the parent level ("a/#" matches "a")
        if c == _PLUS:
            while j < te and tbuf[j] != _SLASH:
                j += 1
            i += 1
        else:
            while i < fe and fbuf[i] != _SLASH:
                if j >= te or tbuf[j] != fbuf[i]:
                    return False
                i += 1
                j += 1
            if j < te and tbuf[j] != _SLASH:
                return False
        # both sit at a '/' or at their end
        if i >= fe:
            return j >= te
        if j >= te:
            # only "/#" may follow a topic that ended here
            return fe - i == 2 and fbuf[i + 1] == _HASH
        i += 1
        j += 1
    return j >= te


def matches(filt, topic):
    """Convenience form on str/bytes."""
    f = as_bytes(filt)
    t = as_bytes(topic)
    return match_span(f, 0, len(f), t, 0, len(t))
