#!/usr/bin/env python3
"""Bridge throughput: umqtt3's broker bridging to an upstream mosquitto, next
to mosquitto's own bridge and to publishing to the upstream directly.

    python -m tools.measure.bridge              2000 messages per case, out and in
    python -m tools.measure.bridge --messages 500 --direction in

One upstream mosquitto on 127.0.0.1 (a free port) and, per column, a gateway
in its own process: `python -m umqtt3.broker --bridge ... --bridge-topic
"bench/# out 2 \"\" site/"` (with and without `--store DIR`, where every
QoS 1/2 message is on the disk before the node's acknowledgement and leaves
the bridge's queue only once the upstream client stored it), and mosquitto
with a `connection` section of the same rule (its queue in RAM). "direct"
publishes to the upstream with no gateway. One publisher (umqtt3's client,
16 messages in flight) sends N messages at QoS 1 or 2; one subscriber on the
upstream (site/bench/#, same QoS) counts them. `in`: the same the other way
round, rule `bench/# in 2 "" site/`: the publisher on the upstream, the
subscriber on the gateway (with a store, every QoS 1/2 message is routed to
it under the local store's commit before the upstream gets its
acknowledgement; QoS 2 under the bridge's mark). The figure is messages per
second from the first publish to the last message's arrival upstream, and
the ratio against mosquitto's bridge in the same run. Prints; asserts
nothing. `uptime` first: the machine is shared, so compare ratios.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from tools import args
from tools.measure.broker import Server, free_port, LIB
from umqtt3.client import MQTTClient
from umqtt3.flow import Busy
from umqtt3.memstore import MemoryStore

RULE = 'bench/# out 2 "" site/'
RULE_IN = 'bench/# in 2 "" site/'


def start_upstream(tmp):
    exe = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    if not os.path.exists(exe):
        raise SystemExit("bridge: mosquitto is not installed")
    port = free_port()
    conf = os.path.join(tmp, "up.conf")
    lines = ["listener %d 127.0.0.1" % port, "allow_anonymous true", "log_dest none",
             "set_tcp_nodelay true", "max_queued_messages 0", "max_inflight_messages 0"]
    # no in-flight quota: Debian's 2.0.11 then leaves queued QoS 2 messages
    # unsent (fixed in 2.0.13; see tools/measure/broker.py)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        lines.append("user root")
    with open(conf, "w") as f:
        f.write("\n".join(lines) + "\n")
    return Server("upstream", [exe, "-c", conf], port)


def start_mosquitto_bridge(tmp, up, rule=RULE):
    exe = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    port = free_port()
    conf = os.path.join(tmp, "gw.conf")
    lines = ["listener %d 127.0.0.1" % port, "allow_anonymous true", "log_dest none",
             "set_tcp_nodelay true", "max_queued_messages 0", "max_inflight_messages 0",
             "connection gw", "address 127.0.0.1:%d" % up, "topic " + rule,
             "cleansession false", "remote_clientid mosq-gw%d" % port]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        lines.insert(0, "user root")
    with open(conf, "w") as f:
        f.write("\n".join(lines) + "\n")
    return Server("mosquitto bridge", [exe, "-c", conf], port)


def start_umqtt3_bridge(tmp, up, store, rule=RULE):
    port = free_port()
    conf = os.path.join(tmp, "bridge-%d.conf" % port)
    with open(conf, "w") as f:
        # a queue that holds the whole run: measured is the rate, not the
        # refusal; in: the upstream has no in-flight limit (see
        # start_upstream), so room for the QoS 2 messages it sends at once
        f.write("connection gw\naddress 127.0.0.1:%d\ntopic %s\nbridge_queue_size 100000\n"
                "bridge_inflight_in 1024\nremote_clientid umqtt3-gw%d\n" % (up, rule, port))
    argv = [sys.executable, "-m", "umqtt3.broker", "--host", "127.0.0.1", "--port", str(port),
            "--quiet", "--sys-interval", "0", "--bridge-config", conf]
    if store:
        argv += ["--store", os.path.join(tmp, "gw-store-%d" % port)]
    name = "umqtt3 bridge+store" if store else "umqtt3 bridge"
    return Server(name, argv, port, dict(os.environ, PYTHONPATH=LIB))


class Counter:
    """The upstream subscriber, on its own thread."""

    def __init__(self, port, qos, tag, topic="site/bench/#", clean=True):
        self.n = 0
        self.seen = set()
        self.probed = False
        self.stop = threading.Event()
        # room for every QoS 2 id the upstream may have on its way (its
        # in-flight window plus those awaiting PUBREL)
        self.c = MQTTClient("count-" + tag, "127.0.0.1", port, keepalive=30, bufsize=1024,
                            store=MemoryStore(8, 128, 1024))
        self.c.set_callback(self.got)
        self.c.connect(clean_session=clean)
        self.c.subscribe(topic, qos)
        self.t = threading.Thread(target=self.loop, daemon=True)
        self.t.start()

    def got(self, topic, msg):
        if msg == b"probe":
            self.probed = True
            return
        self.n += 1
        self.seen.add(msg)

    def loop(self):
        while not self.stop.is_set():
            self.c.poll(5)

    def close(self):
        self.stop.set()
        self.t.join(5)
        self.c.disconnect()


def run_case(port, up, qos, n, tag, topic, sub_topic="site/bench/#", clean=True, probe=False):
    # the publisher on port, the subscriber (sub_topic, clean session or
    # not) on up; probe: wait until a probe came through first (the
    # bridge's subscription upstream is in place)
    cnt = Counter(up, qos, tag, sub_topic, clean)
    time.sleep(0.3)  # the bridge is up and the subscription in place
    pub = MQTTClient("pub-" + tag, "127.0.0.1", port, keepalive=30, window=16, bufsize=1024)
    pub.connect()
    if probe:
        end = time.monotonic() + 10
        while not cnt.probed and time.monotonic() < end:
            pub.publish(topic[:topic.rindex("/")] + "/probe", b"probe", qos=1)
            time.sleep(0.05)
        time.sleep(0.2)  # the probes still on their way (the counter skips them)
    t0 = time.monotonic()
    for i in range(n):
        msg = b"%08d" % i
        while True:
            try:
                pub.publish(topic, msg, qos=qos, wait=False)
                break
            except Busy:
                pub.poll(1)
        pub.poll(0)
    deadline = t0 + 60
    while len(cnt.seen) < n and time.monotonic() < deadline:
        pub.poll(1)
    t = time.monotonic() - t0
    got = len(cnt.seen)
    dup = cnt.n - got
    pub.disconnect()
    cnt.close()
    if got != n:
        print("  %s: %d of %d messages arrived in %.1f s" % (tag, got, n, t))
    return (got / t if got == n else None), dup


def main(argv=None):
    ap = args.parser("python -m tools.measure.bridge", __doc__)
    ap.add_argument("--messages", type=args.count, default=2000, help="messages per case (default 2000)")
    ap.add_argument("--direction", choices=("out", "in", "both"), default="both",
                    help="out: node -> gateway -> upstream; in: upstream -> gateway -> "
                         "local subscriber (default both)")
    a = ap.parse_args(argv)
    print("load:", open("/proc/loadavg").read().strip() if os.path.exists("/proc/loadavg") else "?")
    dirs = ("out", "in") if a.direction == "both" else (a.direction,)
    for d in dirs:
        measure(d, a.messages)
    print("ratios: against mosquitto's bridge in the same run")
    return 0


def measure(direction, n):
    tmp = tempfile.mkdtemp(prefix="bench-bridge-")
    up = start_upstream(tmp)
    res = {}
    rule = RULE if direction == "out" else RULE_IN
    try:
        cols = [("direct", None),
                ("mosquitto bridge", lambda: start_mosquitto_bridge(tmp, up.port, rule)),
                ("umqtt3 bridge", lambda: start_umqtt3_bridge(tmp, up.port, False, rule)),
                ("umqtt3 bridge+store", lambda: start_umqtt3_bridge(tmp, up.port, True, rule))]
        k = 0
        for qos in (1, 2):
            for name, start in cols:
                k += 1
                srv = start() if start else None
                try:
                    gw = srv.port if srv else up.port
                    tag = "%s%d" % (direction, k)
                    if direction == "out":
                        topic = "site/bench/x" if srv is None else "bench/x"
                        res[(name, qos)] = run_case(gw, up.port, qos, n, tag, topic)
                    else:
                        # the local subscriber's session is persistent: with a
                        # store the gateway routes each message to the disk
                        res[(name, qos)] = run_case(up.port, gw, qos, n, tag, "site/bench/x",
                                                    "site/bench/#" if srv is None else "bench/#",
                                                    False, srv is not None)
                finally:
                    if srv:
                        srv.stop()
    finally:
        up.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print("%s: %d messages, one publisher, msg/s end to end (duplicates at the subscriber):"
          % ("out, node -> gateway -> upstream" if direction == "out"
             else "in, upstream -> gateway -> local subscriber", n))
    print("%-22s %22s %22s" % ("", "QoS 1", "QoS 2"))
    for name, _ in cols:
        row = "%-22s" % name
        for qos in (1, 2):
            r, dup = res[(name, qos)]
            ref = res[("mosquitto bridge", qos)][0]
            cell = "-" if r is None else "%d" % r
            if r and ref:
                cell += " (%.2fx)" % (r / ref)
            cell += " [%d]" % dup
            row += "%23s" % cell
        print(row)


if __name__ == "__main__":
    sys.exit(main())
