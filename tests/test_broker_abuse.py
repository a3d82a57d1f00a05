"""The broker under abuse over real sockets (CPython): the pending
connection bodies of tests/portable/test_broker_pending.py over TCP, a
flood of idle connections that never keeps a client out, and short runs
of the load and abuse tools (tools/measure/abuse.py) against our broker."""
import os
import socket
import sys
import time

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
    # the CLI's pending limit and more idle connections than clients and
    # pending together, reopened in waves: every new client gets in
    with running(max_clients=20, max_pending=16, backlog=64, connect_timeout_ms=0) as b:
        idle = _idle(b.port, 60)
        try:
            for r in range(10):
                with Raw(b) as c:
                    assert c.connect("legit%d" % r).rc == 0
                for s in idle[:20]:
                    s.close()
                idle = idle[20:] + _idle(b.port, 20)
            assert wait_for(lambda: sum(1 for c in b.clients if c.state == 0) <= 16)
        finally:
            for s in idle:
                s.close()
        assert wait_for(lambda: not b.clients, timeout=10)
