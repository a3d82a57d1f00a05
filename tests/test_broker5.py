# The MQTT 5.0 conformance tests (tests/portable/test_broker5_*.py) over
# real sockets: the same bodies, a Broker on 127.0.0.1 polled by a thread.
import socket

import pytest

from test_broker5_connect import *  # noqa: F401,F403
from test_broker5_pubsub import *  # noqa: F401,F403
from test_broker5_store import *  # noqa: F401,F403

import broker_harness  # noqa: E402
from test_broker_harness import SOCKETS  # noqa: E402


@pytest.fixture(autouse=True)
def _over_sockets():
    old = broker_harness.use(SOCKETS)
    yield
    broker_harness.use(old)


def test_closed_cleanly_after_a_protocol_error_with_unread_bytes():
    # a connection closed for a protocol error, with more bytes of the
    # client's still unread, is shut down, not reset: the DISCONNECT with
    # its reason code reaches the client
    from broker_harness import running, Raw
    from test_broker5_connect import connect5
    from umqtt3.codec import DISCONNECT
    for _ in range(5):
        with running() as b, Raw(b) as c:
            connect5(c, "bad")
            c.ch.s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
            try:
                c.send(b"\x30\x03\x00\x05a" + b"\x30\x05\x00\x01ax1" * 40000)
            except OSError:
                pass  # the broker closed first
            assert c.expect(DISCONNECT).rc == 0x81
            c.ch.s.settimeout(5)
            assert c.ch.s.recv(100) == b""  # FIN, not a reset
