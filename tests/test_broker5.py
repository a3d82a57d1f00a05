# The MQTT 5.0 conformance tests (tests/portable/test_broker5_*.py) over
# real sockets: the same bodies, a Broker on 127.0.0.1 polled by a thread.
import pytest

from test_broker5_connect import *  # noqa: F401,F403
from test_broker5_pubsub import *  # noqa: F401,F403

import broker_harness  # noqa: E402
from test_broker_harness import SOCKETS  # noqa: E402


@pytest.fixture(autouse=True)
def _over_sockets():
    old = broker_harness.use(SOCKETS)
    yield
    broker_harness.use(old)
