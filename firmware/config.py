# config -- the device's settings: defaults here, overrides in /config.json,
# Wi-Fi and broker credentials in /secrets.json (never in the repository).
#
# config.json, every key optional:
#   role         "node" (sensor node) or "gateway" (broker on the board)
#   board        profile name, when /boards/<name>.py is on the device
#                ("": the /board.py a deploy copies, the usual case)
#   node_id      client id and topic level (default: "n" + machine.unique_id() hex)
#   prefix       first topic level(s)                   (default "umqtt3")
#                (neither may hold '+', '#' or NUL: they are in topic names;
#                together at most TOPIC_ROOM bytes)
#   broker       broker host (not empty), port: its TCP port (default 1883)
#   qos          0, 1 or 2                              (default 1)
#   store        "memory" or "file"; "" picks file for QoS 2, else memory
#   store_dir    where a FileStore keeps its files ("": the board's STORE_DIR)
#   period_s     seconds between readings               (default 10)
#   keepalive    MQTT keepalive, seconds                (default 60)
#   deep_sleep   true: deep sleep between readings instead of staying connected
#   cycles       readings to take, then stop for good (the watchdog fed);
#                0: forever (default 0); must be 0 with deep_sleep
#   wifi_mode    "sta" (join a network) or "ap" (gateway: open an access point)
#   wifi_timeout_s  how long to wait for Wi-Fi before giving up (default 20)
#   wifi_rejoin_s   a station whose link stays down this long joins again
#                (default 30; 0: never, the driver's own rejoin only)
#   watchdog     false: do not start the board's watchdog (default true)
#   drain_ms     on stop or before deep sleep, wait this long for acks (2000)
#   allow_fat    let the FileStore use a FAT filesystem (default false)
#   ntp          false: do not set the RTC over NTP at boot (default true)
#   ntp_host     the NTP server ("": ntptime's own, pool.ntp.org)
#   bridge       gateway: an upstream broker to bridge to, or a list of them
#                (default none), each a dict of umqtt3.bridge_settings.DEFAULTS, e.g.
#                {"host": "10.0.0.2", "rules": ["sensors/# out 2 gw/ site1/"]};
#                queue_size and window default to the board's BRIDGE_QUEUE and
#                BRIDGE_WINDOW, user and password to secrets' bridge_user and
#                bridge_password (docs/bridge.md)
#   gateway_store  gateway: the broker's store directory ("": the board's
#                GATEWAY_STORE when a bridge is set, else none)
#   queue_full   gateway: what the broker does with a QoS 1/2 message a
#                subscriber's full queue cannot take: "refuse" it to the
#                publisher (default) or "drop" it for that subscriber alone
# Numbers and true/false must be JSON numbers and booleans ("10" is not 10),
# within the ranges in NUMBERS; merge() refuses anything else with a
# ValueError, which deploy reports before copying and main.py at boot.
# secrets.json: {"ssid": ..., "password": ..., "mqtt_user": ..., "mqtt_password": ...,
#                "bridge_user": ..., "bridge_password": ...}
import json

DEFAULTS = {
    "role": "node",
    "board": "",
    "node_id": "",
    "prefix": "umqtt3",
    "broker": "192.168.1.10",
    "port": 1883,
    "qos": 1,
    "store": "",
    "store_dir": "",
    "period_s": 10,
    "keepalive": 60,
    "deep_sleep": False,
    "cycles": 0,
    "wifi_mode": "sta",
    "wifi_timeout_s": 20,
    "wifi_rejoin_s": 30,
    "watchdog": True,
    "drain_ms": 2000,
    "allow_fat": False,
    "bridge": None,
    "gateway_store": "",
    "queue_full": "refuse",
}

# what each setting must be: a string, true or false, or a number from low to
# high (whole: an int); times stay within a day (ticks_add on a board takes
# less than 2**29 ms)
STRINGS = ("board", "node_id", "prefix", "broker", "store_dir", "gateway_store", "country",
           "ntp_host")
BOOLS = ("deep_sleep", "watchdog", "allow_fat", "ntp")
NUMBERS = {  # key: (whole, low, high)
    "port": (True, 1, 65535), "keepalive": (True, 0, 65535), "cycles": (True, 0, 10 ** 9),
    "period_s": (False, 0.001, 86400), "wifi_timeout_s": (False, 0, 86400),
    "wifi_rejoin_s": (False, 0, 86400),
    "drain_ms": (False, 0, 86400000),
}
CHOICES = {"role": ("node", "gateway"), "wifi_mode": ("sta", "ap"), "qos": (0, 1, 2),
           "queue_full": ("refuse", "drop")}
# parts of every topic the node publishes to: a topic name holds no wildcard
# [MQTT-4.7.1-1] and no NUL [MQTT-4.7.3-2], or the broker closes the CONNECT
# (the will's topic) at every boot
TOPIC_PARTS = ("prefix", "node_id")
NOT_IN_TOPICS = ("+", "#", "\x00")
# prefix and node_id together, in bytes: the CONNECT (client id and will
# topic) and a reading (topic and payload) fit the smallest board's BUFSIZE,
# 512, with room for the metric's name; longer, every boot fails (MQTTError 0x95)
TOPIC_ROOM = 128


def _refuse(k, what, v):
    raise ValueError("%s must be %s, not %s" % (k, what, json.dumps(v)))


def check(c):
    """Raise ValueError naming the first setting of `c` that is of the wrong
    type or out of range (the keys above that `c` has)."""
    for k in STRINGS:
        if k in c and not isinstance(c[k], str):
            _refuse(k, "a string", c[k])
    for k in BOOLS:
        if k in c and c[k] is not True and c[k] is not False:
            _refuse(k, "true or false", c[k])
    for k in NUMBERS:
        if k in c:
            v = c[k]
            whole, lo, hi = NUMBERS[k]
            if not ((isinstance(v, int) or not whole and isinstance(v, float))
                    and v is not True and v is not False and lo <= v <= hi):
                _refuse(k, "%s from %s to %s" % ("a whole number" if whole else "a number",
                                                 lo, hi), v)
    for k in CHOICES:
        v = c.get(k, DEFAULTS[k])
        if not any(v == x and type(v) is type(x) for x in CHOICES[k]):
            _refuse(k, "one of " + ", ".join(json.dumps(x) for x in CHOICES[k]), v)
    for k in TOPIC_PARTS:
        if any(x in c.get(k, "") for x in NOT_IN_TOPICS):
            _refuse(k, "free of '+', '#' and NUL (it is part of topic names)", c[k])
    sizes = [len(c.get(k, "").encode()) for k in TOPIC_PARTS]
    if sum(sizes) > TOPIC_ROOM:
        raise ValueError("%s must be shorter: prefix and node_id at most %d bytes together "
                         "(the board's buffer), not %d" % (
                             TOPIC_PARTS[sizes[1] > sizes[0]], TOPIC_ROOM, sum(sizes)))
    if c.get("broker", DEFAULTS["broker"]) == "":
        _refuse("broker", "a host name or address", "")
    # every wake from a deep sleep is a boot, which would count from 0 again
    # (only ESP32s keep RTC memory across one): never stopping
    if c.get("deep_sleep") is True and c.get("cycles"):
        _refuse("cycles", "0 with deep_sleep (each wake is a new boot: it would count from 0 "
                "again)", c["cycles"])


def check_secrets(s):
    """Raise ValueError unless `s` (the parsed /secrets.json) is an object of
    strings; the message names the key, never a value."""
    if not isinstance(s, dict):
        raise ValueError("must be a JSON object")
    for k in s:
        if not isinstance(s[k], str):
            raise ValueError("%s must be a string" % k)


def _parent_is_dir(path):
    import os
    i = path.rfind("/")
    try:
        return os.stat(path[:i] if i > 0 else "/" if i == 0 else ".")[0] & 0x4000 != 0
    except OSError:
        return False


def check_board(c, s):
    """What the board must hold to start the role in `c` (merged) with the
    secrets `s`; a reset would not mend either, so main.py prints the
    ValueError (it names the file) and stays at the REPL."""
    if (c["role"] == "node" or c["wifi_mode"] == "sta") and not s.get("ssid"):
        raise ValueError("/secrets.json: no ssid (the Wi-Fi network to join)")
    for k in ("store_dir", "gateway_store"):
        if c[k] and not _parent_is_dir(c[k]):
            raise ValueError("/config.json: %s %s: its parent directory does not exist"
                             % (k, c[k]))


def merge(overrides=None):
    """DEFAULTS with `overrides` (a dict) on top, checked; unknown keys are
    kept."""
    c = dict(DEFAULTS)
    if overrides is not None and not isinstance(overrides, dict):
        raise ValueError("the config must be a JSON object")
    if overrides:
        for k in overrides:
            c[k] = overrides[k]
    check(c)
    if not c["store"]:
        c["store"] = "file" if c["qos"] == 2 else "memory"
    if c["store"] not in ("memory", "file"):
        raise ValueError("store must be 'memory' or 'file'")
    br = c["bridge"]
    if br is not None and not (isinstance(br, dict) or isinstance(br, list) and all(
            isinstance(b, dict) for b in br)):
        raise ValueError("bridge must be a dict or a list of them")
    return c


def read_json(path):
    """The dict in the JSON file at `path`, or {} when there is none."""
    try:
        f = open(path)
    except OSError:
        return {}
    try:
        return json.load(f)
    finally:
        f.close()


def load(path="/config.json"):
    return merge(read_json(path))


def load_secrets(path="/secrets.json"):
    """The secrets, checked (check_secrets); ValueError also for JSON that
    does not parse."""
    s = read_json(path)
    check_secrets(s)
    return s


def board(name=None):
    """The board profile: boards/<name>.py when `name` is given and the
    boards directory is there, else the flat /board.py a deploy copies."""
    if name:
        try:
            return getattr(__import__("boards." + name), name)
        except (ImportError, AttributeError):
            pass
    import board as b
    return b
