# What a sensor node does not call stays unloaded: client_more.py
# (unsubscribe, disconnect, the hooks, the store's questions) is imported by
# the first use of one of its names, and put into the client's class then. Each check runs in
# a fresh interpreter, as a device starts, against the scripted in-memory
# peer of tests/portable/test_client_mem.py.
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SETUP = """
import sys
from test_client_mem import Peer, _client, Inbox
peer = Peer()
c = _client(peer, keepalive=60)
box = Inbox()
c.set_callback(box.cb)
c.set_last_will(b"a/will", b"gone", True, 1)  # (the core's: set before a first connect)
c.connect()
c.subscribe(b"a/b", 1)
c.publish(b"a/b", b"21.5", qos=1)
c.check_msg()
peer.publish(b"a/b", b"22.0", 0)
c.wait_msg()
c.ping()
"""


def run(code):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.join(REPO, "lib"), os.path.join(REPO, "tests", "portable")]))
    p = subprocess.run([sys.executable, "-c", SETUP + code], capture_output=True, text=True,
                       env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout.split()


def test_will_connect_subscribe_publish_receive_ping_leave_it_unloaded():
    assert run("print('umqtt3.client_more' in sys.modules, len(box.msgs))") == ["False", "1"]


def test_a_seldom_call_loads_it_once_and_works():
    got = run("""
done = []
c.set_ack_callback(lambda pid, rc: done.append((pid, rc)))
from umqtt3.client import MQTTClient
print('umqtt3.client_more' in sys.modules, 'set_ack_callback' in vars(MQTTClient))
c.publish(b"a/b", b"22.5", qos=1)
print(done, c.inflight(), c.accepted(5))
c.unsubscribe(b"a/b")
c.disconnect()
peer.step()
print(c.is_connected())
""")
    assert got == ["True", "True", "[(3,", "0)]", "0", "False", "False"]


def test_other_names_are_attribute_errors():
    got = run("""
for name in ("no_such_call", "_private", "__wrapped__"):
    try:
        getattr(c, name)
    except AttributeError:
        print("AttributeError")
print(getattr(c, "nothing_here", 7), 'umqtt3.client_more' in sys.modules)
""")
    # a private or dunder name is refused before client_more is imported
    assert got == ["AttributeError"] * 3 + ["7", "True"]
