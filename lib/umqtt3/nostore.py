# umqtt3.nostore -- the store of a client that keeps no message: the packet
# ids in flight and nothing else (MQTTClient(store=False)).
#
# QoS 1 and 2 work within one connection, as with umqtt.simple; a message in
# flight when the link drops is not resent on the next one. What it saves is
# memstore's module and its pool (docs/client.md). Nothing is allocated per
# message: ids live in two lists made at construction.
from .client_codec import StoreFull


def _put(ids, pid):
    try:
        ids[ids.index(0)] = pid
    except ValueError:
        raise StoreFull("store full", 0x97)


def _drop(ids, pid):
    if pid in ids:
        ids[ids.index(pid)] = 0


class NoStore:
    # what a reconnect resends is lost (reported 0x100): so Core.queue()
    # refuses a QoS 1/2 message while the link is down, as QoS 0
    lost = True

    def __init__(self, window=8, inbound=8):
        self.out = [0] * window
        self.inn = [0] * inbound

    def out_add(self, pid, key, buf, off, n):
        _put(self.out, pid)

    def out_rel(self, pid):
        return False  # the flow sends the PUBREL

    def out_del(self, pid):
        had = pid in self.out
        _drop(self.out, pid)
        return had

    def out_has(self, pid):
        return pid in self.out

    def out_count(self):
        return len(self.out) - self.out.count(0)

    def in_add(self, pid, buf, off, n):
        _put(self.inn, pid)

    def in_done(self, pid):
        pass

    def in_has(self, pid):
        return pid in self.inn

    def in_del(self, pid):
        _drop(self.inn, pid)

    def in_count(self):
        return len(self.inn) - self.inn.count(0)

    def in_max(self, window):
        return len(self.inn)

    def in_clear(self):
        for i in range(len(self.inn)):
            self.inn[i] = 0

    def recover(self):
        # a new connection: the ids in flight without their messages (None),
        # which the resume cannot resend: it reports each one lost
        return [(pid, "p", None, None) for pid in self.out if pid]

    def accepted(self, key):
        return False
