# The bridge's RAM under MicroPython, and the broker's hot path with a
# bridge: a message no rule takes costs the route hook no allocation
# (test_bridge_fwd_mem: the messages the bridge carries).
#
# Under the WebAssembly MicroPython (node tests/mp/run.mjs ... test_bridge_mem)
# test_ram_of_a_bridge prints what docs/figures.md quotes: the import of
# umqtt3.bridge (with bridge_queue), and one bridge installed and connected
# (its upstream client: buffers, QoS machine, in-memory store). Its upstream
# is a pipe whose far end answers CONNECT with a CONNACK written by hand, so
# no second broker's RAM is counted.
import gc
import sys

from support import locked, collect, SkipTest
from umqtt3.broker import Broker
from umqtt3.broker_session import Route
from umqtt3.transport import Pipe

MICROPYTHON = sys.implementation.name == "micropython"
CONNACK = b"\x20\x02\x00\x00"


def test_traffic_outside_the_rules_allocates_nothing():
    from umqtt3.bridge import install
    b = Broker(port=None, sys_interval=0)
    hub = install(b, [{"name": "up", "rules": ["up/# out 1 gw/ site/", "cmd/# in 1"],
                       "link": lambda: None, "status_topic": None}])
    r = Route()
    t = b"sensors/n1/temp"
    pl = b"21.5"
    r.set(t, 0, len(t), pl, 0, len(pl), 1)

    def go(n):
        for _ in range(n):
            hub.route(r)
    go(10)
    if MICROPYTHON:
        locked(go, 200)  # raises MemoryError on any allocation
    else:
        go(200)
    assert not hub.all[0].q.keys and not hub.all[0].q0


async def test_ram_of_a_bridge():
    if "umqtt3.bridge" in sys.modules or "umqtt3.client" in sys.modules:
        # loaded by an earlier test module: its import would cost nothing here
        raise SkipTest("run this module on its own to measure the bridge's RAM")
    await collect()
    m0 = gc.mem_alloc() if MICROPYTHON else 0
    from umqtt3 import bridge
    await collect()
    m1 = gc.mem_alloc() if MICROPYTHON else 0
    b = Broker(port=None, sys_interval=0, max_packet=512)
    ends = []

    def link():
        a, z = Pipe.pair(1024)
        ends.append(z)
        return a
    await collect()
    m2 = gc.mem_alloc() if MICROPYTHON else 0
    hub = bridge.install(b, [{"name": "up", "rules": ["sensors/# out 1 gw/ site/"],
                              "link": link, "status_topic": None, "window": 4,
                              "queue_size": 64}])
    b.poll_once(0)  # the client is made and sends CONNECT
    assert ends, "the bridge did not dial"
    junk = bytearray(256)
    ends[-1].readinto(junk, 256)  # CONNECT
    ends[-1].write(CONNACK)
    for _ in range(3):
        b.poll_once(0)
    assert hub.all[0].up
    await collect()
    m3 = gc.mem_alloc() if MICROPYTHON else 0
    if MICROPYTHON:
        imp = m1 - m0
        one = m3 - m2
        print("RAM of a bridge (MicroPython): import %d bytes; one bridge connected %d bytes"
              " (max_packet=512, window=4, pipe ends of 2 x 1024 bytes included)" % (imp, one))
        # tripwires a little above docs/figures.md's figures (21.5 KB and 30.2 KB on 2026-11-27)
        assert imp < 40000 and one < 31000, (imp, one)
