"""The nodes' own time (firmware/node.py): readings carry "t" once the RTC
is known, in a form the pipeline's fast parser reads; without a known time
they carry none and stay valid."""
import json

import pytest

from tools.desktop import sim
from umqtt3_pipeline.telemetry import parse

fw_node = sim.fw_node


@pytest.mark.parametrize("value,t", [(21.5, 1767225600), (-3, None), (0.125, 1767225601)])
def test_readings_parse_fast_and_as_json(value, t):
    msg = fw_node.reading(value, 4711, 9, t).encode()
    d = json.loads(msg)
    assert ("t" in d) == (t is not None)
    assert parse(b"umqtt3/n1/temp", msg) == ("n1", "temp", float(fw_node.fmt(value)), 4711, 9,
                                             None if t is None else float(t))
    # the fast path took it: the exact format, no json needed
    assert msg == ('{"v":%s,"boot":4711,"seq":9%s}'
                   % (fw_node.fmt(value), "" if t is None else ',"t":%d' % t)).encode()


class FakeTime:
    """time with a settable clock and epoch (2000 on ESP32 and older RP2040)."""

    def __init__(self, now, epoch_year):
        self.now = now
        self.year = epoch_year

    def time(self):
        return self.now

    def gmtime(self, secs):
        return (self.year, 1, 1, 0, 0, 0, 0, 1)


def test_unix_time_from_either_epoch_and_none_before_it_is_set(monkeypatch):
    import sys
    unix = 1767225600  # 2026-01-01
    monkeypatch.setitem(sys.modules, "time", FakeTime(unix, 1970))
    assert fw_node.unix_time() == unix
    monkeypatch.setitem(sys.modules, "time", FakeTime(unix - fw_node.EPOCH_2000 + 0.9, 2000))
    assert fw_node.unix_time() == unix
    # an RTC never set: it reads 2000 (ESP32) or 2021 (RP2040)
    monkeypatch.setitem(sys.modules, "time", FakeTime(5, 2000))
    assert fw_node.unix_time() is None
    monkeypatch.setitem(sys.modules, "time", FakeTime(1609459200, 1970))
    assert fw_node.unix_time() is None


def test_sync_clock_says_when_ntp_does_not_answer(monkeypatch):
    import ntptime  # the desktop stand-in, loaded by tools.desktop.sim
    monkeypatch.delenv("NTP_FAIL", raising=False)
    assert fw_node.sync_clock("ntp.example") is True
    assert ntptime.host == "ntp.example"
    monkeypatch.setenv("NTP_FAIL", "1")
    assert fw_node.sync_clock() is False


def test_a_node_without_time_sends_readings_without_t(monkeypatch):
    # the node's publish path: "t" from unix_time(), left out when unknown
    sent = []

    class Client:
        def accepted(self, key):
            return False

        def is_connected(self):
            return True

        def publish(self, topic, msg, retain=False, qos=0, key=None, wait=True):  # MQTTClient's
            sent.append((topic, msg))

    n = fw_node.Node.__new__(fw_node.Node)
    n.client, n.cfg, n.seq, n.sent, n.boot, n.base = Client(), {"qos": 1}, 1, 0, 7, "u/n/"
    n.refused, n.skipped = False, 0
    monkeypatch.setattr(fw_node, "unix_time", lambda: None)
    n.publish("temp", 20.5, 0)
    monkeypatch.setattr(fw_node, "unix_time", lambda: 1767225600)
    n.publish("temp", 20.5, 0)
    assert [json.loads(m) for _, m in sent] == [
        {"v": 20.5, "boot": 7, "seq": 1}, {"v": 20.5, "boot": 7, "seq": 2, "t": 1767225600}]
