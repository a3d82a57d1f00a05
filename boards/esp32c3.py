# Board profile: ESP32-C3 (RISC-V, 400 KB SRAM, no PSRAM). Wi-Fi and the BLE
# stack share the RAM; about 130 KB of heap is free after boot with Wi-Fi up.
NAME = "esp32c3"
BUFSIZE = 512
WINDOW = 4
MAX_STORED = 32
STORE_DIR = "/mq"
LED_PIN = 8          # ESP32-C3 SuperMini / DevKitM-1 LED pin
WDT_MS = 30000
TEMP = "esp32_mcu"   # esp32.mcu_temperature(), degrees C
VBAT_PIN = None
VBAT_DIVIDER = 2.0
SENSORS = ("temp", "uptime", "mem")
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
# for tools/device/deploy.py and flash.py: mpy-cross -march (RISC-V), the chip
ARCH = "rv32imc"
CHIP = "esp32c3"
# for tools/device/deploy.py --romfs: the stock MicroPython firmware for this board does not
# enable ROMFS (mpremote romfs query tells); True for one built with MICROPY_VFS_ROM and
# a ROMFS partition
ROMFS = False
