# umqtt3.compat: the platform layer must behave the same on both Pythons.
#
# Runs under pytest on CPython and under tests/mp/testrunner.py on MicroPython,
# so: plain functions and assert, no pytest import, nothing CPython-only at
# module level.
import sys

from umqtt3 import compat
from umqtt3.compat import ticks_add, ticks_diff

try:
    from unittest import SkipTest  # pytest reports it as a skip
except ImportError:
    class SkipTest(Exception):
        pass

MICROPYTHON = sys.implementation.name == "micropython"


def _period():
    # 2**30 on MicroPython's ports; compat.TICKS_PERIOD on CPython.
    return ticks_add(0, -1) + 1


def _cpython_only():
    if MICROPYTHON:
        raise SkipTest("CPython emulation only")


def _micropython_only():
    if not MICROPYTHON:
        raise SkipTest("needs micropython.heap_lock")


def test_device_never_loads_the_emulation():
    # compat/cpython.py is CPython's half: importing compat on MicroPython
    # must not load it (its code would cost the device RAM for nothing).
    if MICROPYTHON:
        assert "umqtt3.compat.cpython" not in sys.modules
        assert not hasattr(compat, "TICKS_PERIOD")
    else:
        assert "umqtt3.compat.cpython" in sys.modules
        assert compat.link is sys.modules["umqtt3.compat.cpython"].link


# ---------------------------------------------------------------- ticks

def test_ticks_period():
    p = _period()
    if MICROPYTHON:
        assert p == 1 << 30, p
    else:
        assert p == compat.TICKS_PERIOD == 1 << 30
    assert ticks_add(p - 1, 1) == 0
    assert ticks_add(0, -1) == p - 1
    t = compat.ticks_ms()
    assert 0 <= t < p, t


def test_ticks_add_diff_round_trip_near_wrap():
    p = _period()
    h = p // 2
    starts = (p - 1, p - 2, p - 5, 0, 1, 4, h - 1, h, h + 1, 12345)
    deltas = (0, 1, -1, 2, -2, 3, -3, 5, -5, 7, -7, 100, -100, 1000, -1000,
              h - 1, -(h - 1))
    for t in starts:
        for d in deltas:
            u = ticks_add(t, d)
            assert 0 <= u < p, (t, d, u)
            assert ticks_diff(u, t) == d, (t, d, u)
            assert ticks_diff(t, u) == -d, (t, d, u)
            assert ticks_add(u, -d) == t, (t, d, u)


def test_ticks_add_wraps():
    p = _period()
    assert ticks_add(p - 1, 1) == 0
    assert ticks_add(p - 5, 10) == 5
    assert ticks_add(3, -5) == p - 2
    assert ticks_add(p - 1, -(p // 2 - 1)) == p // 2


def test_ticks_diff_across_wrap():
    p = _period()
    # Either side of the wrap: small, and with the right sign.
    assert ticks_diff(1, p - 2) == 3
    assert ticks_diff(p - 2, 1) == -3
    assert ticks_diff(0, p - 1) == 1
    assert ticks_diff(p - 1, 0) == -1
    assert ticks_diff(4, p - 5) == 9
    assert ticks_diff(p - 5, 4) == -9
    # A deadline just past the wrap is still ahead of a time just before it.
    now = p - 3
    deadline = ticks_add(now, 10)
    assert deadline < now  # wrapped
    assert ticks_diff(deadline, now) > 0
    assert ticks_diff(deadline, ticks_add(now, 10)) == 0
    assert ticks_diff(deadline, ticks_add(now, 11)) < 0


def test_ticks_diff_range():
    # The answer always lies in [-period/2, period/2).
    p = _period()
    h = p // 2
    assert ticks_diff(h - 1, 0) == h - 1
    assert ticks_diff(h, 0) == -h
    assert ticks_diff(0, h) == -h
    assert ticks_diff(h + 1, 0) == -(h - 1)
    assert ticks_diff(p - 1, h) == h - 1


def test_ticks_add_refuses_delta_out_of_range():
    # MicroPython's ticks_add raises OverflowError for a delta outside
    # (-period/2, period/2): such a delta cannot come back out of
    # ticks_diff(ticks_add(t, d), t). The emulation must refuse it as well,
    # or code that works on the desktop fails on the device.
    p = _period()
    h = p // 2
    for d in (h, -h, h + 1, -h - 1, p, -p, 3 * p):
        try:
            u = ticks_add(0, d)
        except OverflowError:
            continue
        raise AssertionError("ticks_add(0, %d) returned %d" % (d, u))


def test_ticks_ms_wraps_cpython():
    # Start the emulated clock just before the wrap and sleep across it.
    _cpython_only()
    import time
    from umqtt3.compat import cpython  # the clock's offset lives with the emulation

    p = compat.TICKS_PERIOD
    saved = cpython._ticks_base
    try:
        for _ in range(5):
            now = int(time.monotonic() * 1000)
            cpython._ticks_base = (p - 40) - now
            t0 = compat.ticks_ms()
            compat.sleep_ms(80)
            t1 = compat.ticks_ms()
            if t0 >= p - 40:
                break  # read before the wrap (a slow machine may miss it)
        assert p - 40 <= t0 < p, t0
        assert 0 <= t1 < p // 2, t1  # wrapped
        d = ticks_diff(t1, t0)
        assert 79 <= d < 2000, d
        assert ticks_diff(t0, t1) == -d
        assert ticks_add(t0, d) == t1
    finally:
        cpython._ticks_base = saved
    # Restored: the clock reads the plain monotonic milliseconds again.
    want = int(time.monotonic() * 1000) & (p - 1)
    assert 0 <= ticks_diff(compat.ticks_ms(), want) < 1000


def test_ticks_ms_and_sleep():
    t0 = compat.ticks_ms()
    compat.sleep_ms(20)
    d = ticks_diff(compat.ticks_ms(), t0)
    assert 19 <= d < 5000, d


# ---------------------------------------------------------------- copy

def _copies():
    # copy (the broker's: native where the port has viper) and move (the
    # client's byte loop; the same function on CPython) must agree
    return (compat.copy, compat.move)


def test_copy_between_buffers():
    for copy in _copies():
        dst = bytearray(b"..........")
        copy(dst, 2, b"abcdef", 1, 4)
        assert dst == bytearray(b"..bcde....")
        copy(dst, 0, bytearray(b"XY"), 0, 2)
        assert dst == bytearray(b"XYbcde....")
        copy(dst, 8, memoryview(b"0123"), 2, 2)
        assert dst == bytearray(b"XYbcde..23")
        # The whole buffer, and a source that is itself a bytearray.
        src = bytearray(range(10))
        copy(dst, 0, src, 0, 10)
        assert dst == src
        assert dst is not src


def test_copy_zero_length():
    for copy in _copies():
        dst = bytearray(b"abc")
        copy(dst, 0, b"xyz", 0, 0)
        copy(dst, 3, b"xyz", 3, 0)  # both offsets at the end
        copy(dst, 1, dst, 2, 0)
        copy(dst, 0, b"", 0, 0)
        assert dst == bytearray(b"abc")


def test_copy_within_one_buffer():
    for copy in _copies():
        # Not overlapping, both directions.
        buf = bytearray(b"abcdefgh")
        copy(buf, 0, buf, 5, 3)
        assert buf == bytearray(b"fghdefgh")
        buf = bytearray(b"abcdefgh")
        copy(buf, 5, buf, 0, 3)
        assert buf == bytearray(b"abcdeabc")
        # Overlapping, moving towards the start (compacting a receive buffer).
        buf = bytearray(b"abcdefgh")
        copy(buf, 0, buf, 2, 6)
        assert buf == bytearray(b"cdefghgh")
        buf = bytearray(b"abcdefgh")
        copy(buf, 3, buf, 4, 4)
        assert buf == bytearray(b"abcefghh")
        # Onto itself.
        buf = bytearray(b"abcdefgh")
        copy(buf, 2, buf, 2, 5)
        assert buf == bytearray(b"abcdefgh")


def test_copy_overlapping_towards_end():
    for copy in _copies():
        # Overlapping with the destination after the source (making room in a
        # buffer). CPython's slice assignment copies as memmove does; the result
        # must be the same on MicroPython.
        for doff, soff, n in ((2, 0, 5), (1, 0, 7), (3, 1, 4), (7, 0, 1)):
            buf = bytearray(b"abcdefgh")
            want = bytearray(buf)
            want[doff:doff + n] = bytes(want[soff:soff + n])
            copy(buf, doff, buf, soff, n)
            assert buf == want, (doff, soff, n, buf)


def test_copy_out_of_range_keeps_length():
    # copy() writes into fixed buffers: a range past the end of either buffer
    # is an error, never a resize. On MicroPython the byte loop raises
    # IndexError (and the viper loop does not check at all, so this runs on
    # CPython only); the emulation must not quietly grow or shrink dst, which
    # would hide the caller's bug on the desktop.
    _cpython_only()
    for doff, src, soff, n in ((6, b"abcd", 0, 4), (0, b"ab", 0, 5), (8, b"a", 0, 1),
                               (0, b"abcdef", 4, 3)):
        dst = bytearray(8)
        try:
            compat.copy(dst, doff, src, soff, n)
        except (IndexError, ValueError):
            pass
        else:
            raise AssertionError("copy(dst[8], %d, src[%d], %d, %d) did not raise; len(dst) is now %d"
                                 % (doff, len(src), soff, n, len(dst)))
        assert len(dst) == 8


def test_copy_no_allocation():
    _micropython_only()
    dst = bytearray(80)
    src = b"0123456789abcdefghijklmnopqrstuvwxyz"
    rb = bytearray(src)

    def run():
        i = 0
        while i < 50:
            compat.copy(dst, 3, src, 1, 20)
            compat.copy(dst, 30, rb, 0, len(rb))
            compat.copy(rb, 0, rb, 4, 10)
            compat.copy(dst, 0, src, 0, 0)
            i += 1

    from support import locked
    locked(run)
    assert dst[3:23] == bytearray(src[1:21])


# ---------------------------------------------------------------- bytes

def test_as_bytes():
    assert compat.as_bytes("abc") == b"abc"
    assert compat.as_bytes("") == b""
    assert compat.as_bytes("\u00e9\u4e2d") == b"\xc3\xa9\xe4\xb8\xad"
    b = b"xyz"
    assert compat.as_bytes(b) is b
    ba = bytearray(b"xyz")
    assert compat.as_bytes(ba) is ba
    mv = memoryview(b"xyz")
    assert compat.as_bytes(mv) is mv


def test_as_bytes_subclasses_cpython():
    # CPython's as_bytes() skips isinstance() for exact bytes: a str
    # subclass (an enum's value, say) is still encoded, a bytes subclass
    # still returned as it is
    _cpython_only()

    class Name(str):
        pass

    class Raw(bytes):
        pass

    got = compat.as_bytes(Name("a/\u00e9"))
    assert got == b"a/\xc3\xa9" and type(got) is bytes
    r = Raw(b"a/b")
    assert compat.as_bytes(r) is r


def test_valid_utf8_cpython():
    _cpython_only()
    v = compat.valid_utf8
    ok = (b"", b"abc", b"a/b/c", b"\xc3\xa9", b"\xe4\xb8\xad", b"\xf0\x9f\x98\x80",
          b"\xef\xbf\xbf", b"\xf4\x8f\xbf\xbf", b"\xed\x9f\xbf", b"\xee\x80\x80")
    bad = (b"\x00", b"a\x00b",  # U+0000 [MQTT-1.5.3-2]
           b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\xaf", b"\xf0\x80\x80\xaf",  # overlong
           b"\xed\xa0\x80", b"\xed\xbf\xbf",  # surrogates
           b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xff",  # past U+10FFFF
           b"\x80", b"\xc3", b"\xe4\xb8", b"a\xc3", b"\xc3a")  # stray, truncated
    for s in ok:
        assert v(s, 0, len(s)), s
    for s in bad:
        assert not v(s, 0, len(s)), s
    # Spans: only the bytes inside count.
    buf = bytearray(b"\xff\xc3\xa9\x00")
    assert v(buf, 1, 2)
    assert not v(buf, 0, 3)
    assert not v(buf, 1, 3)
    assert not v(buf, 2, 1)  # a split sequence
    assert v(memoryview(b"\x00ab\x00"), 1, 2)


def test_valid_utf8_agrees_with_codec_fallback():
    # codec uses compat.valid_utf8 on CPython and its own byte checker on
    # MicroPython; the two must give the same answers.
    _cpython_only()
    from umqtt3 import client_codec

    samples = [b"", b"a", b"\x00", b"\x7f", b"\x80", b"\xbf", b"\xc0", b"\xc1",
               b"\xc2", b"\xdf", b"\xe0", b"\xed", b"\xee", b"\xef", b"\xf0",
               b"\xf4", b"\xf5", b"\xff"]
    conts = [b"", b"\x80", b"\x8f", b"\x90", b"\x9f", b"\xa0", b"\xbf", b"\xc0", b"a"]
    seen = 0
    for lead in samples:
        for c1 in conts:
            for c2 in conts:
                for c3 in (b"", b"\x80", b"\xbf"):
                    s = lead + c1 + c2 + c3
                    assert compat.valid_utf8(s, 0, len(s)) == client_codec._utf8_ok(s, 0, len(s)), s
                    seen += 1
    assert seen == len(samples) * len(conts) * len(conts) * 3


_NAMES = [b"", b"a/b", b"a+b", b"#", b"a/#", b"+/x", b"a\x00b", b"\x01", b"x\x1f", b"\x7f",
          b"\xc2\x80", b"\xc2\x9f", b"\xc2\xa0", b"caf\xc3\xa9", b"\xc3", b"\xed\xa0\x80",
          b"\xc0\xaf", b"\xef\xbb\xbf", b"a/b/c/d", b"//", b"\xf0\x9f\x98\x80/+"]


def test_topic_ok_agrees_with_the_codec_byte_checks():
    # codec's PUBLISH decode asks compat.topic_ok on CPython and checks
    # UTF-8 and wildcards byte by byte on MicroPython: the same answers,
    # for the span only (a byte either side is not looked at)
    _cpython_only()
    from umqtt3 import client_codec

    for t in _NAMES:
        for pad in (b"", b"#\x00"):
            buf = pad + t + pad
            off = len(pad)
            want = client_codec._utf8_ok(t, 0, len(t)) and b"+" not in t and b"#" not in t
            assert compat.topic_ok(buf, off, len(t)) == want, t


def test_name_levels_agrees_with_the_broker_loop():
    # broker_core.Core.name_ok asks compat.name_levels on CPython and loops on
    # MicroPython: the same refusals (control characters [MQTT-1.5.3-2],
    # too many levels) for every name, within its span only
    _cpython_only()
    from umqtt3 import broker_core
    from umqtt3.broker_core import Core
    from umqtt3.broker_limits import Limits
    from umqtt3.codec import MQTTError

    core = Core(Limits(max_levels=3))

    def outcome(buf, off, n, flt):
        try:
            core.name_ok(buf, off, n, flt)
            return 0
        except MQTTError as e:
            return e.code

    fast = broker_core.name_levels
    for t in _NAMES:
        for pad in (b"", b"\x01\xc2"):
            buf = bytearray(pad + t + pad)
            for flt in (0, 1, 2):
                got = outcome(buf, len(pad), len(t), flt)
                broker_core.name_levels = None
                try:
                    want = outcome(buf, len(pad), len(t), flt)
                finally:
                    broker_core.name_levels = fast
                assert got == want, (t, flt)
    assert outcome(b"a/b/c/d", 0, 7, 0) == 0x90 and outcome(b"a\x7f", 0, 2, 2) == 0x81


# ---------------------------------------------------------------- poll

def test_poll_constants():
    assert (compat.POLLIN, compat.POLLOUT, compat.POLLERR, compat.POLLHUP) == (1, 4, 8, 16)
    if not MICROPYTHON:
        import select

        assert compat.POLLIN == select.POLLIN
        assert compat.POLLOUT == select.POLLOUT
        assert compat.POLLERR == select.POLLERR
        assert compat.POLLHUP == select.POLLHUP


def _polled_pair():
    # a CPython socketpair (a, b) and a compat.poll with a registered for POLLIN
    if MICROPYTHON or compat.socket is None:
        raise SkipTest("needs a CPython socketpair")
    a, b = compat.socket.socketpair()
    p = compat.poll()
    p.register(a, compat.POLLIN)
    return a, b, p


def test_poll_ipoll_pairs():
    a, b, p = _polled_pair()
    try:
        assert list(p.ipoll(0)) == []
        b.send(b"x")
        got = list(p.ipoll(1000))
        assert len(got) == 1, got
        assert len(got[0]) == 2
        obj, ev = got[0]
        assert obj is a
        assert ev & compat.POLLIN
        assert a.recv(1) == b"x"
        assert list(p.ipoll(0)) == []
        # modify: ask for writability as well.
        p.modify(a, compat.POLLIN | compat.POLLOUT)
        got = list(p.ipoll(0))
        assert len(got) == 1 and got[0][0] is a and got[0][1] & compat.POLLOUT, got
        # The default mask is POLLIN | POLLOUT; a fresh socket is writable.
        p.modify(a, compat.POLLIN)
        p.register(b)
        got = list(p.ipoll(0))
        assert len(got) == 1 and got[0][0] is b and got[0][1] & compat.POLLOUT, got
        # Both ready at once: one pair per object.
        b.send(b"y")
        got = list(p.ipoll(1000))
        objs = [o for o, _ in got]
        assert len(got) == 2 and a in objs and b in objs, got
        # A file descriptor number comes back as itself.
        p.unregister(b)
        p.register(b.fileno(), compat.POLLOUT)
        got = [pair for pair in p.ipoll(0) if pair[0] is not a]
        assert got == [(b.fileno(), compat.POLLOUT)], got
        p.unregister(b.fileno())
        p.unregister(a)
        assert list(p.ipoll(0)) == []
        # poll() gives the same pairs as a list.
        p.register(a, compat.POLLIN)
        res = p.poll(0)
        assert isinstance(res, list) and len(res) == 1 and res[0][0] is a
        # Back to one object after two: ipoll names the one left (CPython
        # names a lone object without a look-up), whichever it is.
        p.register(b, compat.POLLOUT)
        p.unregister(a)
        got = list(p.ipoll(1000))
        assert len(got) == 1 and got[0][0] is b and got[0][1] & compat.POLLOUT, got
        p.register(a, compat.POLLIN)
        p.unregister(b)
        assert a.recv(16) == b"y"  # sent above, not read yet
        assert list(p.ipoll(0)) == []
        b.send(b"z")
        got = list(p.ipoll(1000))
        assert len(got) == 1 and got[0][0] is a and got[0][1] & compat.POLLIN, got
    finally:
        a.close()
        b.close()


def test_waiter_gives_the_events_of_the_poll():
    # waiter(p): p's wait for a caller that reads only the events (the
    # client's); on CPython select's own poll, with file numbers
    a, b, p = _polled_pair()
    try:
        wait = compat.waiter(p)
        assert list(wait(0)) == []
        b.send(b"x")
        got = list(wait(1000))
        assert len(got) == 1 and got[0][1] == compat.POLLIN, got
        p.modify(a, compat.POLLIN | compat.POLLOUT)  # the poller's changes count
        got = list(wait(0))
        assert len(got) == 1 and got[0][1] == compat.POLLIN | compat.POLLOUT, got
        b.close()
        p.modify(a, compat.POLLIN)
        assert a.recv(1) == b"x"
        got = list(wait(0))  # the peer is gone: readable (end of stream)
        assert len(got) == 1 and got[0][1] & compat.POLLIN, got
    finally:
        a.close()
        b.close()


# ---------------------------------------------------------------- link

def test_link_stream_methods_cpython():
    # compat.link gives a CPython socket MicroPython's stream methods: None
    # when it would block, the bytes moved otherwise, 0 at end of stream;
    # write(buf, off, n) sends that span only, small or large
    _cpython_only()
    a, b = compat.socket.socketpair()
    try:
        a.setblocking(False)
        b.settimeout(5)
        lk = compat.link(a)
        assert lk.fileno() == a.fileno()
        buf = bytearray(8)
        assert lk.readinto(buf, 5) is None
        b.send(b"abcdefg")
        assert lk.readinto(buf, 5) == 5 and buf[:5] == b"abcde"
        assert lk.readinto(buf, 5) == 2 and buf[:2] == b"fg"
        tx = bytearray(b"0123456789")
        assert lk.write(tx, 2, 3) == 3
        assert lk.write(tx, 8) == 2  # n < 0: to the end
        got = bytearray()
        while len(got) < 5:
            got += b.recv(16)
        assert got == b"23489"
        big = bytearray(range(256)) * 16  # past the size written as a copy
        assert lk.write(big, 50, 4000) == 4000
        got = bytearray()
        while len(got) < 4000:
            got += b.recv(4096)
        assert got == big[50:4050]
        n = 0
        while lk.write(big, 0, len(big)) is not None:
            n += 1  # fills the socket's buffers: then None, as on the device
            assert n < 100000
        b.shutdown(compat.socket.SHUT_WR)
        assert lk.readinto(buf, 8) == 0  # end of stream
        lk.close()
        assert a.fileno() == -1
    finally:
        a.close()
        b.close()


def test_a_failed_name_lookup_raises_its_own_error():
    # compat.aio's lookup (the bridge dials its upstream through it) hands
    # on the resolver's error with its errno and words, so that the
    # gateway's log says why; a one-argument OSError(n) has no errno on
    # CPython and says only the number
    if compat.socket is None:  # the WebAssembly port has no sockets
        _cpython_only()
    from umqtt3.compat.aio import lookup_start, lookup_done
    r = lookup_start("no-such-host.invalid", 1883)  # [RFC 2606]: never resolves
    deadline = ticks_add(compat.ticks_ms(), 30000)
    err = None
    while err is None:
        try:
            ai = lookup_done(r)
        except OSError as e:
            err = e
        else:
            assert ai is None, "resolved a .invalid name: %r" % (ai,)
            assert ticks_diff(deadline, compat.ticks_ms()) > 0, "the lookup never ended"
            compat.sleep_ms(10)
    assert err.errno, err.args
    if not MICROPYTHON:
        assert err.strerror, err.args  # the resolver's words, for the log
