# umqtt3.bridge_queue -- one bridge's store-and-forward queue of QoS 1/2
# messages for the upstream broker, on the broker's store.
#
#     q = Queue(files, "/store/bup", size=100)
#     k = q.add(tag, qos, retain, topic, payload)   # before the node's ack
#     qos, retain, topic, payload = q.read(q.keys[0])
#     q.remove(k)                                   # the upstream client took it
#
# One record per message, q<key>, written through the broker store's file
# layer (broker_store.Disk.fs): with the desktop's log layout it becomes
# durable in the same group commit as the acknowledgement to the node, on
# littlefs it is synced as it is written. The key is the message's place in
# the queue: it only grows, and it is the key the upstream client stores the
# message under (MQTTClient.publish(key=)), so after a power loss
# accepted(key) tells a message the client already holds from one it never
# saw. "last" keeps the highest key ever handed on, so keys keep growing
# across restarts with an empty queue.
#
# Record: store.frame(seq = tag + 1, key, body), body = qos (1), retain (1),
# topic length (2), topic, payload; with MQTT 5 properties the qos byte has
# 0x80 set and the topic is followed by the property list's length (4) and
# the list (a record without them reads as before). tag: the broker's tag of the QoS 2
# routing the message came from (-1: none), so that a routing a power loss
# cut short is taken back here too (undo(), before the broker loads).
#
# Marks, i<pid> beside the queue's records: a QoS 2 message from upstream
# (an `in` rule) whose local routing is under way, frame(pid, tag, b""):
# the upstream packet id and the broker's tag that its local copies carry.
# Written before the routing, removed once the upstream client recorded the
# delivery and before its PUBREC leaves; a mark found at start-up whose id
# the client still holds undelivered is a routing to take back (bridge.undo_cut).
from .store import frame, unframe


class RamFiles:
    """The files layer in RAM: the queue of a broker without a store."""

    def __init__(self):
        self.f = {}

    def write(self, path, data):
        self.f[path] = bytes(data)

    def read(self, path):
        try:
            return self.f[path]
        except KeyError:
            raise OSError(2)

    def rename(self, a, b):
        self.f[b] = self.f.pop(a)

    def remove(self, path):
        self.f.pop(path, None)

    def listdir(self, path):
        p = path + "/"
        return [k[len(p):] for k in self.f if k.startswith(p)]

    def mkdir(self, path):
        pass

    def sync_dir(self, path):
        pass


def client_files(path, files=None, blog=None):
    """The files layer for the upstream client's store at path: where the
    broker's store has the log layout (blog: its LogFiles), that log. The
    client's records then go out with the queue's and the routings' in one
    log, whose prefix a power loss keeps: a queue entry's removal is never
    durable without the client's record of the message that precedes it.
    The bridge's sync hook (set_sync) commits the log before the client's
    queued PUBLISHes, PUBRELs and acknowledgements leave: one sync for what
    a step hands upstream. Else files (one synced file per record, as on
    littlefs)."""
    from .broker_log import AppendFiles, LogFiles
    base = files or AppendFiles()
    if isinstance(blog, LogFiles):
        _adopt(path, base, blog)
        return blog
    base.mkdir(path)
    return base


def _adopt(path, base, blog):
    # A store written before the client's records moved into the broker's
    # log kept its outbound records in path/log of its own: taken over
    # (committed first, then that log removed; a power loss between the
    # two takes the same records over again)
    from .broker_log import LogFiles
    try:
        if "log" not in base.listdir(path):
            return
    except OSError:
        return
    old = LogFiles(path, base).contents()
    for k in old:
        blog.write(k, old[k])
    blog.commit()
    base.remove(path + "/log")


def _name(k):
    return "q%010d" % k


def _body(qos, retain, topic, payload, props=None):
    n = len(topic)
    m = 4 + len(props) if props else 0
    b = bytearray(4 + n + m + len(payload))
    b[0] = qos | (0x80 if m else 0)
    b[1] = 1 if retain else 0
    b[2] = n >> 8
    b[3] = n & 255
    b[4:4 + n] = topic
    i = 4 + n
    if m:
        k = m - 4
        b[i] = k >> 24
        b[i + 1] = (k >> 16) & 255
        b[i + 2] = (k >> 8) & 255
        b[i + 3] = k & 255
        b[i + 4:i + m] = props
        i += m
    b[i:] = payload
    return b


class Queue:
    def __init__(self, files, path, size):
        self.fs = files
        self.dir = path
        self.size = size  # messages held at most: one more is refused
        self.keys = []  # held, oldest first
        self.last = -1  # the highest key ever given
        files.mkdir(path)
        for name in sorted(files.listdir(path)):
            rec = self._rec(name)
            if rec is None:
                continue
            k = rec[1]
            if k > self.last:
                self.last = k
            if name != "last":
                self.keys.append(k)

    def _p(self, name):
        return self.dir + "/" + name

    def _rec(self, name):
        if name != "last" and not (name[:1] == "q" and name[1:].isdigit()):
            return None  # not ours
        p = self._p(name)
        try:
            rec = unframe(self.fs.read(p))
        except OSError:
            return None
        if rec is None:
            self.fs.remove(p)  # torn by a power loss: never acknowledged
        return rec

    def full(self):
        return len(self.keys) >= self.size

    def add(self, tag, qos, retain, topic, payload, props=None):
        """Write a message (durable with the broker's next commit); its key.
        props: its MQTT 5 property list (bytes), or None."""
        k = self.last + 1
        self.fs.write(self._p(_name(k)), frame(tag + 1, k, _body(qos, retain, topic, payload,
                                                                 props)))
        self.fs.sync_dir(self.dir)
        self.last = k
        self.keys.append(k)
        return k

    def mark(self, pid, tag):
        """An upstream QoS 2 message (packet id pid) is about to be routed
        here with this tag: durable with the routing (the same commit on a
        desktop disk, synced first on littlefs)."""
        self.fs.write(self._p("i%05d" % pid), frame(pid, tag, b""))
        self.fs.sync_dir(self.dir)

    def unmark(self, pid):
        """The upstream client recorded that message's delivery."""
        self.fs.remove(self._p("i%05d" % pid))
        self.fs.sync_dir(self.dir)

    def read(self, k):
        """(qos, retain, topic, payload) of the message with key k."""
        return self.entry(k)[:4]

    def entry(self, k):
        """(qos, retain, topic, payload, props) of the message with key k;
        props None when it has no MQTT 5 properties."""
        b = unframe(self.fs.read(self._p(_name(k))))[2]
        n = (b[2] << 8) | b[3]
        i = 4 + n
        pr = None
        if b[0] & 0x80:
            m = (b[i] << 24) | (b[i + 1] << 16) | (b[i + 2] << 8) | b[i + 3]
            pr = b[i + 4:i + 4 + m]
            i += 4 + m
        return b[0] & 3, b[1] == 1, b[4:4 + n], b[i:], pr

    def remove(self, k):
        self.keys.remove(k)
        p = self._p(_name(k))
        if k == self.last:
            self.fs.rename(p, self._p("last"))  # keys grow on after a restart
        else:
            self.fs.remove(p)
        self.fs.sync_dir(self.dir)


def undo(files, path, tags):
    """Remove the records of the queue at path whose routing tag is in
    tags: QoS 2 routings a power loss cut short, which the publisher sends
    again. Called before the broker's store takes those routings back."""
    n = 0
    for name in files.listdir(path):
        if name[:1] != "q":
            continue
        p = path + "/" + name
        try:
            rec = unframe(files.read(p))
        except OSError:
            continue
        if rec is not None and rec[0] - 1 in tags:
            files.remove(p)
            n += 1
    if n:
        files.sync_dir(path)
    return n


def marks(files, path):
    """[(pid, tag)] of the marks of the queue at path (torn ones removed)."""
    out = []
    for name in files.listdir(path):
        if name[:1] != "i" or not name[1:].isdigit():
            continue
        p = path + "/" + name
        try:
            rec = unframe(files.read(p))
        except OSError:
            continue
        if rec is None:
            files.remove(p)  # torn: its routing had not begun
        else:
            out.append((rec[0], rec[1]))
    return out
