#!/usr/bin/env node
// Run a Python file under MicroPython compiled to WebAssembly (npm package
// @micropython/micropython-webassembly-pyscript), so the library and the
// portable tests are exercised by a real MicroPython VM on any machine with Node.
//
// Usage: node tests/mp/run.mjs [options] script.py [args...]
//
// Options (only before the script path; everything after it goes to sys.argv):
//   --heap N          MicroPython's first GC heap block, bytes with optional k/m suffix
//                     (default 2m); this port grows the heap past it, so it is no limit
//   --pystack N       Python stack, in words (default: the package's own, 2048)
//   --tests DIR       host directory to put at /tests (default: tests/portable)
//   --mount HOST=DEST copy a host file or directory into the VM at DEST (repeatable)
//   --no-shared       do not copy ../shared/vectors and ../shared/seeds
//
// Filesystem inside the VM (Emscripten's in-memory FS; files are copied in at
// start, writes never reach the host):
//   /lib             <- repo lib/            (so `import umqtt3` works)
//   /tests           <- repo tests/portable/ (or --tests DIR)
//   /shared/vectors  <- ../shared/vectors    (if present beside the repo)
//   /shared/seeds    <- ../shared/seeds      (if present beside the repo)
//   /run             <- the script and the other .py files next to it
//
// sys.path is ['/run', '/lib', '/tests', '', '.frozen'], sys.argv is
// ['/run/<script>', args...], __name__ is '__main__', cwd is '/'.
//
// Exit status: the script's SystemExit code, 1 if it raised anything else
// (the MicroPython traceback is printed to stderr), 2 for a usage or VM error.
//
// The package's own CLI (node micropython.mjs script.py) is not used because it
// exits 0 when the script raises, and reads stdin instead of the script
// whenever stdin is not a terminal (as under CI).
//
// Garbage collection: gc.collect() only marks a collection as due; it runs once
// control is back in JavaScript. A figure read from gc.mem_alloc() needs an
// `await asyncio.sleep(0)` after the collect (tools/measure/sizes.py, support.collect).
//
// Async: the WebAssembly port has no asyncio.run(); its event loop is driven by
// JavaScript. A script that needs to run a coroutine to completion stores it in
// the global `mp_await` and this runner awaits it after the script returns
// (tests/mp/testrunner.py does this for `async def test_*`).

import fs from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const REPO = path.resolve(HERE, "..", "..");
const SHARED = path.resolve(REPO, "..", "shared");
const PKG = path.join(
  REPO, "node_modules", "@micropython", "micropython-webassembly-pyscript", "micropython.mjs");

function usage(msg) {
  if (msg) process.stderr.write(`run.mjs: ${msg}\n`);
  process.stderr.write("usage: node tests/mp/run.mjs [--heap N] [--pystack N] [--tests DIR] " +
    "[--mount HOST=DEST] [--no-shared] script.py [args...]\n");
  process.exit(2);
}

function parseSize(text) {
  const m = /^(\d+)([kKmM]?)$/.exec(text || "");
  if (!m) usage(`bad size: ${text}`);
  const mult = { "": 1, k: 1024, m: 1024 * 1024 }[m[2].toLowerCase()];
  return parseInt(m[1], 10) * mult;
}

// --- command line -----------------------------------------------------------
const opts = { heap: 2 * 1024 * 1024, pystack: undefined, tests: path.join(REPO, "tests", "portable"),
  mounts: [], shared: true };
const argv = process.argv.slice(2);
let i = 0;
for (; i < argv.length && argv[i].startsWith("--"); i++) {
  const a = argv[i];
  if (a === "--heap") opts.heap = parseSize(argv[++i]);
  else if (a === "--pystack") opts.pystack = parseSize(argv[++i]);
  else if (a === "--tests") opts.tests = path.resolve(argv[++i] || usage("--tests needs a directory"));
  else if (a === "--mount") {
    const spec = argv[++i] || usage("--mount needs HOST=DEST");
    const eq = spec.indexOf("=");
    if (eq <= 0 || !spec.slice(eq + 1).startsWith("/")) usage(`bad --mount ${spec} (want HOST=/dest)`);
    opts.mounts.push([path.resolve(spec.slice(0, eq)), spec.slice(eq + 1)]);
  } else if (a === "--no-shared") opts.shared = false;
  else if (a === "--help" || a === "-h") usage();
  else usage(`unknown option ${a}`);
}
const script = argv[i];
if (!script) usage("no script given");
const scriptArgs = argv.slice(i + 1);
if (!fs.existsSync(script) || !fs.statSync(script).isFile()) usage(`no such file: ${script}`);
if (!fs.existsSync(PKG)) {
  process.stderr.write(`run.mjs: ${PKG} is missing; run 'npm ci' (or 'make setup') first\n`);
  process.exit(2);
}

// --- output -----------------------------------------------------------------
// MicroPython hands over one byte at a time; collect them and write whole lines
// (writes to files and pipes are synchronous in Node on Linux, so nothing is
// lost when we exit right after the last flush).
function byteSink(stream) {
  let buf = Buffer.alloc(8192);
  let n = 0;
  const flush = () => { if (n) { stream.write(Buffer.from(buf.subarray(0, n))); n = 0; } };
  const put = (bytes) => {
    for (const b of bytes) {
      if (n === buf.length) flush();
      buf[n++] = b;
      if (b === 10) flush();
    }
  };
  return { put, flush };
}
const out = byteSink(process.stdout);
const err = byteSink(process.stderr);
function finish(code) {
  out.flush();
  err.flush();
  process.exit(code);
}

// --- VM and filesystem ------------------------------------------------------
const { loadMicroPython } = await import(pathToFileURL(PKG).href);
const mpOptions = { heapsize: opts.heap, linebuffer: false, stdout: out.put, stderr: err.put };
if (opts.pystack !== undefined) mpOptions.pystack = opts.pystack;
const mp = await loadMicroPython(mpOptions);
const FS = mp.FS;

function mkdirs(dest) {
  let cur = "";
  for (const part of dest.split("/").filter(Boolean)) {
    cur += "/" + part;
    if (!FS.analyzePath(cur).exists) FS.mkdir(cur);
  }
}

// Copy a host file or directory tree into the VM. Skips caches and dotfiles.
function copyIn(host, dest) {
  const st = fs.statSync(host);
  if (st.isDirectory()) {
    mkdirs(dest);
    for (const name of fs.readdirSync(host)) {
      if (name.startsWith(".") || name === "__pycache__" || name === "node_modules" ||
          name.endsWith(".egg-info")) continue;
      copyIn(path.join(host, name), dest + "/" + name);
    }
  } else if (st.isFile()) {
    mkdirs(path.posix.dirname(dest));
    FS.writeFile(dest, fs.readFileSync(host));
  }
}

const libDir = path.join(REPO, "lib");
if (fs.existsSync(libDir)) copyIn(libDir, "/lib");
if (fs.existsSync(opts.tests)) copyIn(opts.tests, "/tests");
else mkdirs("/tests");
if (opts.shared) {
  for (const sub of ["vectors", "seeds"]) {
    const host = path.join(SHARED, sub);
    if (fs.existsSync(host)) copyIn(host, "/shared/" + sub);
  }
}
for (const [host, dest] of opts.mounts) {
  if (!fs.existsSync(host)) usage(`--mount: no such path ${host}`);
  copyIn(host, dest);
}

// The script and its sibling .py files (helpers it may import) go to /run.
const scriptDir = path.dirname(path.resolve(script));
mkdirs("/run");
for (const name of fs.readdirSync(scriptDir)) {
  if (name.endsWith(".py") && fs.statSync(path.join(scriptDir, name)).isFile()) {
    FS.writeFile("/run/" + name, fs.readFileSync(path.join(scriptDir, name)));
  }
}
const vmScript = "/run/" + path.basename(script);
FS.writeFile(vmScript, fs.readFileSync(script));

// --- run ----------------------------------------------------------------------
// Values reach Python as JSON text inside a string literal: JSON.stringify of a
// string is a valid Python string literal for everything JSON can escape.
const pyArgv = JSON.stringify(JSON.stringify([vmScript, ...scriptArgs]));
const prologue = [
  "import sys, json",
  "sys.path[:] = ['/run', '/lib', '/tests', '', '.frozen']",
  `sys.argv[:] = json.loads(${pyArgv})`,
  "del json",
  `__file__ = ${JSON.stringify(vmScript)}`,
  "mp_await = None",
].join("\n");

// PythonError.message is the MicroPython traceback text; .type the exception name.
function exitCodeFor(e) {
  if (!e || e.name !== "PythonError") {
    err.flush();
    process.stderr.write(`run.mjs: MicroPython VM error: ${e && e.message ? e.message : e}\n`);
    return 2;
  }
  if (e.type === "SystemExit") {
    // The traceback's last line is "SystemExit: <arg>" (empty arg: exit 0).
    const lines = e.message.trimEnd().split("\n");
    const arg = lines[lines.length - 1].replace(/^SystemExit:?\s*/, "");
    if (arg === "" || arg === "None") return 0;
    if (/^-?\d+$/.test(arg)) return parseInt(arg, 10) & 0xff;
    out.flush();
    process.stderr.write(arg + "\n");
    return 1;
  }
  out.flush();
  process.stderr.write(e.message.endsWith("\n") ? e.message : e.message + "\n");
  return 1;
}

try {
  mp.runPython(prologue);
  await mp.runPythonAsync(`execfile(${JSON.stringify(vmScript)})`);
  // Drive a coroutine left in mp_await (see the note at the top).
  if (mp.globals.get("mp_await") != null) await mp.runPythonAsync("await mp_await");
  finish(0);
} catch (e) {
  finish(exitCodeFor(e));
}
