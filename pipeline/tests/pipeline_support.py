"""Shared pieces of the pipeline tests: our broker as a subprocess on a free
loopback port, a publisher that sends firmware-format readings, and the one
Spark session (local[2], UI off, 2 shuffle partitions)."""
import json
import os
import subprocess
import time

import pytest

from tools import procs
from umqtt3_pipeline.job import spark_missing


class Broker:
    """python -m umqtt3.broker on 127.0.0.1; restartable on the same port
    and store directory."""

    def __init__(self, store=None, port=None, max_queued=60000, args=()):
        self.port = port or procs.free_port()
        self.store = store
        self.max_queued = max_queued
        self.args = list(args)  # more of the broker's options
        self.proc = None

    def start(self):
        cmd = procs.umqtt3_broker_cmd(self.port, "--max-queued", str(self.max_queued), *self.args)
        if self.store:
            cmd += ["--store", str(self.store)]
        self.proc = procs.start(cmd, self.port, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        return self

    def stop(self):
        procs.stop(self.proc)  # SIGTERM: saves the store, closes every connection
        self.proc = None


@pytest.fixture
def umqtt3_broker(tmp_path):
    b = Broker(store=tmp_path / "broker-store").start()
    yield b
    b.stop()


def reading(node, metric, v, boot, seq, t=None, prefix="umqtt3"):
    """(topic, payload) as firmware/node.py sends them; t: the reading's time."""
    d = {"v": v, "boot": boot, "seq": seq}
    if t is not None:
        d["t"] = t
    return (("%s/%s/%s" % (prefix, node, metric)).encode(),
            json.dumps(d, separators=(",", ":")).encode())  # compact, as the firmware's


def publisher(port, client_id, qos=1):
    """A connected umqtt3 client with a persistent session that reconnects."""
    from umqtt3.client import MQTTClient
    c = MQTTClient(client_id, "127.0.0.1", port, keepalive=10, reconnect=True,
                   backoff_ms=(100, 1000), window=16)
    c.connect(clean_session=False)
    return c


def publish_all(c, msgs, qos=1, timeout=60):
    """Publish every (topic, payload), keeping the window full; returns once
    the broker acknowledged them all."""
    from umqtt3.flow import Busy, StoreFull
    end = time.monotonic() + timeout
    for topic, payload in msgs:
        while True:
            try:
                c.publish(topic, payload, qos=qos, wait=False)
                break
            except (Busy, StoreFull):  # window or store pool full: acks free them
                c.poll(5)
            if time.monotonic() > end:
                raise TimeoutError("broker did not take the messages")
    while c.inflight():
        c.poll(5)
        if time.monotonic() > end:
            raise TimeoutError("broker did not acknowledge the messages")


def have_spark():
    """Why Spark cannot run here, or None."""
    return spark_missing()


def spark_session():
    """The tests' one SparkSession (built once, stopped at exit)."""
    why = have_spark()
    if why:
        pytest.skip(why)
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from umqtt3_pipeline.job import session
    spark = session("local[2]", app="umqtt3-tests", conf={
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.streaming.stateStore.maintenanceInterval": "1s",
    })
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def wait_for(pred, timeout, what, step=0.2):
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(step)
