# node -- the sensor node app: Wi-Fi, then MQTT, then readings forever (or
# for a number of cycles, then stopped for good), fed to the watchdog,
# optionally deep sleeping.
#
# Topics (prefix and node id from the config):
#   <prefix>/<id>/status   "online" (retained birth), "offline" (retained will,
#                          and on a clean stop), "asleep" before a deep sleep
#   <prefix>/<id>/<metric> {"v": value, "boot": boot_id, "seq": n, "t": time}
# "t" is the reading's time in whole seconds since 1970 from the board's RTC,
# set over NTP at every boot (a wake from deep sleep is a boot); it is left
# out while the node does not know the time (no NTP answer and an RTC that
# was never set), and the pipeline then takes the arrival time instead.
# boot_id is random (16 bits) per boot; seq numbers every accepted reading of
# this node and is the publish key, so with a FileStore it carries on after a
# reset from the last reading the store took (nothing taken is sent twice
# as new, nothing taken is lost). Downstream de-duplicates on (id, seq).
#
# Runs on MicroPython and, through tools/desktop/shim, on CPython (the same code).
import random

from umqtt3.compat import ticks_ms, ticks_add, ticks_diff, sleep_ms
from umqtt3.client import MQTTClient
from umqtt3.flow import Busy, StoreFull, MQTTError
from umqtt3.memstore import MemoryStore
from umqtt3.store import FileStore

import config as _config
import sensors as _sensors


def node_id():
    import machine
    h = ""
    for b in machine.unique_id():
        h += "%02x" % b
    return "n" + h


def wifi(secrets, timeout_s=20, feed=None, clock=ticks_ms, sleep=sleep_ms):
    """Join the network in secrets["ssid"]; returns the WLAN. Raises OSError
    after timeout_s without a link (main.py then resets the board)."""
    import network
    w = network.WLAN(network.STA_IF)
    w.active(True)
    if not w.isconnected():
        ssid = secrets.get("ssid")
        if not ssid:
            raise OSError("no Wi-Fi ssid in secrets")
        w.connect(ssid, secrets.get("password", ""))
        t0 = clock()
        while not w.isconnected():
            if ticks_diff(clock(), t0) > timeout_s * 1000:
                w.active(False)
                raise OSError("Wi-Fi: no link to %s" % ssid)
            if feed:
                feed()
            sleep(100)
    return w


def keep_joined(w, secrets, rejoin_s, timeout_s, feed=None, clock=ticks_ms, sleep=sleep_ms,
                log=None):
    """A check to call often (it returns at once while the link is up): once
    the station `w` has had no link for rejoin_s, join again with wifi()
    (at most timeout_s, the watchdog fed); a failed join is logged and
    tried again rejoin_s later. rejoin_s 0: never (the driver's own rejoin
    only). ESP32's driver rejoins by itself, the Pico W's not reliably."""
    down = [None]  # when the link was first seen down

    def check():
        if w.isconnected():
            down[0] = None
            return True
        now = clock()
        if down[0] is None:
            down[0] = now
        elif rejoin_s and ticks_diff(now, down[0]) >= rejoin_s * 1000:
            try:
                w.disconnect()  # a driver still trying on its own would refuse connect()
            except OSError:
                pass
            try:
                wifi(secrets, timeout_s, feed, clock, sleep)
                what = "joined again"
            except OSError as e:  # no link in timeout_s: wait, then again
                what = "%r" % e
            if log:
                log("Wi-Fi: link down for %d s: %s" % (ticks_diff(clock(), down[0]) // 1000, what))
            down[0] = None if w.isconnected() else clock()
        return False
    return check


# seconds from 1970 to 2000: ports whose time.time() counts from 2000
# (ESP32, RP2040 before MicroPython 1.23) are moved to the Unix epoch
EPOCH_2000 = 946684800
# an RTC that reads earlier than this was never set (it starts at 2000 or 2021)
KNOWN_FROM = 1735689600  # 2025-01-01


def unix_time():
    """The RTC's time in whole seconds since 1970, or None while it was never
    set."""
    import time
    t = int(time.time())
    if time.gmtime(0)[0] == 2000:
        t += EPOCH_2000
    return t if t >= KNOWN_FROM else None


def sync_clock(host=""):
    """Set the RTC over NTP (MicroPython's ntptime); False when it cannot
    (no ntptime on this port, no answer): the RTC keeps what it had."""
    try:
        import ntptime
        if host:
            ntptime.host = host
        ntptime.settime()
        return True
    except Exception:  # OSError on a timeout, ImportError without ntptime, ...
        return False


def number(v):
    """True for what a reading may carry: an int, or a finite float (JSON has
    no NaN or infinity)."""
    if isinstance(v, float):
        return v - v == 0  # nan - nan and inf - inf are nan
    return isinstance(v, int)


def fmt(v):
    if isinstance(v, float):
        return "%.2f" % v
    return "%d" % v


def reading(value, boot, seq, t=None):
    """The payload of a reading; t (seconds since 1970) when the node knows it."""
    msg = '{"v":%s,"boot":%d,"seq":%d' % (fmt(value), boot, seq)
    if t is None:
        return msg + "}"
    return msg + ',"t":%d}' % t


def next_seq(accepted):
    """The first key the store has not taken (accepted(n) is n <= last):
    1 on a fresh store, last + 1 after a reset with a FileStore."""
    if not accepted(1):
        return 1
    lo, hi = 1, 2
    while accepted(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if accepted(mid):
            lo = mid
        else:
            hi = mid
    return hi


class Node:
    """Node(cfg, board, secrets, sensors=None, clock=ticks_ms, sleep=sleep_ms,
    stop=None): `cfg` a dict (config.merge fills the defaults), `board` a
    profile module from boards/, `sensors` {metric: callable} added to the
    board's built-in ones (your own sensor), `stop()` -> True ends run()."""

    def __init__(self, cfg, board, secrets=None, sensors=None, clock=ticks_ms,
                 sleep=sleep_ms, stop=None, log=None):
        self.cfg = _config.merge(cfg)
        self.board = board
        self.secrets = secrets or {}
        self.clock = clock
        self.sleep = sleep
        self.stop = stop
        self.log = log
        self.t0 = clock()
        self.boot = random.getrandbits(16)
        self.id = self.cfg["node_id"] or node_id()
        self.base = "%s/%s/" % (self.cfg["prefix"], self.id)
        self.sensors = _sensors.builtin(board, self.uptime)
        if sensors:
            for k in sensors:
                self.sensors[k] = sensors[k]
        self.names = sorted(self.sensors)
        self.wdt = None
        self.led = None
        self.client = None
        self.seq = 0
        self.synced = False  # the RTC was set over NTP this boot
        self.sent = 0     # readings accepted this boot
        self.skipped = 0  # readings dropped: window or store full for a whole period
        self.refused = False  # the store refuses readings now (logged once)
        self.born = False  # "online" published on the connection we have
        self.link = None  # keep_joined()'s check, once started

    def uptime(self):
        return ticks_diff(self.clock(), self.t0) // 1000

    def feed(self):
        if self.wdt:
            self.wdt.feed()

    def _log(self, msg):
        if self.log:
            self.log(msg)

    # ------------------------------------------------------------ start
    def start(self):
        b = self.board
        c = self.cfg
        wdt_ms = getattr(b, "WDT_MS", 0)
        if wdt_ms and c["watchdog"]:
            import machine
            self.wdt = machine.WDT(timeout=wdt_ms)
        pin = getattr(b, "LED_PIN", None)
        if pin is not None:
            import machine
            self.led = machine.Pin(pin, machine.Pin.OUT)
        w = wifi(self.secrets, c["wifi_timeout_s"], self.feed, self.clock, self.sleep)
        self.link = keep_joined(w, self.secrets, c["wifi_rejoin_s"], c["wifi_timeout_s"],
                                self.feed, self.clock, self.sleep, self.log)
        if c.get("ntp", True):
            self.synced = sync_clock(c.get("ntp_host", ""))
            self.feed()
        # one expression, so that a type checker accepts either store class
        store = (FileStore(c["store_dir"] or getattr(b, "STORE_DIR", "/mq"),
                           max_messages=getattr(b, "MAX_STORED", 32),
                           allow_fat=c["allow_fat"])
                 if c["store"] == "file" else MemoryStore(b.WINDOW, b.BUFSIZE, 8))
        cl = MQTTClient(self.id, c["broker"], c["port"],
                        user=self.secrets.get("mqtt_user"),
                        password=self.secrets.get("mqtt_password"),
                        keepalive=c["keepalive"], store=store, window=b.WINDOW,
                        bufsize=b.BUFSIZE, reconnect=True)
        status = self.base + "status"
        cl.set_last_will(status, b"offline", retain=True, qos=1)
        # persistent session: the broker keeps what it has not acknowledged
        cl.connect(clean_session=False)
        self.client = cl
        self.seq = next_seq(cl.accepted)
        # the birth: waits like a reading for room in the window; not taken
        # (store full), the node goes on and tries again each cycle (birth())
        if not self.birth(ticks_add(self.clock(), c["drain_ms"])):
            self._log("%s: birth not sent" % self.id)
        self._log("%s: boot %d, first seq %d, %s" % (
            self.id, self.boot, self.seq,
            "time synced" if self.synced else
            "time from the RTC" if unix_time() else "time unknown: readings carry no \"t\""))

    # ------------------------------------------------------------ readings
    def publish(self, metric, value, deadline):
        """Publish one reading; True once the client took it (put())."""
        qos = self.cfg["qos"]
        while qos and self.client.accepted(self.seq):
            self.seq += 1  # taken before a reset: never publish it again
        msg = reading(value, self.boot, self.seq, unix_time())
        took = self.put(self.base + metric, msg, qos, self.seq if qos else None, deadline)
        if not took:
            if took is False:
                self.skipped += 1
            return False
        self.seq += 1
        self.sent += 1
        return True

    def put(self, topic, msg, qos, key, deadline, retain=False):
        """Hand one message to the client; True once it took it. On Busy
        (the window is full, e.g. the broker is away) or StoreFull keep
        polling (acks make room) until `deadline`, then give up on it: False.
        A store whose write fails (OSError at QoS 1/2, e.g. a full flash:
        ENOSPC) is given up at once (no retried writes to a failing flash):
        False. A store's refusal is logged once per episode; what it holds
        stays and goes out. A message larger than the buffer (MQTTError
        0x95) is logged and given up: False. None: QoS 0 while the link is down, dropped."""
        cl = self.client
        while True:
            try:
                if qos:
                    cl.publish(topic, msg, retain, qos, key, wait=False)
                else:
                    cl.publish(topic, msg, retain)
                self.seen()
                if self.refused:
                    self.refused = False
                    self._log("%s: the store takes messages again" % self.id)
                return True
            except Busy:
                pass
            except (StoreFull, OSError) as e:
                self.seen()
                if not qos:
                    return None  # QoS 0 while the link is down: dropped
                if not self.refused:
                    self.refused = True
                    self._log("%s: the store refuses messages (%r): dropping them" % (self.id, e))
                if not isinstance(e, StoreFull):
                    return False
            except MQTTError as e:  # 0x95: larger than the board's BUFSIZE, never fits
                self._log("%s: %s: too big for BUFSIZE (%d bytes): %r" % (
                    self.id, topic, len(msg), e))
                return False
            if ticks_diff(deadline, self.clock()) <= 0:
                return False
            self.feed()
            self.poll(20)

    def poll(self, ms):
        """The client's poll() (acks, keepalive, reconnect), then seen()."""
        self.client.poll(ms)
        self.seen()

    def seen(self):
        """After every call into the client: a link found down means the
        next connection needs its own birth, whichever call met the drop (a
        reconnect may follow within the same put() or drain())."""
        if not self.client.is_connected():
            self.born = False

    def birth(self, deadline):
        """Publish the retained "online" status once per connection: at
        start, again after a refusal, and after every reconnect the client
        made by itself (the broker published our will, "offline", when the
        link was lost [MQTT-3.1.2-8], and kept it retained). True once sent."""
        up = self.client.is_connected()
        if not up:
            self.born = False  # the next connection needs its own
        elif not self.born:
            self.born = bool(self.put(self.base + "status", b"online", 1, None, deadline, True))
        return self.born

    def cycle(self, deadline):
        """Read every sensor once and publish the readings."""
        self.birth(deadline)
        if self.led:
            self.led.value(1)
        for name in self.names:
            try:
                v = self.sensors[name]()
            except Exception as e:  # a broken sensor must not stop the node
                self._log("%s: sensor %s: %r" % (self.id, name, e))
                continue
            if v is None:
                continue
            if not number(v):  # (21.5, 40.0), nan, "21.5": no JSON reading
                self._log("%s: sensor %s: not a number: %r" % (self.id, name, v))
                continue
            self.publish(name, v, deadline)
        if self.led:
            self.led.value(0)

    def wait(self, ms):
        """Poll the client for `ms` (acks, keepalive, reconnect), feeding the
        watchdog; returns early when stop() says so."""
        end = ticks_add(self.clock(), ms)
        while True:
            self.feed()
            if self.stop and self.stop():
                return False
            if self.link:
                self.link()  # the Wi-Fi joined again when it stays down
            left = ticks_diff(end, self.clock())
            if left <= 0:
                return True
            self.poll(min(left, 100))

    def drain(self, ms):
        """Wait up to `ms` for every QoS 1/2 message in flight to be acked."""
        t0 = self.clock()
        while self.client.inflight() and ticks_diff(self.clock(), t0) < ms:
            self.feed()
            self.poll(20)
        return not self.client.inflight()

    # ------------------------------------------------------------ run
    def run(self, cycles=None):
        """Start, then take readings every period_s: `cycles` times (None:
        the config's "cycles", 0: forever); returns how many. A run that ends
        (its cycles, or stop()) drains, publishes "offline" and disconnects;
        on a board main.py then calls stay_stopped(). With deep_sleep the
        board sleeps after one cycle and boots again into main.py (on the
        desktop the shim's machine.deepsleep raises machine.DeepSleep
        instead), so cycles > 0 is refused with it, as config.check does."""
        if cycles is None:
            cycles = self.cfg["cycles"]
        _config.check({"cycles": cycles, "deep_sleep": self.cfg["deep_sleep"]})
        period = int(self.cfg["period_s"] * 1000)
        self.start()
        n = 0
        done = False  # ended by its cycles
        try:
            while True:
                if self.stop and self.stop():
                    break
                self.cycle(ticks_add(self.clock(), period))
                n += 1
                if self.cfg["deep_sleep"]:
                    self.sleep_deep(period)
                if cycles and n >= cycles:
                    done = True
                    break
                if not self.wait(period):
                    break
            self.drain(self.cfg["drain_ms"])
        finally:
            if self.client and not self.cfg["deep_sleep"]:
                self.close()
        if done:
            # what the broker never acknowledged (it was away): said, not
            # dropped in silence; a FileStore keeps it for the next boot
            k = self.client.inflight() if self.client else 0
            self._log("%s: stopped after %d readings (config cycles)%s" % (
                self.id, n, "; %d not acknowledged, %s" % (
                    k, "kept on flash for the next boot" if self.cfg["store"] == "file"
                    else "lost with the memory store") if k else ""))
        return n

    def stay_stopped(self):
        """After run() returned on a board: the watchdog start() armed cannot
        be stopped (ESP32, RP2040) and would reset the board into a new run,
        so feed it for good, awake (light sleep and the watchdog get on
        differently from port to port), until stop() says so. Returns at
        once without a watchdog (main.py then ends at the REPL)."""
        if not self.wdt:
            return
        step = min(1000, self.board.WDT_MS // 4)
        while not (self.stop and self.stop()):
            self.wdt.feed()
            self.sleep(step)

    def sleep_deep(self, ms):
        """Deep sleep until the next reading. With a FileStore the messages in
        flight stay on flash and go out after the wake-up (a persistent
        session); with a MemoryStore wait for their acks first."""
        import machine
        cl = self.client
        if not self.drain(self.cfg["drain_ms"]) and self.cfg["store"] != "file":
            self._log("%s: sleeping with %d unacked readings" % (self.id, cl.inflight()))
        try:
            cl.publish(self.base + "status", b"asleep", retain=True, qos=1, wait=False)
            self.drain(500)
        except (OSError, Busy, StoreFull):
            pass
        cl.disconnect()  # a clean disconnect: the broker drops the will
        machine.deepsleep(ms)

    def close(self):
        """Clean stop: retained "offline", acks drained, DISCONNECT."""
        cl = self.client
        try:
            if cl.is_connected():
                cl.publish(self.base + "status", b"offline", retain=True, qos=1, wait=False)
                self.drain(1000)
        except (OSError, Busy, StoreFull):
            pass
        cl.disconnect()
