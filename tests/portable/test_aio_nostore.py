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
