"""umqtt3's broker over real sockets on 127.0.0.1 (CPython).

The MQTT 3.1.1 conformance tests live in tests/portable/test_broker_*.py,
one per normative statement, each citing its [MQTT-x.x.x-y]. There they run
over in-memory pipes (under pytest and under MicroPython); imported here, the
same test bodies run again with the broker on a background thread and every
client a TCP socket (test_broker_harness.Sockets).

Below them, the tests that need what only sockets or CPython have, each with
its reason.
"""
import asyncio
import os
import socket
import subprocess
import sys
import time

import pytest

# the conformance tests, collected again in this module
from test_broker_connect import *  # noqa: F401,F403
from test_broker_pubsub import *  # noqa: F401,F403
from test_broker_sessions import *  # noqa: F401,F403
from test_broker_limits import *  # noqa: F401,F403
from test_broker_strict import *  # noqa: F401,F403
from test_broker_kept import *  # noqa: F401,F403

# (after the star imports: the tests below use the socket forms of these)
import broker_harness  # noqa: E402
from test_broker_harness import SOCKETS, Raw, running, wait_for, connect_bytes, LIB  # noqa: E402
from umqtt3.broker import Broker  # noqa: E402


@pytest.fixture(autouse=True)
def _over_sockets():
    old = broker_harness.use(SOCKETS)
    yield
    broker_harness.use(old)


# ---------------------------------------------------------------- CPython and sockets only

def test_flood_of_connects():
    # needs sockets: max_pending is enforced at accept(), and the OS's
    # listen backlog holds connections the broker has not accepted yet
    with running(max_clients=8, max_pending=4, backlog=64) as b:
        socks = []
        try:
            for i in range(60):
                try:
                    s = socket.create_connection(("127.0.0.1", b.port), timeout=5)
                    s.sendall(connect_bytes("flood%d" % (i % 20)))
                    socks.append(s)
                except OSError:
                    pass
            assert wait_for(lambda: len(b.clients) <= 12, timeout=10)
            assert b.connected <= 8
        finally:
            for s in socks:
                s.close()
        # the backlog may still hold flood connections the broker accepts,
        # finds closed and drops
        assert wait_for(lambda: b.connected == 0 and not b.clients, timeout=10)
        # the broker recovers: a new client is served once the flood is gone
        # (it may still be draining flood connections from the listen backlog,
        # and refusing past max_pending meanwhile is right, so try a few times)
        for attempt in range(10):
            try:
                with Raw(b) as c:
                    assert c.connect("after").rc == 0
                break
            except (OSError, AssertionError):
                if attempt == 9:
                    raise
                time.sleep(0.2)


def test_poll_once_in_a_user_loop():
    # needs a listening socket: the broker accepts from inside poll_once
    b = Broker(port=0, sys_interval=0)
    try:
        c = socket.create_connection(("127.0.0.1", b.port), timeout=5)
        c.sendall(connect_bytes("loop"))
        data = b""
        deadline = time.monotonic() + 5
        c.setblocking(False)
        while len(data) < 4 and time.monotonic() < deadline:
            b.poll_once(20)
            try:
                data += c.recv(16)
            except BlockingIOError:
                pass
        assert data == b"\x20\x02\x00\x00"
        c.close()
    finally:
        b.close()


def _recv_all(c, wait=0.05):
    data = b""
    c.settimeout(wait)
    try:
        while True:
            b = c.recv(4096)
            if not b:
                return data
            data += b
    except OSError:
        return data


def _fanout_steps(tmp, fanout):
    # 20 persistent sessions (offline, with a store) on t; a publisher's 10
    # QoS 1 PUBLISHes arrive in one gulp with another client's PINGREQ.
    # Returns the PUBACKs the publisher had after each step and whether the
    # PINGREQ was answered in the first step.
    from umqtt3.codec import encode_publish, encode_subscribe
    b = Broker(port=0, sys_interval=0, store=tmp, burst=64, fanout=fanout,
               max_clients=30, max_sessions=30)
    socks = []
    try:
        buf = bytearray(256)
        for i in range(20):
            c = socket.create_connection(("127.0.0.1", b.port), timeout=5)
            socks.append(c)
            n = encode_subscribe(buf, 0, 1, "t", 1)
            c.sendall(bytes(connect_bytes("s%d" % i, clean=False)) + bytes(buf[:n]) + b"\xe0\x00")
            for _ in range(5):
                b.poll_once(10)
        pub = socket.create_connection(("127.0.0.1", b.port), timeout=5)
        other = socket.create_connection(("127.0.0.1", b.port), timeout=5)
        socks += [pub, other]
        pub.sendall(bytes(connect_bytes("pub")))
        other.sendall(bytes(connect_bytes("other")))
        for _ in range(5):
            b.poll_once(10)
        assert _recv_all(pub) == b"\x20\x02\x00\x00"
        assert _recv_all(other) == b"\x20\x02\x00\x00"
        burst = b""
        for k in range(10):
            n = encode_publish(buf, 0, "t", b"m%d" % k, 1, k + 1)
            burst += bytes(buf[:n])
        pub.sendall(burst)
        other.sendall(b"\xc0\x00")  # PINGREQ
        time.sleep(0.1)  # both in the kernel before the step
        acks = []
        pong = None
        while sum(acks) < 10 and len(acks) < 40:
            b.poll_once(100)
            acks.append(_recv_all(pub, 0.02).count(b"\x40\x02"))
            if pong is None:
                pong = _recv_all(other, 0.02) == b"\xd0\x00"
        assert sum(acks) == 10
        # every session holds every message, once (routed, none lost)
        held = [s.queued() for s in b.sessions().values() if s.cid[:1] in (b"s", "s")]
        assert held == [10] * 20
        return acks, pong
    finally:
        for c in socks:
            c.close()
        b.close()


def test_fanout_limit_ends_a_publishers_turn(tmp_path):
    # CPython's read-ahead: a publisher's burst lands in one gulp. Once its
    # packets have routed `fanout` deliveries (20: one PUBLISH to 20
    # sessions) its turn ends, the rest stays in memory for its next turn,
    # and the other connection's PINGREQ is answered in the first step.
    acks, pong = _fanout_steps(str(tmp_path / "a"), 20)
    assert pong
    assert acks == [1] * 10
    # a limit above the burst's deliveries: the whole burst in one turn
    acks, pong = _fanout_steps(str(tmp_path / "b"), 1000)
    assert pong
    assert acks == [10]


def test_packets_left_over_by_the_burst_limit_are_not_stranded():
    # CPython only: socket links are read in large gulps (compat.server_link),
    # so packets can wait in memory where poll cannot see them. The broker
    # reads at most `burst` packets per connection per step.
    b = Broker(port=0, sys_interval=0, burst=1)
    try:
        c = socket.create_connection(("127.0.0.1", b.port), timeout=5)
        c.sendall(bytes(connect_bytes("burst")) + b"\xc0\x00" * 3)  # CONNECT + 3 PINGREQ
        want = b"\x20\x02\x00\x00" + b"\xd0\x00" * 3
        data = b""
        c.setblocking(False)
        t0 = time.monotonic()
        for _ in range(20):
            if len(data) >= len(want):
                break
            b.poll_once(3000)
            try:
                data += c.recv(64)
            except BlockingIOError:
                pass
        assert data == want
        assert time.monotonic() - t0 < 2.5  # no step waited out its timeout
        c.close()
    finally:
        b.close()


def test_asyncio_task_form():
    # needs sockets and CPython's asyncio streams
    async def main():
        b = Broker(port=0, sys_interval=0)
        task = asyncio.ensure_future(b.run())
        try:
            r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", b.port), 5)
            w.write(bytes(connect_bytes("aio")))
            await w.drain()
            assert await asyncio.wait_for(r.readexactly(4), 5) == b"\x20\x02\x00\x00"
            w.close()
        finally:
            b.stop()
            await asyncio.wait_for(task, 5)
            b.close()
    asyncio.run(main())


def test_cli_prints_where_it_listens_and_logs(tmp_path):
    # needs a subprocess: python -m umqtt3.broker
    users = tmp_path / "users"
    users.write_text("# who may connect\nalice:secret\n")
    env = dict(os.environ, PYTHONPATH=LIB, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "umqtt3.broker", "--host", "127.0.0.1", "--port", "0",
                             "--users", str(users), "--max-clients", "4"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("umqtt3 broker listening on 127.0.0.1:"), line
        port = int(line.rsplit(":", 1)[1])
        with Raw(port) as c:
            assert c.connect("nobody").rc == 5
        with Raw(port) as c:
            assert c.connect("alice1", user="alice", password="secret").rc == 0
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
        assert proc.returncode == 0
        assert "refused (CONNACK 5)" in out
        assert "connect alice1" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
