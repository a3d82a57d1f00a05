# selftest -- checks umqtt3 on the board it is deployed to, and prints one
# report:
#
#   mpremote connect /dev/ttyUSB0 mount tests/portable run firmware/selftest.py
#
# (lib/umqtt3 on the device's path, as the deploy puts it; `mount` lends the
# board the portable tests from the checkout for the run). One line per check,
# then the summary line "selftest: PASS ..." or "selftest: FAIL ...":
# - heap: gc.mem_free() before and after importing the codec and the client,
#   and the RAM that import took;
# - then the portable tests themselves (tests/portable, the ones pytest and
#   the WebAssembly MicroPython run in CI), one line per test function, on the
#   board's own interpreter: byte-exact codec vectors, the hot paths and the
#   client's steady state under micropython.heap_lock(), topic matching, the
#   QoS flows, and FileStore on the board's flash.
#
# The same file runs under the WebAssembly MicroPython
# (node tests/mp/run.mjs --heap 2m firmware/selftest.py, which puts
# tests/portable at /tests; see tests/test_selftest.py) and under CPython
# (PYTHONPATH=lib:tests/portable), where the heap checks are skipped.
# Arguments, where the port passes them (not mpremote): test module names to
# run instead of MODULES.
import gc
import sys

MODULES = ("test_codec", "test_topic", "test_flow", "test_client_mem", "test_store")

_results = [0, 0, 0]  # passed, failed, skipped


def report(status, name, detail=""):
    _results[("PASS", "FAIL", "SKIP").index(status)] += 1
    print("%s  %s%s" % (status, name, ": " + detail if detail else ""))


def check_heap():
    """Import the client (which imports the codec) and measure what it took.
    Runs first, before anything of umqtt3 is loaded. mem_free() counts what
    a growable heap (ESP32, WebAssembly) may still add; the RAM the import
    took is the growth of mem_alloc()."""
    free = getattr(gc, "mem_free", None)  # MicroPython only
    if free is None:
        import umqtt3.client  # noqa: F401
        report("SKIP", "heap", "gc.mem_free() is MicroPython's")
        return
    if "umqtt3.client" in sys.modules:
        report("SKIP", "heap", "umqtt3.client was imported before the self-test (boot.py?)")
        return
    gc.collect()
    before = free()
    alloc = gc.mem_alloc()
    import umqtt3.client  # noqa: F401  (compat, codec, topic, flow, store, transport)
    gc.collect()
    used = gc.mem_alloc() - alloc
    after = free()
    detail = "free before import %d B, after codec + client %d B, import used %d B" % (
        before, after, used)
    report("PASS" if used > 0 else "FAIL", "heap", detail)


def unlock():
    # a test that failed with the heap locked must not leave it locked
    try:
        import micropython
        while micropython.heap_unlock():
            pass
    except (ImportError, AttributeError):
        pass


def run_test(name, fn):
    gc.collect()
    try:
        r = fn()
        unlock()
        if hasattr(r, "send"):  # a coroutine: the board's report stays synchronous
            r.close()
            report("SKIP", name, "async test")
            return
    except Exception as e:
        unlock()
        text = "%s: %s" % (type(e).__name__, e)
        report("SKIP" if type(e).__name__ == "SkipTest" else "FAIL", name, text)
        return
    report("PASS", name)


def run_module(mod_name):
    try:
        mod = __import__(mod_name)
    except Exception as e:
        report("FAIL", mod_name, "%s: %s" % (type(e).__name__, e))
        return
    for n in sorted(n for n in dir(mod) if n.startswith("test_")):
        fn = getattr(mod, n)
        if callable(fn):
            run_test(mod_name + "." + n, fn)
    del sys.modules[mod_name]  # its objects go before the next module is imported
    gc.collect()


def main(args):
    impl = sys.implementation
    print("umqtt3 selftest: %s %s on %s" % (
        impl.name, ".".join(str(v) for v in impl.version[:3]), sys.platform))
    try:
        check_heap()
    except Exception as e:  # a crash is a failed check, not a stopped report
        report("FAIL", "heap", "%s: %s" % (type(e).__name__, e))
    if "umqtt3.client" in sys.modules:  # else nothing below can run
        for m in args or MODULES:
            run_module(m)
    gc.collect()
    free = getattr(gc, "mem_free", None)
    if free:
        print("heap: %d B free at the end" % free())
    ok, bad, skipped = _results
    print("selftest: %s (%d passed, %d failed, %d skipped)" % (
        "FAIL" if bad else "PASS", ok, bad, skipped))
    return not bad


class Failed(Exception):
    """Raised after the report when a check failed, so that mpremote,
    tests/mp/run.mjs and CPython all exit with status 1 (from a board's raw
    REPL a SystemExit does not reach mpremote as a failure)."""


if not main(getattr(sys, "argv", [])[1:]):
    raise Failed("see the FAIL lines above")
