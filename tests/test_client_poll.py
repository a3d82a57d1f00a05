"""poll(timeout) must wait when there is nothing to do, even after a send
once stalled (a socket left registered for POLLOUT is always writable and
would end every poll at once: a busy loop on a battery-powered node)."""
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))

from umqtt3.client import MQTTClient  # noqa: E402


def test_poll_waits_after_a_stalled_send_drained():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    drain = threading.Event()
    drained = threading.Event()

    def server():
        s, _ = srv.accept()
        s.recv(100)  # CONNECT
        s.sendall(b"\x20\x02\x00\x00")  # CONNACK
        drain.wait(10)
        s.settimeout(0.3)
        try:
            while s.recv(65536):
                pass
        except socket.timeout:
            pass
        drained.set()
        time.sleep(3)
        s.close()

    threading.Thread(target=server, daemon=True).start()
    c = MQTTClient("poller", "127.0.0.1", port=port, bufsize=60000, timeout_ms=3000)
    c.connect()
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    for _ in range(200):  # the server does not read: the socket fills
        c.publish(b"t", b"x" * 20000)
        if c.conn.tlen:
            break
    assert c.conn.tlen, "the send never stalled"
    drain.set()
    end = time.monotonic() + 10
    from umqtt3.flow import Busy
    while c.conn.tlen and time.monotonic() < end:
        try:
            c.publish(b"t", b"small")  # publish's own flush drains the buffer
        except Busy:
            time.sleep(0.01)
    assert c.conn.tlen == 0
    t = time.monotonic()
    calls = 0
    while time.monotonic() - t < 0.5:
        c.poll(200)
        calls += 1
    assert calls <= 5, "poll(200) returned %d times in 0.5 s: it does not wait" % calls
    srv.close()
