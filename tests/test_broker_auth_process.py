# The broker as a process with --store and --users, restarted: a persistent
# session's client id stays its user's (the record keeps the user name and
# start-up restores the owner from it). Bob's CONNECT with alice's restored
# id is refused (CONNACK 5 at 3.1.1, 0x87 at 5.0 [MQTT-3.1.4-2 (5.0)], with
# session present 0 [MQTT-3.2.2-4] [MQTT-3.2.2-6 (5.0)]), and the message
# queued for her while she was away still reaches her when she comes back
# [MQTT-3.1.2-4] [MQTT-4.4.0-1]. Alice is a paho client; bob speaks bytes so
# that the test reads his CONNACK as it is.
import socket

import pytest

from tools import procs
from umqtt3.codec import encode_connect
from umqtt3 import props as P

mqtt = pytest.importorskip("paho.mqtt.client")
TIMEOUT = 10


def _connack(port, cid, user, pw, level):
    """The return / reason code of a CONNECT with clean session 0 (or a
    session expiry at 5.0), and its session present flag."""
    buf = bytearray(256)
    props = {P.SESSION_EXPIRY: 600} if level == 5 else None
    n = encode_connect(buf, 0, cid, level, False, 30, user=user, password=pw, props=props)
    with socket.create_connection(("127.0.0.1", port), TIMEOUT) as s:
        s.sendall(bytes(buf[:n]))
        got = b""
        while len(got) < 4:
            b = s.recv(64)
            if not b:
                break
            got += b
    assert got[:1] == b"\x20", got
    return got[3], got[2] & 1


def _alice(port, cid, protocol, sub=None):
    """alice's paho client on cid with a persistent session: subscribes to
    sub, or collects what comes for 0.5 s; (session present, messages)."""
    import queue
    import threading
    import time
    v5 = protocol == mqtt.MQTTv5
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=cid, protocol=protocol,
                    **({} if v5 else {"clean_session": False}))
    c.username_pw_set("alice", "alicepw")
    q = queue.Queue()
    up = threading.Event()
    acked = threading.Event()
    state = {}

    def on_connect(cl, u, f, rc, p):
        state["present"] = f.session_present
        state["rc"] = int(rc.value)
        up.set()
    c.on_connect = on_connect
    c.on_message = lambda cl, u, m: q.put((m.topic, bytes(m.payload)))
    c.on_subscribe = lambda cl, u, mid, codes, p: acked.set()
    kw = {}
    if v5:
        from paho.mqtt.properties import Properties
        from paho.mqtt.packettypes import PacketTypes
        pr = Properties(PacketTypes.CONNECT)
        pr.SessionExpiryInterval = 600
        kw = {"clean_start": False, "properties": pr}
    c.connect("127.0.0.1", port, 30, **kw)
    c.loop_start()
    try:
        assert up.wait(TIMEOUT), "no CONNACK"
        assert state["rc"] == 0
        if sub is not None:
            c.subscribe(sub, 1)
            assert acked.wait(TIMEOUT), "no SUBACK"
        time.sleep(0.5)
        out = []
        while not q.empty():
            out.append(q.get())
        return state["present"], out
    finally:
        c.disconnect()
        c.loop_stop()


def _publish(port, topic):
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="w",
                    protocol=mqtt.MQTTv311)
    c.username_pw_set("w", "wpw")
    c.connect("127.0.0.1", port, 30)
    c.loop_start()
    try:
        c.publish(topic, b"away", 1).wait_for_publish(TIMEOUT)
    finally:
        c.disconnect()
        c.loop_stop()


def test_restored_session_id_is_refused_to_another_user(tmp_path):
    pw = tmp_path / "passwd"
    pw.write_text("alice:alicepw\nbob:bobpw\nw:wpw\n")
    port = procs.free_port()
    args = procs.umqtt3_broker_cmd(port, "--users", str(pw), "--store",
                                   str(tmp_path / "store"), "--quiet")
    p = procs.start(args, port)
    try:
        assert _alice(port, "a", mqtt.MQTTv311, "t/#") == (False, [])
        assert _alice(port, "a5", mqtt.MQTTv5, "t/#") == (False, [])
        procs.stop(p)
        p = procs.start(args, port)
        _publish(port, "t/x")
        # bob cannot take alice's restored sessions over
        assert _connack(port, "a", "bob", "bobpw", 4) == (5, 0)
        assert _connack(port, "a5", "bob", "bobpw", 5) == (0x87, 0)
        # a restart in between changes nothing
        procs.stop(p)
        p = procs.start(args, port)
        assert _connack(port, "a", "bob", "bobpw", 4) == (5, 0)
        # and alice still gets what was queued for her
        assert _alice(port, "a", mqtt.MQTTv311) == (True, [("t/x", b"away")])
        assert _alice(port, "a5", mqtt.MQTTv5) == (True, [("t/x", b"away")])
    finally:
        procs.stop(p)
