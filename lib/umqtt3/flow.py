# umqtt3.flow -- QoS 1 and 2 for one side of a connection, free of I/O.
#
# MQTT's PUBLISH flows are symmetric, so the client and each broker session
# use the same machine: it encodes what must be sent into a conn.Conn's
# tx buffer and keeps what must survive a reset in a store (umqtt3.store).
# The ordering rules are the store's contract: a QoS 1/2 PUBLISH is stored
# before its first send, PUBREC is recorded before PUBREL goes out, an
# inbound QoS 2 packet id is stored before PUBREC and removed before PUBCOMP.
#
# A Flow works over a MemoryStore or FileStore, or over a broker session
# (broker_session.Session), whose outbound messages live in its in-flight
# ring and whose out_rel() may answer True, "I send the PUBREL myself,
# later", to keep its send order. The client core and the broker core
# have these rules written in (broker_core's _packet and _ack, and
# Session.ack_out), in fewer steps per message, and make no Flow; each
# stores before it sends in its own sender (Core.queue, Session.send).
from .compat import const
from .client_codec import encode_publish, encode_ack, MQTTError, Busy, StoreFull  # noqa: F401


_RESERVE = const(8)  # send-buffer bytes a PUBLISH may not take
_PUBACK = const(4)  # packet types, as in codec
_PUBREC = const(5)
_PUBREL = const(6)
_PUBCOMP = const(7)


def send_stored(store, conn, start, end, pid, key=None):
    """The QoS 1/2 PUBLISH with packet id pid encoded at conn.tx[start:end]
    goes out: stored first (durable before its first send), then queued for
    sending. Raises what the store raises (StoreFull, OSError), with nothing
    stored or queued. Flow.publish and the broker's sessions both send this
    way."""
    store.out_add(pid, key, conn.tx, start, end - start)
    conn.tlen = end


class Flow:
    def __init__(self, store, app, window=8, level=4, max_pid=65535):
        self.store = store
        self.app = app  # has deliver(pkt, redelivered)
        self.window = window
        self.level = level
        self.max_pid = max_pid  # smaller only in tests, to make ids wrap
        self.pid = 0
        self.last_done = 0  # packet id whose flow completed last
        # MQTT 5 limits the server set in CONNACK (the client's flow only)
        self.max_packet = 0  # Maximum Packet Size, 0: none [MQTT-3.2.2-15]
        self.alias_max = 0  # Topic Alias Maximum

    def new_pid(self):
        p = self.pid
        m = self.max_pid
        for _ in range(m):
            p = p % m + 1
            if not self.store.out_has(p):
                self.pid = p
                return p
        raise Busy("busy", 0x97)

    def publish(self, conn, topic, msg, qos=0, retain=False, key=None, props=None):
        """Queue a PUBLISH in conn.tx (QoS 1/2: stored first). Returns the
        packet id, 0 for QoS 0."""
        pid = 0
        if qos:
            if self.store.out_count() >= self.window:
                raise Busy("busy", 0x97)
            pid = self.new_pid()
        start = conn.tlen
        end = encode_publish(conn.tx, start, topic, msg, qos, pid, retain, False,
                             self.level, props)
        if self.max_packet and end - start > self.max_packet:
            # never sent to a server that would close on it [MQTT-3.2.2-15]
            raise MQTTError("too large", 0x95)
        if len(conn.tx) - end < _RESERVE:
            # the last bytes are for acks and PINGREQ, which must always fit;
            # nothing is stored or queued yet
            if start:
                raise Busy("busy", 0x97)
            raise MQTTError("too large", 0x95)
        if qos:
            send_stored(self.store, conn, start, end, pid, key)
        else:
            conn.tlen = end
        return pid

    def on_publish(self, conn, pkt):
        """An inbound PUBLISH: hand it to the application once, answer it."""
        q = pkt.qos
        pid = pkt.pid  # read first: the callback may reuse the packet
        if q == 2:
            st = self.store
            if not st.in_has(pid):
                st.in_add(pid, pkt.buf, 0, pkt.end)  # durable before PUBREC
                try:
                    self.app.deliver(pkt, False)
                except Exception:
                    # the application did not take it: forget it, send no
                    # PUBREC, so the sender's resend delivers it again
                    st.in_del(pid)
                    raise
                st.in_done(pid)
            # a known id: PUBREC again, no second delivery [MQTT-4.3.3-2]
            conn.tlen = encode_ack(conn.tx, conn.tlen, _PUBREC, pid)
            return
        self.app.deliver(pkt, False)  # raising here sends no PUBACK either
        if q:
            conn.tlen = encode_ack(conn.tx, conn.tlen, _PUBACK, pid)

    def on_ack(self, conn, pkt):
        """PUBACK, PUBREC, PUBREL or PUBCOMP."""
        t = pkt.type
        pid = pkt.pid
        st = self.store
        if t == _PUBREL:
            st.in_del(pid)  # removed durably before PUBCOMP
            # unknown ids are answered too, so the sender can finish
            conn.tlen = encode_ack(conn.tx, conn.tlen, _PUBCOMP, pid)
        elif t == _PUBREC and pkt.rc < 0x80:
            if st.out_has(pid) and st.out_rel(pid):
                return  # recorded; the store sends PUBREL in its order
            # recorded before PUBREL [MQTT-4.3.3-1]
            conn.tlen = encode_ack(conn.tx, conn.tlen, _PUBREL, pid)
        elif st.out_has(pid):
            # PUBACK, PUBCOMP, or a v5 PUBREC refusing the message
            st.out_del(pid)
            self.last_done = pid
