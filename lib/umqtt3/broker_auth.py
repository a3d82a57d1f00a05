# umqtt3.broker_auth -- checking a password against the users file's entry.
#
# An entry is one of
#     $sha256$<rounds>$<salt hex>$<hex of sha256 applied rounds times>
#         what umqtt3_cli.passwd writes: salt, then password, hashed; each
#         further round hashes the digest. hashlib.sha256 and binascii are
#         on every MicroPython port the broker runs on.
#     $7$<iterations>$<salt base64>$<hash base64>
#         mosquitto_passwd's (mosquitto 2): PBKDF2-HMAC-SHA512
#     $6$<salt base64>$<hash base64>
#         mosquitto_passwd -H sha512's (mosquitto 1.x): SHA-512 of the
#         password, then the salt
#     the password itself, when it does not start with $<name>$.
# The SHA-512 ones only where the port's hashlib has SHA-512 (compat): an
# entry that cannot be checked, or whose $<name>$ is none of these, is
# never taken as a plain password: entry_error() names it, so that a users
# file with one is refused as it loads, and password_ok() refuses it. The
# comparison takes the same time wherever the bytes differ.
import binascii
import hashlib

from .compat import ticks_add, ticks_diff

PREFIX = b"$sha256$"


def digest(rounds, salt, password):
    """The hex digest a $sha256$ entry keeps for password with salt (bytes)."""
    d = hashlib.sha256(salt + password).digest()
    for _ in range(rounds - 1):
        d = hashlib.sha256(d).digest()
    return binascii.hexlify(d)


def same(a, b):
    """a == b in a time that does not depend on where they differ."""
    d = len(a) ^ len(b)
    n = len(a) if len(a) < len(b) else len(b)
    i = 0
    while i < n:
        d |= a[i] ^ b[i]
        i += 1
    return d == 0


def _scheme(stored):
    """The name between the first two '$' of a hashed entry (b"7", b"6",
    b"sha256", ...), None for a plain password."""
    if stored[:1] != b"$":
        return None
    k = stored.find(b"$", 1)
    if k < 2:
        return None
    name = stored[1:k]
    for c in name:
        # letters, digits, '-' and '_' (as crypt(3)'s $id$ and $argon2id$)
        if not (48 <= c <= 57 or 65 <= c <= 90 or 97 <= c <= 122 or c == 45 or c == 95):
            return None
    return name


def _fields(stored):
    """(scheme, rounds, salt, hash) of a hashed entry, the hash as it is
    compared: hex for $sha256$, raw bytes for $7$ / $6$. ValueError says
    what is wrong with it."""
    name = _scheme(stored)
    parts = stored.split(b"$")
    try:
        if name == b"sha256":  # '', 'sha256', rounds, salt hex, digest hex
            if len(parts) != 5 or not parts[2].isdigit() or int(parts[2]) < 1:
                raise ValueError
            return name, int(parts[2]), binascii.unhexlify(parts[3]), parts[4]
        if name == b"7":  # '', '7', iterations, salt, hash
            if len(parts) != 5 or not parts[2].isdigit() or int(parts[2]) < 1:
                raise ValueError
            h = binascii.a2b_base64(parts[4])
            if len(h) != 64:
                raise ValueError
            return name, int(parts[2]), binascii.a2b_base64(parts[3]), h
        if name == b"6":  # '', '6', salt, hash
            h = binascii.a2b_base64(parts[3]) if len(parts) == 4 else b""
            if len(h) != 64:
                raise ValueError
            return name, 1, binascii.a2b_base64(parts[2]), h
    except ValueError:  # binascii.Error is one
        raise ValueError("a malformed $%s$ entry" % name.decode())
    raise ValueError("$%s$ is no format this broker checks ($sha256$, mosquitto_passwd's "
                     "$7$ and $6$, or a plain password)" % name.decode())


def _need(name):
    # (what the entry is, the compat function it needs)
    from . import compat
    if name == b"7":
        return "$7$ (mosquitto 2's PBKDF2-SHA512)", compat.pbkdf2_sha512
    if name == b"6":
        return "$6$ (mosquitto 1.x's salted SHA-512)", compat.sha512
    return None, True


def entry_error(stored):
    """None when the entry stored (bytes) can be checked here, else why not,
    in a few words (for the line of the users file that has it)."""
    name = _scheme(stored)
    if name is None:
        return None
    try:
        _fields(stored)
    except ValueError as e:
        return str(e)
    what, fn = _need(name)
    if fn is None:
        return "%s needs SHA-512, which this port's hashlib lacks" % what
    return None


def password_ok(stored, given):
    """given (bytes) is the password of the entry stored (bytes). An entry
    entry_error() refuses lets no password in."""
    name = _scheme(stored)
    if name is None:
        return same(stored, given)
    try:
        name, rounds, salt, want = _fields(stored)
    except ValueError:
        return False
    if name == PREFIX[1:-1]:
        return same(digest(rounds, salt, given), want)
    _, fn = _need(name)
    if fn is None:
        return False
    if name == b"7":
        return same(fn(given, salt, rounds), want)
    return same(fn(given + salt).digest(), want)


class Backoff:
    """Failed logins per source (an address), in a table of at most `size`
    sources: after `fails` failures a source waits wait_ms, twice as long
    at each further failure (up to 64 times), and its logins meanwhile are
    refused unchecked. A full table forgets the source whose wait ended
    first. A login that passes forgets its source."""

    def __init__(self, size, fails, wait_ms):
        self.size = size
        self.fails = fails
        self.wait_ms = wait_ms
        self.t = {}  # source -> [failures, end of its wait (ticks)]

    def waiting(self, src, now):
        e = self.t.get(src)
        return e is not None and e[0] >= self.fails and ticks_diff(e[1], now) > 0

    def failed(self, src, now):
        t = self.t
        e = t.get(src)
        if e is None:
            if len(t) >= self.size:
                old = None
                for k in t:
                    if old is None or ticks_diff(t[k][1], t[old][1]) < 0:
                        old = k
                del t[old]
            e = t[src] = [0, now]
        e[0] += 1
        over = e[0] - self.fails
        if over >= 0:
            d = self.wait_ms << (over if over < 6 else 6)
            e[1] = ticks_add(now, d if d < 0x10000000 else 0x10000000)

    def passed(self, src):
        self.t.pop(src, None)

    def __len__(self):
        return len(self.t)
