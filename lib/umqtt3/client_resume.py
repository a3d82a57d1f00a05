# umqtt3.client_resume -- what a client does on a connection that follows
# another: loaded by the client core only when there is something to resume,
# so a client that connects once with nothing stored never loads it.
from .compat import const
from .client_codec import Packet, decode, encode_ack

_PUBREL = const(6)
_LOST = const(0x100)  # client_core's completion code: a reconnect forgot the message


def done(c, pid, rc):
    # a stored message completes (or is refused) here, not by an ack
    c.store.out_del(pid)
    c.acked(pid, rc)


def resend(store, conn, sp, c=None):
    """The in-flight messages again, in their original order: PUBLISH with
    DUP=1, PUBREL for those the broker already took [MQTT-4.4.0-1,
    MQTT-4.6.0-1]. A generator that yields whenever conn.tx has no room.
    c: the client core, which hears of what completes without an ack."""
    tx = conn.tx
    # the stored messages not handled yet: the others the store holds were
    # sent on this connection and are unacknowledged (an ack removes one:
    # out_count() is the count the acks decrement)
    left = store.out_count()
    for pid, state, key, body in store.recover():
        if state == "u":
            continue  # inbound (handed over by resume())
        left -= 1
        if not store.out_has(pid):
            continue  # completed meanwhile
        if body is None:
            # a store that keeps no message (store=False) cannot resend it:
            # it completes as lost, so a caller waiting for it knows
            done(c, pid, _LOST)
            continue
        if c is not None and state == "p":
            if c.level == 5:
                # the application's Topic Alias lasted one connection
                # [MQTT-3.3.2-7]: the topic goes alone (none: refused)
                from .client5 import unalias
                body = unalias(body)
            # what the new server would close on is refused, not sent:
            # too large [MQTT-3.2.2-15], a QoS above its maximum
            # [MQTT-3.2.2-11], retained where it keeps none [MQTT-3.2.2-14]
            rc = 0x94 if body is None else \
                0x95 if c.max_packet and len(body) > c.max_packet else \
                0x9B if (body[0] >> 1) & 3 > c.max_qos else \
                0x9A if body[0] & 1 and not c.retain_ok else 0
            if rc:
                # unless the client's owner sends it within them (a
                # bridge, Core.lower): the body to send, or None
                body = body and c.lower and c.lower(body, rc)
                if not body:
                    done(c, pid, rc)
                    continue
        if state != "p" and not sp:
            # PUBREC came and PUBREL was sent: the broker owns the message
            # and the PUBLISH must not go again [MQTT-4.3.3-1]; a broker
            # without our session has nothing to release, so it is done
            done(c, pid, 0)
            continue
        # at most the server's Receive Maximum unacknowledged [MQTT-3.3.4-7]
        # (the quota starts anew on each connection [MQTT-4.9.0-1]; a PUBREL
        # counts too: its message is unacknowledged until PUBCOMP). While
        # the quota is used up the driver reads: acks come (Core.acked).
        while c is not None and store.out_count() - left > c.window:  # (this one is stored too)
            yield 1
        n = len(body) if state == "p" else 4
        while conn.space() < n:
            yield
        o = conn.tlen
        if state == "p":
            tx[o:o + n] = body
            conn.tlen = o + n
            if body[0] & 6:
                tx[o] |= 8  # DUP [MQTT-3.3.1-1]
            else:
                # lowered to QoS 0 (Core.lower): no DUP [MQTT-3.3.1-2],
                # no ack to wait for
                done(c, pid, 0)
        else:
            conn.tlen = encode_ack(tx, o, _PUBREL, pid)


def resume(c, sp):
    """Resend in-flight messages [MQTT-4.4.0-1, MQTT-4.6.0-1], re-subscribe if
    the broker kept no session (sp False) [MQTT-3.2.2-3], and hand stored
    inbound messages over again. A generator: it stops (yields) whenever the
    send buffer is full, and the core goes on (refill) once the driver has
    written it out. The resend comes first, so a callback that raises cannot
    hold it up."""
    yield from resend(c.store, c.conn, sp, c)
    pending = c.req if c.wait_pid else None
    if pending is not None:
        # a SUBSCRIBE/UNSUBSCRIBE the old link cut off: asked again with the
        # same id, so the caller waiting on it gets its answer; one above
        # the new server's Maximum Packet Size is answered 0x95 here, unsent
        # [MQTT-3.2.2-15] (subscribe_end forgets the filter)
        # (max_packet first: a 3.1.1 client leaves client_more unloaded)
        if c.max_packet and c.oversized(pending, c.subs.get(pending) or (-1, None)):
            c.answer = 0x95
            c.wait_pid = 0
        else:
            while not c.ask(c.wait_pid, pending):
                yield
    if not sp:
        for topic in list(c.subs):  # (a copy: the loop forgets filters)
            if topic != pending:
                if c.max_packet and c.oversized(topic, c.subs[topic]):
                    # the server would close on it, at every reconnect:
                    # forgotten, reported as a resent PUBLISH too large is
                    # (set_ack_callback: packet id 0, no publish's)
                    del c.subs[topic]
                    if c.on_ack is not None:
                        c.on_ack(0, 0x95)
                    continue
                pid = c.new_pid()
                while not c.ask(pid, topic):
                    yield
    r = c.redelivered
    while r:
        pid, body = r[0]
        if body:  # (none: a message too large for the buffer, discarded: client_skip)
            p = Packet(c.level)
            decode(p, body, 0, len(body))
            c.deliver(p, True)  # if this raises, it stays on the list
        r.pop(0)
        c.store.in_done(pid)
    if not sp:
        # the broker has no session: the ids of inbound QoS 2 messages
        # waiting for PUBREL mean nothing now (see Core._connack)
        c.store.in_clear()
