# A broker that stops answering while a node keeps publishing QoS 0: the
# node must notice. mosquitto is stopped with SIGSTOP, so its kernel still
# acknowledges TCP and every write succeeds; only a PINGREQ's missing
# PINGRESP shows the server is gone (MQTT 3.1.1, 3.1.2.10). Before, a client
# that kept sending never sent PINGREQ [MQTT-3.1.2-23] and stayed
# "connected" for good; it now also pings when nothing was received for
# keepalive seconds. Both drivers, against the real mosquitto; so does one
# that calls ping() itself more often than keepalive (umqtt.simple's idiom).
import asyncio
import os
import signal
import time

import pytest

from umqtt3.aio import AsyncClient
from umqtt3.client import MQTTClient

HOST = "127.0.0.1"
SECONDS = 6  # keepalive 1 s: the link must be gone well before this


def _frozen(broker):
    os.kill(broker.proc.pid, signal.SIGSTOP)


def _thawed(broker):
    os.kill(broker.proc.pid, signal.SIGCONT)


# what the application does meanwhile: publish QoS 0 (the client must ping
# by itself), or ping() more often than keepalive (umqtt.simple's idiom:
# each call sends a PINGREQ, but the deadline counts from the first one left
# unanswered; before, every call restarted it: "connected" for good)
ACTS = {"publish": lambda c: c.publish(b"t/x", b"21.5"), "ping": lambda c: c.ping()}


@pytest.mark.parametrize("act", sorted(ACTS))
def test_blocking_client_notices_a_silent_broker(broker, act):
    c = MQTTClient("ka-block-" + act, HOST, broker.port, keepalive=1, timeout_ms=1000)
    c.connect()
    _frozen(broker)
    err = None
    start = time.monotonic()
    try:
        while time.monotonic() - start < SECONDS and c.is_connected():
            try:
                ACTS[act](c)
                c.poll(250)
            except OSError as e:
                err = e
                break
    finally:
        _thawed(broker)
        c.down()
    assert err is not None and err.args[0] == 110, (err, time.monotonic() - start)


@pytest.mark.parametrize("act", sorted(ACTS))
def test_asyncio_client_notices_a_silent_broker(broker, act):
    async def main():
        c = AsyncClient("ka-aio-" + act, HOST, broker.port, keepalive=1, timeout_ms=1000)
        await c.connect()
        run = asyncio.create_task(c.run())
        _frozen(broker)
        start = time.monotonic()
        try:
            while time.monotonic() - start < SECONDS and c.is_connected():
                try:
                    await ACTS[act](c)
                except OSError:
                    break
                await asyncio.sleep(0.25)
        finally:
            _thawed(broker)
        up = c.is_connected()
        try:
            await run  # reconnect=False: run() ends with what dropped the link
            err = None
        except OSError as e:
            err = e
        c.down()
        return up, err

    up, err = asyncio.run(main())
    assert up is False, "still connected to a silent broker"
    assert err is not None and err.args[0] == 110
