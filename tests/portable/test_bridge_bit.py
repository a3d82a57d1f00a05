# The bridge bit (try_private, mosquitto's bridge protocol): at 3.1.1 the
# bridge's CONNECT carries the protocol level with its high bit set (0x84);
# an upstream that does not know it answers CONNACK 0x01 [MQTT-3.1.2-2], and
# every later attempt goes without it. Over in-memory pipes to a scripted
# upstream that reads each CONNECT, then hands the link to a Broker; the
# same file under CPython and the WebAssembly MicroPython (the bridge's
# client subclass runs on the gateway). The behaviour against mosquitto is
# tests/test_bridge_private.py's.
from umqtt3.bridge import level_at
from umqtt3.codec import CONNACK, PUBACK
from umqtt3.compat import sleep_ms
from umqtt3.transport import Pipe
from test_bridge import World, _sub


class Gate(World):
    """A gateway whose uplinks the test sees first: each link's CONNECT is
    read (levels), then refused with CONNACK 0x01 when it has the bridge
    bit and refuse is set, else passed to the upstream Broker."""

    def __init__(self, rules, refuse=False, **cfg):
        self.lines = []
        self.levels = []
        self.refuse = refuse
        self.far = []  # the upstream ends not yet looked at
        World.__init__(self, rules, gw_kw={"log": self.lines.append}, **cfg)

    def uplink(self):
        if self.down:
            raise OSError(111)
        a, b = Pipe.pair(4096)
        self.far.append((a, b))
        self.links.append(a)
        return a

    def poll_once(self, t=0):
        n = self.gw.poll_once(0) + self.up.poll_once(0)
        while self.far:
            a, b = self.far[0]
            got = bytearray(512)
            k = b.readinto(got, len(got))
            if not k:
                break  # nothing written yet
            self.far.pop(0)
            assert got[0] == 0x10, got[0]  # CONNECT
            lv = got[level_at(got)]
            self.levels.append(lv)
            if lv & 0x80 and self.refuse:
                b.write(bytes([CONNACK << 4, 2, 0, 1]))  # unacceptable protocol version
            else:
                a.write(got, 0, k)  # as the client wrote it
                self.up.attach(b)
            n += 1
        return n


def _run_until(w, cond, steps=2000):
    for _ in range(steps):
        if cond():
            return True
        w.poll_once()
        sleep_ms(1)
    return cond()


def test_at_311_the_connect_carries_the_bridge_bit():
    w = Gate(["x/# out 1"])
    assert _run_until(w, lambda: w.bridge.up)
    assert w.levels == [0x84]
    assert not w.bridge.echo  # an upstream that took the bit sends nothing back


def test_try_private_false_and_mqtt5_send_the_level_as_it_is():
    for cfg, lv in (({"try_private": False}, 4), ({"level": 5}, 5),
                    ({"level": 5, "try_private": True}, 5)):
        w = Gate(["x/# out 1"], **cfg)
        assert _run_until(w, lambda: w.bridge.up), cfg
        assert w.levels == [lv], (cfg, w.levels)
    assert w.bridge.echo is False  # MQTT 5: No Local per subscription
    w = Gate(["x/# out 1"], try_private=False)
    assert w.bridge.echo is True


def test_a_refused_bit_is_not_sent_again_and_messages_flow():
    w = Gate(["x/# out 1"], refuse=True)
    assert _run_until(w, lambda: w.bridge.up)
    assert w.levels == [0x84, 4]
    said = [s for s in w.lines if "bridge protocol" in s]
    assert said == ["bridge up: the upstream does not take the bridge protocol "
                    "(try_private); connecting as a plain client"], w.lines
    assert not [s for s in w.lines if "refused the connection" in s], w.lines
    assert w.bridge.echo  # a plain 3.1.1 upstream may echo (Hub.route)
    sub = _sub(w, "x/#", 1)
    node = w.open_on(w.gw)
    node.connect("n1")
    node.publish("x/a", b"up", 1, pid=1)
    node.expect(PUBACK, 1)
    w.run(200)
    assert [m[1] for m in sub.messages(1)] == [b"up"]
    # a lost link: the next attempt goes without the bit too
    w.cut()
    w.down = False
    w.run(50)
    assert _run_until(w, lambda: w.bridge.up and len(w.levels) == 3)
    assert w.levels == [0x84, 4, 4]
    assert len([s for s in w.lines if "bridge protocol" in s]) == 1


def test_level_at_reads_past_a_long_remaining_length():
    # a CONNECT of 200 bytes: its Remaining Length takes two bytes
    b = bytearray([0x10, 0xC8, 0x01, 0, 4]) + b"MQTT" + bytes([4])
    assert level_at(b) == 9 and b[level_at(b)] == 4
