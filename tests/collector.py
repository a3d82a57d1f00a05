# A subscriber for the firmware tests: collects what sensor nodes publish
# under <prefix>/# at QoS 1, in a background thread, with one of our clients.
import json
import threading
import time

from umqtt3.client import MQTTClient


class Collector:
    def __init__(self, port, prefix, name="collector"):
        self.prefix = prefix
        self.msgs = []  # (topic, payload) as str
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.c = MQTTClient(name, "127.0.0.1", port, keepalive=10)
        self.c.set_callback(self.on_msg)
        self.c.connect()
        self.c.subscribe(prefix + "/#", 1)
        self.t = threading.Thread(target=self.loop, daemon=True)
        self.t.start()

    def on_msg(self, topic, msg):
        with self.lock:
            self.msgs.append((topic.decode(), msg.decode()))

    def loop(self):
        while not self.stop.is_set():
            self.c.poll(20)

    def close(self):
        self.stop.set()
        self.t.join(5)
        self.c.disconnect()

    def of(self, node):
        """[(metric, payload)] of one node, status included."""
        with self.lock:
            return [(t.split("/")[2], m) for t, m in self.msgs if t.split("/")[1] == node]

    def status(self, node):
        with self.lock:
            return [m for t, m in self.msgs if t == "%s/%s/status" % (self.prefix, node)]

    def readings(self, node, metric=None):
        """[(metric, decoded JSON)] of one node's readings."""
        return [(m, json.loads(p)) for m, p in self.of(node)
                if m != "status" and metric in (None, m)]

    def wait(self, cond, timeout=10):
        end = time.monotonic() + timeout
        while not cond():
            assert time.monotonic() < end, "timed out; got %r" % self.msgs[-10:]
            time.sleep(0.02)
