"""tools/measure/sizes.py: its ROMFS mode (--romfs) runs, and reads what it
should: every configuration and peer measured from the filesystem's .mpy
files and from a ROMFS image, the image costing less heap (bytecode run in
place); the stand-in streams of mqtt_async's probe read without polling.
Figures themselves are the tool's output, not asserted here."""
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WASM = os.path.join(ROOT, "node_modules", "@micropython", "micropython-webassembly-pyscript",
                    "micropython.mjs")
needs_vm = pytest.mark.skipif(
    not (shutil.which("node") and os.path.exists(WASM)), reason="no WebAssembly MicroPython")
needs_mpremote = pytest.mark.skipif(
    __import__("importlib").util.find_spec("mpremote") is None, reason="no mpremote")


def sizes(*argv):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "lib"),
                                                      os.path.join(ROOT, "pipeline")]))
    return subprocess.run([sys.executable, "-m", "tools.measure.sizes"] + list(argv),
                          capture_output=True, text=True, timeout=900, cwd=ROOT, env=env)


def table(out, first_header):
    """The rows of the text table whose header starts with first_header:
    [cells], split on two or more spaces."""
    lines = out.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith(first_header))
    rows = []
    for ln in lines[i + 2:]:
        if not ln.strip():
            break
        rows.append(re.split(r"\s{2,}", ln.strip()))
    return re.split(r"\s{2,}", lines[i].strip()), rows


def num(cell):
    return int(cell.replace(",", ""))


def test_romfs_needs_the_ram_probe():
    p = sizes("--romfs", "--no-ram")
    assert p.returncode == 2 and p.stderr == "sizes: --romfs measures RAM: drop --no-ram\n", \
        p.stderr


@needs_vm
@needs_mpremote
def test_steps_from_a_romfs_image():
    p = sizes("--steps", "--romfs", "--no-source-lines")
    assert p.returncode == 0, p.stderr
    _, mpy = table(p.stdout, "heap added (from .mpy)")
    head, rom = table(p.stdout, "heap added (from ROMFS)")
    assert [r[0] for r in rom] == [r[0] for r in mpy] and len(rom) == 4
    for a, b in zip(mpy, rom):
        # total: every module's bytecode stays in the image
        assert 0 < num(b[-1]) < num(a[-1]), (a, b)
        assert num(b[head.index("client")]) < num(a[head.index("client")])


@pytest.mark.slow
@needs_vm
@needs_mpremote
def test_romfs_columns_beside_the_filesystem_ones():
    p = sizes("--romfs", "--no-source-lines")
    assert p.returncode == 0, p.stderr
    head, rows = table(p.stdout, "module ")
    assert head[-3:] == ["import RAM from .py", "import RAM from .mpy", "import RAM from ROMFS"]
    by = {r[0]: r for r in rows}
    for name in ("umqtt3.client", "client set", "all modules"):
        assert 0 < num(by[name][-1]) < num(by[name][-2]), by[name]
    assert by["umqtt3.compat.cpython"][-1] == "CPython only"
    head, rows = table(p.stdout, "connected client (from .mpy)")
    assert head[2:] == ["import RAM", "heap in use", "import RAM (ROMFS)", "heap in use (ROMFS)",
                        "names/room", "names at cost"]
    labels = [r[0] for r in rows]
    assert labels[:4] == ["umqtt3, QoS 0/1/2, MemoryStore (default)", "umqtt3, QoS 2, FileStore",
                          "umqtt3, MQTT 5, MemoryStore",
                          "umqtt3, QoS 0/1/2, no store (store=False)"]
    for r in rows:
        # (mqtt_async, when it is there: connected through stand-in streams)
        if r[0].startswith(("umqtt3", "umqtt.simple", "mqtt_async")):
            imp, run, rimp, rrun = (num(c) for c in r[2:6])
            assert 0 < rimp < imp and rimp <= rrun < run, r
            # the interpreter's name table: in use, of the room its blocks
            # of 20, 40, 80, ... names give
            used, room = (int(x) for x in r[6].split("/"))
            assert 0 < used <= room and room in (20, 60, 140, 300, 620, 1260), r
            # the same reading with the names at 7 bytes each instead of
            # the blocks they fell into: within a block of the raw one
            assert abs(num(r[7]) - run) < 2600, r
    if any(r[0].startswith("umqtt.simple") for r in rows):  # the peer, when it is there
        _, cmp_rows = table(p.stdout, "client set vs umqtt.simple")
        assert cmp_rows[-1][0] == "import RAM from ROMFS"


# The stand-in asyncio streams mqtt_async's probe connects through: a read
# with nothing to read waits for the next write. A read that polled the
# scripted broker each millisecond left a scratch buffer and wake-ups in the
# heap at the reading as timing fell, so mqtt_async's connected figure moved
# between runs of the same command (12,976-13,296 B).
STREAMS_SCRIPT = """\
import asyncio, sys
sys.path[:] = ["/stubs", "/probe"]
import fakepeer, streams
peer = fakepeer.Peer(4)
fakepeer.PEER = peer
empty = [0]
read = peer.read
def counted(n):
    got = read(n)
    if got is None:
        empty[0] += 1
    return got
peer.read = counted

async def write_later(w):
    await asyncio.sleep_ms(30)
    w.write(b"\\x10\\x0c\\x00\\x04MQTT\\x04\\x02\\x00\\x3c\\x00\\x00")  # CONNECT, empty id

async def main():
    r, w = await streams.open_connection("peer", 1883)
    asyncio.create_task(write_later(w))
    got = await r.read(128)
    print("GOT", bytes(got).hex(), "EMPTY", empty[0])

mp_await = main()
"""


@needs_vm
def test_stand_in_stream_waits_for_a_write_instead_of_polling(tmp_path):
    from tools.measure import sizes as tool
    stubs, probe = tmp_path / "stubs", tmp_path / "probe"
    stubs.mkdir()
    probe.mkdir()
    for name, text in tool.STUBS.items():
        (stubs / name).write_text(text)
    (probe / "fakepeer.py").write_text(tool.FAKE_PEER)
    script = tmp_path / "run" / "streams_wait.py"
    script.parent.mkdir()
    script.write_text(STREAMS_SCRIPT)
    p = subprocess.run(["node", os.path.join(ROOT, "tests", "mp", "run.mjs"), "--no-shared",
                        "--mount", "%s=/stubs" % stubs, "--mount", "%s=/probe" % probe, str(script)],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr
    # the CONNACK, read once it was there; no read found nothing to read
    assert p.stdout.split() == ["GOT", "20020000", "EMPTY", "0"], p.stdout
