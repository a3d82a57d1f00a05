#!/usr/bin/env python3
"""Write a MicroPython firmware image to a board.

    python -m tools.device.flash --board esp32 --firmware ESP32_GENERIC.bin [--port /dev/ttyUSB0]
    python -m tools.device.flash --board picow --firmware RPI_PICO_W.uf2 [--drive /media/me/RPI-RP2]
    make flash BOARD=esp32 FIRMWARE=path.bin [PORT=...]     (DRIVE=... for the Pico W)

ESP32, ESP32-S3, ESP32-C3: esptool erases the whole flash (the filesystem
too, so deploy again afterwards), then writes the image at the offset
MicroPython's images for that chip are built for. Without --port the only
serial port plugged in is used.

Pico W: hold BOOTSEL while plugging it in (or `mpremote bootloader` on a
running board); it mounts as a USB drive named RPI-RP2, and copying a .uf2
file to it flashes the board, which then reboots by itself. Without --drive
the mounted RPI-RP2 drive is found in /proc/mounts.

The image is read first: a .uf2 that is no UF2 image for the RP2040, or a
.bin that is no ESP-IDF image for the board's chip, is refused before any
device is touched.

--dry-run prints the commands and touches no device.
"""
import os
import struct
import sys

from tools import args
from tools.device import devices
from tools.device.devices import fail

# Where MicroPython's firmware image starts: after the ROM's second-stage
# bootloader slot on the ESP32, at 0 on the newer chips.
ESP_OFFSETS = {"esp32": 0x1000, "esp32s3": 0x0, "esp32c3": 0x0}
BAUD = 460800
UF2_MARKER = "INFO_UF2.TXT"  # every UF2 bootloader drive has it

# A UF2 file is 512-byte blocks: a header of eight little-endian words (two
# start magics, flags, address, payload size, block number, block count, and
# the family id when flags has UF2_FAMILY_FLAG), 476 bytes, the end magic.
# A bootloader ignores a file without them, or for another family, in silence.
UF2_BLOCK = 512
UF2_MAGICS = (0x0A324655, 0x9E5D5157, 0x0AB16F30)  # start 0 ("UF2\n"), start 1, end
UF2_FAMILY_FLAG = 0x2000
UF2_FAMILIES = {"rp2040": 0xE48BFF56}
# An ESP-IDF image starts with this byte; its extended header has the chip
# id (16 bits, little-endian) at byte 12; esptool would only see a wrong one
# after erase-flash has wiped the board.
ESP_MAGIC = 0xE9
ESP_CHIP_IDS = {"esp32": 0, "esp32s3": 9, "esp32c3": 5}


def image_kind(board):
    return "uf2" if board.CHIP == "rp2040" else "bin"


def check_firmware(path, board):
    kind = image_kind(board)
    devices.check_file(path, "firmware file", "FIRMWARE=path.%s, MicroPython's image for %s"
                       % (kind, board.NAME))
    if not path.lower().endswith("." + kind):
        fail("%s takes a .%s image, not %s" % (board.NAME, kind, os.path.basename(path)))
    try:
        with open(path, "rb") as f:
            head = f.read(UF2_BLOCK)
    except OSError as e:
        fail("cannot read %s: %s" % (path, e.strerror or e))
    (check_uf2 if kind == "uf2" else check_esp_image)(head, path, board)
    return path


def check_uf2(block, path, board):
    """The first block of a UF2 file: its magics, and the board's family."""
    start0 = start1 = end = None
    if len(block) == UF2_BLOCK:
        start0, start1, flags, _, _, _, _, family = struct.unpack_from("<8I", block)
        end = struct.unpack_from("<I", block, UF2_BLOCK - 4)[0]
    if (start0, start1, end) != UF2_MAGICS:
        fail("%s is not a UF2 image (no UF2 magic in its first block)" % path)
    want = UF2_FAMILIES[board.CHIP]
    if not flags & UF2_FAMILY_FLAG:
        fail("%s is a UF2 image with no family id: not MicroPython's for %s (family 0x%08x)"
             % (path, board.NAME, want))
    if family != want:
        fail("%s is a UF2 image for family 0x%08x, not %s's (%s, family 0x%08x)"
             % (path, family, board.NAME, board.CHIP, want))


def check_esp_image(head, path, board):
    """The start of an ESP-IDF image: its magic, and the board's chip."""
    if head[:1] != bytes((ESP_MAGIC,)):
        fail("%s is not an ESP image (%s, not 0x%02x)" % (
            path, "its first byte is 0x%02x" % head[0] if head else "it is empty", ESP_MAGIC))
    if len(head) < 14:
        fail("%s is not an ESP image (%d bytes: shorter than its header)" % (path, len(head)))
    chip = struct.unpack_from("<H", head, 12)[0]
    want = ESP_CHIP_IDS[board.CHIP]
    if chip != want:
        names = dict((v, k) for k, v in ESP_CHIP_IDS.items())
        fail("%s is an image for chip id %s%s, not %s's (chip id %d)"
             % (path, chip, " (%s)" % names[chip] if chip in names else "", board.NAME, want))


def esptool_commands(board, port, firmware, baud=BAUD, erase=True):
    """erase-flash, then write-flash at the chip's offset (esptool 5 syntax)."""
    base = devices.tool("esptool") + ["--chip", board.CHIP, "--port", port]
    cmds = [base + ["erase-flash"]] if erase else []
    cmds.append(base + ["--baud", str(baud), "write-flash", "0x%x" % ESP_OFFSETS[board.CHIP],
                        firmware])
    return cmds


def rp2_drives(mounts_text):
    """Mount points of RPI-RP2 drives in /proc/mounts' text (the kernel
    writes a space in a path as \\040)."""
    out = []
    for line in mounts_text.splitlines():
        f = line.split()
        if len(f) >= 2:
            path = f[1].replace("\\040", " ")
            if os.path.basename(path).startswith("RPI-RP2"):
                out.append(path)
    return out


def find_drive(drive=None, mounts="/proc/mounts"):
    if drive:
        if not os.path.isfile(os.path.join(drive, UF2_MARKER)):
            fail("%s is not a mounted RPI-RP2 drive (no %s in it)" % (drive, UF2_MARKER))
        return drive
    try:
        with open(mounts) as f:
            found = [d for d in rp2_drives(f.read())
                     if os.path.isfile(os.path.join(d, UF2_MARKER))]
    except OSError:
        found = []
    if not found:
        fail("no RPI-RP2 drive mounted: hold BOOTSEL while plugging the Pico W in "
             "(or run mpremote bootloader), mount the drive, or give DRIVE=...")
    if len(found) > 1:
        fail("several RPI-RP2 drives (%s): pick one with DRIVE=..." % ", ".join(found))
    return found[0]


def uf2_commands(firmware, drive):
    # sync: the image must be all on the drive before the board reboots
    return [["cp", firmware, drive.rstrip("/") + "/"], ["sync"]]


def main(argv=None):
    ap = args.parser("python -m tools.device.flash", __doc__)
    ap.epilog = "boards: %s" % ", ".join(devices.device_boards())
    ap.add_argument("--board", default="", help="a profile in boards/")
    ap.add_argument("--firmware", default="", help="the MicroPython image (.bin, Pico W: .uf2)")
    ap.add_argument("--port", default="", help="ESP32s: serial port (default: the only one)")
    ap.add_argument("--drive", default="", help="Pico W: the mounted RPI-RP2 drive")
    ap.add_argument("--baud", type=args.count, default=BAUD, help="ESP32s: write speed")
    ap.add_argument("--no-erase", action="store_true",
                    help="ESP32s: keep the rest of the flash (and the filesystem)")
    ap.add_argument("--dry-run", action="store_true", help="print the commands only")
    a = ap.parse_args(argv)
    try:
        board = devices.device_board(a.board)
        firmware = check_firmware(a.firmware, board)
        if image_kind(board) == "uf2":
            drive = find_drive(a.drive) if a.drive or not a.dry_run else "<RPI-RP2>"
            cmds = uf2_commands(firmware, drive)
        else:
            port = devices.check_port(a.port) if a.port or not a.dry_run else "<PORT>"
            if not a.dry_run:
                devices.need_tool("esptool")
            cmds = esptool_commands(board, port, firmware, a.baud, not a.no_erase)
        for c in cmds:
            devices.run(c, a.dry_run)
        if not a.dry_run:
            print("flashed %s; next: make deploy BOARD=%s" % (board.NAME, board.NAME))
    except devices.Usage as e:
        return devices.report("flash", e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
