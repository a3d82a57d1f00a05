# umqtt3.bridge_failover -- what only a bridge with several upstream
# addresses runs (docs/bridge.md "Several upstream addresses"): the next
# address in turn after a failure, and with round_robin false the probe of
# the main address while on a secondary and the clean switch back to it.
# bridge.install makes such a bridge a Failover; a gateway whose bridges
# have one address each never imports this module.
from .compat import ticks_diff, ticks_add
from .bridge import Bridge, PRIMARY_RETRY_MS


class Failover(Bridge):
    """A Bridge with two or more addresses (addrs), `at` the one in use."""

    def __init__(self, core, cfg, files, store_dir, client_store):
        Bridge.__init__(self, core, cfg, files, store_dir, client_store)
        self.probe = None  # on a secondary: the TCP connect to the main address (_probe)
        self.plook = None  # its name lookup
        self.probe_at = 0  # when the next probe starts
        self.t_probe = 0  # when the one under way started

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
            log = self.core.log
            if log is not None:
                log("bridge %s: the main address %s:%d takes connections again: leaving %s:%d"
                    % ((self.name,) + self.addrs[0] + self.addrs[self.at]))
        if self.leaving and not self.client.inflight():
            self._leave(now)
            return False
        return True

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
                    self._probe_late(now)
                    return False
                self.plook = None
                s = self.probe = dial_addr(ai)
            if not dial_done(s):
                self._probe_late(now)
                return False
        except OSError:
            self._unprobe(now)  # refused, unreachable, timed out: again later
            return False
        self._unprobe(now)
        return True

    def _probe_late(self, now):
        if ticks_diff(now, self.t_probe) > self.cfg["timeout_ms"]:
            raise OSError(110, "connect timed out")

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
