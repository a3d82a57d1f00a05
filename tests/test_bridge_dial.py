# The bridge dials its upstream without blocking the gateway's one loop:
# while the upstream address takes no connection (a listening socket that
# never accepts, its backlog full, so the kernel drops the SYNs and the
# connect hangs), a node's QoS 1 round trips through the gateway stay
# prompt [MQTT-4.3.2-1]; once the upstream accepts, the bridge's next
# attempt reaches it with CONNECT.
import socket
import subprocess
import time

import pytest

from tools.procs import free_port, start, stop, umqtt3_broker_cmd
from umqtt3.client import MQTTClient

pytestmark = pytest.mark.slow


def _black_hole():
    """A listener on 127.0.0.1 that accepts nothing and whose backlog is
    full, and the sockets that fill it."""
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(0)
    fill = []
    for _ in range(4):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(hole.getsockname())
        fill.append(s)
    probe = socket.socket()
    probe.settimeout(0.3)
    try:
        probe.connect(hole.getsockname())
        hung = False
    except OSError:  # timed out: the kernel dropped the SYN
        hung = True
    probe.close()
    assert hung, "the backlog did not fill: connects to it would not hang"
    return hole, fill


def test_round_trips_stay_prompt_while_the_uplink_is_dialled():
    hole, fill = _black_hole()
    gport = free_port()
    gw = start(umqtt3_broker_cmd(gport, "--quiet", "--sys-interval", "0",
                                 "--bridge", "127.0.0.1:%d" % hole.getsockname()[1],
                                 "--bridge-topic", "r/# out 1"),
               gport, stdout=subprocess.DEVNULL)
    node = MQTTClient("node", "127.0.0.1", gport, timeout_ms=5000)
    try:
        node.connect()
        slowest = 0.0
        # 4 s: the first attempt's 3 s timeout, its backoff and the next one
        end = time.monotonic() + 4.0
        n = 0
        while time.monotonic() < end:
            t = time.monotonic()
            node.publish("r/x", b"%d" % n, qos=1)  # returns on PUBACK
            slowest = max(slowest, time.monotonic() - t)
            n += 1
            time.sleep(0.05)
        assert n > 20
        assert slowest < 0.5, "a round trip took %.2f s while the uplink was dialled" % slowest
        # the upstream takes connections again: the bridge's attempt reaches it
        hole.settimeout(0.5)
        for s in fill:
            s.close()
        got = b""
        deadline = time.monotonic() + 15
        while not got and time.monotonic() < deadline:
            try:
                c, _ = hole.accept()
            except socket.timeout:
                continue
            c.settimeout(2)
            try:
                got = c.recv(1)
            except OSError:
                pass
            c.close()
        assert got == b"\x10", "the bridge never sent CONNECT upstream"  # [MQTT-3.1.0-1]
    finally:
        node.disconnect()
        stop(gw)
        for s in fill:
            s.close()
        hole.close()


def test_a_slow_name_lookup_does_not_stop_the_gateway(broker_factory, monkeypatch):
    # the upstream's host name takes 1.5 s to resolve: on CPython the lookup
    # runs in a worker thread, so the gateway's loop goes on meanwhile; its
    # result serves every attempt until one fails, then it is looked up again
    from umqtt3.broker import Broker
    from umqtt3.bridge import install
    up = broker_factory()
    real = socket.getaddrinfo
    asked = []

    def slow(host, port, *a, **kw):
        if host == "upstream.test":
            asked.append(time.monotonic())
            time.sleep(1.5)
            host = "127.0.0.1"
        return real(host, port, *a, **kw)
    monkeypatch.setattr(socket, "getaddrinfo", slow)
    b = Broker(port=None, sys_interval=0)
    hub = install(b, [{"name": "dns", "host": "upstream.test", "port": up.port,
                       "rules": ['s/# out 1 "" site/'], "backoff_ms": (50, 100)}])
    br = hub.all[0]
    try:
        slowest = 0.0
        end = time.monotonic() + 10
        while not br.up and time.monotonic() < end:
            t = time.monotonic()
            b.poll_once(5)
            slowest = max(slowest, time.monotonic() - t)
        assert br.up, "the bridge never connected to upstream.test"
        assert slowest < 0.2, "a step of the gateway took %.2f s during the lookup" % slowest
        assert len(asked) == 1
        # the link breaks: the next attempt looks the name up again
        up.stop()
        up.start()
        end = time.monotonic() + 15
        while not (br.up and br.connects == 2) and time.monotonic() < end:
            b.poll_once(5)
        assert br.connects == 2 and len(asked) >= 2, (br.connects, asked)
    finally:
        b.close()
