# selftest -- checks umqtt3 on the board it is deployed to, and prints one
# report:
#
#   mpremote connect /dev/ttyUSB0 run firmware/selftest.py
#
# (lib/umqtt3 on the device's path, as the deploy puts it). One line per
# check, then the summary line "selftest: PASS ..." or "selftest: FAIL ...":
# - heap: gc.mem_free() before and after importing the codec and the client,
#   and the RAM that import took;
# - codec: byte-exact vectors from the MQTT texts (../shared/seeds), encoded
#   and decoded;
# - no allocation: the hot paths (PUBLISH encode and decode, the acks,
#   PINGREQ/PINGRESP, topic matching) under micropython.heap_lock(), then
#   the client's (publish QoS 0/1/2, receive QoS 1/2, ping) over an
#   in-memory pipe to a scripted broker;
# - store: a FileStore in a scratch directory: a QoS 2 message written, found
#   again by a new store as after a reset, deleted; nothing left behind.
#
# The same file runs under the WebAssembly MicroPython
# (node tools/mp/run.mjs --heap 2m firmware/selftest.py, see
# tests/test_selftest.py) and under CPython (PYTHONPATH=lib), where the heap
# checks are skipped. Options, where the port passes arguments (not mpremote):
#   --corrupt   flip a byte of the first vector: the report must say FAIL
#   --alloc     allocate in the topic-match step: the report must name it
#   --dir PATH  scratch directory for the store check
import gc
import sys

MICROPYTHON = sys.implementation.name == "micropython"

_results = [0, 0, 0]  # passed, failed, skipped


def report(status, name, detail=""):
    _results[("PASS", "FAIL", "SKIP").index(status)] += 1
    print("%s  %s%s" % (status, name, ": " + detail if detail else ""))


# ---------------------------------------------------------------- heap

def check_heap():
    """Import the client (which imports the codec) and measure what it took.
    Runs first, before anything of umqtt3 is loaded. mem_free() counts what
    a growable heap (ESP32, WebAssembly) may still add; the RAM the import
    took is the growth of mem_alloc()."""
    free = getattr(gc, "mem_free", None)  # MicroPython only
    if free is None:
        import umqtt3.client  # noqa: F401
        report("SKIP", "heap", "gc.mem_free() is MicroPython's")
        return
    if "umqtt3.client" in sys.modules:
        report("SKIP", "heap", "umqtt3.client was imported before the self-test (boot.py?)")
        return
    gc.collect()
    before = free()
    alloc = gc.mem_alloc()
    import umqtt3.client  # noqa: F401  (compat, codec, topic, flow, store, transport)
    gc.collect()
    used = gc.mem_alloc() - alloc
    after = free()
    detail = "free before import %d B, after codec + client %d B, import used %d B" % (
        before, after, used)
    report("PASS" if used > 0 else "FAIL", "heap", detail)


# ---------------------------------------------------------------- codec vectors
# name, protocol level, the exact bytes, the encoder call, the fields decode
# must give (topic and payload compared as bytes).

def vectors(c):
    P = c.encode_publish
    return [
        ("PUBLISH QoS 0, 3.1.1 (seed 001, example 1)", 4,
         b"\x30\x12\x00\x0csensors/temp22.5",
         lambda b: P(b, 0, "sensors/temp", b"22.5"),
         {"type": c.PUBLISH, "qos": 0, "retain": False, "topic": b"sensors/temp",
          "payload": b"22.5"}),
        ("PUBLISH QoS 1 retained, 3.1.1 (seed 001, example 2)", 4,
         b"\x33\x10\x00\x06status\x00\x01online",
         lambda b: P(b, 0, "status", b"online", qos=1, pid=1, retain=True),
         {"type": c.PUBLISH, "qos": 1, "pid": 1, "retain": True, "topic": b"status",
          "payload": b"online"}),
        ("PUBLISH QoS 1 id 10, 3.1 (seed 000)", 3,
         b"\x32\x07\x00\x03a/b\x00\x0a",
         lambda b: P(b, 0, "a/b", b"", qos=1, pid=10, level=3),
         {"type": c.PUBLISH, "qos": 1, "pid": 10, "topic": b"a/b", "payload": b""}),
        ("CONNECT MQIsdp with will, 3.1 (seed 003)", 3,
         b"\x10\x32\x00\x06MQIsdp\x03\x0e\x00\x0a\x00\x09sensor-17"
         b"\x00\x10status/sensor-17\x00\x07offline",
         lambda b: c.encode_connect(b, 0, "sensor-17", level=3, clean=True, keepalive=10,
                                    will_topic="status/sensor-17", will_msg=b"offline",
                                    will_qos=1),
         {"type": c.CONNECT, "level": 3, "keepalive": 10, "qos": 1,
          "topic": b"status/sensor-17", "payload": b"offline"}),
        ("SUBSCRIBE id 10, a/b QoS 1 and c/d QoS 2 (seed 003)", 4,
         b"\x82\x0e\x00\x0a\x00\x03a/b\x01\x00\x03c/d\x02",
         lambda b: c.encode_subscribe(b, 0, 10, [("a/b", 1), ("c/d", 2)]),
         {"type": c.SUBSCRIBE, "pid": 10}),
        ("PUBACK 0x644a reason 0x10, 5.0 (seed 002)", 5,
         b"\x40\x04\x64\x4a\x10\x00",
         lambda b: c.encode_ack(b, 0, c.PUBACK, 0x644A, rc=0x10, level=5, props=b""),
         {"type": c.PUBACK, "pid": 0x644A, "rc": 0x10}),
        ("PUBREL 0x11c2, 5.0 (seed 002)", 5,
         b"\x62\x03\x11\xc2\x00",
         lambda b: c.encode_ack(b, 0, c.PUBREL, 0x11C2, rc=0, level=5),
         {"type": c.PUBREL, "pid": 0x11C2, "rc": 0}),
        ("PINGREQ", 4, b"\xc0\x00",
         lambda b: c.encode_simple(b, 0, c.PINGREQ), {"type": c.PINGREQ}),
    ]


def check_vector(c, level, want, encode, fields):
    buf = bytearray(128)
    got = bytes(buf[:encode(buf)])
    if got != want:
        return "encoded %s, want %s" % (hexs(got), hexs(want))
    p = c.Packet(level)
    if c.decode(p, want, 0, len(want)) != fields["type"]:
        return "decoded as type %d" % p.type
    for k in fields:
        v = getattr(p, k)
        if k in ("topic", "payload"):
            v = bytes(v)
        if v != fields[k]:
            return "decoded %s %r, want %r" % (k, v, fields[k])
    return None


def hexs(b):
    return " ".join("%02x" % x for x in b)


def check_codec(corrupt):
    from umqtt3 import codec as c
    vs = vectors(c)
    if corrupt:
        # the hook that proves a wrong vector is reported
        name, level, want, enc, fields = vs[0]
        vs[0] = (name, level, want[:-1] + bytes([want[-1] ^ 1]), enc, fields)
    for name, level, want, enc, fields in vs:
        try:
            err = check_vector(c, level, want, enc, fields)
        except Exception as e:  # a crash is a failed check, not a stopped report
            err = "%s: %s" % (type(e).__name__, e)
        report("FAIL" if err else "PASS", "codec: " + name, err or "")
    # malformed: the seed's stated Remaining Length, 0x10, for the 18 bytes that
    # follow (3.1.1 section 2.2.3: it counts the variable header and payload)
    bad = b"\x30\x10\x00\x0csensors/temp22.5"
    try:
        c.decode(c.Packet(4), bad, 0, len(bad))
        err = "decoded"
    except c.MQTTError:
        err = None
    report("FAIL" if err else "PASS", "codec: wrong remaining length refused (seed 001)",
           err or "")


# ---------------------------------------------------------------- no allocation
# Plain module functions on one preallocated state object: a closure or *args
# would allocate by itself. The locked rounds repeat what a warm-up did first
# (the first decode of some packets imports a module).

class Hot:
    def __init__(self, c, topic):
        self.c = c
        self.tm = topic
        self.buf = bytearray(256)
        self.pkt = c.Packet(4)
        self.p5 = c.Packet(5)
        self.topic = b"sensors/node1/temp"
        self.filt = b"sensors/+/temp"
        self.other = b"sensors/+"  # one level short: no match
        self.payload = b"21.53"
        self.step = 0
        self.n = 0
        self.alloc = False  # --alloc: the hook that proves an allocation is caught


HOT_STEPS = ("", "PUBLISH encode + decode", "ack encode + decode",
             "PINGREQ/PINGRESP encode + decode", "topic match")


def hot_publish(h, pkt, level):
    c = h.c
    buf = h.buf
    h.step = 1
    qos = 0
    while qos < 3:
        end = c.encode_publish(buf, 0, h.topic, h.payload, qos, 7, False, False, level)
        c.decode(pkt, buf, 0, end)
        h.n += pkt.payload_len + pkt.qos
        qos += 1


def hot_acks(h, pkt, level):
    c = h.c
    buf = h.buf
    h.step = 2
    t = c.PUBACK
    while t <= c.PUBCOMP:
        end = c.encode_ack(buf, 0, t, 77, None, level)
        c.decode(pkt, buf, 0, end)
        h.n += pkt.pid
        t += 1


def hot_ping(h, pkt):
    c = h.c
    buf = h.buf
    h.step = 3
    end = c.encode_simple(buf, 0, c.PINGREQ)
    c.decode(pkt, buf, 0, end)
    end = c.encode_simple(buf, 0, c.PINGRESP)
    c.decode(pkt, buf, 0, end)
    h.n += pkt.type


def hot_match(h):
    m = h.tm.match_span
    h.step = 4
    f = h.filt
    t = h.topic
    if m(f, 0, len(f), t, 0, len(t)):
        h.n += 1
    o = h.other
    if m(o, 0, len(o), t, 0, len(t)):
        h.n += 100
    if h.alloc:
        h.n += len(t[1:])  # a bytes slice: a new object


def hot_round(h):
    hot_publish(h, h.pkt, 4)
    hot_publish(h, h.p5, 5)
    hot_acks(h, h.pkt, 4)
    hot_acks(h, h.p5, 5)
    hot_ping(h, h.pkt)
    hot_match(h)


def hot_rounds(h, k):
    while k:
        hot_round(h)
        k -= 1


def locked(name, fn, h, k, steps):
    """fn(h, k) with the heap locked. True if it allocated nothing and the
    lock then still refuses an allocation (so a pass cannot come from a lock
    that did nothing); else False, reported as a FAIL of `name` naming the
    step (steps[h.step]) that allocated. MemoryError is caught only after
    the unlock."""
    import micropython
    held = False
    try:
        micropython.heap_lock()
        try:
            fn(h, k)
            try:
                bytearray(8)
            except MemoryError:
                held = True
        finally:
            micropython.heap_unlock()
    except MemoryError:
        report("FAIL", name, "allocated in: " + steps[h.step])
        return False
    if not held:
        report("FAIL", name, "heap_lock did not stop an allocation")
    return held


def check_no_allocation(alloc=False):
    name = "no allocation: PUBLISH QoS 0/1/2 at 3.1.1 and 5.0, 4 acks, ping, topic match"
    try:
        import micropython
        micropython.heap_lock
    except (ImportError, AttributeError):
        report("SKIP", name, "needs micropython.heap_lock()")
        return
    from umqtt3 import codec, topic
    h = Hot(codec, topic)
    hot_round(h)  # warm-up, unlocked
    h.alloc = alloc
    one = h.n
    rounds = 20
    if not locked(name, hot_rounds, h, rounds, HOT_STEPS):
        return
    if h.n != one * (rounds + 1):
        report("FAIL", name, "rounds disagree: %d, want %d" % (h.n, one * (rounds + 1)))
    else:
        report("PASS", name, "%d rounds with the heap locked" % rounds)


# ---------------------------------------------------------------- client
# The client's steady state over an in-memory pipe (no network needed): a
# scripted broker answers from preallocated buffers, one packet each time the
# client finds nothing to read, so the blocking calls work in one thread.

class Peer:
    def __init__(self, c, connack, pipe):
        from umqtt3.transport import Conn
        self.c = c
        self.connack = connack
        self.conn = Conn(pipe, 256, 256)
        self.pkt = c.Packet(4)
        self.topic = b"selftest/in"
        self.payload = b"21.53"
        self.pid = 0
        self.published = 0  # PUBLISHes from the client

    def step(self):
        k = self.conn
        n = k.recv()
        if not n:
            return
        c = self.c
        p = self.pkt
        c.decode(p, k.rx, 0, n)
        t = p.type
        if t == c.CONNECT:
            k.tlen = self.connack(k.tx, k.tlen, False, 0)
        elif t == c.PUBLISH:
            self.published += 1
            if p.qos:
                k.tlen = c.encode_ack(k.tx, k.tlen, c.PUBACK if p.qos == 1 else c.PUBREC, p.pid)
        elif t == c.PUBREL:
            k.tlen = c.encode_ack(k.tx, k.tlen, c.PUBCOMP, p.pid)
        elif t == c.PINGREQ:
            k.tlen = c.encode_simple(k.tx, k.tlen, c.PINGRESP)
        k.done()
        k.flush()

    def send(self, qos):
        """A PUBLISH to the client."""
        k = self.conn
        self.pid = self.pid % 65535 + 1
        k.tlen = self.c.encode_publish(k.tx, k.tlen, self.topic, self.payload, qos, self.pid)
        k.flush()


class Link:
    """The client's end of the pipe: a read that finds nothing lets the peer
    answer first."""

    def __init__(self, pipe, peer):
        self.pipe = pipe
        self.peer = peer

    def readinto(self, buf, n):
        r = self.pipe.readinto(buf, n)
        if r is None:
            self.peer.step()
            r = self.pipe.readinto(buf, n)
        return r

    def write(self, buf, off=0, n=-1):
        return self.pipe.write(buf, off, n)

    def close(self):
        self.pipe.close()

    def make(self):
        return self  # MQTTClient's connect_link


class Box:
    """The client's raw callback and the state of the rounds."""

    def __init__(self, client, peer):
        self.cl = client
        self.peer = peer
        self.topic = b"selftest/out"
        self.payload = b"0123456789abcdef"
        self.got = 0
        self.step = 0

    def cb(self, pkt, redelivered):
        self.got += 1


CLIENT_STEPS = ("", "publish QoS 0", "publish QoS 1", "publish QoS 2", "receive QoS 1",
                "receive QoS 2", "ping")


def client_rounds(b, k):
    cl = b.cl
    while k:
        b.step = 1
        cl.publish(b.topic, b.payload, False, 0)
        b.step = 2
        cl.publish(b.topic, b.payload, False, 1)  # returns on PUBACK
        b.step = 3
        cl.publish(b.topic, b.payload, False, 2)  # returns on PUBCOMP
        b.step = 4
        b.peer.send(1)
        cl.wait_msg()
        b.step = 5
        b.peer.send(2)
        cl.wait_msg()
        for _ in range(4):  # PUBREL, answered with PUBCOMP
            cl.poll(0)
        b.step = 6
        cl.ping()
        for _ in range(4):
            if cl.ping_at is None:
                break
            cl.poll(0)
        k -= 1


def settled(b, rounds):
    """Every message of `rounds` rounds went both ways, and nothing waits."""
    cl = b.cl
    return (b.got == 2 * rounds and b.peer.published == 3 * rounds
            and not cl.inflight() and cl.ping_at is None)


def counts(b):
    return "%d received, %d published, %d in flight" % (
        b.got, b.peer.published, b.cl.inflight())


def check_client():
    name = "no allocation: client publish QoS 0/1/2, receive QoS 1/2, ping"
    try:
        import micropython
        micropython.heap_lock
    except (ImportError, AttributeError):
        report("SKIP", name, "needs micropython.heap_lock()")
        return
    from umqtt3 import codec
    from umqtt3.codec_server import encode_connack
    from umqtt3.client import MQTTClient
    from umqtt3.transport import Pipe
    mine, theirs = Pipe.pair(1024)
    peer = Peer(codec, encode_connack, theirs)
    link = Link(mine, peer)
    cl = MQTTClient("selftest", "pipe", keepalive=60, window=2, bufsize=256,
                    connect_link=link.make, timeout_ms=2000)
    b = Box(cl, peer)
    cl.set_callback(b.cb, raw=True)
    cl.connect()
    try:
        client_rounds(b, 2)  # warm-up, unlocked
        if not settled(b, 2):
            report("FAIL", name, "warm-up: " + counts(b))
            return
        rounds = 10
        if not locked(name, client_rounds, b, rounds, CLIENT_STEPS):
            return
        if not settled(b, 2 + rounds):
            report("FAIL", name, counts(b))
        else:
            report("PASS", name, "%d rounds with the heap locked" % rounds)
    finally:
        cl.disconnect()


# ---------------------------------------------------------------- flash store

def scratch_dir(arg):
    # relative: the current directory, "/" on a board after boot
    return arg or "_selftest_mq"


def remove_tree(path):
    # the store keeps flat files in one directory
    import os
    try:
        names = os.listdir(path)
    except OSError:
        return
    for n in names:
        os.remove(path + "/" + n)
    os.rmdir(path)


def exists(path):
    import os
    try:
        os.stat(path)
        return True
    except OSError:
        return False


def store_round(path):
    """Returns None or what went wrong."""
    import os
    from umqtt3 import codec
    from umqtt3.store import FileStore
    buf = bytearray(64)
    n = codec.encode_publish(buf, 0, "selftest/q2", b"exactly once", qos=2, pid=7)
    msg = bytes(buf[:n])
    s = FileStore(path, max_messages=4)
    s.out_add(7, 42, buf, 0, n)        # QoS 2 PUBLISH taken, key 42
    s.in_add(9, buf, 0, n)             # an inbound QoS 2 message not yet delivered
    # a new store on the same directory: what a reset leaves
    s = FileStore(path, max_messages=4)
    recs = s.recover()
    want = [(7, "p", 42, msg), (9, "u", -1, msg)]
    got = [(r[0], r[1], r[2], bytes(r[3])) for r in recs]
    if got != want:
        return "recovered %r, want %r" % (got, want)
    if not (s.accepted(42) and s.out_has(7) and s.in_has(9)):
        return "reopened store lost a record"
    s.out_rel(7)                       # PUBREC came: kept as a PUBREL to send
    s.out_del(7)                       # PUBCOMP came
    s.in_del(9)                        # PUBREL came and was answered
    left = sorted(os.listdir(path))
    if left != ["last"]:               # "last" keeps accepted(42) true after a reset
        return "files left after delete: %r" % (left,)
    s = FileStore(path, max_messages=4)
    if s.recover() or not s.accepted(42) or s.accepted(43):
        return "after the delete a reopened store has %r" % (s.recover(),)
    return None


def check_store(arg):
    name = "store: QoS 2 message written, recovered after a reopen, deleted"
    path = scratch_dir(arg)
    if exists(path):
        report("FAIL", name, "%s exists already: not a scratch directory" % path)
        return
    try:
        err = store_round(path)
    except Exception as e:
        err = "%s: %s" % (type(e).__name__, e)
    finally:
        remove_tree(path)
    if err and "FAT" in err:  # FileStore refuses FAT: not power-loss safe
        report("SKIP", name, err)
        return
    if not err and exists(path):
        err = "%s still there after the cleanup" % path
    report("FAIL" if err else "PASS", name, err or "in %s, nothing left behind" % path)


# ---------------------------------------------------------------- main

def value(args, flag):
    i = args.index(flag) + 1 if flag in args else 0
    return args[i] if 0 < i < len(args) else None


def run(check, *args):
    # a check that crashes is a failed check, and the report goes on
    try:
        check(*args)
    except Exception as e:
        report("FAIL", check.__name__, "%s: %s" % (type(e).__name__, e))


def main(args):
    impl = sys.implementation
    print("umqtt3 selftest: %s %s on %s" % (
        impl.name, ".".join(str(v) for v in impl.version[:3]), sys.platform))
    run(check_heap)
    if "umqtt3.client" in sys.modules:  # else nothing below can run
        run(check_codec, "--corrupt" in args)
        run(check_no_allocation, "--alloc" in args)
        run(check_client)
        run(check_store, value(args, "--dir"))
    gc.collect()
    free = getattr(gc, "mem_free", None)
    if free:
        print("heap: %d B free at the end" % free())
    ok, bad, skipped = _results
    print("selftest: %s (%d passed, %d failed, %d skipped)" % (
        "FAIL" if bad else "PASS", ok, bad, skipped))
    return not bad


class Failed(Exception):
    """Raised after the report when a check failed, so that mpremote,
    tools/mp/run.mjs and CPython all exit with status 1 (from a board's raw
    REPL a SystemExit does not reach mpremote as a failure)."""


if not main(getattr(sys, "argv", [])[1:]):
    raise Failed("see the FAIL lines above")
