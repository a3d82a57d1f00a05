"""umqtt.simple's ssl_params on both drivers, against mosquitto over TLS.
umqtt.simple hands them to ussl.wrap_socket(sock, **ssl_params): its usual
contents are server_hostname (the name to check and send, when `server` is
an address) and key/cert (a client certificate). umqtt3 applies them to the
SSL context: server_hostname replaces the name checked, key and cert go to
load_cert_chain()."""
import asyncio
import ssl
import sys
import os

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from certs import self_signed  # noqa: E402
from umqtt3.aio import AsyncClient  # noqa: E402
from umqtt3.client import MQTTClient  # noqa: E402

pytestmark = pytest.mark.interop


def _ctx(cert):
    return ssl.create_default_context(cafile=cert)  # trusts only this cert


def test_server_hostname_is_the_name_checked(broker_factory, tmp_path):
    cert, key = self_signed(tmp_path)  # for localhost and 127.0.0.1
    b = broker_factory(tls=(cert, key))
    c = MQTTClient("tls-sni", "127.0.0.1", b.port, ssl=_ctx(cert),
                   ssl_params={"server_hostname": "localhost"})
    c.connect()
    assert c.is_connected()
    c.disconnect()
    bad = MQTTClient("tls-sni-bad", "127.0.0.1", b.port, ssl=_ctx(cert),
                     ssl_params={"server_hostname": "broker.example"})
    with pytest.raises(ssl.SSLCertVerificationError):  # the name given is the one checked
        bad.connect()


def test_client_certificate_from_key_and_cert(broker_factory, tmp_path):
    cert, key = self_signed(tmp_path)
    ccert, ckey = self_signed(tmp_path, "client")
    b = broker_factory(tls=(cert, key), extra=["cafile %s" % ccert, "require_certificate true"])
    c = MQTTClient("tls-cc", "127.0.0.1", b.port, ssl=_ctx(cert),
                   ssl_params={"key": ckey, "cert": ccert})
    c.connect()
    assert c.is_connected()
    c.disconnect()

    async def main():
        a = AsyncClient("tls-cc-aio", "127.0.0.1", port=b.port, ssl=_ctx(cert),
                        ssl_params={"key": ckey, "cert": ccert, "server_hostname": "localhost"})
        await a.connect()
        assert a.is_connected()
        await a.disconnect()
    asyncio.run(asyncio.wait_for(main(), 20))
    # without the certificate the broker refuses the handshake
    bare = MQTTClient("tls-cc-none", "127.0.0.1", b.port, ssl=_ctx(cert), timeout_ms=2000)
    with pytest.raises(OSError):
        bare.connect()
        for _ in range(20):
            bare.poll(50)  # the refusal may come after the handshake


def test_poll_reconnects_over_tls(broker_factory, tmp_path):
    # poll()'s stepped dial runs the TLS handshake too, one step per poll
    import time
    cert, key = self_signed(tmp_path)
    b = broker_factory(tls=(cert, key))
    c = MQTTClient("tls-poll", "127.0.0.1", b.port, ssl=_ctx(cert), reconnect=True,
                   ssl_params={"server_hostname": "localhost"})
    c.connect()
    c.down()  # the link is gone: poll() dials again
    end = time.monotonic() + 5
    while not c.is_connected() and time.monotonic() < end:
        c.poll(0)
        time.sleep(0.001)
    assert c.is_connected()
    c.disconnect()
