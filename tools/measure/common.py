"""Shared helpers for the CPython benchmarks in tools/measure.

A benchmark is a function `run(n)` that performs n operations in a plain
`for _ in range(n)` loop with everything it needs bound to locals beforehand,
so every library pays the same loop cost. `calibrate` picks n so that one
round takes about the requested time, `measure` runs several timed rounds and
returns operations per second for each.
"""

import gc
import os
import platform
import sys
import time


def python_version():
    """The exact interpreter, e.g. 'CPython 3.11.7 (main, ...) [GCC ...]'."""
    return "%s %s" % (platform.python_implementation(), sys.version.replace("\n", " "))


def dist_version(name):
    """Installed version of a distribution, or None."""
    try:
        from importlib import metadata
    except ImportError:
        return None
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def median(xs):
    s = sorted(xs)
    k = len(s)
    if not k:
        raise ValueError("median of nothing")
    if k % 2:
        return s[k // 2]
    return (s[k // 2 - 1] + s[k // 2]) / 2


def _timed(run, n):
    gc.collect()
    t0 = time.perf_counter()
    run(n)
    return time.perf_counter() - t0


def calibrate(run, seconds):
    """An iteration count for which run(n) takes about `seconds`."""
    n = 16
    while True:
        dt = _timed(run, n)
        if dt >= seconds / 5 or n >= 1 << 26:
            break
        n *= 4 if dt < seconds / 50 else 2
    return max(1, int(n * seconds / max(dt, 1e-9)))


class Result:
    """Rates (operations per second) of the rounds of one benchmark."""

    def __init__(self, name, n, rates):
        self.name = name
        self.n = n
        self.rates = rates

    @property
    def rate(self):
        return median(self.rates)

    @property
    def spread(self):
        """(max - min) / median of the round rates."""
        return (max(self.rates) - min(self.rates)) / self.rate


def measure(name, run, rounds, seconds):
    """Warm up, calibrate, then time `rounds` rounds of about `seconds`."""
    run(8)  # first-call costs (imports, caches) stay out of the timing
    n = calibrate(run, seconds)
    rates = [n / _timed(run, n) for _ in range(rounds)]
    return Result(name, n, rates)


def fmt_rate(r):
    """Operations per second with thousands separators."""
    return "{:,.0f}".format(r)


def fmt_ratio(ours, peer):
    if not peer:
        return "-"
    return "%.2fx" % (ours / peer)


def bytecode_counter(root):
    """(trace, ops, calls): a sys.settrace function that counts the Python
    bytecodes (opcode events) and calls of each function, named "file:line
    name" with the file relative to root, into the two dicts it returns.
    Deterministic: neither the load nor the build moves it."""
    ops = {}
    calls = {}

    def trace(frame, event, arg):
        c = frame.f_code
        key = "%s:%d %s" % (os.path.relpath(c.co_filename, root), c.co_firstlineno, c.co_name)
        if event == "opcode":
            ops[key] = ops.get(key, 0) + 1
        elif event == "call":
            frame.f_trace_opcodes = True
            calls[key] = calls.get(key, 0) + 1
        return trace

    return trace, ops, calls
