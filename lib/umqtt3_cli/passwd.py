# umqtt3_cli.passwd -- the broker's users file, in the spirit of
# mosquitto_passwd (desktop only; `umqtt3-passwd` once pip-installed).
#
#     python -m umqtt3_cli.passwd FILE USER               asks for the password
#     python -m umqtt3_cli.passwd -b FILE USER PASS       takes it from the line
#     python -m umqtt3_cli.passwd -D FILE USER            deletes the user
#     python -m umqtt3_cli.passwd -c [-b] FILE USER ...   starts a new file
#
# One `user:entry` per line, '#' comments and blank lines kept. The entry is
# a salted, iterated SHA-256 (umqtt3.broker_auth, which the broker checks it
# with, on MicroPython too); a plain password is still accepted from a file
# written by hand, and mosquitto_passwd's $7$ / $6$ entries where the
# platform has SHA-512 (read_users refuses what it cannot check). The file
# is replaced atomically and keeps its mode and owner; a new one is made
# 0600. Only -c makes a file: adding to or deleting from a missing one is
# refused and makes none (as mosquitto_passwd), so a typo in FILE never
# starts a second users file beside the one the broker reads.
import argparse
import binascii
import getpass
import os
import sys

from umqtt3.broker_auth import PREFIX, digest, entry_error

from . import command_name

PROG = command_name("umqtt3_cli.passwd")  # umqtt3-passwd when run as that
ROUNDS = 1000
BOM = b"\xef\xbb\xbf"  # UTF-8's byte order mark, which some editors start a file with


def read_users(path, allow_empty=False, allow_spaces=False):
    """{user bytes: entry bytes} from a users file; ValueError names the
    first bad line. Refused unless allowed: an empty password (`guest:`
    would let anyone in as guest) and spaces around the ':' (which would
    belong to the name or the password). Always refused: an entry of a
    hash format that cannot be checked here (broker_auth.entry_error),
    which would otherwise lock its user out or be taken as a password.
    A UTF-8 byte order mark at the start is taken off."""
    users = {}
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            if n == 1 and raw.startswith(BOM):
                raw = raw[3:]  # saved "UTF-8 with BOM": not part of the first name
            try:
                line = raw.decode().rstrip("\r\n")
            except UnicodeError:
                raise ValueError("%s:%d: not UTF-8: %r" % (path, n, raw.rstrip(b"\r\n")))
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            user, sep, pw = line.partition(":")
            where = "%s:%d:" % (path, n)
            if not sep or not user.strip():
                raise ValueError("%s want user:password, got %r" % (where, line))
            if not allow_spaces and (user.strip() != user or pw.strip() != pw):
                raise ValueError("%s spaces around the name or the password of %r "
                                 "(--users-allow-spaces keeps them)" % (where, user.strip()))
            if not pw and not allow_empty:
                raise ValueError("%s user %r has an empty password "
                                 "(--users-allow-empty lets it in without one)" % (where, user))
            why = entry_error(pw.encode())
            if why is not None:
                raise ValueError("%s user %r: %s" % (where, user, why))
            users[user.encode()] = pw.encode()
    return users


def control(name):
    """Has name (str) a control character: U+0000-U+001F, U+007F-U+009F?
    mosquitto_passwd refuses the first ones (a newline would split the
    entry in two); the broker refuses them all in a CONNECT's user name
    [MQTT-1.5.3-2], so such a user could never log in."""
    for ch in name:
        o = ord(ch)
        if o < 0x20 or 0x7F <= o <= 0x9F:
            return True
    return False


def entry(password, rounds=ROUNDS, salt=None):
    """The users-file entry for password (bytes)."""
    salt = salt if salt is not None else os.urandom(12)
    return PREFIX + b"%d$%s$%s" % (rounds, binascii.hexlify(salt), digest(rounds, salt, password))


def _lines(path, create):
    # the file's lines ([] for -c); FileNotFoundError for a missing file;
    # ValueError names a line that is not UTF-8
    if create:
        return []
    with open(path, "rb") as f:
        data = f.read()
    if data.startswith(BOM):
        data = data[3:]  # written back without it
    lines = []
    for n, line in enumerate(data.splitlines(), 1):
        try:
            lines.append(line.decode())
        except UnicodeError:
            raise ValueError("%s:%d: not UTF-8: %r" % (path, n, line))
    return lines


def _replace(path, text):
    # FILE.tmp, synced, renamed over FILE: with FILE's mode (and owner, where
    # allowed), or 0600 for a new file, so the hashes are never readable by
    # more users than before. A symbolic link stays one: its target is
    # what is replaced (what the broker reads), as mosquitto_passwd does
    path = os.path.realpath(path)
    try:
        st = os.stat(path)
        mode = st.st_mode & 0o7777
    except FileNotFoundError:
        st = None
        mode = 0o600
    tmp = path + ".tmp"
    try:
        os.remove(tmp)  # O_EXCL below: never a leftover's mode
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with open(fd, "w") as f:
        if st is not None:
            try:
                os.chown(tmp, st.st_uid, st.st_gid)
            except PermissionError:
                pass  # another user's file: ours then, with its mode
        os.chmod(tmp, mode)
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def update(path, user, password=None, create=False, rounds=ROUNDS):
    """Add or replace user (password given), or delete it (None); create
    starts a new file (replacing one), for an addition only. Returns False
    when deleting a user the file does not have; FileNotFoundError when the
    file does not exist and create is not given; ValueError naming a line
    that is not UTF-8."""
    lines = _lines(path, create and password is not None)
    out = []
    found = False
    for line in lines:
        u, sep, _ = line.strip().partition(":")
        if sep and u == user and not line.strip().startswith("#"):
            found = True
            if password is None:
                continue
            line = "%s:%s" % (user, entry(password, rounds).decode())
        out.append(line)
    if password is not None and not found:
        out.append("%s:%s" % (user, entry(password, rounds).decode()))
    _replace(path, "".join(line + "\n" for line in out))
    return found or password is not None


def parser():
    class Parser(argparse.ArgumentParser):
        def error(self, message):  # one line, not the usage block
            self.exit(2, "%s: %s\n" % (PROG, message))

    ap = Parser(prog=PROG, description="Add, update or delete a user of the umqtt3 broker's "
                                       "users file (python -m umqtt3.broker --users FILE).")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("-b", action="store_true", help="batch: the password is the last argument")
    mode.add_argument("-D", action="store_true", help="delete the user")
    ap.add_argument("-c", action="store_true",
                    help="create the file (replaces an existing one); without it FILE must exist")
    ap.add_argument("--rounds", type=int, default=ROUNDS,
                    help="SHA-256 rounds per check (default %d)" % ROUNDS)
    ap.add_argument("file")
    ap.add_argument("user")
    ap.add_argument("password", nargs="?")
    return ap


def main(argv=None):
    ap = parser()
    a = ap.parse_args(argv)
    if (a.password is not None) != a.b:
        ap.error("a password on the line goes with -b, and -b wants one")
    if ":" in a.user or not a.user or a.user.strip() != a.user or a.user.startswith("#") \
            or control(a.user):
        ap.error("user %r: no ':' nor control characters, no leading '#' or spaces, not empty"
                 % a.user)
    if a.rounds < 1:
        ap.error("--rounds must be 1 or more, not %d" % a.rounds)
    if a.D and a.c:
        ap.error("-c and -D do not go together")
    try:
        if a.D:
            if not update(a.file, a.user, None):
                print("%s: %s has no user %s" % (PROG, a.file, a.user), file=sys.stderr)
                return 1
            return 0
        if not a.c:
            open(a.file, "rb").close()  # as mosquitto_passwd: missing, refused before asking
        pw = a.password
        if pw is None:
            pw = getpass.getpass("Password: ")
            if getpass.getpass("Again: ") != pw:
                print("%s: the passwords differ" % PROG, file=sys.stderr)
                return 1
        if not pw:
            print("%s: the password is empty" % PROG, file=sys.stderr)
            return 1
        update(a.file, a.user, pw.encode(), a.c, a.rounds)
    except FileNotFoundError as e:  # without -c: as mosquitto_passwd, nothing made
        print("%s: unable to open password file %s: %s%s" % (
            PROG, a.file, e.strerror or e, "" if a.D or a.c else " (-c creates it)"),
            file=sys.stderr)
        return 1
    except OSError as e:
        print("%s: %s: %s" % (PROG, a.file, e.strerror or e), file=sys.stderr)
        return 1
    except ValueError as e:  # a line that is not UTF-8
        print("%s: %s" % (PROG, e), file=sys.stderr)
        return 1
    except (EOFError, KeyboardInterrupt):
        print("%s: no password given" % PROG, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
