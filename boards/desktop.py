# Board profile for simulation on CPython (tools/desktop/demo.py, tests): the real
# firmware runs against the stand-ins in tools/desktop/shim/. Memory is not the limit
# here; the sizes match an ESP32-S3 so the code paths are the device's.
NAME = "desktop"
BUFSIZE = 1024
WINDOW = 8
MAX_STORED = 64
STORE_DIR = "mq"     # relative: the simulation gives each node its own dir
LED_PIN = None
WDT_MS = 30000       # the shim's WDT only records feeds
TEMP = "esp32_mcu"   # tools/desktop/shim/esp32.py simulates a drifting temperature
VBAT_PIN = 35        # tools/desktop/shim/machine.py's ADC simulates a battery
VBAT_DIVIDER = 2.0
SENSORS = ("temp", "vbat", "uptime", "mem")
MAX_CLIENTS = 8
MAX_PACKET = 1024
# queued messages (each held once, however many sessions queue it) and retained
# ones: per client, and for the whole broker (broker_limits, docs/broker.md)
MAX_QUEUED_BYTES = 16384
MEM_BUDGET = 65536
# gateway with a bridge (config.json "bridge"): the broker's store, the QoS 1/2
# messages that may wait there for the upstream broker, those in flight to it
GATEWAY_STORE = "gw"
BRIDGE_QUEUE = 256
BRIDGE_WINDOW = 8
# not a device: tools/device/deploy.py and flash.py refuse it (make simulate runs it)
ARCH = None
CHIP = None
