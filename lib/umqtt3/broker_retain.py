# umqtt3.broker_retain -- the retained messages: one per topic.
#
# msgs maps topic bytes to (qos, payload bytes). A store (broker_store.Disk)
# given as `disk` has each change on disk before set() returns, so before
# the publisher's PUBACK / PUBREC. The broker's own $SYS/ topics are kept
# here too, outside max_retained and never written. matching() answers a
# new subscription; like broker_subs it is a scan an index can replace.
from .topic import match_span
from .codec import publish_size
from .broker_session import MSG_COST


def _expiry_at(pr):
    from .props import find, MESSAGE_EXPIRY  # MQTT 5 only
    return find(pr, 0, len(pr), MESSAGE_EXPIRY)


def is_sys(tsrc, toff, tn):
    """The topic starts with "$SYS/"."""
    return tn >= 5 and tsrc[toff] == 36 and tsrc[toff + 1] == 83 and tsrc[toff + 2] == 89 \
        and tsrc[toff + 3] == 83 and tsrc[toff + 4] == 47


class Retained:
    def __init__(self, limits, stats, log):
        self.lim = limits
        self.stats = stats  # dropped counts a message not kept
        self.log = log  # callable(str) or None
        self.msgs = {}
        self.nsys = 0  # how many of msgs are $SYS/ topics (not limited)
        self.disk = None  # broker_store.Disk, when there is a store
        self.props = {}  # topic -> MQTT 5 property bytes, for those that have some
        self.t_in = {}  # topic -> broker uptime (s) it came, for those with a message expiry
        self.nbytes = 0  # what the kept messages cost ($SYS/ ones aside): the broker's mem_budget

    def _cost(self, key):
        # bytes of the message kept for key (0: none, or a $SYS/ topic)
        m = self.msgs.get(key)
        if m is None or is_sys(key, 0, len(key)):
            return 0
        return len(key) + len(m[1]) + len(self.props.get(key, b"")) + MSG_COST

    def replaced(self, r):
        """What the message kept for route r's topic costs (0: none): the
        bytes r frees when it replaces it [MQTT-3.3.1-5]."""
        return self._cost(bytes(r.tsrc[r.toff:r.toff + r.tn]))

    def full(self, r):
        """Whether route r's retained message would be a new topic past
        max_retained ($SYS/ topics aside): set() would not keep it."""
        if len(self.msgs) - self.nsys < self.lim.max_retained or not r.pn:
            return False
        key = bytes(r.tsrc[r.toff:r.toff + r.tn])
        return key not in self.msgs and not is_sys(key, 0, len(key))

    def set(self, r):
        """Route r (broker_session.Route) is a retained message: keep it,
        replacing the topic's [MQTT-3.3.1-5], or clear the topic when the
        payload is empty [MQTT-3.3.1-10, MQTT-3.3.1-11]."""
        key = bytes(r.tsrc[r.toff:r.toff + r.tn])
        msgs = self.msgs
        sysk = is_sys(key, 0, len(key))  # the broker's own: not limited, not saved
        if not r.pn:
            self.nbytes -= self._cost(key)
            self.props.pop(key, None)
            self.t_in.pop(key, None)
            if msgs.pop(key, None) is not None:
                if sysk:
                    self.nsys -= 1
                elif self.disk is not None:
                    self.disk.unretain(key)  # before the PUBACK / PUBREC
            return
        new = key not in msgs
        if new and not sysk and len(msgs) - self.nsys >= self.lim.max_retained:
            # (QoS 0, a will, the API, a 3.1.1 client: nobody to refuse it
            # to; an MQTT 5 client's QoS 1/2 one was refused before
            # routing, Core._refuse_full)
            self.stats.dropped += 1
            if self.log is not None:
                self.log("retained message on %s not kept: max retained reached" % key.decode())
            return
        prn = r.prn if r.prs is not None else -1
        if publish_size(r.tn, r.pn, r.qos, prn) > self.lim.max_frame:
            # it could never be sent whole (the API's or a bridge's: a
            # client's PUBLISH fits, broker_limits.grow), counted as dropped
            self.stats.dropped += 1
            if self.log is not None:
                self.log("retained message on %s not kept: larger than max_frame" % key.decode())
            return
        pl = bytes(r.psrc[r.poff:r.poff + r.pn])
        pr = bytes(r.prs[r.pro:r.pro + prn]) if prn > 0 else b""
        if not sysk and self.disk is not None:
            self.disk.retain(key, r.qos, pl, pr)  # before the PUBACK / PUBREC
        self.nbytes -= self._cost(key)
        msgs[key] = (r.qos, pl)
        self._props(key, pr)
        self.nbytes += self._cost(key)
        if sysk and new:
            self.nsys += 1

    def _props(self, key, pr, t=-1):
        # a retained message keeps its MQTT 5 properties [MQTT-3.3.1-5 (5.0)]
        self.t_in.pop(key, None)
        if pr:
            self.props[key] = pr
            if _expiry_at(pr) >= 0:
                self.t_in[key] = self.stats.up_s if t < 0 else t
        else:
            self.props.pop(key, None)

    def aged(self, topic):
        """The properties topic's retained message goes out with: its
        message expiry interval less the time it was kept [MQTT-3.3.2-6
        (5.0)]; None when it has none; b"" when it has expired, and is
        gone [MQTT-3.3.2-5 (5.0)]. (Across a restart the store's clock
        counts, broker_store.Disk.start.)"""
        pr = self.props.get(topic)
        if pr is None:
            return None
        k = _expiry_at(pr)
        if k < 0:
            return pr
        left = ((pr[k] << 24) | (pr[k + 1] << 16) | (pr[k + 2] << 8) | pr[k + 3]) - \
            (self.stats.up_s - self.t_in.get(topic, 0))
        if left <= 0:
            self.nbytes -= self._cost(topic)
            self.msgs.pop(topic, None)
            self.props.pop(topic, None)
            self.t_in.pop(topic, None)
            self.stats.dropped += 1
            if self.disk is not None:
                try:
                    self.disk.unretain(topic)
                except OSError:
                    pass  # it comes back after a restart, and expires again
            return b""
        out = bytearray(pr)
        out[k] = (left >> 24) & 255
        out[k + 1] = (left >> 16) & 255
        out[k + 2] = (left >> 8) & 255
        out[k + 3] = left & 255
        return bytes(out)

    def load(self, topic, qos, payload, props=b"", t=-1):
        """A retained message back from the store; t: the uptime it came
        (-1: unknown, now)."""
        self.nbytes -= self._cost(topic)
        self.msgs[topic] = (qos, payload)
        self._props(topic, props, t)
        self.nbytes += self._cost(topic)

    def matching(self, fb, fo, fn):
        """The topics filter fb[fo:fo+fn] matches, as a list."""
        out = []
        for topic in self.msgs:
            if match_span(fb, fo, fn, topic, 0, len(topic)):
                out.append(topic)
        return out
