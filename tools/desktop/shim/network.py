"""Desktop stand-in for MicroPython's `network` module (CPython only): a WLAN
that "connects" at once when given an SSID; the desktop's own network is what
the sockets really use."""
STA_IF = 0
AP_IF = 1
STAT_IDLE = 0
STAT_CONNECTING = 1
STAT_GOT_IP = 3


class WLAN:
    def __init__(self, interface=STA_IF):
        self.interface = interface
        self.on = False
        self.ssid = None
        self.connected = False
        self.cfg = {}

    def active(self, on=None):
        if on is None:
            return self.on
        self.on = bool(on)
        if not on:
            self.connected = False

    def connect(self, ssid=None, key=None):
        if not self.on:
            raise OSError("WLAN not active")
        self.ssid = ssid
        self.connected = bool(ssid)

    def disconnect(self):
        self.connected = False

    def isconnected(self):
        return self.connected if self.interface == STA_IF else self.on

    def status(self, param=None):
        return STAT_GOT_IP if self.connected else STAT_IDLE

    def config(self, *args, **kw):
        if kw:
            self.cfg.update(kw)
            return None
        return self.cfg.get(args[0]) if args else None

    def ifconfig(self, conf=None):
        if conf is None:
            return ("127.0.0.1", "255.0.0.0", "127.0.0.1", "127.0.0.1")
