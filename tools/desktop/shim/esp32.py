"""Desktop stand-in for MicroPython's `esp32` module (CPython only): the
on-chip temperature as a slow random walk around 22 C."""
import random

_t = [22.0 + random.uniform(-2, 2)]


def mcu_temperature():
    _t[0] += random.uniform(-0.3, 0.3)
    return round(_t[0], 1)


def raw_temperature():
    return int(mcu_temperature() * 1.8 + 32)  # degrees F, as the ESP32 reports
