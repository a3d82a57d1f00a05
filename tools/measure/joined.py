"""What the client set's `.mpy` would weigh as one module: where its size
goes between the code and the names each file carries.

    python -m tools.measure.joined              the client set, one .mpy per file and joined
    python -m tools.measure.joined --source-lines   the same with line numbers kept

A `.mpy` file holds the names (qstrs) its code uses, each once per file: a
name used by four modules of the client set is stored four times in flash,
and interned once in RAM. This compiles the client set as the device gets it
(`-X no-source-lines`, as tools/device/deploy.py) and also as one module:
the files' texts joined in import order, the imports between them dropped
and each module's private consts kept once. The joined module is never run
(its lazily loaded neighbours are not joined in); it only answers how much of
the client set's `.mpy` is the price of splitting it into a codec, a core, a
driver and a store that the broker and the asyncio client share.
"""
import os
import re
import subprocess
import sys
import tempfile

from tools import args
from tools.measure import sizes

LIB = os.path.join(sizes.REPO, "lib", "umqtt3")
# a relative import of a sibling, on one line or in parentheses
IMPORT = re.compile(r"^from \.[\w.]* import (\([^)]*\)|[^\n]*)\n", re.M)
CONST = re.compile(r"^(_\w+) = const\(")


def join(texts):
    """The module texts as one module: relative imports dropped, `del
    const` dropped (a later module's const() needs the name), each private
    const defined once (the files agree on their values: the packet types)."""
    seen = set()
    out = []
    for text in texts:
        for line in IMPORT.sub("", text).split("\n"):
            m = CONST.match(line)
            if m:
                if m.group(1) in seen:
                    continue
                seen.add(m.group(1))
            if line != "del const":
                out.append(line)
    return "\n".join(out) + "\n"


def names(path):
    """The names stored in a .mpy file (format 6): its qstr table."""
    with open(path, "rb") as f:
        b = f.read()

    def uint(i):
        n = 0
        while True:
            c = b[i]
            i += 1
            n = (n << 7) | (c & 0x7F)
            if not c & 0x80:
                return n, i

    if b[:1] != b"M" or b[1] != 6:
        sys.exit("joined: %s is not a .mpy of format 6" % path)
    n, i = uint(4)
    _, i = uint(i)  # the constant objects, after the names
    out = []
    for _ in range(n):
        k, i = uint(i)
        if k & 1:  # a name the firmware has built in: an index, no text
            continue
        k >>= 1
        out.append(b[i:i + k].decode())
        i += k + 1
    return out


def compile_one(cmd, src, dst, name):
    err = sizes.compile_mpy(cmd, src, dst, name)
    if err:
        sys.exit("joined: %s does not compile: %s" % (name, err))
    return os.path.getsize(dst)


def main(argv=None):
    ap = args.parser("python -m tools.measure.joined", __doc__)
    ap.add_argument("--source-lines", action="store_true",
                    help="keep line numbers (deploy leaves them out)")
    a = ap.parse_args(argv)
    cmd = sizes.device_tool(sizes.mpy_cross_cmd)
    if not a.source_lines:
        cmd += ["-X", "no-source-lines"]
    rows = []
    texts = []
    seen = {}  # name -> files that store it
    with tempfile.TemporaryDirectory(prefix="umqtt3-joined-") as tmp:
        for m in sizes.CLIENT_SET:
            rel = m + ("/__init__.py" if os.path.isdir(os.path.join(LIB, m)) else ".py")
            with open(os.path.join(LIB, rel)) as f:
                texts.append(f.read())
            dst = os.path.join(tmp, m + ".mpy")
            n = compile_one(cmd, os.path.join(LIB, rel), dst, "umqtt3/" + rel)
            ns = names(dst)
            for q in set(ns[1:]):  # (the first is the file's own name)
                seen.setdefault(q, []).append(m)
            rows.append([rel, n, len(ns), sum(len(q) + 2 for q in ns)])
        src = os.path.join(tmp, "joined.py")
        with open(src, "w") as f:
            f.write(join(texts))
        dst = os.path.join(tmp, "joined.mpy")
        whole = compile_one(cmd, src, dst, "umqtt3/client_joined.py")
        ns = names(dst)
    split = sum(r[1] for r in rows)
    rows.append(["client set, %d files" % len(rows), split, sum(r[2] for r in rows),
                 sum(r[3] for r in rows)])
    rows.append(["client set joined into one module", whole, len(ns), sum(len(q) + 2 for q in ns)])
    sizes.print_table(["client set%s" % ("" if a.source_lines else " (-X no-source-lines)"),
                       ".mpy bytes", "names stored", "their bytes"], rows, False)
    again = sum((len(q) + 2) * (len(fs) - 1) for q, fs in seen.items())
    print()
    print("joined: %s bytes fewer (%.1f %%); names stored by more than one file: %d, "
          "%s bytes of the split files' names"
          % (sizes.fmt(split - whole), 100.0 * (split - whole) / split,
             sum(1 for fs in seen.values() if len(fs) > 1), sizes.fmt(again)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
