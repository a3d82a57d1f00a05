# umqtt3.broker_auth -- checking a password against the users file's entry.
#
# An entry is the password itself, or what broker_passwd writes:
#     $sha256$<rounds>$<salt hex>$<hex of sha256 applied rounds times>
# (salt, then password, hashed; each further round hashes the digest).
# hashlib.sha256 and binascii are on every MicroPython port the broker runs
# on; the comparison takes the same time wherever the bytes differ.
import binascii
import hashlib

from .compat import ticks_add, ticks_diff

PREFIX = b"$sha256$"


def digest(rounds, salt, password):
    """The hex digest an entry keeps for password with salt (bytes)."""
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


def password_ok(stored, given):
    """given (bytes) is the password of the entry stored (bytes)."""
    if stored[:len(PREFIX)] != PREFIX:
        return same(stored, given)
    parts = stored.split(b"$")  # '', 'sha256', rounds, salt, hex
    if len(parts) != 5 or not parts[2].isdigit():
        return False
    try:
        salt = binascii.unhexlify(parts[3])
    except ValueError:
        return False
    return same(digest(int(parts[2]), salt, given), parts[4])


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
