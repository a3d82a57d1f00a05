# The blocking client (umqtt3.client) at its edges, on an in-memory link
# (CPython and the WebAssembly MicroPython).
#
# When the message callback's own publish() meets trouble: a callback that
# raises has not taken the message, so for QoS 1/2 no acknowledgement goes
# out and the connection drops, because a broker resends only on a new
# connection [MQTT-4.4.0-1]; Busy (the window full) is such a refusal too. A
# publish() that finds the link broken inside the callback closes it, and
# poll() then stops reading from it.
#
# store=False: a message in flight when the link drops is not resent, so a
# publish(wait=True) waiting for it raises, as umqtt.simple's does.
import sys

from support import locked
from test_client_mem import Peer, Link
from umqtt3.client import MQTTClient
from umqtt3.client_codec import Busy, Closed
from umqtt3.codec import CONNECT, PUBACK, PUBLISH
from umqtt3.compat import ticks_ms


def _client(peer, link=Link, **kw):
    def connect_link():
        if peer.client_end.closed:
            peer.drop()  # a new connection
        return link(peer.client_end, peer)
    return MQTTClient("dev1", "peer", connect_link=connect_link, timeout_ms=2000, **kw)


def test_busy_in_the_callback_drops_the_link_for_qos1():
    peer = Peer()
    peer.ack = False  # our own QoS 1 publish stays in flight: the window (1) is full
    c = _client(peer, window=1)
    c.set_callback(lambda t, m: c.publish(b"echo", m, qos=1))  # raises Busy
    c.connect()
    c.publish(b"out", b"1", qos=1, wait=False)
    peer.publish(b"cmd/a", b"m1", 1)
    try:
        c.poll(0)
        raised = False
    except Busy:
        raised = True
    assert raised  # the callback's exception leaves poll()
    assert not c.is_connected()  # dropped: the broker resends it [MQTT-4.4.0-1]
    assert peer.got[PUBACK] == 0


def test_a_callback_raising_oserror_for_qos1_backs_off_once():
    # the core drops the link for a QoS 1/2 message the callback refused;
    # the driver, which drops it for an OSError too, does not count the
    # same loss a second time (the next attempt waits one backoff step)
    peer = Peer()
    c = _client(peer, reconnect=True, backoff_ms=(1000, 60000))

    def cb(t, m):
        raise OSError(5)
    c.set_callback(cb)
    c.connect()
    peer.publish(b"cmd/a", b"m1", 1)
    try:
        c.poll(0)  # the callback's OSError leaves poll(), as any it raises
        raised = None
    except OSError as e:
        raised = e
    assert raised is not None and raised.args[0] == 5
    assert not c.is_connected() and c.tries == 1  # reconnect=True: one backoff step
    assert peer.got[PUBACK] == 0


def test_poll_redials_only_once_the_backoff_has_passed():
    # reconnect=True: once the link dropped, poll() dials again only when
    # the backoff has passed; a dial that fails is kept in err (connect()
    # raises it) and the next one waits a backoff again (client_more.redial)
    peer = Peer()
    fail = []

    def connect_link():
        if fail:
            raise fail.pop()
        if peer.client_end.closed:
            peer.drop()  # a new connection
        return Link(peer.client_end, peer)
    c = MQTTClient("dev1", "peer", connect_link=connect_link, timeout_ms=2000,
                   reconnect=True, backoff_ms=(60000, 60000))
    c.connect()
    peer.conn.link.close()  # the server ends the connection
    assert c.poll(0) == 0
    assert not c.is_connected() and c.tries == 1
    assert c.poll(1) == 0 and peer.got[CONNECT] == 1  # within the backoff: no dial
    if sys.implementation.name == "micropython":
        assert locked(c.poll, 0) == 0  # and a poll() meanwhile allocates nothing
    fail.append(OSError(111))
    c.retry_at = ticks_ms()  # the backoff has passed
    assert c.poll(1) == 0 and not fail  # dialled, and it failed
    assert c.err.args[0] == 111 and c.tries == 2 and not c.is_connected()
    assert c.poll(1) == 0 and peer.got[CONNECT] == 1  # a backoff again: no dial
    c.retry_at = ticks_ms()
    for _ in range(20):
        c.poll(1)
        if c.is_connected():
            break
    assert c.is_connected() and peer.got[CONNECT] == 2


class _BreaksOnEcho(Link):
    # the first link breaks when the callback's PUBLISH to b"echo" is written
    broke = []

    def write(self, buf, off=0, n=-1):
        if not self.broke and buf[off] >> 4 == 3 and \
                b"echo" in bytes(buf[off:off + (n if n > 0 else len(buf))]):
            self.broke.append(1)
            raise Closed(104)
        return Link.write(self, buf, off, n)


def test_a_link_broken_by_the_callbacks_publish_ends_the_poll():
    peer = Peer()
    c = _client(peer, _BreaksOnEcho, reconnect=True, backoff_ms=(1, 1))
    c.set_callback(lambda t, m: c.publish(b"echo", m, qos=1))
    c.connect()
    peer.publish(b"cmd/a", b"m1", 1)
    peer.publish(b"cmd/a", b"m2", 0)
    assert c.poll(0) == 1  # no read from the closed link (AttributeError before)
    assert not c.is_connected()
    assert c.inflight() == 1  # the echo is stored for the next connection
    for _ in range(50):
        c.poll(2)
        if peer.got[CONNECT] == 2 and c.is_connected():
            break
    assert peer.got[CONNECT] == 2 and c.is_connected()  # reconnected
    for _ in range(10):
        c.poll(1)
    assert c.inflight() == 0  # the echo went out and was acknowledged


class DropsAfterPublish(Link):
    # the first link breaks once the peer has the first PUBLISH, unanswered
    # (test_aio_nostore's too)
    def readinto(self, buf, n):
        p = self.peer
        if not getattr(p, "dropped", False) and p.got[PUBLISH]:
            p.dropped = True  # once per peer: the next link stays up
            p.conn.link.close()
            return 0
        return Link.readinto(self, buf, n)


def test_store_false_publish_waiting_when_the_link_drops_raises():
    peer = Peer()
    peer.ack = False
    c = _client(peer, DropsAfterPublish, store=False, reconnect=True, backoff_ms=(1, 1))
    c.connect()
    try:
        c.publish(b"t", b"reading", qos=1)  # wait=True
        raised = None
    except OSError as e:
        raised = e
    assert raised is not None  # no PUBACK came: not reported delivered
    assert peer.got[CONNECT] == 2  # reconnected, and nothing resent
    assert peer.got[PUBLISH] == 1


def test_store_false_qos1_publish_while_down_is_refused():
    # store=False keeps no bytes: a QoS 1 publish() while the link is down
    # raises OSError(107) at once, as QoS 0, instead of taking a message
    # the reconnect would report lost (0x100) without sending it
    peer = Peer()
    c = _client(peer, store=False, reconnect=True, backoff_ms=(60000, 60000))
    c.connect()
    peer.conn.link.close()  # the server ends the connection
    c.poll(0)
    assert not c.is_connected()
    for wait in (True, False):
        try:
            c.publish(b"t", b"reading", qos=1, wait=wait)
            raise AssertionError("accepted while down, to be lost")
        except OSError as e:
            assert e.args[0] == 107
    assert c.inflight() == 0


class _Scripted:
    """A link that answers CONNECT with `connack` and SUBSCRIBE with a
    SUBACK refusing the filter (0x80)."""

    def __init__(self, connack):
        self.connack = connack
        self.inbox = bytearray()

    def write(self, buf, off=0, n=-1):
        if n < 0:
            n = len(buf) - off
        t = buf[off] >> 4
        if t == 1:
            self.inbox += self.connack
        elif t == 8:
            self.inbox += bytes([0x90, 3, buf[off + 2], buf[off + 3], 0x80])
        return n

    def readinto(self, buf, n):
        k = min(n, len(self.inbox))
        if not k:
            return None
        for i in range(k):
            buf[i] = self.inbox[i]
        self.inbox = self.inbox[k:]
        return k

    def close(self):
        pass


def test_refusals_raise_umqtt_simple_s_exception():
    # umqtt.simple: a refused CONNACK or SUBACK raises MQTTException(rc)
    from umqtt3.client import MQTTException
    from umqtt3.client_codec import MQTTError
    c = MQTTClient("dev1", "x", connect_link=lambda: _Scripted(b"\x20\x02\x00\x05"))
    try:
        c.connect()
        e = None
    except MQTTException as x:
        e = x
    assert e is not None and e.args == (5,)  # 5: not authorized (3.1.1, 3.2.2.3), the link closed [MQTT-3.2.2-5]
    assert isinstance(e, MQTTError) and e.code == 5  # umqtt3's own name still catches it
    c = MQTTClient("dev1", "x", connect_link=lambda: _Scripted(b"\x20\x02\x00\x00"))
    c.set_callback(lambda t, m: None)
    c.connect()
    try:
        c.subscribe(b"a/b", 1)
        e = None
    except MQTTException as x:
        e = x
    assert e is not None and e.args == (0x80,)  # 0x80: Failure (3.1.1, 3.9.3)


def test_ping_every_few_hundred_ms_still_finds_a_silent_link_dead():
    # umqtt.simple's keepalive idiom (ping() more often than keepalive): a
    # server gone silent (a NAT that forgot the flow) sends no PINGRESP, and
    # the missing answer to the first unanswered PINGREQ ends the link
    # (MQTT 3.1.1 3.1.2.10), however many ping() calls followed it
    from umqtt3.compat import sleep_ms, ticks_diff
    peer = Peer()
    c = _client(peer, keepalive=1)
    c.connect()
    peer.step = lambda: False  # silent from now on: nothing read, nothing answered
    err = None
    start = ticks_ms()
    while ticks_diff(ticks_ms(), start) < 5000:
        sleep_ms(200)
        try:
            c.ping()
            c.poll(0)
        except OSError as e:
            err = e
            break
    assert err is not None and err.args[0] in (107, 110)  # 110: no PINGRESP in time
    assert not c.is_connected()


def test_an_oserror_from_the_callback_leaves_poll_and_the_qos0_link_stays():
    # a sensor's OSError in the callback (machine.I2C raises one) is the
    # application's, not the link's: poll() raises it as any exception the
    # callback raises, and a QoS 0 message, which nothing resends, leaves
    # the link up (before, poll() took it for a broken link and redialled)
    peer = Peer()
    c = _client(peer, reconnect=True, backoff_ms=(1, 1))
    got = []

    def cb(t, m):
        got.append(m)
        if m == b"bad":
            raise OSError(19)
    c.set_callback(cb)
    c.connect()
    peer.publish(b"cmd/a", b"bad", 0)
    try:
        c.poll(0)
        raised = None
    except OSError as e:
        raised = e
    assert raised is not None and raised.args[0] == 19  # passed on, as a ValueError would be
    assert c.is_connected()
    peer.publish(b"cmd/a", b"good", 0)
    for _ in range(5):
        c.poll(1)
    assert got == [b"bad", b"good"] and peer.got[CONNECT] == 1  # the same link


def test_an_async_callback_raises_typeerror_and_the_message_is_not_taken():
    # the client cannot await an async def: the QoS 1 message is not
    # acknowledged [MQTT-4.3.2-2] and the link drops (the broker resends it
    # on the next one), and poll() says why
    peer = Peer()
    c = _client(peer)
    ran = []

    async def on_msg(t, m):
        ran.append(m)
    c.set_callback(on_msg)
    c.connect()
    peer.publish(b"cmd/a", b"m1", 1)
    try:
        c.poll(0)
        raised = None
    except TypeError as e:
        raised = e
    assert raised is not None and "async" in str(raised)
    assert peer.got[PUBACK] == 0 and not ran
    assert not c.is_connected()
