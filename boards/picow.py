# Board profile: Raspberry Pi Pico W (RP2040, 264 KB SRAM). About 160 KB of
# heap is free after boot; the CYW43 Wi-Fi driver takes its share once active.
NAME = "picow"
BUFSIZE = 512
WINDOW = 4
MAX_STORED = 32      # littlefs on the 848 KB filesystem
STORE_DIR = "/mq"
LED_PIN = "LED"      # on the Pico W the LED hangs off the Wi-Fi chip: Pin("LED")
WDT_MS = 8000        # the RP2040 watchdog tops out at about 8.3 s
TEMP = "rp2_adc"     # ADC channel 4: the on-chip temperature sensor
# VSYS is on GPIO29 (ADC3) behind a 1:3 divider, but on the Pico W that pin is
# shared with the Wi-Fi chip's SPI clock: reading it while Wi-Fi is up is not
# reliable, so vbat is off by default.
VBAT_PIN = None
VBAT_DIVIDER = 3.0
SENSORS = ("temp", "uptime", "mem")
MAX_CLIENTS = 4
MAX_PACKET = 512
# queued messages (each held once, however many sessions queue it) and retained
# ones: per client, and for the whole broker (broker_limits, docs/broker.md)
MAX_QUEUED_BYTES = 8192
MEM_BUDGET = 32768
# gateway with a bridge (config.json "bridge"): the broker's store, the QoS 1/2
# messages that may wait there for the upstream broker, those in flight to it
GATEWAY_STORE = "/gw"
BRIDGE_QUEUE = 64
BRIDGE_WINDOW = 4
# for tools/device/deploy.py and flash.py: mpy-cross -march (Cortex-M0+), the chip
ARCH = "armv6m"
CHIP = "rp2040"
# for tools/device/deploy.py --romfs: the stock MicroPython firmware for this board does not
# enable ROMFS (mpremote romfs query tells); True for one built with MICROPY_VFS_ROM and
# a ROMFS partition
ROMFS = False
