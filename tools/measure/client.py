"""Benchmark: MQTT clients against mosquitto on loopback, on CPython.

    python -m tools.measure.client            # about 40 s
    python -m tools.measure.client --quick    # about 8 s
    python -m tools.measure.client --cpu      # CPU per QoS 1 message, one process
    python -m tools.measure.client --profile  # where umqtt3's QoS 1 time goes
    python -m tools.measure.client --instructions  # the same under valgrind
    python -m tools.measure.client --bytecodes     # Python bytecodes per message, by function

Starts its own mosquitto (Debian's binary) on 127.0.0.1 and a free port, then
measures in one run, on one broker, for each client:

QoS 0    N PUBLISHes of a 16-byte payload as fast as the client takes them,
         timed from the first publish until a separate subscriber process
         has received all N from the broker (it counts bytes; every message
         has the same size). "handed over" is the rate up to the moment the
         last publish() call returned (for umqtt3 also its send buffer
         written out), which says how fast the client itself is.
QoS 1    sequential round trips: publish, wait for PUBACK, publish the next.
QoS 2    the same up to PUBCOMP (PUBLISH, PUBREC, PUBREL, PUBCOMP).
         For both it also prints the CPU time of each client's process per
         message (process_time), which the machine's load moves much less
         than the rates: what the client itself costs.
         Each client keeps one connection; the clients take turns of 0.05 s,
         round robin, and the rate is the median over the turns. This
         machine's speed drifts (it even has a fast and a slow mode for
         loopback round trips), so the ratios are medians of the ratios
         within a round, between turns that ran back to back.

Each client runs in its own process (paho's network thread, sharing a
process with another client, changed that client's speed), driven through a
pipe; the bench process starts them and takes the times.

Clients:
umqtt3           lib/umqtt3/client.py from this checkout; publish(..., qos=q)
                 (wait=True for QoS 1/2), MemoryStore.
paho-mqtt        paho.mqtt.client 2.x, v2 callback API. "thread": loop_start()
                 and publish(...).wait_for_publish(). "loop": no thread, the
                 caller runs loop(0.01) until the message is published. The
                 "paho (faster mode)" ratio takes, in each round, the faster
                 of the two.
umqtt.simple     build/peers/*/umqtt/simple.py (`make peers`; or the file
                 UMQTT_PEER names) if there is one, run on
                 CPython through shims for usocket/ustruct/ubinascii (blocking
                 socket, no TCP_NODELAY: as on a device). It has no QoS 2.

"raw-socket" is not a client but a bound: a hand-written loop (see Floor).
Rates are medians over the rounds. This prints; it asserts nothing.

The other modes look at sequential QoS 1 alone, umqtt3 against the bound:
--cpu           both in this one process, alternating rounds of 3,000
                messages (20 rounds; --quick: 10): the CPU time
                (process_time) per message, min and median, and the ratio of
                the medians. The machine's load moves this much less than
                the rates.
--profile       cProfile of 20,000 umqtt3 messages: the time per message by
                module and the functions that take most (under the
                profiler, which inflates every Python call; system calls
                include their wait for the broker).
--instructions  each of the two under valgrind (cachegrind): the user-space
                instructions per message, from runs of 1,000 and 3,000
                messages (the difference, so that start-up cancels out).
                Neither the load nor the machine's speed moves it; system
                calls count only their user-space part, and a clock read
                counts about 2,000 instructions here (valgrind does not run
                the kernel's fast clock path; natively it takes about 90 ns).
--bytecodes     the Python bytecodes each of the two runs per message, by
                function, and the Python calls (sys.settrace with opcode
                events, 300 messages after a warm-up): which function's
                code a change shortens, independent of the load, the
                machine and the interpreter's build. Here umqtt3's path
                takes about 50 user-space instructions per bytecode, the
                C functions it calls included.
The header's "python build" line says whether libpython is a shared
library (pyenv's default build: slower Python code, so a lower ratio to
the bound, whose time is mostly system calls) or linked into the executable.
"""

import glob
import os
import select
import shutil
import socket
import subprocess
import sys
import time

from tests import mosq  # tests/mosq.py: start/stop mosquitto
from tools import args as _args
from tools.measure import REPO as _REPO, common as _common
from umqtt3.client import MQTTClient
from umqtt3.flow import Busy

HOST = "127.0.0.1"
TOPIC = "bench/umqtt3/sensor/temperature"
PAYLOAD = bytes(range(0x41, 0x41 + 16))
# umqtt.simple as `make peers` unpacks it (or UMQTT_PEER), as tools.measure.sizes finds it
SIMPLE = os.environ.get("UMQTT_PEER") or ([""] + sorted(glob.glob(
    os.path.join(_REPO, "build", "peers", "*", "umqtt", "simple.py"))))[-1]
SLICE = 0.05  # seconds per turn of one client in the sequential tests


# ------------------------------------------------------------ counting subscriber

def count_sub_main(port, topic, nbytes):
    """Subprocess: subscribe at QoS 0, print "ready", read until nbytes of
    PUBLISH traffic arrived, print "done"."""
    s = socket.create_connection((HOST, port), 10)
    cid = b"bench-count"
    t = topic.encode()
    body = b"\x00\x04MQTT\x04\x02\x00\x00" + len(cid).to_bytes(2, "big") + cid
    s.sendall(bytes([0x10, len(body)]) + body)
    sub = b"\x00\x01" + len(t).to_bytes(2, "big") + t + b"\x00"
    s.sendall(bytes([0x82, len(sub)]) + sub)
    head = b""
    while len(head) < 9:  # CONNACK (4) + SUBACK (5)
        r = s.recv(9 - len(head))
        if not r:
            raise SystemExit("broker closed")
        head += r
    print("ready", flush=True)
    got = 0
    s.settimeout(20)
    buf = bytearray(1 << 16)
    try:
        while got < nbytes:
            r = s.recv_into(buf)
            if not r:
                break
            got += r
    except socket.timeout:
        pass
    print("done %d" % got, flush=True)


class Counter:
    def __init__(self, port, topic, n):
        self.nbytes = n * packet_len(topic)
        self.p = subprocess.Popen(
            [sys.executable, "-m", "tools.measure.client", "--count-sub", str(port), topic,
             str(self.nbytes)], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        assert self._line(10) == "ready"

    def _line(self, timeout):
        if select.select([self.p.stdout.fileno()], [], [], timeout)[0]:
            return self.p.stdout.readline().decode().strip()
        return None

    def wait(self, timeout=30):
        """(all arrived, the subscriber's line); the caller takes the time."""
        line = self._line(timeout)
        self.p.wait(10)
        return line == "done %d" % self.nbytes, line


def packet_len(topic):
    rl = 2 + len(topic) + len(PAYLOAD)
    return 1 + (1 if rl < 128 else 2) + rl


# ------------------------------------------------------------ umqtt3

class Ours:
    name = "umqtt3"

    def __init__(self, port, cid):
        self.c = MQTTClient(cid, HOST, port, bufsize=4096)
        self.c.connect()

    def qos0(self, topic, n):
        c = self.c
        pub = c.publish
        p = PAYLOAD
        t = topic.encode()
        for _ in range(n):
            try:
                pub(t, p)
            except Busy:  # the socket's buffer is full: let it drain
                c.poll(1)
                pub(t, p)
        while c.conn.tlen:  # bytes wait to be written
            c.poll(1)

    def seq(self, qos, seconds):
        c = self.c
        pub = c.publish
        t = TOPIC.encode()
        p = PAYLOAD
        n = 0
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            for _ in range(10):
                pub(t, p, False, qos)
            n += 10
        return n

    def seq_n(self, qos, n):
        pub = self.c.publish
        t = TOPIC.encode()
        p = PAYLOAD
        for _ in range(n):
            pub(t, p, False, qos)

    def close(self):
        self.c.disconnect()


# ------------------------------------------------------------ paho-mqtt

class Paho:
    def __init__(self, port, cid, threaded):
        import paho.mqtt.client as mqtt
        self.name = "paho " + ("thread" if threaded else "loop")
        self.threaded = threaded
        self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=cid)
        self.c.max_inflight_messages_set(1000)
        self.c.max_queued_messages_set(0)
        self.c.connect(HOST, port, 60)
        if threaded:
            self.c.loop_start()
        else:
            while not self.c.is_connected():
                self.c.loop(0.01)

    def qos0(self, topic, n):
        pub = self.c.publish
        p = PAYLOAD
        for _ in range(n):
            pub(topic, p)
        if not self.threaded:
            while self.c.want_write():
                self.c.loop_write()

    def seq(self, qos, seconds):
        c = self.c
        pub = c.publish
        p = PAYLOAD
        n = 0
        end = time.perf_counter() + seconds
        if self.threaded:
            while time.perf_counter() < end:
                for _ in range(10):
                    pub(TOPIC, p, qos).wait_for_publish()
                n += 10
        else:
            loop = c.loop
            while time.perf_counter() < end:
                for _ in range(10):
                    info = pub(TOPIC, p, qos)
                    while not info.is_published():
                        loop(0.01)
                n += 10
        return n

    def close(self):
        self.c.disconnect()
        if self.threaded:
            self.c.loop_stop()
        else:
            self.c.loop(0.01)


# ------------------------------------------------------------ umqtt.simple

def load_simple():
    """umqtt.simple's MQTTClient on CPython, or None if the file is absent."""
    if not os.path.exists(SIMPLE):
        return None
    import binascii
    import struct
    import types

    class Sock:
        # MicroPython's stream socket methods on a blocking CPython socket
        def __init__(self, *a):
            self.s = socket.socket(*a)

        def connect(self, addr):
            self.s.connect(addr)

        def write(self, buf, n=None):
            b = memoryview(buf)[:n] if n is not None else buf
            self.s.sendall(b)
            return len(b)

        def read(self, n):
            b = b""
            while len(b) < n:
                r = self.s.recv(n - len(b))
                if not r:
                    break
                b += r
            return b

        def setblocking(self, flag):
            self.s.setblocking(flag)

        def close(self):
            self.s.close()

    us = types.ModuleType("usocket")
    us.socket = Sock
    us.getaddrinfo = socket.getaddrinfo
    for name, mod in (("usocket", us), ("ustruct", struct), ("ubinascii", binascii)):
        sys.modules.setdefault(name, mod)
    ns = {"__name__": "umqtt_simple"}
    with open(SIMPLE) as f:
        exec(compile(f.read(), SIMPLE, "exec"), ns)
    return ns["MQTTClient"]


class Simple:
    name = "umqtt.simple"
    cls = None

    def __init__(self, port, cid):
        self.c = self.cls(cid.encode(), HOST, port)
        self.c.connect()

    def qos0(self, topic, n):
        pub = self.c.publish
        t = topic.encode()
        p = PAYLOAD
        for _ in range(n):
            pub(t, p)

    def seq(self, qos, seconds):
        if qos == 2:
            return None
        pub = self.c.publish
        t = TOPIC.encode()
        p = PAYLOAD
        n = 0
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pub(t, p, False, qos)
            n += 1
        return n

    def close(self):
        self.c.disconnect()


# ------------------------------------------------------------ the floor

class Floor:
    """Not a client: the least a Python program can do (blocking socket,
    TCP_NODELAY, packets built by hand, acks read blindly): for QoS 0 all N
    packets in one sendall, for QoS 1/2 one round trip after the other. Shows
    how much of the time is the broker, the subscriber and the loopback."""
    name = "raw socket"

    def __init__(self, port, cid):
        s = self.s = socket.create_connection((HOST, port), 10)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c = cid.encode()
        body = b"\x00\x04MQTT\x04\x02\x00\x00" + len(c).to_bytes(2, "big") + c
        s.sendall(bytes([0x10, len(body)]) + body)
        self._read(4)
        self.pid = 0

    def _read(self, n):
        b = b""
        while len(b) < n:
            r = self.s.recv(n - len(b))
            if not r:
                raise OSError("closed")
            b += r
        return b

    def qos0(self, topic, n):
        # all N packets in one buffer, one sendall: the broker's ceiling
        t = topic.encode()
        body = len(t).to_bytes(2, "big") + t + PAYLOAD
        self.s.sendall((bytes([0x30, len(body)]) + body) * n)

    def seq(self, qos, seconds):
        # rounds of 20 round trips (a millisecond or so) between looks at the clock
        n = 0
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            self.seq_n(qos, 20)
            n += 20
        return n

    def seq_n(self, qos, n):
        s = self.s
        t = TOPIC.encode()
        head = len(t).to_bytes(2, "big") + t
        first = bytes([0x30 | qos << 1, len(head) + 2 + len(PAYLOAD)])
        for _ in range(n):
            self.pid = self.pid % 65535 + 1
            pid = self.pid.to_bytes(2, "big")
            s.sendall(first + head + pid + PAYLOAD)
            self._read(4)  # PUBACK / PUBREC
            if qos == 2:
                s.sendall(b"\x62\x02" + pid)
                self._read(4)  # PUBCOMP

    def close(self):
        self.s.sendall(b"\xe0\x00")
        self.s.close()


# ------------------------------------------------------------ workers

# Each client runs in its own process, so that one client's threads (paho's
# network thread) cannot change how fast another one's turn runs.
KINDS = {
    "umqtt3": lambda port, cid: Ours(port, cid),
    "paho-thread": lambda port, cid: Paho(port, cid, True),
    "paho-loop": lambda port, cid: Paho(port, cid, False),
    "umqtt.simple": lambda port, cid: Simple(port, cid),
    "raw-socket": lambda port, cid: Floor(port, cid),
}


def worker_main(kind, port):
    """Subprocess: one client; commands on stdin, one answer line each."""
    Simple.cls = load_simple()
    cl = KINDS[kind](port, "bench-" + kind)
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if cmd[0] == "q0":
            t0 = time.perf_counter()
            cl.qos0(cmd[1], int(cmd[2]))
            print("%.9f" % (time.perf_counter() - t0), flush=True)
        elif cmd[0] == "seq":
            t0 = time.perf_counter()
            c0 = time.process_time()
            n = cl.seq(int(cmd[1]), float(cmd[2]))
            print("%s %.9f %.9f" % ("-" if n is None else n, time.perf_counter() - t0,
                                    time.process_time() - c0), flush=True)
        else:
            cl.close()
            print("bye", flush=True)
            return


class Worker:
    def __init__(self, kind, port):
        self.kind = kind
        self.p = subprocess.Popen([sys.executable, "-m", "tools.measure.client", "--worker", kind,
                                   str(port)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self._answer(20) == "ready", kind

    def _answer(self, timeout):
        if not select.select([self.p.stdout.fileno()], [], [], timeout)[0]:
            raise RuntimeError("%s did not answer" % self.kind)
        return self.p.stdout.readline().decode().strip()

    def ask(self, cmd, timeout=60):
        self.p.stdin.write((cmd + "\n").encode())
        self.p.stdin.flush()
        return self._answer(timeout)

    def close(self):
        try:
            self.ask("close", 10)
        finally:
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(5)


def run_qos0(w, port, n, tag):
    """(end-to-end rate or None if messages were missing, handed-over rate,
    the subscriber's last line)."""
    topic = "bench/q0/%s" % tag
    cnt = Counter(port, topic, n)
    t0 = time.perf_counter()
    handed = float(w.ask("q0 %s %d" % (topic, n)))
    ok, line = cnt.wait()
    t2 = time.perf_counter()
    return (n / (t2 - t0) if ok else None), n / handed, line


# ------------------------------------------------------------ QoS 1 alone

CPU_N = 3000  # messages per --cpu round
PROFILE_N = 20000
IR_N = (1000, 3000)  # --instructions: two runs, start-up cancels out


class _Broker(mosq.Broker):
    """mosquitto in a directory of its own, removed when it stops."""

    def stop(self, timeout=10.0):
        mosq.Broker.stop(self, timeout)
        shutil.rmtree(self.dir, ignore_errors=True)


def _broker():
    if not mosq.MOSQUITTO:
        raise SystemExit("mosquitto is not installed")
    import tempfile
    return _Broker(tempfile.mkdtemp(prefix="umqtt3-bench-")).start()


def _load():
    return "load average %.1f" % os.getloadavg()[0]


def python_build():
    """How the interpreter was built, as far as it moves this benchmark:
    umqtt3's time is mostly the interpreter's, the bound's mostly system
    calls. An interpreter in a shared libpython (pyenv's default) runs
    Python code slower than one linked into its executable with PGO/LTO
    (Debian's /usr/bin/python3), so the ratio to the bound is lower."""
    import sysconfig
    conf = sysconfig.get_config_var("CONFIG_ARGS") or ""
    flags = [f for f in ("--enable-optimizations", "--with-lto") if f in conf]
    lib = None
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                if "libpython" in line:
                    lib = line.split()[-1]
                    break
        where = "libpython shared: %s" % lib if lib else "libpython in the executable"
    except OSError:
        where = "libpython: unknown"
    return "%s; CONFIG_ARGS %s" % (where, " ".join(flags) if flags else
                                  "without --enable-optimizations or --with-lto")


def cpu_main(rounds):
    """--cpu: umqtt3 and the bound in this process, alternating rounds;
    process_time per message."""
    broker = _broker()
    try:
        ours, floor = Ours(broker.port, "bench-cpu-ours"), Floor(broker.port, "bench-cpu-raw")
        pair = [("umqtt3", ours), ("raw-socket", floor)]
        for _, cl in pair:
            cl.seq_n(1, 500)  # warm up
        us = {"umqtt3": [], "raw-socket": []}
        print("sequential QoS 1, CPU time per message in one process: %d rounds of %d "
              "messages each, alternating; %s" % (rounds, CPU_N, _load()))
        for r in range(rounds):
            for name, cl in pair if r % 2 == 0 else pair[::-1]:
                c0 = time.process_time()
                cl.seq_n(1, CPU_N)
                us[name].append((time.process_time() - c0) / CPU_N * 1e6)
        for name, xs in us.items():
            print("  %-12s %6.2f us/msg median, %6.2f min" % (name, _common.median(xs), min(xs)))
        print("  umqtt3 / raw-socket: %.2fx CPU per message (medians); %s at the end" % (
            _common.median(us["umqtt3"]) / _common.median(us["raw-socket"]), _load()))
        ours.close()
        floor.close()
    finally:
        broker.stop()
        broker.kill()


def profile_main():
    """--profile: cProfile of sequential QoS 1, by module and by function."""
    import cProfile
    import pstats
    broker = _broker()
    try:
        ours = Ours(broker.port, "bench-profile")
        ours.seq_n(1, 500)
        pr = cProfile.Profile()
        pr.enable()
        ours.seq_n(1, PROFILE_N)
        pr.disable()
        ours.close()
    finally:
        broker.stop()
        broker.kill()
    st = pstats.Stats(pr).stats  # (file, line, name) -> (cc, calls, tottime, cumtime, callers)
    n = PROFILE_N
    rows = []
    for (fn, line, name), (_, calls, tt, _, _) in st.items():
        if fn == "~":  # a built-in; the socket's and poll's methods are system calls
            where = "system calls" if ("socket" in name or "select" in name) else "built-ins"
            label = name
        else:
            if name == "seq_n":
                continue  # this benchmark's own loop
            where = fn.split("lib" + os.sep, 1)[-1]
            label = "%s:%d %s" % (where, line, name)
        rows.append((where, label, calls, tt))
    total = sum(r[3] for r in rows)
    py = sum(r[3] for r in rows if r[0] != "system calls")
    calls = sum(r[2] for r in rows if r[0] != "system calls")
    print("sequential QoS 1 under cProfile: %d messages, %.1f us per message, of which "
          "Python %.1f us (%.0f calls per message); %s" % (
              n, total / n * 1e6, py / n * 1e6, calls / n, _load()))
    print("(the profiler inflates every call; system calls include the wait for the broker)")
    by = {}
    for where, _, c, tt in rows:
        by[where] = by.get(where, 0) + tt
    print("  %-34s %8s %8s" % ("by module", "us/msg", "% Python"))
    for where, tt in sorted(by.items(), key=lambda x: -x[1]):
        share = "" if where == "system calls" else "%.0f %%" % (tt / py * 100)
        print("  %-34s %8.2f %8s" % (where, tt / n * 1e6, share))
    print("  %-50s %9s %8s" % ("functions", "calls/msg", "us/msg"))
    for where, label, c, tt in sorted(rows, key=lambda r: -r[3])[:25]:
        print("  %-50s %9.1f %8.2f" % (label[:50], c / n, tt / n * 1e6))


def instructions_main():
    """--instructions: user-space instructions per message under valgrind."""
    import re
    import shutil
    vg = shutil.which("valgrind")
    if not vg:
        raise SystemExit("valgrind is not installed")
    broker = _broker()
    try:
        print("sequential QoS 1 under valgrind (cachegrind, no cache simulation): user-space "
              "instructions per message, from runs of %d and %d messages" % IR_N)
        res = {}
        for kind in ("umqtt3", "raw-socket"):
            refs = []
            for n in IR_N:
                out = subprocess.run(
                    [vg, "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
                     sys.executable, "-m", "tools.measure.client", "--seq-n", kind,
                     str(broker.port), str(n)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    timeout=600).stderr.decode()
                m = re.search(r"I\s+refs:\s+([\d,]+)", out)
                if not m:
                    raise SystemExit("no instruction count from valgrind: " + out[-500:])
                refs.append(int(m.group(1).replace(",", "")))
            res[kind] = (refs[1] - refs[0]) / (IR_N[1] - IR_N[0])
            print("  %-12s %9.0f instructions/msg" % (kind, res[kind]))
        print("  umqtt3 / raw-socket: %.2fx" % (res["umqtt3"] / res["raw-socket"]))
    finally:
        broker.stop()
        broker.kill()


BC_N = 300  # --bytecodes: messages traced


def _bytecodes(run):
    """(bytecodes, calls) per function (file:line name) while run() runs."""
    trace, ops, calls = _common.bytecode_counter(os.path.join(os.getcwd(), "lib"))
    sys.settrace(trace)
    try:
        run()
    finally:
        sys.settrace(None)
    return ops, calls


def bytecodes_main():
    """--bytecodes: Python bytecodes and calls per QoS 1 message, by function,
    umqtt3 and the bound."""
    broker = _broker()
    try:
        ours, floor = Ours(broker.port, "bench-bc-ours"), Floor(broker.port, "bench-bc-raw")
        print("sequential QoS 1: Python bytecodes per message (sys.settrace opcode events, "
              "%d messages after 500)" % BC_N)
        total = {}
        for name, cl in (("umqtt3", ours), ("raw-socket", floor)):
            cl.seq_n(1, 500)  # warm up
            # (seq_n is the loop: umqtt3's calls publish(), the bound's
            # builds and sends the packet itself)
            ops, calls = _bytecodes(lambda: cl.seq_n(1, BC_N))
            n = sum(ops.values()) / BC_N
            total[name] = n
            print("  %-12s %7.0f bytecodes/msg in %5.1f Python calls" % (
                name, n, sum(calls.values()) / BC_N))
            if name == "umqtt3":
                for k, v in sorted(ops.items(), key=lambda x: -x[1]):
                    if v < BC_N / 10:
                        continue  # the run's own start (the lambda)
                    print("    %-52s %6.1f  (%.1f calls)" % (k[:52], v / BC_N,
                                                             calls.get(k, 0) / BC_N))
        print("  umqtt3 / raw-socket: %.1fx" % (total["umqtt3"] / max(total["raw-socket"], 1)))
        ours.close()
        floor.close()
    finally:
        broker.stop()
        broker.kill()


def seq_n_main(kind, port, n):
    """Subprocess (--instructions): connect, n sequential QoS 1 messages."""
    cl = KINDS[kind](port, "bench-ir-" + kind)
    cl.seq_n(1, n)
    cl.close()


# ------------------------------------------------------------ main

def main(argv=None):
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--count-sub"]:
        count_sub_main(int(argv[1]), argv[2], int(argv[3]))
        return
    if argv[:1] == ["--worker"]:
        worker_main(argv[1], int(argv[2]))
        return
    if argv[:1] == ["--seq-n"]:
        seq_n_main(argv[1], int(argv[2]), int(argv[3]))
        return
    ap = _args.parser("python -m tools.measure.client", __doc__)
    ap.add_argument("--quick", action="store_true", help="short rounds (about 10 s in all)")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--cpu", action="store_true",
                      help="QoS 1 only: CPU per message, umqtt3 and the bound in one process")
    mode.add_argument("--profile", action="store_true",
                      help="QoS 1 only: where umqtt3's time goes (cProfile)")
    mode.add_argument("--instructions", action="store_true",
                      help="QoS 1 only: instructions per message under valgrind")
    mode.add_argument("--bytecodes", action="store_true",
                      help="QoS 1 only: Python bytecodes per message, by function")
    args = ap.parse_args(argv)
    if args.cpu:
        cpu_main(10 if args.quick else 20)
        return
    if args.profile:
        profile_main()
        return
    if args.instructions:
        instructions_main()
        return
    if args.bytecodes:
        bytecodes_main()
        return
    rounds = 1 if args.quick else 3
    seconds = 0.5 if args.quick else 1.0
    n0 = 20000 if args.quick else 50000
    turns = max(1, int(round(rounds * seconds / SLICE)))

    if not mosq.MOSQUITTO:
        raise SystemExit("mosquitto is not installed")
    have_simple = os.path.exists(SIMPLE)

    broker = _broker()
    started = time.perf_counter()
    workers = []
    try:
        out = subprocess.run([mosq.MOSQUITTO, "-h"], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, timeout=10).stdout.decode()
        print("umqtt3 client benchmark: mosquitto on 127.0.0.1:%d, MQTT 3.1.1" % broker.port)
        print("  topic %r, payload %d bytes" % (TOPIC, len(PAYLOAD)))
        print("  python: %s" % _common.python_version())
        print("  python build: %s" % python_build())
        print("  broker: %s" % out.splitlines()[0])
        print("  paho-mqtt %s" % _common.dist_version("paho-mqtt"))
        if have_simple:
            print("  umqtt.simple: %s (CPython shims for usocket/ustruct/ubinascii)" % SIMPLE)
        else:
            print("  umqtt.simple: %s, skipped" % ("%s not found" % SIMPLE if SIMPLE
                                                    else "not under build/peers (make peers)"))
        print("  each client in its own process; QoS 0: %d round(s) of %d messages;"
              " QoS 1/2: %d turns of %.2f s per client, round robin" % (rounds, n0, turns, SLICE))
        print()

        kinds = ["umqtt3", "paho-thread", "paho-loop"]
        if have_simple:
            kinds.append("umqtt.simple")
        kinds.append("raw-socket")
        workers = [Worker(k, broker.port) for k in kinds]

        # per_round[test][kind]: one rate per round, None where there is none;
        # rounds interleave the clients so that a slow moment of this machine
        # is shared out rather than landing on one client
        per_round = {0: {}, "0h": {}, 1: {}, 2: {}}
        for k in kinds:
            for t in per_round:
                per_round[t][k] = []
        notes = {}
        for r in range(rounds):
            for w in workers:
                tag = "%s-%d" % (w.kind.replace(".", "-"), r)
                full, handed, line = run_qos0(w, broker.port, n0, tag)
                per_round[0][w.kind].append(full)
                per_round["0h"][w.kind].append(handed)
                if full is None:
                    notes[w.kind] = "  (subscriber: %s, wanted %d bytes)" % (
                        line, n0 * packet_len("bench/q0/" + tag))
        cpu = {}  # (qos, kind) -> [process CPU seconds, messages]
        for q in (1, 2):
            for w in workers:
                w.ask("seq %d 0.1" % q)  # warm up
                cpu[q, w.kind] = [0.0, 0]
            # short turns, round robin, starting with a different client
            # each time: the speed of this machine drifts within a second
            for i in range(turns):
                k = i % len(workers)
                for w in workers[k:] + workers[:k]:
                    n, dt, dc = w.ask("seq %d %f" % (q, SLICE)).split()
                    per_round[q][w.kind].append(None if n == "-" else int(n) / float(dt))
                    if n != "-":
                        cpu[q, w.kind][0] += float(dc)
                        cpu[q, w.kind][1] += int(n)

        def med(t, k):
            xs = [x for x in per_round[t][k] if x]
            return _common.median(xs) if xs else None

        def rate(x):
            return _common.fmt_rate(x) if x else "n/a"

        print("  QoS 0: from the first publish until the subscriber had them all")
        print("  %-14s %14s %16s" % ("client", "msgs/s", "handed over/s"))
        for k in kinds:
            print("  %-14s %14s %16s%s" % (k, rate(med(0, k)) if med(0, k) else "lost msgs",
                                          rate(med("0h", k)), notes.get(k, "")))
        print()
        print("  QoS 1 and 2: sequential round trips (the next publish after the ack)")
        print("  %-14s %14s %14s" % ("client", "qos1 msgs/s", "qos2 msgs/s"))
        for k in kinds:
            print("  %-14s %14s %14s" % (k, rate(med(1, k)), rate(med(2, k))))
        print()

        # the client process's own CPU time per message: what the client
        # costs, apart from the broker, the loopback and this machine's load
        print("  QoS 1 and 2: CPU time of the client's process per message")
        print("  %-14s %14s %14s" % ("client", "qos1 us/msg", "qos2 us/msg"))
        for k in kinds:
            us = ["%.1f" % (cpu[q, k][0] / cpu[q, k][1] * 1e6) if cpu[q, k][1] else "n/a"
                  for q in (1, 2)]
            print("  %-14s %14s %14s" % (k, us[0], us[1]))
        cr = ["%.2fx" % (cpu[q, "umqtt3"][0] / cpu[q, "umqtt3"][1] /
                         (cpu[q, "raw-socket"][0] / cpu[q, "raw-socket"][1]))
              if cpu[q, "umqtt3"][1] and cpu[q, "raw-socket"][1] else "n/a" for q in (1, 2)]
        print("  %-14s %14s %14s" % ("umqtt3 / raw", cr[0], cr[1]))
        print()

        def ratio(t, peer):
            # median over rounds of (umqtt3 / peer) within the same round:
            # the two ran back to back, on the same machine speed
            ours = per_round[t]["umqtt3"]
            if peer == "paho":
                a = per_round[t]["paho-thread"]
                b = per_round[t]["paho-loop"]
                theirs = [max(x or 0, y or 0) or None for x, y in zip(a, b)]
            else:
                theirs = per_round[t].get(peer)
            xs = [o / p for o, p in zip(ours, theirs or []) if o and p]
            return "%.2fx" % _common.median(xs) if xs else "-"

        print("  ratio umqtt3 / peer: median over rounds of the ratio within a round")
        print("  %-22s %10s %12s %10s %10s" % ("peer", "qos0", "qos0 handed", "qos1", "qos2"))
        peers = [("paho", "paho (faster mode)"), ("paho-thread", "paho-thread"),
                 ("paho-loop", "paho-loop")]
        if have_simple:
            peers.append(("umqtt.simple", "umqtt.simple"))
        peers.append(("raw-socket", "raw-socket (a bound)"))
        for peer, label in peers:
            handed = "-" if peer == "raw-socket" else ratio("0h", peer)  # one sendall
            print("  %-22s %10s %12s %10s %10s" % (label, ratio(0, peer), handed,
                                                   ratio(1, peer), ratio(2, peer)))
        print()
        print("  goals: QoS 1 >= 2x paho, QoS 0 >= 1.5x paho")
        print("  total run time %.1f s" % (time.perf_counter() - started))
    finally:
        for w in workers:
            try:
                w.close()
            except Exception:
                w.p.kill()
        broker.stop()
        broker.kill()


if __name__ == "__main__":
    main()
