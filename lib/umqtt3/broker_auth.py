# umqtt3.broker_auth -- checking a password against the users file's entry.
#
# An entry is the password itself, or what broker_passwd writes:
#     $sha256$<rounds>$<salt hex>$<hex of sha256 applied rounds times>
# (salt, then password, hashed; each further round hashes the digest).
# hashlib.sha256 and binascii are on every MicroPython port the broker runs
# on; the comparison takes the same time wherever the bytes differ.
import binascii
import hashlib

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
