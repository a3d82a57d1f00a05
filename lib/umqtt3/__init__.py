# umqtt3 -- MQTT 3.1/3.1.1/5.0 for MicroPython and CPython.
# Import what you use: `from umqtt3.client import MQTTClient`, `umqtt3.codec`,
# `umqtt3.broker`. This file stays empty so importing one part loads no other.
