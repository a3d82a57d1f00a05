# Topic names, topic filters and filter matching (umqtt3.topic).
#
# Runs under pytest on CPython and under tests/mp/testrunner.py on MicroPython,
# so: plain functions and assert, no pytest import, nothing CPython-only.
# References are to the OASIS MQTT 3.1.1 specification, section 4.7, whose
# topic rules MQTT 5.0 (section 4.7) keeps unchanged.
import sys

from umqtt3 import topic
from umqtt3.topic import valid_name, valid_filter, match_span, matches

try:
    from unittest import SkipTest  # pytest reports it as a skip
except ImportError:
    class SkipTest(Exception):
        pass

MICROPYTHON = sys.implementation.name == "micropython"


# ---------------------------------------------------------------- helpers

def _name_ok(s):
    b = s.encode() if isinstance(s, str) else s
    return valid_name(b, 0, len(b))


def _filter_ok(s):
    b = s.encode() if isinstance(s, str) else s
    return valid_filter(b, 0, len(b))


def _m(f, t):
    # Check the filter and topic the way a caller must before matching, then
    # match both in place and at an offset inside a larger buffer.
    fb = f.encode()
    tb = t.encode()
    assert valid_filter(fb, 0, len(fb)), f
    assert valid_name(tb, 0, len(tb)), t
    r = match_span(fb, 0, len(fb), tb, 0, len(tb))
    assert _m_padded(fb, tb) == r, (f, t)
    return r


def _m_padded(fb, tb):
    # Surround the spans with bytes that would change the answer if the
    # matcher looked outside them: separators, wildcards, '$' and letters.
    fbuf = bytearray(b"#/$a" + fb + b"/#b")
    tbuf = bytearray(b"a/$b$" + tb + b"/a/b")
    return match_span(fbuf, 4, len(fb), tbuf, 5, len(tb))


def _ref_filter_ok(b):
    # Reference for valid_filter: every level is '#' (only as the last
    # level), '+', or free of wildcards; 1..65535 bytes; no U+0000.
    if not 0 < len(b) < 65536 or b"\x00" in b:
        return False
    levels = b.split(b"/")
    last = len(levels) - 1
    for i in range(len(levels)):
        lev = levels[i]
        if b"#" in lev:
            if lev != b"#" or i != last:
                return False
        elif b"+" in lev and lev != b"+":
            return False
    return True


def _ref_match(f, t):
    # Reference matcher on whole levels (split on '/').
    if t[:1] == b"$" and f[:1] in (b"+", b"#"):
        return False  # [MQTT-4.7.2-1]
    fl = f.split(b"/")
    tl = t.split(b"/")
    for i in range(len(fl)):
        if fl[i] == b"#":
            return True  # the rest, and the parent level itself
        if i >= len(tl):
            return False
        if fl[i] != b"+" and fl[i] != tl[i]:
            return False
    return len(fl) == len(tl)


def _pack(items, sep):
    # Lay byte strings out in one buffer, each after `sep`; return the buffer
    # and bytearrays of their offsets and lengths.
    buf = bytearray(sep)
    offs = bytearray(len(items))
    lens = bytearray(len(items))
    for k in range(len(items)):
        offs[k] = len(buf)
        lens[k] = len(items[k])
        buf += items[k] + sep
    return buf, offs, lens


def _lcg(seed):
    # A tiny fixed-seed generator (the same sequence on every Python).
    state = [seed & 0x7FFFFFFF]

    def below(n):
        state[0] = (state[0] * 1103515245 + 12345) & 0x7FFFFFFF
        return (state[0] >> 12) % n

    return below


def _random_level(rnd, first):
    n = rnd(3)
    out = b""
    if first and rnd(6) == 0:
        out = b"$"
    for _ in range(n):
        out += b"ab"[rnd(2):][:1]
    return out


def _random_topic(rnd):
    while True:
        levels = [_random_level(rnd, True)]
        for _ in range(rnd(4)):
            levels.append(_random_level(rnd, False))
        t = b"/".join(levels)
        if t:  # a topic name has at least one character [MQTT-4.7.3-1]
            return t


def _random_filter(rnd, t):
    if rnd(2):
        # Derived from the topic so that many pairs match: some levels
        # become '+', the tail may become '#', a level may be changed.
        tl = t.split(b"/")
        out = []
        for i in range(len(tl)):
            k = rnd(8)
            if k == 0:
                out.append(b"#")
                break
            if k < 3:
                out.append(b"+")
            elif k == 3:
                out.append(_random_level(rnd, i == 0))
            else:
                out.append(tl[i])
        k = rnd(6)
        if k == 0 and out[-1] != b"#":
            out.append(b"#")
        elif k == 1 and out[-1] != b"#":
            out.append(_random_level(rnd, False))
        return b"/".join(out)
    while True:
        out = []
        n = 1 + rnd(4)
        for i in range(n):
            k = rnd(5)
            if k == 0:
                out.append(b"+")
            elif k == 1 and i == n - 1:
                out.append(b"#")
            else:
                out.append(_random_level(rnd, i == 0))
        f = b"/".join(out)
        if f:
            return f


# ---------------------------------------------------------------- names

def test_name_basic():
    for s in ("a", "/", "//", "a/b/c", "sport/tennis/player1", "/finance",
              "finance/", "$SYS/broker/load", "a b", "\u00e9t\u00e9/\u4e2d",
              "$", "a$b"):
        assert _name_ok(s), s


def test_name_no_wildcards():
    # [MQTT-4.7.1-1] wildcards may be used in filters, never in a topic name;
    # [MQTT-3.3.2-2] the topic name in a PUBLISH must not contain them.
    for s in ("#", "+", "a/#", "a/+", "a/+/b", "a#", "a+b", "+a", "sport/tennis/#",
              "$SYS/#", "/+"):
        assert not _name_ok(s), s


def test_name_length():
    # [MQTT-4.7.3-1] at least one character; a UTF-8 string holds at most
    # 65535 bytes.
    assert not _name_ok(b"")
    assert _name_ok(b"a" * 65535)
    assert not _name_ok(b"a" * 65536)


def test_name_no_nul():
    # [MQTT-4.7.3-2] topic names and filters must not include U+0000.
    for s in (b"\x00", b"a\x00", b"\x00a", b"a/\x00/b"):
        assert not _name_ok(s), s


def test_name_span_ignores_neighbours():
    buf = b"+ab/c#"
    assert valid_name(buf, 1, 4)  # "ab/c"
    assert not valid_name(buf, 0, 4)
    assert not valid_name(buf, 2, 4)
    assert not valid_name(buf, 1, 0)
    buf = bytearray(b"#\x00x/y\x00+")
    assert valid_name(buf, 2, 3)
    assert not valid_name(buf, 1, 3)


# ---------------------------------------------------------------- filters

def test_filter_valid_examples():
    for s in ("#", "+", "+/+", "/+", "+/", "sport/#", "sport/tennis/+",
              "sport/+/player1", "+/tennis/#", "sport/tennis/player1/#",
              "$SYS/#", "$SYS/monitor/+", "+/monitor/Clients", "/", "a//b",
              "a/+/+/#", "//#", "a/b"):
        assert _filter_ok(s), s


def test_filter_multi_level_wildcard():
    # [MQTT-4.7.1-2] '#' stands alone in its level and is the last character.
    for s in ("sport/tennis#", "sport/tennis/#/ranking", "#/", "##", "a#",
              "#a", "a/#b", "a/b#/c", "#/#", "a/#/"):
        assert not _filter_ok(s), s


def test_filter_single_level_wildcard():
    # [MQTT-4.7.1-3] '+' occupies an entire level, at any level.
    for s in ("sport+", "sport/+tennis", "+a", "a+", "a/+b/c", "a/b+/c",
              "++", "+/++", "+#", "+/#a"):
        assert not _filter_ok(s), s
    for s in ("+", "+/a", "a/+", "a/+/b", "+/+/+"):
        assert _filter_ok(s), s


def test_filter_length_and_nul():
    # [MQTT-4.7.3-1] at least one character; [MQTT-4.7.3-2] no U+0000.
    assert not _filter_ok(b"")
    for s in (b"\x00", b"a/\x00", b"\x00/#", b"+/\x00"):
        assert not _filter_ok(s), s
    assert _filter_ok(b"a" * 65535)
    assert not _filter_ok(b"a" * 65536)


def test_filter_span_ignores_neighbours():
    # Bytes just outside the span decide nothing.
    buf = b"x+y"
    assert valid_filter(buf, 1, 1)  # "+"
    assert not valid_filter(buf, 0, 2)  # "x+"
    assert not valid_filter(buf, 1, 2)  # "+y"
    buf = b"ab/#/c"
    assert valid_filter(buf, 0, 4)  # "ab/#"
    assert not valid_filter(buf, 0, 5)  # "ab/#/"
    assert valid_filter(buf, 3, 1)  # "#"
    buf = bytearray(b"a+/+#")
    assert valid_filter(buf, 2, 2)  # "/+"
    assert valid_filter(buf, 3, 1)  # "+"
    assert not valid_filter(buf, 3, 2)  # "+#"


def test_filter_brute_force_against_reference():
    # Every string of 1..4 characters over a, '/', '+' and '#'.
    alphabet = b"a/+#"
    count = 0
    for n in range(1, 5):
        idx = [0] * n
        while True:
            s = bytes([alphabet[k] for k in idx])
            assert valid_filter(s, 0, n) == _ref_filter_ok(s), s
            assert valid_name(s, 0, n) == (b"+" not in s and b"#" not in s), s
            count += 1
            p = 0
            while p < n and idx[p] == 3:
                idx[p] = 0
                p += 1
            if p == n:
                break
            idx[p] += 1
    assert count == 4 + 16 + 64 + 256


# ---------------------------------------------------------------- matching

def test_spec_examples_multi_level():
    # 4.7.1.2: "sport/tennis/player1/#" matches the level itself and below.
    f = "sport/tennis/player1/#"
    assert _m(f, "sport/tennis/player1")
    assert _m(f, "sport/tennis/player1/ranking")
    assert _m(f, "sport/tennis/player1/score/wimbledon")
    assert not _m(f, "sport/tennis/player2")
    assert not _m(f, "sport/tennis")
    # "sport/#" also matches the singular "sport".
    assert _m("sport/#", "sport")
    assert _m("sport/#", "sport/")
    assert _m("sport/#", "sport/tennis/player1")
    assert not _m("sport/#", "sports")
    assert not _m("sport/#", "spor")
    # "#" on its own matches every topic not starting with '$'.
    for t in ("sport", "/", "a/b/c", "/finance", "sport/"):
        assert _m("#", t), t


def test_spec_examples_single_level():
    # 4.7.1.3
    assert _m("sport/tennis/+", "sport/tennis/player1")
    assert _m("sport/tennis/+", "sport/tennis/player2")
    assert not _m("sport/tennis/+", "sport/tennis/player1/ranking")
    assert not _m("sport/+", "sport")
    assert _m("sport/+", "sport/")
    assert _m("+/+", "/finance")
    assert _m("/+", "/finance")
    assert not _m("+", "/finance")
    assert _m("+", "finance")
    assert _m("sport/+/player1", "sport/tennis/player1")
    assert not _m("sport/+/player1", "sport/tennis/player2")
    assert _m("+/tennis/#", "sport/tennis/player1/ranking")


def test_spec_examples_dollar_topics():
    # [MQTT-4.7.2-1] a filter starting with a wildcard does not match a
    # topic name starting with '$'.
    assert not _m("#", "$SYS/monitor/Clients")
    assert not _m("+/monitor/Clients", "$SYS/monitor/Clients")
    assert _m("$SYS/#", "$SYS/monitor/Clients")
    assert _m("$SYS/monitor/+", "$SYS/monitor/Clients")
    assert not _m("+", "$SYS")
    assert not _m("+/#", "$SYS/a")
    assert not _m("#", "$")
    assert _m("$SYS/#", "$SYS")
    assert _m("$SYS", "$SYS")
    # Only the first character of the topic counts.
    assert _m("+/$x", "a/$x")
    assert _m("a/+", "a/$x")
    assert _m("a/#", "a/$x/y")
    assert _m("#", "a$")


def test_literal_levels():
    assert _m("a/b", "a/b")
    assert not _m("a/b", "a/bc")
    assert not _m("a/bc", "a/b")
    assert not _m("a/b", "a/b/c")
    assert not _m("a/b/c", "a/b")
    assert not _m("a", "a/")
    assert not _m("a/", "a")
    assert _m("a/", "a/")
    assert not _m("ab", "a")
    assert not _m("a", "ab")
    # Topic names are case sensitive.
    assert not _m("ACCOUNTS", "Accounts")


def test_empty_levels():
    # "a//b" has an empty middle level, which '+' fills.
    assert _m("a/+/b", "a//b")
    assert not _m("a//b", "a/x/b")
    assert _m("a//b", "a//b")
    assert not _m("a//b", "a/b")
    assert not _m("a/b", "a//b")
    assert _m("+/+", "/")
    assert _m("/", "/")
    assert not _m("+", "/")
    assert _m("+/", "/")
    assert _m("/+", "/")
    assert _m("//#", "//")
    assert _m("//#", "///x")
    assert _m("//#", "/")  # "/" is the parent level of "//#"
    assert not _m("//#", "a")
    assert not _m("//#", "a/")
    assert _m("+/+/+", "//")
    assert not _m("+/+", "//")
    assert _m("a/+/#", "a//")
    assert _m("a/#", "a//")


def test_multi_level_with_parent():
    assert _m("a/+/#", "a/b")
    assert not _m("a/+/#", "a")
    assert _m("+/#", "a")
    assert _m("a/b/#", "a/b")
    assert not _m("a/b/#", "a/bc")
    assert not _m("a/b/#", "a")


def test_matches_convenience_forms():
    assert matches("sport/#", "sport/tennis")
    assert matches(b"sport/#", b"sport/tennis")
    assert matches("sport/+", b"sport/x")
    assert matches(bytearray(b"a/+"), memoryview(b"a/b"))
    assert not matches("sport/+", "sport")
    assert not matches("#", "$SYS/x")
    assert topic.matches is matches


def test_match_span_offsets():
    # Filters and topics inside larger receive buffers, at non-zero offsets.
    fbuf = bytearray(b"xxsport/+/player1/#yy")
    tbuf = bytearray(b"\x00\x05sport/tennis/player1/ranking!!")
    fo, fn = 2, len(b"sport/+/player1/#")
    to, tn = 2, len(b"sport/tennis/player1/ranking")
    assert match_span(fbuf, fo, fn, tbuf, to, tn)
    assert match_span(fbuf, fo, fn, tbuf, to, len(b"sport/tennis/player1"))
    assert not match_span(fbuf, fo, fn, tbuf, to, len(b"sport/tennis/player"))
    # The topic "tennis/player1" at offset 8 of the same buffer.
    assert match_span(b"+/player1", 0, 9, tbuf, 8, 14)
    assert not match_span(b"+/player1", 0, 9, tbuf, 8, 15)
    # A filter "+" at offset 8 of "xxsport/+/player1/#".
    assert match_span(fbuf, 8, 1, b"abc", 0, 3)
    assert not match_span(fbuf, 8, 1, b"a/c", 0, 3)
    # '$' just before the topic span is not the topic's first character...
    buf = b"$SYS/a"
    assert match_span(b"#", 0, 1, buf, 1, 5)  # "SYS/a"
    assert match_span(b"+/a", 0, 3, buf, 1, 5)
    # ...but '$' at the span start is, wherever the span sits.
    buf = b"ab$SYS/a"
    assert not match_span(b"#", 0, 1, buf, 2, 6)
    assert not match_span(b"+/a", 0, 3, buf, 2, 6)
    assert match_span(b"$SYS/a", 0, 6, buf, 2, 6)
    # Same for the filter: a '#' before the span is not the filter.
    assert match_span(b"#$SYS/+", 1, 6, buf, 2, 6)
    # A topic followed by more levels in the buffer: the span ends it.
    buf = b"a/b/c/d"
    assert match_span(b"a/+", 0, 3, buf, 0, 3)
    assert not match_span(b"a/+", 0, 3, buf, 0, 5)
    assert match_span(b"a/+/#", 0, 5, buf, 0, 3)
    assert match_span(b"+/c", 0, 3, buf, 2, 3)


def test_brute_force_against_reference():
    rnd = _lcg(20240607)
    hits = 0
    cases = 400
    for _ in range(cases):
        t = _random_topic(rnd)
        f = _random_filter(rnd, t)
        assert valid_name(t, 0, len(t)), t
        assert valid_filter(f, 0, len(f)) == _ref_filter_ok(f), f
        if not valid_filter(f, 0, len(f)):
            continue
        want = _ref_match(f, t)
        got = match_span(f, 0, len(f), t, 0, len(t))
        assert got == want, (f, t, got)
        assert _m_padded(f, t) == want, (f, t)
        if want:
            hits += 1
    # Both outcomes must be well represented, or the check proves little.
    assert cases // 5 < hits < cases * 4 // 5, hits


def _match_rounds(spans, rounds):
    # module level, not a closure: calling a closure with many captured
    # variables allocates on MicroPython
    fbuf, fo, fl, tbuf, to, tl, counts = spans
    got = 0
    checked = 0
    nf = len(fo)
    nt = len(to)
    r = 0
    while r < rounds:
        a = 0
        while a < nf:
            if valid_filter(fbuf, fo[a], fl[a]):
                checked += 1
            b = 0
            while b < nt:
                if r == 0 and a == 0 and valid_name(tbuf, to[b], tl[b]):
                    checked += 1
                if match_span(fbuf, fo[a], fl[a], tbuf, to[b], tl[b]):
                    got += 1
                b += 1
            a += 1
        r += 1
    counts[0] = got
    counts[1] = checked


def test_match_span_no_allocation():
    # MicroPython only: matching and validating on spans allocates nothing.
    if not MICROPYTHON:
        raise SkipTest("heap_lock is MicroPython's")

    filters = (b"sport/tennis/+", b"sport/#", b"+/+", b"$SYS/#", b"a//b", b"#")
    topics = (b"sport/tennis/player1", b"/finance", b"$SYS/x", b"a//b")
    fbuf, fo, fl = _pack(filters, b"..")
    tbuf, to, tl = _pack(topics, b"#/")
    want = 0
    for a in range(len(fo)):
        for b in range(len(to)):
            if _ref_match(bytes(fbuf[fo[a]:fo[a] + fl[a]]), bytes(tbuf[to[b]:to[b] + tl[b]])):
                want += 1
    assert want  # some pairs match

    from support import locked
    counts = [0, 0]
    locked(_match_rounds, (fbuf, fo, fl, tbuf, to, tl, counts), 20)
    got, checked = counts
    assert got == want * 20, (got, want)
    assert checked == len(fo) * 20 + len(to)
