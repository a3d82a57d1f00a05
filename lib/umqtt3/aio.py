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
from .compat.aio import dial_async, wait_sock, event, wait_event, lock, current_task, report
from .client_codec import MQTTError, Busy
from .client_core import Core

_DOWN = const(0)  # client_core's states
_UP = const(2)
_LOST = const(0x100)  # client_core's completion code: a reconnect forgot the message


class AsyncClient(Core):
    """MQTTClient's constructor arguments, in its order; every network call
    is awaitable. `interval_ms` (keyword only): how often to look while the
    link has no socket to wait on (connect_link, e.g. an in-memory pipe)."""
    woke = None  # an asyncio.Event while a task waits on the socket or dials
    asking = None  # an asyncio.Lock: one SUBSCRIBE/UNSUBSCRIBE answer awaited at a time
    # the error that last dropped a link (or a dial) run() then reconnects
    # from: connect() raises it rather than OSError(110) at its timeout
    err = None  # type: Exception | None

    def __init__(self, client_id, server, port=0, user=None, password=None, keepalive=0,
                 ssl=None, ssl_params=None, connect_link=None, *, interval_ms=5, **kw):
        Core.__init__(self, client_id, keepalive, user, password, now=ticks_ms(), **kw)
        self.server = server
        self.port = port or (8883 if ssl else 1883)
        self.ssl = ssl
        self.ssl_params = ssl_params or {}
        self.connect_link = connect_link
        self.interval = interval_ms
        self.sock = None
        self.runner = None  # the task in run(), woken by disconnect()
        self.stopping = False  # disconnect() was called: run() ends
        # counts dials and disconnect()s: a dial that finds it moved on when
        # its await returns is no longer wanted (_open)
        self.dials = 0

    async def connect(self, clean_session=True, timeout_ms=None):
        t = self.timeout_ms if timeout_ms is None else timeout_ms
        start = ticks_ms()
        try:
            await self.connect_start(clean_session, t)  # the dial counts too
            # raises what dropped the link (a refused CONNACK:
            # MQTTException(code)); reconnect=True: tries again
            await self._until(self.is_connected, t - ticks_diff(ticks_ms(), start))
        except BaseException as e:
            # no half-open link left behind: a late CONNACK finds no socket
            # to arrive on. Refused or timed out, reconnect=True stays, as
            # on MQTTClient: run() dials again. Cancelled (asyncio.wait_for):
            # the application gave up, no reconnect until the next connect()
            if not isinstance(e, Exception):
                self.reconnect = False
            self._close()
            # timed out: what dropped the link before CONNACK (the last
            # attempt's), if anything did
            if self.err is None or not isinstance(e, OSError):
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
        self.stopping = False
        try:
            ok = await self._open(timeout_ms)  # raises what the dial met (111: refused)
        except BaseException:
            self._close()
            raise
        if not ok:
            raise OSError(107, "")  # disconnect() came during the dial

    async def publish(self, topic, msg, retain=False, qos=0, key=None, props=None):
        """Returns once the message is acknowledged (QoS 1/2) or written."""
        pid = await self._busy(Core.queue, self, topic, msg, retain, qos, key, props)
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
                    raise OSError(104, "")  # a reconnect forgot it (store=False): never acknowledged
                raise MQTTError("refused", rc)  # MQTT 5 PUBACK/PUBREC
        return pid

    def queue(self, topic, msg, retain=False, qos=0, key=None, props=None):
        """Publish without waiting (Core.queue()); the task waiting on the
        socket (run()) is woken to write it."""
        pid = Core.queue(self, topic, msg, retain, qos, key, props)
        if self.state == _UP and not self.depth:
            self._kick()  # (from the callback: written after it anyway)
        return pid

    async def subscribe(self, topic, qos=0, no_local=False, retain_as_published=False,
                        retain_handling=0, props=None):
        """As MQTTClient.subscribe: the granted QoS; MQTT 5's options and
        properties."""
        async with self._turn():
            await self._ask(self.subscribe_start, topic, qos | no_local << 2 |
                            retain_as_published << 3 | retain_handling << 4, props)
            return self.subscribe_end(topic)

    async def unsubscribe(self, topic):
        """MQTT 5: returns UNSUBACK's reason code (0x11: there was no such
        subscription); raises MQTTError for a refusal."""
        async with self._turn():
            await self._ask(self.unsubscribe_start, topic)
            rc = self.answer
        if rc >= 0x80:
            raise MQTTError("refused", rc)
        return rc

    async def request(self, topic, msg, response_topic, timeout_ms=None, qos=1, corr=None):
        """client5.request() awaited (MQTT 5): publish with Response Topic
        and Correlation Data, return the payload of the answer carrying the
        same correlation data [MQTT-4.10.0-1]; other messages go to the
        callback meanwhile. One request at a time per client."""
        from .client5 import expect, subscribed
        corr, got, f, raw = expect(self, corr)
        try:
            if not subscribed(self, response_topic):
                await self.subscribe(response_topic, qos)
            await self.publish(topic, msg, qos=qos, props={0x08: response_topic, 0x09: corr})
            await self._until(lambda: got, timeout_ms)
        finally:
            self.set_callback(f, raw)
        return got[0]

    async def ping(self):
        self.pingreq(ticks_ms())
        self._send()

    async def disconnect(self, rc=None, props=None):
        """DISCONNECT, written within timeout_ms as the blocking client
        drains it (the server then discards the will [MQTT-3.14.4-3]), then
        close; ends run(). MQTT 5: rc and props as MQTTClient.disconnect()
        (client_more.bye); what a client may not send raises MQTTError
        with nothing sent and the link kept."""
        more = self.bye(rc, props)  # (its refusal raises here)
        self.dials += 1  # a dial under way in another task is dropped
        try:
            if more:
                start = ticks_ms()
                while not self._send():
                    left = self.timeout_ms - ticks_diff(ticks_ms(), start)
                    if left < 0:
                        break
                    await self._wait(self.sock, True, left)
        except (OSError, MQTTError):
            pass
        finally:
            self._close()
        self.stopping = True  # (a run() that has yet to start returns at once)
        r = self.runner
        if r is not None and r is not current_task():
            # run() may be waiting on the socket just closed: end it now
            r.cancel()

    async def run(self):
        """Serve the connection until disconnect(): handle incoming messages,
        keepalive and reconnects. Start it as a task. Returns only after
        disconnect(); with no reconnect to come it raises what ended the
        link (OSError 107 once down, and before the first connect())."""
        self.runner = current_task()
        try:
            while not self.stopping:  # down with no reconnect to come: _step raises OSError(107)
                await self._step(60000)
        except BaseException:  # CancelledError, from disconnect() or not
            if not self.stopping:
                raise
        finally:
            self.runner = None

    # ---------------------------------------------------------- internals
    async def _open(self, ms=0):
        # one dial at a time per client: the other tasks wait for this one
        # (_step), so no second link races the first (the server would
        # close the older one [MQTT-3.1.4-3], publishing the will).
        # False when disconnect() (or a newer dial) came while it awaited:
        # its socket is closed before CONNECT, the client left as it is
        n = self.dials = self.dials + 1
        self._close()
        ev = self.woke = event()
        try:
            if self.connect_link:
                lk = self.connect_link()
            else:
                s = await dial_async(self.server, self.port, self.ssl, self.ssl_params,
                                     ms or self.timeout_ms)
                if self.dials != n:
                    s.close()
                    return False
                self.sock = s
                s.setblocking(False)
                lk = link(s)
            self.conn.link = lk
            self.start(ticks_ms())
            self._send()
            return True
        finally:
            if self.woke is ev:
                self.woke = None
            ev.set()

    def _close(self):
        c = self.conn
        s = self.sock
        if c.link is not None:
            c.close()
            c.link = None
        elif s is not None:
            s.close()
        self.sock = None
        self.down()
        if s is not None:
            self._kick()  # a task waiting on the closed socket: look again

    def _kick(self):
        # wake the task waiting on the socket (and those waiting for it)
        ev = self.woke
        if ev is not None:
            ev.set()

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
                if e is not self.cur and isinstance(e, (OSError, MQTTError)) and \
                        not isinstance(e, Busy):
                    raise  # the link or the peer: _step's
                # The callback raised (whatever it raised: an OSError from
                # a sensor, Busy from its publish with the window full): the
                # message is not taken. A broker resends QoS 1/2
                # only on a new connection [MQTT-4.4.0-1]: the core dropped
                # it. run() goes on; the loop's exception handler reports it
                # (with no reconnect to come, the caller raises it).
                if self.state == _DOWN:
                    self._close()
                    if not self.reconnect:
                        raise  # no link, none to come: the caller's (run() ends)
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
            if not (self.reconnect and self.dials):
                # (no dials: before the first connect(), which says what
                # session to ask for; a dial here would ask a clean one)
                raise OSError(107, "")
            if self.woke is not None:
                await self._wait(None, False, limit_ms)  # another task dials
                return
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
        # until that one wakes (or dials: _open), then look themselves
        ev = self.woke
        if ev is None:
            if s is None:  # (connect_link: nothing to wait on; look again soon)
                await asleep_ms(min(t, self.interval))
                return
            ev = self.woke = event()
            try:
                await wait_sock(s, write, ev, t)  # or until _kick()
            finally:
                if self.woke is ev:
                    self.woke = None
        elif ev.is_set():
            await asleep_ms(0)  # woken: its task has yet to run
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
                if not self._send():
                    # bytes left for the socket to take: the task waiting
                    # on it (run(), reading) waits for room too
                    self._kick()
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
                raise OSError(110, "")
            await self._step(left + 1)

    def _turn(self):
        # the core awaits one SUBACK/UNSUBACK at a time (wait_pid): the
        # tasks asking take turns
        lk = self.asking
        if lk is None:
            lk = self.asking = lock()
        return lk

    async def _ask(self, f, *args):
        pid = await self._busy(f, *args)
        await self._until(lambda: self.wait_pid != pid)
