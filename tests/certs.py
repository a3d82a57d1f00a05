# Certificates made at test time with openssl, so that no key material is
# in the repository. A test skips where openssl is missing or fails.
import shutil
import subprocess

import pytest


def self_signed(tmp_path, name="cert"):
    """A self-signed certificate for 127.0.0.1 and localhost, and its key:
    (cert, key) paths under tmp_path."""
    if not shutil.which("openssl"):
        pytest.skip("openssl is not installed")
    cert = str(tmp_path / (name + ".pem"))
    key = str(tmp_path / (name + ".key"))
    r = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
    if r.returncode:
        pytest.skip("openssl could not make a certificate: %s" % r.stdout[-300:])
    return cert, key


def openssl(*args):
    """Run openssl with args; the test skips where it is missing or fails."""
    if not shutil.which("openssl"):
        pytest.skip("openssl is not installed")
    r = subprocess.run(["openssl"] + list(args), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=60)
    if r.returncode:
        pytest.skip("openssl failed: %s" % r.stdout[-300:])
