# connect() on both drivers (umqtt3.client, umqtt3.aio) raises what ended the
# link before CONNACK, on in-memory links (CPython and the WebAssembly
# MicroPython): the peer's close (Closed(104)), the link's own error (the very
# object: on a device, mbedTLS's code for a TLS 1.3 broker that refuses the
# client's certificate after the handshake), and OSError(110) only when no
# CONNACK came in time and nothing broke. With reconnect=True the first
# connect() tries again within its timeout and then raises the last such
# error, not 110. (tests/test_client_connect_sockets.py: the same over real
# sockets; tests/test_client_tls_refused.py: mosquitto over TLS.)
from umqtt3.aio import AsyncClient
from umqtt3.client import MQTTClient

TIMEOUT = 300  # connect()'s timeout_ms


class _Link:
    """Takes what is written; answers nothing (readinto: would block)."""

    def write(self, buf, off=0, n=-1):
        return len(buf) - off if n < 0 else n

    def readinto(self, buf, n):
        return None

    def close(self):
        pass


class _Closes(_Link):
    """The peer closed: end of stream."""

    def readinto(self, buf, n):
        return 0


class _Fails(_Link):
    """The link's read raises `err`, as a TLS socket's does."""

    def __init__(self, err):
        self.err = err

    def readinto(self, buf, n):
        raise self.err


def _links(make):
    # a connect_link that counts the links it opened
    opened = []

    def connect_link():
        opened.append(1)
        return make()
    return connect_link, opened


def _errno(e):
    return e.args[0] if e.args else None


def _blocking(make, reconnect):
    link, opened = _links(make)
    c = MQTTClient("dev1", "peer", connect_link=link, reconnect=reconnect, timeout_ms=5000,
                   backoff_ms=(10, 20))
    try:
        c.connect(timeout_ms=TIMEOUT)
        e = None
    except Exception as x:
        e = x
    assert not c.is_connected()
    return e, len(opened)


async def _async(make, reconnect):
    link, opened = _links(make)
    c = AsyncClient("dev1", "peer", interval_ms=1, connect_link=link, reconnect=reconnect,
                    timeout_ms=5000, backoff_ms=(10, 20))
    try:
        await c.connect(timeout_ms=TIMEOUT)
        e = None
    except Exception as x:
        e = x
    assert not c.is_connected()
    await c.disconnect()
    return e, len(opened)


def test_blocking_connect_raises_the_peers_close():
    for reconnect in (False, True):
        e, n = _blocking(_Closes, reconnect)
        assert isinstance(e, OSError) and _errno(e) == 104, (reconnect, e)  # not 110
        assert n == 1 if not reconnect else n > 1  # reconnect=True tried again meanwhile


def test_blocking_connect_raises_the_links_own_error():
    err = OSError(-0x7780)  # mbedTLS: a fatal alert came
    for reconnect in (False, True):
        e, _ = _blocking(lambda: _Fails(err), reconnect)
        assert e is err, (reconnect, e)


def test_blocking_connect_times_out_with_110_when_nothing_broke():
    for reconnect in (False, True):
        e, n = _blocking(_Link, reconnect)
        assert isinstance(e, OSError) and _errno(e) == 110, (reconnect, e)
        assert n == 1


def test_blocking_connect_forgets_the_error_of_an_earlier_connect():
    # the second connect() meets a peer that never answers: 110, not the
    # close the first one met
    kinds = [_Closes, _Link]
    c = MQTTClient("dev1", "peer", connect_link=lambda: kinds[0](), reconnect=True,
                   backoff_ms=(10, 20))
    for want in (104, 110):
        try:
            c.connect(timeout_ms=TIMEOUT)
            e = None
        except OSError as x:
            e = x
        assert e is not None and _errno(e) == want, (want, e)
        kinds.pop(0)


async def test_async_connect_raises_the_peers_close():
    for reconnect in (False, True):
        e, n = await _async(_Closes, reconnect)
        assert isinstance(e, OSError) and _errno(e) == 104, (reconnect, e)  # not 110
        assert n == 1 if not reconnect else n > 1


async def test_async_connect_raises_the_links_own_error():
    err = OSError(-0x7780)
    for reconnect in (False, True):
        e, _ = await _async(lambda: _Fails(err), reconnect)
        assert e is err, (reconnect, e)


async def test_async_connect_times_out_with_110_when_nothing_broke():
    for reconnect in (False, True):
        e, n = await _async(_Link, reconnect)
        assert isinstance(e, OSError) and _errno(e) == 110, (reconnect, e)
        assert n == 1


async def test_async_connect_forgets_the_error_of_an_earlier_connect():
    kinds = [_Closes, _Link]
    c = AsyncClient("dev1", "peer", interval_ms=1, connect_link=lambda: kinds[0](),
                    reconnect=True, backoff_ms=(10, 20))
    for want in (104, 110):
        try:
            await c.connect(timeout_ms=TIMEOUT)
            e = None
        except OSError as x:
            e = x
        assert e is not None and _errno(e) == want, (want, e)
        kinds.pop(0)
    await c.disconnect()


# ---------------------------------------------------------------- the blocking
# client's connect() that raises leaves it down; the errno on both Pythons;
# a refused CONNACK raised at once.
import sys
from umqtt3.client import MQTTException

_CPYTHON = sys.implementation.name != "micropython"


class _Late(_Link):
    """Answers nothing until `answer` is set; then hands it out (a CONNACK
    that comes after connect() gave up). Records its close."""

    def __init__(self):
        self.answer = b""
        self.closed = False

    def readinto(self, buf, n):
        if self.closed:
            raise OSError(9)  # EBADF: nothing reads a closed link
        k = min(n, len(self.answer))
        if not k:
            return None
        for i in range(k):
            buf[i] = self.answer[i]
        self.answer = self.answer[k:]
        return k

    def close(self):
        self.closed = True


class _Answers(_Late):
    """Answers CONNECT with `answer` at once."""

    def __init__(self, answer):
        _Late.__init__(self)
        self.answer = answer


def test_blocking_connect_that_times_out_leaves_the_client_down():
    # connect(timeout_ms) shorter than the client's: it gives up with 110,
    # closes the link and leaves the client down, so the CONNACK that comes
    # later finds no link to arrive on: poll() raises 107 (not connected)
    links = []

    def link():
        links.append(_Late())
        return links[-1]
    c = MQTTClient("dev1", "peer", connect_link=link, timeout_ms=5000)
    try:
        c.connect(timeout_ms=TIMEOUT)
        e = None
    except OSError as x:
        e = x
    assert e is not None and _errno(e) == 110, e
    assert links[0].closed and c.conn.link is None and c.state == 0, (links[0].closed, c.state)
    links[0].answer = b"\x20\x02\x00\x00"  # the late CONNACK
    try:
        c.check_msg()
        e = None
    except OSError as x:
        e = x
    assert e is not None and _errno(e) == 107, e
    assert not c.is_connected() and len(links) == 1


def test_blocking_connect_that_times_out_with_reconnect_closes_its_link():
    # reconnect=True: the same; a later poll() dials a new link (the
    # client reconnects as after any drop), never reads the old one
    links = []

    def link():
        links.append(_Late())
        return links[-1]
    c = MQTTClient("dev1", "peer", connect_link=link, timeout_ms=5000, reconnect=True,
                   backoff_ms=(10, 20))
    try:
        c.connect(timeout_ms=TIMEOUT)
        e = None
    except OSError as x:
        e = x
    assert e is not None and _errno(e) == 110, e
    assert len(links) == 1 and links[0].closed and c.state == 0
    links[0].answer = b"\x20\x02\x00\x00"
    c.poll(0)  # a new link, CONNECT on it; the old one stays closed
    assert len(links) == 2 and not c.is_connected()
    links[1].answer = b"\x20\x02\x00\x00"
    c.poll(0)
    assert c.is_connected()


def test_connect_start_then_giving_up_with_disconnect_closes_the_link():
    # connect_start() sends CONNECT and returns; a caller that stops
    # waiting before the client's timeout_ms calls disconnect(): the link
    # is closed, a later CONNACK cannot connect the client
    links = []

    def link():
        links.append(_Late())
        return links[-1]
    c = MQTTClient("dev1", "peer", connect_link=link, timeout_ms=5000)
    c.connect_start()
    c.poll(0)
    assert c.state == 1 and not links[0].closed  # waiting for CONNACK
    c.disconnect()
    assert links[0].closed and c.state == 0
    links[0].answer = b"\x20\x02\x00\x00"
    try:
        c.poll(0)
        e = None
    except OSError as x:
        e = x
    assert e is not None and _errno(e) == 107 and not c.is_connected(), e


def test_connect_start_polled_past_the_clients_timeout_closes_the_link():
    # without disconnect(): poll() gives up at the client's timeout_ms with
    # Closed(110), the link closed (reconnect=False)
    from umqtt3.client_codec import Closed
    from umqtt3.compat import sleep_ms
    links = []

    def link():
        links.append(_Late())
        return links[-1]
    c = MQTTClient("dev1", "peer", connect_link=link, timeout_ms=50)
    c.connect_start()
    e = None
    for _ in range(100):
        try:
            c.poll(0)
        except OSError as x:
            e = x
            break
        sleep_ms(5)
    assert isinstance(e, Closed) and _errno(e) == 110, e
    assert links[0].closed and c.state == 0


def test_blocking_errors_carry_their_errno_on_both_pythons():
    # e.errno, not only e.args[0]: CPython sets it from OSError(n, text)
    # alone; MicroPython from OSError(n) too
    from umqtt3.client_codec import Closed
    c = MQTTClient("dev1", "peer", connect_link=_Link, timeout_ms=5000)
    try:
        c.publish(b"t", b"m")  # not connected
        e = None
    except OSError as x:
        e = x
    assert e is not None and e.errno == 107, e
    try:
        c.connect(timeout_ms=TIMEOUT)  # no CONNACK
        e = None
    except OSError as x:
        e = x
    assert e is not None and e.errno == 110, e
    if _CPYTHON:
        assert isinstance(e, TimeoutError), repr(e)  # CPython's class for errno 110
    c = MQTTClient("dev1", "peer", connect_link=_Closes)
    try:
        c.connect()
        e = None
    except OSError as x:
        e = x
    assert isinstance(e, Closed) and e.errno == 104, repr(e)  # still a Closed
    c = MQTTClient("dev1", "peer", connect_link=lambda: _Answers(b"\x20\x02\x00\x00"))
    c.connect()
    try:
        c.wait_msg(timeout_ms=20)
        e = None
    except OSError as x:
        e = x
    assert e is not None and e.errno == 110, e


def _refused(answer, reconnect, level=4):
    links = []

    def link():
        links.append(_Answers(answer))
        return links[-1]
    c = MQTTClient("dev1", "peer", connect_link=link, reconnect=reconnect, level=level,
                   timeout_ms=5000, backoff_ms=(10, 20))
    try:
        c.connect(timeout_ms=TIMEOUT)
        e = None
    except Exception as x:
        e = x
    assert not c.is_connected() and links[0].closed
    return c, e, links


def test_first_connect_reports_connack_3_as_the_refusal():
    # CONNACK 3 (server unavailable, 3.1.1 3.2.2.3; the server closes
    # after it [MQTT-3.2.2-5]). reconnect=False: MQTTException(3) at once,
    # as umqtt.simple. reconnect=True: the code asks to come back later, so
    # connect() tries again after the backoff within its timeout_ms, and
    # then raises the last refusal, MQTTException(3), not a timeout (110)
    c, e, links = _refused(b"\x20\x02\x00\x03", False)
    assert isinstance(e, MQTTException) and e.args == (3,), e
    assert len(links) == 1
    c, e, links = _refused(b"\x20\x02\x00\x03", True)
    assert isinstance(e, MQTTException) and e.args == (3,), e
    assert len(links) > 2 and all(k.closed for k in links), len(links)
    assert c.state == 0 and c.reconnect  # a later poll() goes on trying


def test_first_connect_reports_mqtt5s_retry_later_codes_as_the_refusal():
    # MQTT 5: Server unavailable 0x88, Server busy 0x89, Quota exceeded
    # 0x97, Connection rate exceeded 0x9F (3.2.2.2): the same
    for rc in (0x88, 0x89, 0x97, 0x9F):
        c, e, links = _refused(bytes((0x20, 3, 0, rc, 0)), True, level=5)
        assert isinstance(e, MQTTException) and e.args == (rc,), (rc, e)
        assert len(links) > 2, (rc, len(links))


def test_first_connect_refused_for_good_raises_at_once():
    # 5, not authorized: final even with reconnect=True: raised on the
    # first answer, and poll() afterwards does not dial
    c, e, links = _refused(b"\x20\x02\x00\x05", True)
    assert isinstance(e, MQTTException) and e.args == (5,), e
    assert len(links) == 1 and not c.reconnect
    try:
        c.poll(0)
        e = None
    except OSError as x:
        e = x
    assert e is not None and _errno(e) == 107 and len(links) == 1, e
