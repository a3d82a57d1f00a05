# Freezes umqtt3 into a custom MicroPython firmware, so its bytecode runs from
# flash and importing it costs almost no RAM. From a MicroPython checkout:
#   make -C ports/esp32 BOARD=ESP32_GENERIC FROZEN_MANIFEST=/path/to/umqtt3/firmware/manifest.py
#   make -C ports/rp2 BOARD=RPI_PICO_W FROZEN_MANIFEST=/path/to/umqtt3/firmware/manifest.py
# The port's own manifest comes first so its usual frozen modules stay.
include("$(PORT_DIR)/boards/manifest.py")
package("umqtt3", base_path="../lib")
