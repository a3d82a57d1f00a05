# umqtt3.broker_bytes -- a broker core fed plain bytes, and emptied of them.
#
#     n = feed(core, c, data, now)      # packets handled
#     out = take(core, c)               # everything c has to send
#
# consume() handles the whole packets of a buffer where they lie and keeps
# a packet cut by the end of the bytes in the connection's receive buffer,
# so a driver that reads a socket in gulps (CPython's, broker.py) hands the
# core each gulp without a copy per packet; a level-3/4 client's PUBLISHes
# are read there in one pass each (publishes), without the decoder. A
# device's driver reads each packet into the receive buffer exactly and
# calls Core.packet(), and never loads this module.
from .codec import frame_len, MQTTError, SUBSCRIBE, PUBLISH
from .compat import copy, topic_ok, TOPIC_MEMO
from .broker_core import CLOSED, CONNECTED, QueueFull
from .broker_session import put_ack


def consume(core, c, buf, off, end, now, limit, careful=True, fan=0x3FFFFFFF):
    """Handle up to `limit` packets of buf[off:end] for connection c, fewer
    once core.routed (deliveries, counted from 0 by the caller) reaches
    fan. Returns (offset reached, packets handled, stalled). careful: stop
    before a packet whose answers do not fit c's send buffer (stalled:
    flush, then call again). A PUBLISH the core holds (c.held, a bridge's
    back-pressure) stops it there: the offset reached is the packet's (in
    rx: kept there), for the call after Core.unhold."""
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
                    if c.held is not None:
                        break  # kept in rx (Core.packet)
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
                o, j = publishes(core, c, buf, off, end, now, limit - k, fan, careful)
                core.bytes_in += o - off  # (the run's bytes: one sum, not one per packet)
                if c.held is not None:
                    return o, k + j, False  # the held PUBLISH at o, unread
                if j:
                    off = o
                    k += j
                    continue
            if n and off + n <= end:
                # Core.room(), inline: the answers fit the send buffer
                if careful and len(conn.tx) - conn.tlen < (n if buf[off] >> 4 == SUBSCRIBE else 8):
                    return off, k, True
                core.packet_at(c, buf, off, n, now)
                if c.held is not None:
                    break  # left where it lies, unread
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


def publishes(core, c, buf, off, end, now, limit, fan, careful):
    """What Core.packet_at does with each whole PUBLISH from buf[off] on of
    connected level-3/4 client c without an ACL (publish4), for the run of
    them in one call, up to `limit` packets and until core.routed reaches
    fan (fan-in sends PUBLISHes in runs). careful: only while the answers
    fit the send buffer. Returns where the run ends and the packets
    handled: at anything else, which consume() hands to packet_at, or at
    a PUBLISH the core held (c.held)."""
    if core.names is None:
        return off, 0
    c.t_last = now
    core.cur = c
    conn = c.conn
    mp = conn.max_packet
    k = 0
    se = core.store_errors
    try:
        while k < limit and core.routed < fan and off + 2 <= end and buf[off] >> 4 == PUBLISH:
            n = buf[off + 1] + 2  # a one-byte remaining length, inline
            if n > 129 or n > mp:
                n = frame_len(buf, off, end, mp)  # longer, or refused
            if not n or off + n > end or (careful and len(conn.tx) - conn.tlen < 8) or \
                    not publish4(core, c, buf, off, n):
                break
            off += n
            k += 1
            if c.state != CONNECTED:
                break
    except MQTTError as e:
        core.fail(c, e)  # [MQTT-4.8.0-1]
        return end, k + 1
    except OSError:
        # a store write that failed (counted) is not acknowledged: the
        # client sends again on its next connection
        core.disconnect(c, "store write failed" if core.store_errors != se
                        else "connection lost", True)
        return end, k + 1
    except Exception as e:
        core.errors += 1
        core.disconnect(c, "internal error: %r" % (e,), True)
        return end, k + 1
    return off, k


def publish4(core, c, buf, off, n):
    """The PUBLISH buf[off:off+n] of connected level-3/4 client c without
    an ACL: what the decoder, Core._packet and Core._route_of do with it, in
    one pass over its bytes, its topic name checked once per name
    (core.names). False, nothing done: anything the decoder refuses (it
    names what is wrong) and a topic starting with "$" go the general way;
    and False for a PUBLISH the core held (c.held), left where it lies."""
    b0 = buf[off]
    q = (b0 >> 1) & 3
    if q == 3 or (b0 & 8 and not q):  # ([MQTT-3.3.1-4], [MQTT-3.3.1-2]: the decoder's)
        return False
    i = off + 1
    while buf[i] & 0x80:
        i += 1
    i += 1  # the variable header (n is the frame's length)
    end = off + n
    if i + 2 > end:
        return False
    tn = (buf[i] << 8) | buf[i + 1]
    t0 = i + 2
    te = t0 + tn
    pe = te + 2 if q else te  # the payload
    if not tn or pe > end or buf[t0] == 36:  # ($: $SYS, the general way)
        return False
    pid = 0
    if q:
        pid = (buf[te] << 8) | buf[te + 1]
        if not pid:
            return False  # [MQTT-2.3.1-1]
    key = bytes(buf[t0:te])
    names = core.names
    tk = names.get(key)
    if tk is None:
        # UTF-8, no U+0000, no wildcard [MQTT-1.5.3-1, MQTT-1.5.3-2,
        # MQTT-3.3.2-2] in C; the broker's own rules (Core.name_ok) raise
        if topic_ok is None or not topic_ok(buf, t0, tn):
            return False
        core.received += 1
        core.pub_in += end - pe
        core.name_ok(buf, t0, tn, 0)
        if len(names) >= TOPIC_MEMO:
            names.clear()
        names[key] = tk = key
    else:
        core.received += 1
        core.pub_in += end - pe
    s = c.sess
    core.nhit = -1
    r = core.route
    r.tsrc = tk  # the topic: the memo's bytes, which match() and a Msg reuse
    r.toff = 0
    r.tn = tn
    r.psrc = buf
    r.poff = pe
    r.pn = end - pe
    r.qos = q
    r.retain = b0 & 1 == 1
    r.src = s
    r.msg = None
    r.tag = s.tag
    r.flevel = 4
    r.prs = None
    r.pro = r.prn = 0
    r.frame = buf
    r.foff = off
    r.flen = n
    r.fpid = te - off
    if q < 2:
        try:
            core.route_ready(r)
        except QueueFull:
            core.refuse_publish(c, q, pid)
            return c.held is None  # (held: nothing done, the run ends here)
        if q:
            put_ack(c.conn, 0x40, pid)  # [MQTT-4.3.2-2]
            core.others_out += 1
        return True
    core.publish2(c, pid, r)  # the QoS 2 rules, Core._packet's too
    return c.held is None


def feed(core, c, data, now):
    """Bytes received for c: handle every packet they complete; a partial
    one waits in c.conn.rx for the next call. Returns the packets handled.
    The caller take()s what is due between calls. A held PUBLISH (c.held:
    a broker with a bridge) ends the call and the bytes from it on are not
    taken: a broker with a bridge is fed by its driver (broker.py), which
    keeps them for after Core.unhold."""
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
        core.bytes_out += conn.tlen - conn.sent
        conn.tlen = conn.sent = 0
        if c.state == CLOSED or not core.refill(c):
            return out
