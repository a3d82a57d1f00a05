# Freezes umqtt3 and the apps into a custom MicroPython firmware, so their
# bytecode runs from flash and importing them costs almost no RAM. From a
# MicroPython checkout (with its mpy-cross built):
#   make -C ports/esp32 BOARD=ESP32_GENERIC FROZEN_MANIFEST=/path/to/umqtt3/firmware/manifest.py
#   make -C ports/rp2 BOARD=RPI_PICO_W FROZEN_MANIFEST=/path/to/umqtt3/firmware/manifest.py
# then `make flash` the image it builds and `python -m tools.device.deploy
# --frozen`, which copies only what stays on the filesystem.
#
# Not frozen, on purpose: boot.py and main.py (a frozen one would run instead
# of the filesystem's, so a board could no longer be changed without a new
# firmware), the board profile (board.py), config.json and secrets.json; nor
# the library's desktop-only module (tools/libgraph.py's HOST_ONLY), which a
# device never imports (the desktop commands live outside lib/umqtt3, in
# lib/umqtt3_cli). The manifest runs with firmware/ as its directory.
import os

HOST_ONLY = ("compat/cpython.py",)  # tools/libgraph.py

# The board's own manifest first (it includes the port's), so its usual
# frozen modules stay: the Pico W's brings the networking bundle (ntptime,
# which the node sets its clock with); the port's alone lacks it. A board
# without one (ESP32_GENERIC) takes the port's.
try:
    include("$(BOARD_DIR)/manifest.py")
except Exception:
    include("$(PORT_DIR)/boards/manifest.py")

_lib = []
for _dir, _subdirs, _names in os.walk("../lib/umqtt3"):
    _subdirs[:] = [d for d in _subdirs if d != "__pycache__"]
    for _n in _names:
        _f = os.path.relpath(os.path.join(_dir, _n), "../lib/umqtt3").replace(os.sep, "/")
        if _n.endswith(".py") and _f not in HOST_ONLY:
            _lib.append(_f)
package("umqtt3", files=sorted(_lib), base_path="../lib")

# the apps, as top-level modules (main.py imports config, node, gateway)
for _app in ("config.py", "sensors.py", "node.py", "gateway.py"):
    module(_app)
