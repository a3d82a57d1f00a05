"""Desktop stand-in for MicroPython's ntptime: the host's clock is already
set, so settime() only checks that it may answer. NTP_FAIL=1 in the
environment makes it fail as an unreachable server does (OSError), for
nodes that must run without knowing the time."""
import os

host = "pool.ntp.org"
timeout = 1


def time():
    import time as _time
    if os.environ.get("NTP_FAIL"):
        raise OSError(110, "ETIMEDOUT")  # what MicroPython raises on no answer
    return int(_time.time())


def settime():
    time()
