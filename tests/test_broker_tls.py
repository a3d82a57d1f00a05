"""The broker's TLS listener (CPython's ssl; python -m umqtt3.broker
--certfile --keyfile [--cafile --require-certificate]): paho-mqtt and
mosquitto_sub/mosquitto_pub connect over TLS with a self-signed
certificate made at test time (openssl, or the cryptography package);
client certificates required; bad TLS options refused in one line."""
import os
import shutil
import socket
import ssl
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from refusal import run  # noqa: E402
from tools import procs  # noqa: E402
from mosq import LINEBUF, MOSQUITTO_PUB, MOSQUITTO_SUB  # noqa: E402
from certs import openssl  # noqa: E402

paho = pytest.importorskip("paho.mqtt.client")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, the broker's certificate (CN localhost, IP 127.0.0.1) and a
    client certificate, each signed by the CA; keys live in the test's
    temporary directory only."""
    if not shutil.which("openssl"):
        pytest.skip("openssl is not installed")
    d = tmp_path_factory.mktemp("pki")
    f = {k: str(d / k) for k in ("ca.pem", "ca.key", "server.pem", "server.key", "server.csr",
                                  "client.pem", "client.key", "client.csr", "ext")}
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", f["ca.key"], "-out", f["ca.pem"], "-days", "2",
             "-subj", "/CN=umqtt3 test CA")
    with open(f["ext"], "w") as x:
        x.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for who, cn in (("server", "localhost"), ("client", "tls-client")):
        openssl("req", "-new", *ec, "-keyout", f[who + ".key"], "-out", f[who + ".csr"],
                 "-subj", "/CN=" + cn)
        openssl("x509", "-req", "-in", f[who + ".csr"], "-CA", f["ca.pem"], "-CAkey",
                 f["ca.key"], "-CAcreateserial", "-out", f[who + ".pem"], "-days", "2",
                 "-extfile", f["ext"])
    return f


@pytest.fixture
def tls_broker(pki):
    started = []

    def start(*extra):
        port = procs.free_port()
        cmd = procs.umqtt3_broker_cmd(port, "--certfile", pki["server.pem"], "--keyfile",
                                      pki["server.key"], "--quiet", *extra)
        started.append(procs.start(cmd, port, stdout=subprocess.DEVNULL))
        return port
    yield start
    for p in started:
        procs.stop(p)


def _paho(cid, pki, cert=False):
    try:
        c = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=cid)
    except AttributeError:  # paho-mqtt 1.x
        c = paho.Client(client_id=cid)
    c.tls_set(ca_certs=pki["ca.pem"], certfile=pki["client.pem"] if cert else None,
              keyfile=pki["client.key"] if cert else None)
    return c


def _roundtrip(port, pki, cert=False, n=20):
    import threading
    got = []
    subscribed = threading.Event()
    sub = _paho("tls-sub", pki, cert)
    sub.on_message = lambda c, u, m: got.append(m.payload)
    sub.on_subscribe = lambda *a: subscribed.set()
    sub.connect("127.0.0.1", port)
    sub.subscribe("tls/#", 1)
    sub.loop_start()
    pub = _paho("tls-pub", pki, cert)
    pub.connect("127.0.0.1", port)
    pub.loop_start()
    try:
        # published before the broker has the subscription, a message
        # reaches no one: its SUBACK first
        assert subscribed.wait(10), "no SUBACK"
        for i in range(n):
            pub.publish("tls/x", b"secret %d " % i * 200, qos=1).wait_for_publish(5)
        deadline = time.monotonic() + 10
        while len(got) < n and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        for c in (pub, sub):
            c.disconnect()
            c.loop_stop()
    return got


def test_paho_over_tls(tls_broker, pki):
    port = tls_broker()
    got = _roundtrip(port, pki)
    assert got == [b"secret %d " % i * 200 for i in range(20)]


def test_mosquitto_clients_over_tls(tls_broker, pki):
    if not (MOSQUITTO_SUB and MOSQUITTO_PUB):
        pytest.skip("mosquitto clients are not installed")
    port = tls_broker()
    # -d: its debug lines say when the broker has taken the subscription
    # (a message published before then reaches no one); line-buffered
    sub = subprocess.Popen(LINEBUF + [MOSQUITTO_SUB, "-h", "127.0.0.1", "-p", str(port),
                                      "--cafile", pki["ca.pem"], "-t", "m/#", "-C", "3", "-W",
                                      "10", "-q", "1", "-d"],
                           stdout=subprocess.PIPE, text=True)
    try:
        said = []
        for line in sub.stdout:  # until "Subscribed", or its -W 10 ends it
            said.append(line)
            if line.startswith("Subscribed"):
                break
        assert said and said[-1].startswith("Subscribed"), said
        for i in range(3):
            r = subprocess.run([MOSQUITTO_PUB, "-h", "127.0.0.1", "-p", str(port), "--cafile",
                                pki["ca.pem"], "-t", "m/t", "-m", "over tls %d" % i, "-q", "1"],
                               timeout=10)
            assert r.returncode == 0
        out, _ = sub.communicate(timeout=15)
    finally:
        if sub.poll() is None:
            sub.kill()
    assert [x for x in out.splitlines() if not x.startswith("Client ")] == [
        "over tls 0", "over tls 1", "over tls 2"], out


def test_client_certificate_required(tls_broker, pki):
    port = tls_broker("--cafile", pki["ca.pem"], "--require-certificate")
    assert _roundtrip(port, pki, cert=True, n=3) == [b"secret %d " % i * 200 for i in range(3)]
    # without one: the handshake fails (TLS 1.2) or the first read does (1.3)
    ctx = ssl.create_default_context(cafile=pki["ca.pem"])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with pytest.raises((ssl.SSLError, ConnectionResetError)):
            with ctx.wrap_socket(raw, server_hostname="localhost") as t:
                t.sendall(b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x00\x00\x00")
                if t.recv(4) == b"":
                    raise ConnectionResetError("closed without a CONNACK")


def test_plain_client_and_idle_handshakes_do_not_stall_tls(tls_broker, pki):
    # a plain-TCP CONNECT and connections that never finish a handshake:
    # closed or held as pending, while TLS clients go on being served
    port = tls_broker("--max-pending", "8", "--connect-timeout", "1")
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x00\x00\x00")
        assert s.recv(10) == b""  # not TLS: closed, no CONNACK
        s.close()
        got = _roundtrip(port, pki, n=3)
        assert len(got) == 3
    finally:
        for s in idle:
            s.close()


@pytest.mark.parametrize("args, words", [
    (["--certfile", "C"], "--keyfile"),
    (["--keyfile", "K"], "--keyfile"),
    (["--certfile", "/nonexistent/cert.pem", "--keyfile", "K"], "/nonexistent/cert.pem"),
    (["--certfile", "C", "--keyfile", "C"], "--certfile"),
    (["--certfile", "C", "--keyfile", "K", "--require-certificate"], "--cafile"),
])
def test_tls_options_refused_in_one_line(pki, args, words):
    args = [pki["server.pem"] if a == "C" else pki["server.key"] if a == "K" else a
            for a in args]
    r = run("umqtt3.broker", "--port", "0", *args)
    assert "Traceback" not in r.stderr and r.returncode == 1, r.stderr
    assert r.stderr.count("\n") == 1 and words in r.stderr, r.stderr
