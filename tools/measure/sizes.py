#!/usr/bin/env python3
"""How big is umqtt3 on a device: flash (.py and .mpy bytes), import RAM, connected RAM.

    python -m tools.measure.sizes                 readable table
    python -m tools.measure.sizes --markdown      the same as markdown tables (for the README)
    python -m tools.measure.sizes --check         only check that every module compiles with mpy-cross
    python -m tools.measure.sizes --peer PATH     compare with umqtt/simple.py at PATH
    python -m tools.measure.sizes --mqtt-as PATH  compare with mqtt_as.py / mqtt_async.py at PATH
    python -m tools.measure.sizes --no-source-lines   the same for .mpy files without line numbers
    python -m tools.measure.sizes --functions codec   .mpy bytes of each function and class
                                              of one module, largest first
    python -m tools.measure.sizes --steps         per client configuration, the heap each
                                              module adds imported one after the other
                                              (from .mpy), then what connecting adds
    python -m tools.measure.sizes --romfs         also import RAM and connected heap with the
                                              .mpy files in a ROMFS image (bytecode run
                                              in place, as from frozen modules)

Flash: every module of lib/umqtt3 (subpackages too) is compiled with
mpy-cross into a temporary directory. RAM: each module is imported in a
fresh WebAssembly MicroPython (tests/mp/run.mjs) and gc.mem_alloc() is read
before and after, once importing from .py (compiled on the device, as when
copied by hand) and once from .mpy (as installed by mip or deployed
precompiled). A module's figure includes what it imports (compat, codec, ...),
so the rows do not add up; the "all" and "client set" rows are measured by
importing those modules together. compat/cpython.py, CPython's half of
compat, is compiled but never imported on a device, so it has no RAM figure
and is in neither set.

Bytecode in flash (--romfs): the .mpy files, ours and the peers', are put
in one ROMFS image (mpremote's builder), which the VM reads into a bytes
object and mounts with vfs.VfsRom at /rom before the first reading, so the
image itself is not counted: it stands for memory-mapped flash. Imported
from there, bytecode and constant strings and bytes stay in the image, as
with ROMFS on a board (MicroPython 1.25+, firmware built with
MICROPY_VFS_ROM and a ROMFS partition) or frozen modules; what the heap
still holds is the module, class and function objects and their dicts.
These figures are extra columns beside the filesystem ones.

Connected client: per configuration (the default MemoryStore, a FileStore,
MQTT 5, no store), the heap in use after import, constructing the client, connect,
subscribe at QoS 1 and one QoS 1 publish, against a scripted broker inside
the same VM (plain Python: it loads nothing of umqtt3), from .mpy.

The peers are micropython-lib's umqtt.simple (PyPI micropython-umqtt.simple)
and PyPI's micropython-mqtt (mqtt_async.py, a fork of mqtt_as; a file called
mqtt_as.py is taken too, at import only), measured in the same run. Their
PyPI uploads are sdists without setup.py, so pip cannot install them:
`python -m tools.measure.peers` (make peers) unpacks them under build/peers/
(found there), or give the files with --peer / --mqtt-as (or UMQTT_PEER /
MQTT_AS_PEER); a peer not found is left out. Stand-ins for what they import
and the WebAssembly build lacks (usocket, machine, network, uasyncio's
streams) are imported before the first reading; usocket's socket() and
uasyncio's open_connection() reach the scripted broker.

Modules that do not exist yet are skipped. Exit status: 1 if a module does not
compile (or cannot be imported when measuring RAM), 2 if a tool is missing
(node, the WebAssembly MicroPython, mpy-cross; mpremote for --romfs).
"""

import argparse
import ast
import os
import re
import shutil
import subprocess
import sys
import tempfile

from tools import args as _args
from tools.device import devices

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN_MJS = os.path.join(REPO, "tests", "mp", "run.mjs")
WASM_PKG = os.path.join(REPO, "node_modules", "@micropython", "micropython-webassembly-pyscript")

# Listed bottom layer first (see docs); any other module found is appended.
ORDER = ["compat", "client_codec", "codec", "topic", "props", "flow", "memstore", "nostore", "store", "conn",
         "transport", "client_core", "client", "aio", "broker", "__init__"]
# What a sensor node needs to talk MQTT: the fair comparison with umqtt.simple.
# what `from umqtt3.client import MQTTClient` and its default MemoryStore load
CLIENT_SET = ["compat", "client_codec", "memstore", "client_core", "client"]
# CPython's half of compat: compiled (so --check covers it) but never imported
# on a device, so it has no import RAM and is left out of the sets. (The
# desktop commands are not in lib/umqtt3: lib/umqtt3_cli, never measured here.)
CPYTHON_ONLY = ["compat/cpython"]
PACKAGES = set()  # module keys that are packages; filled by main()


def die(msg, code=2):
    print("sizes: " + msg, file=sys.stderr)
    sys.exit(code)


def device_tool(fn, *args):
    # deploy's tool plumbing (tools/device/devices.py), its one-line error ours
    try:
        return fn(*args)
    except devices.Usage as e:
        die(e.msg)


def mpy_cross_cmd():
    return device_tool(devices.mpy_cross)


def find_modules(lib):
    """Module keys under lib: "codec", "compat" (a package: compat/__init__.py),
    "compat/cpython"; bottom layer first."""
    found = []
    for dirpath, dirnames, files in os.walk(lib):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "__pycache__")))
        rel = os.path.relpath(dirpath, lib).replace(os.sep, "/")
        for f in files:
            if f.endswith(".py"):
                m = f[:-3] if rel == "." else rel + "/" + f[:-3]
                found.append(m[:-len("/__init__")] if m.endswith("/__init__") else m)
    return [m for m in ORDER if m in found] + sorted(m for m in found if m not in ORDER)


def source_path(mod):
    """A module key's source, relative to the package directory."""
    return mod + ("/__init__.py" if mod in PACKAGES else ".py")


def compile_mpy(cmd, src, dst, name):
    """Compile src to dst; returns None or mpy-cross's error text. name is the
    source name stored in the .mpy (as a device would see it), so sizes do not
    depend on where the temporary directory is."""
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    p = subprocess.run(cmd + ["-s", name, "-o", dst, src], capture_output=True, text=True)
    if p.returncode != 0:
        return (p.stderr or p.stdout).strip() or "mpy-cross exit %d" % p.returncode
    return None


def dotted(mod):
    return "umqtt3" if mod == "__init__" else "umqtt3." + mod.replace("/", ".")


# Mounts the ROMFS image (--romfs) when the directory to import from is
# under /rom. The image is read into a bytes object before the first reading:
# it stands for memory-mapped flash, which a board's heap does not hold.
ROM_IMAGE = "/img/umqtt3.romfs"
MOUNT_ROM = """\
def mount_rom(root):
    if root.startswith("rom/"):
        import vfs
        with open("%s", "rb") as f:
            vfs.mount(vfs.VfsRom(f.read()), "/rom")

""" % ROM_IMAGE

# Runs inside MicroPython. argv: which directory to import from (py, mpy,
# peer_py, peer_mpy, or rom/ and one of those), then the module names.
# Prints "RAM <bytes>" or "ERR <exception>".
# The WebAssembly port's gc.collect() only marks a collection as due: it runs
# once control is back in JavaScript. So the probe is a coroutine the runner
# awaits (mp_await), and every collect is followed by a yield.
# A collection that has really run (see above), for both probes.
COLLECT = """\
async def collect():
    gc.collect()
    await asyncio.sleep(0)
    gc.collect()
    await asyncio.sleep(0)
"""

PROBE = """\
import sys, gc, asyncio
which = sys.argv[1]
""" + MOUNT_ROM + """mount_rom(which)
sys.path[:] = ["/" + which]
if "peer" in which:
    sys.path += ["/stubs", "/probe"]
    import usocket, machine, network, uasyncio

""" + COLLECT + """
async def main():
    await collect()
    before = gc.mem_alloc()
    try:
        for name in sys.argv[2:]:
            __import__(name)
    except Exception as e:
        print("ERR %s: %s" % (type(e).__name__, e))
    else:
        await collect()
        print("RAM", gc.mem_alloc() - before)

mp_await = main()
"""


# A scripted broker for the connected-client figures, in plain Python so that
# it loads nothing of umqtt3: it answers CONNECT, SUBSCRIBE, a QoS 1/2 PUBLISH,
# PUBREL and PINGREQ as soon as they are written. It is a link for umqtt3
# (readinto/write with offsets) and a blocking socket for umqtt.simple
# (read/write(buf, n)); fakepeer.PEER is what the stub socket() returns.
FAKE_PEER = """\
PEER = None

class Peer:
    def __init__(self, level=4):
        self.v5 = level == 5
        self.inb = bytearray(1024)
        self.ni = 0
        self.out = bytearray(256)
        self.no = 0
        self.ro = 0

    def readinto(self, buf, n=-1):
        avail = self.no - self.ro
        if not avail:
            return None
        if n < 0 or n > avail:
            n = avail
        for i in range(n):
            buf[i] = self.out[self.ro + i]
        self.ro += n
        if self.ro == self.no:
            self.ro = self.no = 0
        return n

    def read(self, n):
        b = bytearray(n)
        r = self.readinto(b, n)
        return None if r is None else bytes(b[:r])

    def write(self, buf, a=-1, b=-1):
        off, n = (0, a) if b < 0 else (a, b)
        if isinstance(buf, str):
            buf = buf.encode()  # a device's socket takes str as its bytes
        if n < 0:
            n = len(buf) - off
        for i in range(n):
            self.inb[self.ni + i] = buf[off + i]
        self.ni += n
        while self.step():
            pass
        return n

    def put(self, *bs):
        for x in bs:
            self.out[self.no] = x
            self.no += 1

    def step(self):
        b = self.inb
        rl = 0
        sh = 0
        i = 1
        while True:
            if i >= self.ni:
                return False
            x = b[i]
            rl |= (x & 127) << sh
            sh += 7
            i += 1
            if not x & 128:
                break
        total = i + rl
        if self.ni < total:
            return False
        t = b[0] >> 4
        q = (b[0] >> 1) & 3
        if t == 1:
            self.put(0x20, 3, 0, 0, 0) if self.v5 else self.put(0x20, 2, 0, 0)
        elif t == 8:
            if self.v5:
                self.put(0x90, 4, b[i], b[i + 1], 0, b[total - 1] & 3)
            else:
                self.put(0x90, 3, b[i], b[i + 1], b[total - 1] & 3)
        elif t == 3 and q:
            j = i + 2 + ((b[i] << 8) | b[i + 1])
            self.put(0x40 if q == 1 else 0x50, 2, b[j], b[j + 1])
        elif t == 6:
            self.put(0x70, 2, b[i], b[i + 1])
        elif t == 12:
            self.put(0xD0, 0)
        for k in range(total, self.ni):
            b[k - total] = b[k]
        self.ni -= total
        return True

    def connect(self, addr):
        pass

    def setblocking(self, flag):
        pass

    def settimeout(self, t):
        pass

    def close(self):
        pass
"""

# Stand-ins the peers import and the WebAssembly port lacks; imported before
# the first reading, so they count for nobody.
STUBS = {
    "usocket.py": "import fakepeer\n"
                  "def socket(*a):\n    return fakepeer.PEER\n"
                  "def getaddrinfo(host, port, *a):\n    return [(2, 1, 0, '', (host, port))]\n",
    "socket.py": "from usocket import *\n",
    "machine.py": "def unique_id():\n    return b'\\x01\\x02\\x03\\x04'\n",
    "network.py": "STA_IF = 0\nclass WLAN:\n    def __init__(self, i):\n        pass\n"
                  "    def isconnected(self):\n        return True\n",
    "uasyncio.py": "from asyncio import *\n",
    # asyncio streams over the scripted broker (mqtt_async talks to its
    # broker through them; the WebAssembly build has none): imported by
    # mqtt_async's probe alone, so the other peers' readings keep their
    # table of names as it was. A read with nothing to read waits for the
    # next write (the scripted broker answers as it is written to) and
    # allocates nothing. A read that polled each millisecond left a dead
    # 128-byte scratch buffer and the event loop's wake-up objects in the
    # heap at the reading, or not, as timing fell: mqtt_async's connected heap
    # read 12,976 to 13,296 B over runs of the same command, whatever the
    # path of its file (which the VM never sees: it is copied and compiled
    # under a fixed name).
    "streams.py": "import uasyncio, fakepeer\n"
                  "_written = uasyncio.Event()\n"
                  "class _Stream:\n"
                  "    async def read(self, n):\n"
                  "        p = fakepeer.PEER\n"
                  "        while p.no == p.ro:\n"
                  "            _written.clear()\n"
                  "            await _written.wait()\n"
                  "        return p.read(n)\n"
                  "    def write(self, b):\n"
                  "        fakepeer.PEER.write(b)\n"
                  "        _written.set()\n"
                  "    async def drain(self):\n"
                  "        pass\n"
                  "    def close(self):\n"
                  "        pass\n"
                  "    async def wait_closed(self):\n"
                  "        pass\n"
                  "async def open_connection(host, port):\n"
                  "    s = _Stream()\n"
                  "    return s, s\n"
                  "uasyncio.open_connection = open_connection\n",
}

# Runs inside MicroPython. argv: kind (umqtt3, simple, mqtt_async), protocol
# level, store (memory, file), the directory to import from (mpy, peer_mpy,
# or rom/ and one of those). Prints
# "RAM <import> <connected>": heap in use after the imports, and after
# constructing, connecting, subscribing (QoS 1) and one QoS 1 publish.
CONNECTED_PROBE = """\
import sys, gc, asyncio, micropython
kind, level, store, root = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
""" + MOUNT_ROM + """mount_rom(root)
sys.path[:] = ["/" + root, "/probe"]
if kind != "umqtt3":
    sys.path.append("/stubs")
    import usocket, ustruct, ubinascii, machine, network, uasyncio
import fakepeer
peer = fakepeer.Peer(level)
fakepeer.PEER = peer

def cb(topic, msg):
    pass

def link():
    return peer

""" + COLLECT + """
async def main():
    await collect()
    micropython.qstr_info()  # (the name table as the reading starts)
    base = gc.mem_alloc()
    try:
        if kind == "umqtt3":
            from umqtt3.client import MQTTClient
            if store == "file":
                from umqtt3.store import FileStore
            elif store == "memory":
                from umqtt3.memstore import MemoryStore
        elif kind == "simple":
            from umqtt.simple import MQTTClient
        else:
            __import__(kind)
            await collect()
            print("RAM", gc.mem_alloc() - base, "-")
            return
        await collect()
        imported = gc.mem_alloc() - base
        if kind == "umqtt3":
            kw = {}
            if store == "file":
                kw["store"] = FileStore("/mq")
            elif store == "none":
                kw["store"] = False
            c = MQTTClient("node1", "peer", keepalive=60, level=level, connect_link=link, **kw)
        else:
            c = MQTTClient("node1", "peer", keepalive=60)
        c.set_callback(cb)
        c.connect()
        c.subscribe(b"nodes/node1/cmd", 1)
        c.publish(b"nodes/node1/temp", b"21.5", qos=1)
        await collect()
        print("RAM", imported, gc.mem_alloc() - base)
        micropython.qstr_info()
    except Exception as e:
        print("ERR %s: %s" % (type(e).__name__, e))

mp_await = main()
"""


# Runs inside MicroPython. argv: kind (umqtt3), protocol level, store, the
# directory to import from, then the modules in import order. Prints "RAM"
# and the heap each import added, then what constructing, connecting,
# subscribing and one QoS 1 publish added (as CONNECTED_PROBE does).
STEPS_PROBE = CONNECTED_PROBE.split("async def main():")[0] + """
async def main():
    try:
        grew = []
        await collect()
        last = gc.mem_alloc()
        for name in sys.argv[5:]:
            __import__(name)
            await collect()
            grew.append(gc.mem_alloc() - last)
            last = gc.mem_alloc()
        from umqtt3.client import MQTTClient
        kw = {}
        if store == "file":
            from umqtt3.store import FileStore
            kw["store"] = FileStore("/mq")
        elif store == "none":
            kw["store"] = False
        c = MQTTClient("node1", "peer", keepalive=60, level=level, connect_link=link, **kw)
        c.set_callback(cb)
        c.connect()
        c.subscribe(b"nodes/node1/cmd", 1)
        c.publish(b"nodes/node1/temp", b"21.5", qos=1)
        await collect()
        grew.append(gc.mem_alloc() - last)
        print("RAM", " ".join(str(g) for g in grew))
        print(*sys.modules)  # (checked by Vm.steps; a new name here would count)
    except Exception as e:
        print("ERR %s: %s" % (type(e).__name__, e))

mp_await = main()
"""


# The connected probe for mqtt_async, in a file of its own so that the
# others' probe interns no name more (a name more can cost a block of the
# interned-name table: see docs/client.md). Its API: a config and
# coroutines (keepalive only with a will, its rule); its broker is reached
# through the stand-in asyncio streams (STUBS). The same steps as the
# others: import, construct, connect, subscribe at QoS 1, one QoS 1 publish.
ASYNC_PROBE = CONNECTED_PROBE.split("async def main():")[0] + """
import streams
async def steps(MQTTClient, config):
    config.server = "peer"
    config.client_id = "node1"
    config.subs_cb = lambda topic, msg, retained: None
    c = MQTTClient(config)
    await c.connect()
    await c.subscribe("nodes/node1/cmd", 1)
    await c.publish("nodes/node1/temp", "21.5", qos=1)
    return c

async def main():
    await collect()
    micropython.qstr_info()  # (the name table as the reading starts)
    base = gc.mem_alloc()
    try:
        from mqtt_async import MQTTClient, config
        await collect()
        imported = gc.mem_alloc() - base
        # in a task of its own: its wait_for() cancels the waiting task,
        # which the WebAssembly port's top-level coroutine is not
        c = await asyncio.create_task(steps(MQTTClient, config))
        await collect()
        print("RAM", imported, gc.mem_alloc() - base)
        micropython.qstr_info()
    except Exception as e:
        print("ERR %s: %s" % (type(e).__name__, e))

mp_await = main()
"""


def name_table(out):
    """"used/room" of the interpreter's table of interned names, from
    micropython.qstr_info()'s line in out: its blocks hold 20, 40, 80, ...
    names (MicroPython doubles each new one), so a name past the room
    allocates the next block, about 2.3 KB at 300 names. A reading near a
    block's end moves by a block with a few names more, in the probe or,
    on a board, in the firmware and the application."""
    m = _QSTR.findall(out)
    if not m:
        return "-"
    pools, used = int(m[-1][0]), int(m[-1][1])
    return "%d/%d" % (used, 20 * (2 ** pools - 1))


_QSTR = re.compile(r"n_pool=(\d+), n_qstr=(\d+), n_str_data_bytes=(\d+), n_total_bytes=(\d+)")
ENTRY = 7  # bytes of a name's entry in a block (hash 2, length 1, pointer 4; 32-bit)


def names_at_cost(out, heap):
    """heap with the name table's blocks replaced by what the names
    added during the reading take in them (ENTRY bytes each; their text is
    counted either way): the reading without the block a name more or less
    would add, so that configurations and peers compare whatever the table
    held before them. From the two micropython.qstr_info() lines in out (as
    the reading starts, once connected); "-" without them."""
    m = _QSTR.findall(out)
    if len(m) < 2 or not isinstance(heap, int):
        return "-"
    (_, n0, s0, t0), (_, n1, s1, t1) = [[int(x) for x in r] for r in (m[0], m[-1])]
    blocks = (t1 - s1) - (t0 - s0)  # bytes of blocks allocated meanwhile
    return heap - blocks + ENTRY * (n1 - n0)


class Vm:
    """Runs the probe under tests/mp/run.mjs, one fresh interpreter per call."""

    def __init__(self, tmp, heap, peer_dirs, image=None):
        node = shutil.which("node")
        if not node:
            die("node not found; install Node.js 18 or newer, then run npm ci")
        if not os.path.isfile(os.path.join(WASM_PKG, "micropython.mjs")):
            die("%s is missing; run 'npm ci' (or 'make setup')" % WASM_PKG)
        self.errors = []
        probe_dir = os.path.join(tmp, "probe")
        os.makedirs(probe_dir)
        self.probe = os.path.join(probe_dir, "probe.py")
        self.connected_probe = os.path.join(probe_dir, "connected.py")
        self.steps_probe = os.path.join(probe_dir, "steps.py")
        self.async_probe = os.path.join(probe_dir, "async_connected.py")
        for path, text in ((self.probe, PROBE), (self.connected_probe, CONNECTED_PROBE),
                           (self.steps_probe, STEPS_PROBE),
                           (self.async_probe, ASYNC_PROBE),
                           (os.path.join(probe_dir, "fakepeer.py"), FAKE_PEER)):
            with open(path, "w") as f:
                f.write(text)
        stubs = os.path.join(tmp, "stubs")
        os.makedirs(stubs)
        for name, text in STUBS.items():
            with open(os.path.join(stubs, name), "w") as f:
                f.write(text)
        self.cmd = [node, RUN_MJS, "--heap", heap, "--no-shared", "--mount", stubs + "=/stubs",
                    "--mount", probe_dir + "=/probe"]
        for which in ("py", "mpy"):
            self.cmd += ["--mount", os.path.join(tmp, which) + "=/" + which]
        for which, d in peer_dirs.items():
            self.cmd += ["--mount", d + "=/" + which]
        if image:
            self.cmd += ["--mount", image + "=" + ROM_IMAGE]

    def run(self, script, args, what):
        """The probe's "RAM" figures as ints ("-" stays "-"), or None on error."""
        p = subprocess.run(self.cmd + [script] + args, capture_output=True, text=True, timeout=120)
        self.out = p.stdout
        m = re.search(r"^RAM ([\d -]+)$", p.stdout, re.M)
        if m and p.returncode == 0:
            return [int(x) if x.isdigit() else x for x in m.group(1).split()]
        text = (p.stdout + p.stderr).strip().splitlines()
        self.errors.append("%s: %s" % (what, text[-1] if text else "exit %d" % p.returncode))
        return None

    def connected(self, kind, level, store, which):
        """(import RAM, heap in use once connected, the interned-name table)
        of one configuration."""
        probe = self.async_probe if kind == "mqtt_async" else self.connected_probe
        r = self.run(probe, [kind, str(level), store, which],
                     "%s level %d store %s" % (kind, level, store))
        if not r:
            return ("error", "error", "-", "-")
        return tuple(r) + (name_table(self.out), names_at_cost(self.out, r[1]))

    def steps(self, level, store, names, root="mpy"):
        """Heap added by each module of names imported in turn, then by
        connecting (a list one longer than names), or None on error."""
        what = "steps level %d store %s from %s" % (level, store, root)
        got = self.run(self.steps_probe, ["umqtt3", str(level), store, root] + names, what)
        # the configuration's list must name every module the client loaded
        lines = self.out.strip().splitlines()
        extra = sorted(set(m for m in lines[-1].split() if m.startswith("umqtt3.")) - set(names)) \
            if got else []
        if extra:
            self.errors.append("%s: loaded but not listed in CONFIGS: %s" % (what, " ".join(extra)))
            return None
        return got

    def import_ram(self, which, names):
        """Bytes of heap still in use after importing names, or an error string."""
        r = self.run(self.probe, [which] + names, "importing " + " ".join(names))
        return r[0] if r else "error"


def build_romfs(tmp, dirs):
    """One ROMFS image of the compiled trees under tmp named in dirs (mpy,
    peer_mpy), each under its own name, made by mpremote's builder (as
    `mpremote romfs build` would, the files being .mpy already); returns
    its path."""
    src = os.path.join(tmp, "romsrc")
    for d in dirs:
        shutil.copytree(os.path.join(tmp, d), os.path.join(src, d))
    image = device_tool(devices.romfs_image, src)
    path = os.path.join(tmp, "umqtt3.romfs")
    with open(path, "wb") as f:
        f.write(image)
    return path


def find_peer(arg, env, patterns):
    """The peer's file: the option, the environment variable, or the first
    match of patterns under build/peers (where the PyPI sdists are unpacked)."""
    path = arg or os.environ.get(env)
    if not path:
        import glob

        for pat in patterns:
            hits = sorted(glob.glob(os.path.join(REPO, "build", "peers", pat)))
            if hits:
                path = hits[-1]
                break
    if path and not os.path.isfile(path):
        die("peer file %s does not exist" % path)
    return path


def fmt(v):
    if v is None:
        return "-"
    if isinstance(v, int):
        return "{:,}".format(v)
    return str(v)


def ratio(a, b):
    if isinstance(a, int) and isinstance(b, int) and b:
        return "%.2fx" % (a / b)
    return "-"


def print_table(headers, rows, markdown):
    cells = [[fmt(c) for c in r] for r in rows]
    if markdown:
        print("| " + " | ".join(headers) + " |")
        print("|" + "|".join(["---"] + ["---:"] * (len(headers) - 1)) + "|")
        for r in cells:
            print("| " + " | ".join(r) + " |")
        return
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h)
              for i, h in enumerate(headers)]
    line = lambda r: "  ".join(  # noqa: E731
        c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r))
    print(line(headers))
    print("  ".join("-" * w for w in widths))
    for r in cells:
        print(line(r))


def function_sizes(cmd, path, name, tmp):
    """[(bytes, name)] for each top-level function and class of the module at
    path (also those under a top-level if/try, as in compat), and each
    method: how much smaller its .mpy gets when that definition is replaced
    by `pass`. Import RAM follows roughly (about twice the bytes)."""
    with open(path) as f:
        src = f.read()
    lines = src.split("\n")

    def size(text):
        p = os.path.join(tmp, "f.py")
        with open(p, "w") as f:
            f.write(text)
        err = compile_mpy(cmd, p, p[:-3] + ".mpy", name)
        return None if err else os.path.getsize(p[:-3] + ".mpy")

    def without(node):
        first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
        line = lines[node.lineno - 1]
        indent = line[:len(line) - len(line.lstrip())]
        return "\n".join(lines[:first - 1] + [indent + "pass"] + lines[node.end_lineno:])

    whole = size(src)
    if whole is None:
        die("%s does not compile" % path, 1)
    out = []

    def visit(body):
        for node in body:
            if isinstance(node, (ast.If, ast.Try)):
                visit(node.body)
                visit(node.orelse)
                for h in getattr(node, "handlers", ()):
                    visit(h.body)
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                out.append((whole - size(without(node)), node.name))
                for sub in node.body if isinstance(node, ast.ClassDef) else ():
                    if isinstance(sub, ast.FunctionDef):
                        out.append((whole - size(without(sub)), node.name + "." + sub.name))

    visit(ast.parse(src).body)
    out.sort(key=lambda r: -r[0])
    return whole, out


# (label, kind, protocol level, store, the umqtt3 modules it loads)
CONFIGS = [
    ("umqtt3, QoS 0/1/2, MemoryStore (default)", "umqtt3", 4, "memory", CLIENT_SET),
    ("umqtt3, QoS 2, FileStore", "umqtt3", 4, "file",
     ["compat", "client_codec", "store", "client_core", "client"]),
    ("umqtt3, MQTT 5, MemoryStore", "umqtt3", 5, "memory", CLIENT_SET + ["props", "client5"]),
    ("umqtt3, QoS 0/1/2, no store (store=False)", "umqtt3", 4, "none",
     ["compat", "client_codec", "nostore", "client_core", "client"]),
]


def steps_table(vm, sizes, markdown, root="mpy"):
    """Per configuration, the heap each module adds when imported one after
    the other (bottom layer first, from .mpy, or from the ROMFS image with
    root "rom/mpy"), and what connecting adds."""
    mods = []
    for _, _, _, _, loads in CONFIGS:
        mods += [m for m in loads if m in sizes and m not in mods]
    mods.sort(key=lambda m: ORDER.index(m) if m in ORDER else len(ORDER))
    rows = []
    for label, kind, level, store, loads in CONFIGS:
        loads = [m for m in loads if m in sizes]
        got = vm.steps(level, store, [dotted(m) for m in loads], root)
        by = dict(zip(loads, got or ())) if got else {}
        rows.append([label.replace("umqtt3, ", "")] + [by.get(m) for m in mods] +
                    [got[-1] if got else "error", sum(got) if got else "error"])
    where = "ROMFS" if root.startswith("rom/") else ".mpy"
    print_table(["heap added (from %s)" % where] + mods + ["connect", "total"], rows, markdown)
    print()
    print("each module imported after the ones before it in the configuration's list "
          "(CONFIGS), so what it imports itself counts for it; connect: construct, connect, "
          "subscribe (QoS 1), one QoS 1 publish")


def connected_table(vm, sizes, peers, markdown, romfs=False):
    """Import RAM and the heap in use once connected, subscribed and one
    QoS 1 message published, per configuration, from .mpy (and with romfs
    from the ROMFS image too), next to the peers [(label, kind, .mpy path)]."""
    rows = []
    runs = [(kind, level, store, [m for m in loads if m in sizes], label)
            for label, kind, level, store, loads in CONFIGS]
    runs += [(kind, 4, "-", None, (label, mpy)) for label, kind, mpy in peers]
    for kind, level, store, loads, label in runs:
        if loads is None:  # a peer
            label, path = label
            mpy, root = os.path.getsize(path), "peer_mpy"
        else:
            mpy, root = sum(sizes[m][1] or 0 for m in loads), "mpy"
        imp, run, names, at_cost = vm.connected(kind, level, store, root)
        row = [label, mpy, imp, run]
        if romfs:
            row += list(vm.connected(kind, level, store, "rom/" + root)[:2])
        rows.append(row + [names, at_cost])
    headers = ["connected client (from .mpy)", ".mpy bytes", "import RAM", "heap in use"]
    if romfs:
        headers += ["import RAM (ROMFS)", "heap in use (ROMFS)"]
    headers += ["names/room", "names at cost"]
    print_table(headers, rows, markdown)
    print()
    print("heap in use: gc.mem_alloc() growth after import, construct, connect, subscribe "
          "(QoS 1) and one QoS 1 publish, against a scripted broker in the same VM")
    print("names/room: interned names in use, and what the interpreter's table held, once "
          "connected (.mpy); a name past the room costs a block more (2.3 KB at 300)")
    print("names at cost: heap in use with the table's blocks replaced by %d bytes a name "
          "added (the reading whatever the table held before it)" % ENTRY)
    if romfs:
        print("ROMFS: the same .mpy files imported from a ROMFS image mounted at /rom "
              "(bytecode run in place, as frozen modules are; the image itself not counted)")


def heap_size(text):
    """tests/mp/run.mjs's --heap: N bytes, or N with k or m, from 64k (the
    probes' own needs) to 1024m (the WebAssembly VM's memory is 2 GB)."""
    m = re.fullmatch(r"([1-9][0-9]*)([km]?)", text)
    if not m:
        raise argparse.ArgumentTypeError("%r is not a size such as 512k or 2m" % text)
    n = int(m.group(1)) << {"": 0, "k": 10, "m": 20}[m.group(2)]
    if not (64 << 10) <= n <= (1024 << 20):
        raise argparse.ArgumentTypeError("%s is outside 64k-1024m" % text)
    return text


def main():
    ap = _args.parser("python -m tools.measure.sizes", __doc__)
    ap.add_argument("--markdown", action="store_true", help="print markdown tables")
    ap.add_argument("--check", action="store_true",
                    help="only check that every module compiles with mpy-cross")
    ap.add_argument("--peer", metavar="PATH", help="umqtt/simple.py to compare with")
    ap.add_argument("--mqtt-as", metavar="PATH",
                    help="mqtt_as.py (or PyPI micropython-mqtt's mqtt_async.py) to compare with")
    ap.add_argument("--no-ram", action="store_true", help="skip the import RAM measurement")
    ap.add_argument("--no-source-lines", action="store_true",
                    help="compile without line numbers (mpy-cross -X no-source-lines), "
                         "ours and the peers'")
    ap.add_argument("--functions", metavar="MODULE",
                    help="list the .mpy bytes of MODULE's functions and classes (e.g. codec)")
    ap.add_argument("--steps", action="store_true",
                    help="per client configuration, the heap each module adds imported in turn")
    ap.add_argument("--romfs", action="store_true",
                    help="also measure import RAM and connected heap with the .mpy files "
                         "(ours and the peers') in a ROMFS image: bytecode run in place")
    ap.add_argument("--heap", type=heap_size, default="2m",
                    help="MicroPython heap for the RAM probe, bytes with k or m (default 2m)")
    ap.add_argument("--lib", default=os.path.join(REPO, "lib", "umqtt3"),
                    help="the umqtt3 package directory (default lib/umqtt3)")
    args = ap.parse_args()
    if args.romfs and args.no_ram:
        ap.error("--romfs measures RAM: drop --no-ram")

    cmd = mpy_cross_cmd()
    if args.no_source_lines:
        cmd += ["-X", "no-source-lines"]
    lib = args.lib
    mods = find_modules(lib)
    PACKAGES.update(m for m in mods if os.path.isfile(os.path.join(lib, m, "__init__.py")))
    if not mods:
        print("sizes: no modules in %s yet" % lib)
        return 0

    if args.functions:
        m = args.functions.replace(".", "/")
        if m not in mods:
            die("no module %s in %s" % (args.functions, lib), 1)
        tmp = tempfile.mkdtemp(prefix="umqtt3-sizes-")
        try:
            whole, rows = function_sizes(cmd, os.path.join(lib, source_path(m)),
                                         "umqtt3/" + source_path(m), tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print_table(["%s (%s .mpy bytes)" % (dotted(m), fmt(whole)), ".mpy bytes"],
                    [[name, n] for n, name in rows], args.markdown)
        print()
        print("A class's row includes its methods' rows.")
        return 0

    tmp = tempfile.mkdtemp(prefix="umqtt3-sizes-")
    try:
        errors = []
        sizes = {}
        os.makedirs(os.path.join(tmp, "py", "umqtt3"))
        os.makedirs(os.path.join(tmp, "mpy", "umqtt3"))
        for m in mods:
            # A private copy of the sources, so the VM sees exactly what was compiled.
            rel = source_path(m)
            src = os.path.join(tmp, "py", "umqtt3", rel)
            os.makedirs(os.path.dirname(src), exist_ok=True)
            shutil.copyfile(os.path.join(lib, rel), src)
            dst = os.path.join(tmp, "mpy", "umqtt3", rel[:-3] + ".mpy")
            err = compile_mpy(cmd, src, dst, "umqtt3/" + rel)
            if err:
                errors.append("%s: %s" % (m, err))
                sizes[m] = (os.path.getsize(src), None)
            else:
                sizes[m] = (os.path.getsize(src), os.path.getsize(dst))

        if args.check:
            for e in errors:
                print("sizes --check: FAIL " + e)
            print("sizes --check: %d of %d modules compile with mpy-cross"
                  % (len(mods) - len(errors), len(mods)))
            return 1 if errors else 0

        peer = find_peer(args.peer, "UMQTT_PEER", ["*/umqtt/simple.py"])
        mqtt_as = find_peer(args.mqtt_as, "MQTT_AS_PEER", ["*/mqtt_as.py", "*/mqtt_async.py"])
        peer_py = peer_mpy = None
        peer_dirs = {}
        peers = []  # (label, probe kind, .mpy path) for the connected table
        for f, rel in ((peer, "umqtt/simple.py"),
                       (mqtt_as, mqtt_as and os.path.basename(mqtt_as))):
            if not f:
                continue
            py = os.path.join(tmp, "peer_py", rel)
            mpy = os.path.join(tmp, "peer_mpy", rel[:-3] + ".mpy")
            os.makedirs(os.path.dirname(py), exist_ok=True)
            shutil.copyfile(f, py)
            err = compile_mpy(cmd, py, mpy, rel)
            if err:
                die("peer %s does not compile: %s" % (f, err), 1)
            peer_dirs["peer_py"] = os.path.join(tmp, "peer_py")
            peer_dirs["peer_mpy"] = os.path.join(tmp, "peer_mpy")
            if f is peer:
                peer_py, peer_mpy = py, mpy
                peers.append(("umqtt.simple (QoS 0/1, no reconnect)", "simple", mpy))
            else:
                name = rel[:-3]
                # mqtt_async is connected through stand-in asyncio streams;
                # another file (mqtt_as.py) is measured at import only
                peers.append((name + (" (asyncio, QoS 0/1, reconnect)" if name == "mqtt_async"
                                      else " (asyncio; import only)"), name, mpy))

        image = build_romfs(tmp, ["mpy"] + sorted(set(peer_dirs) & {"peer_mpy"})) \
            if args.romfs else None
        if args.steps:
            vm = Vm(tmp, args.heap, {}, image)
            steps_table(vm, sizes, args.markdown)
            if image:
                print()
                steps_table(vm, sizes, args.markdown, "rom/mpy")
            for e in vm.errors:
                print("sizes: error " + e, file=sys.stderr)
            return 1 if vm.errors else 0

        ram = {}
        vm = None
        if not args.no_ram:
            vm = Vm(tmp, args.heap, peer_dirs, image)
            for m in mods:
                if m in CPYTHON_ONLY:
                    ram[m] = ("CPython only",) * (3 if image else 2)
                    continue
                ram[m] = (vm.import_ram("py", [dotted(m)]),
                          vm.import_ram("mpy", [dotted(m)]) if sizes[m][1] else None)
                if image:
                    ram[m] += (vm.import_ram("rom/mpy", [dotted(m)]) if sizes[m][1] else None,)

        # Per-module table.
        rows = []
        for m in mods:
            r = ram.get(m, (None,) * (3 if image else 2))
            rows.append([dotted(m)] + list(sizes[m]) + list(r))

        def group_row(label, group):
            py = sum(sizes[m][0] for m in group)
            mpy = None if any(sizes[m][1] is None for m in group) else sum(sizes[m][1] for m in group)
            r_py = r_mpy = r_rom = None
            if vm and group:
                names = [dotted(m) for m in group]
                r_py = vm.import_ram("py", names)
                r_mpy = vm.import_ram("mpy", names) if mpy is not None else None
                if image and mpy is not None:
                    r_rom = vm.import_ram("rom/mpy", names)
            return [label, py, mpy, r_py, r_mpy] + ([r_rom] if image else [])

        good = [m for m in mods if sizes[m][1] is not None and m not in CPYTHON_ONLY]
        device = [m for m in mods if m not in CPYTHON_ONLY]
        rows.append(group_row("all modules" if len(good) == len(device) else "all that compile", good))
        client = [m for m in CLIENT_SET if m in good]
        client_row = group_row("client set", client)
        if client:
            rows.append(client_row)
        peer_row = None
        if peer:
            peer_row = ["umqtt.simple (peer)", os.path.getsize(peer_py), os.path.getsize(peer_mpy),
                        vm.import_ram("peer_py", ["umqtt.simple"]) if vm else None,
                        vm.import_ram("peer_mpy", ["umqtt.simple"]) if vm else None]
            if image:
                peer_row.append(vm.import_ram("rom/peer_mpy", ["umqtt.simple"]))
            rows.append(peer_row)

        headers = ["module", ".py bytes", ".mpy bytes", "import RAM from .py", "import RAM from .mpy"]
        if image:
            headers.append("import RAM from ROMFS")
        if args.markdown:
            print("Sizes measured with mpy-cross and the WebAssembly MicroPython 1.29 "
                  "(import RAM = gc.mem_alloc() growth).\n")
        print_table(headers, rows, args.markdown)
        print()
        print("client set = %s" % (", ".join(source_path(m) for m in client) or "(none yet)"))
        print("'all modules' and 'client set' RAM: those modules imported together in one interpreter.")

        if peer_row:
            print()
            cmp_rows = [
                [".mpy bytes", client_row[2], peer_row[2], ratio(client_row[2], peer_row[2])],
                ["import RAM from .mpy", client_row[4], peer_row[4], ratio(client_row[4], peer_row[4])],
                ["import RAM from .py", client_row[3], peer_row[3], ratio(client_row[3], peer_row[3])],
            ]
            if image:
                cmp_rows.append(["import RAM from ROMFS", client_row[5], peer_row[5],
                                 ratio(client_row[5], peer_row[5])])
            print_table(["client set vs umqtt.simple", "ours", "peer", "ours / peer"],
                        cmp_rows, args.markdown)
            print()
            print("peer: %s" % peer)
        else:
            print("peer: not measured (give --peer PATH/TO/umqtt/simple.py or set UMQTT_PEER)")

        if vm:
            print()
            connected_table(vm, sizes, peers, args.markdown, bool(image))

        sys.stdout.flush()
        for e in (vm.errors if vm else []):
            print("sizes: error " + e, file=sys.stderr)
        for e in errors:
            print("sizes: does not compile: " + e, file=sys.stderr)
        return 1 if errors or (vm and vm.errors) else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
