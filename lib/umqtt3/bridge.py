# umqtt3.bridge -- the broker's bridges: each a connection to an upstream
# broker that carries messages out and in by topic rules, and loses nothing
# across uplink outages and power loss (docs/bridge.md).
#
#     undo_cut(store)                     # before the broker loads its store
#     b = Broker(store=store, ...)
#     install(b, [{"name": "up", "host": "10.0.0.2",
#                  "rules": ["sensors/# out 2 gw/ site1/"]}])
#     b.serve_forever()
#
# Imported only when a bridge is configured: a broker without one never
# loads it. The broker calls four hooks of the Hub installed as core.bridge:
# route(r) for every message it routes, before any subscriber gets it (an
# `out` rule's QoS 1/2 message goes on the bridge's queue there, so it is
# on the store in the same commit as the node's acknowledgement, or is
# refused before anybody got it); step(now) once per poll step (the
# upstream clients' I/O and the forwarding); sys(pub) with the $SYS figures;
# close(). The upstream side is umqtt3.client.MQTTClient, used through its
# public API only (a subclass of it adds mosquitto's bridge bit to CONNECT,
# _up_class): it does the upstream I/O and keeps what it took in its own
# store until the upstream broker acknowledged it. The bridge dials
# itself, without blocking the broker's loop (compat.aio: a TCP connect
# checked each step, the TLS handshake run step by step), with its own
# backoff, and hands the connected socket to the client.
from .topic import match_span
from .codec import MQTTError
from .client_codec import Busy, StoreFull, MQTTException, put_header
from .compat import ticks_diff, ticks_add, ticks_ms, copy
from .bridge_queue import Queue, RamFiles, undo, marks, client_files
from .broker_session import mark_late, unmark_late

OUT = 1
IN = 2
BOTH = 3

# what the settings take (docs/bridge.md's settings table; checked in bridge_settings)
MAX_WINDOW = 1024  # in flight upstream at most: 13 bytes of RAM a slot in the client's MemoryStore
MIN_KEEPALIVE = 5  # seconds; lower (0: off) is raised to it, as mosquitto does
PRIMARY_RETRY_MS = 5000  # on a secondary address: how often the main one is tried (mosquitto 2.0's)


class Rule:
    """One `topic PATTERN [out|in|both [QOS [LOCAL-PREFIX REMOTE-PREFIX]]]`
    line (mosquitto's form; "" writes an empty prefix)."""

    def __init__(self, pattern, direction, qos, local, remote):
        self.dir = direction
        self.qos = qos
        self.local = local  # the prefixes as bytes
        self.remote = remote
        self.lf = local + pattern  # the filter on each side
        self.rf = remote + pattern

    def takes(self, buf, off, n):
        """Whether this rule takes the local topic buf[off:off+n] up."""
        return bool(self.dir & OUT) and match_span(self.lf, 0, len(self.lf), buf, off, n)

    def takes_below(self, levels):
        """Whether this rule takes up some local topic below levels (a
        tuple of topic levels, bytes, no wildcards), as $SYS/broker/load/
        for (b"$SYS", b"broker", b"load"). A wildcard in the first level
        matches no topic starting with "$" [MQTT-4.7.2-1]."""
        if not self.dir & OUT:
            return False
        parts = self.lf.split(b"/")
        for i in range(len(levels)):
            if i >= len(parts):
                return False
            x = parts[i]
            dollar = not i and levels[0][:1] == b"$"
            if x == b"#":
                return not dollar
            if x != levels[i] and (x != b"+" or dollar):
                return False
        return len(parts) > len(levels)

    def out_topic(self, buf, off, n):
        """The upstream topic of the local topic buf[off:off+n], or None."""
        if not self.takes(buf, off, n):
            return None
        k = cut(self.local, buf, off, n)
        return self.remote + bytes(buf[off + k:off + n])

    def in_topic(self, topic):
        if not (self.dir & IN and match_span(self.rf, 0, len(self.rf), topic, 0, len(topic))):
            return None
        return self.local + topic[cut(self.remote, topic, 0, len(topic)):]


def address(v):
    """(host, port) of `host[:port]` (port 0: the default); an IPv6
    literal in brackets, with its port or without, or bare with a port
    (as mosquitto: `::1` alone is refused)."""
    if v[:1] == "[" and v[-1:] == "]":
        host, _, port = v[1:-1], "", ""
    else:
        host, _, port = v.rpartition(":")
        if not _:
            host = v
    h = host.strip("[]")
    if h.split() != [h]:
        # empty (`[]`, `:1883`) or with whitespace: refused as `host ""` is
        raise ValueError("address %r: no host, or whitespace in it" % v)
    if not _:
        return h, 0
    if host[-1:] == ":":
        raise ValueError("address %s: an IPv6 address needs its port: [ADDR]:PORT" % v)
    if not port.isdigit():
        raise ValueError("address %s: port %r is not a whole number" % (v, port))
    if not 0 < int(port) < 65536:
        raise ValueError("address %s: port outside 1-65535" % v)
    return h, int(port)


def settings(cfg, files=True):
    """bridge_settings.DEFAULTS with cfg on top, checked; ValueError names
    what is wrong. files=False: the certificate files are named but not
    read (a deploy checks a board's configuration on another machine)."""
    return _checks("settings", cfg, files)


def parse_rule(line):
    """A Rule from the words after `topic`; ValueError says what is wrong."""
    return _checks("parse_rule", line)


def _checks(name, *a):
    # bridge_settings' function name(*a), the module dropped again after
    # the call (from sys.modules and from the package): it runs at boot
    # only, and a module kept loaded keeps its code in RAM for good
    import sys
    from . import bridge_settings
    try:
        return getattr(bridge_settings, name)(*a)
    finally:
        del sys.modules["umqtt3.bridge_settings"]
        delattr(sys.modules["umqtt3"], "bridge_settings")


class Bridge:
    """One upstream connection: its rules, its queue, its client."""

    # links closed for a QoS 2 burst over inflight_in and dialled again at
    # once (_poll); a class attribute until the first
    relinks = 0
    # bit k: the will in the broker's late slot k has gone up this bridge
    # (broker_session.mark_late, Hub.route); a class attribute until one has
    got_late = 0

    def __init__(self, core, cfg, files, store_dir, client_store):
        self.core = core
        self.cfg = cfg
        self.name = cfg["name"]
        self.rules = cfg["rules"]
        self.q = Queue(files, store_dir + "/b" + self.name, cfg["queue_size"])
        self.q0 = []  # QoS 0 messages waiting: (topic, payload, retain, props, since)
        self.since = {}  # key: when a queued message with properties came (its expiry)
        self.hold = -1  # the key of one that waits for the link (forward)
        self.client = None
        self.cstore = client_store
        self.up = False
        self.started = False
        self.subscribed = False
        self.todo = []  # `in` rules still to subscribe
        self.pid = 0  # the packet id of the SUBSCRIBE on its way
        self.pid_in = 0  # the packet id of the last QoS 2 message from upstream
        # `in` at QoS 2 with a store: the tag of the routing under way, and
        # the marks (upstream packet ids) to remove before the next PUBREC
        self.durable = store_dir != ""
        self.tag = -1
        self.marked = []
        self.tbuf = None  # an upstream topic with the local prefix (_in)
        self.scr = ({}, {})  # type: tuple  # _scratch's buffers
        self.handed = False  # put() handed a message to the client
        self.t_sent = 0  # when forward() last handed something on
        self.t_recv = 0  # when the client last handled a packet from upstream
        # $SYS figures
        self.sent = 0  # messages the upstream client took
        self.received = 0  # messages from upstream routed here
        self.dropped = 0  # QoS 0 messages dropped, oldest first, while full
        self.refused = 0  # QoS 1/2 messages refused, queue full
        self.held = 0  # a node's QoS 1/2 messages held, queue full, uplink up (waits)
        self.too_large = 0  # messages larger than the upstream takes, dropped
        self.expired = 0  # messages whose Message Expiry passed while they waited
        self.connects = 0
        self.refusals = 0  # connections the upstream refused (CONNACK)
        # the link: dialled here, step by step; then the client's
        self.linked = False  # the client has a link (CONNECT sent, or up)
        self.sock = None  # the socket being dialled
        self.look = None  # the name lookup under way (compat.aio.lookup_start)
        self.addr = None  # its result, kept until an attempt fails
        self.shaking = False  # sock: TCP connected, TLS handshake under way
        self.t_dial = 0
        self.tries = 0  # failed attempts since the last connection
        self.retry_at = 0
        # the upstream's addresses, the main one first, each (host, port);
        # at: the one dialled or connected (docs/bridge.md "Several
        # upstream addresses")
        p = 8883 if cfg["tls"] else 1883
        a = cfg["addresses"]
        a = [address(x) for x in a] if a else [(cfg["host"], cfg["port"])]
        self.addrs = [(h, n or p) for h, n in a]
        self.at = 0  # (always 0 here; bridge_failover.Failover moves it)
        self.leaving = False  # (Failover) the main address is back: leaving the secondary
        # the will's flags: lowered when an MQTT 5 upstream refuses the
        # connection for them (CONNACK 0x9A, 0x9B), as mosquitto's bridge does
        self.w_retain = cfg["outgoing_retain"]
        self.w_qos = 1
        self.retain = cfg["outgoing_retain"]  # False: messages go up without the flag
        # whether the upstream may send the bridge its own messages back: at
        # 3.1.1 without the bridge bit (try_private false, or refused); see
        # Hub.route and _private
        self.echo = cfg["level"] == 4 and not cfg["try_private"]

    # ------------------------------------------------------------ out
    def match(self, r):
        """The first `out` rule that takes the local message r
        (broker_session.Route), or None."""
        for rule in self.rules:
            if rule.takes(r.tsrc, r.toff, r.tn):
                return rule
        return None

    def full(self, rule, r):
        q = r.qos if r.qos < rule.qos else rule.qos
        return q > 0 and self.q.full()

    def waits(self):
        """True while a node's QoS 1/2 message that the full queue cannot
        take is held rather than refused: the uplink is up (and not
        leaving a secondary address), so the upstream's acks make room."""
        return self.up and not self.leaving and self.q.full()

    def put(self, rule, r):
        """r on its way up: straight to the upstream client while the
        uplink is up and nothing of its kind waits (no allocation, see
        _direct): QoS 0 always, QoS 1/2 on a bridge without a store; else
        on the queue: QoS 1/2 on the store (durable with the commit before
        the node's acknowledgement), QoS 0 in RAM, the oldest dropped when
        there is no room (queue_qos0: what may wait, not what goes up)."""
        q = r.qos if r.qos < rule.qos else rule.qos
        if self.up and not self.leaving and not self.q0 and \
                (q == 0 or not (self.durable or self.q.keys)) and self._direct(rule, r, q):
            return
        t = rule.out_topic(r.tsrc, r.toff, r.tn)
        pl = bytes(r.psrc[r.poff:r.poff + r.pn])
        pr = self._props(r)
        if q == 0:
            q0 = self.q0
            if len(q0) >= self.cfg["queue_qos0"]:
                self.dropped += 1
                if not q0:
                    return
                q0.pop(0)
            q0.append((t, pl, r.retain, pr, ticks_ms()))
        elif self.q.full():
            self.refused += 1  # the broker's own message (a will, $SYS): not queued
        else:
            k = self.q.add(r.tag, q, r.retain, t, pl, pr)
            if pr is not None:
                self.since[k] = ticks_ms()

    def _props(self, r):
        # MQTT 5: a node's properties go up as they came [MQTT-3.3.2-17]
        # [MQTT-3.3.2-18] [MQTT-3.3.2-19] [MQTT-3.3.2-20] (the broker took
        # its Topic Alias off); a 3.1.1 upstream takes none. Only a message
        # that has them allocates their copy.
        if r.prs is None or not r.prn or self.cfg["level"] != 5:
            return None
        return bytes(r.prs[r.pro:r.pro + r.prn])

    def _direct(self, rule, r, q):
        # r to the client now; False when it did not take it (Busy: its
        # window or send buffer is full; the link broke first). With a
        # store the queue's record is what a power loss cannot undo, so
        # QoS 1/2 come here only on a bridge without one (its queue would
        # only be RAM); QoS 0 on every bridge (it never waits on the store).
        c = self.client
        rem = rule.remote
        k = cut(rule.local, r.tsrc, r.toff, r.tn)
        n = len(rem)
        t = self._scratch(0, n + r.tn - k)
        copy(t, 0, rem, 0, n)
        copy(t, n, r.tsrc, r.toff + k, r.tn - k)
        pl = self._scratch(1, r.pn)
        copy(pl, 0, r.psrc, r.poff, r.pn)
        if q > c.max_qos:
            q = c.max_qos
        held = c.inflight()
        try:
            c.publish(t, pl, r.retain and self.retain and c.retain_ok, q, None, False,
                      self._props(r))
        except Busy:
            return False
        except (OSError, MQTTError) as e:
            if isinstance(e, MQTTError) and e.code == 0x95:
                self._too_large(t)
                return True
            if not (q and c.inflight() > held):
                return False
            # stored before the link broke: the client sends it once linked
        self.sent += 1
        self.handed = True
        return True

    def _scratch(self, i, n):
        # An n-byte buffer for the client's publish(), which takes whole
        # objects (a memoryview slice of the node's packet would allocate
        # on MicroPython) and copies them before it returns: kept for up to
        # 8 lengths of up to 256 bytes, so that a gateway's steady traffic
        # (the same topics, readings of the same few lengths) allocates
        # nothing. i: 0 topics, 1 payloads.
        d = self.scr[i]
        b = d.get(n)
        if b is None:
            b = bytearray(n)
            if n <= 256 and len(d) < 8:
                d[n] = b
        return b

    def forward(self):
        """Hand queued messages to the upstream client, oldest first, while
        it has room. A message leaves the queue once the client stored it
        (accepted(key)): from then on the client sends it until the
        upstream broker acknowledged it, across reconnects and restarts.
        They are only queued (Core.queue): step() sends the burst, after
        one sync of the client's records (set_sync, _sync)."""
        c = self.client
        q = self.q
        n = 0
        # Only once the upstream's limits are known (a CONNACK since the
        # start), so that a message goes to the client as the upstream
        # takes it; what the client holds when the next connection's limits
        # are lower, its resend hands to _lower.
        if self.leaving:
            return 0  # leaving a secondary: the rest goes to the main address (bridge_failover)
        while q.keys and self.connects:
            k = q.keys[0]
            if not c.accepted(k):
                if k == self.hold and not self.up:
                    break
                qos, retain, topic, payload, pr = q.entry(k)
                if pr is not None:
                    t0 = self.since.get(k)
                    if t0 is None:
                        t0 = self.since[k] = ticks_ms()  # queued before a restart
                    if not self.up and _expiry_at(pr) >= 0:
                        # a message that may expire waits here, not in the
                        # client's store, until the link is up: it goes
                        # with the time it has left then (the client
                        # would resend it as it took it)
                        self.hold = k
                        break
                    pr = self._expiry(pr, t0)
                    if pr is None:
                        q.remove(k)
                        del self.since[k]
                        continue
                try:
                    self._queue(topic, payload, retain, qos, k, pr)
                except Busy:
                    break
                except (OSError, MQTTError) as e:
                    if isinstance(e, MQTTError) and e.code == 0x95:
                        q.remove(k)  # dropped, counted; the queue goes on
                        self._too_large(topic)
                        continue
                    if not c.accepted(k):
                        break
            q.remove(k)
            self.since.pop(k, None)
            self.sent += 1
            n += 1
        q0 = self.q0
        while q0 and self.up:
            t, pl, ret, pr, t0 = q0[0]
            if pr is not None:
                pr = self._expiry(pr, t0)
                if pr is None:
                    q0.pop(0)
                    continue
            try:
                self._queue(t, pl, ret, 0, None, pr)
            except Busy:
                break
            except MQTTError as e:
                if e.code != 0x95:
                    break
                q0.pop(0)
                self._too_large(t)
                continue
            except OSError:
                break
            q0.pop(0)
            self.sent += 1
            n += 1
        return n

    def _expiry(self, pr, t0):
        # A message with a Message Expiry Interval that waited since t0:
        # None when it expired meanwhile (not sent [MQTT-3.3.2-5], counted
        # in `expired`), else its properties with the time left
        # [MQTT-3.3.2-6]. (The time before a restart is not known: a
        # message queued then counts from the start.)
        i = _expiry_at(pr)
        if i < 0:
            return pr
        left = (pr[i] << 24) | (pr[i + 1] << 16) | (pr[i + 2] << 8) | pr[i + 3]
        left -= ticks_diff(ticks_ms(), t0) // 1000
        if left <= 0:
            self.expired += 1
            return None
        b = bytearray(pr)
        b[i] = left >> 24
        b[i + 1] = (left >> 16) & 255
        b[i + 2] = (left >> 8) & 255
        b[i + 3] = left & 255
        return b

    def _queue(self, topic, payload, retain, qos, key, props=None):
        # to the client within what the upstream takes, as mosquitto's
        # bridge sends: the QoS lowered to its Maximum QoS [MQTT-3.2.2-11],
        # the retain flag cleared where it keeps none [MQTT-3.2.2-14] (or
        # with bridge_outgoing_retain false, mosquitto's meaning); a
        # packet above its Maximum Packet Size raises MQTTError 0x95
        # [MQTT-3.2.2-15]. (At 3.1.1, and before any CONNACK, the client's
        # limits are 2, yes and none.)
        c = self.client
        if qos > c.max_qos:
            qos = c.max_qos
        c.queue(topic, payload, retain and self.retain and c.retain_ok, qos, key, props)

    def _lower(self, body, rc):
        # The client's resend (Core.lower): a message it took under the
        # last connection's limits that the new one's refuse. Too large
        # [MQTT-3.2.2-15]: dropped and counted, as in forward(). Above the
        # Maximum QoS [MQTT-3.2.2-11] or retained where none is kept
        # [MQTT-3.2.2-14]: the same PUBLISH lowered, as _queue lowers a new
        # one, under its packet id: where the upstream still takes QoS 2 it
        # knows the id and takes the message once [MQTT-4.3.3-2]. At QoS 0
        # without the id (the client sends it once and forgets it).
        i = 1
        while body[i] & 0x80:
            i += 1
        i += 1  # the topic's length
        t = i + 2 + ((body[i] << 8) | body[i + 1])  # past the topic
        if rc == 0x95:
            self._too_large(body[i + 2:t])
            return None
        c = self.client
        q = (body[0] >> 1) & 3
        if q > c.max_qos:
            q = c.max_qos
        h = 0x30 | q << 1 | (body[0] & 1 if c.retain_ok else 0)
        if q:
            b = bytearray(body)
            b[0] = h
            return b
        b = bytearray(len(body))
        o = put_header(b, 0, h, len(body) - i - 2)  # the packet id left out
        n = o + t - i
        b[o:n] = body[i:t]
        e = n + len(body) - t - 2
        b[n:e] = body[t + 2:]
        return b[:e]

    def _too_large(self, topic):
        # dropped, never sent: the upstream would close the link on it and
        # the queue behind it would wait for good (mosquitto's bridge drops
        # such a PUBLISH too). Without a Maximum Packet Size: a remote
        # prefix made it larger than the client's send buffer takes.
        self.too_large += 1
        log = self.core.log
        if log is not None:
            n = self.client.max_packet
            log("bridge %s: dropped %s: larger than %s" % (
                self.name, bytes(topic).decode(),
                "the upstream's Maximum Packet Size %d" % n if n else "the send buffer"))

    # ------------------------------------------------------------ in
    def _in(self, pkt, redelivered):
        # The client's callback for every message from upstream. A QoS 2
        # one is routed under a mark (Queue.mark: its packet id and the tag
        # of its local copies), written after the client's record of the
        # message (in_add) and before the routing; the client then records
        # the delivery (in_done), and _sync removes the mark and makes it
        # all durable before the PUBREC leaves. The writes reach the disk
        # in that order (one log whose prefix survives a power loss, or
        # files synced one by one), so a power loss before the delivery's
        # record finds the mark and the client's undelivered record, and
        # undo_cut takes the copies back before the client hands the
        # message over again; after it, the mark is only removed. So a local
        # subscriber gets it once [MQTT-4.3.3-2]; QoS 1 at least once.
        # The topic and the payload stay spans of the client's buffer (the
        # local prefix goes in self.tbuf): nothing is allocated per message.
        buf = pkt.buf
        to = pkt.topic_off
        tn = pkt.topic_len
        if pkt.qos == 2:
            self.pid_in = pkt.pid  # (Failover: held until its PUBREL, see secondary())
        for rule in self.rules:
            rf = rule.rf
            if not (rule.dir & IN and match_span(rf, 0, len(rf), buf, to, tn)):
                continue
            k = cut(rule.remote, buf, to, tn)
            loc = rule.local
            n = len(loc)
            if n:
                tb = self.tbuf
                if tb is None or len(tb) < n + tn - k:
                    tb = self.tbuf = bytearray(n + tn - k + 64)  # grows to the longest topic
                copy(tb, 0, loc, 0, n)
                copy(tb, n, buf, to + k, tn - k)
                ts, toff = tb, 0
            else:
                ts, toff = buf, to + k
            q = pkt.qos if pkt.qos < rule.qos else rule.qos
            core = self.core
            hub = core.bridge
            if q == 2 and self.durable:
                self.tag = core.disk.tag()
                self.q.mark(pkt.pid, self.tag)
                if pkt.pid not in self.marked:
                    self.marked.append(pkt.pid)  # removed once recorded (_sync)
            se = core.store_errors
            prs = None
            if pkt.props_len:
                # MQTT 5: the properties go on as they came [MQTT-3.3.2-17]
                # [MQTT-3.3.2-18] [MQTT-3.3.2-19] [MQTT-3.3.2-20] (the
                # expiry already counted down upstream [MQTT-3.3.2-6]; no
                # Topic Alias, the client allows none, and no Subscription
                # Identifier, it asks for none). Only a message that has
                # them allocates their copy.
                o = pkt.props_off
                prs = bytes(buf[o:o + pkt.props_len])
            hub.injecting = self  # not sent back out over this bridge (loop rule)
            try:
                core.publish_span(ts, toff, n + tn - k, buf, pkt.payload_off, pkt.payload_len,
                                  q, pkt.retain, prs)
            except MQTTError as e:
                # another bridge's queue is full (Hub.route): nothing routed,
                # so nothing acknowledged [MQTT-4.3.2-3] [MQTT-4.3.3-2]:
                # the client drops the link and the upstream sends the
                # message again on the next one [MQTT-4.4.0-1]
                # What this read routed before it is acknowledged first
                # (the sync hook commits it), so that the next link does not
                # bring it back ahead of this one, again and again.
                log = core.log
                if log is not None:
                    log("bridge %s: not taken from upstream: %s" % (self.name, e.reason))
                try:
                    self.client.send()
                except OSError:
                    pass  # the upstream sends those again too: at least once
                raise OSError(105)
            finally:
                hub.injecting = None
                self.tag = -1
            # (committed by _sync before the acknowledgement leaves, with the
            # client's inbound record: the same log, or files synced in
            # this order; see bridge_queue.client_files)
            if core.store_errors != se:
                # not on the store: no acknowledgement; the client drops
                # the link and the upstream sends it again
                raise OSError(5)
            self.received += 1
            return

    def _sync(self):
        # The client's sync hook: runs before its acknowledgements, its
        # queued PUBLISHes and its PUBRELs leave, after it recorded the
        # deliveries (in_done) of what _in routed. One commit for the
        # burst: the routings (group commit), the client's records (in the
        # broker's log, bridge_queue.client_files: its outbound messages
        # and PUBRECs before the PUBLISH or PUBREL leaves, the release of
        # an id before its PUBCOMP, or a reuse of the id could meet the
        # old record) and the removal of the marks; nothing to do when
        # nothing is pending. OSError: the client drops the link with what
        # it had to send unsent. With a store, what the queue holds and the
        # client's window has room for joins the burst first (forward():
        # only queued, so it leaves with these bytes): PUBRELs and new
        # PUBLISHes under one sync.
        if self.up and self.durable and self.q.keys and self.forward():
            self.handed = True
        m = self.marked
        if m:
            for pid in m:
                try:
                    self.q.unmark(pid)
                except OSError:
                    pass  # gone already, or the disk fails: undo_cut sorts it out
            del m[:]
        self._commit()

    def _commit(self):
        # the broker's store: durable now (its log: also the client's
        # records, see bridge_queue.client_files); OSError when it failed,
        # or the heap was spent in it (Core.commit)
        if not self.core.commit():
            raise OSError(5)

    # ------------------------------------------------------------ the link
    def start(self):
        cfg = self.cfg
        # reconnect=False: the client never dials by itself (it would block
        # the broker's loop); step() dials and hands it the socket. While
        # there is no link the flag is up (_down), so that the client stores
        # the QoS 1/2 messages it takes meanwhile: it sends them once linked
        # (connect_start puts the flag down again)
        cs = self.cstore
        size = self.core.limits.max_packet + 64  # the client's buffers
        if cs is None:
            # in RAM (no store): window slots sharing one pool that holds
            # at least the largest PUBLISH the client can send (its send
            # buffer), or a larger message would wait at the head of the
            # queue for good; room for inflight_in inbound QoS 2 ids
            from .memstore import MemoryStore
            w = cfg["window"]
            pool = size if size > 1024 else 1024
            cs = MemoryStore(w, (pool + w - 1) // w, cfg["inflight_in"])
        c = self.client = _up_class()(
            cfg["client_id"], cfg["host"], cfg["port"], cfg["user"], cfg["password"],
            cfg["keepalive"], cfg["tls"], level=cfg["level"], store=cs,
            window=cfg["window"], bufsize=size, reconnect=False,
            timeout_ms=cfg["timeout_ms"], backoff_ms=cfg["backoff_ms"],
            session_expiry=0xFFFFFFFF if cfg["level"] == 5 else None,
            connect_link=cfg["link"])
        if cfg["try_private"] and cfg["level"] == 4:
            c.bit = 0x80  # until the upstream refuses it (_private)
        c.set_callback(self._in, True)
        c.set_sync(self._sync)
        c.lower = self._lower  # what it holds goes within the next connection's limits
        st = cfg["status_topic"]
        if st:
            c.set_last_will(st, b"0", self.w_retain, 1)  # [MQTT-3.1.2-8] (see _refused)
        c.reconnect = True  # no link yet: see above
        self.started = True
        self._state(b"0")  # not up yet (a value kept from before is stale)

    def _dial(self, now):
        # one step of opening the uplink, never waiting: start a TCP
        # connect, see whether it finished, step the TLS handshake, then
        # the client sends CONNECT on the socket; OSError when it failed
        cfg = self.cfg
        c = self.client
        if cfg["link"] is not None:
            self._commit()  # what the client holds, durable before it is resent
            c.connect_start(False)  # a persistent upstream session [MQTT-3.1.2-4]
            self.linked = True
            return
        from .compat.aio import (lookup_start, lookup_done, dial_addr, dial_done, tls_start,
                                 tls_step)
        s = self.sock
        if s is None:
            ai = self.addr
            if ai is None:
                # the name lookup: on CPython in a worker thread, looked at
                # each step; on MicroPython done here, blocking (no
                # asynchronous resolver). Its result serves every attempt
                # until one fails.
                if self.look is None:
                    self.t_dial = now
                    c.server, c.port = self.addrs[self.at]  # (its public umqtt fields)
                    self.look = lookup_start(c.server, c.port)
                ai = lookup_done(self.look)  # OSError: the name does not resolve
                if ai is None:
                    self._late(now, self.t_dial)
                    return
                self.look = None
                self.addr = ai
            self.t_dial = now
            self.shaking = False
            s = self.sock = dial_addr(ai)
        if not self.shaking:
            if not dial_done(s):
                self._late(now, self.t_dial)
                return
            if cfg["tls"]:
                s = self.sock = tls_start(s, c.server, cfg["tls"], {})
            self.shaking = True
        if cfg["tls"] and tls_step(s):
            self._late(now, self.t_dial)
            return
        self.sock = None
        self._commit()  # what the client holds, durable before it is resent
        c.connect_start(False, sock=s)  # the client closes s if this fails
        self.linked = True

    def _late(self, now, since):
        # a dial (or the failover's probe) that began at `since` took too long
        if ticks_diff(now, since) > self.cfg["timeout_ms"]:
            raise OSError(110, "connect timed out")

    def _unlink(self):
        # no link now (the client's socket is closed already)
        s = self.sock
        if s is not None:
            self.sock = None
            s.close()
        self.look = None  # (a lookup still running is left to finish)
        self.linked = False
        c = self.client
        if c is not None:  # (None: start() did not get as far as making it)
            c.reconnect = True  # no link: see start()

    def _down(self, now):
        # the attempt failed or the link broke: the next one after a
        # backoff, doubling from backoff_ms[0] up to backoff_ms[1], with
        # jitter (75%..125%) so that gateways do not come back in step
        self._unlink()
        self.addr = None  # looked up again: the upstream may have moved
        self.tries += 1
        lo, hi = self.cfg["backoff_ms"]
        d = min(hi, lo << min(self.tries - 1, 16))
        # the clock's low 16 bits as noise (the device stubs make ticks
        # opaque), their product a small int (no heap on a device)
        d = d * 3 // 4 + (now & 0xFFFF) * 7919 % (d // 2 + 1)  # type: ignore[operator, unused-ignore]
        self.retry_at = ticks_add(now, d)

    def step(self, now):
        c = self.client
        n = 0
        if not self.linked:
            if not self.tries or ticks_diff(now, self.retry_at) >= 0:
                try:
                    self._dial(now)
                except OSError as e:
                    self._failed(now, e)  # refused, unreachable, TLS failed, timed out
        else:
            n = self._poll(now)
        up = c.is_connected()
        if up and not self.up:
            self.up = True
            self.tries = 0
            self.connects += 1
            log = self.core.log
            if log is not None:
                h, p = self.addrs[self.at]
                log("bridge %s: connected to %s:%d%s" % (
                    self.name, h, p, "" if self.at == 0 or len(self.addrs) < 2 else
                    " (secondary address %d)" % self.at))
            self._online()
        elif not up:
            if self.up:
                self._state(b"0")
            self.up = False
            self.pid = 0  # asked again on the next connection
        if up and self.todo:
            self._subscribe()
        if up and self.at:
            # on a secondary address (only bridge_failover.Failover moves `at`)
            up = self.secondary(now)  # type: ignore[attr-defined]
        k = self.forward()
        if k and up:
            n += self._poll(now)  # the burst leaves, after one sync (_sync)
        if k or self.handed:
            self.t_sent = now
            self.handed = False
        return n + k

    def _poll(self, now):
        # the client's I/O: what arrived handled, what is queued sent
        c = self.client
        n = 0
        try:
            n = c.poll(0)
            if n:
                self.t_recv = now
        except Busy:
            pass  # its send buffer is full: the next step goes on
        except OSError as e:
            self._failed(now, e)  # the link broke, or no CONNACK in time
        except MQTTError as e:
            if isinstance(e, StoreFull) and not c.tries:
                # nothing failed: the client left a QoS 2 burst larger than
                # inflight_in unanswered, answered the PUBRELs that freed
                # its table, and closed the link itself, counting no failed
                # try (client_core.py packet()), so that the upstream sends
                # the rest again on a new one [MQTT-4.4.0-1]. Dialled at
                # once, not after a backoff, to the same address. (A store
                # full of the client's own messages, which no PUBREL frees,
                # is a failed try for the client's poll(): the backoff.)
                log = self.core.log
                if log is not None:
                    log("bridge %s: more QoS 2 messages from the upstream than inflight_in "
                        "(%d) holds: linking again at once for the rest"
                        % (self.name, self.cfg["inflight_in"]))
                self.relinks += 1
                self._unlink()
                return n
            log = self.core.log
            if isinstance(e, MQTTException) and not self.up:
                # refused by the upstream (a CONNACK's code: credentials,
                # client id, ...): asked again after the backoff, as the
                # upstream may be put right meanwhile
                self.refusals += 1
                if not self._private(e.code):
                    if log is not None:
                        log("bridge %s: the upstream refused the connection (%d)"
                            % (self.name, e.code))
                    self._refused(e.code)
            elif log is not None:
                # a malformed packet, a protocol error, a store that cannot
                # take a message: the client closed the link (also right
                # after CONNACK, before step() saw it up)
                h, p = self.addrs[self.at]
                log("bridge %s: closed the link to %s:%d: %s (0x%02x)"
                    % (self.name, h, p, e.reason, e.code))
            self._down(now)
        return n

    def spent(self, now):
        """A MemoryError in this bridge's step (Hub.step): in a dial, in the
        client's I/O (an upstream message half routed, an acknowledgement
        half written) or in the hand-over of the queue. The link is dropped
        as a broken one (the next attempt after the backoff), so that no
        half-written packet goes on and the client's session resumes as
        after any outage: nothing accepted is lost. A message leaves the
        queue only once the client stored it, the client sends what it
        stored again once linked, and the upstream what the client did not
        acknowledge [MQTT-4.4.0-1]. Allocates nothing (the heap is spent)."""
        c = self.client
        try:
            if c is not None and (self.linked or c.is_connected()):
                c.down()  # (its socket closed; a dial's socket: _unlink)
            self._down(now)
        except MemoryError:
            # (the backoff's arithmetic: the next step tries again at once)
            self.linked = False
            if c is not None:
                c.reconnect = True

    def _failed(self, now, e):
        # an attempt that failed, or a link lost: a line per attempt (the
        # backoff spaces them), with the reason, as mosquitto's bridge logs
        # them; then the backoff
        log = self.core.log
        if log is not None:
            h, p = self.addrs[self.at]
            log("bridge %s: %s %s:%d: %s" % (
                self.name, "lost the link to" if self.up else
                "no CONNACK from" if self.linked else "cannot connect to", h, p, e))
        self._down(now)

    def _private(self, rc):
        # True when the upstream refused the bridge bit: a 3.1.1 CONNACK
        # 0x01, unacceptable protocol version [MQTT-3.1.2-2], to a CONNECT
        # that carried it. As mosquitto's bridge, every later attempt goes
        # without it, for the life of the process, and the upstream may
        # then echo (Hub.route). A link closed before CONNACK is no such
        # answer (a network drop looks the same): see docs/bridge.md.
        c = self.client
        if rc != 1 or not c.bit:
            return False
        c.bit = 0
        self.echo = True
        log = self.core.log
        if log is not None:
            log("bridge %s: the upstream does not take the bridge protocol (try_private); "
                "connecting as a plain client" % self.name)
        return True

    def _refused(self, rc):
        # An MQTT 5 upstream refuses a will it cannot keep: retained where
        # it keeps no retained messages (0x9A [MQTT-3.2.2-13]), above its
        # Maximum QoS (0x9B [MQTT-3.2.2-12]). As mosquitto's bridge, the
        # next attempt asks with less: no retain, then a QoS lower.
        st = self.cfg["status_topic"]
        if not st or rc not in (0x9A, 0x9B):
            return
        if rc == 0x9A:
            self.w_retain = False
        elif self.w_qos:
            self.w_qos -= 1
        self.client.set_last_will(st, b"0", self.w_retain, self.w_qos)

    def _state(self, v):
        # the status on the gateway too, retained at QoS 1, as mosquitto's
        # bridge publishes it on its own broker: local applications see
        # whether the uplink is up (1) or not (0). As if it came in over
        # this bridge: never sent back up it (its upstream has its own)
        st = self.cfg["status_topic"]
        if not st:
            return
        hub = self.core.bridge
        hub.injecting = self
        try:
            self.core.publish(st, v, 1, True)
        except MQTTError:
            pass  # another bridge's queue is full (Hub.route): not sent on
        finally:
            hub.injecting = None

    def _online(self):
        c = self.client
        cfg = self.cfg
        try:
            if cfg["status_topic"]:
                # within the upstream's limits, as the messages (_queue)
                c.publish(cfg["status_topic"], b"1", self.retain and c.retain_ok,
                          min(1, c.max_qos), wait=False)
        except (OSError, MQTTError):
            self.up = False  # the link went down again: the next step retries
        if self.up:
            self._state(b"1")
        if not self.subscribed:
            self.todo = [r for r in self.rules if r.dir & IN]

    def _subscribe(self):
        # the `in` rules' filters, one SUBSCRIBE at a time without blocking
        # the broker (the answer has come when wait_pid moved on); the
        # client subscribes again by itself when a session was lost
        c = self.client
        if self.pid and c.wait_pid == self.pid:
            return
        if self.pid:
            self.todo.pop(0)
            self.pid = 0
        if not self.todo:
            self.subscribed = True
            return
        rule = self.todo[0]
        # At MQTT 5: No Local on every `in` subscription, what we publish
        # (an `out` or `both` rule's message, the status) does not come
        # back [MQTT-3.8.3-3]; Retain As Published, a message the upstream got
        # retained keeps its flag [MQTT-3.3.1-13] (else cleared
        # [MQTT-3.3.1-12]), so that _in retains it here too and a node
        # that subscribes later gets the last value, as through
        # mosquitto's bridge. At 3.1.1 the bridge bit (try_private) asks
        # an upstream that knows it for both, per connection; without it
        # only what the upstream holds retained when the subscription is
        # made comes with the flag [MQTT-3.3.1-8] [MQTT-3.3.1-9].
        o = 12 if self.cfg["level"] == 5 else 0
        try:
            self.pid = c.subscribe_start(rule.rf, rule.qos | o)
        except (OSError, MQTTError):
            self.pid = 0

    def busy(self, now):
        # something waits, or was handed on within a second (its ack is
        # due), or came from upstream within a second (more may follow), or
        # the uplink is being dialled (its socket is not the broker's to
        # wait for)
        return bool(self.q.keys or self.q0 or self.sock is not None or self.look is not None) or \
            ticks_diff(now, self.t_sent) < 1000 or ticks_diff(now, self.t_recv) < 1000

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.client is not None:
            up = self._bye()
            self.up = False
            if up:
                self._state(b"0")

    def _bye(self):
        # a clean goodbye to the upstream: its status topic 0, DISCONNECT
        # (the will is not sent); whether the link was up
        c = self.client
        st = self.cfg["status_topic"]
        up = self.up
        self.up = False  # the sync hook forwards no more: nothing after DISCONNECT
        try:
            if up and st:
                c.publish(st, b"0", self.retain and c.retain_ok, 0)
            c.disconnect()
        except (OSError, MQTTError):
            pass
        return up


_Up = None  # the upstream client's class, made by _up_class


def _up_class():
    # MQTTClient that at 3.1.1 connects as mosquitto's bridges do with
    # try_private: the CONNECT's protocol level with its high bit set (0x84).
    # An upstream that knows it treats the bridge's subscriptions as No
    # Local and Retain As Published; one that does not answers CONNACK
    # 0x01 (Bridge._private). Made when the first bridge starts, where the
    # client is loaded anyway: importing bridge (a settings check) loads
    # no client.
    global _Up
    if _Up is None:
        from .client import MQTTClient

        class Up(MQTTClient):
            bit = 0  # 0x80: the bridge bit goes in the next CONNECT

            def start(self, now):
                MQTTClient.start(self, now)
                if self.bit:
                    tx = self.conn.tx
                    tx[level_at(tx)] |= self.bit

        _Up = Up
    return _Up


def level_at(b):
    """Where the protocol level byte of the CONNECT at b[0] is: past the
    fixed header (its Remaining Length a varint of 1-4 bytes) and the
    protocol name (a 2-byte length, then "MQTT")."""
    i = 1
    while b[i] & 0x80:
        i += 1
    i += 1
    return i + 2 + ((b[i] << 8) | b[i + 1])


def cut(prefix, buf, off, n):
    """How much of the topic buf[off:off+n] the prefix swap takes off: the
    prefix's length where the topic starts with it, else 0. A rule's filter
    also matches the prefix's parent level (`rem/#` matches `rem`
    [MQTT-4.7.1-2]): as mosquitto, such a topic keeps its whole name and
    only gets the other side's prefix (`rem` in, `loc/rem` locally)."""
    k = len(prefix)
    if k > n:
        return 0
    for i in range(k):  # in place: no slice, no allocation
        if buf[off + i] != prefix[i]:
            return 0
    return k


def _expiry_at(pr):
    # where the Message Expiry Interval's value is in the property list
    # pr, or -1 (MQTT 5 only: props is not imported for 3.1.1)
    from .props import find, MESSAGE_EXPIRY
    return find(pr, 0, len(pr), MESSAGE_EXPIRY)


def _put_late(b, rule, r, bit):
    # a will from a slot of late (Core._route) up bridge b, unless an
    # earlier try (cut short by a MemoryError) took it there; b unmarked
    # if its copy finds the heap spent
    if not mark_late(b, bit):
        return
    try:
        b.put(rule, r)
    except MemoryError:
        b.got_late &= ~bit
        raise


class Hub:
    """What the broker holds as core.bridge: every bridge of it."""

    def __init__(self, core):
        self.core = core
        self.all = []
        self.injecting = None  # the bridge whose upstream message is being routed
        self.wait = 1000  # step(): ms the broker may wait for its sockets

    def route(self, r):
        """Every message the broker routes, before any subscriber gets it.
        A QoS 1/2 message from a node, or from another bridge's upstream,
        that a full queue cannot take is refused: MQTTError 0x97, nothing
        acknowledged and nothing routed. The node's connection is closed
        and its client sends it again; the other bridge's upstream link is
        dropped unacknowledged (Bridge._in) and the upstream sends it again
        on the next one [MQTT-4.4.0-1]. A node's message whose full
        bridges all have their uplink up (Bridge.waits) is held instead:
        nothing done, and the bridge it waits for returned (the broker
        keeps the packet unread until that bridge stops waiting,
        Core.refuse_publish); else None."""
        inj = self.injecting
        if inj is not None:
            if inj.tag >= 0:
                r.tag = inj.tag  # its local copies: taken back if the routing is cut short
            if inj.echo and inj.match(r) is not None:
                # At 3.1.1 without the bridge bit (no No Local) an upstream
                # sends the bridge its own messages back: one on a topic
                # this bridge also takes up may be such an echo. Local
                # subscribers get it, other bridges do not: with two `both`
                # bridges the echo of one would go up the other and come
                # back, for ever.
                return
        # (two passes rather than a list of the hits: no allocation)
        if r.src is not None or inj is not None:
            hold = None
            for b in self.all:
                if b is not inj:
                    rule = b.match(r)
                    if rule is not None and b.full(rule, r):
                        if inj is None and b.waits():
                            hold = b  # unless another full bridge refuses it
                            continue
                        b.refused += 1
                        raise MQTTError("bridge %s: queue full" % b.name, 0x97)
            if hold is not None:
                hold.held += 1
                return hold
        bit = self.core.wbit  # a will from a slot of late: see _put_late
        for b in self.all:
            if b is not inj:  # it came in over b: never back out over it
                rule = b.match(r)
                if rule is not None:
                    if bit:
                        _put_late(b, rule, r, bit)
                    else:
                        b.put(rule, r)

    def unmark(self, bit):
        """The will of the broker's late slot whose bit this is has gone:
        its marks go with it."""
        unmark_late(self.all, len(self.all), bit)

    def step(self, now):
        """One step of every bridge; returns the work done, and sets wait,
        the ms the broker may wait for its sockets: the upstream sockets are
        the clients', not in the broker's poll, so the broker looks again
        soon while anything is on its way (2 ms), and every 50 ms while an
        uplink is up: what comes from upstream unannounced waits no longer."""
        work = 0
        wait = 1000
        for b in self.all:
            try:
                if not b.started:
                    b.start()
                work += b.step(now)
            except MemoryError:
                # the heap is spent in this bridge's step: counted, its
                # link dropped (Bridge.spent); the broker and the other
                # bridges go on
                self.core.nomem += 1
                b.spent(now)
                wait = 2
                continue
            if b.busy(now):
                wait = 2
            elif b.up and wait > 50:
                wait = 50
        self.wait = 0 if work else wait
        return work

    def sys(self, pub):
        for b in self.all:
            p = "bridge/%s/" % b.name
            pub(p + "connected", 1 if b.up else 0)
            pub(p + "queued", len(b.q.keys) + len(b.q0))
            pub(p + "sent", b.sent)
            pub(p + "received", b.received)
            pub(p + "dropped", b.dropped)
            pub(p + "refused", b.refused)
            pub(p + "held", b.held)
            pub(p + "too_large", b.too_large)
            # from upstream, larger than the client's buffer: discarded (3.1.1)
            pub(p + "too_large_in", b.client.too_large if b.client is not None else 0)
            pub(p + "expired", b.expired)
            pub(p + "connects", b.connects)

    def close(self):
        for b in self.all:
            b.close()


def install(core, configs, files=None):
    """Give the broker (umqtt3.broker.Broker) its bridges: a list of
    settings dicts (bridge_settings.DEFAULTS). With a store the queues and the upstream
    clients' stores live in it; files: the store's file layer (tests)."""
    from .store import FileStore
    hub = Hub(core)
    disk = core.disk
    for cfg in configs:
        cfg = settings(cfg)
        if any(b.name == cfg["name"] for b in hub.all):
            # one queue and one upstream session per name (as parse())
            raise ValueError("bridge %s: a second bridge of that name" % cfg["name"])
        kind = Bridge
        a = cfg["addresses"]
        if a and len(a) > 1:
            # failover between them: its code is loaded only for such a bridge
            from .bridge_failover import Failover
            kind = Failover
        if disk is not None:
            d = disk.dir
            # the client's store beside the broker's records: in its log, or
            # one file per record synced as written (client_files)
            p = d + "/b" + cfg["name"] + ".up"
            cs = FileStore(p, client_files(p, files, disk.fs), 2 * cfg["window"] +
                           cfg["inflight_in"], allow_fat=True)
            b = kind(core, cfg, disk.fs, d, cs)
        else:
            b = kind(core, cfg, RamFiles(), "", None)
        hub.all.append(b)
    core.bridge = hub
    return hub


def undo_cut(store, files=None, said=None):
    """Before the broker loads its store: take back what QoS 2 routings a
    power loss cut short left behind. A node's (its session's record still
    .u): the copies on the bridges' queues (the broker then takes back the
    rest, and the node sends it again). An upstream message's (a bridge's
    mark whose packet id its client still holds undelivered): the copies in
    the local sessions and on the other bridges' queues, and the mark (the
    client then hands the message over again). Returns how many copies.
    said((byte, count)): told of a torn tail this opening of the store's
    log cut (kept in log.bad), which the broker's own opening then no
    longer finds."""
    from .broker_log import AppendFiles, LogFiles, layout
    from .store import unframe, FileStore
    base = files or AppendFiles()
    d = store.rstrip("/") or "/"
    try:
        names = base.listdir(d)
    except OSError:
        return 0
    if not names:
        return 0
    fs = LogFiles(d, base) if layout(d, base) == "log" else base
    if said and isinstance(fs, LogFiles) and fs.cut:
        said(fs.cut)
    tags = []
    queues = []
    sessions = []
    for name in fs.listdir(d):
        if name[:1] == "s" and name[1:].isdigit():
            sessions.append(name)
            for rn in fs.listdir(d + "/" + name):
                if rn[:1] == "i" and rn[-2:] == ".u":
                    try:
                        rec = unframe(fs.read(d + "/" + name + "/" + rn))
                    except OSError:
                        rec = None
                    if rec is not None:
                        tags.append(rec[1])
        elif name[:1] == "b" and "." not in name:
            queues.append(name)
    # the bridges' marks, and which of them mark a routing cut short
    found = []  # (queue directory, [(pid, tag)])
    cut = []
    for name in queues:
        ms = marks(fs, d + "/" + name)
        if not ms:
            continue
        found.append((d + "/" + name, ms))
        p = d + "/" + name + ".up"
        held = [r[0] for r in FileStore(p, client_files(p, base, fs), 1 << 16, True).recover()
                if r[1] == "u"]
        for pid, tag in ms:
            if pid in held:
                cut.append(tag)
    n = 0
    if cut:
        # every copy first, then the marks, each durable before the next
        # (as the broker's own undo): a second power loss half way finds
        # the marks again with whatever copies are left
        for name in sessions:
            sd = d + "/" + name
            st = FileStore(sd, fs, 1 << 16, True, False)
            for pid, state, key, body in st.recover():
                if state == "p" and key in cut:
                    st.out_del(pid)
                    n += 1
        tags += cut
    if tags:
        for name in queues:
            n += undo(fs, d + "/" + name, tags)
    for qd, ms in found:
        for pid, tag in ms:
            fs.remove(qd + "/i%05d" % pid)
        fs.sync_dir(qd)
    if isinstance(fs, LogFiles) and (n or found):
        fs.commit()
    return n
