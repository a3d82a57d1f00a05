# umqtt3.client_skip -- an inbound PUBLISH larger than the client's receive
# buffer, discarded as an MQTT 5 server discards a message larger than the
# Maximum Packet Size its client declared, "as if it had completed sending"
# ([MQTT-3.1.2-25], the server's rule). At 3.1 and 3.1.1 no property tells
# the server our size, so the client does it itself; otherwise a persistent
# session would send the message again on every connection and the client
# would never get past it. At 5 the server was told (Core sets no discard):
# a larger packet is a Protocol Error [MQTT-3.1.2-24]. Loaded by Conn.recv (client_codec) on the first such message: a
# client that never gets one never loads it, and a server's Conn refuses
# such a packet instead (docs/client.md, "When an inbound packet cannot be
# stored").
#
# Conn.recv reads the fixed header, then the topic and the packet id into
# the buffer (head), which the core (conn.discard) answers as a delivered
# message without calling the callback (taken); then Conn.recv reads and
# drops the rest in pieces of at most the buffer, one piece a call (recv).
# Each of those calls returns -1, which the driver hands to Core.packet
# (nothing to do there) and counts as a packet: its loop goes on, or ends
# when its time is up, so poll(timeout_ms) keeps its bound and the next call
# goes on dropping. Meanwhile conn.need is minus the bytes left to drop:
# done() and a new link (Core.down) set it back.
from .compat import const
from .client_codec import MQTTError, Closed, fail, encode_ack, str_end, read_pid

_UP = const(2)  # Core.state
_PUBACK = const(4)
_PUBREC = const(5)
_DISCARDED = const(0x195)  # the ack callback's code: 0x95 (too large) + 0x100 (not MQTT's)
_TOO_LARGE = const(0x95)
# client_codec's error texts (codec_errors)
_E_OVER_MAXIMUM = const(2)
_E_QOS = const(15)
_E_DUP_QOS0 = const(32)
_E_WILDCARD = const(33)
_E_EMPTY_TOPIC = const(34)


def _fixed(rx):
    # the fixed header's length (its remaining length is whole: frame_len)
    i = 1
    while rx[i] & 0x80:
        i += 1
    return i + 1


def head(c, n, got):
    """Conn.recv: the packet starting in c.rx[0:got] is n bytes, more than
    c.rx holds. A PUBLISH: once its header up to the packet id is whole in
    c.rx, the core answers it (taken), the rest is to drop (c.need < 0) and
    -1 is returned; until then the header's length, to read first. Anything
    else, or a header longer than the buffer, is refused as before:
    MQTTError 0x95, the link dropped."""
    rx = c.rx
    i = _fixed(rx)
    h = i + 2  # the topic's length first
    t = rx[0] >> 4 == 3
    if t and got >= h:
        h += ((rx[i] << 8) | rx[i + 1]) + (2 if rx[0] & 6 else 0)
    if not t or h > len(rx):
        fail(_E_OVER_MAXIMUM, _TOO_LARGE)
    if got < h:
        return h
    c.got = 0
    c.need = got - n  # (set first: if the ack callback raises, the drop goes on)
    taken(c.discard, h)
    return -1


def recv(c):
    """Conn.recv while c.need < 0: read and drop one piece of what is left.
    -1 when a piece was read (the driver's loop goes on, and checks its
    time), 0 when the link has nothing now."""
    k = -c.need
    rx = c.rx
    r = c.link.readinto(rx, k if k < len(rx) else len(rx))
    if r is None:
        return 0
    if not r:
        raise Closed(104, "")  # closed by the peer
    c.need = r - k if r < k else 2  # (2: done, the next packet as usual)
    return -1


def taken(c, h):
    """The header of a PUBLISH too large for the buffer, in c.conn.rx[0:h]
    (c: the client core): checked as decode() checks a PUBLISH and answered
    as a delivered one [MQTT-4.3.2-2, MQTT-4.3.3-2], but not handed to the
    callback; counted in c.too_large, and the ack callback gets (0, 0x195)."""
    conn = c.conn
    rx = conn.rx
    first = rx[0]
    q = (first >> 1) & 3
    if q == 3:
        fail(_E_QOS)  # [MQTT-3.3.1-4]
    if first & 8 and not q:
        fail(_E_DUP_QOS0)  # [MQTT-3.3.1-2]
    i = _fixed(rx) + 2
    t = str_end(rx, i - 2, h)  # well-formed UTF-8 [MQTT-1.5.3-1, MQTT-1.5.3-2]
    if t == i:
        fail(_E_EMPTY_TOPIC)  # [MQTT-4.7.3-1] (MQTT 5: a Topic Alias, which we allow none of)
    while i < t:
        if rx[i] == 0x23 or rx[i] == 0x2B:
            fail(_E_WILDCARD)  # [MQTT-3.3.2-2]
        i += 1
    if c.state != _UP:
        raise MQTTError("protocol error", 0x82)  # before CONNACK, as in Core.packet
    pid = 0
    if q:
        read_pid(c.pkt, rx, t, h)  # packet id 0: a protocol error [MQTT-2.3.1-1]
        pid = c.pkt.pid
    st = c.store
    # a known QoS 2 id is a resend: PUBREC again, not counted again [MQTT-4.3.3-2]
    new = q < 2 or not st.in_has(pid)
    if q == 2 and new:
        # the id kept as received, so PUBREL gets PUBCOMP and a resend is
        # not taken for a new message; no body: there is nothing to hand
        # over again after a reset (client_resume)
        st.in_add(pid, rx, 0, 0)
        st.in_done(pid)
    if q:
        c.unsynced = True  # the store's record is durable before the ack leaves (set_sync)
        conn.tlen = encode_ack(conn.tx, conn.tlen, _PUBREC if q == 2 else _PUBACK, pid)
    if new:
        c.too_large += 1
        if c.on_ack is not None:
            c.on_ack(0, _DISCARDED)
