# umqtt3.topic -- filter matching (and, from the codec, the name and filter rules).
#
# Everything works on a buffer, an offset and a length (bytes, bytearray or a
# receive buffer) so matching a received topic against subscriptions walks
# bytes in place: no split(), no per-call lists, no allocation.
from .compat import const, as_bytes
# the rules for names and filters live in the codec, which checks every
# topic it encodes or decodes: a client loads this module only to match
from .codec import valid_name, valid_filter  # noqa: F401

_SLASH = const(0x2F)
_PLUS = const(0x2B)
_HASH = const(0x23)
_DOLLAR = const(0x24)


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
