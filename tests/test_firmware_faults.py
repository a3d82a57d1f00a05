"""The sensor node and the gateway (firmware/) when the board's world goes
wrong, under CPython through tools/desktop/shim, against Debian's mosquitto
(conftest.py): a flash that fills up, a sensor that returns something other
than a number, a Wi-Fi link that drops for good. Each used to end Node.run
with an exception (main.py then resets the board, and at the next boot the
same again) or left the node without a link for ever. A bad prefix and a bad
/secrets.json are in tests/test_firmware_config.py."""
import errno
import json
import threading
import time

import pytest

import collector  # tests/collector.py
import mosq  # tests/mosq.py
from tools.desktop.sim import fw  # firmware/ and the shims under their device names
from tools.procs import free_port, wait_port
import umqtt3.store

fw_config, fw_node, network = fw["config"], fw["node"], fw["network"]
DESKTOP = fw_config.board("desktop")
PREFIX = "fwfault"


def cfg(name, port, **kw):
    c = {"node_id": name, "prefix": PREFIX, "broker": "127.0.0.1", "port": port,
         "period_s": 0.05, "keepalive": 10}
    c.update(kw)
    return c


def Collector(port):
    return collector.Collector(port, PREFIX)


def wait_for(cond, timeout=10):
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)


class Running:
    """A node's or a gateway's run in a thread: start(target, *args, **kw);
    `stopping.is_set` is the stop() to give it; what it raised is kept."""

    def __init__(self):
        self.stopping = threading.Event()
        self.error = None
        self.t = None

    def start(self, target, *args, **kw):
        self.t = threading.Thread(target=self.run, args=(target, args, kw), daemon=True)
        self.t.start()

    def run(self, target, args, kw):
        try:
            target(*args, **kw)
        except BaseException as e:  # SystemExit too (machine.Reset)
            self.error = e

    def alive(self):
        return self.t.is_alive()

    def stop(self):
        self.stopping.set()
        self.t.join(15)
        assert not self.t.is_alive()
        assert self.error is None, repr(self.error)


def count(logs, text):
    return sum(1 for m in logs if text in m)


def seqs(col, name):
    return set(r["seq"] for _, r in col.readings(name))


# ------------------------------------------------------------------ a full flash
@pytest.fixture
def flash(monkeypatch):
    """The flash under every FileStore: flash["full"] = True makes each write
    fail as littlefs does on a full flash (OSError ENOSPC)."""
    state = {"full": False}
    real = umqtt3.store.OSFiles.write

    def write(self, path, data):
        if state["full"]:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(self, path, data)
    monkeypatch.setattr(umqtt3.store.OSFiles, "write", write)
    return state


def test_a_full_flash_drops_readings_and_the_node_goes_on(broker, tmp_path, flash):
    col = Collector(broker.port)
    logs = []
    r = Running()
    n = fw_node.Node(cfg("f1", broker.port, store="file", store_dir=str(tmp_path / "mq")),
                     DESKTOP, {"ssid": "lab"}, stop=r.stopping.is_set, log=logs.append)
    r.start(n.run, 0)
    try:
        wait_for(lambda: n.sent >= 6)
        flash["full"] = True
        wait_for(lambda: n.skipped >= 6 or not r.alive())
        assert r.alive() and r.error is None  # before: OSError(28) out of run()
        flash["full"] = False  # room again (acks removed records, a file was deleted)
        sent = n.sent
        wait_for(lambda: n.sent >= sent + 6)
    finally:
        r.stop()
    # the refusal is logged once for the whole episode, its end once
    assert count(logs, "the store refuses messages") == 1, logs
    assert count(logs, "the store takes messages again") == 1, logs
    # every reading taken arrives; a dropped one's seq went to the next
    col.wait(lambda: seqs(col, "f1") == set(range(1, n.sent + 1)))
    col.close()


def test_a_node_that_boots_on_a_full_flash_runs_and_keeps_what_it_stored(broker, tmp_path,
                                                                        flash):
    col = Collector(broker.port)
    store = str(tmp_path / "mq")

    def boot(logs):  # main.py at each boot: a new Node on the same store
        return fw_node.Node(cfg("f2", broker.port, store="file", store_dir=store),
                            DESKTOP, {"ssid": "lab"}, log=logs.append)
    first = boot([])
    assert first.run(3) == 3
    taken = first.sent
    flash["full"] = True
    logs = []
    full = boot(logs)
    assert full.run(3) == 3  # before: OSError(28) from the birth, at every boot
    assert full.sent == 0 and full.skipped == taken  # each cycle's readings (mem: none here)
    assert count(logs, "birth not sent") == 1 and count(logs, "the store refuses") == 1, logs
    flash["full"] = False
    again = boot([])
    assert again.run(3) == 3 and again.sent == taken
    col.wait(lambda: seqs(col, "f2") == set(range(1, taken + again.sent + 1)))
    col.wait(lambda: col.status("f2").count("online") == 2)  # births of boots 1 and 3
    col.close()


def test_a_store_refusal_keeps_the_records_it_holds(tmp_path, flash):
    # the broker is away: readings wait in the store; then the flash is full.
    # What the store held before goes out once the broker is back.
    port = free_port()
    logs = []
    n = fw_node.Node(cfg("f3", port, store="file", store_dir=str(tmp_path / "mq")),
                     DESKTOP, {"ssid": "lab"}, log=logs.append)
    b = mosq.Broker(tmp_path / "mosq", port=port).start()
    try:
        n.start()
        b.kill()  # the broker goes; the node's client stores what it takes
        n.cycle(n.clock())  # a deadline now: no waiting for room
        held = n.sent
        assert held >= 1
        flash["full"] = True
        n.cycle(n.clock())
        n.cycle(n.clock())
        assert n.sent == held and n.skipped >= 2
        flash["full"] = False
        b.start()
        col = Collector(port)
        n.wait(200)  # the client reconnects and sends what it held
        n.drain(5000)
        col.wait(lambda: seqs(col, "f3") == set(range(1, held + 1)))
        col.close()
    finally:
        if n.client:
            n.close()
        b.kill()


# ------------------------------------------------------------------ readings
def test_only_finite_numbers_are_readings():
    for v in (0, -3, 2 ** 40, 21.5, -0.0, 1e300, True):
        assert fw_node.number(v), v
    for v in (float("nan"), float("inf"), float("-inf"), (21.5, 40.0), "21.5", b"1", [1],
              {"v": 1}, None):
        assert not fw_node.number(v), v


def test_a_reading_that_is_not_a_number_is_logged_and_skipped(broker):
    col = Collector(broker.port)
    logs = []
    bad = {"pair": lambda: (21.5, 40.0), "nan": lambda: float("nan"),
           "inf": lambda: float("-inf"), "text": lambda: "21.5"}
    good = {"soil": lambda: 41, "ratio": lambda: 0.5}
    sensors = dict(bad, **good)
    n = fw_node.Node(cfg("s1", broker.port), DESKTOP, {"ssid": "lab"}, sensors=sensors,
                     log=logs.append)
    assert n.run(3) == 3  # before: TypeError out of run() at the tuple
    col.wait(lambda: len(col.readings("s1", "soil")) == 3 and len(col.readings("s1", "ratio")) == 3)
    col.close()
    assert [r["v"] for _, r in col.readings("s1", "soil")] == [41] * 3
    assert [r["v"] for _, r in col.readings("s1", "ratio")] == [0.5] * 3
    for k in bad:
        assert not col.readings("s1", k), k
        assert count(logs, "sensor %s: not a number" % k) == 3, logs

    def no_constants(c):
        raise ValueError("not JSON: " + c)
    for m, p in col.of("s1"):  # NaN and Infinity are not JSON: the pipeline refuses them
        if m != "status":
            json.loads(p, parse_constant=no_constants)


def test_a_reading_too_big_for_the_buffer_is_logged_and_skipped(broker):
    # an int of 1100 digits does not fit DESKTOP's BUFSIZE, 1024: the client
    # refuses it (MQTTError 0x95); before, that ended run() (main.py: a reset,
    # and the same at every boot)
    col = Collector(broker.port)
    logs = []
    sensors = {"count": lambda: 10 ** 1100, "soil": lambda: 41}
    n = fw_node.Node(cfg("s2", broker.port), DESKTOP, {"ssid": "lab"}, sensors=sensors,
                     log=logs.append)
    assert n.run(3) == 3
    col.wait(lambda: len(col.readings("s2", "soil")) == 3)
    col.close()
    assert not col.readings("s2", "count")
    assert count(logs, "s2: fwfault/s2/count: too big for BUFSIZE") == 3, logs
    assert n.skipped == 3
    seq = sorted(r["seq"] for _, r in col.readings("s2"))
    assert seq == list(range(1, len(seq) + 1))  # the skipped readings left no gap


# ------------------------------------------------------------------ Wi-Fi
@pytest.fixture
def wlan(monkeypatch):
    """The shim's station interface, down, its joins (WLAN.connect) counted;
    the access point back in range at the end."""
    joins = []
    real = network.WLAN.connect

    def connect(self, *a):
        joins.append(a)
        real(self, *a)
    monkeypatch.setattr(network.WLAN, "connect", connect)
    w = network.WLAN(network.STA_IF)
    w.disconnect()
    yield w, joins
    network.IN_RANGE = True


def drop_until_rejoined(w, joins, logs, running):
    """The access point goes away: the node tries again and again, without a
    reset; then it is back, and the node is on it again."""
    joined = len(joins)
    network.IN_RANGE = False
    w.disconnect()
    wait_for(lambda: len(joins) >= joined + 2 or not running.alive())
    assert running.alive() and running.error is None
    assert count(logs, "Wi-Fi: link down") >= 1, logs
    network.IN_RANGE = True
    wait_for(lambda: w.isconnected() and count(logs, ": joined again"))


def test_a_node_joins_again_when_its_wifi_stays_down(broker, wlan):
    w, joins = wlan
    logs = []
    r = Running()
    n = fw_node.Node(cfg("w1", broker.port, wifi_rejoin_s=0.2, wifi_timeout_s=0.2), DESKTOP,
                     {"ssid": "lab"}, stop=r.stopping.is_set, log=logs.append)
    r.start(n.run, 0)
    try:
        wait_for(lambda: n.sent >= 3)
        assert len(joins) == 1  # the first join, in start()
        drop_until_rejoined(w, joins, logs, r)  # before: no WLAN.connect after the drop
        assert joins[-1] == ("lab", "")
        assert not n.wdt.late  # fed while it waited for the link
    finally:
        r.stop()


def test_wifi_rejoin_s_0_leaves_the_rejoin_to_the_driver(broker, wlan):
    w, joins = wlan
    r = Running()
    n = fw_node.Node(cfg("w2", broker.port, wifi_rejoin_s=0), DESKTOP, {"ssid": "lab"},
                     stop=r.stopping.is_set)
    r.start(n.run, 0)
    try:
        wait_for(lambda: n.sent >= 3)
        w.disconnect()
        sent = n.sent
        # the desktop's sockets do not use the shim's link: readings go on
        wait_for(lambda: n.sent >= sent + 9)
        assert len(joins) == 1 and not w.isconnected()
    finally:
        r.stop()


def test_a_gateway_joins_again_when_its_wifi_stays_down(wlan):
    w, joins = wlan
    gateway = fw["gateway"]
    logs = []
    p = free_port()
    r = Running()
    r.start(gateway.run, {"port": p, "wifi_rejoin_s": 0.2, "wifi_timeout_s": 0.2}, DESKTOP,
            {"ssid": "lab"}, stop=r.stopping.is_set, log=logs.append, host="127.0.0.1")
    try:
        assert wait_port(p, 10)
        assert len(joins) == 1
        drop_until_rejoined(w, joins, logs, r)
    finally:
        r.stop()


# ------------------------------------------------------------------ a lost link
def test_the_node_says_online_again_after_its_client_reconnects(broker):
    # the link breaks under the node: the broker publishes its will,
    # "offline", retained; the client reconnects by itself, and the node
    # publishes "online" again (before, the status stayed "offline" while
    # readings flowed, until the next boot)
    from relay import Relay
    col = Collector(broker.port)
    relay = Relay(broker.port)
    run = Running()
    # a period longer than the reconnect: the link is lost and back within one wait()
    n = fw_node.Node(cfg("w1", relay.port, keepalive=2, period_s=3), DESKTOP, {"ssid": "lab"},
                     stop=run.stopping.is_set)
    try:
        run.start(n.run, 0)
        col.wait(lambda: col.status("w1") == ["online"])
        relay.break_links()
        col.wait(lambda: col.status("w1")[-1:] == ["offline"])
        col.wait(lambda: col.status("w1") == ["online", "offline", "online"], 15)
        before = len(col.readings("w1"))
        col.wait(lambda: len(col.readings("w1")) > before)  # and readings go on
    finally:
        run.stop()
        relay.close()
        col.close()


def test_the_node_says_online_again_when_put_met_the_drop(broker):
    # the broker stops answering: the window fills and the node waits in
    # put()'s Busy loop; the link breaks there and the client reconnects
    # inside put() or drain(), never seen by wait(). Before, "born" stayed
    # True: no "online" after the will, while readings flowed [MQTT-3.1.2-8]
    from relay import Relay
    col = Collector(broker.port)
    relay = Relay(broker.port)
    run = Running()
    n = fw_node.Node(cfg("w2", relay.port, period_s=2), DESKTOP, {"ssid": "lab"},
                     stop=run.stopping.is_set)
    where = {"put": 0}
    real_put = n.put

    def put(*a, **kw):
        where["put"] += 1
        try:
            return real_put(*a, **kw)
        finally:
            where["put"] -= 1
    n.put = put
    try:
        run.start(n.run, 0)
        col.wait(lambda: col.status("w2") == ["online"])
        relay.mute()
        wait_for(lambda: where["put"] and n.client.inflight() >= DESKTOP.WINDOW)
        relay.unmute()
        relay.break_links()
        col.wait(lambda: col.status("w2")[-1:] == ["offline"])
        col.wait(lambda: col.status("w2") == ["online", "offline", "online"], 15)
    finally:
        run.stop()
        relay.close()
        col.close()


# ------------------------------------------------------------------ a stalled subscriber
@pytest.mark.parametrize("policy", ["refuse", "drop"])
def test_a_gateway_with_queue_full_drop_is_not_held_back_by_a_stalled_subscriber(policy):
    # a subscriber to '#' that never reads: its queue on the gateway fills.
    # "refuse" (the default) refuses the node's QoS 1 readings and, at 3.1.1,
    # closes its connection [MQTT-3.3.5-2]; "drop" drops them for that
    # subscriber alone, and the node goes on
    import socket
    gateway = fw["gateway"]
    esp32 = fw_config.board("esp32")  # the small queues of a board
    p = free_port()
    r = Running()
    r.start(gateway.run, {"port": p, "queue_full": policy}, esp32, {"ssid": "lab"},
            stop=r.stopping.is_set, host="127.0.0.1")
    slow = None
    try:
        assert wait_port(p, 10)
        slow = socket.socket()
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.connect(("127.0.0.1", p))
        slow.sendall(b"\x10\x10\x00\x04MQTT\x04\x02\x00\x3c\x00\x04slow")  # CONNECT, clean
        slow.sendall(b"\x82\x06\x00\x01\x00\x01#\x01")  # SUBSCRIBE '#' QoS 1, then silence
        time.sleep(0.3)
        n = fw_node.Node(cfg("q1", p, cycles=40), DESKTOP, {"ssid": "lab"})
        assert n.run() == 40
        if policy == "drop":
            assert n.skipped == 0 and n.sent == 40 * 3, (n.sent, n.skipped)
        else:  # the default: documented, the node is held back
            assert n.skipped > 0
    finally:
        if slow:
            slow.close()
        r.stop()
