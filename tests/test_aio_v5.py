"""The asyncio client at MQTT 5 against mosquitto 2.0 and a paho-mqtt
responder: subscription options and properties, a refused publish raising,
unsubscribe's reason code, connect_start(), request/response; each as the
blocking client does it (tests/test_client_v5.py)."""
import asyncio
import time

import pytest

from umqtt3.aio import AsyncClient
from umqtt3.client import MQTTClient
from umqtt3.client_codec import MQTTError

import paho_peer  # tests/paho_peer.py

pytestmark = pytest.mark.interop
HOST = "127.0.0.1"


def _run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


async def _until(cond, timeout=5):
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        await asyncio.sleep(0.01)


def test_subscription_options_and_properties(broker):
    got = []

    async def main():
        # a retained message, there before the subscriptions
        p = MQTTClient("aio5-retain", HOST, broker.port, level=5)
        p.connect()
        p.publish(b"a5/r", b"kept", retain=True, qos=1)
        p.disconnect()
        c = AsyncClient("aio5", HOST, port=broker.port, level=5)
        c.set_callback(lambda t, m: got.append((t, m, c.msg_props().get(0x0B))))
        await c.connect()
        task = asyncio.ensure_future(c.run())
        # retain handling 2: no retained message at subscribe [MQTT-3.3.1-11]
        assert await c.subscribe(b"a5/r", 1, retain_handling=2) == 1
        # No Local: not our own messages [MQTT-3.8.3-3]; Subscription Identifier 7
        assert await c.subscribe(b"a5/n", 1, no_local=True, props={0x0B: 7}) == 1
        assert await c.subscribe(b"a5/s", 1, props={0x0B: 9}) == 1
        await c.publish(b"a5/n", b"own", qos=1)  # not delivered back
        await c.publish(b"a5/s", b"self", qos=1)  # delivered, with identifier 9
        q = MQTTClient("aio5-other", HOST, broker.port, level=5)
        q.connect()
        q.publish(b"a5/n", b"other", qos=1)
        q.disconnect()
        await _until(lambda: len(got) >= 2)
        await asyncio.sleep(0.2)  # (room for what must not come)
        await c.disconnect()
        await task

    _run(main())
    # [MQTT-3.3.4-3]: the identifier of the matching subscription comes along
    assert sorted(got) == [(b"a5/n", b"other", [7]), (b"a5/s", b"self", [9])]


def test_refused_publish_raises_and_unsubscribe_returns_its_code(broker_factory, tmp_path):
    acl = tmp_path / "acl"
    acl.write_text("topic readwrite ok/#\n")
    b = broker_factory(extra=["acl_file %s" % acl])

    async def main():
        c = AsyncClient("aio5-acl", HOST, port=b.port, level=5)
        c.set_callback(lambda t, m: None)
        await c.connect()
        assert await c.publish(b"ok/x", b"m", qos=1) > 0
        with pytest.raises(MQTTError) as e:
            await c.publish(b"denied/x", b"m", qos=1)
        assert e.value.code == 0x87  # PUBACK: not authorized [MQTT-3.4.2-1]
        with pytest.raises(MQTTError) as e:
            await c.publish(b"denied/x", b"m", qos=2)
        assert e.value.code == 0x87  # PUBREC refusing it
        assert await c.subscribe(b"ok/y", 1) == 1
        assert await c.unsubscribe(b"ok/y") == 0
        assert await c.unsubscribe(b"ok/never") == 0x11  # no subscription existed
        await c.disconnect()

    _run(main())


def test_connect_start_then_run(broker):
    async def main():
        c = AsyncClient("aio5-start", HOST, port=broker.port, level=5)
        await c.connect_start()
        assert not c.is_connected()  # CONNECT sent, CONNACK not read yet
        task = asyncio.ensure_future(c.run())
        await _until(c.is_connected)
        await c.disconnect()
        await task

    _run(main())


def test_request_with_a_paho_responder(broker):
    r = paho_peer.responder(broker.port, "a5/req", "aio5-responder")
    other = []

    async def main():
        c = AsyncClient("aio5-req", HOST, port=broker.port, level=5)
        await c.connect()
        task = asyncio.ensure_future(c.run())
        # no callback set: request() installs its own first
        assert await c.request(b"a5/req", b"q1", b"a5/resp/me") == b"answer to q1"
        c.set_callback(lambda t, m: other.append(t))
        assert await c.request(b"a5/req", b"q2", b"a5/resp/me") == b"answer to q2"
        await c.disconnect()
        await task

    try:
        _run(main())
    finally:
        r.disconnect()
        r.loop_stop()
    assert other == []  # the answers did not reach the callback


def test_disconnect_with_a_reason_and_properties(broker):
    """disconnect(rc, props) as the blocking client's (MQTT 5.0 3.14.2):
    0x04 makes the server publish the will; what a client may not send is
    refused with nothing sent and the link kept."""
    got = []

    async def main():
        s = MQTTClient("aio5-will-sink", HOST, broker.port, level=5)
        s.set_callback(lambda t, m: got.append(m))
        s.connect()
        s.subscribe(b"a5/will", 1)
        c = AsyncClient("aio5-bye", HOST, port=broker.port, level=5)
        c.set_last_will(b"a5/will", b"gone", qos=1)
        await c.connect()
        with pytest.raises(MQTTError) as e:
            await c.disconnect(0x8E)  # a server's reason, not a client's
        assert e.value.code == 0x82 and c.is_connected()
        with pytest.raises(MQTTError):
            await c.disconnect(None, {0x11: 10})  # CONNECT's expiry was 0
        assert c.is_connected()
        await c.disconnect(0x04, {0x1F: "leaving"})  # with the will
        assert not c.is_connected()
        end = time.monotonic() + 3
        while not got and time.monotonic() < end:
            s.check_msg()
            await asyncio.sleep(0.02)
        s.disconnect()
        d = AsyncClient("aio5-v4", HOST, port=broker.port)
        await d.connect()
        with pytest.raises(MQTTError):
            await d.disconnect(0x04)  # below level 5: no reason code
        assert d.is_connected()
        await d.disconnect()

    _run(main())
    assert got == [b"gone"]
