# umqtt3.aio -- the client for asyncio (MicroPython's and CPython's).
#
# Not a second implementation: AsyncClient drives the same MQTTClient state
# machine, so the flows, the store, keepalive and reconnect are exactly the
# blocking client's. It never blocks the event loop on the network: it
# connects (and does the TLS handshake) through compat.dial_async, and
# between steps it awaits the socket's readiness, or the client's next
# deadline (keepalive, CONNACK timeout, reconnect backoff), whichever comes
# first, instead of waking up every few milliseconds.
from .compat import asleep_ms, ticks_ms, ticks_diff
from .compat.aio import dial_async, wait_io, current_task
from .client import MQTTClient
from .flow import Busy


class Driven(MQTTClient):
    """MQTTClient with the steps a driver that dials by itself needs: what
    poll() does when the connection is down, and when it must run next.
    Only the asyncio client loads them."""

    def reopen(self, sock):
        """A reconnect attempt on sock, connected by the caller."""
        try:
            self._open(sock)
        except OSError:
            self._lost()

    def dropped(self):
        """A reconnect attempt failed before reopen(): back off."""
        self._lost()

    def next_deadline(self):
        """Milliseconds until poll() has something to do even if nothing
        arrives: a reconnect attempt, the CONNACK timeout, a PINGREQ or the
        PINGRESP limit; 60000 when nothing is due."""
        now = ticks_ms()
        if not self.is_open():
            t = ticks_diff(self.retry_at, now) if self.reconnect else 60000
        elif not self.is_connected():
            t = self.timeout_ms - ticks_diff(now, self.connect_started)
        elif self.keepalive:
            t = self.keepalive * 1000 - ticks_diff(now, self.last_tx if self.ping_at is None
                                                   else self.ping_at) + 1
        else:
            t = 60000
        return max(0, min(t, 60000))


class AsyncClient:
    """MQTTClient's constructor arguments; every network call is awaitable.
    `interval_ms`: how often to look while the link has no socket to wait
    on (connect_link, e.g. an in-memory pipe)."""

    def __init__(self, client_id, server, interval_ms=5, **kw):
        self.c = Driven(client_id, server, **kw)
        self.interval = interval_ms
        self.runner = None  # the task in run(), woken by disconnect()
        self.stopping = False

    def set_callback(self, f, raw=False):
        self.c.set_callback(f, raw)

    def set_last_will(self, topic, msg, retain=False, qos=0):
        self.c.set_last_will(topic, msg, retain, qos)

    def set_sync(self, f):
        self.c.set_sync(f)

    def accepted(self, key):
        return self.c.accepted(key)

    def inflight(self):
        return self.c.inflight()

    def is_connected(self):
        return self.c.is_connected()

    @property
    def store(self):
        return self.c.store

    async def _dial(self):
        c = self.c
        if c.connect_link:
            return None  # the client makes its own link
        return await dial_async(c.server, c.port, c.ssl, c.ssl_params, c.timeout_ms)

    async def _step(self, limit_ms):
        # one poll(0), then wait for the socket, the client's next deadline
        # or limit_ms, whichever comes first
        c = self.c
        if not c.is_open():
            if not c.reconnect:
                raise OSError(107, "not connected")
            wait = c.next_deadline()
            if wait:
                await asleep_ms(min(wait, limit_ms))
                return
            try:
                c.reopen(await self._dial())
            except OSError:
                c.dropped()
            return
        if c.poll(0):
            await asleep_ms(0)  # poll's time was up: more may be waiting
            return
        t = min(c.next_deadline(), limit_ms)
        s = c.sock
        if s is None or not c.is_open():
            await asleep_ms(min(t, self.interval))
        elif t > 0:
            await wait_io(s, c.conn.pending() > 0, t)

    async def _until(self, done, timeout_ms=None):
        c = self.c
        t = c.timeout_ms if timeout_ms is None else timeout_ms
        start = ticks_ms()
        while not done():
            left = t - ticks_diff(ticks_ms(), start)
            if left < 0:
                raise OSError(110, "timed out")
            await self._step(left + 1)

    async def connect(self, clean_session=True, timeout_ms=None):
        c = self.c
        c.connect_start(clean_session, await self._dial())
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
                left = c.timeout_ms - ticks_diff(ticks_ms(), start)
                if left < 0:
                    raise
                await self._step(left + 1)
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
        r = self.runner
        if r is not None and r is not current_task():
            # run() may be waiting on the socket just closed: end it now
            self.stopping = True
            r.cancel()

    async def run(self):
        """Serve the connection until disconnect(): handle incoming messages,
        keepalive and reconnects. Start it as a task."""
        c = self.c
        self.runner = current_task()
        self.stopping = False
        try:
            while c.is_connected() or c.reconnect:
                await self._step(60000)
        except BaseException:  # CancelledError, from disconnect() or not
            if not self.stopping:
                raise
        finally:
            self.runner = None
