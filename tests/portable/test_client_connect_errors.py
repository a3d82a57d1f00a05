# connect() on both drivers (umqtt3.client, umqtt3.aio) raises what ended the
# link before CONNACK, on in-memory links (CPython and the WebAssembly
# MicroPython): the peer's close (Closed(104)), the link's own error (the very
# object: on a device, mbedTLS's code for a TLS 1.3 broker that refuses the
# client's certificate after the handshake), and OSError(110) only when no
# CONNACK came in time and nothing broke. With reconnect=True the first
# connect() tries again within its timeout and then raises the last such
# error, not 110. (tests/test_client_connect_sockets.py: the same over real
# sockets; tests/test_client_tls_refused.py: mosquitto over TLS.)
from umqtt3.aio import AsyncClient
from umqtt3.client import MQTTClient

TIMEOUT = 300  # connect()'s timeout_ms


class _Link:
    """Takes what is written; answers nothing (readinto: would block)."""

    def write(self, buf, off=0, n=-1):
        return len(buf) - off if n < 0 else n

    def readinto(self, buf, n):
        return None

    def close(self):
        pass


class _Closes(_Link):
    """The peer closed: end of stream."""

    def readinto(self, buf, n):
        return 0


class _Fails(_Link):
    """The link's read raises `err`, as a TLS socket's does."""

    def __init__(self, err):
        self.err = err

    def readinto(self, buf, n):
        raise self.err


def _links(make):
    # a connect_link that counts the links it opened
    opened = []

    def connect_link():
        opened.append(1)
        return make()
    return connect_link, opened


def _errno(e):
    return e.args[0] if e.args else None


def _blocking(make, reconnect):
    link, opened = _links(make)
    c = MQTTClient("dev1", "peer", connect_link=link, reconnect=reconnect, timeout_ms=5000,
                   backoff_ms=(10, 20))
    try:
        c.connect(timeout_ms=TIMEOUT)
        e = None
    except Exception as x:
        e = x
    assert not c.is_connected()
    return e, len(opened)


async def _async(make, reconnect):
    link, opened = _links(make)
    c = AsyncClient("dev1", "peer", interval_ms=1, connect_link=link, reconnect=reconnect,
                    timeout_ms=5000, backoff_ms=(10, 20))
    try:
        await c.connect(timeout_ms=TIMEOUT)
        e = None
    except Exception as x:
        e = x
    assert not c.is_connected()
    await c.disconnect()
    return e, len(opened)


def test_blocking_connect_raises_the_peers_close():
    for reconnect in (False, True):
        e, n = _blocking(_Closes, reconnect)
        assert isinstance(e, OSError) and _errno(e) == 104, (reconnect, e)  # not 110
        assert n == 1 if not reconnect else n > 1  # reconnect=True tried again meanwhile


def test_blocking_connect_raises_the_links_own_error():
    err = OSError(-0x7780)  # mbedTLS: a fatal alert came
    for reconnect in (False, True):
        e, _ = _blocking(lambda: _Fails(err), reconnect)
        assert e is err, (reconnect, e)


def test_blocking_connect_times_out_with_110_when_nothing_broke():
    for reconnect in (False, True):
        e, n = _blocking(_Link, reconnect)
        assert isinstance(e, OSError) and _errno(e) == 110, (reconnect, e)
        assert n == 1


def test_blocking_connect_forgets_the_error_of_an_earlier_connect():
    # the second connect() meets a peer that never answers: 110, not the
    # close the first one met
    kinds = [_Closes, _Link]
    c = MQTTClient("dev1", "peer", connect_link=lambda: kinds[0](), reconnect=True,
                   backoff_ms=(10, 20))
    for want in (104, 110):
        try:
            c.connect(timeout_ms=TIMEOUT)
            e = None
        except OSError as x:
            e = x
        assert e is not None and _errno(e) == want, (want, e)
        kinds.pop(0)


async def test_async_connect_raises_the_peers_close():
    for reconnect in (False, True):
        e, n = await _async(_Closes, reconnect)
        assert isinstance(e, OSError) and _errno(e) == 104, (reconnect, e)  # not 110
        assert n == 1 if not reconnect else n > 1


async def test_async_connect_raises_the_links_own_error():
    err = OSError(-0x7780)
    for reconnect in (False, True):
        e, _ = await _async(lambda: _Fails(err), reconnect)
        assert e is err, (reconnect, e)


async def test_async_connect_times_out_with_110_when_nothing_broke():
    for reconnect in (False, True):
        e, n = await _async(_Link, reconnect)
        assert isinstance(e, OSError) and _errno(e) == 110, (reconnect, e)
        assert n == 1


async def test_async_connect_forgets_the_error_of_an_earlier_connect():
    kinds = [_Closes, _Link]
    c = AsyncClient("dev1", "peer", interval_ms=1, connect_link=lambda: kinds[0](),
                    reconnect=True, backoff_ms=(10, 20))
    for want in (104, 110):
        try:
            await c.connect(timeout_ms=TIMEOUT)
            e = None
        except OSError as x:
            e = x
        assert e is not None and _errno(e) == want, (want, e)
        kinds.pop(0)
    await c.disconnect()
