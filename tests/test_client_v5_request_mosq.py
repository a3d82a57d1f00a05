"""client5.request() and AsyncClient.request() against mosquitto 2.0 and
paho-mqtt: an answer that comes after the request gave up reaches a client
that has no message callback without dropping its link, nor (persistent
session) coming again at the next connect; a bytearray response topic.
tests/portable/test_client_v5_request.py has the rest (the Correlation
Data after a reset, request() from the callback) against a scripted
server."""
import asyncio
import time

import pytest

from umqtt3 import client5
from umqtt3.aio import AsyncClient

import paho_peer  # tests/paho_peer.py

pytestmark = pytest.mark.interop
HOST = "127.0.0.1"


def _pinged(c, seconds=10):
    # PINGREQ, then poll until PINGRESP: what mosquitto sent before it
    # (the late answer, published before the ping) has been handled
    c.ping()
    end = time.monotonic() + seconds
    while c.ping_at is not None:
        assert time.monotonic() < end, "no PINGRESP"
        c.poll(10)


def test_a_late_answer_reaches_a_client_without_a_callback(broker, v5):
    # docs/client.md: a client without a message callback needs none for
    # request(). Its answer comes late, at QoS 1: taken and acknowledged,
    # not refused ("no callback", the link dropped), so a persistent
    # session does not send it again at the next connect [MQTT-4.10.0-1]
    c = v5(broker.port, "late-req", session_expiry=600)
    c.connect(clean_session=False)
    with pytest.raises(OSError) as e:
        client5.request(c, b"svc/time", b"now?", b"late/answers", timeout_ms=100,
                        corr=b"req-1")
    assert e.value.args[0] == 110  # nobody answered in time
    paho_peer.publish(broker.port, "late/answers", b"late answer", CorrelationData=b"req-1")
    _pinged(c)
    assert c.is_connected()
    c.disconnect()
    # the node resets: a new client object, still no callback, resumes the
    # session; nothing is resent to it
    d = v5(broker.port, "late-req", session_expiry=600)
    assert d.connect(clean_session=False) is True
    _pinged(d)
    assert d.is_connected()
    d.disconnect(props={0x11: 0})  # the session ends


def test_a_late_answer_reaches_an_async_client_without_a_callback(broker):
    async def main():
        c = AsyncClient("late-aio", HOST, port=broker.port, level=5)
        await c.connect()
        task = asyncio.ensure_future(c.run())
        with pytest.raises(OSError) as e:
            await c.request(b"svc/time", b"now?", b"late/aio", timeout_ms=100, corr=b"a-1")
        assert e.value.args[0] == 110
        await asyncio.get_running_loop().run_in_executor(
            None, lambda: paho_peer.publish(broker.port, "late/aio", b"late",
                                            CorrelationData=b"a-1"))
        await c.ping()
        end = time.monotonic() + 10
        while c.ping_at is not None:
            assert time.monotonic() < end, "no PINGRESP"
            await asyncio.sleep(0.01)
        # run() goes on: the answer did not end it
        assert c.is_connected() and not task.done()
        await c.disconnect()
        await task

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_bytearray_response_topic(broker, v5):
    # as subscribe() takes one: subscribed once, answered each time
    r = paho_peer.responder(broker.port, "ba/req", "ba-responder")
    try:
        c = v5(broker.port, "ba-req")
        c.connect()
        t = bytearray(b"ba/answers")
        assert client5.request(c, b"ba/req", b"q1", t) == b"answer to q1"
        assert client5.request(c, b"ba/req", b"q2", t) == b"answer to q2"
        assert list(c.subs) == [b"ba/answers"]
    finally:
        r.disconnect()
        r.loop_stop()
