# umqtt3.broker_cli -- `python -m umqtt3.broker` on the desktop.
#
# Flags for the listener, the limits, a users file (`user:password` lines,
# '#' comments) and a store directory; prints where it listens and logs
# connects, disconnects and refusals. Ctrl-C (or SIGTERM) closes and
# exits; the store needs no saving (it is written before each ack). On a device, build a Broker in code instead.
import sys


def load_users(path):
    users = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            user, sep, pw = line.partition(":")
            if not sep:
                raise ValueError("%s: want user:password lines, got %r" % (path, line))
            users[user.encode()] = pw.encode()
    return users


def parser():
    import argparse
    ap = argparse.ArgumentParser(prog="python -m umqtt3.broker",
                                 description="The umqtt3 tiny MQTT 3.1/3.1.1 broker.")
    ap.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    ap.add_argument("--port", type=int, default=1883, help="TCP port (default 1883; 0 picks a free one)")
    ap.add_argument("--max-clients", type=int, default=100, help="connected clients (CONNACK 3 beyond)")
    ap.add_argument("--max-pending", type=int, default=16,
                    help="connections still to send CONNECT, on top of --max-clients")
    ap.add_argument("--max-packet", type=int, default=65536,
                    help="largest packet accepted, bytes; larger ones close the connection")
    ap.add_argument("--max-subs", type=int, default=64, help="subscriptions per client (SUBACK 0x80 beyond)")
    ap.add_argument("--max-inflight", type=int, default=32,
                    help="outbound QoS 1/2 messages awaiting acknowledgement per client")
    ap.add_argument("--max-qos2-in", type=int, default=256,
                    help="inbound QoS 2 packet ids held until PUBREL per client (beyond: closed)")
    ap.add_argument("--max-queued", type=int, default=1000,
                    help="messages queued per client (offline or slow); oldest QoS 0 dropped first")
    ap.add_argument("--queue-qos0", action="store_true",
                    help="also queue QoS 0 messages for offline persistent sessions")
    ap.add_argument("--max-retained", type=int, default=10000, help="retained topics kept")
    ap.add_argument("--txsize", type=int, default=0, help="send buffer per client (default: max packet)")
    ap.add_argument("--ring-size", type=int, default=0,
                    help="in-flight bytes per client (default: max packet)")
    ap.add_argument("--sndbuf", type=int, default=0,
                    help="kernel send buffer per client socket, bytes (default: the OS's, autotuned)")
    ap.add_argument("--users", metavar="FILE", help="user:password lines; anonymous clients are then refused")
    ap.add_argument("--allow-anonymous", action="store_true", help="with --users, still accept clients without one")
    ap.add_argument("--store", metavar="DIR", help="keep retained messages and persistent sessions here")
    ap.add_argument("--max-sessions", type=int, default=1000,
                    help="persistent sessions kept; one more gets CONNACK 3")
    ap.add_argument("--connect-timeout", type=float, default=10.0, help="seconds to wait for CONNECT")
    ap.add_argument("--sys-interval", type=int, default=10, help="seconds between $SYS updates (0: none)")
    ap.add_argument("--quiet", action="store_true", help="do not log connects and refusals")
    return ap


def main(argv=None):
    from umqtt3.broker import Broker
    a = parser().parse_args(argv)
    users = load_users(a.users) if a.users else None

    def log(msg):
        print(msg, flush=True)

    b = Broker(host=a.host, port=a.port, max_clients=a.max_clients, max_pending=a.max_pending,
               max_packet=a.max_packet, max_subs=a.max_subs, max_inflight=a.max_inflight,
               max_qos2_in=a.max_qos2_in, max_queued=a.max_queued, queue_qos0=a.queue_qos0, max_retained=a.max_retained,
               txsize=a.txsize, ring_size=a.ring_size, users=users,
               allow_anonymous=True if a.allow_anonymous else None, store=a.store,
               max_sessions=a.max_sessions,
               connect_timeout_ms=int(a.connect_timeout * 1000), sys_interval=a.sys_interval,
               log=None if a.quiet else log, backlog=64, burst=64, sndbuf=a.sndbuf)
    print("umqtt3 broker listening on %s:%d" % (a.host, b.port), flush=True)
    try:
        import signal

        def term(*_):
            b.stop()
        signal.signal(signal.SIGTERM, term)
    except (ImportError, ValueError):
        pass
    try:
        b.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        b.close()  # the store was written before each acknowledgement
        print("umqtt3 broker stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
