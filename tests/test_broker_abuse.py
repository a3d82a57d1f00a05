"""The broker under abuse over real sockets (CPython): the pending
connection bodies of tests/portable/test_broker_pending.py over TCP, a
flood of idle connections that never keeps a client out, and short runs
of the load and abuse tools (tools/measure/abuse.py) against our broker."""
import os
import re
import shutil
import socket
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "portable"))
sys.path.insert(0, HERE)

from test_broker_pending import (test_oldest_pending_closed_at_the_limit,  # noqa: F401,E402
                                 test_flood_of_idle_connections_never_keeps_a_client_out,
                                 test_trickled_connect_closed_at_connect_timeout,
                                 test_connect_larger_than_the_pending_buffer,
                                 test_pending_header_over_max_packet_closes,
                                 test_first_packet_not_connect_closes)

import broker_harness  # noqa: E402
from test_broker_harness import SOCKETS, Raw, running, wait_for, connect_bytes  # noqa: E402


@pytest.fixture(autouse=True)
def _over_sockets():
    old = broker_harness.use(SOCKETS)
    yield
    broker_harness.use(old)


def _idle(port, n):
    out = []
    for _ in range(n):
        try:
            out.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        except OSError:
            pass
    return out


def test_idle_flood_held_and_reopened_clients_still_connect():
    # more idle connections than clients and pending together, reopened in
    # waves: every new client gets in
    with running(max_clients=20, max_pending=16, backlog=64, connect_timeout_ms=0) as b:
        idle = _idle(b.port, 60)
        try:
            for r in range(10):
                with Raw(b) as c:
                    assert c.connect("legit%d" % r).rc == 0
                for s in idle[:20]:
                    s.close()
                idle = idle[20:] + _idle(b.port, 20)
            # never more open than max_clients + max_pending
            assert wait_for(lambda: sum(1 for c in b.clients if c.state != 2) <= 36)
        finally:
            for s in idle:
                s.close()
        assert wait_for(lambda: not b.clients, timeout=10)


# ---------------------------------------------------------------- the tools, short

def _run(capsys, *argv):
    from tools.measure import abuse
    only = "umqtt3,mosquitto" if shutil.which("mosquitto") or os.path.exists(
        "/usr/sbin/mosquitto") else "umqtt3"
    rc = abuse.main(list(argv) + ["--only", only])
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if ln.startswith(("umqtt3 ", "mosquitto "))]
    assert len(lines) == len(only.split(",")), out
    return rc, lines


def test_fuzz_short(capsys):
    rc, lines = _run(capsys, "fuzz", "--packets", "4000", "--batch", "1000", "--seconds", "60")
    assert rc == 0, lines
    for ln in lines:
        m = re.search(r"(\d+) mutated packets .* health checks (\d+), failed 0", ln)
        assert m and int(m.group(1)) >= 4000 and int(m.group(2)) >= 4, ln


def test_idle_flood_short(capsys):
    rc, lines = _run(capsys, "flood", "--idle", "200", "--seconds", "3", "--reopen", "1",
                     "--every", "0.05")
    assert rc == 0, lines
    for ln in lines:
        m = re.search(r"new clients connected (\d+) of (\d+)", ln)
        assert m and m.group(1) == m.group(2) and int(m.group(2)) >= 10, ln


def test_many_clients_short(capsys):
    rc, lines = _run(capsys, "clients", "--clients", "60", "--seconds", "30")
    assert rc == 0, lines
    for ln in lines:
        assert re.search(r"60 clients connected .* 60 of 60 got their message", ln), ln


def test_slow_consumer_short(capsys):
    # within the queue's bound: every acknowledged message arrives
    rc, lines = _run(capsys, "slow", "--messages", "400", "--behind", "100", "--size", "2048",
                     "--seconds", "30")
    assert rc == 0, lines
    for ln in lines:
        assert re.search(r"400 QoS 1 messages acknowledged .* fell behind got 400;", ln), ln


def test_persistent_sessions_amplification_short(capsys):
    # 40 offline sessions on # and 200 QoS 1 messages of 4 KB: copied per
    # session that would be 32 MB; held once, within a 1 MB mem_budget, the
    # broker's RSS grows by about that (allocator slack aside), the rest of
    # the messages is refused, and every acknowledged one reaches each
    # session checked, in order
    rc, lines = _run(capsys, "sessions", "--sessions", "40", "--messages", "200", "--size", "4096",
                     "--seconds", "60",
                     "--umqtt3-args", "--max-queued-bytes 0 --mem-budget 1048576")
    assert rc == 0, lines
    for ln in lines:
        m = re.search(r"(\d+) acknowledged, (\d+) refused, .* (\d+) of (\d+) sessions checked "
                      r"got every acknowledged message; RSS (\d+) KB, (\d+) KB with the sessions, "
                      r"(\d+) KB holding", ln)
        assert m, ln
        acked, refused, whole, checked, _, rss_s, rss_h = (int(x) for x in m.groups())
        assert acked + refused == 200 and whole == checked == 5, ln
        if ln.startswith("umqtt3"):
            assert 0 < refused < 200, ln  # the budget was reached, not before
            assert rss_h - rss_s <= 1024 + 3072, ln  # the budget, and 3 MB of slack


def test_fanout_with_a_store_short(capsys):
    # persistent sessions with the store on while a publisher fans out
    # (tools/measure/fanout.py, both brokers): every fanned-out message is
    # acknowledged, the online sessions get them, and a well-behaved
    # client's round trips keep coming (the figures are the tool's)
    from tools.measure import fanout
    rc = fanout.main(["--sessions", "20", "--online", "5", "--messages", "30",
                      "--seconds", "20"])
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(("umqtt3", "mosq"))]
    assert rc == 0 and lines, lines
    for ln in lines:
        m = re.search(r"; (\d+) fanned-out messages acknowledged .* online sessions got (\d+); "
                      r"probe round trip .* \((\d+) round trips\)", ln)
        assert m and int(m.group(1)) == 30 and int(m.group(2)) == 5 * 30, ln
        assert int(m.group(3)) > 0, ln


def test_tool_refuses_bad_arguments_in_one_line():
    from refusal import run
    for argv, words in ((["fuzz", "--only", "nats"], "unknown broker"),
                        (["fuzz", "--packets", "0"], "--packets"),
                        (["nothing"], "invalid choice")):
        r = run("tools.measure.abuse", *argv)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert r.stderr.count("\n") == 1 and words in r.stderr, r.stderr


@pytest.mark.slow
def test_idle_flood_1000_held_and_reopened(capsys):
    rc, lines = _run(capsys, "flood", "--idle", "1000", "--seconds", "20", "--reopen", "5")
    assert rc == 0, lines
    for ln in lines:
        m = re.search(r"new clients connected (\d+) of (\d+)", ln)
        assert m and m.group(1) == m.group(2), ln


@pytest.mark.slow
def test_fuzz_longer(capsys):
    rc, lines = _run(capsys, "fuzz", "--packets", "100000", "--batch", "20000",
                     "--seconds", "300")
    assert rc == 0, lines
