# umqtt3_cli.broker -- `python -m umqtt3.broker` (`umqtt3-broker`) on the
# desktop.
#
# Flags for the listener, every limit of umqtt3.broker_limits (one flag each,
# its default from the desktop profile below), a users file (umqtt3_cli.passwd
# writes one) and a store directory; prints where it listens and logs connects,
# disconnects and refusals. Bad input is refused in one line, exit status
# 2 (usage) or 1 (the port, the file, the directory), never a traceback.
# Ctrl-C (or SIGTERM) closes and exits; the store needs no saving (it is
# written before each ack). SIGHUP reads --users and --acl-file again (a file
# that fails: one line, the previous kept). On a device, build a Broker in
# code instead.
import argparse
import sys

from umqtt3.broker_limits import choices, refused, span

from . import command_name
from .passwd import read_users

PROG = command_name("umqtt3.broker")  # umqtt3-broker when run as that

# The desktop profile: every limit of broker_limits.Limits (whose defaults
# are a device's), in the order of the flags and of docs/broker.md.
DESKTOP = (
    ("max_clients", 100),
    ("max_pending", 256),
    ("max_packet", 65536),
    ("txsize", 0),
    ("max_subs", 64),
    ("max_sub_bytes", 65536),
    ("max_inflight", 32),
    ("max_inflight_v5", 1024),
    ("ring_size", 0),
    ("max_qos2_in", 256),
    ("max_queued", 1000),
    ("max_queued_bytes", 16777216),
    ("mem_budget", 67108864),
    ("max_retained", 10000),
    ("max_sessions", 1000),
    ("max_id_bytes", 65535),
    ("max_will_bytes", 65536),
    ("sndbuf", 0),
    ("connect_timeout_ms", 10000),
    ("sys_interval", 10),
    ("backlog", 64),
    ("burst", 64),
    ("fanout", 500),
    ("max_aliases", 64),
    ("max_alias_bytes", 16384),
    ("max_keepalive", 0),
    ("max_levels", 0),
    ("auth_fails", 5),
    ("auth_wait_ms", 1000),
    ("auth_sources", 1024),
)
NAMES = tuple(name for name, _ in DESKTOP)

# one line of help per limit; the default is added from the profile
HELP = {
    "max_clients": "connected clients (CONNACK 3 beyond)",
    "max_pending": "connections still to send CONNECT, on top of --max-clients (the oldest goes)",
    "max_packet": "largest packet accepted, bytes; larger ones close the connection",
    "txsize": "send buffer per client, bytes (0: max packet)",
    "max_subs": "subscriptions per client (SUBACK 0x80 beyond)",
    "max_sub_bytes": "bytes of a session's subscription filters (0: no limit; SUBACK 0x80 beyond)",
    "max_inflight": "outbound QoS 1/2 messages awaiting acknowledgement per client",
    "max_inflight_v5": "the same for an MQTT 5 client: its Receive Maximum, at most this",
    "ring_size": "in-flight bytes per client (0: max packet)",
    "max_qos2_in": "inbound QoS 2 packet ids held until PUBREL per client (beyond: closed)",
    "max_queued": "messages queued per client (offline or slow); oldest QoS 0 dropped first",
    "max_queued_bytes": "bytes of messages queued per client (0: no limit); oldest QoS 0 dropped first,"
                        " then QoS 1/2 publishers refused",
    "mem_budget": "bytes of every queued (held once) and retained message (0: no limit); beyond,"
                  " QoS 0 dropped and QoS 1/2 publishers refused",
    "max_retained": "retained topics kept",
    "max_sessions": "persistent sessions kept; one more gets CONNACK 3",
    "max_id_bytes": "bytes of a client id, and of a user name (CONNACK 2, 4 beyond; 0x85, 0x86"
                    " at MQTT 5)",
    "max_will_bytes": "bytes of a will: topic, payload, MQTT 5 properties (0: no limit; beyond:"
                      " closed, CONNACK 0x97 at MQTT 5)",
    "sndbuf": "kernel send buffer per client socket, bytes (0: the OS's, autotuned)",
    "connect_timeout_ms": "milliseconds to wait for CONNECT (0: for ever)",
    "sys_interval": "seconds between $SYS updates (0: none)",
    "backlog": "connections the listening socket queues",
    "burst": "packets read from one connection per step",
    "fanout": "deliveries those packets route per step before the next connection's turn"
              " (at least one packet is read)",
    "max_aliases": "MQTT 5 topic aliases per client (0: none; beyond: DISCONNECT 0x94)",
    "max_alias_bytes": "bytes of the topics a client's topic aliases hold, and the broker's own"
                       " towards it (0: no limit; beyond: DISCONNECT 0x97, the broker sets no more)",
    "max_keepalive": "MQTT 5: longest keep alive, seconds, imposed as server keep alive (0: none)",
    "max_levels": "levels in a topic name or filter (0: any); beyond closes the connection",
    "auth_fails": "failed logins from one address before its logins wait",
    "auth_wait_ms": "that wait, milliseconds, doubled at each further failure (up to 64 times)",
    "auth_sources": "addresses whose failed logins are remembered",
}


class Refused(Exception):
    """Bad input: the message is the one line printed."""


def flag(name):
    return "--" + name.replace("_", "-")


def _count(name):
    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError("%s wants a whole number, not %r" % (flag(name), text))
        why = refused(name, v)
        if why:
            raise argparse.ArgumentTypeError(why)
        return v
    return parse


def _seconds(text):
    # --connect-timeout: --connect-timeout-ms in seconds, in its range
    # (not nan, not inf)
    most = span("connect_timeout_ms")[1] / 1000
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if not 0 <= v <= most or 0 < v < 0.001:  # (what rounds to 0 ms would mean "for ever")
        raise argparse.ArgumentTypeError("must be 0 (for ever) or a number of seconds "
                                         "0.001-%s, not %r" % (most, text))
    return v


def _port(text):
    try:
        v = int(text)
    except ValueError:
        v = -1
    if not 0 <= v <= 65535:
        raise argparse.ArgumentTypeError("--port wants 1-65535 (0: any free port), not %r" % text)
    return v


def parser():
    class Parser(argparse.ArgumentParser):
        def error(self, message):  # one line, not the usage block
            self.exit(2, "%s: %s\n" % (PROG, message))

    ap = Parser(prog=PROG, description="The umqtt3 tiny MQTT 3.1/3.1.1/5.0 broker. SIGTERM "
                                       "stops it; SIGHUP reads --users and --acl-file again.")
    ap.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    ap.add_argument("-p", "--port", type=_port, default=1883,
                    help="TCP port, 1-65535; 0 picks a free one (default 1883)")
    prof = dict(DESKTOP)
    for name in NAMES:
        ap.add_argument(flag(name), type=_count(name), default=prof[name], metavar="N",
                        help="%s (default %d)" % (HELP[name], prof[name]))
    ap.add_argument("--connect-timeout", type=_seconds, metavar="SECONDS",
                    help="the same as --connect-timeout-ms, in seconds")
    ap.add_argument("--queue-qos0", action="store_true",
                    help="also queue QoS 0 messages for offline persistent sessions (default off)")
    ap.add_argument("--queue-full", choices=choices("queue_full"), default=choices("queue_full")[0],
                    help="a QoS 1/2 message a client's full queue cannot take: refuse it to its "
                         "publisher, or drop it for that client alone, as mosquitto does "
                         "(default %s)" % choices("queue_full")[0])
    ap.add_argument("--users", metavar="FILE",
                    help="user:password lines (umqtt3-passwd, python -m umqtt3_cli.passwd, writes them); "
                         "anonymous clients are then refused (default none)")
    ap.add_argument("--allow-anonymous", action="store_true",
                    help="with --users, still accept clients without one (default off)")
    ap.add_argument("--users-allow-empty", action="store_true",
                    help="accept users-file lines with an empty password, e.g. 'guest:' "
                         "(default off: refused)")
    ap.add_argument("--users-allow-spaces", action="store_true",
                    help="accept spaces around the ':' of a users-file line, as part of the "
                         "name and password (default off: refused)")
    ap.add_argument("--unbound-client-ids", action="store_true",
                    help="with --users, let a user connect with a client id whose session is "
                         "another user's (default off: CONNACK 5 / 0x87)")
    ap.add_argument("--acl-file", metavar="FILE",
                    help="topic access per user, as mosquitto's acl_file (user, topic, pattern "
                         "lines); what it does not grant is refused (default none: all allowed)")
    ap.add_argument("--certfile", metavar="FILE",
                    help="the broker's certificate (PEM): the listener speaks TLS; with --keyfile "
                         "(default none: plain TCP)")
    ap.add_argument("--keyfile", metavar="FILE", help="the private key of --certfile (PEM)")
    ap.add_argument("--cafile", metavar="FILE",
                    help="CA certificates (PEM) that client certificates are checked against")
    ap.add_argument("--require-certificate", action="store_true",
                    help="with --cafile, refuse clients without a valid certificate (default off)")
    ap.add_argument("--store", metavar="DIR",
                    help="keep retained messages and persistent sessions here (default none)")
    ap.add_argument("--quiet", action="store_true",
                    help="do not log connects and refusals (default off)")
    # mosquitto's short options: -p and -v mean here what they mean there;
    # -c and -d do not exist here and are refused with what to use instead
    ap.add_argument("-v", "--verbose", action="store_true",
                    help="log connects, disconnects and refusals: the default, the opposite of "
                         "--quiet (as mosquitto -v)")
    ap.add_argument("-c", metavar="FILE", dest="mosquitto_conf",
                    help="refused: no mosquitto.conf is read; its settings are the flags here")
    ap.add_argument("-d", action="store_true", dest="daemon",
                    help="refused: the broker stays in the foreground")
    from umqtt3.bridge_config import add_flags
    add_flags(ap)  # --bridge-config, --bridge, --bridge-topic (docs/bridge.md)
    return ap


def limits(a):
    """The Limits the parsed arguments ask for."""
    from umqtt3.broker_limits import Limits
    kw = {name: getattr(a, name) for name in NAMES}
    if a.connect_timeout is not None:
        kw["connect_timeout_ms"] = int(a.connect_timeout * 1000)
    kw["queue_qos0"] = a.queue_qos0
    kw["queue_full"] = a.queue_full
    try:
        return Limits(**kw)
    except ValueError as e:
        raise Refused(str(e))


def not_utf8(opt, path):
    """The refusal of a file with a byte that is not UTF-8: its first such line."""
    n = 0
    try:
        with open(path, "rb") as f:
            for n, line in enumerate(f, 1):
                line.decode()
    except UnicodeError:
        return Refused("%s %s:%d: not UTF-8" % (opt, path, n))
    except OSError:
        pass
    return Refused("%s %s: not UTF-8" % (opt, path))


def tls_context(a):
    """The TLS listener's context the arguments ask for, or None."""
    if not (a.certfile or a.keyfile or a.cafile or a.require_certificate):
        return None
    if not (a.certfile and a.keyfile):
        raise Refused("--certfile and --keyfile go together")
    if a.require_certificate and not a.cafile:
        raise Refused("--require-certificate needs --cafile")
    from umqtt3.compat import tls_server
    for opt, path in (("--certfile", a.certfile), ("--keyfile", a.keyfile), ("--cafile", a.cafile)):
        if path:
            try:
                open(path, "rb").close()
            except OSError as e:
                raise Refused("%s %s: %s" % (opt, path, e.strerror or e))
    try:
        return tls_server(a.certfile, a.keyfile, a.cafile, a.require_certificate)
    except OSError as e:  # ssl.SSLError too
        raise Refused("--certfile %s / --keyfile %s: %s" % (
            a.certfile, a.keyfile, getattr(e, "reason", None) or e))


def users_file(a):
    """The users of --users (None without it); Refused names what is wrong."""
    if not a.users:
        return None
    try:
        return read_users(a.users, a.users_allow_empty, a.users_allow_spaces)
    except OSError as e:
        raise Refused("--users %s: %s" % (a.users, e.strerror or e))
    except ValueError as e:
        raise Refused("--users %s" % e)


def acl_file(a):
    """The text of --acl-file, parsed once (None without it); Refused names
    what is wrong."""
    if not a.acl_file:
        return None
    from umqtt3.broker_acl import parse
    try:
        with open(a.acl_file) as f:
            acl = f.read()
        parse(acl)
    except OSError as e:
        raise Refused("--acl-file %s: %s" % (a.acl_file, e.strerror or e))
    except UnicodeDecodeError:
        raise not_utf8("--acl-file", a.acl_file)
    except ValueError as e:
        raise Refused("--acl-file %s: %s" % (a.acl_file, e))
    return acl


def start(a, log, said=None):
    """The Broker the arguments describe, listening; Refused when it cannot."""
    from umqtt3.broker import Broker
    lim = limits(a)
    users = users_file(a)
    acl = acl_file(a)
    tls = tls_context(a)
    if a.store:
        import os
        if os.path.exists(a.store) and not os.path.isdir(a.store):
            raise Refused("--store %s: not a directory" % a.store)
    from umqtt3.bridge_config import prepare
    try:
        bridges = prepare(a, said)  # checked, and their queues squared with the store
    except UnicodeDecodeError:  # reading --bridge-config
        raise not_utf8("--bridge-config", a.bridge_config)
    except ValueError as e:
        raise Refused(str(e))
    try:
        b = Broker(host=a.host, port=a.port, limits=lim, users=users,
                   allow_anonymous=True if a.allow_anonymous else None, store=a.store, log=log,
                   tls=tls)
        b.set_acl(acl)
        b.bind_ids = not a.unbound_client_ids
        if bridges:
            from umqtt3.bridge import install
            install(b, bridges)
        return b
    except OSError as e:
        import errno
        what = "--store %s" % a.store if a.store and getattr(e, "filename", None) else None
        if what:
            raise Refused("%s: %s" % (what, e.strerror or e))
        if e.errno == errno.EADDRINUSE:
            raise Refused("port %d on %s is in use" % (a.port, a.host))
        import socket
        if isinstance(e, socket.gaierror):
            raise Refused("--host %s: unknown host (%s)" % (a.host, e.strerror or e))
        if e.errno == errno.EADDRNOTAVAIL:
            raise Refused("--host %s: not an address of this machine" % a.host)
        raise Refused("cannot listen on %s:%d: %s" % (a.host, a.port, e.strerror or e))
    except UnicodeError:
        raise Refused("--host %s: not a host name" % a.host)
    except ValueError as e:
        raise Refused("--store %s: %s" % (a.store, e) if a.store else str(e))


def new_users(b, users):
    """b's users from now on (a reload). A connected client whose user the
    new file no longer has, or has with another entry (a new password), is
    disconnected, its will sent and its session kept, as mosquitto does
    with a client its reloaded password file no longer lets in; it logs in
    again with what the file says now."""
    from umqtt3.broker_core import CONNECTED
    old = b.users or {}
    b.users = users
    for c in list(b.clients):
        if c.state == CONNECTED:
            u = b.owners.get(c.cid)  # its user (None: anonymous, with --allow-anonymous)
            if u is not None and users.get(u) != old.get(u):
                b.disconnect(c, "its user is no longer in --users, or has a new password",
                             True, 0x87)


def reload(b, a, log):
    """SIGHUP: --users and --acl-file read again, as mosquitto re-reads its
    password_file and acl_file. A file that fails to read or parse is said
    in one line and the broker keeps what it had; what did read applies at
    once: logins from now on, connected clients as new_users() and
    Core.set_acl say (the next thing each does is checked under the new
    ACL; their sessions stay)."""
    done = []
    for opt, read, apply in (("--users", users_file, lambda v: new_users(b, v)),
                             ("--acl-file", acl_file, b.set_acl)):
        try:
            v = read(a)
        except Refused as e:
            print("%s: reload: %s; the previous %s kept" % (
                PROG, e, "users" if opt == "--users" else "ACL"), file=sys.stderr, flush=True)
            continue
        if v is not None:
            apply(v)
            done.append("%s %s" % (opt, a.users if opt == "--users" else a.acl_file))
    log("reloaded %s" % (", ".join(done) if done else "nothing (no --users, no --acl-file read)"))


def serve(b, a, log):
    """b's loop until SIGTERM (or Ctrl-C). SIGHUP, what a service manager's
    reload sends (mosquitto.service's ExecReload), reloads the users and the
    ACL between two steps; where the platform has no SIGHUP, nothing."""
    import signal
    from umqtt3.broker_core import TIMER_MS
    from umqtt3.compat import on_term
    due = []  # "term" / "hup", in the order they came
    on_term(lambda: due.append("term"))  # SIGTERM: stop, the store closed
    hup = getattr(signal, "SIGHUP", None)
    if hup is not None:
        signal.signal(hup, lambda *_: due.append("hup"))
    while "term" not in due:
        b.poll_once(TIMER_MS)
        while "hup" in due:
            due.remove("hup")
            reload(b, a, log)


def main(argv=None):
    ap = parser()
    a = ap.parse_args(argv)
    if a.mosquitto_conf is not None:
        ap.error("-c %s: this broker reads no mosquitto.conf; give its settings as flags "
                 "(listener: --host/--port, max_packet_size: --max-packet, password_file: "
                 "--users, acl_file: --acl-file, persistence_location: --store; --help lists "
                 "them all)" % a.mosquitto_conf)
    if a.daemon:
        ap.error("-d: this broker does not detach; run it under a service manager (a systemd "
                 "unit) or in the background (&)")
    if a.verbose and a.quiet:
        ap.error("-v and --quiet do not go together")

    def log(msg):
        print(msg, flush=True)

    def said(cut):  # the bytes a power loss left torn: kept, and said
        d = a.store.rstrip("/") or "/"
        print("store %s/log: cut a torn tail of %d bytes at byte %d, kept in %s/log.bad"
              % (d, cut[1], cut[0], d), flush=True)

    try:
        # (with bridges, their start-up opens the store's log first)
        b = start(a, None if a.quiet else log, said)
    except Refused as e:
        print("%s: %s" % (PROG, e), file=sys.stderr, flush=True)
        return 1
    cut = b.disk and b.disk.log and b.disk.log.cut
    if cut:
        said(cut)
    print("umqtt3 broker listening on %s:%d%s" % (a.host, b.port, " (TLS)" if b.tls else ""),
          flush=True)
    try:
        serve(b, a, log)
    except KeyboardInterrupt:
        pass
    finally:
        b.close()  # the store was written before each acknowledgement
        print("umqtt3 broker stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
