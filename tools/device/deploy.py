#!/usr/bin/env python3
"""Put the firmware on a board that runs MicroPython: compile, copy, reset.

    python -m tools.device.deploy --board esp32 --port /dev/ttyUSB0 --role node
    make deploy BOARD=esp32 PORT=/dev/ttyUSB0 ROLE=node [CONFIG=...] [SECRETS=...]

1. The file plan: what the role's apps import from lib/umqtt3 (nothing else),
   the apps, the board profile as board.py, config.json (--config, with
   "role" set to --role; without --role the config's role, else node) and
   secrets.json (--secrets, copied as it is).
2. Staged in build/<board>/ as the device's filesystem: library, apps and
   profile compiled with mpy-cross -march=<the profile's ARCH> (boot.py and
   main.py stay source: MicroPython runs only those two as .py). The
   library is compiled with -X no-source-lines: its bytecode is loaded into
   the heap, and without line numbers a client takes about 1.4 KB less RAM
   (docs/firmware.md); its tracebacks name the function but no line.
   --source-lines keeps them (to debug the library on the board).
3. One mpremote command: make the directories, remove .py files that would
   shadow the new .mpy ones (MicroPython imports x.py before x.mpy), copy
   every staged file (mpremote skips those already identical), reset.

--dry-run prints the plan and the command and touches no device. --frozen is
for a firmware built with firmware/manifest.py: the library and the apps are
in it, so only boot.py, main.py, the profile, config and secrets are copied.

--romfs puts the library and the apps (the same modules, compiled the same
way) in a ROMFS image instead, which `mpremote romfs deploy` writes to the
board's ROMFS partition: imported from there their bytecode runs in place
from flash, as frozen modules do, without building a firmware. It needs a
MicroPython 1.25+ firmware built with MICROPY_VFS_ROM and a ROMFS partition
(the stock ESP32 and RP2040 builds do not enable it; the board profile's
ROMFS says so); on a board without one, mpremote's error ends the deploy
before anything is copied. The image holds umqtt3/ and the apps at its
root (/rom is on sys.path); the rest is copied as with --frozen, and the
filesystem's own copies of what the image holds are removed (they would
shadow it). --romfs-out PATH only writes the image to PATH, for no device.
"""
import json
import os
import shutil
import sys

from tools import args, libgraph, outdir
from tools.device import devices
from tools.device.devices import ROOT, LIB_DIR, FIRMWARE_DIR, fail

ROLES = {
    # firmware/<app>.py each role imports (gateway.py uses node.wifi)
    "node": ("config", "sensors", "node"),
    "gateway": ("config", "sensors", "node", "gateway"),
}
# MicroPython runs boot.py and main.py from source only.
SOURCE_ONLY = ("boot.py", "main.py")
# --romfs: under the staging directory, the image's tree and the image
ROMFS_TREE = "romfs"
ROMFS_SUFFIXES = (".romfs", ".img")  # what mpremote romfs deploy takes as an image
SECRETS_TEMPLATE = "firmware/secrets.example.json"


# ------------------------------------------------------------------ the plan
def plan(board, role, config=None, secrets=None, frozen=False, romfs=False):
    """[(device path, source path, how)]: how is "mpy" (compile), "copy",
    "config" (config.json written from `config` with the role) or, with
    romfs, "rom" (compiled into the ROMFS image; the path is the image's)."""
    if role not in ROLES:
        fail("unknown role %r: one of %s" % (role, ", ".join(ROLES)))
    apps = [os.path.join(FIRMWARE_DIR, a + ".py") for a in ROLES[role]]
    out = []
    if not frozen:
        # in the image, umqtt3/ at the root: /rom is on sys.path (and /rom/lib)
        lib, how = ("", "rom") if romfs else ("lib/", "mpy")
        for m in libgraph.lib_closure(apps + [os.path.join(FIRMWARE_DIR, f) for f in SOURCE_ONLY]):
            src = libgraph.module_file(m)
            rel = os.path.relpath(src, LIB_DIR).replace(os.sep, "/")
            out.append((lib + rel[:-3] + ".mpy", src, how))
        for a, src in zip(ROLES[role], apps):
            out.append((a + ".mpy", src, how))
    out.append(("board.mpy", os.path.join(devices.BOARDS_DIR, board + ".py"), "mpy"))
    out.append(("config.json", config, "config"))
    if secrets:
        out.append(("secrets.json", secrets, "copy"))
    for f in SOURCE_ONLY:  # last: a board reset mid-way boots the old main.py
        out.append((f, os.path.join(FIRMWARE_DIR, f), "copy"))
    return out


def load_firmware_config():
    """firmware/config.py, to check a config.json as the device would."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("fw_config", os.path.join(FIRMWARE_DIR,
                                                                            "config.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def read_json(path, what):
    try:
        with open(path) as f:
            d = json.load(f)
    except OSError as e:
        fail("cannot read %s %s: %s" % (what, path, e.strerror))
    except ValueError as e:
        fail("%s %s is not valid JSON: %s" % (what, path, e))
    if not isinstance(d, dict):
        fail("%s %s must hold a JSON object" % (what, path))
    return d


def device_config(path, role, say=True):
    """The config.json the board gets: the user's, with the role set and the
    board left to /board.py; checked with firmware/config.py's merge (types
    and ranges, as the board checks it at boot)."""
    cfg = read_json(path, "config") if path else {}
    if say and cfg.get("role", role) != role:
        print("config %s says role %r; deploying role %r" % (path, cfg["role"], role))
    cfg["role"] = role
    cfg["board"] = ""
    try:
        br = load_firmware_config().merge(cfg)["bridge"]
        if br and role == "gateway":  # as gateway.py will: the library's own check
            from umqtt3 import bridge
            for b in br if isinstance(br, list) else [br]:
                bridge.settings(b, files=False)  # its files are the board's: read there
    except ValueError as e:
        fail("config %s: %s" % (path or "(defaults)", e))
    return cfg


def read_secrets(path):
    """A secrets.json checked as the board checks /secrets.json at boot
    (firmware/config.py; tools/desktop/simulate.py checks its --secrets
    with this too)."""
    secrets = read_json(path, "secrets")
    try:
        load_firmware_config().check_secrets(secrets)
    except ValueError as e:
        fail("secrets %s: %s" % (path, e))
    return secrets


def check_secrets(path):
    secrets = read_secrets(path)
    if not secrets.get("ssid") and not secrets.get("ap_ssid"):
        print("secrets %s has no ssid: the board cannot join a Wi-Fi network" % path)


# ------------------------------------------------------------------ staging
MARKER = ".deploy-stage"  # never copied: the plan lists what goes to the board


# mpy-cross flags for the library's modules (not the apps'): no line-number
# tables, which the device would otherwise load into its heap with the bytecode
LIB_FLAGS = ["-X", "no-source-lines"]


def stage(entries, out_dir, arch, role, source_lines=False):
    """Write the device's files under out_dir (emptied first); returns
    [(staged path, device path)] in plan order. The image's files ("rom" in
    the plan) go under out_dir/romfs/ and are not in that list. Only a
    directory deploy made itself (its marker file inside) or an empty one is
    emptied: --build may name any directory. The library is compiled without
    line numbers unless source_lines."""
    if not outdir.ours(out_dir, MARKER):
        fail("%s is not a staging directory made by deploy (no %s in it): "
             "not emptying it; name an empty or new directory" % (out_dir, MARKER))
    outdir.renew(out_dir, MARKER, "staged by tools/device/deploy.py; emptied by the next deploy")
    cmd = None
    staged = []
    for dest, src, how in entries:
        rom = how == "rom"
        path = os.path.join(out_dir, *([ROMFS_TREE] if rom else []) + dest.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if how in ("mpy", "rom"):
            cmd = cmd or devices.mpy_cross()
            lib = dest.startswith("umqtt3/" if rom else "lib/")
            name = dest[4:] if lib and not rom else dest
            devices.compile_mpy(src, path, arch, name[:-4] + ".py",
                                cmd + LIB_FLAGS if lib and not source_lines else cmd)
        elif how == "config":
            with open(path, "w") as f:
                json.dump(device_config(src, role), f, indent=1, sort_keys=True)
                f.write("\n")
        else:
            if dest == "secrets.json":
                check_secrets(src)  # here, not on the board (main() refused a bad one already)
            shutil.copyfile(src, path)
        if not rom:
            staged.append((path, dest))
    return staged


def romfs_shadows(entries):
    """The filesystem files that would shadow the image's modules: the
    library as a plain deploy puts it under lib/, and every role's apps."""
    out = []
    for dest, _, how in entries:
        if how == "rom" and dest.startswith("umqtt3/"):
            out += ["lib/" + dest[:-4] + ext for ext in (".mpy", ".py")]
    for roles in ROLES.values():
        for a in roles:
            out += [a + ext for ext in (".mpy", ".py") if a + ext not in out]
    return out


def write_image(out_dir, path):
    """The ROMFS image of out_dir/romfs/ (staged by stage()), written to
    path; returns [(path in the image, bytes)] and the image's size."""
    tree = os.path.join(out_dir, ROMFS_TREE)
    image = devices.romfs_image(tree)
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "wb") as f:
            f.write(image)
    except OSError as e:
        fail("cannot write the image %s: %s" % (path, e.strerror or e))
    files = []
    for d, subdirs, names in os.walk(tree):
        subdirs.sort()
        for n in sorted(names):
            p = os.path.join(d, n)
            files.append((os.path.relpath(p, tree).replace(os.sep, "/"), os.path.getsize(p)))
    return files, len(image)


# ------------------------------------------------------------------ the command
def prepare_code(dests, frozen=False, shadows=()):
    """Python run on the board first: the directories the files go to, and
    no .py (or, frozen, no file at all) that would shadow what we copy or
    what the firmware has frozen, nor the files named in shadows (what a
    ROMFS image holds)."""
    dirs = []
    for d in dests:
        parts = d.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            p = "/".join(parts[:i])
            if p not in dirs:
                dirs.append(p)
    stale = [d[:-4] + ".py" for d in dests if d.endswith(".mpy")]
    stale += [f for f in shadows if f not in stale]
    if frozen:
        for roles in ROLES.values():
            for a in roles:
                for f in (a + ".py", a + ".mpy"):
                    if f not in stale:
                        stale.append(f)
    return ("import os\n"
            "for d in (%s):\n"
            " try:\n  os.mkdir(d)\n except OSError:\n  pass\n"
            "for f in (%s):\n"
            " try:\n  os.remove(f)\n except OSError:\n  pass\n") % (_tuple(dirs), _tuple(stale))


def _tuple(names):
    # double quotes: the command reads better in a shell than with repr's
    return "".join('"%s",' % n for n in names)


def mpremote_command(port, staged, frozen=False, image=None, shadows=()):
    """One mpremote invocation: (write the ROMFS image,) prepare, copy each
    file, reset. The image goes first: on a board without a ROMFS partition
    mpremote stops there, before anything changed."""
    cmd = devices.tool("mpremote") + ["connect", port]
    if image:
        cmd += ["romfs", "deploy", image, "+"]
    cmd += ["exec", prepare_code([d for _, d in staged], frozen, shadows)]
    for path, dest in staged:
        cmd += ["+", "cp", path, ":" + dest]
    return cmd + ["+", "reset"]


def default_file(given, name):
    """--config/--secrets as given, else <repo>/<name> when it exists."""
    if given:
        if not os.path.isfile(given):
            fail("no such file: %s" % given)
        return given
    path = os.path.join(ROOT, name)
    return path if os.path.isfile(path) else None


def stage_and_show(a, board, role, entries, out_dir):
    try:
        staged = stage(entries, out_dir, board.ARCH, role, a.source_lines)
    except OSError as e:
        fail("cannot stage the files in %s: %s" % (out_dir, e.strerror or e))
    print("%s, role %s: %d files staged in %s (mpy-cross -march=%s%s)"
          % (a.board, role, len(staged), out_dir[len(ROOT) + 1:]
             if out_dir.startswith(ROOT + os.sep) else out_dir, board.ARCH,
             "" if a.source_lines else "; library: -X no-source-lines"))
    for path, dest in staged:
        print("  :%-32s %6d B" % (dest, os.path.getsize(path)))
    return staged


def show_image(path, files, size):
    print("ROMFS image %s: %d files, %d B" % (path, len(files), size))
    for name, n in files:
        print("  /rom/%-28s %6d B" % (name, n))


def romfs_out(a, board, role):
    """--romfs-out: the role's image alone, written to the path given."""
    devices.need_tool("mpremote")  # its ROMFS builder
    entries = [e for e in plan(a.board, role, romfs=True) if e[2] == "rom"]
    out_dir = a.build or os.path.join(ROOT, "build", a.board)
    try:
        stage(entries, out_dir, board.ARCH, role, a.source_lines)
    except OSError as e:
        fail("cannot stage the files in %s: %s" % (out_dir, e.strerror or e))
    show_image(a.romfs_out, *write_image(out_dir, a.romfs_out))
    print("write it to a board's ROMFS partition with: mpremote romfs deploy %s "
          "(--romfs does that and copies the rest)" % a.romfs_out)
    return 0


def main(argv=None):
    ap = args.parser("python -m tools.device.deploy", __doc__)
    ap.epilog = "boards: %s; roles: %s" % (", ".join(devices.device_boards()), ", ".join(ROLES))
    ap.add_argument("--board", default="", help="a profile in boards/")
    ap.add_argument("--port", default="",
                    help="serial port (default: the only one plugged in), or socket://host:port")
    ap.add_argument("--role", default="",
                    help="node or gateway (default: the config's role, else node)")
    ap.add_argument("--config", help="config.json to copy (default: ./config.json if there)")
    ap.add_argument("--secrets", help="secrets.json to copy (default: ./secrets.json if there)")
    ap.add_argument("--frozen", action="store_true",
                    help="the firmware has umqtt3 and the apps frozen in: copy the rest only")
    ap.add_argument("--romfs", action="store_true",
                    help="the library and the apps in a ROMFS image (mpremote romfs deploy), "
                         "for a firmware with a ROMFS partition; the rest copied")
    ap.add_argument("--romfs-out", metavar="PATH", default="",
                    help="only write the role's ROMFS image to PATH (.romfs or .img): "
                         "no device, no port")
    ap.add_argument("--build", default="", help="staging directory (default build/<board>)")
    ap.add_argument("--source-lines", action="store_true",
                    help="keep line numbers in the library's .mpy files (about 1.4 KB more RAM)")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and the command only")
    a = ap.parse_args(argv)
    if a.build:
        args.check_dir(ap, a.build, "--build")
    if a.romfs_out:
        if not a.romfs_out.endswith(ROMFS_SUFFIXES):
            ap.error("--romfs-out %s: name it NAME.romfs or NAME.img (what mpremote romfs "
                     "deploy takes as an image)" % a.romfs_out)
        args.check_dir(ap, os.path.dirname(a.romfs_out) or ".", "--romfs-out")
    romfs = a.romfs or bool(a.romfs_out)
    if romfs and a.frozen:
        ap.error("--frozen and --romfs exclude each other: the library is frozen in the "
                 "firmware or in the ROMFS image")
    try:
        board = devices.device_board(a.board)
        config = default_file(a.config, "config.json")
        role = a.role or (read_json(config, "config").get("role") if config else None) or "node"
        if role not in ROLES:
            fail("unknown role %r: one of %s" % (role, ", ".join(ROLES)))
        if a.romfs_out:
            return romfs_out(a, board, role)
        port = devices.check_port(a.port) if a.port or not a.dry_run else "<PORT>"
        secrets = default_file(a.secrets, "secrets.json")
        if not secrets:
            print("no secrets.json: the board gets no Wi-Fi or broker credentials. Create one: "
                  "cp %s secrets.json, then fill it in (git ignores it)" % SECRETS_TEMPLATE)
        if not config:
            print("no config.json: the board uses firmware/config.py's defaults "
                  "(broker 192.168.1.10); give --config or CONFIG=...")
        device_config(config, role, say=False)  # refused before anything is staged
        if secrets:
            read_secrets(secrets)  # so are the secrets (stage() empties out_dir first)
        entries = plan(a.board, role, config, secrets, a.frozen, romfs)
        out_dir = a.build or os.path.join(ROOT, "build", a.board)
        staged = stage_and_show(a, board, role, entries, out_dir)
        image, shadows = None, ()
        if romfs:
            if not getattr(board, "ROMFS", False):
                print("boards/%s.py: ROMFS = False: the stock MicroPython firmware for this "
                      "board does not enable ROMFS; one built with it is needed" % a.board)
            image = os.path.join(out_dir, "umqtt3-%s.romfs" % role)
            show_image(image, *write_image(out_dir, image))
            shadows = romfs_shadows(entries)
        if not a.dry_run:
            devices.need_tool("mpremote")
        # with an image, mpremote's own last line is the error (no ROMFS partition, ...)
        devices.run(mpremote_command(port, staged, a.frozen, image, shadows), a.dry_run,
                    last_line_is_error=romfs)
        if not a.dry_run:
            print("deployed; watch it with: mpremote connect %s repl" % port)
    except devices.Usage as e:
        return devices.report("deploy", e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
