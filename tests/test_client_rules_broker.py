"""The client's resume against umqtt3's own broker over sockets: the broker
forwards a QoS 2 message when its PUBLISH arrives (docs/broker.md), so a
PUBLISH sent again after PUBREL would reach the subscriber twice."""
import socket
import time

from test_broker_harness import running
from umqtt3.client import MQTTClient
from umqtt3.compat import link as mklink


def test_qos2_past_pubrec_is_not_published_again_after_a_lost_session():
    # The publisher's link dies right after its PUBREL, before PUBCOMP. It
    # reconnects with a clean session (the defaults: session present 0).
    # The sender MUST NOT send the PUBLISH again once it sent the PUBREL
    # [MQTT-4.3.3-1]: the subscriber gets the message once, and the
    # publisher's store is empty.
    with running() as b:
        got = []
        sub = MQTTClient("rules-sub", "127.0.0.1", b.port, timeout_ms=3000)
        sub.set_callback(lambda t, m: got.append(m))
        sub.connect()
        sub.subscribe(b"rules/q2", 2)
        cut = []

        class Cut:
            # the publisher's link: closed right after its first PUBREL
            def __init__(self):
                s = socket.create_connection(("127.0.0.1", b.port))
                s.setblocking(False)
                self.s, self.lk = s, mklink(s)

            def readinto(self, buf, n):
                return 0 if self.s.fileno() < 0 else self.lk.readinto(buf, n)

            def write(self, buf, off=0, n=-1):
                if self.s.fileno() < 0:
                    return 0
                r = self.lk.write(buf, off, n)
                if buf[off] == 0x62 and not cut:
                    cut.append(True)
                    time.sleep(0.05)  # the PUBREL reaches the broker
                    self.s.close()
                return r

            def close(self):
                self.s.close()

        pub = MQTTClient("rules-pub", "127.0.0.1", b.port, connect_link=Cut, reconnect=True,
                         backoff_ms=(20, 40), timeout_ms=3000)
        acks = []
        pub.set_ack_callback(lambda pid, rc: acks.append((pid, rc)))
        try:
            pub.connect()
            pid = pub.publish(b"rules/q2", b"once", qos=2, wait=False)
            end = time.monotonic() + 5
            while time.monotonic() < end and not (got and acks and pub.is_connected()):
                sub.poll(10)
                try:
                    pub.poll(10)
                except OSError:
                    pass
            end = time.monotonic() + 0.5  # a second copy would arrive by now
            while time.monotonic() < end:
                sub.poll(10)
                pub.poll(10)
            assert cut, "the link was not cut at PUBREL"
            assert got == [b"once"], got
            assert acks == [(pid, 0)] and pub.inflight() == 0
        finally:
            pub.reconnect = False
            for c in (sub, pub):
                try:
                    c.disconnect()
                except OSError:
                    pass
