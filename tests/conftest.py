# Fixtures for the interop tests: a private mosquitto on a free loopback port.
import socket

import pytest

import mosq  # tests/mosq.py


def _need_mosquitto():
    if not mosq.MOSQUITTO:
        pytest.skip("mosquitto is not installed")


@pytest.fixture
def broker_factory(tmp_path):
    """broker_factory(persistence=False, tls=None, extra=()) -> a started
    mosq.Broker; every broker made here is killed at teardown."""
    _need_mosquitto()
    made = []

    def make(**kw):
        b = mosq.Broker(tmp_path / ("mosq%d" % len(made)), **kw)
        made.append(b)
        return b.start()

    yield make
    for b in made:
        b.stop(5)
        b.kill()


@pytest.fixture
def broker(broker_factory):
    return broker_factory()


@pytest.fixture
def v5(request):
    """v5(port, client_id, **kw) -> an MQTT 5 MQTTClient on 127.0.0.1, not
    yet connected; disconnected at teardown. Its timeout_ms defaults to the
    test module's V5_TIMEOUT_MS (5000 when the module sets none)."""
    from umqtt3.client import MQTTClient
    timeout = getattr(request.module, "V5_TIMEOUT_MS", 5000)
    made = []

    def mk(port, cid, **kw):
        kw.setdefault("timeout_ms", timeout)
        c = MQTTClient(cid, "127.0.0.1", port, level=5, **kw)
        made.append(c)
        return c

    yield mk
    for c in made:
        c.reconnect = False
        try:
            c.disconnect()
        except Exception:
            pass


@pytest.fixture
def busy_port():
    """A port something listens on."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    yield s.getsockname()[1]
    s.close()
