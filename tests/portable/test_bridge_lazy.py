# What a gateway's bridge loads, and keeps (CPython and the WebAssembly
# MicroPython): the settings checks (bridge_settings) only for the check,
# dropped again after it; the failover between several upstream addresses
# (bridge_failover) only for a bridge that has two or more.
#
# Under MicroPython test_settings_checks_leave_no_code_behind prints what
# docs/figures.md quotes: the RAM a settings() check leaves behind, and
# what the module kept loaded would keep (node tests/mp/run.mjs --heap 2m
# tests/mp/testrunner.py test_bridge_lazy).
import gc
import sys

import umqtt3
from support import collect
from umqtt3 import bridge
from umqtt3.broker import Broker
from umqtt3.transport import Pipe

MICROPYTHON = sys.implementation.name == "micropython"
CONNACK = b"\x20\x02\x00\x00"
GOOD = {"name": "up", "host": "10.0.0.2", "rules": ["sensors/# out 1", "cmd/# in 1"]}


def _forget(name):
    # as if this interpreter had never loaded umqtt3.<name> (an earlier
    # test module may have)
    sys.modules.pop("umqtt3." + name, None)
    if name in dir(umqtt3):
        delattr(umqtt3, name)


def _loaded(name):
    return "umqtt3." + name in sys.modules or name in dir(umqtt3)


def test_settings_module_is_not_kept():
    _forget("bridge_settings")
    c = bridge.settings(dict(GOOD))
    assert c["rules"][0].qos == 1 and not _loaded("bridge_settings")
    assert bridge.parse_rule("a/# in 2").qos == 2 and not _loaded("bridge_settings")
    try:
        bridge.settings(dict(GOOD, window=0))  # a refusal drops it too
    except ValueError as e:
        assert "window must be a whole number" in str(e), str(e)
    else:
        raise AssertionError("window 0 taken")
    assert not _loaded("bridge_settings")
    # and it loads again for the next check (the package forgot it)
    assert bridge.settings(dict(GOOD))["window"] == 8


def _connected(cfg):
    # a broker with one bridge whose upstream answers CONNECT with CONNACK;
    # the bridge's link is then dropped once: it backs off (and with several
    # addresses moves to the next one)
    b = Broker(port=None, sys_interval=0, max_packet=512)
    ends = []

    def link():
        a, z = Pipe.pair(1024)
        ends.append(z)
        return a
    hub = bridge.install(b, [dict(cfg, link=link, status_topic=None)])
    b.poll_once(0)
    junk = bytearray(256)
    ends[-1].readinto(junk, 256)  # CONNECT
    ends[-1].write(CONNACK)
    for _ in range(3):
        b.poll_once(0)
    br = hub.all[0]
    assert br.up
    ends[-1].close()
    for _ in range(3):
        b.poll_once(0)
    assert not br.up and br.tries == 1
    b.close()
    return br


def test_one_address_never_loads_the_failover():
    _forget("bridge_failover")
    _connected(GOOD)
    br = _connected({"name": "up", "addresses": ["10.0.0.2:1884"], "rules": ["a out 1"]})
    assert br.addrs == [("10.0.0.2", 1884)] and br.at == 0
    assert not _loaded("bridge_failover")
    # two addresses: loaded, and the lost link moves the bridge to the second
    br = _connected({"name": "up", "addresses": ["10.0.0.2", "10.0.0.3"], "rules": ["a out 1"]})
    assert _loaded("bridge_failover") and br.at == 1


async def test_settings_checks_leave_no_code_behind():
    # the RAM the check's code takes is given back once it has run (a
    # module kept in sys.modules keeps its code); the first check leaves
    # the names it interned (MicroPython never frees a qstr) and what
    # its first run caches, later ones nothing
    cfg = dict(GOOD)
    _forget("bridge_settings")
    bridge.settings(cfg)
    await collect()
    m0 = gc.mem_alloc() if MICROPYTHON else 0
    for _ in range(3):
        bridge.settings(cfg)
    await collect()
    m1 = gc.mem_alloc() if MICROPYTHON else 0
    from umqtt3 import bridge_settings
    await collect()
    m2 = gc.mem_alloc() if MICROPYTHON else 0
    bridge_settings.settings(cfg)
    _forget("bridge_settings")
    del bridge_settings
    if MICROPYTHON:
        print("RAM after three settings() checks: %d bytes; the module kept loaded: %d bytes"
              % (m1 - m0, m2 - m1))
        # (under 1 KB: a stale pointer the collector takes for a live one
        # keeps a few blocks now and then, 288 bytes in one CI run; the
        # module's code is more than 2 KB)
        assert m1 - m0 < 1024 and m2 - m1 > 2000, (m1 - m0, m2 - m1)
