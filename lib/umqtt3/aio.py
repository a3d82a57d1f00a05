# umqtt3.aio -- the client for asyncio (MicroPython's and CPython's).
#
# The asyncio driver of client_core.Core, as client.MQTTClient is the
# blocking one: the flows, the store, keepalive and reconnect are the core's,
# so both behave alike. It never blocks the event loop on the network: it
# connects (and does the TLS handshake) through compat.aio.dial_async, and
# between steps it awaits the socket's readiness, or the core's next
# deadline (keepalive, CONNACK timeout, reconnect backoff), whichever comes
# first, instead of waking up every few milliseconds.
from .compat import asleep_ms, ticks_ms, ticks_diff, link, const
from .compat.aio import dial_async, wait_io, event, wait_event, current_task, report
from .client_codec import MQTTError, Busy
from .client_core import Core

_DOWN = const(0)  # client_core's states
_UP = const(2)
_LOST = const(0x100)  # client_core's completion code: a reconnect forgot the message


class AsyncClient(Core):
    """MQTTClient's constructor arguments; every network call is awaitable.
    `interval_ms`: how often to look while the link has no socket to wait
    on (connect_link, e.g. an in-memory pipe)."""
    woke = None  # an asyncio.Event while a task waits on the socket
    # the error that last dropped a link (or a dial) run() then reconnects
    # from: connect() raises it rather than OSError(110) at its timeout
    err = None  # type: Exception | None

    def __init__(self, client_id, server, interval_ms=5, port=0, ssl=None, ssl_params=None,
                 connect_link=None, **kw):
        Core.__init__(self, client_id, now=ticks_ms(), **kw)
        self.server = server
        self.port = port or (8883 if ssl else 1883)
        self.ssl = ssl
        self.ssl_params = ssl_params or {}
        self.connect_link = connect_link
        self.interval = interval_ms
        self.sock = None
        self.runner = None  # the task in run(), woken by disconnect()
        self.stopping = False

    async def connect(self, clean_session=True, timeout_ms=None):
        t = self.timeout_ms if timeout_ms is None else timeout_ms
        start = ticks_ms()
        await self.connect_start(clean_session, t)  # the dial counts too
        try:
            # raises what dropped the link (a refused CONNACK:
            # MQTTException(code)); reconnect=True: tries again
            await self._until(self.is_connected, t - ticks_diff(ticks_ms(), start))
        except OSError:
            # timed out: what dropped the link before CONNACK (the last
            # attempt's), if anything did
            if self.err is None:
                raise
            raise self.err
        return self.session_present

    async def connect_start(self, clean_session=True, timeout_ms=0):
        """Open the connection and send CONNECT; run() (or any awaited call)
        takes it from there: is_connected() once CONNACK accepted it."""
        self.clean = clean_session
        self.tries = 0
        self.reconnect = self.auto
        self.err = None
        try:
            await self._open(timeout_ms)  # raises what the dial met (111: refused)
        except BaseException:
            self._close()
            raise

    async def publish(self, topic, msg, retain=False, qos=0, key=None, props=None):
        """Returns once the message is acknowledged (QoS 1/2) or written."""
        pid = await self._busy(self.queue, topic, msg, retain, qos, key, props)
        if qos:
            st = self.store
            w = self.waits
            w[pid] = 0  # the core records its completion there
            try:
                await self._until(lambda: not st.out_has(pid))
            finally:
                rc = w.pop(pid)
            if rc >= 0x80:
                if rc == _LOST:
                    raise OSError(104)  # a reconnect forgot it (store=False): never acknowledged
                raise MQTTError("refused", rc)  # MQTT 5 PUBACK/PUBREC
        return pid

    async def subscribe(self, topic, qos=0, no_local=False, retain_as_published=False,
                        retain_handling=0, props=None):
        """As MQTTClient.subscribe: the granted QoS; MQTT 5's options and
        properties."""
        pid = await self._busy(self.subscribe_start, topic, qos | no_local << 2 |
                               retain_as_published << 3 | retain_handling << 4, props)
        await self._until(lambda: self.wait_pid != pid)
        return self.subscribe_end(topic)

    async def unsubscribe(self, topic):
        """MQTT 5: returns UNSUBACK's reason code (0x11: there was no such
        subscription); raises MQTTError for a refusal."""
        pid = await self._busy(self.unsubscribe_start, topic)
        await self._until(lambda: self.wait_pid != pid)
        rc = self.answer
        if rc >= 0x80:
            raise MQTTError("refused", rc)
        return rc

    async def request(self, topic, msg, response_topic, timeout_ms=None, qos=1, corr=None):
        """client5.request() awaited (MQTT 5): publish with Response Topic
        and Correlation Data, return the payload of the answer carrying the
        same correlation data [MQTT-4.10.0-1]; other messages go to the
        callback meanwhile. One request at a time per client."""
        from .client5 import expect
        corr, got, f, raw = expect(self, corr)
        try:
            if response_topic not in self.subs:
                await self.subscribe(response_topic, qos)
            await self.publish(topic, msg, qos=qos, props={0x08: response_topic, 0x09: corr})
            await self._until(lambda: got, timeout_ms)
        finally:
            self.set_callback(f, raw)
        return got[0]

    async def ping(self):
        self.pingreq(ticks_ms())
        self._send()

    async def disconnect(self):
        if self.bye():
            try:
                self._send()
            except OSError:
                pass
        self._close()
        r = self.runner
        if r is not None and r is not current_task():
            # run() may be waiting on the socket just closed: end it now
            self.stopping = True
            r.cancel()

    async def run(self):
        """Serve the connection until disconnect(): handle incoming messages,
        keepalive and reconnects. Start it as a task."""
        self.runner = current_task()
        self.stopping = False
        try:
            while self.state != _DOWN or self.reconnect:  # (OPENING after connect_start)
                await self._step(60000)
        except BaseException:  # CancelledError, from disconnect() or not
            if not self.stopping:
                raise
        finally:
            self.runner = None

    # ---------------------------------------------------------- internals
    async def _open(self, ms=0):
        self._close()
        if self.connect_link:
            lk = self.connect_link()
        else:
            s = await dial_async(self.server, self.port, self.ssl, self.ssl_params,
                                 ms or self.timeout_ms)
            self.sock = s
            s.setblocking(False)
            lk = link(s)
        self.conn.link = lk
        self.start(ticks_ms())
        self._send()

    def _close(self):
        c = self.conn
        if c.link is not None:
            c.close()
            c.link = None
        elif self.sock is not None:
            self.sock.close()
        self.sock = None
        self.down()

    def _lost(self):
        self._close()
        self.lost(ticks_ms())

    def _send(self):
        # write what is queued, and the resume's backlog as room comes
        c = self.conn
        while True:
            if c.tlen or self.unsynced:
                self.out(ticks_ms())
            if not c.flush():
                return False
            if not self.refill():
                return True

    def _io(self):
        # hand over what has arrived, until none is left or a millisecond
        # has passed (a peer that keeps sending gets the loop back); not
        # while the callback runs or a resend waits for room
        c = self.conn
        start = ticks_ms()
        n = 0
        while not self.depth and self.backlog is None:
            k = c.recv()
            if not k:
                break
            now = ticks_ms()
            try:
                self.packet(k, now)
            except Exception as e:
                if isinstance(e, (OSError, MQTTError)) and not isinstance(e, Busy):
                    raise  # the link or the peer: _step's
                # The callback raised (Busy: its publish found the window
                # full): the message is not taken. A broker resends QoS 1/2
                # only on a new connection [MQTT-4.4.0-1]: the core dropped
                # it. run() goes on; the loop's exception handler reports it.
                if self.state == _DOWN:
                    self._close()
                report(e)
                return n + 1
            n += 1
            if c.tlen > len(c.tx) >> 1:
                self._send()  # acks pile up while a long burst is read
            if ticks_diff(now, start) > 0:
                break
        return n

    async def _step(self, limit_ms):
        # one round of I/O and timers, then wait for the socket, the core's
        # next deadline or limit_ms, whichever comes first
        if self.state == _DOWN:
            if not self.reconnect:
                raise OSError(107)
            wait = self.tick(ticks_ms())
            if wait:
                await asleep_ms(min(wait, limit_ms))
                return
            try:
                await self._open()
            except OSError as e:
                self._lost()
                self.err = e
                # an attempt that failed without awaiting (a connect_link
                # that raises at once): the other tasks run before the next
                await asleep_ms(0)
            return
        try:
            n = self._io()
            wait = self.tick(ticks_ms()) if self.state != _DOWN else 0
            self._send()
        except (OSError, MQTTError) as e:
            if isinstance(e, Busy):
                raise
            if self.state == _DOWN:
                self._close()  # the core's lost() came first (a callback refused a message)
            else:
                self._lost()
            if not self.reconnect:
                raise
            self.err = e
            await asleep_ms(0)  # (as above: the next attempt after the other tasks)
            return
        if n:
            await asleep_ms(0)  # more may be waiting
            return
        t = min(wait, limit_ms)
        s = self.sock
        if s is None:
            await asleep_ms(min(t, self.interval))
        elif t > 0:
            await self._wait(s, self.conn.tlen > 0, t)  # (write: bytes wait to go)

    async def _wait(self, s, write, t):
        # asyncio has one reader per socket (CPython's add_reader one
        # callback per file, MicroPython's IO queue one task per stream):
        # one task waits on it, the others (run() and an awaited publish)
        # until that one wakes, then look themselves
        ev = self.woke
        if ev is None:
            ev = self.woke = event()
            try:
                await wait_io(s, write, t)
            finally:
                self.woke = None
                ev.set()
        else:
            # (a write may be possible before a read: look again soon)
            await wait_event(ev, min(t, self.interval) if write else t)

    async def _busy(self, f, *args):
        # f(*args), retried while it raises Busy (window or buffer full),
        # letting acknowledgements in, for at most timeout_ms
        start = ticks_ms()
        while True:
            try:
                r = f(*args)
                break
            except Busy:
                left = self.timeout_ms - ticks_diff(ticks_ms(), start)
                if left < 0:
                    raise
                await self._step(left + 1)
        if self.state == _UP:
            try:
                self._send()
            except OSError:
                self._lost()  # a stored message goes out after the reconnect
                if not self.reconnect:
                    raise
        return r

    async def _until(self, done, timeout_ms=None):
        t = self.timeout_ms if timeout_ms is None else timeout_ms
        start = ticks_ms()
        while not done():
            left = t - ticks_diff(ticks_ms(), start)
            if left < 0:
                raise OSError(110)
            await self._step(left + 1)
