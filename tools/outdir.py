"""Output directories a tool empties before it writes: only its own. A tool
that takes a directory from the user (deploy's --build, the demo's --out)
empties it only if it is missing, empty, or holds the tool's marker file,
which the tool leaves there each time it writes; any other directory is the
user's, and is never touched.

    if not outdir.ours(path, MARKER):
        ap.error("%s: not made by the demo ..." % path)
    outdir.renew(path, MARKER, "written by the demo; emptied by the next one")
"""
import os
import shutil


def ours(path, marker):
    """May the tool empty `path`? Yes when it is missing or empty, or holds
    `marker` (a file name); never when it is a file."""
    if not os.path.isdir(path):
        return not os.path.exists(path)
    return not os.listdir(path) or os.path.isfile(os.path.join(path, marker))


def renew(path, marker, note):
    """Empty `path` (ours() said so) and mark it as the tool's: `marker`
    holds `note`, a line saying who wrote the directory."""
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    with open(os.path.join(path, marker), "w") as f:
        f.write(note + "\n")
