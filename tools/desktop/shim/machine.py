"""Desktop stand-in for MicroPython's `machine` module (CPython only).

tools/desktop/sim.py loads it as `machine` (for the demo, the simulation and
the firmware tests) so the firmware runs unchanged on the desktop. Only what firmware/ uses is here.
"""
import os
import random
import time

_T0 = time.monotonic()


class DeepSleep(SystemExit):
    """Raised by deepsleep(): on a device the board powers down and boots
    again into main.py; on the desktop the caller catches this and starts
    the node again (a new boot)."""

    def __init__(self, ms):
        SystemExit.__init__(self, "deepsleep %d ms" % ms)
        self.ms = ms


class Reset(SystemExit):
    """Raised by reset(): the simulated board reboots."""


def unique_id():
    return os.urandom(6) if os.environ.get("SHIM_RANDOM_ID") else b"\xde\x5c\x70\x00\x00\x01"


def reset():
    raise Reset("machine.reset()")


def soft_reset():
    raise Reset("machine.soft_reset()")


def deepsleep(ms=0):
    raise DeepSleep(ms)


def lightsleep(ms=0):
    time.sleep(ms / 1000)


def freq():
    return 240000000


def reset_cause():
    return PWRON_RESET


PWRON_RESET = 1
HARD_RESET = 2
WDT_RESET = 3
DEEPSLEEP_RESET = 4
SOFT_RESET = 5


class WDT:
    """Records feeds; `expired()` tells whether a device would have reset."""

    def __init__(self, id=0, timeout=5000):
        self.timeout = timeout
        self.fed = time.monotonic()
        self.feeds = 0
        self.late = False

    def feed(self):
        now = time.monotonic()
        if (now - self.fed) * 1000 > self.timeout:
            self.late = True
        self.fed = now
        self.feeds += 1

    def expired(self):
        return self.late or (time.monotonic() - self.fed) * 1000 > self.timeout


class Pin:
    IN = 0
    OUT = 1
    PULL_UP = 2
    PULL_DOWN = 3

    def __init__(self, id, mode=-1, pull=-1, value=None):
        self.id = id
        self.v = value or 0

    def value(self, v=None):
        if v is None:
            return self.v
        self.v = 1 if v else 0

    def on(self):
        self.v = 1

    def off(self):
        self.v = 0

    def toggle(self):
        self.v ^= 1


class ADC:
    """Channel 4 reads the RP2040-style temperature sensor; any other pin a
    battery (about 1.9-2.1 V at the pin, i.e. 3.8-4.2 V behind a 1:2 divider)."""

    ATTN_0DB = 0
    ATTN_11DB = 3

    def __init__(self, pin, atten=None):
        self.pin = pin

    def read_u16(self):
        if self.pin == 4:
            volts = 0.706 - (22.0 + random.uniform(-1, 1) - 27) * 0.001721
        else:
            volts = 2.0 - (time.monotonic() - _T0) * 1e-4 + random.uniform(-0.01, 0.01)
        return max(0, min(65535, int(volts / 3.3 * 65535)))

    def read_uv(self):
        return int(self.read_u16() * 3300000 / 65535)
