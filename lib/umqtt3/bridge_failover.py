# umqtt3.bridge_failover -- what only a bridge with several upstream
# addresses runs (docs/bridge.md "Several upstream addresses"): the next
# address in turn after a failure, and with round_robin false the probe of
# the main address while on a secondary and the clean switch back to it.
# bridge.install makes such a bridge a Failover; a gateway whose bridges
# have one address each never imports this module.
from .compat import ticks_diff, ticks_add
from .bridge import Bridge, PRIMARY_RETRY_MS
from .client_codec import MQTTError


class Failover(Bridge):
    """A Bridge with two or more addresses (addrs), `at` the one in use."""

    def __init__(self, core, cfg, files, store_dir, client_store):
        Bridge.__init__(self, core, cfg, files, store_dir, client_store)
        self.probe = None  # on a secondary: the TCP connect to the main address (_probe)
        self.plook = None  # its name lookup
        self.probe_at = 0  # when the next probe starts
        self.t_probe = 0  # when the one under way started
        self.t_leave = 0  # when leaving began
        # QoS 2 state belongs to the broker it was made with (each holds its
        # own session of the bridge [MQTT-4.3.3-1]): the address whose state
        # the client's store holds, and per other address a store with the
        # state kept for it (_swap); with a store both durable (files),
        # the owner in b<name>.owner, each address's in b<name>.at<i>
        self.files = files
        self.opath = "%s/b%s.owner" % (store_dir, self.name)
        self.owner = 0
        if self.durable:
            try:
                self.owner = int(bytes(files.read(self.opath)).decode()) % len(self.addrs)
            except (OSError, ValueError):
                pass  # none yet: the main address's
        self.settled = False  # the owner's kept state looked at since the start
        self.kept = {}

    def close(self):
        self._unprobe(0)
        Bridge.close(self)

    def _down(self, now):
        Bridge._down(self, now)
        # the next address in turn, after the backoff: as mosquitto, whose
        # restart_timeout spaces every attempt, whichever address it goes to
        self.at = (self.at + 1) % len(self.addrs)
        self._unprobe(now)
        self.leaving = False

    def secondary(self, now):
        """Bridge.step's, while connected to a secondary address; whether
        the link is still up."""
        if not self.cfg["round_robin"] and not self.leaving and self._probe(now):
            # the main address takes TCP again: no new message goes to the
            # secondary; once it acknowledged all it was sent, a clean
            # goodbye, and the main address next (_leave)
            self.leaving = True
            self.t_leave = now
            log = self.core.log
            if log is not None:
                log("bridge %s: the main address %s:%d takes connections again: leaving %s:%d"
                    % ((self.name,) + self.addrs[0] + self.addrs[self.at]))
        c = self.client
        if self.leaving and not c.inflight() and (
                not (self.pid_in and c.store.in_has(self.pid_in)) or
                ticks_diff(now, self.t_leave) > self.cfg["timeout_ms"]):
            # nothing unacknowledged, and the last QoS 2 message from it
            # released (its PUBREL came; it sends them in order), or too
            # long: what is left stays with it (_swap)
            self._leave(now)
            return False
        return True

    def _dial(self, now):
        if self.owner != self.at or not self.settled:
            self._swap()  # before the CONNECT: its resume sees its own state
        Bridge._dial(self, now)

    def _swap(self):
        # The client's store goes from the owner's address to `at`: the
        # owner's QoS 2 state (the PUBRELs owed to it, the inbound ids it
        # was answered PUBREC for) kept with it, the state kept for `at`
        # handed back. So the next broker never gets a PUBREL or a
        # duplicate check meant for another (no message completed wrongly,
        # no id taken for a resend), and the owner's own resume, once the
        # bridge is back there, sends its PUBRELs (session present: it
        # delivers now, once) or completes them (it lost the session).
        # Durable in this order (a power loss keeps a prefix): the owner's
        # state copied to its store, then removed from the client's; the
        # new owner named; the state handed back copied, then removed from
        # its store. _move skips what the other side holds already, so the
        # next start, which hands the owner's kept state back first (the
        # `settled` pass), ends a move cut short either way.
        st = self.client.store
        a = self.owner
        b = self.at
        self.pid_in = 0  # (secondary(): the new broker's only)
        if a != b:
            n = _move(st, self._kept(a, True))
            if n:
                self._said(n, "kept for", a)
            self.owner = b
            if self.durable:
                f = self.files
                f.write(self.opath + "~", ("%d" % b).encode())
                f.rename(self.opath + "~", self.opath)
                f.sync_dir(self.core.disk.dir)
        k = self._kept(b, self.durable)
        if k is not None:
            n = _move(k, st)
            if n:
                self._said(n, "handed back to", b)
            n = _held(k)
            if n:
                # an id the client took again meanwhile: kept until the
                # next return (docs/bridge.md "Limits")
                self._said(n, "still kept for", b)
        self.settled = True
        if self.durable:
            self._commit()

    def _kept(self, i, make):
        # the store of the state kept for address i (made if make), or None
        k = self.kept.get(i)
        if k is None and make:
            k = self.kept[i] = self._store(i)
        return k

    def _store(self, i):
        # where the QoS 2 state of address i waits: the size of the
        # client's own store (bridge.install, bridge.start)
        w = self.cfg["window"]
        if self.durable:
            from .store import FileStore
            from .bridge_queue import client_files
            p = "%s/b%s.at%d" % (self.core.disk.dir, self.name, i)
            return FileStore(p, client_files(p, None, self.files),
                             2 * w + self.cfg["inflight_in"], allow_fat=True)
        from .memstore import MemoryStore
        n = self.core.limits.max_packet + 64
        n = n if n > 1024 else 1024
        return MemoryStore(w, (n + w - 1) // w, self.cfg["inflight_in"])

    def _said(self, n, what, i):
        log = self.core.log
        if log is not None:
            log("bridge %s: QoS 2 state of %d message(s) %s %s:%d" % (
                (self.name, n, what) + self.addrs[i]))

    def _probe(self, now):
        # round_robin false, connected to a secondary address: a TCP
        # connect to the main one every PRIMARY_RETRY_MS, checked each
        # step, never waiting (mosquitto 2.0's probe); True once it took it
        s = self.probe
        if s is None and self.plook is None and ticks_diff(now, self.probe_at) < 0:
            return False
        from .compat.aio import lookup_start, lookup_done, dial_addr, dial_done
        try:
            if s is None:
                if self.plook is None:
                    self.t_probe = now
                    self.plook = lookup_start(*self.addrs[0])
                ai = lookup_done(self.plook)
                if ai is None:
                    self._late(now, self.t_probe)
                    return False
                self.plook = None
                s = self.probe = dial_addr(ai)
            if not dial_done(s):
                self._late(now, self.t_probe)
                return False
        except OSError:
            self._unprobe(now)  # refused, unreachable, timed out: again later
            return False
        self._unprobe(now)
        return True

    def _unprobe(self, now):
        s = self.probe
        if s is not None:
            self.probe = None
            s.close()
        self.plook = None
        self.probe_at = ticks_add(now, PRIMARY_RETRY_MS)

    def _leave(self, now):
        # back to the main address, the secondary having acknowledged all
        # it was sent: no QoS 2 message is left past PUBREC there, whose
        # PUBREL would not reach it (mosquitto delivers at PUBREL) and which
        # the main address, without the bridge's session, never gets
        # (docs/bridge.md). A clean goodbye (its status topic 0, then
        # DISCONNECT: the will is not sent), then the main address dialled
        # at once, no backoff (nothing failed). A secondary that stops
        # answering meanwhile is dropped by the keepalive, as any link.
        self.leaving = False
        up = self._bye()
        self.linked = False
        self.addr = None
        self.client.reconnect = True  # no link: see start()
        self.at = 0
        self.tries = 0
        self._unprobe(now)
        if up:
            self._state(b"0")
        self.pid = 0


def _inbound(st):
    # the inbound QoS 2 ids st holds after their delivery (answered
    # PUBREC, waiting for PUBREL); an undelivered one (a FileStore's "u",
    # handed over at the next CONNACK) stays where it is. The store lists
    # no ids, so all are asked: once per switch of address.
    u = [r[0] for r in st.recover() if r[1] == "u" and r[3]]
    return [p for p in range(1, 65536) if st.in_has(p) and p not in u]


def _move(src, dst):
    """The QoS 2 state in src to dst: its outbound messages past PUBREC
    (state "r") and its released inbound ids, each added to dst before it
    leaves src; one dst holds already (a move a power loss cut short) only
    leaves src; one whose id dst holds for another message stays. How many
    moved."""
    n = 0
    have = {}
    for r in dst.recover():
        if r[1] != "u":
            have[r[0]] = bytes(r[3])
    for pid, state, key, body in src.recover():
        if state != "r":
            continue
        h = have.get(pid)
        if h is None:
            try:
                dst.out_add(pid, key, body, 0, len(body))
            except MQTTError:
                continue  # (full: StoreFull) stays
        elif h != bytes(body):
            continue  # another message under that id: stays
        dst.out_rel(pid)
        src.out_del(pid)
        n += 1
    for pid in _inbound(src):
        if not dst.in_has(pid):
            try:
                dst.in_add(pid, b"", 0, 0)
            except MQTTError:
                continue
            dst.in_done(pid)
        src.in_del(pid)
        n += 1
    return n


def _held(st):
    # what st still holds
    return st.out_count() + len(_inbound(st))
