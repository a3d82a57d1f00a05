#!/usr/bin/env python3
"""Run N sensor nodes on the desktop against a broker: each one the real
firmware/node.py under CPython (through tools/desktop/shim), in its own thread.

    python -m tools.desktop.simulate --nodes 5 --host 192.168.1.10 --port 1883
    python -m tools.desktop.simulate --nodes 3 --start-broker --seconds 30
    make simulate NODES=5 SIM_ARGS="--host 192.168.1.10"

Without --start-broker the broker at --host:--port (default 127.0.0.1:1883)
must be running; --start-broker runs umqtt3's own on 127.0.0.1 (--port, or a
free port) for as long as the simulation runs (--start-broker mosquitto runs
Debian's). Nodes publish <prefix>/<id>/<metric> as on a device (see
docs/firmware.md); watch them with mosquitto_sub -t '<prefix>/#' -v.

--seconds 0 runs until Ctrl-C. At the end each node's readings accepted and
dropped are printed; the exit status is 1 if a node accepted none.
"""
import os
import shutil
import sys
import tempfile
import threading
import time

from tools import args, procs
from tools.desktop import sim
from tools.device import deploy, devices


def parser():
    ap = args.parser("python -m tools.desktop.simulate", __doc__)
    ap.add_argument("--nodes", type=args.count, default=3, help="how many nodes")
    ap.add_argument("--host", type=args.host, default="127.0.0.1", help="the broker's host")
    ap.add_argument("--port", type=args.port_or_zero, default=0,
                    help="the broker's port (default: 1883; with --start-broker a free one)")
    ap.add_argument("--start-broker", nargs="?", const="umqtt3", choices=("umqtt3", "mosquitto"),
                    help="start a broker on 127.0.0.1 for the simulation (default: umqtt3's)")
    ap.add_argument("--seconds", type=args.not_negative, default=0,
                    help="stop after this long (0: until Ctrl-C)")
    ap.add_argument("--period", type=args.positive, default=1.0, help="seconds between readings")
    ap.add_argument("--qos", type=int, default=1, choices=(0, 1, 2), help="QoS of the readings")
    ap.add_argument("--store", choices=("memory", "file"), default="",
                    help="where in-flight readings wait (default: file for QoS 2, else memory)")
    ap.add_argument("--prefix", default=sim.PREFIX, help="first topic level")
    ap.add_argument("--id-prefix", default="sim", help="node ids are <this>1..<this>N")
    ap.add_argument("--board", default="desktop", help="board profile (boards/<name>.py)")
    ap.add_argument("--secrets", help="secrets.json with mqtt_user / mqtt_password")
    ap.add_argument("--verbose", action="store_true", help="print the nodes' own log lines")
    return ap


def parse(argv=None):
    ap = parser()
    a = ap.parse_args(argv)
    if a.start_broker and a.port:
        args.check_free(ap, a.port)
    if a.start_broker == "mosquitto" and not shutil.which("mosquitto"):
        ap.error("--start-broker mosquitto: mosquitto is not installed (apt-get install mosquitto)")
    boards = sorted(f[:-3] for f in os.listdir(os.path.join(procs.ROOT, "boards"))
                    if f.endswith(".py"))
    if a.board not in boards:
        ap.error("--board %s: no such profile (one of %s)" % (a.board, ", ".join(boards)))
    # the longest node id is the last one
    sim.check_config(ap, sim.node_config("%s%d" % (a.id_prefix, a.nodes), a.port or 1883,
                                         a.period, host=a.host, prefix=a.prefix, qos=a.qos,
                                         store=a.store))
    return a


def main(argv=None):
    a = parse(argv)
    try:
        # mqtt_user / mqtt_password; checked as deploy checks a board's,
        # before any node starts
        secrets = deploy.read_secrets(a.secrets) if a.secrets else {}
    except devices.Usage as e:
        return devices.report("simulate", e)

    tmp = tempfile.mkdtemp(prefix="umqtt3-sim-")
    broker = None
    host, port = a.host, a.port or 1883
    if a.start_broker:
        host, port = "127.0.0.1", a.port or procs.free_port()
        broker = sim.start_broker(a.start_broker, port, tmp)
        print("broker: %s on 127.0.0.1:%d" % (a.start_broker, port), flush=True)
    elif not procs.reachable(host, port, 2.0):
        shutil.rmtree(tmp, ignore_errors=True)
        print("simulate: no broker at %s:%d: start one, or pass --start-broker" % (host, port),
              file=sys.stderr)
        return 2

    stop = threading.Event()
    procs.stop_on_signals(stop)
    nodes = {}
    names = ["%s%d" % (a.id_prefix, i) for i in range(1, a.nodes + 1)]
    threads = []
    for name in names:
        cfg = sim.node_config(name, port, a.period, host=host, prefix=a.prefix, qos=a.qos,
                              store=a.store, store_dir=os.path.join(tmp, name))
        t = threading.Thread(target=sim.run_node, args=(name, cfg, stop, nodes, a.board, secrets),
                             kwargs={"log": print if a.verbose else None}, daemon=True)
        t.start()
        threads.append(t)
    print("%d nodes (%s..%s) publishing %s/<id>/<metric> to %s:%d every %gs"
          % (a.nodes, names[0], names[-1], a.prefix, host, port, a.period), flush=True)
    try:
        end = time.monotonic() + a.seconds if a.seconds else None
        while not stop.is_set() and any(t.is_alive() for t in threads):
            if end and time.monotonic() >= end:
                break
            stop.wait(0.1)
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        for t in threads:
            t.join(10)
        procs.stop(broker, 5)
        shutil.rmtree(tmp, ignore_errors=True)
    idle = []
    for name in names:
        n = nodes.get(name)
        sent = n.sent if n else 0
        print("%s: %d readings accepted, %d dropped%s" % (
            name, sent, n.skipped if n else 0,
            ", stopped by %r" % n.error if n is not None and hasattr(n, "error") else ""))
        if not sent:
            idle.append(name)
    return 1 if idle else 0


if __name__ == "__main__":
    sys.exit(main())
