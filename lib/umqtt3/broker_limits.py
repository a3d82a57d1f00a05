# umqtt3.broker_limits -- every limit of the broker, with its default, in
# one place.
#
#     lim = Limits(max_clients=4, max_packet=2048)
#
# The class attributes are the defaults, sized for a device. The desktop
# broker (umqtt3_cli/broker.py) has one flag per limit and starts from its
# own profile (DESKTOP there, so that a device holds none of it);
# tests/test_broker_cli.py checks that the profile names every limit and
# that docs/broker.md's tables agree with both. A limit that is 0 or below
# is refused unless zero_ok(), where 0 means "none" or "the default".

# 0: a size picked from max_packet, the OS's buffer, no timeout, no $SYS,
# no byte limit
def zero_ok(name):
    return name in ("txsize", "ring_size", "sndbuf", "connect_timeout_ms", "sys_interval",
                    "max_aliases", "max_keepalive", "max_levels", "max_queued_bytes",
                    "mem_budget", "max_sub_bytes", "max_alias_bytes", "max_will_bytes")


# The largest value of each limit that has one, from what it flows into: a
# Two Byte Integer of CONNACK (Server Keep Alive, Topic Alias Maximum,
# Receive Maximum: also the packet ids a client can hold), a C int
# (setsockopt, listen), a timer of ticks in ms (ticks_diff sees at most half
# the period: 2**29 - 1), MQTT's largest packet (268435455 bytes after a
# fixed header of 5), mosquitto's sys_interval range; the backoff's wait is
# capped at 2**28 ms (broker_auth); a client id and a user name are UTF-8
# strings of at most 65535 bytes (1.5.3).
_MOST = {"max_keepalive": 65535, "max_aliases": 65535, "max_qos2_in": 65535,
         "max_id_bytes": 65535,
         "sndbuf": 0x7FFFFFFF, "backlog": 0x7FFFFFFF, "connect_timeout_ms": 0x1FFFFFFF,
         "max_packet": 268435460, "sys_interval": 65535, "auth_wait_ms": 0x10000000}


# the limits that are one of a few words, the default first
_CHOICES = {"queue_full": ("refuse", "drop")}


def choices(name):
    """The words limit name may be (the default first), or None."""
    return _CHOICES.get(name)


def span(name):
    """(least, most) a limit may be; most is None for no bound. max_packet
    holds a CONNECT: 20 at least, as mosquitto's max_packet_size; a server
    takes client ids of 1 to 23 bytes [MQTT-3.1.3-5]: max_id_bytes 23 at
    least."""
    lo = 20 if name == "max_packet" else 23 if name == "max_id_bytes" else \
        0 if zero_ok(name) else 1
    return lo, _MOST.get(name)


def refused(name, v):
    """Why v cannot be the limit name ("must be ..."), or None."""
    c = _CHOICES.get(name)
    if c is not None:
        return None if v in c else "must be %s, not %r" % (" or ".join(c), v)
    lo, hi = span(name)
    if isinstance(v, int) and v >= lo and (hi is None or v <= hi):
        return None
    return "must be a whole number %s, not %r" % (
        "%d or more" % lo if hi is None else "%d-%d" % (lo, hi), v)


def grow(max_subs):
    """The most bytes a PUBLISH gains between the broker's input and a
    subscriber: a Subscription Identifier (5 at most) for each of the
    subscriber's max_subs subscriptions that matches [MQTT-3.3.4-3 (5.0)];
    the broker's own topic alias, set with the topic (3); a property length
    for an MQTT 5 subscriber of a 3.1.1 publisher, or a longer one (3 at
    most); a longer remaining length (2 at most). (A topic alias from the
    publisher is checked where it is resolved, broker5.publish_in.)"""
    return 8 + 5 * max_subs


class Limits:
    max_clients = 8  # connected clients; one more gets CONNACK 3
    max_pending = 4  # connections yet to send CONNECT, on top of max_clients (the oldest goes)
    max_packet = 1024  # largest packet accepted; also each receive buffer
    txsize = 0  # send buffer per connection (at least max_packet)
    max_subs = 16  # subscriptions per client
    max_sub_bytes = 1024  # bytes of those filters, per session (0: no limit but max_subs)
    max_inflight = 8  # outbound QoS 1/2 messages awaiting an ack, per client
    # the same for an MQTT 5 client: its Receive Maximum, at most this
    max_inflight_v5 = 8
    ring_size = 0  # bytes that hold those (at least max_packet)
    max_qos2_in = 32  # inbound QoS 2 ids held until PUBREL, per client
    max_queued = 32  # messages queued per client, offline or slow
    max_queued_bytes = 8192  # bytes those cost, per client (0: no limit but max_queued)
    mem_budget = 32768  # bytes of every queued and retained message, held once (0: none)
    max_retained = 128  # retained topics kept
    max_sessions = 16  # persistent sessions kept
    # What a connection keeps after its CONNECT, beyond its buffers (a
    # session keeps its id, offline too; a delayed will outlives it): bytes
    # of its client id, and of its user name (CONNACK 2, 4 beyond);
    max_id_bytes = 128
    # of its will: topic, payload and MQTT 5 properties (0: no limit but
    # max_packet; beyond: CONNACK 0x97 at MQTT 5, closed unanswered below)
    max_will_bytes = 256
    sndbuf = 0  # SO_SNDBUF of client sockets; 0: the OS default
    connect_timeout_ms = 10000
    sys_interval = 10  # seconds between $SYS updates
    backlog = 4  # listen() backlog
    burst = 16  # packets read from one connection per step
    fanout = 64  # deliveries those packets route per step before the next connection's turn
    max_aliases = 8  # MQTT 5 topic aliases a client may set (0: none)
    # bytes of the topics those aliases stand for, per connection, and
    # again of the broker's own aliases towards it (0: no limit)
    max_alias_bytes = 512
    max_keepalive = 0  # MQTT 5: longest keep alive, seconds, imposed in CONNACK (0: the client's)
    max_levels = 0  # levels in a topic name or filter (0: any); beyond closes
    auth_fails = 5  # failed logins from one address before it waits
    auth_wait_ms = 1000  # that wait, doubled at each further failure (up to 64 times)
    auth_sources = 16  # addresses whose failed logins are remembered
    queue_qos0 = False  # queue QoS 0 for offline persistent sessions too
    # a QoS 1/2 message that a session's full queue cannot take: "refuse"
    # it to its publisher, or "drop" it for that session alone
    queue_full = "refuse"

    def __init__(self, **kw):
        for k in kw:
            v = kw[k]
            if k == "queue_qos0":
                self.queue_qos0 = bool(v)
                continue
            if k[0] == "_" or not hasattr(Limits, k):
                raise ValueError("unknown limit %s" % k)
            why = refused(k, v)
            if why:
                raise ValueError("%s %s" % (k, why))
            setattr(self, k, v)
        # queued QoS 1/2 messages hold their packet ids too (Session.new_pid)
        if self.max_inflight + self.max_queued >= 65535:
            raise ValueError("max_inflight + max_queued must stay below 65535")
        if self.max_inflight_v5 + self.max_queued >= 65535:
            raise ValueError("max_inflight_v5 + max_queued must stay below 65535")
        # a queued message is up to max_packet bytes: a byte budget below
        # that (the device's, with a larger max_packet) is raised to it, or
        # such a message would be refused for ever
        for k in ("max_queued_bytes", "mem_budget"):
            if 0 < getattr(self, k) < self.max_packet:
                setattr(self, k, self.max_packet)
        # derived: what a connection and a session allocate. A PUBLISH of
        # max_packet grows on its way out by at most grow() bytes, so that
        # whatever is acknowledged fits both, and is delivered and kept
        g = self.max_packet + grow(self.max_subs)
        self.tx = max(self.txsize, g)
        self.ring = max(self.ring_size, g)
        self.max_frame = min(self.tx, self.ring)  # the largest frame queued
