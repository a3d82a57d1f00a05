# boot.py -- runs first at every boot: nothing slow here (Wi-Fi is joined by
# the app in main.py, under the watchdog). Pico W: set the Wi-Fi country
# from /config.json so the radio uses the right channels.
import gc

gc.collect()
try:
    import rp2
    import config
    rp2.country(config.load().get("country", "XX"))
except (ImportError, ValueError):  # a bad /config.json: main.py says so
    pass
