"""Desktop stand-in for MicroPython's `rp2` module (CPython only): just the
Wi-Fi country setting the firmware may call on a Pico W."""
_country = ["XX"]


def country(code=None):
    if code is None:
        return _country[0]
    _country[0] = code
