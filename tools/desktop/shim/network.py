"""Desktop stand-in for MicroPython's `network` module (CPython only): a WLAN
that "connects" at once when given an SSID while the access point is in
range (IN_RANGE; tests set it False to keep a join from succeeding); the
desktop's own network is what the sockets really use. As on a board,
WLAN(STA_IF) is the one station interface however often it is made: every
instance of an interface shares its state."""
STA_IF = 0
AP_IF = 1
STAT_IDLE = 0
STAT_CONNECTING = 1
STAT_GOT_IP = 3

IN_RANGE = True  # False: connect() starts a join that never succeeds

_STATE = {}  # interface -> its state


class WLAN:
    def __init__(self, interface=STA_IF):
        self.interface = interface
        if interface not in _STATE:
            _STATE[interface] = {"on": False, "ssid": None, "connected": False, "cfg": {}}
        self.s = _STATE[interface]

    def active(self, on=None):
        if on is None:
            return self.s["on"]
        self.s["on"] = bool(on)
        if not on:
            self.s["connected"] = False

    def connect(self, ssid=None, key=None):
        if not self.s["on"]:
            raise OSError("WLAN not active")
        self.s["ssid"] = ssid
        self.s["connected"] = bool(ssid) and IN_RANGE

    def disconnect(self):
        self.s["connected"] = False

    def isconnected(self):
        return self.s["connected"] if self.interface == STA_IF else self.s["on"]

    def status(self, param=None):
        return STAT_GOT_IP if self.s["connected"] else STAT_IDLE

    def config(self, *args, **kw):
        if kw:
            self.s["cfg"].update(kw)
            return None
        return self.s["cfg"].get(args[0]) if args else None

    def ifconfig(self, conf=None):
        if conf is None:
            return ("127.0.0.1", "255.0.0.0", "127.0.0.1", "127.0.0.1")
