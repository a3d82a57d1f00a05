"""TLS to the broker, as mosquitto_sub names it: --cafile FILE (trust the CA
certificates in FILE), --capath DIR (and those of a directory of hashed CA
certificates), --tls (trust the system's CAs), --cert FILE --key FILE (a
client certificate), --key-password-file FILE (the passphrase of an
encrypted key: mosquitto_sub asks on the terminal, the pipeline runs
unattended), --tls-alpn PROTO (the ALPN protocol to offer: AWS IoT Core takes
MQTT on port 443 with x-amzn-mqtt-ca). The context is built here from file
paths (the source's options carry paths, never key material or a passphrase)
with CPython's ssl module and handed to the umqtt3 client as ssl=; the
broker's name (or address) is checked against its certificate either way.
No option turns the checks off."""
import os
import re
import ssl


class TLSRefused(Exception):
    """The broker failed the TLS handshake, or refused ours: one line."""


class NoALPN(ssl.SSLError):
    """The handshake was done, but the broker did not agree on the ALPN
    protocol we offered (got: what it chose, None for nothing)."""

    def __init__(self, want, got):
        super().__init__("the broker chose %s, not %s" % (got and repr(got) or "none", want))
        self.want, self.got = want, got


class _Agreed(ssl.SSLSocket):
    # a handshake that ends with no agreement on the protocol we offered
    # fails: the broker behind an ALPN router (AWS IoT Core on 443) would
    # not be the one we meant, and RFC 7301 leaves it to the client to go on
    def do_handshake(self, *a, **kw):
        super().do_handshake(*a, **kw)
        want = getattr(self.context, "alpn", None)
        if want and self.selected_alpn_protocol() != want:
            raise NoALPN(want, self.selected_alpn_protocol())


class _ALPNContext(ssl.SSLContext):
    """A client context that offers one ALPN protocol (alpn) and holds the
    broker to it."""
    sslsocket_class = _Agreed
    alpn = None


def alpn_of(ctx):
    """The ALPN protocol ctx offers, or None."""
    return ctx.alpn if isinstance(ctx, _ALPNContext) else None


class _Encrypted(Exception):
    pass


def _why(path, e):
    if isinstance(e, OSError) and e.strerror:
        return "%s: %s" % (path, e.strerror)
    return "%s: %s" % (path, getattr(e, "reason", None) or e)


OPTIONS = ("--cafile", "--tls", "--cert", "--key", "--capath", "--key-password-file",
           "--tls-alpn")  # as the command lines name them
SOURCE_OPTIONS = ("cafile", "tls", "certfile", "keyfile", "capath", "keyPasswordFile",
                  "alpn")  # as the source's options do

# what `openssl rehash` (c_rehash) names the links to the CA certificates of
# a --capath directory: the subject's hash, a dot, a number
_HASHED = re.compile(r"[0-9a-f]{8}\.[0-9]+$")


def _capath_checked(option, path):
    # OpenSSL reads the directory only when a handshake looks a CA up: say
    # now what it would not find
    try:
        names = os.listdir(path)
    except OSError as e:
        raise ValueError("%s %s" % (option, _why(path, e)))
    if not any(_HASHED.match(n) for n in names):
        raise ValueError("%s %s: no hashed CA certificate in it (openssl rehash %s)"
                         % (option, path, path))


def context(cafile=None, system=False, certfile=None, keyfile=None, names=OPTIONS,
            capath=None, key_password_file=None, alpn=None):
    """The ssl.SSLContext for these options, or None for plain TCP.
    ValueError, in one line naming the option, for what cannot be used: a
    file or directory missing or unreadable, no certificate in --cafile, no
    hashed certificate in --capath, --cert without --key (or the other way
    round), a key that is not the certificate's, a key with a passphrase
    and no --key-password-file (or a wrong passphrase in it), a client
    certificate or --tls-alpn without --cafile, --capath or --tls.
    names: the seven options as the message calls them."""
    ca, tls, cert, key, cadir, keypass, alpn_name = names
    for given, name in ((cafile, ca), (capath, cadir)):
        if given and system:
            raise ValueError("%s and %s: one or the other (%s trusts its CAs alone)"
                             % (name, tls, name))
    if bool(certfile) != bool(keyfile):
        raise ValueError("%s and %s go together: %s without %s"
                         % ((cert, key, cert, key) if certfile else (cert, key, key, cert)))
    if key_password_file and not keyfile:
        raise ValueError("%s goes with %s: the passphrase of an encrypted key" % (keypass, key))
    if alpn is not None and not 1 <= len(alpn.encode()) <= 255:
        raise ValueError("%s %r: a protocol name of 1 to 255 bytes" % (alpn_name, alpn))
    if not (cafile or capath or system):
        for given, what in ((certfile, "%s and %s need" % (cert, key)),
                            (alpn, "%s needs" % alpn_name)):
            if given:
                raise ValueError("%s TLS: %s, %s or %s" % (what, ca, cadir, tls))
        return None
    for option, path in ((ca, cafile), (cert, certfile), (key, keyfile),
                         (keypass, key_password_file)):
        if path:
            try:
                open(path, "rb").close()
            except OSError as e:
                raise ValueError("%s %s" % (option, _why(path, e)))
    if capath:
        _capath_checked(cadir, capath)
    # checks the chain and the name
    ctx = (_ALPNContext if alpn else ssl.SSLContext)(ssl.PROTOCOL_TLS_CLIENT)
    try:
        if cafile or capath:
            ctx.load_verify_locations(cafile=cafile, capath=capath)
        else:
            ctx.load_default_certs()
    except (ssl.SSLError, ValueError) as e:
        raise ValueError("%s %s: no CA certificate in it (%s)"
                         % (ca, cafile, getattr(e, "reason", None) or e))
    if cafile and not ctx.get_ca_certs():
        raise ValueError("%s %s: no CA certificate in it" % (ca, cafile))
    if certfile:
        _load_key(ctx, cert, certfile, key, keyfile, keypass, key_password_file)
    if alpn:
        ctx.set_alpn_protocols([alpn])
        ctx.alpn = alpn
    return ctx


def _load_key(ctx, cert, certfile, key, keyfile, keypass, key_password_file):
    asked = []

    def passphrase():
        # load_cert_chain would ask on the terminal for the passphrase of an
        # encrypted key: the file's, or a refusal
        asked.append(1)
        if not key_password_file:
            raise _Encrypted()
        from .ingest import read_password  # the first line, as the login's
        return read_password(key_password_file)
    try:
        ctx.load_cert_chain(certfile, keyfile, password=passphrase)
    except _Encrypted:
        raise ValueError("%s %s: encrypted with a passphrase: give it in %s FILE"
                         % (key, keyfile, keypass))
    except ssl.SSLError as e:
        if "KEY_VALUES_MISMATCH" in str(e):
            raise ValueError("%s %s is not the key of %s %s" % (key, keyfile, cert, certfile))
        if asked and key_password_file:
            # OpenSSL says only "PEM lib" for a passphrase that does not
            # decrypt the key
            raise ValueError("%s %s: the passphrase in %s %s does not decrypt it"
                             % (key, keyfile, keypass, key_password_file))
        raise ValueError("%s %s %s %s: %s"
                         % (cert, certfile, key, keyfile, getattr(e, "reason", None) or e))


def from_options(o):
    """context() for the source's options (lower-cased keys): cafile, tls,
    certfile, keyfile, capath, keypasswordfile, alpn."""
    return context(o.get("cafile") or None,
                   str(o.get("tls", "")).lower() in ("1", "true", "yes", "on"),
                   o.get("certfile") or None, o.get("keyfile") or None, SOURCE_OPTIONS,
                   o.get("capath") or None, o.get("keypasswordfile") or None,
                   o.get("alpn") or None)


# verify codes of a certificate that is not for the name we asked for
_NAME_MISMATCH = (62, 64)  # X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH
# what the broker's alert says when it did not take our certificate
_CLIENT_CERT = ("CERTIFICATE_REQUIRED", "BAD_CERTIFICATE", "UNKNOWN_CA",
                "CERTIFICATE_UNKNOWN", "CERTIFICATE_EXPIRED", "CERTIFICATE_REVOKED",
                "UNSUPPORTED_CERTIFICATE", "ACCESS_DENIED")


def _no_certificate(at, cert, detail):
    return "%s refused the TLS connection: %s (%s; --cert, --key)" % (
        at, "it did not take our client certificate" if cert else
        "it wants a client certificate", detail)


def _no_alpn(at, want, how):
    return "%s did not agree on the ALPN protocol %s: %s (--tls-alpn)" % (at, want, how)


def refused(e, host, port, cert=False, alpn=None):
    """What a failed handshake with the broker says, in one line, or None
    when e is no such failure. For the first connection only (before the
    CONNACK of the ingest's first session): a broker that closes a TLS link
    at once then is refusing us, where later it may just be going down.
    cert: we sent a client certificate; alpn: the ALPN protocol we offered
    (alpn_of())."""
    at = "the broker at %s:%d" % (host, port)
    if isinstance(e, NoALPN):
        return _no_alpn(at, e.want, "it chose %s" % (repr(e.got) if e.got else "none"))
    if isinstance(e, ssl.SSLCertVerificationError):
        if e.verify_code in _NAME_MISMATCH:
            return ("%s failed the TLS handshake: name mismatch: its certificate is not for %s "
                    "(%s)" % (at, host, e.verify_message))
        return ("%s failed the TLS handshake: unknown CA: its certificate is not signed by a "
                "CA we trust (%s; --cafile, --capath, --tls)" % (at, e.verify_message))
    if isinstance(e, (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError,
                      ConnectionResetError, ConnectionAbortedError, BrokenPipeError)):
        # TLS 1.3: the broker checks our certificate after our side of the
        # handshake is done, and mosquitto then closes without an alert (a
        # reset when our CONNECT reaches a socket it already closed)
        return _no_certificate(at, cert, "it closed the link before its CONNACK")
    if isinstance(e, ssl.SSLError):
        reason = str(e.reason or e)
        if alpn and "NO APPLICATION PROTOCOL" in str(e).upper().replace("_", " "):
            # RFC 7301 3.2: the broker speaks none of the protocols offered
            return _no_alpn(at, alpn, "it refused it: tlsv1 alert no application protocol")
        if "WRONG_VERSION_NUMBER" in reason.upper() or "RECORD_LAYER" in reason.upper():
            return "%s does not speak TLS on that port (%s)" % (at, reason.lower())
        if any(w in reason.upper() for w in _CLIENT_CERT):
            return _no_certificate(at, cert, reason.lower().replace("_", " "))
        return "%s failed the TLS handshake: %s" % (at, reason.lower().replace("_", " "))
    return None


def probe(ctx, host, port, cert=False, wait=2.0):
    """Why the broker refuses us over TLS, found on a link of our own, or
    None. For a first connection that failed with no TLS error: the client
    may have seen the broker's close only as a lost link (and reconnected
    until its timeout). With TLS 1.3 a broker that does not take our client
    certificate closes the link right after the handshake; one that does
    waits for our CONNECT, which this link never sends (wait: how long to
    wait for such a close)."""
    import socket
    try:
        s = socket.create_connection((host, port), wait)
    except OSError:
        return None  # not reachable: no refusal, the caller tries again
    try:
        try:
            s = ctx.wrap_socket(s, server_hostname=host)
            s.settimeout(wait)
            if not s.recv(1):
                raise ssl.SSLEOFError("closed after the handshake")
        except (socket.timeout, BlockingIOError):
            return None  # the broker kept the link: it takes our certificate
        except OSError as e:
            return refused(e, host, port, cert, alpn_of(ctx))
        return None  # it spoke first: not a TLS refusal
    finally:
        s.close()


def plain_refused(host, port, wait=2.0):
    """For a first connection without TLS that failed: what to say when the
    broker's port speaks TLS (a handshake that nothing is sent over, its
    certificate not even looked at), else None."""
    import socket
    try:
        s = socket.create_connection((host, port), wait)
    except OSError:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # only to learn whether it speaks TLS
    try:
        s.settimeout(wait)
        s = ctx.wrap_socket(s)
    except OSError:
        return None
    finally:
        s.close()
    return ("the broker at %s:%d speaks TLS on that port: give --cafile FILE, --capath DIR "
            "or --tls" % (host, port))
