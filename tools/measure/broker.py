#!/usr/bin/env python3
"""Broker throughput: umqtt3's broker (CPython) next to amqtt and mosquitto.

    python -m tools.measure.broker            full run (about a minute)
    python -m tools.measure.broker --quick    a few seconds per broker
    python -m tools.measure.broker --only umqtt3,mosquitto
    python -m tools.measure.broker --store --only umqtt3
    python -m tools.measure.broker --level 5 --only umqtt3,mosquitto
    python -m tools.measure.broker --backlog 40000 --only umqtt3,mosquitto
    python -m tools.measure.broker --core 8
    python -m tools.measure.broker --core 8 --instructions
    python -m tools.measure.broker --core-in 1
    python -m tools.measure.broker --core-in 1 --instructions

Scenarios, each at QoS 0, 1 and 2:
  fan-in   8 publishers -> 1 subscriber
  fan-out  1 publisher  -> 8 subscribers
Figures are messages delivered to subscribers per second.

Every broker runs in its own process on 127.0.0.1 (a free port), started and
stopped here: ours with `python -m umqtt3.broker`, amqtt with its `amqtt`
console script and a YAML config (anonymous, no logging plugins), mosquitto
with a generated config (`listener PORT 127.0.0.1`, `allow_anonymous true`).
All three get the same load generator: one process, non-blocking sockets,
packets pre-built with umqtt3.codec, every QoS 1/2 flow answered. The load
is closed-loop (at most WINDOW messages not yet delivered, at most
PUB_WINDOW unacknowledged per publisher), so no broker is pushed into
dropping messages and the figure is what it sustains.

--store adds a column "umqtt3+store": the same broker with `--store DIR`
(a directory on the disk /tmp is on), which writes and fsyncs what it
acknowledges before the acknowledgement. Every client then connects with
CleanSession 0 (fresh client ids per case), in every column, so that the
sessions are persistent and their QoS 1/2 messages are written.

The generator is Python too, so a fast broker can be limited by it: the
mosquitto column is a floor for mosquitto, and the umqtt3/mosquitto ratio
is an upper bound. The script prints; it asserts nothing.

--level 5 makes every client an MQTT 5.0 one (3.1.1, level 4, by default):
the same packets with an empty property list, and with --store a session
expiry interval of an hour instead of CleanSession 0. amqtt, which speaks
3.1.1 only, is then skipped.

BENCH_PROFILE=FILE runs our broker under cProfile (wall clock) and writes
its statistics to FILE; with BENCH_PROFILE_CLOCK=cpu too, by the process's
CPU time, so that waiting in poll() counts for nothing.

--backlog N measures something else: N QoS 1 messages are queued for two
offline persistent subscribers, one at level 4 (CleanSession 0) and one at
level 5 (clean start 0, session expiry an hour), then each connects in
turn and drains its queue, acknowledging every message; twice, level 4
first then level 5 first, and the two averaged. Printed: the
broker's CPU time per message drained at each level, and the level-5 /
level-4 ratio. Each broker queues N (umqtt3 --max-queued, mosquitto
max_queued_messages) with 32 in flight per client (umqtt3's default,
mosquitto's max_inflight_messages).

--core S measures umqtt3's broker core alone, in this process, without
sockets or a peer: one publisher's QoS 0 PUBLISHes fed in gulps of 50 with
broker_bytes.feed() to S subscribers at QoS 0, each subscriber's bytes
taken after each gulp. Printed: CPU time per delivered message (the
routing path without the driver and the kernel); compare two trees by
running it in each, alternately, or with --instructions (below).

--core-in Q is the same for fan-in at QoS Q: 8 publishers' QoS Q PUBLISHes
fed in gulps of 16 each, in turn, to one subscriber at QoS Q whose window
(32 in flight) is soon full, so that most messages queue; after each round
of the 8 gulps the subscriber takes what it is sent and answers every flow
(PUBACK, or PUBREC then PUBCOMP) until nothing is left, and each publisher
answers its PUBRECs with PUBREL. Printed: CPU time per delivered message.
With --instructions, user-space instructions per delivered message under
valgrind (cachegrind without cache simulation; runs of two sizes, so that
the start-up cancels out): independent of the machine's load.
"""
import os
import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIB = os.path.join(REPO, "lib")

from tools import args
from umqtt3.codec import encode_connect, encode_subscribe, encode_publish

WINDOW = 400  # messages published but not yet delivered, over all subscribers
PUB_WINDOW = 16  # unacknowledged QoS 1/2 messages per publisher
PAYLOAD = b"0123456789abcdef"
TOPIC = b"bench/topic"
NCLIENTS = 8
LEVEL = 4  # the protocol level of every client (--level)
QUEUED = 0  # --backlog: messages a broker must queue per client (0: its default)
SX_HOUR = b"\x11\x00\x00\x0e\x10"  # session expiry interval 3600 s, a level-5 CONNECT property


# ---------------------------------------------------------------- brokers

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port, proc, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


class Server:
    def __init__(self, name, argv, port, env=None):
        self.name = name
        self.port = port
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     stdin=subprocess.DEVNULL)
        if not wait_port(port, self.proc):
            self.stop()
            self.log.seek(0)
            raise RuntimeError("%s did not start: %s" % (name, self.log.read()[-400:]))

    def cpu(self):
        """CPU seconds (user + system) the server process has used so far."""
        t = self.times()
        return None if t is None else t[0] + t[1]

    def times(self):
        """(user, system) CPU seconds of the server process so far, or None."""
        try:
            with open("/proc/%d/stat" % self.proc.pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            tck = os.sysconf("SC_CLK_TCK")
            return int(fields[11]) / tck, int(fields[12]) / tck
        except (OSError, ValueError, IndexError):
            return None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


# python -c CPU_PROFILE FILE -m umqtt3.broker ARGS: cProfile by process time
CPU_PROFILE = """import cProfile, runpy, sys, time
out = sys.argv[1]
sys.argv = ["umqtt3.broker"] + sys.argv[4:]  # after FILE -m umqtt3.broker
pr = cProfile.Profile(time.process_time)
pr.enable()
try:
    runpy.run_module("umqtt3.broker", run_name="__main__", alter_sys=True)
finally:
    pr.disable()
    pr.dump_stats(out)
"""


def start_umqtt3(tmp, extra=()):
    port = free_port()
    env = dict(os.environ, PYTHONPATH=LIB)
    prof = os.environ.get("BENCH_PROFILE")  # a file: run our broker under cProfile
    pre = ["-m", "cProfile", "-o", prof] if prof else []
    if prof and os.environ.get("BENCH_PROFILE_CLOCK") == "cpu":
        # the process's CPU time instead of the wall clock: waiting in
        # poll() and for a core on a busy machine counts for nothing
        pre = ["-c", CPU_PROFILE, prof]
    if QUEUED:
        # in messages only, as mosquitto's max_queued_messages (no byte budget)
        extra = list(extra) + ["--max-queued", str(QUEUED), "--max-queued-bytes", "0",
                               "--mem-budget", "0"]
    return Server("umqtt3", [sys.executable] + pre + ["-m", "umqtt3.broker", "--host", "127.0.0.1",
                             "--port", str(port), "--quiet", "--sys-interval", "0"] + list(extra),
                  port, env)


def start_umqtt3_store(tmp):
    srv = start_umqtt3(tmp, ["--store", os.path.join(tmp, "umqtt3-store")])
    srv.name = "umqtt3+store"
    return srv


def start_amqtt(tmp):
    # its console script beside this Python first: `make bench` runs
    # .venv/bin/python without .venv/bin on PATH
    exe = shutil.which("amqtt", path=os.path.dirname(sys.executable)) or shutil.which("amqtt")
    if not exe:
        raise RuntimeError("amqtt is not installed")
    port = free_port()
    conf = os.path.join(tmp, "amqtt.yaml")
    with open(conf, "w") as f:
        f.write("listeners:\n  default:\n    type: tcp\n    bind: 127.0.0.1:%d\n"
                "plugins:\n  amqtt.plugins.authentication.AnonymousAuthPlugin:\n"
                "    allow_anonymous: true\n" % port)
    return Server("amqtt", [exe, "-c", conf], port)


def start_mosquitto(tmp):
    exe = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    if not os.path.exists(exe):
        raise RuntimeError("mosquitto is not installed")
    port = free_port()
    conf = os.path.join(tmp, "mosquitto.conf")
    # TCP_NODELAY as the other two brokers. No in-flight quota: with 8
    # publishers more than 20 QoS 1/2 messages wait for one subscriber, and
    # Debian's 2.0.11 then leaves queued messages unsent (its in-flight quota
    # bugs were fixed in 2.0.13), which would measure a stall, not a rate.
    lines = ["listener %d 127.0.0.1" % port, "allow_anonymous true", "log_dest none",
             "set_tcp_nodelay true", "max_inflight_messages %d" % (32 if QUEUED else 0)]
    if QUEUED:
        lines.append("max_queued_messages %d" % QUEUED)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        lines.append("user root")
    with open(conf, "w") as f:
        f.write("\n".join(lines) + "\n")
    return Server("mosquitto", [exe, "-c", conf], port)


CASES = [(sc, q) for sc in ("fan-in", "fan-out") for q in (0, 1, 2)]
STARTERS = {"umqtt3": start_umqtt3, "umqtt3+store": start_umqtt3_store, "amqtt": start_amqtt,
            "mosquitto": start_mosquitto}


# ---------------------------------------------------------------- load generator

class Peer:
    def __init__(self, port, cid, sub_qos=None, clean=True, level=None):
        level = level or LEVEL
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = bytearray(256)
        props = SX_HOUR if level == 5 and not clean else None
        n = encode_connect(buf, 0, cid, level, clean, 0, props=props)
        s.sendall(buf[:n])
        if _read_frame(s)[0] != 0x20:
            raise RuntimeError("no CONNACK")
        if sub_qos is not None:
            n = encode_subscribe(buf, 0, 1, TOPIC, sub_qos, level=level)
            s.sendall(buf[:n])
            if _read_frame(s)[0] != 0x90:
                raise RuntimeError("no SUBACK")
        s.setblocking(False)
        self.cid = cid
        self.s = s
        self.rbuf = bytearray()
        self.wbuf = bytearray()
        self.got = 0  # PUBLISHes received
        self.inflight = 0  # our unacknowledged QoS 1/2 publishes
        self.pid = 0

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass


def _read_exact(s, n):
    out = b""
    while len(out) < n:
        b = s.recv(n - len(out))
        if not b:
            raise RuntimeError("closed during set-up")
        out += b
    return out


def _read_frame(s):
    """One whole packet (blocking, during set-up): (first byte, body)."""
    first = _read_exact(s, 1)[0]
    rl = 0
    shift = 0
    while True:
        b = _read_exact(s, 1)[0]
        rl |= (b & 127) << shift
        shift += 7
        if not b & 128:
            break
    return first, _read_exact(s, rl)


def _parse(p):
    """Handle every whole packet in p.rbuf; queue the acknowledgements."""
    buf = p.rbuf
    n = len(buf)
    i = 0
    w = p.wbuf
    while n - i >= 2:
        rl = buf[i + 1]
        h = 2
        if rl & 128:
            rl &= 127
            shift = 7
            while True:
                if i + h >= n:
                    rl = -1
                    break
                b = buf[i + h]
                rl |= (b & 127) << shift
                h += 1
                if not b & 128:
                    break
                shift += 7
            if rl < 0:
                break
        end = i + h + rl
        if end > n:
            break
        first = buf[i]
        t = first >> 4
        if t == 3:
            p.got += 1
            q = first & 6
            if q:
                o = i + h
                o += 2 + ((buf[o] << 8) | buf[o + 1])
                w += (b"\x40\x02" if q == 2 else b"\x50\x02") + buf[o:o + 2]
        elif t == 4 or t == 7:  # PUBACK, PUBCOMP
            p.inflight -= 1
        elif t == 5:  # PUBREC -> PUBREL
            w += b"\x62\x02" + buf[i + 2:i + 4]
        elif t == 6:  # PUBREL -> PUBCOMP
            w += b"\x70\x02" + buf[i + 2:i + 4]
        i = end
    if i:
        del buf[:i]


def _frame(qos, pid, level=None):
    buf = bytearray(64)
    n = encode_publish(buf, 0, TOPIC, PAYLOAD, qos, pid, level=level or LEVEL)
    return bytes(buf[:n])


def run_load(port, scenario, qos, seconds, persistent=False):
    """Returns (messages delivered, seconds) for one scenario."""
    clean = not persistent
    tag = "%s%d-" % (scenario, qos) if persistent else ""  # fresh sessions per case
    if scenario == "fan-in":
        pubs = [Peer(port, tag + "pub%d" % i, None, clean) for i in range(NCLIENTS)]
        subs = [Peer(port, tag + "sub0", qos, clean)]
    else:
        pubs = [Peer(port, tag + "pub0", None, clean)]
        subs = [Peer(port, tag + "sub%d" % i, qos, clean) for i in range(NCLIENTS)]
    peers = pubs + subs
    fan = len(subs)
    sel = selectors.DefaultSelector()
    for p in peers:
        sel.register(p.s, selectors.EVENT_READ, p)
    frames = [_frame(qos, pid) for pid in range(1, 65536)] if qos else None
    f0 = _frame(0, 0)
    published = 0
    t0 = time.monotonic()
    stop_at = t0 + seconds
    last = t0
    seen = 0
    try:
        while True:
            now = time.monotonic()
            delivered = sum(s.got for s in subs)
            if delivered > seen:
                seen = delivered
                last = now
            publishing = now < stop_at
            if not publishing and delivered >= published * fan:
                break
            if now > stop_at + 5:
                break  # something was lost; report what arrived
            if publishing:
                room = WINDOW - (published * fan - delivered) // fan
                for p in pubs:
                    k = room // len(pubs) + 1
                    if qos:
                        k = min(k, PUB_WINDOW - p.inflight)
                    if k <= 0:
                        continue
                    if qos:
                        for _ in range(k):
                            p.pid = p.pid % 65535 + 1
                            p.wbuf += frames[p.pid - 1]
                        p.inflight += k
                    else:
                        p.wbuf += f0 * k
                    published += k
            for p in peers:
                if p.wbuf:
                    try:
                        n = p.s.send(p.wbuf)
                        del p.wbuf[:n]
                    except BlockingIOError:
                        pass
            for key, _ in sel.select(0.05):
                p = key.data
                try:
                    data = p.s.recv(1 << 16)
                except BlockingIOError:
                    continue
                if not data:
                    raise RuntimeError("broker closed a connection")
                p.rbuf += data
                _parse(p)
        delivered = sum(s.got for s in subs)
        return delivered, last - t0
    finally:
        sel.close()
        for p in peers:
            p.close()
        if persistent:
            # end the sessions (CleanSession 1), so that the next case does
            # not also queue for this one's offline subscribers
            for p in peers:
                Peer(port, p.cid).close()


def run_backlog(srv, n, order):
    """--backlog: queue n QoS 1 messages for an offline level-4 and an
    offline level-5 persistent subscriber, then drain each in turn, in
    `order` (levels). Returns {level: (broker CPU seconds of its drain, of
    which system time)}."""
    port = srv.port
    for lv in (4, 5):
        Peer(port, "backlog%d" % lv, 1, False, lv).close()
    pub = Peer(port, "backlog-pub", None, True, 4)
    pub.s.setblocking(True)
    pub.s.settimeout(10)
    sent = 0
    while sent < n:  # in steps, every PUBACK read before the next step
        k = min(500, n - sent)
        pub.s.sendall(b"".join(_frame(1, (sent + i) % 65535 + 1, 4) for i in range(k)))
        sent += k
        pub.inflight += k
        while pub.inflight:
            data = pub.s.recv(1 << 16)
            if not data:
                raise RuntimeError("broker closed the publisher")
            pub.rbuf += data
            _parse(pub)
    pub.close()
    time.sleep(0.2)  # let the broker finish its queueing before the first drain
    cpu = {}
    for lv in order:
        t0 = srv.times()
        p = Peer(port, "backlog%d" % lv, None, False, lv)
        p.s.setblocking(True)
        p.s.settimeout(10)
        while p.got < n:
            data = p.s.recv(1 << 16)
            if not data:
                raise RuntimeError("broker closed the level-%d subscriber after %d" % (lv, p.got))
            p.rbuf += data
            _parse(p)
            if p.wbuf:
                p.s.sendall(p.wbuf)
                del p.wbuf[:]
        p.close()
        time.sleep(0.1)
        t1 = srv.times()
        cpu[lv] = (t1[0] + t1[1] - t0[0] - t0[1], t1[1] - t0[1])
        Peer(port, p.cid).close()  # end the session
    return cpu


def started(names):
    """Each broker of names, started in a temporary directory, as (name,
    server); one that cannot start is skipped with a line; each is stopped
    before the next starts."""
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            try:
                srv = STARTERS[name](tmp)
            except Exception as e:
                print("%s: skipped (%s)" % (name, e))
                continue
            try:
                yield name, srv
            finally:
                srv.stop()


def backlog_main(names, n):
    print("backlog drain: %d QoS 1 messages queued for one offline persistent subscriber,"
          " then drained (%d-core machine)" % (n, os.cpu_count() or 0))
    print("%-14s%16s%16s%12s%18s" % ("broker", "level 4 us/msg", "level 5 us/msg", "5 / 4",
                                     "system time 4/5"))
    res = {}
    for name, srv in started(names):
        try:
            # both orders, summed: the second drain of a run costs a
            # little more than the first, whatever its level
            a = run_backlog(srv, n, (4, 5))
            b = run_backlog(srv, n, (5, 4))
            cpu = {lv: (a[lv][0] + b[lv][0]) / 2 for lv in (4, 5)}
            sys_ = {lv: (a[lv][1] + b[lv][1]) / 2 for lv in (4, 5)}
        except Exception as e:
            print("%s failed: %s" % (name, e))
            continue
        res[name] = cpu
        print("%-14s%16.1f%16.1f%11.2fx%11.0f %%/%2.0f %%"
              % (name, cpu[4] * 1e6 / n, cpu[5] * 1e6 / n, cpu[5] / cpu[4] if cpu[4] else 0.0,
                 100 * sys_[4] / cpu[4] if cpu[4] else 0, 100 * sys_[5] / cpu[5] if cpu[5] else 0))
    u = res.get("umqtt3")
    for o in res:
        if u and o != "umqtt3" and res[o][4] and res[o][5]:
            print("CPU umqtt3 / %s: level 4 %.2fx, level 5 %.2fx (goal: at most 1)"
                  % (o, u[4] / res[o][4], u[5] / res[o][5]))


# ---------------------------------------------------------------- main

def table(title, names, cases, res, fmt, lower_better):
    print()
    print(title)
    head = "%-14s" % "case" + "".join("%14s" % n for n in names)
    others = [n for n in names if n != "umqtt3"] if "umqtt3" in names else []
    for o in others:
        # above 1x: umqtt3 the better, in either table
        head += "%24s" % ((o + " / umqtt3") if lower_better else ("umqtt3 / " + o))
    print(head)
    for sc, q in cases:
        row = "%-14s" % ("%s QoS %d" % (sc, q))
        for n in names:
            v = res.get((n, sc, q))
            row += "%14s" % ("-" if v is None else fmt % v)
        u = res.get(("umqtt3", sc, q))
        for o in others:
            v = res.get((o, sc, q))
            if not (u and v):
                row += "%24s" % "-"
            else:
                row += "%23.2fx" % ((v / u) if lower_better else (u / v))
        print(row)


def mp_ram():
    """RAM per connected client under the WebAssembly MicroPython, from the
    portable test that measures it (None when node is missing)."""
    node = shutil.which("node")
    if not node or not os.path.exists(os.path.join(REPO, "node_modules")):
        return None
    r = subprocess.run([node, "tests/mp/run.mjs", "tests/mp/testrunner.py", "test_broker_mem"],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    for line in r.stdout.splitlines():
        if line.startswith("RAM per connected client"):
            return line
    return None


def core_main(nsubs, n=60000, quiet=False):
    from umqtt3.broker_core import Core
    from umqtt3.broker_bytes import feed, take
    from umqtt3.broker_limits import Limits
    from umqtt3.transport import Conn
    buf = bytearray(256)

    def put(fn, *a):
        return bytes(buf[:fn(buf, 0, *a)])

    b = Core(Limits(sys_interval=0, max_packet=65536, max_clients=nsubs + 1))
    subs = []
    for i in range(nsubs + 1):
        c = b.open(Conn(None, b.limits.max_packet, b.limits.tx), "core", 0)
        feed(b, c, put(encode_connect, "c%d" % i, 4, True, 0), 0)
        if i < nsubs:
            feed(b, c, put(encode_subscribe, 1, [(TOPIC.decode(), 0)]), 0)
            subs.append(c)
        take(b, c)
    gulp = put(encode_publish, TOPIC, PAYLOAD, 0, 0) * 50
    t0 = time.process_time()
    for _ in range(n // 50):
        feed(b, c, gulp, 0)
        for s in subs:
            take(b, s)
    dt = time.process_time() - t0
    if not quiet:
        print("broker core, QoS 0 to %d subscribers: %.2f us CPU per delivered message"
              % (nsubs, dt * 1e6 / (n // 50 * 50) / nsubs))


CORE_N = (6000, 18000)  # --core S --instructions: two runs' messages


def core_instructions(nsubs):
    """--core S --instructions: user-space instructions per delivered
    message under valgrind (the difference of two runs: start-up cancels)."""
    refs = valgrind_refs(["--core-n", str(nsubs)], CORE_N)
    print("broker core, QoS 0 to %d subscribers, under valgrind: %.0f user-space instructions"
          " per delivered message (runs of %d and %d messages)"
          % (nsubs, (refs[1] - refs[0]) / ((CORE_N[1] - CORE_N[0]) * nsubs), *CORE_N))


def valgrind_refs(args, ns):
    """Instructions counted by valgrind in a run of this module with args
    and n, for each n of ns."""
    import re
    vg = shutil.which("valgrind")
    if not vg:
        raise SystemExit("valgrind is not installed")
    refs = []
    for n in ns:
        out = subprocess.run(
            [vg, "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
             sys.executable, "-m", "tools.measure.broker"] + args + [str(n)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=900,
            env=dict(os.environ, PYTHONPATH=LIB + os.pathsep + REPO)).stderr.decode()
        m = re.search(r"I\s+refs:\s+([\d,]+)", out)
        if not m:
            raise SystemExit("no instruction count from valgrind: " + out[-500:])
        refs.append(int(m.group(1).replace(",", "")))
    return refs


CORE_IN_GULP = 16  # --core-in: PUBLISHes per publisher per round
CORE_IN_N = (6400, 19200)  # --core-in --instructions: two runs' messages


def core_in_run(qos, n, trace=None):
    """--core-in: n QoS qos messages from 8 publishers to 1 subscriber
    through the core alone; returns the CPU seconds of the loop and the
    messages delivered. trace: a sys.settrace function for the loop."""
    from umqtt3.broker_core import Core
    from umqtt3.broker_bytes import feed, take
    from umqtt3.broker_limits import Limits
    from umqtt3.transport import Conn
    buf = bytearray(256)

    def put(fn, *a):
        return bytes(buf[:fn(buf, 0, *a)])

    from umqtt3_cli.broker import DESKTOP
    kw = dict(DESKTOP)  # the limits `python -m umqtt3.broker` runs with
    kw["sys_interval"] = 0
    b = Core(Limits(**kw))

    def client(cid, sub):
        c = b.open(Conn(None, b.limits.max_packet, b.limits.tx), "core", 0)
        feed(b, c, put(encode_connect, cid, 4, True, 0), 0)
        if sub:
            feed(b, c, put(encode_subscribe, 1, [(TOPIC.decode(), qos)]), 0)
        take(b, c)
        return c

    pubs = [client("pub%d" % i, False) for i in range(NCLIENTS)]
    sub = client("sub", True)

    class Side:  # what _parse() needs of a Peer
        def __init__(self):
            self.rbuf = bytearray()
            self.wbuf = bytearray()
            self.got = 0
            self.inflight = 0

    me = Side()
    L = len(_frame(qos, 1, 4))
    po = L - len(PAYLOAD) - 2  # a frame's packet id
    ack = b"\x40\x02" if qos == 1 else b"\x50\x02"

    def answer(me, out):
        # the subscriber's answers, in C where out is only PUBLISHes (or
        # only PUBRELs), so that the loop measures the broker, not this
        k = len(out) // L
        if len(out) == k * L and out[::L] == bytes((0x30 | qos << 1,)) * k:
            if not qos:
                me.got += k
                return b""
            a = bytearray(4 * k)
            a[0::4] = ack[:1] * k
            a[1::4] = b"\x02" * k
            a[2::4] = out[po::L]
            a[3::4] = out[po + 1::L]
            me.got += k
            return a
        k = len(out) >> 2
        if qos == 2 and len(out) == 4 * k and out[::4] == b"\x62" * k and out[1::4] == b"\x02" * k:
            a = bytearray(out)
            a[0::4] = b"\x70" * k  # PUBREL -> PUBCOMP
            return a
        me.rbuf += out
        _parse(me)
        a = bytes(me.wbuf)
        del me.wbuf[:]
        return a
    g = CORE_IN_GULP
    rounds = n // (g * NCLIENTS)
    # a publisher's gulps cycle through packet ids 1..16384 (< 65535)
    frames = [b"".join(_frame(qos, (r * g + i) % 16384 + 1, 4) for i in range(g))
              for r in range(16384 // g)]
    rels = [b"".join(b"\x62\x02" + bytes(((r * g + i) % 16384 + 1).to_bytes(2, "big"))
                     for i in range(g)) for r in range(16384 // g)]
    nf = len(frames)

    def loop():
        for r in range(rounds):
            for c in pubs:
                feed(b, c, frames[r % nf], 0)
                if qos == 2:
                    take(b, c)  # the PUBRECs
                    feed(b, c, rels[r % nf], 0)
                take(b, c)  # PUBACKs or PUBCOMPs
            while True:
                out = take(b, sub)
                if not out:
                    break
                feed(b, sub, answer(me, out), 0)

    t0 = time.process_time()
    if trace:
        sys.settrace(trace)
    try:
        loop()
    finally:
        sys.settrace(None)
    dt = time.process_time() - t0
    want = rounds * g * NCLIENTS
    if me.got != want:
        raise SystemExit("--core-in: %d messages delivered, %d sent" % (me.got, want))
    return dt, want


def core_in_bytecodes(qos, n=6400):
    """--core-in Q --bytecodes: Python bytecodes and calls per delivered
    message, by function (sys.settrace opcode events)."""
    from tools.measure.common import bytecode_counter
    trace, ops, calls = bytecode_counter(LIB)

    n = core_in_run(qos, n, trace)[1]
    print("broker core, fan-in QoS %d: %.0f Python bytecodes per delivered message in %.1f calls"
          " (the load's own included)" % (qos, sum(ops.values()) / n, sum(calls.values()) / n))
    for k, v in sorted(ops.items(), key=lambda x: -x[1]):
        if v >= n / 10:
            print("  %-56s %7.1f  (%.2f calls)" % (k[-56:], v / n, calls.get(k, 0) / n))


def core_in_main(qos, instructions, bytecodes=False):
    if bytecodes:
        core_in_bytecodes(qos)
        return
    if not instructions:
        dt, n = core_in_run(qos, 60000)
        print("broker core, fan-in QoS %d, %d publishers to 1 subscriber: %.2f us CPU per"
              " delivered message" % (qos, NCLIENTS, dt * 1e6 / n))
        return
    refs = valgrind_refs(["--core-in-n", str(qos)], CORE_IN_N)
    print("broker core, fan-in QoS %d, %d publishers to 1 subscriber, under valgrind: %.0f"
          " user-space instructions per delivered message (runs of %d and %d)"
          % (qos, NCLIENTS, (refs[1] - refs[0]) / (CORE_IN_N[1] - CORE_IN_N[0]), *CORE_IN_N))


def main():
    if sys.argv[1:2] == ["--core-in-n"]:  # the process valgrind runs (--instructions)
        core_in_run(int(sys.argv[2]), int(sys.argv[3]))
        return
    if sys.argv[1:2] == ["--core-n"]:  # the same for --core S --instructions
        core_main(int(sys.argv[2]), int(sys.argv[3]), True)
        return
    ap = args.parser("python -m tools.measure.broker", __doc__)
    ap.add_argument("--quick", action="store_true", help="short runs (under 20 s in all)")
    ap.add_argument("--seconds", type=args.positive,
                    help="seconds of load per scenario (default 2, quick 0.4)")
    ap.add_argument("--only", default="umqtt3,amqtt,mosquitto",
                    help="brokers to run, comma-separated: %s" % ", ".join(STARTERS))
    ap.add_argument("--case", help="only these cases, comma-separated: %s"
                    % ", ".join("%s:%d" % c for c in CASES))
    ap.add_argument("--no-ram", action="store_true", help="skip the MicroPython RAM figure")
    ap.add_argument("--level", type=int, choices=(4, 5), default=4,
                    help="protocol level of every client: 4 (3.1.1) or 5 (5.0)")
    ap.add_argument("--backlog", type=int, metavar="N",
                    help="instead: CPU to drain N queued QoS 1 messages at level 4 and 5")
    ap.add_argument("--core", type=int, metavar="S",
                    help="instead: umqtt3's core alone, QoS 0 to S subscribers, in process")
    ap.add_argument("--core-in", type=int, metavar="Q", choices=(0, 1, 2),
                    help="instead: umqtt3's core alone, fan-in at QoS Q, in process")
    ap.add_argument("--instructions", action="store_true",
                    help="with --core or --core-in: instructions per message under valgrind")
    ap.add_argument("--bytecodes", action="store_true",
                    help="with --core-in: Python bytecodes per message, by function")
    ap.add_argument("--store", action="store_true",
                    help="also umqtt3 with a store; persistent sessions in every column")
    a = ap.parse_args()
    only = args.names(ap, "--only", a.only, list(STARTERS), "broker")
    want = args.names(ap, "--case", a.case, ["%s:%d" % c for c in CASES], "case") \
        if a.case is not None else None
    secs = a.seconds or (0.4 if a.quick else 2.0)
    global LEVEL
    LEVEL = a.level
    if a.core is not None:
        if not 1 <= a.core <= 64:
            ap.error("--core: 1 to 64 subscribers")
        if a.bytecodes:
            ap.error("--bytecodes: only with --core-in")
        if a.instructions:
            core_instructions(a.core)
        else:
            core_main(a.core)
        return
    if a.core_in is not None:
        core_in_main(a.core_in, a.instructions, a.bytecodes)
        return
    if a.instructions or a.bytecodes:
        ap.error("--instructions: only with --core or --core-in; --bytecodes: only with --core-in")
    names = [n for n in only if not ((a.level == 5 or a.backlog) and n == "amqtt")]
    if a.backlog is not None:
        if not 1 <= a.backlog <= 60000:
            ap.error("--backlog: 1 to 60000 messages")
        global QUEUED
        QUEUED = a.backlog + 100
        backlog_main(names, a.backlog)
        return
    if a.store and "umqtt3+store" not in names:
        names.insert(names.index("umqtt3") + 1 if "umqtt3" in names else 0, "umqtt3+store")
    cases = CASES
    if want is not None:
        cases = [(sc, q) for sc, q in cases if "%s:%d" % (sc, q) in want]
    results = {}
    cpu = {}  # broker CPU microseconds per delivered message
    ksys = {}  # of which system (kernel) time
    t_start = time.monotonic()
    for name, srv in started(names):
        for sc, q in cases:
            try:
                c0 = srv.times()
                n, dt = run_load(srv.port, sc, q, secs, a.store)
                c1 = srv.times()
                results[(name, sc, q)] = n / dt if dt > 0 else 0.0
                if n and c0 is not None and c1 is not None:
                    cpu[(name, sc, q)] = (c1[0] + c1[1] - c0[0] - c0[1]) * 1e6 / n
                    ksys[(name, sc, q)] = (c1[1] - c0[1]) * 1e6 / n
            except Exception as e:
                print("%s %s QoS %d failed: %s" % (name, sc, q, e))
    table("messages delivered per second (payload %d bytes, %.1f s per case, %d-core machine,"
          " MQTT %s clients%s)" % (len(PAYLOAD), secs, os.cpu_count() or 0,
                                   "5.0" if LEVEL == 5 else "3.1.1",
                                   ", persistent sessions" if a.store else ""),
          names, cases, results, "%.0f", False)
    table("broker CPU time per delivered message, microseconds (lower is better)",
          names, cases, cpu, "%.1f", True)
    table("of which system (kernel) time, microseconds per delivered message",
          names, cases, ksys, "%.1f", True)
    print("goals: umqtt3 >= 5x amqtt and >= 0.3x mosquitto. The load generator is Python on the"
          " same machine:\nwhere a broker keeps up with it, messages/s is the generator's limit"
          " and the CPU table tells the brokers apart.")
    if not a.no_ram and not a.quick:
        line = mp_ram()
        if line:
            print(line)
    print("total %.1f s" % (time.monotonic() - t_start))


if __name__ == "__main__":
    main()
