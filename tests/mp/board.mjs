#!/usr/bin/env node
// The WebAssembly MicroPython served as a board on a TCP port, for mpremote:
// `mpremote connect socket://127.0.0.1:PORT ...` talks to its raw REPL as to
// a board's serial port, so the device tools' mpremote commands run for real
// without a device (tests/test_devtools.py).
//
// Usage: node tests/mp/board.mjs --port N [--no-romfs]
//   --port N     listen on 127.0.0.1:N (one connection at a time)
//   --no-romfs   `vfs` without rom_ioctl, as in a firmware built without
//                MICROPY_VFS_ROM (this port has it, with an empty partition)
//
// What differs from a board: a soft reset (Ctrl-D at the raw REPL's empty
// prompt) prints "soft reboot" and starts the REPL over, but the VM, its
// modules and its in-memory files stay (this port cannot reset itself); the
// raw-paste mode is refused ("R\x00"), so mpremote uses the plain raw REPL;
// machine.reset() does not exist.

import net from "node:net";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
const PKG = path.join(
  REPO, "node_modules", "@micropython", "micropython-webassembly-pyscript", "micropython.mjs");

const argv = process.argv.slice(2);
let port = 0;
let romfs = true;
for (let i = 0; i < argv.length; i++) {
  if (argv[i] === "--port") port = parseInt(argv[++i], 10);
  else if (argv[i] === "--no-romfs") romfs = false;
  else {
    process.stderr.write(`board.mjs: unknown option ${argv[i]}\n`);
    process.exit(2);
  }
}
if (!(port > 0 && port < 65536)) {
  process.stderr.write("usage: node tests/mp/board.mjs --port N [--no-romfs]\n");
  process.exit(2);
}

const { loadMicroPython } = await import(pathToFileURL(PKG).href);
let conn = null;
const mp = await loadMicroPython({
  heapsize: 2 * 1024 * 1024, linebuffer: false,
  stdout: (d) => { if (conn && conn.writable) conn.write(Buffer.from(d)); },
});
if (!romfs) {
  // an entry in sys.modules is found before the built-in module
  mp.runPython([
    "import sys, vfs",
    "class _Vfs:",
    "    pass",
    "_m = _Vfs()",
    "for _k in dir(vfs):",
    "    if _k != 'rom_ioctl' and not _k.startswith('__'):",
    "        setattr(_m, _k, getattr(vfs, _k))",
    "sys.modules['vfs'] = _m",
    "del _Vfs, _m, _k",
  ].join("\n"));
}
mp.replInit();

const RAW_PASTE = [0x05, 0x41, 0x01]; // Ctrl-E A Ctrl-A: "may I use raw paste?"
const server = net.createServer((s) => {
  conn = s;
  let held = Buffer.alloc(0);
  s.on("data", (data) => {
    const buf = Buffer.concat([held, data]);
    held = Buffer.alloc(0);
    for (let i = 0; i < buf.length; i++) {
      if (buf[i] === RAW_PASTE[0]) {
        if (buf.length - i < RAW_PASTE.length) { held = buf.subarray(i); break; }
        if (buf[i + 1] === RAW_PASTE[1] && buf[i + 2] === RAW_PASTE[2]) {
          s.write("R\x00"); // no: the plain raw REPL
          i += RAW_PASTE.length - 1;
          continue;
        }
      }
      if (mp.replProcessChar(buf[i])) { // soft reset asked for
        s.write("soft reboot\r\n");
        mp.replInit();
      }
    }
  });
  s.on("error", () => {});
  s.on("close", () => { if (conn === s) conn = null; });
});
server.listen(port, "127.0.0.1", () => process.stdout.write(`PORT ${port}\n`));
for (const sig of ["SIGTERM", "SIGINT"]) process.on(sig, () => process.exit(0));
