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
