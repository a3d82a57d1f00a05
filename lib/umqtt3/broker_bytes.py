# umqtt3.broker_bytes -- a broker core fed plain bytes, and emptied of them.
#
#     n = feed(core, c, data, now)      # packets handled
#     out = take(core, c)               # everything c has to send
#
# consume() handles the whole packets of a buffer where they lie and keeps
# a packet cut by the end of the bytes in the connection's receive buffer,
# so a driver that reads a socket in gulps (CPython's, broker.py) hands the
# core each gulp without a copy per packet. A device's driver reads each
# packet into the receive buffer exactly and calls Core.packet(), and never
# loads this module.
from .codec import frame_len, MQTTError, SUBSCRIBE, PUBLISH
from .compat import copy
from .broker_core import CLOSED, CONNECTED


def consume(core, c, buf, off, end, now, limit, careful=True, fan=0x3FFFFFFF):
    """Handle up to `limit` packets of buf[off:end] for connection c, fewer
    once core.routed (deliveries, counted from 0 by the caller) reaches
    fan. Returns (offset reached, packets handled, stalled). careful: stop
    before a packet whose answers do not fit c's send buffer (stalled:
    flush, then call again)."""
    conn = c.conn
    mp = conn.max_packet
    rx = conn.rx
    k = 0
    try:
        while k < limit and core.routed < fan and c.state != CLOSED:
            got = conn.got
            if got:
                # the rest of a packet begun earlier, through rx
                n = frame_len(rx, 0, got, mp) if got >= 2 else 0
                if n and n == got:
                    if careful and not core.room(c, rx[0], n):
                        return off, k, True
                    core.packet(c, n, now)
                    k += 1
                    continue
                if off >= end:
                    break
                w = (n if n else (got + 1 if got >= 2 else 2)) - got
                if w > end - off:
                    w = end - off
                copy(rx, got, buf, off, w)
                off += w
                conn.got = got + w
                continue
            if off >= end:
                break
            if end - off < 2:
                n = 0
            else:
                n = buf[off + 1] + 2  # a one-byte remaining length, inline
                if n > 129 or n > mp:
                    n = frame_len(buf, off, end, mp)  # longer, or refused
            if n == 4 and buf[off] == 0x40 and off + 4 <= end and c.state == CONNECTED:
                # PUBACKs that are only their id: no answer, no decode
                o = core.pubacks(c, buf, off, end, now)
                k += (o - off) >> 2
                off = o
                continue
            if buf[off] >> 4 == PUBLISH and c.v5 is None and c.grants is None and \
                    c.state == CONNECTED:
                # a run of PUBLISHes, each in one pass; one the run does not
                # take goes the general way, below
                o, j = core.publishes(c, buf, off, end, now, limit - k, fan, careful)
                if j:
                    off = o
                    k += j
                    continue
            if n and off + n <= end:
                # Core.room(), inline: the answers fit the send buffer
                if careful and len(conn.tx) - conn.tlen < (n if buf[off] >> 4 == SUBSCRIBE else 8):
                    return off, k, True
                core.packet_at(c, buf, off, n, now)
                off += n
                k += 1
                continue
            # a packet cut by `end`: rx keeps its start (n <= max_packet)
            w = end - off
            copy(rx, 0, buf, off, w)
            conn.got = w
            off = end
    except MQTTError as e:
        core.fail(c, e)  # [MQTT-4.8.0-1]
    return off, k, False


def feed(core, c, data, now):
    """Bytes received for c: handle every packet they complete; a partial
    one waits in c.conn.rx for the next call. Returns the packets handled.
    The caller take()s what is due between calls."""
    core.routed = 0
    return consume(core, c, data, 0, len(data), now, 0x7FFFFFFF, False)[1]


def take(core, c):
    """Everything c has to send, as bytes: the send buffer, refilled from
    the session until nothing waits."""
    core.commit()  # nothing leaves before the store holds it
    conn = c.conn
    out = b""
    while True:
        out += bytes(conn.tx[conn.sent:conn.tlen])
        conn.tlen = conn.sent = 0
        if c.state == CLOSED or not core.refill(c):
            return out
