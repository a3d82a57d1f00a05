# Board profile: generic ESP32 (ESP32-WROOM/WROVER without PSRAM enabled).
# About 110 KB of heap is free after boot with Wi-Fi up; an unfrozen client
# costs ~43 KB to import (README), so buffers stay small.
NAME = "esp32"
BUFSIZE = 512        # largest packet each way; readings are < 100 bytes
WINDOW = 4           # QoS 1/2 in flight: 4 x 512 B of MemoryStore slots
MAX_STORED = 32      # FileStore records on flash (littlefs, small files)
STORE_DIR = "/mq"
LED_PIN = 2          # the blue LED on most DevKit boards (None: no LED)
WDT_MS = 30000       # machine.WDT timeout; 0 disables the watchdog
# on-chip temperature: esp32.raw_temperature() (degrees F, uncalibrated)
TEMP = "esp32_raw"
VBAT_PIN = 35        # ADC1 pin behind a battery divider (e.g. Feather: GPIO35)
VBAT_DIVIDER = 2.0   # supply volts = pin volts * divider
SENSORS = ("temp", "vbat", "uptime", "mem")
# gateway role: broker limits, each client costs ~2 x MAX_PACKET of buffers
MAX_CLIENTS = 4
MAX_PACKET = 512
# queued messages (each held once, however many sessions queue it) and retained
# ones: per client, and for the whole broker (broker_limits, docs/broker.md)
MAX_QUEUED_BYTES = 4096
MEM_BUDGET = 16384
# gateway with a bridge (config.json "bridge"): the broker's store, the QoS 1/2
# messages that may wait there for the upstream broker, those in flight to it
GATEWAY_STORE = "/gw"
BRIDGE_QUEUE = 64
BRIDGE_WINDOW = 4
# for tools/device/deploy.py and flash.py: mpy-cross -march (Xtensa LX6, windowed ABI), the chip
ARCH = "xtensawin"
CHIP = "esp32"
# for tools/device/deploy.py --romfs: the stock MicroPython firmware for this board does not
# enable ROMFS (mpremote romfs query tells); True for one built with MICROPY_VFS_ROM and
# a ROMFS partition
ROMFS = False
