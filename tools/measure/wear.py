"""Flash wear of the stores: block erases per QoS 2 message on littlefs2.

    python -m tools.measure.wear                 500 messages, node and gateway
    python -m tools.measure.wear --messages 2000 --block-size 4096

littlefs2 is the C library MicroPython's vfs.VfsLfs2 is built from, run here
through the littlefs-python wrapper (pip install littlefs-python) on a block
device in RAM that counts erases, with MicroPython's VfsLfs2 settings (read
and program size 32, cache 128, lookahead 32, block_cycles 100) and the
block size of an ESP32's flash partition (4096). The WebAssembly MicroPython
has no VfsLfs2 (its vfs holds VfsPosix and VfsRom only), so the library runs
under CPython here, through the same files interface it uses on a device:
each write is a file opened, written and closed (littlefs commits on close),
each rename and remove one littlefs operation.

  node     the client's FileStore (lib/umqtt3/store.py) as MQTTClient drives
           it for QoS 2 publishes: out_add, out_rel at PUBREC, out_del at
           PUBCOMP (the newest record kept as `last`)
  gateway  the broker with a store (one file per record, as on littlefs): a
           persistent publisher sends QoS 2 messages to a persistent
           subscriber, every flow completed; per message that is the
           inbound id (.u, .d, removed), the subscriber's copy (.p, .r,
           removed)

Prints erases per message (goal: 0.2 or fewer) and blocks programmed.
"""
import argparse
import sys

from tools import args


CACHE = 128  # littlefs's cache: an erase block is a whole number of them


def block_size(text):
    """An erase block size littlefs takes: a multiple of CACHE bytes."""
    n = args.count(text)
    if n % CACHE:
        raise argparse.ArgumentTypeError("%d is not a multiple of %d" % (n, CACHE))
    return n


def lfs(block_size, blocks):
    """(a littlefs2 file system in RAM, its erase counter)."""
    try:
        import littlefs
    except ImportError:
        sys.exit("wear: littlefs-python is not installed (pip install littlefs-python)")

    class Counting(littlefs.UserContext):
        def __init__(self, size):
            littlefs.UserContext.__init__(self, size)
            self.erases = 0
            self.progs = 0

        def erase(self, cfg, block):
            self.erases += 1
            return littlefs.UserContext.erase(self, cfg, block)

        def prog(self, cfg, block, off, data):
            self.progs += 1
            return littlefs.UserContext.prog(self, cfg, block, off, data)

    ctx = Counting(block_size * blocks)
    fs = littlefs.LittleFS(context=ctx, block_size=block_size, block_count=blocks, read_size=32,
                           prog_size=32, cache_size=CACHE, lookahead_size=32, block_cycles=100)
    return fs, ctx


class LfsFiles:
    """store.OSFiles's interface over littlefs-python (no append: the
    broker's store takes one file per record, as on a device)."""

    def __init__(self, fs):
        self.fs = fs

    def write(self, path, data):
        with self.fs.open(path, "wb") as f:
            f.write(bytes(data))

    def read(self, path):
        try:
            with self.fs.open(path, "rb") as f:
                return f.read()
        except Exception as e:
            raise OSError(2, str(e))

    def rename(self, a, b):
        self.fs.rename(a, b)

    def remove(self, path):
        self.fs.remove(path)

    def listdir(self, path):
        return self.fs.listdir(path)

    def mkdir(self, path):
        try:
            self.fs.mkdir(path)
        except Exception:
            pass  # there already

    def sync_dir(self, path):
        pass  # littlefs commits each operation


def node(n, block_size, blocks):
    from umqtt3.codec import encode_publish
    from umqtt3.store import FileStore
    fs, ctx = lfs(block_size, blocks)
    st = FileStore("/mq", LfsFiles(fs), allow_fat=True)
    buf = bytearray(128)
    e0 = ctx.erases
    for i in range(n):
        pid = 1 + i % 65535
        k = encode_publish(buf, 0, b"node/1/t", b"reading %6d" % i, 2, pid)
        st.out_add(pid, i, buf, 0, k)
        st.out_rel(pid)
        st.out_del(pid)
    return ctx.erases - e0, ctx.progs


def gateway(n, block_size, blocks):
    from umqtt3.broker import Broker
    from umqtt3.codec import (encode_connect, encode_subscribe, encode_publish, encode_ack,
                              PUBREC, PUBREL, PUBCOMP)
    from umqtt3.transport import Pipe
    fs, ctx = lfs(block_size, blocks)
    b = Broker(port=None, store="/b", files=LfsFiles(fs), sys_interval=0, allow_fat=True)
    buf = bytearray(256)

    def client(cid, *pkts):
        mine, theirs = Pipe.pair(1 << 16)
        b.attach(theirs)
        mine.write(buf, 0, encode_connect(buf, 0, cid, 4, False, 0))
        for p in pkts:
            mine.write(buf, 0, p(buf))
        for _ in range(4):
            b.poll_once(0)
        drain(mine)
        return mine

    rx = bytearray(1 << 16)

    def drain(link):
        out = b""
        while True:
            k = link.readinto(rx, len(rx))
            if not k:
                return out
            out += bytes(rx[:k])

    s = client(b"s", lambda t: encode_subscribe(t, 0, 1, [(b"node/#", 2)]))
    p = client(b"p")
    e0 = ctx.erases
    for i in range(n):
        pid = 1 + i % 65535
        p.write(buf, 0, encode_publish(buf, 0, b"node/1/t", b"reading %6d" % i, 2, pid))
        b.poll_once(0)
        drain(p)  # PUBREC
        p.write(buf, 0, encode_ack(buf, 0, PUBREL, pid))
        b.poll_once(0)
        drain(p)  # PUBCOMP
        got = drain(s)  # the PUBLISH to the subscriber
        spid = _pid(got)
        s.write(buf, 0, encode_ack(buf, 0, PUBREC, spid))
        b.poll_once(0)
        drain(s)  # PUBREL
        s.write(buf, 0, encode_ack(buf, 0, PUBCOMP, spid))
        b.poll_once(0)
    if b.store_errors or b.errors:
        sys.exit("wear: the broker counted %d store errors, %d errors" % (b.store_errors, b.errors))
    return ctx.erases - e0, ctx.progs


def _pid(pkt):
    # the packet id of the one QoS 2 PUBLISH in pkt
    from umqtt3.codec import Packet, decode
    p = Packet(4)
    decode(p, pkt, 0, len(pkt))
    return p.pid


def main(argv=None):
    ap = args.parser("python -m tools.measure.wear", __doc__)
    ap.add_argument("--messages", type=args.count, default=500, help="QoS 2 messages per case")
    ap.add_argument("--block-size", type=block_size, default=4096,
                    help="bytes per erase block, a multiple of %d" % CACHE)
    ap.add_argument("--blocks", type=args.count, default=256, help="blocks in the partition")
    a = ap.parse_args(argv)
    print("littlefs2, %d blocks of %d bytes, %d QoS 2 messages per case"
          % (a.blocks, a.block_size, a.messages))
    print("%-8s %10s %14s %12s" % ("case", "erases", "erases/msg", "progs/msg"))
    for name, fn in (("node", node), ("gateway", gateway)):
        try:
            e, p = fn(a.messages, a.block_size, a.blocks)
        except Exception as x:
            # a partition too small for the store: littlefs refuses it, or the
            # broker's store fills and it closes the publisher's link
            if type(x).__module__.split(".")[0] not in ("littlefs", "umqtt3"):
                raise
            sys.exit("wear: %d blocks of %d bytes are too few for the %s's store (%s: %s): "
                     "give more --blocks" % (a.blocks, a.block_size, name, type(x).__name__, x))
        print("%-8s %10d %14.3f %12.1f" % (name, e, e / a.messages, p / a.messages))
    print("goal: 0.2 erases per message or fewer")


if __name__ == "__main__":
    main()
