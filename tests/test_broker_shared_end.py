# The shared-group hand-over tests (tests/portable/test_broker_shared_handover.py)
# over real sockets: the same bodies, a Broker on 127.0.0.1 polled by a
# thread, each client a TCP connection.
import pytest

from test_broker_shared_handover import *  # noqa: F401,F403

import broker_harness  # noqa: E402
from test_broker_harness import SOCKETS  # noqa: E402


@pytest.fixture(autouse=True)
def _over_sockets():
    old = broker_harness.use(SOCKETS)
    yield
    broker_harness.use(old)
