"""The import graph of lib/umqtt3, for what goes on a device: the modules a
set of apps or entry modules needs, directly or not (tools/device/deploy.py
stages them; tools/measure/packages.py lists them in the mip packages).
"""
import ast
import os

from tools import procs

LIB_DIR = os.path.join(procs.ROOT, "lib")
# What a device never loads: CPython's half of compat, and the desktop
# commands' package (umqtt3_cli: python -m umqtt3.broker's command line, the
# password-file tool), which umqtt3.broker imports only when run as a script.
# A name here stands for its submodules too.
HOST_ONLY = ("umqtt3.compat.cpython", "umqtt3_cli")


def host_only(name):
    """True for a dotted module name HOST_ONLY leaves off a device."""
    return any(name == h or name.startswith(h + ".") for h in HOST_ONLY)


def lib_host_only():
    """HOST_ONLY's files inside lib/umqtt3, relative to it ("compat/cpython.py")."""
    return tuple(h[len("umqtt3."):].replace(".", "/") + ".py" for h in HOST_ONLY
                 if h.startswith("umqtt3."))


def module_file(name):
    """lib/ path of a dotted module name, or None when it is not ours."""
    base = os.path.join(LIB_DIR, *name.split("."))
    for path in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(path):
            return path
    return None


def imports(path, name):
    """Dotted names `path` (module `name`) imports, relative ones resolved;
    `from p import m` also yields p.m, which may be a module."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    pkg = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = pkg.split(".")
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            out.append(base)
            out.extend(base + "." + a.name for a in node.names if a.name != "*")
    return out


def lib_closure(app_files=(), modules=()):
    """Every lib module the apps (files outside lib/) or the given dotted
    lib modules import, directly or not, with the packages they sit in, and
    those modules themselves; sorted dotted names."""
    seen = set(modules)
    todo = [(f, "") for f in app_files] + [(module_file(m), m) for m in modules]
    while todo:
        path, name = todo.pop()
        for imp in imports(path, name):
            parts = imp.split(".")
            for i in range(1, len(parts) + 1):  # a.b.c needs a and a.b
                m = ".".join(parts[:i])
                if m in seen or host_only(m):
                    continue
                f = module_file(m)
                if f:
                    seen.add(m)
                    todo.append((f, m))
    return sorted(seen)
