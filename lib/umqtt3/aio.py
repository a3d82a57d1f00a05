# umqtt3.aio -- the client for asyncio (MicroPython's and CPython's).
#
# Not a second implementation: AsyncClient drives the same MQTTClient state
# machine with poll(0) and yields to the event loop between steps, so the
# flows, the store, keepalive and reconnect are exactly the blocking client's.
from .compat import asleep_ms, ticks_ms, ticks_diff
from .client import MQTTClient, _UP
from .flow import Busy


class AsyncClient:
    """MQTTClient's constructor arguments; every network call is awaitable.
    `interval_ms` is how often the loop looks at the socket while waiting."""

    def __init__(self, client_id, server, interval_ms=5, **kw):
        self.c = MQTTClient(client_id, server, **kw)
        self.interval = interval_ms

    def set_callback(self, f, raw=False):
        self.c.set_callback(f, raw)

    def set_last_will(self, topic, msg, retain=False, qos=0):
        self.c.set_last_will(topic, msg, retain, qos)

    async def _until(self, done, timeout_ms=None):
        c = self.c
        t = c.timeout_ms if timeout_ms is None else timeout_ms
        start = ticks_ms()
        while not done():
            c.poll(0)
            if ticks_diff(ticks_ms(), start) > t:
                raise OSError(110, "timed out")
            await asleep_ms(self.interval)

    async def connect(self, clean_session=True, timeout_ms=None):
        c = self.c
        c.connect_start(clean_session)
        await self._until(c.is_connected, timeout_ms)
        return c.session_present

    async def publish(self, topic, msg, retain=False, qos=0, key=None, props=None):
        """Returns once the message is acknowledged (QoS 1/2) or written."""
        c = self.c
        start = ticks_ms()
        while True:
            try:
                pid = c.publish(topic, msg, retain, qos, key, False, props)
                break
            except Busy:
                # window full: let acknowledgements arrive, for a while
                if ticks_diff(ticks_ms(), start) > c.timeout_ms:
                    raise
                await asleep_ms(self.interval)
                c.poll(0)
        if qos:
            st = c.store
            await self._until(lambda: not st.out_has(pid))
        return pid

    async def subscribe(self, topic, qos=0):
        c = self.c
        pid = c.subscribe_start(topic, qos)
        await self._until(lambda: c.wait_pid != pid)
        return c.subscribe_end(topic)

    async def unsubscribe(self, topic):
        c = self.c
        pid = c.unsubscribe_start(topic)
        await self._until(lambda: c.wait_pid != pid)

    async def ping(self):
        self.c.ping()

    async def disconnect(self):
        self.c.disconnect()

    async def run(self):
        """Serve the connection until disconnect(): handle incoming messages,
        keepalive and reconnects. Start it as a task."""
        c = self.c
        while c.state == _UP or c.reconnect:
            c.poll(0)
            await asleep_ms(self.interval)
