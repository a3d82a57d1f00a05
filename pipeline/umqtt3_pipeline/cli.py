"""The command lines' shared parts: --help that shows the defaults, and a
refused command line in one line (``umqtt3-pipeline: what was wrong``, exit
status 2), never argparse's usage block; the checks the job and the ingest
share."""
import argparse
import os
import sys


class Help(argparse.RawDescriptionHelpFormatter):
    """The description as written; "(default: ...)" where a default says
    something."""

    def _get_help_string(self, action):
        h, d = action.help or "", action.default
        if "default" in h or d in (None, False, "", argparse.SUPPRESS):
            return h
        return h + " (default: %(default)s)"


def command_name(module):
    """What the command calls itself in --help: the console script's name
    when that is what ran (umqtt3-pipeline), else `python -m MODULE` (run as
    a module or under spark-submit, whose argv[0] is a file, or main() called
    from other code). (umqtt3_cli has the same for the broker's commands;
    spark-submit's --py-files carry this package and umqtt3 alone.)"""
    ran = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if ran.startswith("umqtt3") and not ran.endswith(".py"):
        return ran
    return "python -m " + module


class Parser(argparse.ArgumentParser):
    """One line for a refused command line, exit status 2."""

    def error(self, message):
        self.exit(2, "umqtt3-pipeline: %s\n" % message)


def parse_broker(s, default_port=1883):
    """(host, port) of "host:port" (or "host"); ValueError for a port that
    is not a number."""
    host, _, port = s.rpartition(":")
    if not host:
        return s, default_port
    return host, int(port)


def broker_address(text):
    """argparse type: host:port, with a port in 1-65535 and a host that resolves."""
    import socket
    try:
        host, port = parse_broker(text)
    except ValueError:
        raise argparse.ArgumentTypeError("%r is not host:port" % text)
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError("port %d is outside 1-65535" % port)
    try:
        socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise argparse.ArgumentTypeError("cannot resolve host %r" % host)
    return text


def topic_filters(text):
    """argparse type: comma-separated MQTT topic filters, each valid
    ('+' a whole level, '#' only as the whole last one [MQTT-4.7.1-2,
    MQTT-4.7.1-3]), refused here rather than by the broker after Spark
    started."""
    from umqtt3.codec import valid_filter
    for f in text.split(","):
        b = f.encode()
        if not valid_filter(b, 0, len(b)):
            raise argparse.ArgumentTypeError("%r is not a topic filter" % f)
    return text


def reachable(ap, broker):
    """Refuse (ap.error) a broker nothing answers at."""
    import socket
    try:
        socket.create_connection(parse_broker(broker), 5).close()
    except OSError as e:
        ap.error("cannot reach the broker at %s: %s (start it first)" % (broker, e.strerror or e))


def usable_dir(ap, option, path):
    """Refuse (ap.error) a directory that cannot be created or written;
    made_dirs() creates it once every check has passed."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        ap.error("%s %s: %s is not a directory" % (option, path, probe))
    if not os.access(probe, os.W_OK | os.X_OK):
        ap.error("%s %s: %s is not writable" % (option, path, probe))


def made_dirs(ap, dirs):
    """Create the (option, path) directories usable_dir() checked: after the
    last check, so a refused command line leaves nothing behind."""
    for option, path in dirs:
        try:
            os.makedirs(path, exist_ok=True)  # what os.access cannot tell (root, /proc)
        except OSError as e:
            ap.error("%s %s: cannot create it: %s" % (option, path, e.strerror or e))


# A client id every server must take: 1 to 23 characters of 0-9a-zA-Z
# [MQTT-3.1.3-5]; longer ones most take. Empty asks the server to make one up
# at each connection [MQTT-3.1.3-6], so the session would never be resumed.
# MAX_CLIENT_ID bounds what the ingest's CONNECT buffer and Spark's options carry.
PORTABLE_CLIENT_ID = 23
MAX_CLIENT_ID = 256  # bytes of UTF-8


def utf8(text):
    """argparse type: text the protocol carries as UTF-8 (a user name
    [MQTT-3.1.3-11]): command-line bytes that are none, refused."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError("%r is not UTF-8 text" % text)
    return text


def client_id(text):
    """argparse type: a client id that names a session the broker keeps."""
    try:
        n = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        # bytes of the command line that are no UTF-8 [MQTT-3.1.3-4]
        raise argparse.ArgumentTypeError("%r is not UTF-8 text [MQTT-3.1.3-4]" % text)
    if not n:
        raise argparse.ArgumentTypeError(
            "'' would have the broker make up an id at each connection, so the session is "
            "never resumed [MQTT-3.1.3-6]: name one")
    if n > MAX_CLIENT_ID:
        raise argparse.ArgumentTypeError("%d bytes is more than %d: a shorter id, please "
                                         "(every server takes up to %d characters "
                                         "[MQTT-3.1.3-5])" % (n, MAX_CLIENT_ID, PORTABLE_CLIENT_ID))
    return text


def client_id_note(prog, cid):
    """The line that says an id longer than every server must take may be
    refused by some (printed, not refused)."""
    if len(cid) > PORTABLE_CLIENT_ID:
        return ("%s: note: --client-id has %d characters: a server must take up to %d "
                "[MQTT-3.1.3-5], and may refuse more" % (prog, len(cid), PORTABLE_CLIENT_ID))
    return None


def max_packet(text):
    """argparse type: --max-packet, bytes from 1024 to MQTT's largest packet."""
    from .ingest import MAX_PACKET_LIMIT
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("%r is not a whole number of bytes" % text)
    if not 1024 <= n <= MAX_PACKET_LIMIT:
        raise argparse.ArgumentTypeError("%d is outside 1024-%d (MQTT's largest packet)"
                                         % (n, MAX_PACKET_LIMIT))
    return n


def needs_user(ap, a):
    """Refuse --password-file without --user: the broker would never see it."""
    if a.password_file and not a.user:
        ap.error("--password-file needs --user (MQTT sends a password only with a user name)")


def add_tls(ap):
    """The TLS options, as mosquitto_sub names them (tls.py)."""
    ap.add_argument("--cafile", metavar="FILE",
                    help="TLS to the broker, trusting the CA certificates in FILE (PEM); "
                    "the broker's name is checked")
    ap.add_argument("--capath", metavar="DIR",
                    help="TLS to the broker, trusting the CA certificates in DIR, hashed "
                    "(openssl rehash DIR); with or instead of --cafile")
    ap.add_argument("--tls", action="store_true",
                    help="TLS to the broker, trusting the system's CAs; the name is checked")
    ap.add_argument("--cert", metavar="FILE",
                    help="a client certificate (PEM), with --key, for a broker that wants one")
    ap.add_argument("--key", metavar="FILE", help="the key of --cert (PEM)")
    ap.add_argument("--key-password-file", metavar="FILE",
                    help="a file whose first line is the passphrase of an encrypted --key "
                    "(never asked for on the terminal)")
    ap.add_argument("--tls-alpn", metavar="PROTO",
                    help="offer this ALPN protocol and stop if the broker does not agree on it "
                    "(AWS IoT Core on port 443: x-amzn-mqtt-ca)")


def tls_checked(ap, a):
    """The ssl.SSLContext of the TLS options (None: plain TCP); refuses
    (ap.error) files it cannot use."""
    from .tls import OPTIONS, context
    try:
        return context(a.cafile, a.tls, a.cert, a.key, OPTIONS, a.capath,
                       a.key_password_file, a.tls_alpn)
    except ValueError as e:
        ap.error(str(e))
