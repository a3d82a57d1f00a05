"""The asyncio client against mosquitto when the broker goes away or is slow
for a moment: several tasks waiting through a restart dial one connection
between them (no abandoned sockets, no takeover by the client itself
[MQTT-3.1.4-3] that would publish its will [MQTT-3.1.2-8]); disconnect()
gets DISCONNECT out to a broker slow to read, so the will is discarded
[MQTT-3.14.4-3]; the unsent tail of a publish() that returned is written as
soon as the socket takes it, not when run()'s read wait ends; the docs' publishing
loop goes on through an outage longer than timeout_ms."""
import asyncio
import gc
import os
import signal
import threading
import time
import warnings

import pytest

from umqtt3.aio import AsyncClient
from umqtt3.client import MQTTClient

pytestmark = [pytest.mark.interop, pytest.mark.slow]


def test_tasks_waiting_through_a_restart_dial_once(broker_factory):
    b = broker_factory(persistence=True, extra=["log_type all"])

    async def main():
        c = AsyncClient("aio-dd", "127.0.0.1", port=b.port, reconnect=True,
                        backoff_ms=(100, 200), timeout_ms=8000)
        c.set_last_will(b"aio/dd/will", b"gone")
        await c.connect(clean_session=False)
        run = asyncio.ensure_future(c.run())
        b.stop(5)
        for _ in range(100):
            if not c.is_connected():
                break
            await asyncio.sleep(0.02)
        # run() and three publishers all step the client while it is down
        pubs = [asyncio.ensure_future(c.publish(b"aio/dd", b"%d" % i, qos=1)) for i in range(3)]
        await asyncio.sleep(0.5)
        b.start()
        r = await asyncio.gather(*pubs)
        await asyncio.sleep(0.3)
        await c.disconnect()
        await asyncio.wait_for(run, 2)
        return r

    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        r = asyncio.run(asyncio.wait_for(main(), 30))
        gc.collect()
    log = open(b.log, encoding="utf-8", errors="replace").read()
    since = log[log.rfind(" running"):]  # the restarted broker's
    assert r == [1, 2, 3]
    assert since.count("as aio-dd (") == 1  # one CONNECT, not one per task
    assert "already connected" not in since
    assert [str(x.message) for x in w if "unclosed" in str(x.message)] == []


def _will_watcher(port, topic):
    wills = []
    w = MQTTClient("aio-will-watch", "127.0.0.1", port)
    w.set_callback(lambda t, m: wills.append(m))
    w.connect()
    w.subscribe(topic, 1)
    return w, wills


def _publish_until_bytes_stay(c, topic):
    # QoS 0 publishes, each bounded by 0.2 s (a full window of the socket:
    # Busy until it raises), until one that returned left bytes in the
    # client's send buffer; returns how many returned
    async def fill():
        n = 0
        while c.conn.tlen - c.conn.sent == 0:
            try:
                await asyncio.wait_for(c.publish(topic, b"%06d" % n + b"y" * 300), 0.2)
                n += 1
            except asyncio.TimeoutError:
                pass  # (nothing of this one queued)
        return n
    return fill()


def test_disconnect_gets_disconnect_out_to_a_slow_broker(broker_factory):
    b = broker_factory()
    w, wills = _will_watcher(b.port, b"aio/du/will")

    async def main():
        c = AsyncClient("aio-du", "127.0.0.1", port=b.port, timeout_ms=3000)
        c.set_last_will(b"aio/du/will", b"gone")
        await c.connect()
        os.kill(b.proc.pid, signal.SIGSTOP)
        try:
            await _publish_until_bytes_stay(c, b"aio/du/x")
            threading.Timer(0.5, os.kill, (b.proc.pid, signal.SIGCONT)).start()
            await c.disconnect()  # waits (at most timeout_ms) for DISCONNECT to leave
        finally:
            threading.Timer(0.6, os.kill, (b.proc.pid, signal.SIGCONT)).start()
        return c

    c = asyncio.run(asyncio.wait_for(main(), 30))
    assert c.sock is None and not c.is_connected()
    end = time.monotonic() + 1.5
    while time.monotonic() < end:
        w.poll(20)
    w.disconnect()
    assert wills == []  # the broker got DISCONNECT: no will [MQTT-3.14.4-3]


def test_the_tail_of_a_returned_publish_is_written_at_once(broker_factory):
    b = broker_factory()
    got = []
    s = MQTTClient("aio-st-s", "127.0.0.1", b.port, bufsize=1024)
    s.set_callback(lambda t, m: got.append(m))
    s.connect()
    s.subscribe(b"aio/st/#", 0)

    async def main():
        c = AsyncClient("aio-st", "127.0.0.1", port=b.port)
        await c.connect()
        run = asyncio.ensure_future(c.run())  # waits to read: nothing to send
        await asyncio.sleep(0.1)
        os.kill(b.proc.pid, signal.SIGSTOP)
        try:
            sent = await _publish_until_bytes_stay(c, b"aio/st/x")
        finally:
            os.kill(b.proc.pid, signal.SIGCONT)
        # nothing comes from the broker (QoS 0) to wake run() up: the bytes
        # go out because the socket takes them
        end = time.monotonic() + 3
        while time.monotonic() < end and len(got) < sent:
            s.poll(0)
            await asyncio.sleep(0.01)
        left = c.conn.tlen - c.conn.sent
        await c.disconnect()
        await asyncio.wait_for(run, 2)
        return sent, left

    sent, left = asyncio.run(asyncio.wait_for(main(), 60))
    s.disconnect()
    assert left == 0
    assert len(got) == sent


def test_the_docs_publishing_loop_keeps_going_through_an_outage(broker_factory):
    # docs/client.md's asyncio example, its loop faster: the broker stops
    # for longer than timeout_ms. A QoS 1 publish() then raises OSError(110)
    # (stored) or Busy (the window full of stored readings), which the
    # example catches; the loop goes on, and the stored readings go out
    # after the reconnect. (Before, the example let the OSError end main().)
    from umqtt3.aio import Busy
    b = broker_factory()

    async def main():
        c = AsyncClient("aio-loop", "127.0.0.1", port=b.port, keepalive=30, reconnect=True,
                        timeout_ms=500, backoff_ms=(100, 200), window=4)
        c.set_callback(lambda t, m: None)
        await c.connect(clean_session=False)
        await c.subscribe(b"nodes/node1/cmd", 1)
        run = asyncio.ensure_future(c.run())
        caught = []
        done = 0
        t0 = time.monotonic()
        while time.monotonic() - t0 < 5:
            if done == 2:
                threading.Thread(target=outage, daemon=True).start()
            try:
                await c.publish(b"nodes/node1/temp", b"21.5", qos=1)
            except OSError as e:
                caught.append(e.args[0])
            except Busy:
                caught.append("busy")
            done += 1
            await asyncio.sleep(0.1)
        for _ in range(50):
            if c.is_connected() and not c.inflight():
                break
            await asyncio.sleep(0.1)
        left = c.inflight()
        await c.disconnect()
        await asyncio.wait_for(run, 2)
        return caught, done, left

    def outage():
        b.stop(5)
        time.sleep(1.5)  # three timeouts of the client's
        b.start()

    caught, done, left = asyncio.run(asyncio.wait_for(main(), 30))
    assert 110 in caught  # the outage was felt, and caught as the example does
    assert done > 20  # the loop went on through it
    assert left == 0  # every stored reading went out after the reconnect
