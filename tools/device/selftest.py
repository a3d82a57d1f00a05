#!/usr/bin/env python3
"""Run the on-device self-test, firmware/selftest.py, on a board or under
the WebAssembly MicroPython.

    python -m tools.device.selftest --board esp32 --port /dev/ttyUSB0    (make selftest)
    python -m tools.device.selftest --wasm                                 (make selftest-wasm)

On a board: `mpremote connect PORT mount tests/portable run
firmware/selftest.py`. The script is sent to the board, not copied, and runs
the portable tests from the mounted directory; it imports the library the
board already has, so deploy first (make deploy). Under WebAssembly:
tests/mp/run.mjs, which puts lib/ at /lib (on sys.path, as /lib is on a
board), tests/portable at /tests and the script with its neighbours in
firmware/ at /run.
"""
import argparse
import os
import re
import shutil
import sys

from tools import args
from tools.device import devices
from tools.device.devices import ROOT, fail

SCRIPT = os.path.join("firmware", "selftest.py")


TESTS = os.path.join("tests", "portable")


def heap_size(text):
    """--heap as tests/mp/run.mjs takes it (its parseSize): bytes, or with
    a k or m suffix; checked here, so that --dry-run refuses it too."""
    if not re.fullmatch(r"[0-9]+[kKmM]?", text) or not int(text.rstrip("kKmM")):
        raise argparse.ArgumentTypeError("%r is not a size (bytes, or with k or m: 2m)" % text)
    return text


def device_command(port, script=SCRIPT):
    # `mount` lends the board the portable tests for the run (the script imports them)
    return devices.tool("mpremote") + ["connect", port, "mount", TESTS, "run", script]


def wasm_command(node="node", heap="2m", script=SCRIPT):
    return [node, os.path.join("tests", "mp", "run.mjs"), "--heap", heap, script]


def main(argv=None):
    ap = args.parser("python -m tools.device.selftest", __doc__)
    ap.add_argument("--board", default="", help="the board's profile (checked, for the message)")
    ap.add_argument("--port", default="", help="serial port (default: the only one plugged in)")
    ap.add_argument("--wasm", action="store_true", help="run under the WebAssembly MicroPython")
    ap.add_argument("--node", default="node", help="Node.js for --wasm")
    ap.add_argument("--heap", type=heap_size, default="2m",
                    help="MicroPython heap for --wasm (bytes, or with k or m)")
    ap.add_argument("--script", default=SCRIPT, help="the script")
    ap.add_argument("--dry-run", action="store_true", help="print the command only")
    a = ap.parse_args(argv)
    try:
        devices.check_file(os.path.join(ROOT, a.script) if not os.path.isabs(a.script)
                           else a.script, "self-test script", "--script")
        if a.wasm:
            if not shutil.which(a.node):
                fail("%s not found: install Node.js, then make setup" % a.node)
            cmd = wasm_command(a.node, a.heap, a.script)
        else:
            devices.device_board(a.board)
            port = devices.check_port(a.port) if a.port or not a.dry_run else "<PORT>"
            if not a.dry_run:
                devices.need_tool("mpremote")
            cmd = device_command(port, a.script)
        os.chdir(ROOT)  # the command's paths are the repository's
        devices.run(cmd, a.dry_run)
    except devices.Usage as e:
        return devices.report("selftest", e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
