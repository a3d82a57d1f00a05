"""The dial takes the timeout given to the call: connect(timeout_ms=...) on
both drivers gives up after it, not after the client's timeout_ms, against a
server that takes the TCP connection but never answers the TLS handshake,
and against a blackholed address (SYNs dropped: here a listener whose
accept queue is full). The asyncio client's dial holds no other task."""
import asyncio
import socket
import ssl
import time

import pytest

from umqtt3.aio import AsyncClient
from umqtt3.client import MQTTClient

LONG = 10000  # the client's timeout_ms
SHORT = 300  # the call's


class _Silent:
    """127.0.0.1: connections queue, nothing is accepted or said. With
    blackhole=True the accept queue is full first, so a new SYN is dropped."""

    def __init__(self, blackhole=False):
        self.ls = socket.socket()
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(0)
        self.port = self.ls.getsockname()[1]
        self.held = []
        if blackhole:
            for _ in range(4):
                s = socket.socket()
                s.setblocking(False)
                try:
                    s.connect(("127.0.0.1", self.port))
                except BlockingIOError:
                    pass
                self.held.append(s)
            time.sleep(0.1)
            probe = socket.socket()
            probe.settimeout(0.2)
            with pytest.raises(OSError):  # the premise: this address swallows SYNs
                probe.connect(("127.0.0.1", self.port))
            probe.close()

    def close(self):
        for s in self.held:
            s.close()
        self.ls.close()


@pytest.fixture(params=["tls-silent", "blackhole"])
def silent(request):
    s = _Silent(blackhole=request.param == "blackhole")
    yield s
    s.close()


def _ctx():
    return ssl.create_default_context()


def test_blocking_connect_gives_up_after_its_timeout(silent):
    c = MQTTClient("dial", "127.0.0.1", port=silent.port, ssl=_ctx(), timeout_ms=LONG)
    t = time.monotonic()
    with pytest.raises(OSError):
        c.connect(timeout_ms=SHORT)
    assert time.monotonic() - t < 3  # not the client's 10 s
    assert not c.is_connected()


def test_async_connect_gives_up_after_its_timeout_and_holds_no_task(silent):
    ticks = []

    async def main():
        async def ticker():
            while True:
                ticks.append(time.monotonic())
                await asyncio.sleep(0.01)
        tk = asyncio.ensure_future(ticker())
        c = AsyncClient("dial", "127.0.0.1", port=silent.port, ssl=_ctx(), timeout_ms=LONG)
        t = time.monotonic()
        with pytest.raises(OSError):
            await c.connect(timeout_ms=SHORT)
        d = time.monotonic() - t
        tk.cancel()
        return d

    d = asyncio.run(asyncio.wait_for(main(), 20))
    assert d < 3  # not the client's 10 s
    assert len(ticks) > 10  # the loop went on while the dial waited


def test_poll_while_reconnecting_waits_no_longer_than_its_timeout(silent):
    # reconnect=True and no link: poll() dials in steps, each within the
    # poll's own timeout; the attempt gives up after the client's timeout_ms
    c = MQTTClient("dial", "127.0.0.1", port=silent.port, ssl=_ctx(), timeout_ms=500,
                   reconnect=True, backoff_ms=(50, 50))
    with pytest.raises(OSError):
        c.connect()  # times out: reconnect stays on, poll() tries again
    worst = 0
    end = time.monotonic() + 1.5
    while time.monotonic() < end:
        t = time.monotonic()
        assert c.poll(0) == 0
        worst = max(worst, time.monotonic() - t)
        t = time.monotonic()
        c.poll(20)
        worst = max(worst, time.monotonic() - t - 0.02)
    assert worst < 0.25, worst  # well under the 0.5 s of the attempt (load adds some ms)
    assert c.tries >= 2  # attempts timed out and were made again
    assert not c.is_connected()
    c.down()


def test_poll_reconnects_through_the_stepped_dial(broker):
    # the same steps reach a real broker: poll() connects again after the
    # link is gone
    c = MQTTClient("dial-ok", "127.0.0.1", port=broker.port, reconnect=True, timeout_ms=2000)
    c.connect()
    c.down()
    end = time.monotonic() + 5
    while not c.is_connected() and time.monotonic() < end:
        c.poll(0)
        time.sleep(0.001)
    assert c.is_connected()
    c.disconnect()


def test_a_reconnect_from_poll_loads_the_stepped_dial_alone(broker):
    # A sensor node that reconnects loads compat/dial_steps.py (a few hundred
    # bytes), not the asyncio half (compat/aio.py) nor the broker's
    # (compat/gateway.py on a device): in a fresh interpreter, connect(),
    # the link dropped, poll() connects again, then the modules loaded are
    # listed.
    import os
    import subprocess
    import sys
    code = (
        "import sys, time\n"
        "from umqtt3.client import MQTTClient\n"
        "c = MQTTClient('dial-mods', '127.0.0.1', port=%d, reconnect=True, timeout_ms=2000,\n"
        "                backoff_ms=(10, 10))\n"
        "c.connect()\n"
        "c.down()\n"
        "end = time.monotonic() + 5\n"
        "while not c.is_connected() and time.monotonic() < end:\n"
        "    c.poll(10)\n"
        "assert c.is_connected()\n"
        "c.disconnect()\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('umqtt3.compat'))))\n"
        % broker.port)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.path.join(root, "lib"))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["umqtt3.compat", "umqtt3.compat.cpython", "umqtt3.compat.dial_steps"]
