# The asyncio client's publish() when no acknowledgement comes, on an
# in-memory link (CPython and the WebAssembly MicroPython). store=False keeps
# no message across a reconnect, so a publish() awaiting the PUBACK of a
# message the link took with it raises, as umqtt.simple's does, instead of
# taking the message's absence for an acknowledgement.
from test_client_mem import Peer
from test_client_driver import DropsAfterPublish
from umqtt3.aio import AsyncClient
from umqtt3.codec import CONNECT, PUBLISH


async def test_store_false_publish_awaiting_when_the_link_drops_raises():
    import asyncio
    await asyncio.create_task(_drops())


async def _drops():
    peer = Peer()
    peer.ack = False

    def connect_link():
        if peer.client_end.closed:
            peer.drop()  # a new connection
        return DropsAfterPublish(peer.client_end, peer)
    c = AsyncClient("dev1", "peer", interval_ms=1, timeout_ms=1000, connect_link=connect_link,
                    store=False, reconnect=True, backoff_ms=(1, 1))
    await c.connect()
    try:
        await c.publish(b"t", b"reading", qos=1)
        raised = None
    except OSError as e:
        raised = e
    assert raised is not None  # no PUBACK came: not reported delivered
    assert peer.got[CONNECT] == 2  # reconnected, and nothing resent
    assert peer.got[PUBLISH] == 1
    await c.disconnect()


async def test_store_false_qos1_while_down_is_refused_not_lost():
    await asyncio_task(_down())


def asyncio_task(coro):
    import asyncio
    return asyncio.create_task(coro)


async def _down():
    # store=False, reconnect=True, the link down: a QoS 1 queue() or
    # publish() raises OSError(107) at once, as QoS 0 does, rather than
    # taking a message the reconnect would report lost (0x100, never sent)
    import asyncio
    from test_aio_callback import _Link, _until
    peer = Peer()
    acks = []
    c = AsyncClient("dev1", "peer", interval_ms=1, timeout_ms=2000, reconnect=True, store=False,
                    backoff_ms=(50, 50), connect_link=lambda: _Link(peer))
    c.set_ack_callback(lambda pid, rc: acks.append((pid, rc)))
    await c.connect()
    peer.drop()  # the link breaks
    server = asyncio.create_task(c.run())
    assert await _until(lambda: not c.is_connected())
    for call in (lambda: c.queue(b"t/down", b"r1", False, 1),
                 lambda: asyncio.wait_for(c.publish(b"t/down", b"r2", False, 1), 1)):
        try:
            r = call()
            if not isinstance(r, int):
                await r
            raise AssertionError("accepted while down, to be lost")
        except OSError as e:
            assert e.args[:1] == (107,)
    assert await _until(lambda: c.is_connected(), 1000)
    assert acks == [] and peer.got[PUBLISH] == 0  # nothing taken, nothing reported lost
    await c.publish(b"t/up", b"r3", qos=1)  # up again: sent and acknowledged
    assert peer.got[PUBLISH] == 1 and [rc for pid, rc in acks] == [0]
    await c.disconnect()
    await server
