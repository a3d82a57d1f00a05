"""Command lines of the tools: a parser whose --help shows every default and
keeps the description's sentences whole, and which refuses bad input in one
line (`prog: what was wrong`, exit status 2) instead of argparse's usage
block; and the checks the tools share (ports, hosts, counts, directories,
lists of names).

    ap = args.parser("python -m tools.desktop.demo", __doc__)
    ap.add_argument("--port", type=args.port_or_zero, default=0, help="...")
    a = ap.parse_args(argv)
    args.check_free(ap, a.port)
"""
import argparse
import os
import socket


class Help(argparse.RawDescriptionHelpFormatter):
    """The description as written, and "(default: ...)" after every option
    that has a default worth showing and does not name its default itself."""

    def _get_help_string(self, action):
        h = action.help or ""
        d = action.default
        if ("default" in h or d is None or d is False or d is argparse.SUPPRESS
                or action.option_strings == [] or d == ""):
            return h
        return h + " (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """One line for a refused command line: `name: what was wrong` (name:
    the last word of prog, e.g. demo), exit status 2."""

    def error(self, message):
        name = self.prog.split()[-1].rsplit(".", 1)[-1]
        self.exit(2, "%s: %s\n" % (name, message))


def parser(prog, doc):
    return Parser(prog=prog, description=doc, formatter_class=Help)


def _number(text, kind, name):
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError("%r is not %s" % (text, name))


def port(text):
    """A TCP port, 1-65535."""
    n = _number(text, int, "a port number")
    if not 1 <= n <= 65535:
        raise argparse.ArgumentTypeError("port %d is outside 1-65535" % n)
    return n


def port_or_zero(text):
    """A TCP port, or 0 for a free one."""
    return 0 if text.strip() == "0" else port(text)


def count(text):
    """A whole number of at least 1."""
    n = _number(text, int, "a whole number")
    if n < 1:
        raise argparse.ArgumentTypeError("%d is not 1 or more" % n)
    return n


def _finite(text):
    x = _number(text, float, "a number")
    if x - x != 0:  # inf - inf and nan - nan are nan
        raise argparse.ArgumentTypeError("%s is not a finite number" % text)
    return x


def positive(text):
    """A finite number of seconds (or another quantity) above 0."""
    x = _finite(text)
    if not x > 0:
        raise argparse.ArgumentTypeError("%s is not above 0" % text)
    return x


def not_negative(text):
    """A finite number of 0 or more (0 usually meaning "no limit")."""
    x = _finite(text)
    if not x >= 0:
        raise argparse.ArgumentTypeError("%s is below 0" % text)
    return x


def names(ap, option, text, known, what="name"):
    """The comma-separated names in `text` (an option's value), each one of
    `known`; refuses (ap.error) any other name, and a list of none."""
    out = [n for n in text.split(",") if n]
    for n in out:
        if n not in known:
            ap.error("%s: unknown %s %r (%s)" % (option, what, n, ", ".join(known)))
    if not out:
        ap.error("%s names no %s" % (option, what))
    return out


def host(text):
    """A host name or address that resolves."""
    try:
        socket.getaddrinfo(text, None, 0, socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise argparse.ArgumentTypeError("cannot resolve host %r" % text)
    return text


def check_free(ap, port, host="127.0.0.1"):
    """Refuse (ap.error) a port that something already listens on."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind((host, port))
    except OSError as e:
        ap.error("cannot listen on %s:%d: %s" % (host, port, e.strerror or e))
    finally:
        s.close()


def check_dir(ap, path, option):
    """Refuse (ap.error) a directory that cannot be made or written."""
    d = os.path.abspath(path)
    probe = d
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        ap.error("%s %s: %s is not a directory" % (option, path, probe))
    if not os.access(probe, os.W_OK | os.X_OK):
        ap.error("%s %s: %s is not writable" % (option, path, probe))
