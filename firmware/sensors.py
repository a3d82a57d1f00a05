# sensors -- the built-in readings, picked by the board profile.
#
# builtin(board, uptime) -> {metric: callable}; a callable returns a number,
# or None when it has nothing to report (the node then skips it). Only APIs
# MicroPython has: esp32.raw_temperature() (ESP32), esp32.mcu_temperature()
# (ESP32-S2/S3/C3/C6), machine.ADC(4) (RP2040 temperature), machine.ADC with
# read_uv() (ESP32, calibrated) or read_u16(), gc.mem_free().
import gc


def _temp_esp32_raw():
    import esp32
    return round((esp32.raw_temperature() - 32) / 1.8, 1)


def _temp_esp32_mcu():
    import esp32
    # ESP32-S2/S3/C3/C6 only (their profiles pick it); the esp32 stubs
    # describe the original ESP32, which has raw_temperature() instead
    return esp32.mcu_temperature()  # type: ignore[attr-defined, unused-ignore]


def _temp_rp2_adc():
    import machine
    volts = machine.ADC(4).read_u16() * 3.3 / 65535
    return round(27 - (volts - 0.706) / 0.001721, 1)


TEMPS = {"esp32_raw": _temp_esp32_raw, "esp32_mcu": _temp_esp32_mcu,
         "rp2_adc": _temp_rp2_adc}


def _vbat(pin, divider):
    import machine
    try:
        adc = machine.ADC(machine.Pin(pin), atten=machine.ADC.ATTN_11DB)  # ESP32: 0-3.3 V
    except (AttributeError, TypeError):
        adc = machine.ADC(machine.Pin(pin))
    if hasattr(adc, "read_uv"):
        volts = adc.read_uv() / 1000000
    else:
        volts = adc.read_u16() * 3.3 / 65535
    return round(volts * divider, 3)


def _mem():
    f = getattr(gc, "mem_free", None)  # MicroPython only
    return f() if f else None


def builtin(board, uptime):
    """{metric: callable} for the names in board.SENSORS."""
    out = {}
    for name in getattr(board, "SENSORS", ()):
        if name == "temp":
            out[name] = TEMPS[board.TEMP]
        elif name == "vbat":
            pin = getattr(board, "VBAT_PIN", None)
            if pin is not None:
                div = getattr(board, "VBAT_DIVIDER", 1.0)
                out[name] = lambda: _vbat(pin, div)
        elif name == "uptime":
            out[name] = uptime
        elif name == "mem":
            out[name] = _mem
        else:
            raise ValueError("unknown sensor " + name)
    return out
