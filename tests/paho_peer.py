"""paho-mqtt peers that several interop tests share.

    r = responder(port, "req/topic", "client-id")  # answers MQTT 5 requests
    ...; r.disconnect(); r.loop_stop()
"""
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

    r.on_message = on_message
    r.connect(HOST, port)
    r.loop_start()
    r.subscribe(topic, qos=1)
    time.sleep(0.3)  # (its SUBACK: no request before it)
    return r
