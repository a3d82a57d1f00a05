"""What connect() raises when the first connection fails, on both drivers
and with reconnect=False and True, against scripted plain-TCP servers on
127.0.0.1: one that accepts and closes at once (errno 104: the peer ended
the link before CONNACK), one that takes CONNECT and never answers (110,
within the call's timeout_ms), and a port nothing listens on (111: the TCP
connect was refused). (tests/portable/test_client_connect_errors.py: the
same on in-memory links, under MicroPython too; tests/test_client_tls_refused.py:
a TLS broker that refuses the client's certificate.)"""
import asyncio
import socket
import threading
import time

import pytest

from umqtt3.aio import AsyncClient
from umqtt3.client import MQTTClient

TIMEOUT = 500  # the call's timeout_ms
LONG = 10000  # the client's


class _Server:
    """Accepts on 127.0.0.1; close=True closes each connection at once,
    else reads what comes and never answers."""

    def __init__(self, close):
        self.ls = socket.socket()
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(8)
        self.port = self.ls.getsockname()[1]
        self.close_at_once = close
        self.accepted = 0
        self.held = []
        self.t = threading.Thread(target=self._serve, daemon=True)
        self.t.start()

    def _serve(self):
        while True:
            try:
                s, _ = self.ls.accept()
            except OSError:
                return  # closed
            self.accepted += 1
            if self.close_at_once:
                s.close()
            else:
                self.held.append(s)

    def close(self):
        try:
            # wakes the accept() (closing alone leaves it blocked on Linux)
            self.ls.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.ls.close()
        for s in self.held:
            s.close()
        self.t.join(5)


@pytest.fixture
def closing():
    s = _Server(close=True)
    yield s
    s.close()


@pytest.fixture
def silent():
    s = _Server(close=False)
    yield s
    s.close()


@pytest.fixture
def refusing():
    # a port that was free a moment ago: nothing listens there
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _blocking(port, reconnect):
    c = MQTTClient("errs", "127.0.0.1", port=port, reconnect=reconnect, timeout_ms=LONG,
                   backoff_ms=(20, 50))
    t = time.monotonic()
    with pytest.raises(OSError) as e:
        c.connect(timeout_ms=TIMEOUT)
    d = time.monotonic() - t
    assert not c.is_connected()
    c.down()
    return e.value, d


def _async(port, reconnect):
    async def main():
        c = AsyncClient("errs", "127.0.0.1", port=port, reconnect=reconnect, timeout_ms=LONG,
                        backoff_ms=(20, 50))
        t = time.monotonic()
        with pytest.raises(OSError) as e:
            await c.connect(timeout_ms=TIMEOUT)
        d = time.monotonic() - t
        assert not c.is_connected()
        await c.disconnect()
        return e.value, d
    return asyncio.run(asyncio.wait_for(main(), 20))


def _code(e):
    # the errno as args[0] (the blocking client's errors also set e.errno on
    # CPython: test_blocking_errors_carry_errno below)
    return e.args[0] if e.args else None


DRIVERS = [pytest.param(_blocking, id="blocking"), pytest.param(_async, id="asyncio")]
RECONNECT = [pytest.param(False, id="once"), pytest.param(True, id="reconnect")]


@pytest.mark.parametrize("reconnect", RECONNECT)
@pytest.mark.parametrize("connect", DRIVERS)
def test_a_server_that_closes_at_once_is_reported_as_closed(connect, reconnect, closing):
    # the TCP connect succeeded: not 111, and the close is no timeout
    e, d = connect(closing.port, reconnect)
    assert _code(e) == 104, repr(e)
    assert d < TIMEOUT / 1000 + 2
    if reconnect:
        assert closing.accepted > 1  # it tried again within the call's timeout


@pytest.mark.parametrize("reconnect", RECONNECT)
@pytest.mark.parametrize("connect", DRIVERS)
def test_no_connack_is_a_timeout_within_the_calls_timeout(connect, reconnect, silent):
    e, d = connect(silent.port, reconnect)
    assert _code(e) == 110, repr(e)
    assert TIMEOUT / 1000 - 0.05 < d < TIMEOUT / 1000 + 2  # the call's, not the client's 10 s


@pytest.mark.parametrize("reconnect", RECONNECT)
@pytest.mark.parametrize("connect", DRIVERS)
def test_a_refused_tcp_connect_is_111(connect, reconnect, refusing):
    e, d = connect(refusing, reconnect)
    assert _code(e) == 111, repr(e)
    assert d < 2  # at once, not after the timeout


def test_a_dial_that_times_out_is_110_on_cpython_too():
    # CPython's socket timeout carries no errno; compat.dial gives it
    # MicroPython's, ETIMEDOUT. Here the accept queue is full, so the SYN
    # is dropped and the TCP connect itself times out.
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(0)
    port = ls.getsockname()[1]
    held = []
    try:
        for _ in range(4):
            s = socket.socket()
            s.setblocking(False)
            try:
                s.connect(("127.0.0.1", port))
            except BlockingIOError:
                pass
            held.append(s)
        time.sleep(0.1)
        probe = socket.socket()
        probe.settimeout(0.2)
        with pytest.raises(OSError):  # the premise: this address swallows SYNs
            probe.connect(("127.0.0.1", port))
        probe.close()
        e, d = _blocking(port, False)
        assert e.errno == 110 and isinstance(e, TimeoutError), repr(e)
        assert d < TIMEOUT / 1000 + 2
    finally:
        for s in held:
            s.close()
        ls.close()


@pytest.mark.parametrize("reconnect", RECONNECT)
def test_blocking_errors_carry_errno(reconnect, closing, silent, refusing):
    # e.errno, which CPython sets only from OSError(n, text): the client's
    # own OSError(110, "") (a TimeoutError on CPython) and Closed(104, ""),
    # and the socket's 111
    from umqtt3.client_codec import Closed
    e, _ = _blocking(closing.port, reconnect)
    # Closed(104, "") when the read met the close; the socket's own
    # ConnectionResetError when a write met the reset first
    assert isinstance(e, (Closed, ConnectionResetError)) and e.errno == 104, repr(e)
    e, _ = _blocking(silent.port, reconnect)
    assert isinstance(e, TimeoutError) and e.errno == 110, repr(e)
    e, _ = _blocking(refusing, reconnect)
    assert e.errno == 111, repr(e)


@pytest.mark.parametrize("reconnect", RECONNECT)
def test_blocking_connect_that_times_out_closes_its_socket(reconnect, silent):
    # connect(timeout_ms) shorter than the client's: the server sees the
    # link closed, and a CONNACK it sends afterwards connects nothing
    c = MQTTClient("late", "127.0.0.1", port=silent.port, reconnect=reconnect,
                   timeout_ms=LONG, backoff_ms=(20, 50))
    with pytest.raises(OSError) as e:
        c.connect(timeout_ms=TIMEOUT)
    assert e.value.errno == 110
    assert c.sock is None and not c.is_connected()
    s = silent.held[-1]
    s.settimeout(2)
    assert s.recv(200)[:1] == b"\x10"  # CONNECT came
    assert s.recv(200) == b""  # then the close: no half-open link left
    try:
        s.send(b"\x20\x02\x00\x00")  # the late CONNACK
    except OSError:
        pass
    time.sleep(0.05)
    if reconnect:
        # poll() dials a new link (as after a drop), which stays silent:
        # the CONNACK on the old one is never read
        for _ in range(20):
            c.poll(10)
        assert not c.is_connected() and silent.accepted == 2
    else:
        with pytest.raises(OSError) as e:
            c.check_msg()
        assert e.value.errno == 107  # not connected
        assert silent.accepted == 1
    c.down()


class _Refuses:
    """Answers every CONNECT with CONNACK `code` and closes."""

    def __init__(self, answer):
        self.ls = socket.socket()
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(8)
        self.port = self.ls.getsockname()[1]
        self.answer = answer
        self.accepted = 0
        self.t = threading.Thread(target=self._serve, daemon=True)
        self.t.start()

    def _serve(self):
        while True:
            try:
                s, _ = self.ls.accept()
            except OSError:
                return
            self.accepted += 1
            try:
                s.settimeout(2)
                s.recv(200)
                s.sendall(self.answer)
                time.sleep(0.02)
            except OSError:
                pass
            s.close()

    def close(self):
        self.ls.close()
        self.t.join(5)


@pytest.mark.parametrize("reconnect", RECONNECT)
def test_blocking_first_connect_reports_connack_3(reconnect):
    # server unavailable (3.1.1 3.2.2.3): MQTTException(3), as umqtt.simple;
    # at once with reconnect=False; with reconnect=True after trying again
    # within the call's timeout_ms (the code asks to come back later), the
    # refusal, not a timeout
    from umqtt3.client import MQTTException
    srv = _Refuses(b"\x20\x02\x00\x03")
    try:
        c = MQTTClient("c3", "127.0.0.1", port=srv.port, reconnect=reconnect, timeout_ms=LONG,
                       backoff_ms=(20, 50))
        t = time.monotonic()
        with pytest.raises(MQTTException) as e:
            c.connect(timeout_ms=TIMEOUT)
        d = time.monotonic() - t
        assert e.value.args == (3,)
        if reconnect:
            assert TIMEOUT / 1000 - 0.05 < d < TIMEOUT / 1000 + 2 and srv.accepted > 1
        else:
            assert d < 1 and srv.accepted == 1
        assert c.sock is None and not c.is_connected()
    finally:
        srv.close()
