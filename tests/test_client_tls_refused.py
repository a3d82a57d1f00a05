"""A TLS 1.3 broker that refuses the client's certificate after the
handshake: mosquitto with `require_certificate true`, a client with no
certificate. With TLS 1.3 the broker checks the certificate after the
client's side of the handshake is done, then closes (with or without an
alert), so the client learns it on its first read or write. connect(), on
both drivers, with reconnect=False and True, raises what ended the link (the
ssl.SSLError, or the reset its CONNECT met), never OSError(110) or (111): the
TCP connect succeeded and no timeout passed. Certificates are made at test
time (tests/certs.py)."""
import asyncio
import os
import ssl
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from certs import self_signed  # noqa: E402
from umqtt3.aio import AsyncClient  # noqa: E402
from umqtt3.client import MQTTClient  # noqa: E402

pytestmark = pytest.mark.interop

TIMEOUT = 600  # the call's timeout_ms
ROUNDS = 8  # the close races the client's CONNECT: both orders, over several rounds


@pytest.fixture
def refusing(broker_factory, tmp_path):
    cert, key = self_signed(tmp_path)
    ccert, ckey = self_signed(tmp_path, "client")
    b = broker_factory(tls=(cert, key), extra=["cafile %s" % ccert, "require_certificate true"])
    # the premise: with the certificate the broker takes us (ssl_params
    # load it into the context: one of its own)
    c = MQTTClient("tls-ok", "127.0.0.1", b.port, ssl=ssl.create_default_context(cafile=cert),
                   ssl_params={"key": ckey, "cert": ccert})
    c.connect()
    c.disconnect()
    ctx = ssl.create_default_context(cafile=cert)  # no client certificate
    assert ctx.maximum_version in (ssl.TLSVersion.MAXIMUM_SUPPORTED, ssl.TLSVersion.TLSv1_3)
    return b.port, ctx


def _code(e):
    return e.args[0] if e.args else None


def _check(e, d):
    # what dropped the link: the TLS layer's error, or a reset / broken
    # pipe when the CONNECT met a socket the broker had closed
    assert isinstance(e, (ssl.SSLError, ConnectionError)) or _code(e) == 104, repr(e)
    assert _code(e) not in (110, 111), repr(e)
    assert d < TIMEOUT / 1000 + 2


def _blocking(port, ctx, reconnect):
    c = MQTTClient("tls-refused", "127.0.0.1", port, ssl=ctx, reconnect=reconnect,
                   timeout_ms=10000, backoff_ms=(50, 100))
    t = time.monotonic()
    with pytest.raises(OSError) as e:
        c.connect(timeout_ms=TIMEOUT)
    d = time.monotonic() - t
    assert not c.is_connected()
    c.down()
    return e.value, d


def _async(port, ctx, reconnect):
    async def main():
        c = AsyncClient("tls-refused", "127.0.0.1", port=port, ssl=ctx, reconnect=reconnect,
                        timeout_ms=10000, backoff_ms=(50, 100))
        t = time.monotonic()
        with pytest.raises(OSError) as e:
            await c.connect(timeout_ms=TIMEOUT)
        d = time.monotonic() - t
        assert not c.is_connected()
        await c.disconnect()
        return e.value, d
    return asyncio.run(asyncio.wait_for(main(), 20))


@pytest.mark.parametrize("reconnect", [pytest.param(False, id="once"),
                                       pytest.param(True, id="reconnect")])
@pytest.mark.parametrize("connect", [pytest.param(_blocking, id="blocking"),
                                     pytest.param(_async, id="asyncio")])
def test_a_refused_client_certificate_is_reported_as_what_closed_the_link(connect, reconnect,
                                                                          refusing):
    port, ctx = refusing
    for _ in range(ROUNDS):
        _check(*connect(port, ctx, reconnect))
