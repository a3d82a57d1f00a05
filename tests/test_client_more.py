# What a sensor node does not call stays unloaded on MicroPython:
# client_more.py (unsubscribe, disconnect, the hooks, the store's questions)
# is imported by the first use of one of its names, and put into the
# client's class then. On CPython its functions are the class's methods from
# import on (a class with __getattr__ reads every attribute the slow way).
# Each check runs in a fresh interpreter, as a device starts, against the
# scripted in-memory peer of tests/portable/test_client_mem.py: the
# WebAssembly MicroPython (tests/mp/run.mjs) and CPython.
import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_MJS = os.path.join(REPO, "tests", "mp", "run.mjs")
WASM = os.path.join(REPO, "node_modules", "@micropython", "micropython-webassembly-pyscript",
                    "micropython.mjs")

SETUP = """
import sys
from test_client_mem import Peer, _client, Inbox
from umqtt3.client import MQTTClient
from umqtt3.client_core import Core
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
print('umqtt3.client_more' in sys.modules, len(box.msgs))
"""

SELDOM = """
done = []
c.set_ack_callback(lambda pid, rc: done.append((pid, rc)))
print('umqtt3.client_more' in sys.modules, 'set_ack_callback' in dir(MQTTClient))
c.publish(b"a/b", b"22.5", qos=1)
print(done, c.inflight(), c.accepted(5))
c.unsubscribe(b"a/b")
c.disconnect()
peer.step()
print(c.is_connected())
"""

OTHERS = """
# (client_more's own imports and helper are not the client's: only its
# Core's methods are)
for name in ("no_such_call", "_private", "__wrapped__", "ticks_ms", "mqtt5", "MQTTError",
             "dial", "Core"):
    try:
        getattr(c, name)
    except AttributeError:
        print("AttributeError")
print(getattr(c, "nothing_here", 7))
"""


def micropython(code, tmp_path):
    if not shutil.which("node") or not os.path.isfile(WASM):
        pytest.skip("the WebAssembly MicroPython is not installed (npm ci)")
    script = tmp_path / "probe.py"
    script.write_text(SETUP + code)
    p = subprocess.run(["node", RUN_MJS, "--heap", "2m", "--no-shared", str(script)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout.split()


def cpython(code):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.join(REPO, "lib"), os.path.join(REPO, "tests", "portable")]))
    p = subprocess.run([sys.executable, "-c", SETUP + code], capture_output=True, text=True,
                       env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout.split()


def test_micropython_a_node_that_sets_a_will_subscribes_publishes_receives_pings_never_loads_it(
        tmp_path):
    assert micropython("", tmp_path) == ["False", "1"]


def test_micropython_a_seldom_call_loads_it_once_and_works(tmp_path):
    got = micropython(SELDOM, tmp_path)
    assert got == ["False", "1", "True", "True", "[(3,", "0)]", "0", "False", "False"]


def test_micropython_other_names_are_attribute_errors(tmp_path):
    got = micropython(OTHERS, tmp_path)
    assert got == ["False", "1"] + ["AttributeError"] * 8 + ["7"]


def test_cpython_has_them_as_methods_from_the_start_without_getattr():
    got = cpython(SELDOM + "print('__getattr__' in vars(Core), 'disconnect' in vars(Core))\n")
    assert got == ["True", "1", "True", "True", "[(3,", "0)]", "0", "False", "False",
                   "False", "True"]
    assert cpython(OTHERS) == ["True", "1"] + ["AttributeError"] * 8 + ["7"]
