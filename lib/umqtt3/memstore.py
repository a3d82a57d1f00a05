# umqtt3.memstore -- the client's default store: in-flight messages in RAM.
#
# The store contract is described in umqtt3.store (FileStore keeps the same
# records on flash). MemoryStore allocates everything at construction and
# nothing per message; nothing survives a reset.
#
# Outbound messages share one byte pool of slots * slot_size bytes, kept in
# send order: a message of any size up to the whole pool fits while there
# is room, so a small pool serves both many small readings and a few large
# messages. An acknowledgement removes its message and moves the ones sent
# after it down (acks mostly come in order, so usually the first one goes).
from .compat import move
from .client_codec import StoreFull, MQTTError


class MemoryStore:
    def __init__(self, slots=8, slot_size=256, inbound=8):
        self.data = bytearray(slots * slot_size)
        self.used = 0  # pool bytes in use
        self.n = 0  # messages held, in send order at index 0..n-1
        self.pid = [0] * slots
        self.len = [0] * slots
        self.state = bytearray(slots)  # 'p' or 'r'
        self.key = [0] * slots
        self.last_key = -1
        self.inpid = [0] * inbound

    def out_add(self, pid, key, buf, off, n):
        if n > len(self.data):
            # never fits, however many acks come: not StoreFull's "not now"
            raise MQTTError("too large", 0x95)
        i = self.n
        if i == len(self.pid) or self.used + n > len(self.data):
            raise StoreFull("store full", 0x97)
        move(self.data, self.used, buf, off, n)
        self.used += n
        self.pid[i] = pid
        self.len[i] = n
        self.state[i] = 0x70  # 'p'
        if key is None:
            key = -1
        elif key > self.last_key:
            self.last_key = key
        self.key[i] = key
        self.n = i + 1

    def out_rel(self, pid):
        # (the free slots hold 0, which no packet id is: searches in C)
        p = self.pid
        if pid in p:
            self.state[p.index(pid)] = 0x72  # 'r'

    def out_del(self, pid):
        p = self.pid
        if p[0] == pid and self.n == 1:  # the only one (sequential QoS 1): nothing moves
            self.used = self.n = p[0] = 0
            return True
        if pid not in p:
            return False
        i = p.index(pid)
        o = 0  # its offset: the lengths of those sent before it
        for j in range(i):
            o += self.len[j]
        k = self.len[i]
        m = self.used - o - k
        if m:  # the messages sent after it move down
            move(self.data, o, self.data, o + k, m)
        self.used -= k
        n = self.n - 1
        for j in range(i, n):
            self.pid[j] = self.pid[j + 1]
            self.len[j] = self.len[j + 1]
            self.state[j] = self.state[j + 1]
            self.key[j] = self.key[j + 1]
        self.pid[n] = 0
        self.n = n
        return True

    def out_has(self, pid):
        return pid in self.pid

    def out_count(self):
        return self.n

    def in_add(self, pid, buf, off, n):
        p = self.inpid
        if 0 not in p:
            raise StoreFull("store full", 0x97)
        p[p.index(0)] = pid

    def in_done(self, pid):
        pass  # delivered at once; nothing survives a reset anyway

    def in_has(self, pid):
        return pid in self.inpid

    def in_del(self, pid):
        p = self.inpid
        if pid in p:  # (held once: in_add follows in_has)
            p[p.index(pid)] = 0

    def in_count(self):
        return len(self.inpid) - self.inpid.count(0)

    def in_max(self, window):
        return len(self.inpid)  # (the pool is outbound's alone)

    def in_clear(self):
        # the broker lost the session: held inbound ids mean nothing now
        self.inpid = [0] * len(self.inpid)  # (once a connection: may allocate)

    def recover(self):
        r = []
        o = 0
        for i in range(self.n):
            k = self.len[i]
            r.append((self.pid[i], chr(self.state[i]), self.key[i], bytes(self.data[o:o + k])))
            o += k
        return r

    def accepted(self, key):
        return key <= self.last_key
