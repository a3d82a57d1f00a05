"""Minimal test runner for the portable tests, for MicroPython and CPython.

Under MicroPython (the normal case):
    node tests/mp/run.mjs tests/mp/testrunner.py [--dir DIR] [--require-tests] [test_module ...]
Under CPython (to check the runner itself, or the tests without pytest):
    python tests/mp/testrunner.py [--dir DIR] [--require-tests] [test_module ...]

pytest cannot run on MicroPython, so this does the small part of its job the
portable tests need: import each test_*.py module of the test directory (or the
modules named on the command line), call every top-level function whose name
starts with test_ with no arguments, and report. Tests are plain functions using
assert. `async def test_*` functions are run to completion too.

Output: one line per test, "PASS mod.test" / "SKIP mod.test: why" /
"FAIL mod.test: Error: message" followed by the traceback, then exactly one
summary line "mp: N passed, M failed[, K skipped]" ("py:" under CPython).
Exit status 1 if anything failed (or, with --require-tests, if no test ran:
`make test` asks for that when pytest found nothing), 2 if the test directory
does not exist or a module named on the command line is nowhere to import
(one line, nothing run: a typo in MP_TESTS).

A test is skipped when it raises an exception whose class is named SkipTest:
the SkipTest below, unittest.SkipTest (which pytest also treats as a skip), or
a test module's own class of that name. A test module is skipped as a whole
when its import fails only because a module in ALLOWED_MISSING is absent
(for example socket, which the WebAssembly MicroPython does not have).
"""

import gc
import sys

try:
    import os
except ImportError:  # some MicroPython boards build without os
    os = None

MICROPYTHON = sys.implementation.name == "micropython"
PREFIX = "mp" if MICROPYTHON else "py"

# Modules a portable test may need that a MicroPython build may lack; a test
# module that cannot import one of these is counted as skipped, not failed.
ALLOWED_MISSING = (
    "socket", "usocket", "select", "uselect", "ssl", "tls", "machine", "network",
    "threading", "_thread", "subprocess", "tempfile", "shutil", "pytest",
    "hypothesis", "paho", "amqtt", "pyspark",
)


class SkipTest(Exception):
    """Raise inside a test to skip it."""


def _exc_text(e):
    # "ValueError: boom" (or just "ValueError" when there is no message).
    msg = str(e)
    return type(e).__name__ + (": " + msg if msg else "")


def _print_traceback(e):
    if MICROPYTHON:
        sys.print_exception(e)
    else:
        import traceback

        traceback.print_exception(type(e), e, e.__traceback__, file=sys.stdout)


def _missing_module(e):
    # Name of the top-level module an ImportError complains about, if any.
    name = getattr(e, "name", None)  # CPython's ModuleNotFoundError
    if not name:
        # MicroPython: "no module named 'socket'"
        msg = str(e)
        if "'" in msg:
            name = msg.split("'")[1]
    return name.split(".")[0] if name else None


def _unlock_heap():
    # A test that fails between micropython.heap_lock() and heap_unlock() leaves
    # the heap locked, and the runner could not even print the result.
    if not MICROPYTHON:
        return
    import micropython

    for _ in range(8):
        try:
            bytearray(16)
            return
        except MemoryError:
            micropython.heap_unlock()


def _isdir(p):
    try:
        return (os.stat(p)[0] & 0x4000) != 0
    except OSError:
        return False


def _default_dir():
    if _isdir("/tests"):  # where tests/mp/run.mjs puts tests/portable
        return "/tests"
    # CPython from a checkout: tests/portable relative to this file.
    here = __file__.rsplit("/", 1)[0] if "/" in __file__ else "."
    return here + "/../../tests/portable"


def _importable(name):
    # a module file (or package) of that name in a directory on sys.path;
    # builtin modules (sys, gc) are no test modules
    for d in sys.path:
        base = (d + "/" if d else "") + name
        for f in (base + ".py", base + ".mpy", base + "/__init__.py"):
            try:
                os.stat(f)
                return True
            except OSError:
                pass
    return False


def _find_modules(test_dir):
    names = [n[:-3] for n in os.listdir(test_dir) if n.startswith("test_") and n.endswith(".py")]
    names.sort()
    return names


def _is_coroutine(obj):
    # Works on both: MicroPython coroutines are generators with send().
    return hasattr(obj, "send") and hasattr(obj, "throw")


class Runner:
    def __init__(self, require_tests=False):
        self.require_tests = require_tests
        self.passed = 0
        self.failed = 0
        self.skipped = 0

    def result(self, name, exc):
        """Record one outcome; exc is None for a pass."""
        if exc is None:
            self.passed += 1
            print("PASS", name)
        elif type(exc).__name__ == "SkipTest":
            self.skipped += 1
            print("SKIP %s: %s" % (name, exc))
        else:
            self.failed += 1
            print("FAIL %s: %s" % (name, _exc_text(exc)))
            _print_traceback(exc)

    def tests(self, module_names):
        """Generator over all tests: runs synchronous tests itself and yields
        each coroutine returned by an async test to the driver, which must run
        it and throw its exception (if any) back in."""
        for mod_name in module_names:
            try:
                mod = __import__(mod_name)
            except ImportError as e:
                missing = _missing_module(e)
                if missing in ALLOWED_MISSING:
                    self.skipped += 1
                    print("SKIP %s: needs module %s" % (mod_name, missing))
                else:
                    self.result(mod_name + " (import)", e)
                continue
            except Exception as e:
                self.result(mod_name + " (import)", e)
                continue
            names = [n for n in dir(mod) if n.startswith("test_")]
            names.sort()
            for fn_name in names:
                fn = getattr(mod, fn_name)
                if not callable(fn):
                    continue
                full = mod_name + "." + fn_name
                gc.collect()
                try:
                    ret = fn()
                    if _is_coroutine(ret):
                        yield ret
                except Exception as e:
                    _unlock_heap()
                    self.result(full, e)
                else:
                    _unlock_heap()
                    self.result(full, None)
            # Let the module's objects go before the next module is imported.
            del sys.modules[mod_name]
            mod = None
            gc.collect()
            yield None  # the driver's chance to let a deferred collection run

    def summary(self):
        rc = 1 if self.failed else 0
        if self.require_tests and not (self.passed or self.failed):
            print("testrunner: no test ran, and --require-tests was given")
            rc = 1
        # The closing line, in the form CI tools look for.
        line = "%s: %d passed, %d failed" % (PREFIX, self.passed, self.failed)
        if self.skipped:
            line += ", %d skipped" % self.skipped
        print(line)
        return rc


def _parse_args(argv):
    test_dir = None
    require = False
    mods = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--dir" and i + 1 < len(argv):
            i += 1
            test_dir = argv[i]
        elif a == "--require-tests":
            require = True
        elif a.startswith("-"):
            print("usage: testrunner.py [--dir DIR] [--require-tests] [test_module ...]")
            sys.exit(2)
        else:
            a = a.rsplit("/", 1)[-1]
            mods.append(a[:-3] if a.endswith(".py") else a)
        i += 1
    return test_dir or _default_dir(), require, mods


_DONE = object()


def _next_test(gen, err):
    """The runner's next coroutine (None between modules), its error passed
    in, or _DONE once every test ran."""
    try:
        return next(gen) if err is None else gen.throw(err)
    except StopIteration:
        return _DONE


def _sync_driver(runner, gen):
    # CPython (or a MicroPython with asyncio.run): run each coroutine in turn.
    to_send = None
    while True:
        coro = _next_test(gen, to_send)
        if coro is _DONE:
            return runner.summary()
        to_send = None
        if coro is None:
            continue
        try:
            import asyncio

            asyncio.run(coro)
        except Exception as e:
            to_send = e


async def _async_driver(runner, gen):
    # WebAssembly MicroPython: no asyncio.run, so tests/mp/run.mjs awaits this.
    to_send = None
    while True:
        coro = _next_test(gen, to_send)
        if coro is _DONE:
            break
        to_send = None
        if coro is None:
            # The WebAssembly port's gc.collect() only marks a collection
            # due; it runs once control is back in JavaScript.
            import asyncio

            await asyncio.sleep(0)
            continue
        try:
            await coro
        except Exception as e:
            _unlock_heap()
            to_send = e
    rc = runner.summary()
    if rc:
        sys.exit(rc)


def main(argv):
    test_dir, require, mods = _parse_args(argv)
    if os is None or not _isdir(test_dir):
        print("testrunner: no test directory %s" % test_dir)
        sys.exit(2)
    # The test modules are imported by name, as pytest's rootdir insertion
    # does (MicroPython has no importlib to load them by path). umqtt3 itself
    # comes from /lib under MicroPython, from the installed package on CPython.
    if test_dir not in sys.path:
        sys.path.insert(0, test_dir)
    for name in mods:
        if not _importable(name):
            where = "/tests (tests/portable)" if test_dir == "/tests" else test_dir
            print("testrunner: no test module %s to import (the tests: the test_*.py files of %s)"
                  % (name, where))
            sys.exit(2)
    if not mods:
        mods = _find_modules(test_dir)
        if not mods:
            print("testrunner: no test_*.py files in %s" % test_dir)
    runner = Runner(require)
    gen = runner.tests(mods)
    try:
        import asyncio
    except ImportError:
        asyncio = None
    if asyncio is not None and not hasattr(asyncio, "run"):
        return _async_driver(runner, gen)  # a coroutine for the caller to await
    return _sync_driver(runner, gen)


if __name__ == "__main__":
    rc = main(sys.argv[1:])
    if _is_coroutine(rc):
        mp_await = rc  # picked up and awaited by tests/mp/run.mjs
    elif rc:
        sys.exit(rc)
