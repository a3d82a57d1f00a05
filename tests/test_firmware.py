"""The sensor-node firmware (firmware/node.py) under CPython, through the
desktop stand-ins in tools/desktop/shim/, against our broker (python -m umqtt3.broker
on a free loopback port): birth and retained will, readings with sequence
numbers and one boot id per boot, a node SIGKILLed and started again losing
no QoS 1 reading it had accepted, deep-sleep cycles, and every firmware and
board file compiled with mpy-cross."""
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

import collector  # tests/collector.py
from tools import procs
from tools.desktop.sim import fw  # firmware/ and the shims under their device names
from tools.procs import free_port
from umqtt3.client import MQTTClient

ROOT = procs.ROOT
fw_config, fw_node, machine = fw["config"], fw["node"], fw["machine"]

PREFIX = "fwtest"
DESKTOP = fw_config.board("desktop")


@pytest.fixture
def port():
    p = free_port()
    b = procs.start(procs.umqtt3_broker_cmd(p, "--quiet"), p,
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    yield p
    procs.stop(b, 5)


def Collector(port, name="collector"):
    return collector.Collector(port, PREFIX, name)


def cfg(name, port, **kw):
    c = {"node_id": name, "prefix": PREFIX, "broker": "127.0.0.1", "port": port,
         "period_s": 0.05, "keepalive": 10}
    c.update(kw)
    return c


def retained(port, topic):
    """What a new subscriber gets at once on `topic` (the retained message)."""
    got = []
    c = MQTTClient("peek%d" % free_port(), "127.0.0.1", port)
    c.set_callback(lambda t, m: got.append(m.decode()))
    c.connect()
    c.subscribe(topic, 1)
    end = time.monotonic() + 2
    while not got and time.monotonic() < end:
        c.poll(20)
    c.disconnect()
    return got


def check_payload(r):
    assert sorted(r) == ["boot", "seq", "t", "v"]  # the desktop clock is known: "t" is there
    assert 0 <= r["boot"] < 65536


def test_next_seq():
    for last in (0, 1, 2, 3, 7, 8, 100, 1023, 1024, 5000):
        assert fw_node.next_seq(lambda k: k <= last) == last + 1


def test_birth_readings_and_clean_stop(port):
    col = Collector(port)
    stop = threading.Event()
    n = fw_node.Node(cfg("a1", port), DESKTOP, {"ssid": "lab"}, stop=stop.is_set)
    t = threading.Thread(target=n.run, args=(0,), daemon=True)
    t.start()
    try:
        col.wait(lambda: len(col.readings("a1", "temp")) >= 5)
        # the birth is retained: a subscriber that comes later still sees it
        assert retained(port, "%s/a1/status" % PREFIX) == ["online"]
    finally:
        stop.set()
        t.join(10)
    col.wait(lambda: col.status("a1")[-1:] == ["offline"])
    assert col.status("a1")[0] == "online"
    assert retained(port, "%s/a1/status" % PREFIX) == ["offline"]
    col.close()
    rs = col.readings("a1")
    metrics = set(m for m, _ in rs)
    assert metrics == {"temp", "vbat", "uptime"}  # CPython has no gc.mem_free
    for _, r in rs:
        check_payload(r)
    assert len(set(r["boot"] for _, r in rs)) == 1 and rs[0][1]["boot"] == n.boot
    seqs = [r["seq"] for _, r in rs]
    assert seqs == list(range(1, len(seqs) + 1))  # one seq per reading, increasing
    temps = [r["v"] for m, r in rs if m == "temp"]
    assert all(10 < v < 35 for v in temps)
    assert n.wdt is not None and n.wdt.feeds > 0 and not n.wdt.late


def test_user_sensor_hook_and_qos0(port):
    col = Collector(port)
    n = fw_node.Node(cfg("a2", port, qos=0), DESKTOP, {"ssid": "lab"},
                     sensors={"soil": lambda: 41, "broken": lambda: 1 // 0})
    assert n.run(3) == 3
    col.wait(lambda: len(col.readings("a2", "soil")) == 3)
    col.close()
    assert [r["v"] for _, r in col.readings("a2", "soil")] == [41, 41, 41]
    assert not col.readings("a2", "broken")


NODE_SCRIPT = r"""
from tools.desktop.sim import fw_config as config, fw_node as node
cfg = %r
n = node.Node(cfg, config.board("desktop"), {"ssid": "lab"})
print("boot", n.boot, flush=True)
n.run(0)
"""


def start_node(port, store_dir, name="k1"):
    c = cfg(name, port, qos=1, store="file", store_dir=store_dir, period_s=0.02)
    return subprocess.Popen([sys.executable, "-c", NODE_SCRIPT % (c,)],
                            stdout=subprocess.PIPE, text=True, cwd=ROOT, env=procs.python_env())


def test_killed_node_loses_no_accepted_reading(port, tmp_path):
    col = Collector(port)
    store = str(tmp_path / "mq")
    p = start_node(port, store)
    boot1 = int(p.stdout.readline().split()[1])
    try:
        col.wait(lambda: len(col.readings("k1")) >= 30)
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait(5)
    # the broker publishes the retained will for the dead connection
    col.wait(lambda: "offline" in col.status("k1"))
    assert retained(port, "%s/k1/status" % PREFIX) == ["offline"]
    killed_at = len(col.readings("k1"))
    p = start_node(port, store)
    boot2 = int(p.stdout.readline().split()[1])
    try:
        col.wait(lambda: len(col.readings("k1")) >= killed_at + 30)
        col.wait(lambda: col.status("k1")[-1] == "online")
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(5)
    col.close()
    rs = [r for _, r in col.readings("k1")]
    for r in rs:
        check_payload(r)
    assert set(r["boot"] for r in rs) <= {boot1, boot2}
    by_boot = {}
    for r in rs:
        by_boot.setdefault(r["boot"], set()).add(r["seq"])
    if boot1 != boot2:  # 1 in 65536 they collide
        # the second boot carries on after the last reading the store took
        assert min(by_boot[boot2]) > max(by_boot[boot1])
    seqs = set(r["seq"] for r in rs)
    top = max(seqs)
    # nothing accepted is lost: every sequence number up to the last arrived
    assert seqs == set(range(1, top + 1)), sorted(set(range(1, top + 1)) - seqs)


def test_deep_sleep_cycles(port, tmp_path):
    col = Collector(port)
    boots = []
    for _ in range(3):  # each wake-up is a new boot: a new Node, as main.py makes
        n = fw_node.Node(cfg("s1", port, deep_sleep=True, period_s=60, store="file",
                             store_dir=str(tmp_path / "mq")), DESKTOP, {"ssid": "lab"})
        with pytest.raises(machine.DeepSleep) as e:
            n.run()
        assert e.value.ms == 60000
        boots.append(n.boot)
    col.wait(lambda: len(col.readings("s1")) >= 9 and col.status("s1")[-1:] == ["asleep"])
    col.close()
    assert col.status("s1") == ["online", "asleep"] * 3
    rs = [r for _, r in col.readings("s1")]
    assert [r["seq"] for r in rs] == list(range(1, 10))  # one store: seq goes on
    assert [r["boot"] for r in rs] == [b for b in boots for _ in range(3)]


# firmware/main.py as a board runs it (config "cycles": 2), on the desktop
# stand-ins, with a watchdog of WDT_MS ms; a watcher thread exits the process
# as the board would reset once the watchdog is not fed in time (and after a
# minute in any case, so that a node that never stops cannot hang the test)
MAIN_SCRIPT = r"""
import os, runpy, threading, time, types
from tools.desktop.sim import fw
config, machine = fw["config"], fw["machine"]
board = types.ModuleType("fast_wdt")
board.__dict__.update({k: v for k, v in vars(config.board("desktop")).items()
                       if not k.startswith("__")})
board.WDT_MS = %d
config.load = lambda path="/config.json": config.merge(%r)
config.load_secrets = lambda path="/secrets.json": {"ssid": "lab"}
config.board = lambda name=None: board
armed = []
WDT = machine.WDT


class Watched(WDT):
    def __init__(self, *a, **kw):
        WDT.__init__(self, *a, **kw)
        armed.append(self)


def watch():
    end = time.monotonic() + 60
    while True:
        if time.monotonic() > end:
            print("the watcher's minute is over", flush=True)
            os._exit(4)
        if armed and armed[0].expired():
            print("watchdog expired: the board resets", flush=True)
            os._exit(3)
        time.sleep(0.02)


machine.WDT = Watched
threading.Thread(target=watch, daemon=True).start()
runpy.run_path("firmware/main.py")
print("main.py returned: the board is at the REPL", flush=True)
time.sleep(60)
"""


def test_cycles_done_the_board_stays_stopped_with_its_watchdog_fed(port):
    # before: run() returned, main.py ended at the REPL and the watchdog (it
    # cannot be stopped on ESP32 or RP2040) reset the board WDT_MS later: a
    # new boot took its cycles again, for ever
    col = Collector(port)
    wdt_ms = 2000
    c = cfg("c1", port, cycles=2, period_s=0.05)
    p = subprocess.Popen([sys.executable, "-u", "-c", MAIN_SCRIPT % (wdt_ms, c)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         cwd=ROOT, env=procs.python_env())
    try:
        out = []
        for line in p.stdout:
            out.append(line)
            if "stopped after" in line:
                break
        assert out and out[-1] == "c1: stopped after 2 readings (config cycles)\n", "".join(out)
        # three watchdog timeouts later, still stopped: no reset, no new boot
        with pytest.raises(subprocess.TimeoutExpired):
            p.wait(3 * wdt_ms / 1000)
    finally:
        p.kill()
        p.wait(5)
    rest = p.stdout.read()
    assert "expired" not in rest and "returned" not in rest, rest
    # drained, said so on its status topic, disconnected cleanly: two cycles, one boot
    col.wait(lambda: col.status("c1")[-1:] == ["offline"])
    col.close()
    assert col.status("c1") == ["online", "offline"]
    assert retained(port, "%s/c1/status" % PREFIX) == ["offline"]
    rs = col.readings("c1")
    assert len(rs) == 2 * 3 and len(set(r["boot"] for _, r in rs)) == 1  # temp, vbat, uptime
    assert [r["seq"] for _, r in rs] == list(range(1, 7))


def test_stay_stopped_feeds_the_watchdog_until_stop_and_needs_none(port):
    board = fw_config.board("desktop")
    stops = []  # stop() is asked once per feed: True after five
    n = fw_node.Node(cfg("c2", port), board, {"ssid": "lab"},
                     stop=lambda: stops.append(1) or len(stops) > 5, sleep=lambda ms: None)
    n.wdt = machine.WDT(timeout=board.WDT_MS)
    n.stay_stopped()
    assert n.wdt.feeds == 5
    n = fw_node.Node(cfg("c3", port, watchdog=False), board, {"ssid": "lab"})
    assert n.run(1) == 1 and n.wdt is None
    n.stay_stopped()  # no watchdog: returns at once (main.py ends at the REPL)


def test_cycles_done_with_the_broker_away_says_what_was_not_acknowledged():
    # the broker goes before the last readings: the stop line counts what it
    # never acknowledged (before: "stopped after 6 readings" and nothing of
    # the 8 lost with the memory store)
    p = free_port()
    b = procs.start(procs.umqtt3_broker_cmd(p, "--quiet"), p,
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    logs = []
    n = fw_node.Node(cfg("c5", p, cycles=6, period_s=0.3, qos=1, drain_ms=300), DESKTOP,
                     {"ssid": "lab"}, log=logs.append)
    t = threading.Timer(0.5, procs.stop, (b, 5))
    t.start()
    try:
        assert n.run() == 6
    finally:
        t.join()
        procs.stop(b, 5)
    k = n.client.inflight()
    assert k > 0, logs
    assert logs[-1] == "c5: stopped after 6 readings (config cycles); %d not acknowledged, " \
        "lost with the memory store" % k, logs


def test_cycles_with_deep_sleep_are_refused_before_the_node_starts():
    # each wake from a deep sleep is a new boot: the count began at 0 every
    # time and never stopped the node
    n = fw_node.Node(cfg("c4", 1, deep_sleep=True), DESKTOP, {"ssid": "lab"})
    with pytest.raises(ValueError) as e:
        n.run(3)
    assert str(e.value).startswith("cycles must be 0 with deep_sleep"), e.value
    assert n.client is None  # refused before Wi-Fi and the broker


def test_wifi_needs_an_ssid():
    network = fw["network"]
    network.WLAN(network.STA_IF).disconnect()  # the one station interface: joined before
    with pytest.raises(OSError):
        fw_node.wifi({})
    w = fw_node.wifi({"ssid": "lab", "password": "x"})
    assert isinstance(w, network.WLAN) and w.isconnected()


def test_config_defaults_and_store_choice():
    assert fw_config.merge({})["store"] == "memory"
    assert fw_config.merge({"qos": 2})["store"] == "file"
    assert fw_config.merge({"qos": 2, "store": "memory"})["store"] == "memory"
    with pytest.raises(ValueError):
        fw_config.merge({"qos": 3})


def test_board_profiles_are_complete():
    need = ("NAME", "BUFSIZE", "WINDOW", "MAX_STORED", "STORE_DIR", "LED_PIN", "WDT_MS",
            "TEMP", "VBAT_PIN", "SENSORS", "MAX_CLIENTS", "MAX_PACKET")
    sensors = fw["sensors"]
    for f in glob.glob(os.path.join(ROOT, "boards", "*.py")):
        name = os.path.basename(f)[:-3]
        b = fw_config.board(name)
        for k in need:
            assert hasattr(b, k), (name, k)
        assert b.TEMP in sensors.TEMPS
        assert set(b.SENSORS) <= {"temp", "vbat", "uptime", "mem"}
    assert fw_config.board("picow").WDT_MS <= 8300  # the RP2040 watchdog's limit


MPY_CROSS = shutil.which("mpy-cross")


@pytest.mark.skipif(not MPY_CROSS, reason="mpy-cross is not installed")
def test_firmware_and_boards_compile_with_mpy_cross(tmp_path):
    files = sorted(glob.glob(os.path.join(ROOT, "firmware", "*.py")) +
                   glob.glob(os.path.join(ROOT, "boards", "*.py")))
    files = [f for f in files if os.path.basename(f) != "manifest.py"]
    assert len(files) >= 10
    for f in files:
        out = tmp_path / (os.path.basename(f)[:-3] + ".mpy")
        r = subprocess.run([MPY_CROSS, "-o", str(out), f], capture_output=True, text=True)
        assert r.returncode == 0, (f, r.stderr)


def test_gateway_serves_a_node():
    gateway = fw["gateway"]
    p = free_port()
    stop = threading.Event()
    t = threading.Thread(target=gateway.run, args=({"port": p}, DESKTOP, {"ssid": "lab"}),
                         kwargs={"stop": stop.is_set, "host": "127.0.0.1"}, daemon=True)
    t.start()
    try:
        end = time.monotonic() + 5
        while True:
            try:
                socket.create_connection(("127.0.0.1", p), 0.2).close()
                break
            except OSError:
                assert time.monotonic() < end
                time.sleep(0.05)
        col = Collector(p)
        n = fw_node.Node(cfg("g1", p), DESKTOP, {"ssid": "lab"})
        assert n.run(2) == 2
        col.wait(lambda: len(col.readings("g1", "temp")) == 2)
        col.close()
    finally:
        stop.set()
        t.join(5)
    assert not t.is_alive()


def test_gateway_access_point_mode():
    gateway = fw["gateway"]
    ap = gateway.access_point({"ap_ssid": "gw", "ap_password": "secret123"})
    assert ap.active() and ap.config("essid") == "gw"
