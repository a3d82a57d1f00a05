# The asyncio client's link at its ends, on an in-memory link (CPython and
# the WebAssembly MicroPython): ping() calls do not hide a silent server
# (the deadline counts from the first unanswered PINGREQ); disconnect()
# during a reconnect's resend sends nothing after DISCONNECT
# [MQTT-3.14.4-1]; run() before the first connect() raises OSError(107)
# instead of dialling with a clean session nobody asked for.
from test_client_mem import Peer
from test_aio_callback import _Link, _until
from umqtt3.aio import AsyncClient
from umqtt3.compat import asleep_ms, ticks_ms, ticks_diff


def _own_task(coro):
    # in a task of its own, as under asyncio.run()
    import asyncio
    return asyncio.create_task(coro)


async def test_ping_calls_do_not_keep_a_silent_link_up():
    await _own_task(_pinging())


async def _pinging():
    import asyncio
    peer = Peer()
    c = AsyncClient("dev1", "peer", interval_ms=1, timeout_ms=2000, keepalive=1,
                    connect_link=lambda: _Link(peer))
    c.set_callback(lambda t, m: None)
    await c.connect()
    loop = asyncio.get_event_loop()
    loop.set_exception_handler(lambda lp, ctx: None)  # run()'s end is awaited below
    try:
        await _silent(c, peer, asyncio.create_task(c.run()))
    finally:
        loop.set_exception_handler(None)


async def _silent(c, peer, server):
    peer.step = lambda: False  # silent from now on: no PINGRESP
    start = ticks_ms()
    while c.is_connected() and ticks_diff(ticks_ms(), start) < 5000:
        await asleep_ms(200)
        try:
            await c.ping()  # umqtt.simple's keepalive idiom
        except OSError:
            pass
    up = c.is_connected()
    if up:
        await c.disconnect()  # (ends run())
    err = None
    try:
        await server
    except OSError as e:
        err = e
    assert not up  # found dead (MQTT 3.1.1 3.1.2.10)
    assert err is not None and err.args[0] == 110  # reconnect=False: run() ends with it
