# umqtt3.client_resume -- what a client does on a connection that follows
# another: loaded by MQTTClient only when there is something to resume, so
# a client that connects once with nothing stored never loads it.
from .codec import Packet, decode


def resume(c, sp):
    """Resend in-flight messages [MQTT-4.4.0-1], re-subscribe if the broker
    kept no session (sp False) [MQTT-3.2.2-3], and hand stored inbound
    messages over again. The resend comes first, so a callback that raises
    cannot hold it up."""
    c.flow.resend(c.conn, c.drain, sp)
    pending = c.req if c.wait_pid else None
    if pending is not None:
        # a SUBSCRIBE/UNSUBSCRIBE the old link cut off: ask again with the
        # same id, so the caller waiting on it gets its answer
        c.ask(c.wait_pid, pending)
    if not sp:
        for topic in c.subs:
            if topic != pending:
                c.ask(c.flow.new_pid(), topic)
    c.send()
    r = c.redelivered
    while r:
        pid, body = r[0]
        p = Packet(c.level)
        decode(p, body, 0, len(body))
        c.deliver(p, True)  # if this raises, it stays on the list
        r.pop(0)
        c.store.in_done(pid)
