"""The device tools up to the device boundary: tools/device/deploy.py's file plan
per board and role, the .mpy files it stages per architecture (compiled for
real with mpy-cross, headers read back, and imported by the WebAssembly
MicroPython from the staged tree alone), the exact mpremote, esptool and
self-test command lines (parsed by the real mpremote and esptool when they
are installed), the one-line errors for a missing board, role, port, file or
drive, firmware/manifest.py, and tools/desktop/simulate.py running nodes against
our broker."""
import json
import os
import shutil
import struct
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from collector import Collector  # tests/collector.py
from tools import libgraph, procs
from tools.desktop import sim
from tools.device import deploy, devices, flash, selftest


PY = sys.executable
DEVICE_BOARDS = ["esp32", "esp32c3", "esp32s3", "picow"]
ARCHS = {"esp32": "xtensawin", "esp32s3": "xtensawin", "esp32c3": "rv32imc", "picow": "armv6m"}
NODE = shutil.which("node")
WASM = os.path.join(ROOT, "node_modules", "@micropython", "micropython-webassembly-pyscript",
                    "micropython.mjs")


def lib_py_files():
    """Every .py under lib/umqtt3, relative to lib/umqtt3."""
    out = []
    base = os.path.join(ROOT, "lib", "umqtt3")
    for d, subdirs, names in os.walk(base):
        subdirs[:] = [s for s in subdirs if s != "__pycache__"]
        out += [os.path.relpath(os.path.join(d, n), base).replace(os.sep, "/")
                for n in names if n.endswith(".py")]
    return sorted(out)


def host_only_files():
    return sorted(libgraph.lib_host_only())


def usage_error(fn, *args, **kw):
    with pytest.raises(devices.Usage) as e:
        fn(*args, **kw)
    assert e.value.code == 2 and "\n" not in e.value.msg
    return e.value.msg


# ------------------------------------------------------------------ boards
def test_board_profiles_name_their_arch_and_chip():
    assert devices.device_boards() == DEVICE_BOARDS
    for name in DEVICE_BOARDS:
        b = devices.device_board(name)
        assert b.ARCH == ARCHS[name] and b.ARCH in devices.MPY_ARCHS
        assert b.CHIP in flash.ESP_OFFSETS or b.CHIP == "rp2040"
    assert "desktop" in usage_error(devices.device_board, "desktop")
    assert "unknown board 'esp8266'" in usage_error(devices.device_board, "esp8266")
    assert "no board given" in usage_error(devices.device_board, "")


# ------------------------------------------------------------------ the file plan
@pytest.mark.parametrize("board", DEVICE_BOARDS)
def test_plan_per_board_and_role(board):
    node = deploy.plan(board, "node")
    gw = deploy.plan(board, "gateway", secrets="s.json")
    dn = [d for d, _, _ in node]
    dg = [d for d, _, _ in gw]
    for dests in (dn, dg):
        # library, apps and profile compiled; boot.py and main.py source, last
        assert dests[-2:] == ["boot.py", "main.py"]
        assert "board.mpy" in dests and "config.json" in dests
        for m in ("__init__", "compat/__init__", "codec", "client", "store", "memstore", "flow",
                  "topic"):
            assert "lib/umqtt3/%s.mpy" % m in dests or (
                m == "compat/__init__" and "lib/umqtt3/compat.mpy" in dests)
        # nothing desktop-only: compat's CPython half, the umqtt3_cli commands
        # (broker.py's `__main__` block imports them; the plan must not follow)
        assert not [d for d in dests if "cpython" in d or "umqtt3_cli" in d]
        assert len(set(dests)) == len(dests)
    assert [d for d in dn if not d.startswith("lib/")] == [
        "config.mpy", "sensors.mpy", "node.mpy", "board.mpy", "config.json", "boot.py", "main.py"]
    # the gateway adds the broker and its app; the node has neither
    assert not [d for d in dn if "broker" in d or d == "gateway.mpy"]
    assert {"lib/umqtt3/broker.mpy", "lib/umqtt3/broker_session.mpy", "gateway.mpy",
            "secrets.json"} <= set(dg)
    assert set(dn) < set(dg)
    # Conn is client_codec's: only the broker imports it by conn's name
    assert "lib/umqtt3/conn.mpy" in dg and "lib/umqtt3/conn.mpy" not in dn
    srcs = dict((d, (s, how)) for d, s, how in gw)
    assert srcs["board.mpy"] == (os.path.join(ROOT, "boards", board + ".py"), "mpy")
    assert srcs["secrets.json"] == ("s.json", "copy")
    assert srcs["main.py"] == (os.path.join(ROOT, "firmware", "main.py"), "copy")
    # frozen firmware: only what stays on the filesystem
    assert [d for d, _, _ in deploy.plan(board, "node", frozen=True)] == [
        "board.mpy", "config.json", "boot.py", "main.py"]


def test_plan_follows_the_imports_of_every_module_it_takes():
    # every umqtt3 module a planned module imports is planned too (checked
    # here by reading the sources again, with a plain text scan)
    dests = set(d for d, _, _ in deploy.plan("esp32", "gateway"))
    import re
    for d in dests:
        if not d.startswith("lib/"):
            continue
        src = os.path.join(ROOT, d[:-4] + ".py")
        if not os.path.exists(src):
            continue
        pkg = os.path.dirname(d)
        for line in open(src):
            m = re.match(r"\s*from \.(\w*) import (.+)", line)
            if m and m.group(1) and m.group(1) not in ("cpython",):
                name = m.group(1)
                assert (pkg + "/" + name + ".mpy" in dests or
                        pkg + "/" + name + "/__init__.mpy" in dests), (d, line)
    assert "unknown role 'sensor'" in usage_error(deploy.plan, "esp32", "sensor")


# ------------------------------------------------------------------ staging and .mpy
@pytest.mark.parametrize("board", DEVICE_BOARDS)
def test_staged_mpy_files_per_arch(board, tmp_path):
    b = devices.device_board(board)
    staged = deploy.stage(deploy.plan(board, "gateway"), str(tmp_path / board), b.ARCH, "gateway")
    mpys = [p for p, d in staged if d.endswith(".mpy")]
    assert len(mpys) >= 15
    for p in mpys:
        version, arch, bits = devices.mpy_header(p)
        assert version == 6 and bits == 31
        # bytecode carries no architecture and runs on any; native code
        # (@micropython.native / viper) would carry the board's
        assert arch in ("none", b.ARCH), (p, arch)
    on_disk = sorted(os.path.relpath(os.path.join(d, f), str(tmp_path / board)).replace(os.sep, "/")
                     for d, _, fs in os.walk(str(tmp_path / board)) for f in fs)
    assert on_disk == sorted([d for _, d in staged] + [deploy.MARKER])
    cfg = json.load(open(str(tmp_path / board / "config.json")))
    assert cfg == {"role": "gateway", "board": ""}


@pytest.mark.parametrize("board", DEVICE_BOARDS)
def test_native_code_is_compiled_for_the_boards_arch(board, tmp_path):
    # what -march does: a module with native code gets the board's arch
    src = tmp_path / "fast.py"
    src.write_text("import micropython\n\n@micropython.native\ndef add(a, b):\n    return a + b\n")
    out = str(tmp_path / "fast.mpy")
    arch = devices.device_board(board).ARCH
    devices.compile_mpy(str(src), out, arch, "fast.py")
    assert devices.mpy_header(out)[1] == arch
    bad = tmp_path / "bad.py"
    bad.write_text("def f(:\n")
    assert "cannot compile" in usage_error(devices.compile_mpy, str(bad), out, arch, "bad.py")


def test_config_json_is_the_users_with_the_role(tmp_path):
    user = tmp_path / "config.json"
    out = str(tmp_path / "b")

    def staged_config():
        staged = deploy.stage(deploy.plan("esp32", "node", str(user), frozen=True), out,
                              "xtensawin", "node")
        return json.load(open([p for p, d in staged if d == "config.json"][0]))
    user.write_text(json.dumps({"broker": "10.0.0.2", "qos": 2, "role": "gateway"}))
    assert staged_config() == {"broker": "10.0.0.2", "qos": 2, "role": "node", "board": ""}
    user.write_text(json.dumps({"qos": 3}))
    assert "qos must be one of 0, 1, 2, not 3" in usage_error(staged_config)
    user.write_text("{broker: 1}")
    assert "not valid JSON" in usage_error(staged_config)
    user.write_text("[1]")
    assert "must hold a JSON object" in usage_error(staged_config)


def test_secrets_json_is_refused_before_staging_unless_an_object_of_strings(tmp_path, capsys):
    user = tmp_path / "secrets.json"
    out = str(tmp_path / "b")

    def staged_secrets():
        staged = deploy.stage(deploy.plan("esp32", "node", None, str(user), frozen=True), out,
                              "xtensawin", "node")
        return json.load(open([p for p, d in staged if d == "secrets.json"][0]))
    user.write_text('{"ssid": "home", "password": "pw"}')
    assert staged_secrets() == {"ssid": "home", "password": "pw"}
    user.write_text('{"mqtt_user": "u"}')
    assert staged_secrets() == {"mqtt_user": "u"}
    assert "has no ssid: the board cannot join a Wi-Fi network" in capsys.readouterr().out
    user.write_text('{"ssid": "home", "password": 1234}')
    assert usage_error(staged_secrets) == "secrets %s: password must be a string" % user
    user.write_text('["home", "pw"]')
    assert usage_error(staged_secrets) == "secrets %s must hold a JSON object" % user


def test_secrets_template_is_valid_and_names_what_the_firmware_reads():
    s = json.load(open(os.path.join(ROOT, deploy.SECRETS_TEMPLATE)))
    assert {"ssid", "password", "mqtt_user", "mqtt_password", "ap_ssid", "ap_password"} == set(s)
    fw = open(os.path.join(ROOT, "firmware", "node.py")).read() + \
        open(os.path.join(ROOT, "firmware", "gateway.py")).read()
    for k in s:
        assert '"%s"' % k in fw, k


IMPORT_ALL = """\
import sys
sys.path[:] = ["/device", "/device/lib"]
import board, config, node, gateway
import umqtt3.client, umqtt3.store, umqtt3.broker
print("imported", board.NAME, sorted(k for k in sys.modules if k.startswith("umqtt3")))
"""


@pytest.mark.skipif(not (NODE and os.path.exists(WASM)), reason="no WebAssembly MicroPython")
def test_staged_tree_alone_imports_under_micropython(tmp_path):
    # the board's filesystem as deploy stages it, and nothing else: every
    # app and library module the gateway role needs is there as .mpy
    dev = str(tmp_path / "device")
    deploy.stage(deploy.plan("esp32", "gateway"), dev, "xtensawin", "gateway")
    script = tmp_path / "run" / "imports.py"
    script.parent.mkdir()
    script.write_text(IMPORT_ALL)

    def run():
        return subprocess.run([NODE, os.path.join(ROOT, "tests", "mp", "run.mjs"), "--no-shared",
                               "--mount", dev + "=/device", str(script)],
                              capture_output=True, text=True, timeout=120)
    p = run()
    assert p.returncode == 0, p.stderr
    assert "imported esp32" in p.stdout and "'umqtt3.broker'" in p.stdout
    os.remove(os.path.join(dev, "lib", "umqtt3", "store.mpy"))  # one file short
    p = run()
    assert p.returncode != 0 and "store" in p.stderr


# ------------------------------------------------------------------ mpremote
def test_mpremote_command_exact():
    staged = [("/b/lib/umqtt3/client.mpy", "lib/umqtt3/client.mpy"),
              ("/b/node.mpy", "node.mpy"), ("/b/config.json", "config.json"),
              ("/b/main.py", "main.py")]
    prepare = ("import os\n"
               'for d in ("lib","lib/umqtt3",):\n'
               " try:\n  os.mkdir(d)\n except OSError:\n  pass\n"
               'for f in ("lib/umqtt3/client.py","node.py",):\n'
               " try:\n  os.remove(f)\n except OSError:\n  pass\n")
    assert deploy.mpremote_command("/dev/ttyUSB0", staged) == [
        PY, "-m", "mpremote", "connect", "/dev/ttyUSB0", "exec", prepare,
        "+", "cp", "/b/lib/umqtt3/client.mpy", ":lib/umqtt3/client.mpy",
        "+", "cp", "/b/node.mpy", ":node.mpy",
        "+", "cp", "/b/config.json", ":config.json",
        "+", "cp", "/b/main.py", ":main.py",
        "+", "reset"]


def test_prepare_code_makes_dirs_and_removes_shadowing_sources(tmp_path, monkeypatch):
    # the same code the board runs, here on CPython in a scratch "device"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "node.py").write_text("old")
    (tmp_path / "main.py").write_text("keep")
    (tmp_path / "lib").mkdir()
    code = deploy.prepare_code(["lib/umqtt3/compat/__init__.mpy", "lib/umqtt3/client.mpy",
                                "node.mpy", "main.py"])
    exec(code, {})
    exec(code, {})  # again: everything there already is fine
    assert (tmp_path / "lib" / "umqtt3" / "compat").is_dir()
    assert not (tmp_path / "node.py").exists() and (tmp_path / "main.py").exists()
    # frozen: the apps' files on the filesystem would shadow the frozen ones
    (tmp_path / "node.mpy").write_text("old")
    (tmp_path / "gateway.py").write_text("old")
    exec(deploy.prepare_code(["board.mpy", "main.py"], frozen=True), {})
    assert not (tmp_path / "node.mpy").exists() and not (tmp_path / "gateway.py").exists()


def mpremote_parse(cmd):
    """Walk a mpremote command line with mpremote's own parsers, as its
    main() does, without running anything: [(command, parsed args)]."""
    import argparse
    from mpremote import main as m
    m.prepare_command_expansions(type("Config", (), {"commands": {}})())
    assert cmd[:3] == [PY, "-m", "mpremote"]
    args = list(cmd[3:])
    out = []
    while args:
        if args[0] == "+":
            args.pop(0)
            continue
        m.do_command_expansion(args)
        name = args.pop(0)
        _, parser = m._COMMANDS[name]
        extra = []
        if "+" in args:
            i = args.index("+")
            args, extra = args[:i], args[i:]
        p = parser()
        p.add_argument("next_command", nargs=argparse.REMAINDER)
        a = p.parse_args(args)
        out.append((name, a))
        args = a.next_command + extra
    return out


@pytest.mark.skipif(not devices.importlib.util.find_spec("mpremote"), reason="no mpremote")
def test_mpremote_parses_the_deploy_command(tmp_path):
    staged = deploy.stage(deploy.plan("picow", "node"), str(tmp_path / "b"), "armv6m", "node")
    steps = mpremote_parse(deploy.mpremote_command("/dev/ttyACM0", staged))
    assert steps[0][0] == "connect" and steps[0][1].device == ["/dev/ttyACM0"]
    assert steps[1][0] == "exec" and steps[1][1].expr == [deploy.prepare_code(
        [d for _, d in staged])]
    cps = steps[2:-1]
    assert [(s[1].command, s[1].path) for s in cps] == [
        (["cp"], [p, ":" + d]) for p, d in staged]
    assert steps[-1][0] == "exec" and "machine.reset()" in steps[-1][1].expr[0]
    with pytest.raises(KeyError):  # the walk refuses what mpremote would
        mpremote_parse([PY, "-m", "mpremote", "connect", "/dev/ttyACM0", "+", "copy", "a", ":a"])
    steps = mpremote_parse(selftest.device_command("/dev/ttyUSB0"))
    assert [s[0] for s in steps] == ["connect", "mount", "run"]
    assert steps[1][1].path == ["tests/portable"]
    assert steps[2][1].path == ["firmware/selftest.py"]


# ------------------------------------------------------------------ ROMFS (--romfs)
HAVE_MPREMOTE = devices.importlib.util.find_spec("mpremote") is not None
needs_mpremote = pytest.mark.skipif(not HAVE_MPREMOTE, reason="no mpremote (its ROMFS builder)")
needs_wasm = pytest.mark.skipif(not (NODE and os.path.exists(WASM)),
                                reason="no WebAssembly MicroPython")


def read_romfs(image):
    """{path: bytes} of a ROMFS image, read here by the format (a header
    b"\\xd2\\xcd\\x31" and a length, then records kind, length, payload with
    7-bit big-endian lengths; kind 4 a directory, 5 a file whose data is a
    kind 2 record), not by mpremote's code that wrote it."""
    def uint(b, i):
        v = 0
        while True:
            x = b[i]
            i += 1
            v = (v << 7) | (x & 0x7F)
            if not x & 0x80:
                return v, i

    def records(b, i, end, prefix, out):
        while i < end:
            kind, i = uint(b, i)
            n, i = uint(b, i)
            body = i
            i += n
            if kind in (0, 1):  # unused, padding
                continue
            ln, j = uint(b, body)
            name = prefix + b[j:j + ln].decode()
            if kind == 4:
                records(b, j + ln, i, name + "/", out)
            else:
                assert kind == 5, kind
                dkind, k = uint(b, j + ln)
                dn, k = uint(b, k)
                assert dkind == 2, dkind  # the data in place
                out[name] = b[k:k + dn]
        return out

    assert image[:3] == b"\xd2\xcd\x31"
    size, i = uint(image, 3)
    assert i + size == len(image)
    return records(image, i, i + size, "", {})


@needs_mpremote
@pytest.mark.parametrize("board,role", [("esp32", "node"), ("picow", "gateway")])
def test_romfs_image_holds_the_roles_modules_as_a_plain_deploy_compiles_them(board, role,
                                                                             tmp_path):
    out = str(tmp_path / ("%s.romfs" % role))
    p = cli("deploy.py", "--board", board, "--role", role, "--romfs-out", out,
            "--build", str(tmp_path / "b"))
    assert p.returncode == 0 and not p.stderr, p.stderr
    with open(out, "rb") as f:
        files = read_romfs(f.read())
    # the modules and apps a plain deploy copies under lib/ and /, at the
    # image's root (on the board /rom is on sys.path), and nothing else
    plain = str(tmp_path / "plain")
    staged = deploy.stage(deploy.plan(board, role), plain, devices.device_board(board).ARCH, role)
    want = {(d[4:] if d.startswith("lib/") else d): path for path, d in staged
            if d.endswith(".mpy") and d != "board.mpy"}
    assert sorted(files) == sorted(want)
    assert "umqtt3/client.mpy" in files and (role + ".mpy") in files
    assert ("umqtt3/broker.mpy" in files) == (role == "gateway")
    for name, data in files.items():  # byte for byte: -march, no line numbers in the library
        with open(want[name], "rb") as f:
            assert data == f.read(), name
    assert "/rom/umqtt3/client.mpy" in p.stdout and "mpremote romfs deploy " + out in p.stdout


def test_romfs_plan_moves_the_library_and_apps_into_the_image():
    plan = deploy.plan("esp32", "node", romfs=True)
    fs = [d for d, _, how in plan if how != "rom"]
    rom = [d for d, _, how in plan if how == "rom"]
    assert fs == [d for d, _, _ in deploy.plan("esp32", "node", frozen=True)]
    assert "umqtt3/client.mpy" in rom and "node.mpy" in rom and not any(
        d.startswith("lib/") for d in rom)
    shadows = deploy.romfs_shadows(plan)
    for f in ("lib/umqtt3/client.mpy", "lib/umqtt3/client.py", "node.mpy", "gateway.py"):
        assert f in shadows
    assert "main.py" not in shadows and "board.mpy" not in shadows


@needs_mpremote
def test_romfs_deploy_command(tmp_path):
    staged = [("/b/board.mpy", "board.mpy"), ("/b/main.py", "main.py")]
    shadows = ["lib/umqtt3/client.mpy", "node.mpy"]
    cmd = deploy.mpremote_command("/dev/ttyUSB0", staged, image="/b/umqtt3-node.romfs",
                                  shadows=shadows)
    assert cmd[:9] == [PY, "-m", "mpremote", "connect", "/dev/ttyUSB0",
                       "romfs", "deploy", "/b/umqtt3-node.romfs", "+"]
    steps = mpremote_parse(cmd)
    assert [s[0] for s in steps] == ["connect", "romfs", "exec", "fs", "fs", "exec"]
    assert steps[1][1].command == ["deploy"] and steps[1][1].path == "/b/umqtt3-node.romfs"
    assert steps[1][1].partition == 0
    assert steps[2][1].expr == [deploy.prepare_code(["board.mpy", "main.py"], shadows=shadows)]
    # the image is the one deploy staged, named so that mpremote reads it as an image
    p = cli("deploy.py", "--board", "esp32s3", "--romfs", "--build", str(tmp_path / "b"),
            "--dry-run")
    assert p.returncode == 0, p.stderr
    image = str(tmp_path / "b" / "umqtt3-node.romfs")
    assert "connect '<PORT>' romfs deploy %s" % image in p.stdout
    assert os.path.isfile(image) and image.endswith(deploy.ROMFS_SUFFIXES)
    assert "ROMFS = False" in p.stdout  # the profile: stock firmware has none
    assert ":umqtt3/" not in p.stdout and ":lib/" not in p.stdout  # nothing of it copied


def test_prepare_code_removes_what_the_image_shadows(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lib" / "umqtt3").mkdir(parents=True)
    for f in ("lib/umqtt3/client.mpy", "lib/umqtt3/codec.py", "node.mpy", "config.json"):
        (tmp_path / f).write_text("old")
    plan = deploy.plan("esp32", "node", romfs=True)
    exec(deploy.prepare_code(["board.mpy", "config.json", "main.py"],
                             shadows=deploy.romfs_shadows(plan)), {})
    assert os.listdir(str(tmp_path / "lib" / "umqtt3")) == []
    assert not (tmp_path / "node.mpy").exists() and (tmp_path / "config.json").exists()


ROM_CLIENT = r'''
# The ROMFS image deploy built, mounted at /rom as a board mounts it, is the
# only place umqtt3 can come from; a subscriber and a publisher talk through
# the image's broker over an in-memory link pair.
import sys, vfs
with open("/img/image.romfs", "rb") as f:
    vfs.mount(vfs.VfsRom(f.read()), "/rom")
sys.path[:] = ["/rom", "/rom/lib"]
from umqtt3.broker import Broker
from umqtt3.client import MQTTClient


class End:
    """One end of the pair; reading the clients' end with nothing there
    lets the broker (same thread) serve first."""

    def __init__(self, pump=None):
        self.buf = bytearray(2048)
        self.n = 0
        self.peer = None
        self.closed = False
        self.pump = pump

    def readinto(self, buf, n=-1):
        if not self.n and self.pump:
            self.pump()
        if not self.n:
            return 0 if self.closed or self.peer.closed else None
        if n < 0 or n > len(buf):
            n = len(buf)
        n = min(n, self.n)
        buf[:n] = self.buf[:n]
        self.buf[:self.n - n] = self.buf[n:self.n]
        self.n -= n
        return n

    def write(self, buf, off=0, n=-1):
        if n < 0:
            n = len(buf) - off
        p = self.peer
        n = min(n, len(p.buf) - p.n)
        if not n:
            return None
        p.buf[p.n:p.n + n] = buf[off:off + n]
        p.n += n
        return n

    def close(self):
        self.closed = True

    def readable(self):
        return self.n > 0 or self.closed or self.peer.closed


broker = Broker(port=None)


def pump():
    for _ in range(3):
        broker.poll_once(0)


def link():
    a, b = End(pump), End()
    a.peer, b.peer = b, a
    broker.attach(b)
    return a


got = []
sub = MQTTClient("sub", "gw", keepalive=60, store=False, connect_link=link)
sub.set_callback(lambda t, m: got.append((t, m)))
sub.connect()
sub.subscribe(b"nodes/+/temp", 1)
pub = MQTTClient("pub", "gw", keepalive=60, connect_link=link)
pub.connect()
pub.publish(b"nodes/n1/temp", b"21.5", qos=1)
for _ in range(50):
    if got:
        break
    sub.check_msg()
mods = [m for m in sys.modules if m.startswith("umqtt3")]
outside = [m for m in mods if not getattr(sys.modules[m], "__file__", "").startswith("/rom/")]
print("got", got, "from /rom:", len(mods) - len(outside), "outside:", outside)
'''


@needs_mpremote
@needs_wasm
def test_romfs_image_mounts_and_the_client_publishes_from_it(tmp_path):
    script = tmp_path / "run" / "rom_client.py"
    script.parent.mkdir()
    script.write_text(ROM_CLIENT)

    def run(role):
        image = str(tmp_path / ("%s.romfs" % role))
        p = cli("deploy.py", "--board", "esp32", "--role", role, "--romfs-out", image,
                "--build", str(tmp_path / "b"))
        assert p.returncode == 0, p.stderr
        return subprocess.run([NODE, os.path.join(ROOT, "tests", "mp", "run.mjs"), "--no-shared",
                               "--mount", image + "=/img/image.romfs", str(script)],
                              capture_output=True, text=True, timeout=120)
    p = run("gateway")
    assert p.returncode == 0, p.stderr
    assert "got [(b'nodes/n1/temp', b'21.5')]" in p.stdout and "outside: []" in p.stdout, p.stdout
    p = run("node")  # a node's image has no broker: nothing else supplies one
    assert p.returncode != 0 and "umqtt3.broker" in p.stderr, p.stderr


@needs_mpremote
def test_romfs_deploy_passes_mpremotes_error_on_in_one_line(tmp_path):
    # a board mpremote cannot reach (nothing listens there): its own error,
    # one line, its exit status, nothing copied after it
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    p = cli("deploy.py", "--board", "esp32", "--romfs", "--port", "socket://127.0.0.1:%d" % port,
            "--build", str(tmp_path / "b"))
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 1 and len(lines) == 1, p.stderr
    assert lines[0].startswith("deploy: mpremote: failed to access socket://"), lines
    assert "Traceback" not in p.stdout + p.stderr


@pytest.fixture
def wasm_board():
    """start(*options) -> port: the WebAssembly MicroPython served as a board
    for mpremote on 127.0.0.1 (tests/mp/board.mjs), stopped after the test."""
    started = []

    def start(*options):
        port = procs.free_port()
        started.append(procs.start([NODE, os.path.join(ROOT, "tests", "mp", "board.mjs"),
                                    "--port", str(port)] + list(options), port,
                                   stdout=subprocess.DEVNULL))
        return port
    yield start
    for p in started:
        procs.stop(p)


def board_files(port):
    p = subprocess.run([PY, "-m", "mpremote", "connect", "socket://127.0.0.1:%d" % port, "exec",
                        "import os; print(sorted(os.listdir('/')))"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


@needs_mpremote
@needs_wasm
def test_romfs_deploy_to_a_board_without_romfs(wasm_board, tmp_path):
    # a real MicroPython behind mpremote, its vfs without rom_ioctl as in a
    # firmware built without ROMFS: mpremote's own error, in one line, and
    # nothing copied
    port = wasm_board("--no-romfs")
    url = "socket://127.0.0.1:%d" % port
    assert "'rom'" not in board_files(port)
    p = cli("deploy.py", "--board", "esp32", "--romfs", "--port", url,
            "--build", str(tmp_path / "b"))
    assert p.returncode == 1, p
    assert p.stderr.strip().splitlines() == [
        "deploy: mpremote: ROMFS is not enabled on this device"], p.stderr
    assert "Image size is " in p.stdout  # mpremote's own output, passed on
    files = board_files(port)
    assert "main.py" not in files and "board.mpy" not in files and "config.json" not in files
    # this port's own ROMFS partition is empty: mpremote fails in a traceback
    # of its own, of which only the last line is shown
    port = wasm_board()
    p = cli("deploy.py", "--board", "esp32", "--romfs", "--port",
            "socket://127.0.0.1:%d" % port, "--build", str(tmp_path / "b"))
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 1 and len(lines) == 1 and lines[0].startswith("deploy: mpremote: "), \
        p.stderr
    assert "Traceback" not in p.stdout + p.stderr and "main.py" not in board_files(port)


def test_run_holds_back_the_last_line_as_the_error(capsys):
    prog = ("import sys\nprint('Image size is 4096 bytes')\nprint('Preparing at offset 0')\n"
            "print('ROMFS image is too big for the target partition')\nsys.exit(%d)")
    with pytest.raises(devices.Usage) as e:
        devices.run([PY, "-c", prog % 1], last_line_is_error=True)
    assert e.value.code == 1
    assert e.value.msg == "%s: ROMFS image is too big for the target partition" % (
        os.path.basename(PY)), e.value.msg
    out = capsys.readouterr().out
    assert out.endswith("'\nImage size is 4096 bytes\nPreparing at offset 0\n"), out
    devices.run([PY, "-c", prog % 0], last_line_is_error=True)  # success: every line shown
    assert "too big for the target partition" in capsys.readouterr().out
    # the command's own traceback: held, and only its last line shown
    with pytest.raises(devices.Usage) as e:
        devices.run([PY, "-c", "print('Image size is 4096 bytes')\n1 // 0"],
                    last_line_is_error=True)
    assert e.value.msg.endswith(": ZeroDivisionError: integer division or modulo by zero")
    out = capsys.readouterr().out
    assert out.endswith("\nImage size is 4096 bytes\n") and "Traceback" not in out, out


@pytest.mark.parametrize("argv,msg", [
    (["--romfs-out", "x.bin"], "name it NAME.romfs or NAME.img"),
    (["--romfs", "--frozen", "--dry-run"], "--frozen and --romfs exclude each other"),
    (["--romfs-out", "/etc/hostname/x.romfs"], "is not a directory"),
])
def test_romfs_options_refused_in_one_line(argv, msg):
    p = cli("deploy.py", "--board", "esp32", *argv)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and msg in lines[0], p.stderr


# ------------------------------------------------------------------ esptool and UF2
def test_esptool_commands_exact():
    esp = [PY, "-m", "esptool"]
    for board, offset in (("esp32", "0x1000"), ("esp32s3", "0x0"), ("esp32c3", "0x0")):
        b = devices.device_board(board)
        assert flash.esptool_commands(b, "/dev/ttyUSB0", "fw.bin") == [
            esp + ["--chip", board, "--port", "/dev/ttyUSB0", "erase-flash"],
            esp + ["--chip", board, "--port", "/dev/ttyUSB0", "--baud", "460800",
                   "write-flash", offset, "fw.bin"]]
    assert flash.esptool_commands(devices.device_board("esp32"), "P", "f.bin", 921600,
                                  erase=False) == [
        esp + ["--chip", "esp32", "--port", "P", "--baud", "921600", "write-flash", "0x1000",
               "f.bin"]]


@pytest.mark.skipif(not devices.importlib.util.find_spec("esptool"), reason="no esptool")
def test_esptool_accepts_the_commands(tmp_path):
    # the real esptool parses each line and gets as far as opening the
    # port, which is a closed loopback socket here: a port error, not usage
    fw = tmp_path / "fw.bin"
    fw.write_bytes(b"\xe9" + bytes(255))
    port = "socket://127.0.0.1:%d" % procs.free_port()
    for board in ("esp32", "esp32s3", "esp32c3"):
        for cmd in flash.esptool_commands(devices.device_board(board), port, str(fw)):
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
            text = p.stdout + p.stderr
            assert p.returncode != 0 and "Could not open " + port in text, text
            assert "Usage:" not in text
    # the same check sees a line esptool does not accept
    bad = flash.esptool_commands(devices.device_board("esp32"), port, str(fw))[1]
    bad.remove("0x1000")
    p = subprocess.run(bad, capture_output=True, text=True, timeout=60)
    assert "Could not open" not in p.stdout + p.stderr


def test_uf2_copy_to_the_rp2_drive(tmp_path):
    drive = tmp_path / "RPI-RP2"
    drive.mkdir()
    mounts = tmp_path / "mounts"
    mounts.write_text("/dev/sda1 / ext4 rw 0 0\n/dev/sdb1 %s vfat rw 0 0\n"
                      "/dev/sdc1 /media/x/My\\040Disk vfat rw 0 0\n" % drive)
    assert flash.rp2_drives(mounts.read_text()) == [str(drive)]
    # mounted but not a UF2 bootloader drive (no INFO_UF2.TXT): refused
    assert "no RPI-RP2 drive mounted" in usage_error(flash.find_drive, None, str(mounts))
    assert "not a mounted RPI-RP2 drive" in usage_error(flash.find_drive, str(drive))
    (drive / "INFO_UF2.TXT").write_text("UF2 Bootloader v3.0\nBoard-ID: RPI-RP2\n")
    assert flash.find_drive(None, str(mounts)) == str(drive)
    assert flash.find_drive(str(drive)) == str(drive)
    assert flash.uf2_commands("RPI_PICO_W.uf2", str(drive)) == [
        ["cp", "RPI_PICO_W.uf2", str(drive) + "/"], ["sync"]]
    assert "no RPI-RP2 drive" in usage_error(flash.find_drive, None, str(tmp_path / "none"))


RP2040 = 0xE48BFF56  # the UF2 family id of MicroPython's Pico W images


def uf2_image(family=RP2040, flags=0x2000, start1=0x9E5D5157, end=0x0AB16F30, blocks=2):
    """A UF2 file as picotool writes one: 512-byte blocks, a 32-byte header
    (two start magics, flags, address, payload size, block number, count,
    family id when flags has 0x2000), 476 bytes of data, the end magic."""
    out = b""
    for n in range(blocks):
        out += struct.pack("<8I", 0x0A324655, start1, flags, 0x10000000 + 256 * n, 256, n,
                           blocks, family) + bytes(476) + struct.pack("<I", end)
    return out


def esp_image(chip_id=0, magic=0xE9):
    """The start of an ESP-IDF image: magic, segments, SPI mode and speed,
    entry address, then the extended header with the chip id at byte 12."""
    return struct.pack("<BBBBIB3sH", magic, 3, 2, 0x20, 0x40080000, 0xEE, bytes(3),
                       chip_id) + bytes(242)


def test_uf2_flash_copies_the_image(tmp_path, capsys):
    drive = tmp_path / "RPI-RP2"
    drive.mkdir()
    (drive / "INFO_UF2.TXT").write_text("Board-ID: RPI-RP2\n")
    fw = tmp_path / "RPI_PICO_W.uf2"
    fw.write_bytes(uf2_image())
    assert flash.main(["--board", "picow", "--firmware", str(fw), "--drive", str(drive)]) == 0
    assert (drive / fw.name).read_bytes() == fw.read_bytes()
    assert "$ cp %s %s/" % (fw, drive) in capsys.readouterr().out


def test_flash_refuses_a_file_that_is_no_image_for_the_board(tmp_path):
    # an ESP32 image renamed .uf2: the RP2040 bootloader ignores it, so the
    # board would stay as it was while flash said "flashed"; nothing is copied
    drive = tmp_path / "RPI-RP2"
    drive.mkdir()
    (drive / "INFO_UF2.TXT").write_text("UF2 Bootloader v3.0\nBoard-ID: RPI-RP2\n")
    fw = tmp_path / "ESP32_GENERIC.uf2"
    fw.write_bytes(esp_image() + os.urandom(4096))
    p = cli("flash.py", "--board", "picow", "--firmware", str(fw), "--drive", str(drive))
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p
    assert lines[0] == "flash: %s is not a UF2 image (no UF2 magic in its first block)" % fw
    assert "flashed" not in p.stdout
    assert sorted(os.listdir(drive)) == ["INFO_UF2.TXT"]


def test_firmware_image_checks(tmp_path):
    picow = devices.device_board("picow")

    def refused(data, board=picow, name="fw.uf2"):
        f = tmp_path / name
        f.write_bytes(data)
        return usage_error(flash.check_firmware, str(f), board)

    good = uf2_image()
    assert "no UF2 magic" in refused(b"")
    assert "no UF2 magic" in refused(good[:511])  # not even one whole block
    assert "no UF2 magic" in refused(good[:4] + b"\0" + good[5:])  # first start magic
    assert "no UF2 magic" in refused(uf2_image(start1=0))
    assert "no UF2 magic" in refused(uf2_image(end=0))
    # a UF2 image for another chip: its bootloader would ignore it too
    msg = refused(uf2_image(family=0x1C5F21B0))
    assert msg.endswith("is a UF2 image for family 0x1c5f21b0, not picow's (rp2040, "
                        "family 0xe48bff56)"), msg
    assert "no family id" in refused(uf2_image(flags=0))
    f = tmp_path / "RPI_PICO_W.uf2"
    f.write_bytes(good)
    assert flash.check_firmware(str(f), picow) == str(f)
    # ESP32s: the ESP-IDF image magic, and the chip the image was built for
    for board, chip_id in (("esp32", 0), ("esp32s3", 9), ("esp32c3", 5)):
        b = devices.device_board(board)
        f = tmp_path / ("%s.bin" % board)
        f.write_bytes(esp_image(chip_id))
        assert flash.check_firmware(str(f), b) == str(f)
        assert "not an ESP image (its first byte is 0x55, not 0xe9)" in refused(
            good, b, "x.bin")
        assert "not an ESP image" in refused(b"", b, "x.bin")
    msg = refused(esp_image(9), devices.device_board("esp32"), "s3.bin")
    assert msg.endswith("s3.bin is an image for chip id 9 (esp32s3), not esp32's (chip id 0)"), msg


# ------------------------------------------------------------------ errors
def test_port_checks(tmp_path):
    assert devices.check_port("/dev/null") == "/dev/null"  # a character device
    assert devices.check_port("socket://127.0.0.1:2217") == "socket://127.0.0.1:2217"
    assert "no such port /dev/ttyUSB97" in usage_error(devices.check_port, "/dev/ttyUSB97")
    f = tmp_path / "ttyUSB0"
    f.write_text("")
    assert "not a serial port" in usage_error(devices.check_port, str(f))
    # no PORT: the only serial port plugged in, else a clear message
    assert devices.check_port("", ["/dev/ttyACM0"]) == "/dev/ttyACM0"
    assert "no serial port found" in usage_error(devices.check_port, "", [])
    msg = usage_error(devices.check_port, "", ["/dev/ttyUSB0", "/dev/ttyUSB1"])
    assert "several serial ports" in msg and "/dev/ttyUSB1" in msg


def test_firmware_file_checks(tmp_path):
    esp32 = devices.device_board("esp32")
    picow = devices.device_board("picow")
    assert "no firmware file given" in usage_error(flash.check_firmware, "", esp32)
    assert "no such firmware file" in usage_error(flash.check_firmware,
                                                  str(tmp_path / "x.bin"), esp32)
    uf2 = tmp_path / "x.uf2"
    uf2.write_bytes(uf2_image())
    assert "esp32 takes a .bin image" in usage_error(flash.check_firmware, str(uf2), esp32)
    assert flash.check_firmware(str(uf2), picow) == str(uf2)


MODULES = {"deploy.py": "tools.device.deploy", "flash.py": "tools.device.flash",
           "selftest.py": "tools.device.selftest", "simulate.py": "tools.desktop.simulate"}


def cli(tool, *args):
    return subprocess.run([PY, "-m", MODULES[tool]] + list(args), capture_output=True,
                          text=True, timeout=120, cwd=ROOT, env=procs.python_env())


@pytest.mark.parametrize("tool,args,msg", [
    ("deploy.py", ["--board", "esp32", "--port", "/dev/ttyUSB97"], "no such port /dev/ttyUSB97"),
    ("deploy.py", ["--board", "esp32", "--port", "/etc/hostname"], "is not a serial port"),
    ("deploy.py", ["--board", "esp3", "--port", "/dev/null"], "unknown board 'esp3'"),
    ("deploy.py", ["--board", "esp32", "--role", "relay", "--port", "/dev/null"],
     "unknown role 'relay'"),
    ("deploy.py", ["--board", "esp32", "--port", "/dev/null", "--secrets", "/nonexistent.json"],
     "no such file: /nonexistent.json"),
    ("flash.py", ["--board", "esp32", "--port", "/dev/null"], "no firmware file given"),
    ("flash.py", ["--board", "esp32", "--port", "/dev/null", "--firmware", "/nonexistent.bin"],
     "no such firmware file: /nonexistent.bin"),
    ("flash.py", ["--board", "picow", "--firmware", "README.md"], "takes a .uf2 image"),
    ("selftest.py", ["--board", "esp32", "--port", "/dev/ttyACM97"], "no such port"),
    ("selftest.py", ["--wasm", "--script", "firmware/nonexistent.py"], "no such self-test script"),
])
def test_cli_errors_are_one_line(tool, args, msg):
    p = cli(tool, *args)
    assert p.returncode == 2, p
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and msg in lines[0] and "Traceback" not in p.stderr, p.stderr


def test_build_directory_of_the_user_is_never_emptied(tmp_path):
    mine = tmp_path / "mywork"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    p = cli("deploy.py", "--board", "esp32", "--build", str(mine), "--dry-run")
    assert p.returncode == 2 and "not a staging directory made by deploy" in p.stderr, p
    assert (mine / "notes.txt").read_text() == "keep"
    # a directory deploy staged before is emptied and staged again
    out = tmp_path / "stage"
    for _ in range(2):
        p = cli("deploy.py", "--board", "esp32", "--build", str(out), "--dry-run")
        assert p.returncode == 0, p.stderr
    assert (out / deploy.MARKER).exists() and (out / "main.py").exists()


def test_a_failing_command_is_named_by_its_module():
    with pytest.raises(devices.Usage) as e:
        devices.run([PY, "-m", "json.tool", "/nonexistent.json"])
    assert e.value.msg == "json.tool exited with status 2", e.value.msg


def test_make_target_errors():
    if not shutil.which("make"):
        pytest.skip("no make")
    p = subprocess.run(["make", "-s", "deploy", "BOARD=esp32", "PORT=/dev/ttyUSB97"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "deploy: no such port /dev/ttyUSB97" in p.stderr
    p = subprocess.run(["make", "-s", "flash", "BOARD=esp32"], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode != 0 and "flash: no firmware file given" in p.stderr


def test_dry_run_prints_the_plan_without_a_device(tmp_path):
    p = cli("deploy.py", "--board", "esp32c3", "--role", "gateway", "--build",
            str(tmp_path / "b"), "--dry-run")
    assert p.returncode == 0, p.stderr
    assert "mpy-cross -march=rv32imc" in p.stdout and ":gateway.mpy" in p.stdout
    assert "-m mpremote connect '<PORT>' exec" in p.stdout
    assert "+ cp %s :main.py" % (tmp_path / "b" / "main.py") in p.stdout
    # no --role: the config's
    cfg = tmp_path / "gw.json"
    cfg.write_text('{"role": "gateway", "wifi_mode": "ap"}')
    p = cli("deploy.py", "--board", "picow", "--config", str(cfg), "--build", str(tmp_path / "c"),
            "--dry-run")
    assert p.returncode == 0 and "picow, role gateway:" in p.stdout and ":gateway.mpy" in p.stdout
    p = cli("flash.py", "--board", "esp32s3", "--firmware", os.path.join(ROOT, "Makefile"),
            "--dry-run")
    assert p.returncode == 2 and "takes a .bin image" in p.stderr


# ------------------------------------------------------------------ self-test
def test_selftest_commands():
    assert selftest.device_command("/dev/ttyUSB0") == [
        PY, "-m", "mpremote", "connect", "/dev/ttyUSB0", "mount", "tests/portable", "run",
        "firmware/selftest.py"]
    assert selftest.wasm_command() == [
        "node", "tests/mp/run.mjs", "--heap", "2m", "firmware/selftest.py"]


def test_selftest_takes_the_heap_sizes_run_mjs_takes():
    for heap in ("512k", "4M", "1048576"):
        p = cli("selftest.py", "--wasm", "--heap", heap, "--dry-run")
        assert p.returncode == 0 and "run.mjs --heap %s firmware/selftest.py" % heap in p.stdout, p


# ------------------------------------------------------------------ manifest
def test_manifest_freezes_the_library_and_the_apps():
    calls = []

    def package(name, files=None, base_path=".", opt=None):
        calls.append(("package", name, files, base_path))

    def module(path, base_path=".", opt=None):
        calls.append(("module", path, base_path))

    g = {"include": lambda p, **kw: calls.append(("include", p)), "package": package,
         "module": module}
    cwd = os.getcwd()
    os.chdir(os.path.join(ROOT, "firmware"))  # as MicroPython's build runs it
    try:
        exec(open("manifest.py").read(), g)
    finally:
        os.chdir(cwd)
    # the board's manifest, which includes the port's (test_packaging: the
    # port's for a board without one)
    assert calls[0] == ("include", "$(BOARD_DIR)/manifest.py")
    pkg = [c for c in calls if c[0] == "package"]
    assert len(pkg) == 1 and pkg[0][1] == "umqtt3" and pkg[0][3] == "../lib"
    # the whole library but what a device never imports (the same list deploy uses)
    assert pkg[0][2] == sorted(set(lib_py_files()) - set(host_only_files()))
    assert "client.py" in pkg[0][2] and "broker.py" in pkg[0][2]
    mods = [c[1] for c in calls if c[0] == "module"]
    assert sorted(mods) == sorted(a + ".py" for a in deploy.ROLES["gateway"])
    for m in mods:
        assert os.path.isfile(os.path.join(ROOT, "firmware", m))


# ------------------------------------------------------------------ simulate
def wait(cond, timeout=15):
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)


@pytest.fixture
def our_broker(tmp_path):
    port = procs.free_port()
    b = sim.start_broker("umqtt3", port, str(tmp_path))
    yield port
    procs.stop(b, 5)


def test_simulate_two_nodes_against_our_broker(our_broker):
    col = Collector(our_broker, "devsim")
    p = cli("simulate.py", "--nodes", "2", "--seconds", "2", "--period", "0.1", "--host",
            "127.0.0.1", "--port", str(our_broker), "--prefix", "devsim")
    assert p.returncode == 0, p.stderr
    accepted = {}
    for line in p.stdout.splitlines():
        if line.startswith("sim") and "readings accepted" in line:
            name, rest = line.split(": ", 1)
            accepted[name] = int(rest.split()[0])
    assert sorted(accepted) == ["sim1", "sim2"] and min(accepted.values()) > 0
    for name in ("sim1", "sim2"):
        # QoS 1 and a drain before the clean stop: every accepted reading arrives
        wait(lambda: len([1 for m, _ in col.of(name) if m != "status"]) >= accepted[name])
        wait(lambda: [v for m, v in col.of(name) if m == "status"][-1:] == ["offline"])
    col.close()
    for name in ("sim1", "sim2"):
        got = col.of(name)
        assert [v for m, v in got if m == "status"] == ["online", "offline"]
        rs = [json.loads(v) for m, v in got if m != "status"]
        assert set(m for m, _ in got) == {"status", "temp", "vbat", "uptime"}
        assert sorted(r["seq"] for r in rs) == list(range(1, accepted[name] + 1))
        assert len(set(r["boot"] for r in rs)) == 1


def test_simulate_starts_a_broker_or_says_there_is_none():
    p = cli("simulate.py", "--nodes", "2", "--seconds", "1", "--period", "0.1", "--start-broker")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("broker: umqtt3 on 127.0.0.1:")
    assert len([ln for ln in p.stdout.splitlines() if "readings accepted, 0 dropped" in ln]) == 2
    closed = procs.free_port()
    p = cli("simulate.py", "--port", str(closed), "--seconds", "1")
    assert p.returncode == 2
    assert p.stderr.strip() == ("simulate: no broker at 127.0.0.1:%d: start one, or pass "
                                "--start-broker" % closed)
