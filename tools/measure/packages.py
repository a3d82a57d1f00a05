"""The mip packages, as micropython-lib splits umqtt.simple and umqtt.robust:
`package.json` is the client (codec, client, store, asyncio client: what a
sensor node installs alone), `package-broker.json` the broker a gateway adds
(it names the client package as its dependency). What runs only on the
desktop is in neither: compat/cpython.py, and the commands' package
lib/umqtt3_cli (umqtt3.broker imports it only when run as a script).

Each package's file list is the import closure of its entry modules in
lib/umqtt3, so a new module lands in the package that imports it:

    python -m tools.measure.packages            .py and .mpy bytes of each package
    python -m tools.measure.packages --markdown the same as the README's table
    python -m tools.measure.packages --check    exit 1, naming each difference, if
                                                a package file's list is not the closure
                                                or README.md's table is not what this measures
    python -m tools.measure.packages --write    rewrite the lists in the package files,
                                                and README.md's table
"""
import json
import os
import re
import sys
import tempfile

from tools import args, libgraph
from tools.measure import sizes

ROOT = sizes.REPO
LIB = os.path.join(ROOT, "lib", "umqtt3")
README = os.path.join(ROOT, "README.md")
HEADER = "| mip package | file | modules | `.py` bytes | `.mpy` bytes |"

# Never copied to a device: CPython's half of compat (the desktop commands
# live outside lib/umqtt3, in lib/umqtt3_cli, and the closure leaves them out).
DESKTOP_ONLY = libgraph.lib_host_only()

# package file -> (name, its entry modules, the package files it depends on)
PACKAGES = {
    # umqtt3.flow: the QoS 1/2 machine on its own (the client and broker cores have its rules
    # written in; a driver of one's own, and the power-loss simulation, use it)
    "package.json": ("umqtt3", ("umqtt3", "umqtt3.client", "umqtt3.aio", "umqtt3.store", "umqtt3.client5",
                                "umqtt3.transport", "umqtt3.flow"), ()),
    "package-broker.json": ("umqtt3-broker", ("umqtt3.broker", "umqtt3.bridge", "umqtt3.bridge_config"), ("package.json",)),
}


def lib_modules():
    """Every module file under lib/umqtt3, relative to it ("compat/__init__.py")."""
    found = []
    for d, dirs, files in os.walk(LIB):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        rel = os.path.relpath(d, LIB).replace(os.sep, "/")
        found += [f if rel == "." else rel + "/" + f for f in files if f.endswith(".py")]
    return sorted(found)


def closure(entries):
    """The module files (relative to lib/umqtt3) of the entry modules and of
    everything they import, less the desktop-only ones."""
    return set(os.path.relpath(libgraph.module_file(m), LIB).replace(os.sep, "/")
               for m in libgraph.lib_closure(modules=entries))


def wanted():
    """{package file: sorted module files} as the import graph has them."""
    out, taken = {}, set()
    for pfile, (_, entries, deps) in PACKAGES.items():
        have = set()
        for d in deps:
            have |= set(out[d])
        mods = sorted(closure(entries) - have)
        out[pfile] = mods
        taken |= set(mods)
    return out


def listed(pfile):
    with open(os.path.join(ROOT, pfile)) as f:
        pkg = json.load(f)
    return pkg, sorted(src[len("lib/umqtt3/"):] for _, src in pkg.get("urls", []))


def problems():
    """What is wrong with the package files, one sentence each."""
    out = []
    want = wanted()
    placed = set(m for mods in want.values() for m in mods) | set(DESKTOP_ONLY)
    for m in lib_modules():
        if m not in placed:
            out.append("lib/umqtt3/%s is in no package: no package's entry modules import it "
                       "(import it, or name it in DESKTOP_ONLY of tools/measure/packages.py)" % m)
    for pfile, mods in want.items():
        pkg, have = listed(pfile)
        for m in sorted(set(mods) - set(have)):
            out.append("%s lacks umqtt3/%s, which %s imports: run python -m "
                       "tools.measure.packages --write" % (pfile, m, PACKAGES[pfile][0]))
        for m in sorted(set(have) - set(mods)):
            out.append("%s lists umqtt3/%s, which %s does not import%s: run python -m "
                       "tools.measure.packages --write" % (
                           pfile, m, PACKAGES[pfile][0],
                           " (it runs on the desktop only)" if m in DESKTOP_ONLY else ""))
        for dest, src in pkg.get("urls", []):
            if dest != "umqtt3/" + src[len("lib/umqtt3/"):]:
                out.append("%s copies %s to %s, not to umqtt3/..." % (pfile, src, dest))
        deps = [d for d, _ in pkg.get("deps", [])]
        if deps != list(PACKAGES[pfile][2]):
            out.append("%s depends on %r, want %r" % (pfile, deps, list(PACKAGES[pfile][2])))
    return out


def write():
    for pfile, mods in wanted().items():
        pkg, _ = listed(pfile)
        pkg["urls"] = [["umqtt3/" + m, "lib/umqtt3/" + m] for m in mods]
        pkg["deps"] = [[d, "latest"] for d in PACKAGES[pfile][2]]
        text = json.dumps(pkg, indent=2)
        # one [destination, source] pair a line, as people write them
        text = re.sub(r'\[\s*("[^"]*"),\s*("[^"]*")\s*\]', r"[\1, \2]", text)
        with open(os.path.join(ROOT, pfile), "w") as f:
            f.write(text + "\n")


def measure():
    """[(package file, name, files, .py bytes, .mpy bytes)]."""
    cmd = sizes.mpy_cross_cmd()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for pfile, mods in wanted().items():
            py = mpy = 0
            for m in mods:
                src = os.path.join(LIB, m)
                dst = os.path.join(tmp, m[:-3] + ".mpy")
                err = sizes.compile_mpy(cmd, src, dst, "umqtt3/" + m)
                if err:
                    raise SystemExit("packages: %s does not compile: %s" % (m, err))
                py += os.path.getsize(src)
                mpy += os.path.getsize(dst)
            rows.append((pfile, PACKAGES[pfile][0], len(mods), py, mpy))
    return rows


def table(rows):
    """The README's table of measure()'s rows, as lines."""
    lines = [HEADER, "|---|---|--:|--:|--:|"]
    for pfile, name, n, py, mpy in rows:
        lines.append("| `%s` | `%s` | %d | %s | %s |" % (name, pfile, n, format(py, ","),
                                                       format(mpy, ",")))
    return lines


def readme_table(text):
    """(start, end) of the table in README.md's lines (end: the line after
    it), or None."""
    lines = text.split("\n")
    if HEADER not in lines:
        return None
    start = end = lines.index(HEADER)
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return start, end


def readme_problems(rows):
    """What is wrong with README.md's table against measure()'s rows: [] or
    one sentence."""
    with open(README) as f:
        text = f.read()
    where = readme_table(text)
    if where is None:
        return ["README.md has no mip package table: no line %r to write it under" % HEADER]
    have = text.split("\n")[where[0]:where[1]]
    if have == table(rows):
        return []
    now = ["%s %d modules, %s .py and %s .mpy bytes" % (name, n, format(py, ","), format(mpy, ","))
           for pfile, name, n, py, mpy in rows if table([(pfile, name, n, py, mpy)])[2] not in have]
    return ["README.md's mip package table is not what the packages measure (%s): run "
            "python -m tools.measure.packages --write" % ("; ".join(now) or "its layout")]


def write_readme(rows):
    with open(README) as f:
        text = f.read()
    where = readme_table(text)
    if where is None:
        return  # readme_problems() says what to do
    lines = text.split("\n")
    lines[where[0]:where[1]] = table(rows)
    with open(README, "w") as f:
        f.write("\n".join(lines))


def main(argv=None):
    ap = args.parser("python -m tools.measure.packages", __doc__)
    what = ap.add_mutually_exclusive_group()
    what.add_argument("--markdown", action="store_true", help="print the table as markdown")
    what.add_argument("--check", action="store_true", help="check the package files only")
    what.add_argument("--write", action="store_true", help="rewrite the package files' lists")
    a = ap.parse_args(argv)
    if a.write:
        write()  # the lists first: the README's table measures them
        write_readme(measure())
    if a.check or a.write:
        bad = problems()
        if not bad:  # (a package file that is wrong is measured wrong too)
            bad = readme_problems(measure())
        for line in bad:
            print("packages: " + line, file=sys.stderr)
        return 1 if bad else 0
    rows = measure()
    if a.markdown:
        print("\n".join(table(rows)))
    else:
        print("%-15s %-20s %7s %10s %10s" % ("package", "file", "modules", ".py B", ".mpy B"))
        for pfile, name, n, py, mpy in rows:
            print("%-15s %-20s %7d %10d %10d" % (name, pfile, n, py, mpy))
    return 0


if __name__ == "__main__":
    sys.exit(main())
