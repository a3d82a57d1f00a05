"""paho-mqtt peers that several interop tests share.

    r = responder(port, "req/topic", "client-id")  # answers MQTT 5 requests
    ...; r.disconnect(); r.loop_stop()
    w = Watch(port, "site/#")  # an MQTT 5 subscriber: w.take(n), w.close()
    publish(port, "t", b"x", CorrelationData=b"1")  # one MQTT 5 message, acked
"""
import queue
import time

HOST = "127.0.0.1"


def responder(port, topic, client_id):
    """A paho MQTT 5 client that answers each request on topic with
    b"answer to " + its payload, on the request's Response Topic, with its
    Correlation Data copied [MQTT-4.10.0-1]. Started and subscribed."""
    import paho.mqtt.client as mqtt
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties
    r = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5)

    def on_message(cl, u, m):
        out = Properties(PacketTypes.PUBLISH)
        out.CorrelationData = m.properties.CorrelationData
        cl.publish(m.properties.ResponseTopic, b"answer to " + m.payload, qos=1,
                   properties=out)

    import threading
    subscribed = threading.Event()
    r.on_message = on_message
    r.on_subscribe = lambda *a: subscribed.set()
    r.connect(HOST, port)
    r.loop_start()
    r.subscribe(topic, qos=1)
    # no request before its SUBACK: one sent earlier reaches no one
    assert subscribed.wait(10), "the responder did not subscribe"
    return r


def publish(port, topic, payload, qos=1, **props):
    """One MQTT 5 message from paho: connect, publish, wait for its ack,
    disconnect. props: paho's property names, e.g. CorrelationData=b"1"."""
    import paho.mqtt.client as mqtt
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties
    pr = Properties(PacketTypes.PUBLISH)
    for k, v in props.items():
        setattr(pr, k, v)
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
    c.connect(HOST, port)
    c.loop_start()
    try:
        c.publish(topic, payload, qos=qos, properties=pr).wait_for_publish(10)
    finally:
        c.disconnect()
        c.loop_stop()


class Watch:
    """A paho MQTT 5 subscriber to topic at QoS 2 (what the broker grants),
    subscribed before the constructor returns; take(n) the (topic, payload,
    qos, retain) of what came. session_expiry: a persistent session (and
    paho reconnecting quickly), so that what the broker takes while it is
    away waits for it."""

    def __init__(self, port, topic="site/#", client_id=None, session_expiry=None):
        import paho.mqtt.client as mqtt
        self.got = queue.Queue()
        self.ready = False
        c = self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2,
                                 client_id=client_id or "watch%d" % port, protocol=mqtt.MQTTv5)
        c.on_connect = lambda c, u, f, rc, p: c.subscribe(topic, 2)
        c.on_subscribe = lambda *a: setattr(self, "ready", True)
        c.on_message = lambda c, u, m: self.got.put((m.topic, bytes(m.payload), m.qos,
                                                     m.retain))
        props = None
        if session_expiry is not None:
            from paho.mqtt.properties import Properties
            from paho.mqtt.packettypes import PacketTypes
            c.reconnect_delay_set(0.1, 0.5)
            props = Properties(PacketTypes.CONNECT)
            props.SessionExpiryInterval = session_expiry
        c.connect(HOST, port, keepalive=10, clean_start=session_expiry is None, properties=props)
        c.loop_start()
        self.wait()

    def wait(self):
        end = time.monotonic() + 10
        while not self.ready and time.monotonic() < end:
            time.sleep(0.01)
        assert self.ready, "the watcher did not subscribe"

    def take(self, n, seconds=20):
        out = []
        end = time.monotonic() + seconds
        while len(out) < n and time.monotonic() < end:
            try:
                out.append(self.got.get(timeout=0.1))
            except queue.Empty:
                pass
        return out

    def close(self):
        self.c.disconnect()
        self.c.loop_stop()
