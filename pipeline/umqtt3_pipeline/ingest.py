"""The ingest: one umqtt3 client with a persistent session that appends every
message it receives to the log and acknowledges it only once the log is
durable.

The client calls back for each message of a burst (``append_msg`` into
memory), then, before the acknowledgements of the burst leave, calls the sync
hook once: one write and one fsync for the whole group. A crash before that
fsync loses only messages that were never acknowledged, and the broker sends
them again to the persistent session [MQTT-4.4.0-1].

QoS 2 exactly once into the log: the client asks its store whether an
inbound packet id is already held (``in_has``) before it delivers, and
``LogStore`` answers from the log itself. A message record carries its
packet id; a PUBREL appends a release record, durable before PUBCOMP leaves;
recovery rebuilds the held ids from the last segment. So a PUBLISH the broker
resends after a crash (its PUBREC never left) is recognised if its record
made it to disk, and written once if it did not. docs/pipeline.md has the
whole argument.
"""
import threading
import time

from umqtt3.client import MQTTClient
from umqtt3.memstore import MemoryStore

from .cli import parse_broker
from .log import Log


# CONNACK return codes (3.1.1) and reason codes (5) that refuse a login
_REFUSED = {4: "bad user name or password", 5: "not authorized",
            0x86: "bad user name or password", 0x87: "not authorized",
            0x8C: "bad authentication method"}


def refused_login(e):
    """What a refused CONNECT says ("not authorized (135)"), or None when
    e is not such a refusal."""
    from umqtt3.client_codec import MQTTException
    if isinstance(e, MQTTException) and e.code in _REFUSED:
        return "%s (%d)" % (_REFUSED[e.code], e.code)
    return None


def read_password(path):
    """The password in a file (its first line), as bytes; None for no file."""
    if not path:
        return None
    with open(path, "rb") as f:
        return f.readline().rstrip(b"\r\n")


class LogWriteError(OSError):
    """The log could not be written (a full disk): the ingest stopped."""


class LogStore(MemoryStore):
    """The client's store: outbound as MemoryStore (the ingest publishes
    nothing at QoS 1/2), inbound QoS 2 ids held in the log."""

    def __init__(self, log, sync=None):
        super().__init__(1, 64, 0)
        self.log = log
        self.sync = sync or log.sync

    def in_add(self, pid, buf, off, n):
        pass  # the message record itself holds the id (Log.append_msg)

    def in_done(self, pid):
        pass

    def in_has(self, pid):
        # only what is durable: the client answers a known id with PUBREC at
        # once, and a record still in memory may never reach the disk; and
        # not released (in_del), as the store contract has it
        log = self.log
        return pid in log.held_durable and pid in log.held

    def in_del(self, pid):
        # durable before PUBCOMP: the client syncs after a PUBREL (set_sync)
        self.log.append_release(pid)

    def in_max(self, window):
        # the log holds every id: no bound of its own on the Receive Maximum
        # the client announces (else MemoryStore's, an empty table, gives 1)
        return window

    def in_clear(self):
        # The broker kept no session, but it has one for us from now on and
        # may send new QoS 2 messages with ids we still hold: durable at once.
        self.log.append_clear()
        self.sync()


# At MQTT 5 the client's window is its Receive Maximum: how many QoS 1/2
# messages the broker may send before it waits for acknowledgements
# [MQTT-3.3.4-9]. The client's default (8) held the ingest to 8 messages per
# fsync (measured: docs/pipeline.md); with the largest, the broker's cap is
# the limit (ours: max_inflight_v5, 1024 on the desktop; mosquitto 2.0:
# none), not its window for MQTT 3.1.1 clients (32 and 20): hence level 5
# by default. The ingest publishes nothing, so the window costs no memory.
RECEIVE_MAX = 65535

# The largest MQTT packet the ingest takes (its buffer: a message's topic,
# payload and header), by default and at most (MQTT's own limit). At MQTT 5
# the broker is told (Maximum Packet Size) and drops a larger message itself
# [MQTT-3.1.2-25], unseen by the ingest; at 3.1.1 the client discards it and
# acknowledges it (client_skip): the ingest counts those (Ingest.discarded).
MAX_PACKET = 65536
MAX_PACKET_LIMIT = 268435460  # 256 MiB of Remaining Length and the fixed header


class Ingest:
    """Ingest(path, broker, topics, client_id, qos): start() opens the log
    (the single writer) and runs the client in a background thread until
    stop(). topics: [filter, ...], all subscribed at qos."""

    def __init__(self, path, broker="127.0.0.1:1883", topics=("#",), client_id="umqtt3-spark",
                 qos=1, keepalive=30, segment_bytes=64 << 20, bufsize=MAX_PACKET, clock=time.time,
                 level=5, publish_synced=False, lock_timeout=30.0, user=None, password=None,
                 tls=None, cert=False):
        assert qos in (1, 2), "the ingest acknowledges after the log: QoS 1 or 2"
        self.path = path
        self.host, self.port = parse_broker(broker)
        self.topics = list(topics)
        self.client_id = client_id
        self.qos = qos
        self.keepalive = keepalive
        self.segment_bytes = segment_bytes
        self.bufsize = bufsize
        self.clock = clock
        self.level = level  # 5: MQTT 5 (RECEIVE_MAX, and $share/<group>/<filter>); 4: 3.1.1
        self.publish_synced = publish_synced  # for a job in another process (log.synced)
        self.lock_timeout = lock_timeout  # seconds to wait for the log's LOCK
        self.user, self.password = user, password  # the broker's login, if it wants one
        self.tls = tls  # an ssl.SSLContext (tls.context()) or None: plain TCP
        self.cert = cert  # the context holds a client certificate (for what a refusal says)
        self.log = None
        self.client = None
        self.thread = None
        self.stopping = threading.Event()
        self.error = None
        self.received = 0
        self.discarded = 0  # messages over bufsize the client discarded (3.1.1)
        self.connected = threading.Event()

    def start(self):
        self.log = Log(self.path, self.segment_bytes, publish_synced=self.publish_synced,
                       lock_timeout=self.lock_timeout)
        store = LogStore(self.log, self._sync)
        c = MQTTClient(self.client_id, self.host, self.port, user=self.user,
                       password=self.password, keepalive=self.keepalive, ssl=self.tls,
                       reconnect=True, store=store, bufsize=self.bufsize,
                       backoff_ms=(200, 5000), level=self.level, window=RECEIVE_MAX)
        c.set_callback(self._on_message, raw=True)
        c.set_sync(self._sync)
        self.client = c
        self.thread = threading.Thread(target=self._run, name="umqtt3-ingest", daemon=True)
        self.thread.start()
        return self

    def _on_message(self, pkt, redelivered):
        self.log.append_msg(pkt.topic, pkt.payload, pkt.qos, pkt.retain, pkt.dup, pkt.pid,
                            int(self.clock() * 1000))
        self.received += 1

    def _sync(self):
        # the client's hook before acknowledgements leave. A failed write or
        # fsync (a full disk) leaves the log at its last durable end
        # (Log.sync); the client would take the OSError for a lost link and
        # reconnect for ever: stop, and say why through check()
        try:
            self.log.sync()
        except OSError as e:
            if self.error is None:
                self.error = LogWriteError("the log %s cannot be written: %s" % (self.path, e))
            self.stopping.set()
            raise

    def _run(self):
        c = self.client
        try:
            while not self.stopping.is_set():
                try:
                    c.connect(clean_session=False)
                    for t in self.topics:
                        c.subscribe(t, self.qos)  # kept by the session from now on
                    break
                except OSError as e:
                    c.disconnect()
                    # a broker that fails or refuses the handshake does so
                    # again, one on a TLS port refuses plain MQTT for ever:
                    # say why (check()) instead of trying on
                    from .tls import TLSRefused, alpn_of, plain_refused, probe, refused
                    if self.tls is not None:
                        why = (refused(e, self.host, self.port, self.cert, alpn_of(self.tls)) or
                               probe(self.tls, self.host, self.port, self.cert))
                    else:
                        why = plain_refused(self.host, self.port)
                    if why:
                        self.error = TLSRefused(why)
                        return
                    self.stopping.wait(0.5)  # broker not up yet: keep trying
            else:
                return
            self.connected.set()
            while not self.stopping.is_set():
                c.poll(50)
                if c.too_large != self.discarded:
                    self._discards(c.too_large)
        except BaseException as e:  # reported by check(), on Spark's next call
            self.error = e
        finally:
            try:
                self.log.sync()
            except OSError as e:
                if self.error is None:
                    self.error = LogWriteError("the log %s cannot be written: %s" % (self.path, e))

    def _discards(self, n):
        # said where the pipeline's lines go (the job's or the ingest's stderr)
        import sys
        print("umqtt3 ingest: %d message(s) larger than %d bytes discarded (acknowledged, not "
              "logged: --max-packet), %d in all" % (n - self.discarded, self.bufsize, n),
              file=sys.stderr, flush=True)
        self.discarded = n

    def check(self):
        if isinstance(self.error, LogWriteError):
            raise LogWriteError("umqtt3 ingest stopped: %s" % self.error)
        from .tls import TLSRefused
        if isinstance(self.error, TLSRefused):
            raise RuntimeError("umqtt3 ingest stopped: %s" % self.error)
        why = refused_login(self.error)
        if why:
            raise RuntimeError("umqtt3 ingest stopped: the broker at %s:%d refused the login: %s"
                               % (self.host, self.port, why))
        if self.error is not None:
            raise RuntimeError("umqtt3 ingest stopped: %r" % (self.error,))

    def pause(self):
        """Stop receiving and keep the log open for reading; the session
        stays, so the broker queues for us from now on."""
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(10)
        if self.client is not None:
            try:
                self.client.disconnect()
            except OSError:
                pass

    def stop(self):
        """Stop receiving and close the log."""
        self.pause()
        if self.log is not None:
            self.log.close()
            self.log = None


def shared(topics, group):
    """The filters as one MQTT 5 shared subscription of group [MQTT-4.8.2-1]."""
    return ["$share/%s/%s" % (group, t) for t in topics]


def main(argv=None):
    """Run the ingest alone (no Spark): fill the log until SIGTERM/Ctrl-C.
    With --share several of them, on one host or several, split the
    messages of one MQTT 5 shared subscription, each into its own log
    (--log ROOT/NAME); the job reads them all with --ingest external --log
    ROOT, or the batch reader later."""
    import signal
    import sys
    from .cli import (Help, Parser, add_tls, broker_address, client_id, client_id_note,
                      made_dirs, needs_user, reachable, tls_checked,
                      topic_filters, usable_dir, utf8)
    ap = Parser(prog="python -m umqtt3_pipeline.ingest", description=main.__doc__,
                formatter_class=Help)
    ap.add_argument("--log", required=True)
    ap.add_argument("--broker", type=broker_address, default="127.0.0.1:1883", help="host:port")
    ap.add_argument("--topics", default="umqtt3/+/+", type=topic_filters,
                    help="comma-separated filters")
    ap.add_argument("--qos", type=int, default=1, choices=(1, 2))
    ap.add_argument("--client-id", default="umqtt3-ingest", type=client_id,
                    help="fixed and different for each ingest: it names the broker session "
                    "(up to 23 characters: what every server takes)")
    ap.add_argument("--user", type=utf8, help="the user name the broker wants, if any")
    ap.add_argument("--password-file", metavar="FILE",
                    help="a file whose first line is the password for --user")
    add_tls(ap)
    ap.add_argument("--share", metavar="GROUP",
                    help="subscribe as a member of the shared subscription $share/GROUP/... "
                    "(MQTT 5)")
    ap.add_argument("--level", type=int, choices=(4, 5), default=5,
                    help="MQTT 5 (default: the broker's window is the ingest's Receive Maximum, "
                    "up to the broker's cap) or 3.1.1 (4: the broker's --max-inflight), for a "
                    "broker without MQTT 5")
    add_max_packet(ap)
    a = ap.parse_args(argv)
    needs_user(ap, a)
    if a.share is not None and (not a.share or "/" in a.share or "+" in a.share or "#" in a.share):
        ap.error("--share %r: a group name has no '/', '+' or '#' [MQTT-4.8.2-2]" % a.share)
    level = a.level
    if a.share and level != 5:
        ap.error("--share needs MQTT 5 (--level 5)")
    usable_dir(ap, "--log", a.log)
    ctx = tls_checked(ap, a)
    try:
        password = read_password(a.password_file)
    except OSError as e:
        ap.error("--password-file %s: %s" % (a.password_file, e.strerror or e))
    reachable(ap, a.broker)
    made_dirs(ap, [("--log", a.log)])
    note = client_id_note("umqtt3-pipeline", a.client_id)
    if note:
        print(note, file=sys.stderr)
    topics = [t for t in a.topics.split(",") if t]
    if a.share:
        topics = shared(topics, a.share)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    ing = Ingest(a.log, a.broker, topics, a.client_id, a.qos, level=level,
                 publish_synced=True, lock_timeout=2.0, user=a.user, password=password,
                 tls=ctx, cert=bool(a.cert), bufsize=a.max_packet)
    try:
        ing.start()
    except BlockingIOError:
        ap.error("--log %s: in use by another process (it holds the log's LOCK)" % a.log)
    except OSError as e:  # a corrupt log (log.Corrupt), a directory it cannot write
        print("umqtt3-pipeline: %s" % e, file=sys.stderr)
        return 1
    try:
        while not stop.is_set() and ing.error is None:
            if ing.connected.is_set():
                print("ready", flush=True)
                break
            stop.wait(0.05)
        while not stop.is_set() and ing.error is None:
            stop.wait(0.2)
    except KeyboardInterrupt:
        pass
    ing.stop()
    try:
        ing.check()
    except (OSError, RuntimeError) as e:
        print("umqtt3-pipeline: %s" % e, file=sys.stderr)
        return 1
    print("umqtt3 ingest: stopped; %d messages logged, %d discarded (larger than --max-packet "
          "%d)" % (ing.received, ing.discarded, a.max_packet), flush=True)
    return 0


def add_max_packet(ap):
    """--max-packet, as the job and the ingest take it."""
    from .cli import max_packet
    ap.add_argument("--max-packet", type=max_packet, default=MAX_PACKET, metavar="BYTES",
                    help="the largest MQTT packet (topic, payload, header) the ingest takes: "
                    "at MQTT 5 the broker drops a larger message (unseen), at 3.1.1 the ingest "
                    "discards it, acknowledged, and says so on stderr")


if __name__ == "__main__":
    raise SystemExit(main())
