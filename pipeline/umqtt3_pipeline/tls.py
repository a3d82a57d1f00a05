"""TLS to the broker, as mosquitto_sub names it: --cafile FILE (trust the CA
certificates in FILE alone), --tls (trust the system's CAs), --cert FILE
--key FILE (a client certificate). The context is built here from file
paths (the source's options carry paths, never key material) with CPython's
ssl module and handed to the umqtt3 client as ssl=; the broker's name (or
address) is checked against its certificate either way. No option turns the
checks off."""
import ssl


class TLSRefused(Exception):
    """The broker failed the TLS handshake, or refused ours: one line."""


class _Encrypted(Exception):
    pass


def _no_passphrase():
    # load_cert_chain would ask on the terminal for the passphrase of an
    # encrypted key: refuse it instead
    raise _Encrypted()


def _why(path, e):
    if isinstance(e, OSError) and e.strerror:
        return "%s: %s" % (path, e.strerror)
    return "%s: %s" % (path, getattr(e, "reason", None) or e)


OPTIONS = ("--cafile", "--tls", "--cert", "--key")  # as the command lines name them
SOURCE_OPTIONS = ("cafile", "tls", "certfile", "keyfile")  # as the source's options do


def context(cafile=None, system=False, certfile=None, keyfile=None, names=OPTIONS):
    """The ssl.SSLContext for these options, or None for plain TCP.
    ValueError, in one line naming the option, for what cannot be used: a
    file missing or unreadable, no certificate in --cafile, --cert without
    --key (or the other way round), a key that is not the certificate's, a
    key with a passphrase, a client certificate without --cafile or --tls.
    names: the four options as the message calls them."""
    ca, tls, cert, key = names
    if cafile and system:
        raise ValueError("%s and %s: one or the other (%s trusts its CAs alone)" % (ca, tls, ca))
    if bool(certfile) != bool(keyfile):
        raise ValueError("%s and %s go together: %s without %s"
                         % ((cert, key, cert, key) if certfile else (cert, key, key, cert)))
    if not (cafile or system):
        if certfile:
            raise ValueError("%s and %s need TLS: %s or %s" % (cert, key, ca, tls))
        return None
    for option, path in ((ca, cafile), (cert, certfile), (key, keyfile)):
        if path:
            try:
                open(path, "rb").close()
            except OSError as e:
                raise ValueError("%s %s" % (option, _why(path, e)))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # checks the chain and the name
    try:
        if cafile:
            ctx.load_verify_locations(cafile=cafile)
        else:
            ctx.load_default_certs()
    except (ssl.SSLError, ValueError) as e:
        raise ValueError("%s %s: no CA certificate in it (%s)"
                         % (ca, cafile, getattr(e, "reason", None) or e))
    if cafile and not ctx.get_ca_certs():
        raise ValueError("%s %s: no CA certificate in it" % (ca, cafile))
    if certfile:
        try:
            ctx.load_cert_chain(certfile, keyfile, password=_no_passphrase)
        except _Encrypted:
            raise ValueError("%s %s: encrypted with a passphrase (give a key without one)"
                             % (key, keyfile))
        except ssl.SSLError as e:
            if "KEY_VALUES_MISMATCH" in str(e):
                raise ValueError("%s %s is not the key of %s %s"
                                 % (key, keyfile, cert, certfile))
            raise ValueError("%s %s %s %s: %s"
                             % (cert, certfile, key, keyfile, getattr(e, "reason", None) or e))
    return ctx


def from_options(o):
    """context() for the source's options (lower-cased keys): cafile, tls,
    certfile, keyfile."""
    return context(o.get("cafile") or None,
                   str(o.get("tls", "")).lower() in ("1", "true", "yes", "on"),
                   o.get("certfile") or None, o.get("keyfile") or None, SOURCE_OPTIONS)


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


def refused(e, host, port, cert=False):
    """What a failed handshake with the broker says, in one line, or None
    when e is no such failure. For the first connection only (before the
    CONNACK of the ingest's first session): a broker that closes a TLS link
    at once then is refusing us, where later it may just be going down.
    cert: we sent a client certificate."""
    at = "the broker at %s:%d" % (host, port)
    if isinstance(e, ssl.SSLCertVerificationError):
        if e.verify_code in _NAME_MISMATCH:
            return ("%s failed the TLS handshake: name mismatch: its certificate is not for %s "
                    "(%s)" % (at, host, e.verify_message))
        return ("%s failed the TLS handshake: unknown CA: its certificate is not signed by a "
                "CA we trust (%s; --cafile, --tls)" % (at, e.verify_message))
    if isinstance(e, (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError,
                      ConnectionResetError, ConnectionAbortedError, BrokenPipeError)):
        # TLS 1.3: the broker checks our certificate after our side of the
        # handshake is done, and mosquitto then closes without an alert (a
        # reset when our CONNECT reaches a socket it already closed)
        return _no_certificate(at, cert, "it closed the link before its CONNACK")
    if isinstance(e, ssl.SSLError):
        reason = str(e.reason or e)
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
            return refused(e, host, port, cert)
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
    return ("the broker at %s:%d speaks TLS on that port: give --cafile FILE or --tls"
            % (host, port))
