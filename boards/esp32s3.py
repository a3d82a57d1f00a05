# Board profile: ESP32-S3 (e.g. DevKitC-1 N8R2/N8R8). Without PSRAM about
# 180 KB of heap is free; with PSRAM the MicroPython heap is megabytes. These
# numbers fit the no-PSRAM case with room to spare.
NAME = "esp32s3"
BUFSIZE = 1024
WINDOW = 8           # 8 x 1 KB of MemoryStore slots
MAX_STORED = 64
STORE_DIR = "/mq"
LED_PIN = None       # the DevKit LED is an addressable RGB LED (GPIO48/38)
WDT_MS = 30000
TEMP = "esp32_mcu"   # esp32.mcu_temperature(), degrees C (S2/S3/C3/C6)
VBAT_PIN = None      # no divider on the DevKit; set a pin if you wire one
VBAT_DIVIDER = 2.0
SENSORS = ("temp", "uptime", "mem")
MAX_CLIENTS = 8
MAX_PACKET = 1024
# queued messages (each held once, however many sessions queue it) and retained
# ones: per client, and for the whole broker (broker_limits, docs/broker.md)
MAX_QUEUED_BYTES = 16384
MEM_BUDGET = 65536
# gateway with a bridge (config.json "bridge"): the broker's store, the QoS 1/2
# messages that may wait there for the upstream broker, those in flight to it
GATEWAY_STORE = "/gw"
BRIDGE_QUEUE = 256
BRIDGE_WINDOW = 8
# for tools/device/deploy.py and flash.py: mpy-cross -march (Xtensa LX7, windowed ABI), the chip
ARCH = "xtensawin"
CHIP = "esp32s3"
# for tools/device/deploy.py --romfs: the stock MicroPython firmware for this board does not
# enable ROMFS (mpremote romfs query tells); True for one built with MICROPY_VFS_ROM and
# a ROMFS partition
ROMFS = False
