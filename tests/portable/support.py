# Helpers for the portable tests: the same file runs under CPython (pytest)
# and MicroPython (tests/mp/testrunner.py), so nothing here may need pytest.
import sys
import binascii

try:
    import os
except ImportError:  # some MicroPython builds have no os
    os = None

MICROPYTHON = sys.implementation.name == "micropython"

try:
    # pytest reports unittest.SkipTest as a skip; testrunner.py goes by the
    # class name, so either runner sees a skip
    from unittest import SkipTest as _SkipBase
except ImportError:
    _SkipBase = Exception


class SkipTest(_SkipBase):
    """Raise inside a test to skip it."""


async def collect():
    """gc.collect() that has really run when it returns. The WebAssembly
    MicroPython only marks a collection as due and runs it once control is
    back in JavaScript, so an async test yields after asking."""
    import gc
    import asyncio
    gc.collect()
    await asyncio.sleep(0)
    gc.collect()
    await asyncio.sleep(0)


def raises(exc_type, fn, *args, **kw):
    """Call fn(*args, **kw), which must raise exc_type; return the exception."""
    try:
        fn(*args, **kw)
    except exc_type as e:
        return e
    raise AssertionError("did not raise " + exc_type.__name__)


def unhex(text):
    """bytes from hex text; spaces and newlines are ignored."""
    return binascii.unhexlify("".join(text.split()))


def tohex(b):
    return binascii.hexlify(bytes(b)).decode()


def _isdir(p):
    if os is None:
        return False
    try:
        return (os.stat(p)[0] & 0x4000) != 0
    except OSError:
        return False


def rmtree(d):
    """Remove directory d and everything in it; nothing if it is not there."""
    try:
        names = os.listdir(d)
    except OSError:
        return
    for n in names:
        p = d + "/" + n
        try:
            os.remove(p)
        except OSError:
            rmtree(p)
    os.rmdir(d)


def tempdir(name):
    """An empty directory for one test's store (MicroPython: /tmp/<name>)."""
    if os is None:
        raise SkipTest("needs os")
    if MICROPYTHON:
        try:
            os.mkdir("/tmp")
        except OSError:
            pass
        d = "/tmp/" + name
        rmtree(d)
        return d
    import tempfile
    return tempfile.mkdtemp(prefix=name + "-")


def _shared():
    # tests/mp/run.mjs copies ../shared to /shared inside the VM; elsewhere it
    # sits beside the checkout: <repo>/tests/portable/support.py -> <repo>/../shared
    if MICROPYTHON and _isdir("/shared"):
        return "/shared"
    here = __file__
    if not MICROPYTHON:
        here = os.path.abspath(here)
    parts = here.replace("\\", "/").split("/")
    return "/".join(parts[:-3] + [".."] + ["shared"])


SHARED = _shared()


def shared_path(rel):
    """Path of a file under the shared directory (vectors, seeds)."""
    return SHARED + "/" + rel


def have_shared(rel):
    if os is None:
        return False
    try:
        os.stat(shared_path(rel))
        return True
    except OSError:
        return False


def locked(fn, *args):
    """Run fn(*args) with the heap locked (MicroPython only): any allocation
    in it raises MemoryError. Returns fn's result. Still locked afterwards,
    it checks that the lock really refuses an allocation, so a zero-allocation
    test cannot pass because the lock did nothing."""
    import micropython

    held = False
    micropython.heap_lock()
    try:
        r = fn(*args)
        try:
            bytearray(8)
        except MemoryError:
            held = True
    finally:
        micropython.heap_unlock()
    assert held, "heap_lock did not stop allocation"
    return r


from umqtt3.codec import encode_ack, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP, SUBSCRIBE  # noqa: E402


def span(pkt, off, n):
    """A decoded span as bytes; None for an absent field (offset -1)."""
    return None if off < 0 else bytes(pkt.buf[off:off + n])


def entries(pkt):
    """(filter, options) of every SUBSCRIBE entry, or filters of UNSUBSCRIBE."""
    from umqtt3.codec_server import read_filter
    out = []
    i = pkt.payload_off
    while i < pkt.end:
        i = read_filter(pkt, i)
        f = span(pkt, pkt.f_off, pkt.f_len)
        out.append((f, pkt.opts) if pkt.type == SUBSCRIBE else f)
    return out


def answer_qos(c, p, ack=True):
    """A test peer's side of the QoS flows, for packet p just read on the
    transport.Conn c: PUBACK or PUBREC for a QoS 1/2 PUBLISH (when ack),
    PUBCOMP for PUBREL, PUBREL for PUBREC. Written apart from umqtt3.flow on
    purpose: the peers that test it must not share its code."""
    t = p.type
    if t == PUBLISH:
        if ack and p.qos:
            c.tlen = encode_ack(c.tx, c.tlen, PUBACK if p.qos == 1 else PUBREC, p.pid)
    elif t == PUBREL:
        c.tlen = encode_ack(c.tx, c.tlen, PUBCOMP, p.pid)
    elif t == PUBREC:
        c.tlen = encode_ack(c.tx, c.tlen, PUBREL, p.pid)
