"""Fan-out to many persistent sessions through the broker's store, in one
process: both store layouts, the same load.

    python -m tools.measure.fanout_store                  500 sessions, 20 messages
    python -m tools.measure.fanout_store --sessions 100 --messages 50

SESSIONS offline persistent sessions (CleanSession 0) subscribe to one topic
at QoS 1, then a publisher sends MESSAGES QoS 1 messages, one per poll step;
each PUBACK leaves once the message is on disk for every session. Printed:
messages acknowledged per second and milliseconds per message, with one
file per record (littlefs's layout, every change synced) and with the log
(one sync per step). The message is written once (a message record) and
each session keeps a small record referring to it (docs/store.md).
"""
import shutil
import tempfile
import time

from tools import args


def run(sessions, messages, files):
    from umqtt3.broker import Broker
    from umqtt3.broker_bytes import feed, take
    from umqtt3.codec import encode_connect, encode_subscribe, encode_publish
    from umqtt3.transport import Pipe
    store = tempfile.mkdtemp(prefix="umqtt3-fanout-")
    b = Broker(port=None, store=store, files=files,
               sys_interval=0, max_sessions=sessions + 1, max_clients=sessions + 1,
               mem_budget=0, max_queued_bytes=0)  # the queues, not the budgets, are measured
    buf = bytearray(256)

    def client(cid):
        c = b.attach(Pipe.pair(4096)[1])
        feed(b, c, bytes(buf[:encode_connect(buf, 0, cid, 4, False, 0)]), 0)
        take(b, c)
        return c
    for i in range(sessions):
        c = client(b"s%d" % i)
        feed(b, c, bytes(buf[:encode_subscribe(buf, 0, 1, [(b"t", 1)])]), 0)
        take(b, c)
        b.disconnect(c, "offline", False)
    p = client(b"p")
    acks = 0
    t = time.perf_counter()
    for i in range(messages):
        feed(b, p, bytes(buf[:encode_publish(buf, 0, b"t", b"reading %d" % i, 1, 1 + i)]), 0)
        acks += take(b, p).count(b"\x40\x02")
    dt = time.perf_counter() - t
    b.close()
    shutil.rmtree(store, ignore_errors=True)
    if acks != messages:
        raise SystemExit("fanout_store: %d of %d messages acknowledged" % (acks, messages))
    return dt


def main(argv=None):
    from umqtt3.broker_log import AppendFiles
    from umqtt3.store import OSFiles
    ap = args.parser("python -m tools.measure.fanout_store", __doc__)
    ap.add_argument("--sessions", type=args.count, default=500, help="offline persistent sessions")
    ap.add_argument("--messages", type=args.count, default=20, help="QoS 1 messages published")
    a = ap.parse_args(argv)
    print("%d offline persistent sessions, %d QoS 1 messages, one per step"
          % (a.sessions, a.messages))
    for name, files in (("one file per record", OSFiles()), ("log (group commit)", AppendFiles())):
        dt = run(a.sessions, a.messages, files)
        print("%-20s %9.1f msg/s %9.1f ms per message" % (name, a.messages / dt, dt / a.messages * 1000))


if __name__ == "__main__":
    main()
