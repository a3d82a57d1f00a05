"""TLS to the broker (--cafile, --capath, --tls, --cert/--key,
--key-password-file, --tls-alpn; the source's options cafile, capath, tls,
certfile, keyfile, keyPasswordFile, alpn) against mosquitto's TLS listener,
with certificates openssl makes at test time: readings reach the log over
TLS; a broker whose certificate is not signed by the CA given, or is for
another name, is refused in one line; a broker that requires a client
certificate takes the ingest with --cert/--key (an encrypted key with its
passphrase in a file) and refuses it without; a broker that does not agree
on the ALPN protocol offered is refused in one line (a Python TLS front that
picks by ALPN, relaying to mosquitto: mosquitto's listener selects none);
options that cannot be used are refused in one line with exit status 2.
No Spark."""
import os
import select
import shutil
import socket
import ssl
import subprocess
import sys
import threading

import pytest

from mosq import MOSQUITTO, Broker as Mosquitto  # tests/mosq.py
from pipeline_support import publish_all, reading, wait_for
from refusal import refused  # tests/refusal.py
from tools import procs
from certs import openssl  # tests/certs.py

pytestmark = pytest.mark.skipif(not MOSQUITTO, reason="no mosquitto")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """Two CAs ("ca", "other"); signed by ca: the broker's certificate for
    127.0.0.1 and localhost ("server"), one for another name ("elsewhere"),
    the ingest's client certificate ("client"); signed by other: a client
    certificate the broker does not trust ("stranger"). Keys only in the
    test's temporary directory."""
    if not shutil.which("openssl"):
        pytest.skip("openssl is not installed")
    d = tmp_path_factory.mktemp("pki")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    f = {}
    for ca in ("ca", "other"):
        f[ca], f[ca + ".key"] = str(d / (ca + ".pem")), str(d / (ca + ".key"))
        openssl("req", "-x509", *ec, "-keyout", f[ca + ".key"], "-out", f[ca], "-days", "2",
                 "-subj", "/CN=umqtt3 test %s" % ca)
    for who, ca, names in (("server", "ca", "IP:127.0.0.1,DNS:localhost"),
                           ("elsewhere", "ca", "DNS:elsewhere.example"),
                           ("client", "ca", "DNS:ingest"), ("stranger", "other", "DNS:ingest")):
        ext = d / (who + ".ext")
        ext.write_text("subjectAltName=%s\n" % names)
        f[who], f[who + ".key"] = str(d / (who + ".pem")), str(d / (who + ".key"))
        openssl("req", "-new", *ec, "-keyout", f[who + ".key"], "-out", str(d / (who + ".csr")),
                 "-subj", "/CN=" + who)
        openssl("x509", "-req", "-in", str(d / (who + ".csr")), "-CA", f[ca], "-CAkey",
                 f[ca + ".key"], "-CAcreateserial", "-out", f[who], "-days", "2",
                 "-extfile", str(ext))
    # --capath: a directory of each CA, hashed as OpenSSL looks them up, and
    # one whose certificate is not hashed
    for name, ca, hashed in (("capath", "ca", True), ("capath.other", "other", True),
                             ("capath.unhashed", "ca", False)):
        f[name] = str(d / name)
        os.mkdir(f[name])
        shutil.copy(f[ca], f[name])
        if hashed:
            openssl("rehash", f[name])
    # the client's key encrypted, its passphrase in a file (a space in it:
    # the whole first line counts), and a wrong one
    f["client.locked"] = str(d / "client.locked.key")
    f["passphrase"], f["wrong"] = str(d / "passphrase"), str(d / "wrong")
    openssl("pkey", "-in", f["client.key"], "-aes256", "-passout", "pass:s3cret phrase",
            "-out", f["client.locked"])
    with open(f["passphrase"], "w") as p:
        p.write("s3cret phrase\n")
    with open(f["wrong"], "w") as p:
        p.write("s3cret\n")
    return f


@pytest.fixture
def tls_mosquitto(tmp_path, pki):
    """start(cert="server", require=False): mosquitto on a TLS listener
    with that certificate (None: a plain listener); require: it wants a
    client certificate signed by the CA. Returns its port."""
    started = []

    def start(cert="server", require=False):
        extra = ["cafile %s" % pki["ca"], "require_certificate true"] if require else []
        b = Mosquitto(tmp_path / ("mosquitto%d" % len(started)),
                      tls=cert and (pki[cert], pki[cert + ".key"]), extra=extra)
        started.append(b)
        return b.start().port
    yield start
    for b in started:
        b.stop()


def _ingest(tmp_path, port, *tls, env=None):
    return subprocess.Popen([sys.executable, "-m", "umqtt3_pipeline.ingest", "--log",
                             str(tmp_path / "log"), "--broker", "127.0.0.1:%d" % port]
                            + list(tls), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(procs.python_env(), **(env or {})))


def _ready(p, timeout=20):
    """The ingest's first line, "ready" once it is connected and subscribed;
    what it said instead when it did not say that within timeout."""
    import select
    if select.select([p.stdout], [], [], timeout)[0]:
        line = p.stdout.readline().strip()
        if line == "ready":
            return line
    procs.stop(p, 5)
    return p.stderr.read() or "nothing within %d s" % timeout


def _logged(path):
    from umqtt3_pipeline import log as L
    at = L.first(path)
    return [] if at is None else [(m[5], m[6]) for m in L.read_range(path, at[0], at[1])]


def _publish_over_tls(port, pki, msgs, cert=None, plain=False):
    from umqtt3.client import MQTTClient
    from umqtt3_pipeline.tls import context
    ctx = None if plain else context(pki["ca"], certfile=cert and pki[cert],
                                     keyfile=cert and pki[cert + ".key"])
    c = MQTTClient("tls-node", "127.0.0.1", port, keepalive=10, ssl=ctx)
    c.connect()
    try:
        publish_all(c, msgs)
    finally:
        c.disconnect()


def _readings_reach_the_log(tmp_path, port, pki, *tls, cert=None, env=None, plain_to=None):
    """plain_to: publish to mosquitto's plain listener on that port instead
    of port (the ALPN front's)."""
    p = _ingest(tmp_path, port, *tls, env=env)
    try:
        assert _ready(p) == "ready"
        msgs = [reading("n%d" % (i % 3), "temp", 20 + i, 7, i) for i in range(60)]
        _publish_over_tls(plain_to or port, pki, msgs, cert, plain=bool(plain_to))
        wait_for(lambda: len(_logged(str(tmp_path / "log"))) >= len(msgs), 20,
                 "the readings in the log")
    finally:
        procs.stop(p, 5)
    assert _logged(str(tmp_path / "log")) == msgs
    assert p.returncode == 0, p.stderr.read()


def test_readings_reach_the_log_over_tls(tmp_path, pki, tls_mosquitto):
    port = tls_mosquitto()
    _readings_reach_the_log(tmp_path / "a", port, pki, "--cafile", pki["ca"])
    # --tls: the system's CAs, which OpenSSL takes from SSL_CERT_FILE when set
    _readings_reach_the_log(tmp_path / "b", port, pki, "--tls", env={"SSL_CERT_FILE": pki["ca"]})


@pytest.mark.parametrize("module", ["umqtt3_pipeline.ingest", "umqtt3_pipeline.job"])
def test_a_broker_the_ca_does_not_vouch_for_is_refused_in_one_line(tmp_path, pki, tls_mosquitto,
                                                                    module):
    port, other_name = tls_mosquitto(), tls_mosquitto("elsewhere")
    args = ["--log", str(tmp_path / "log")]
    if module.endswith("job"):
        args += ["--out", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "ck")]
    at = "the broker at 127.0.0.1:%d" % port
    err = refused(module, args + ["--broker", "127.0.0.1:%d" % port, "--cafile", pki["other"]],
                  at + " failed the TLS handshake: unknown CA", status=1)
    assert "(unable to get local issuer certificate; --cafile, --capath, --tls)" in err, err
    # a --capath of another CA
    refused(module, args + ["--broker", "127.0.0.1:%d" % port, "--capath", pki["capath.other"]],
            at + " failed the TLS handshake: unknown CA", status=1)
    # the system's CAs do not know ours either
    refused(module, args + ["--broker", "127.0.0.1:%d" % port, "--tls"],
            at + " failed the TLS handshake: unknown CA", status=1)
    # no TLS option for a TLS port: said, not tried for ever
    refused(module, args + ["--broker", "127.0.0.1:%d" % port],
            at + " speaks TLS on that port: give --cafile FILE, --capath DIR or --tls",
            status=1)
    refused(module, args + ["--broker", "127.0.0.1:%d" % other_name, "--cafile", pki["ca"]],
                  "the broker at 127.0.0.1:%d failed the TLS handshake: name mismatch: its "
                  "certificate is not for 127.0.0.1" % other_name, status=1)


def test_a_client_certificate_the_broker_requires(tmp_path, pki, tls_mosquitto):
    port = tls_mosquitto(require=True)
    at = "the broker at 127.0.0.1:%d" % port
    job = ["--log", str(tmp_path / "log"), "--out", str(tmp_path / "out"), "--checkpoint",
           str(tmp_path / "ck"), "--broker", "127.0.0.1:%d" % port]
    for module, args in (("umqtt3_pipeline.ingest", job[:2] + job[-2:]),
                         ("umqtt3_pipeline.job", job)):
        refused(module, args + ["--cafile", pki["ca"]],
                at + " refused the TLS connection: it wants a client certificate (", status=1)
        refused(module, args + ["--cafile", pki["ca"], "--cert", pki["stranger"],
                                "--key", pki["stranger.key"]],
                at + " refused the TLS connection: it did not take our client certificate (",
                status=1)
    _readings_reach_the_log(tmp_path, port, pki, "--cafile", pki["ca"], "--cert", pki["client"],
                            "--key", pki["client.key"], cert="client")


def _tls_refusals(pki, tmp_path):
    d = str(tmp_path)
    ext = os.path.join(os.path.dirname(pki["ca"]), "server.ext")  # a file, but no PEM
    return [
        (["--cafile", d + "/none.pem"], "--cafile %s/none.pem: No such file or directory" % d),
        (["--cafile", d], "--cafile %s: Is a directory" % d),
        (["--cafile", ext], "--cafile %s: no CA certificate in it" % ext),
        (["--cafile", pki["ca"], "--cert", pki["client"]],
         "--cert and --key go together: --cert without --key"),
        (["--cafile", pki["ca"], "--key", pki["client.key"]],
         "--cert and --key go together: --key without --cert"),
        (["--cafile", pki["ca"], "--cert", pki["client"], "--key", pki["server.key"]],
         "--key %s is not the key of --cert %s" % (pki["server.key"], pki["client"])),
        (["--cafile", pki["ca"], "--cert", pki["client"], "--key", d + "/none.key"],
         "--key %s/none.key: No such file or directory" % d),
        (["--cert", pki["client"], "--key", pki["client.key"]],
         "--cert and --key need TLS: --cafile, --capath or --tls"),
        (["--cafile", pki["ca"], "--tls"], "--cafile and --tls: one or the other"),
        (["--capath", d + "/none"], "--capath %s/none: No such file or directory" % d),
        (["--capath", pki["ca"]], "--capath %s: Not a directory" % pki["ca"]),
        (["--capath", pki["capath.unhashed"]],
         "--capath %s: no hashed CA certificate in it (openssl rehash %s)"
         % (pki["capath.unhashed"], pki["capath.unhashed"])),
        (["--capath", pki["capath"], "--tls"], "--capath and --tls: one or the other"),
        (["--cafile", pki["ca"], "--key-password-file", pki["passphrase"]],
         "--key-password-file goes with --key: the passphrase of an encrypted key"),
        (["--cafile", pki["ca"], "--cert", pki["client"], "--key", pki["client.locked"],
          "--key-password-file", d + "/none"],
         "--key-password-file %s/none: No such file or directory" % d),
        (["--cafile", pki["ca"], "--cert", pki["client"], "--key", pki["client.locked"]],
         "--key %s: encrypted with a passphrase: give it in --key-password-file FILE"
         % pki["client.locked"]),
        (["--cafile", pki["ca"], "--cert", pki["client"], "--key", pki["client.locked"],
          "--key-password-file", pki["wrong"]],
         "--key %s: the passphrase in --key-password-file %s does not decrypt it"
         % (pki["client.locked"], pki["wrong"])),
        (["--tls-alpn", "x-amzn-mqtt-ca"], "--tls-alpn needs TLS: --cafile, --capath or --tls"),
        (["--cafile", pki["ca"], "--tls-alpn", ""],
         "--tls-alpn '': a protocol name of 1 to 255 bytes"),
    ]


@pytest.mark.parametrize("module", ["umqtt3_pipeline.ingest", "umqtt3_pipeline.job"])
def test_tls_options_that_cannot_be_used_are_refused_in_one_line(tmp_path, pki, module):
    # exit status 2 before anything connects: the broker's port has nothing behind it
    args = ["--log", str(tmp_path / "log"), "--broker", "127.0.0.1:%d" % procs.free_port()]
    if module.endswith("job"):
        args += ["--out", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "ck")]
    for extra, what in _tls_refusals(pki, tmp_path):
        refused(module, args + extra, what)


def test_a_key_with_a_passphrase_takes_it_from_a_file(tmp_path, pki, tls_mosquitto):
    """Never asked for on the terminal (refused without the file: the
    refusals above); with its passphrase the broker that wants a client
    certificate takes it."""
    port = tls_mosquitto(require=True)
    _readings_reach_the_log(tmp_path, port, pki, "--capath", pki["capath"], "--cert",
                            pki["client"], "--key", pki["client.locked"],
                            "--key-password-file", pki["passphrase"], cert="client")


def test_capath_trusts_the_hashed_cas_of_a_directory(tmp_path, pki, tls_mosquitto):
    port = tls_mosquitto()
    _readings_reach_the_log(tmp_path / "a", port, pki, "--capath", pki["capath"])
    # with --cafile: both are trusted (--cafile's CA is not the broker's)
    _readings_reach_the_log(tmp_path / "b", port, pki, "--cafile", pki["other"],
                            "--capath", pki["capath"])


class ALPNFront:
    """A TLS front on 127.0.0.1 that picks the service by ALPN, as AWS IoT
    Core does on port 443: it selects one of protocols when the client
    offers it and relays the link to mosquitto's plain listener on port
    `to`; a link that agreed on none it closes after the handshake.
    refuse: every handshake gets the no_application_protocol alert instead
    (RFC 7301 3.2); require: it wants a client certificate signed by the CA.
    agreed: what each handshake selected."""

    def __init__(self, pki, to, protocols=("x-amzn-mqtt-ca",), refuse=False, require=False):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(pki["server"], pki["server.key"])
        if require:
            ctx.load_verify_locations(pki["ca"])
            ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.set_alpn_protocols(list(protocols))
        if refuse:  # (the servername callback runs for every ClientHello)
            ctx.sni_callback = lambda *_: 120  # the alert no_application_protocol
        self.ctx, self.to, self.agreed = ctx, to, []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(c,), daemon=True).start()

    def _one(self, c):
        try:
            c.settimeout(10)
            t = self.ctx.wrap_socket(c, server_side=True)
        except OSError:
            c.close()
            return
        self.agreed.append(t.selected_alpn_protocol())
        if t.selected_alpn_protocol() is None:
            t.close()
            return
        b = socket.create_connection(("127.0.0.1", self.to), 10)
        t.setblocking(False)
        b.setblocking(False)
        try:
            while True:
                r = select.select([t, b], [], [], 30)[0]
                if not r:
                    return
                for s, o in ((t, b), (b, t)):
                    if s in r:
                        while True:
                            try:
                                data = s.recv(65536)
                            except (ssl.SSLWantReadError, BlockingIOError):
                                break
                            if not data:
                                return
                            o.setblocking(True)
                            o.sendall(data)
                            o.setblocking(False)
                            if s is b or not t.pending():
                                break
        except OSError:
            pass
        finally:
            t.close()
            b.close()

    def close(self):
        self.sock.close()


@pytest.fixture
def alpn_front(pki, tls_mosquitto):
    """alpn_front(**kw): an ALPNFront before a plain mosquitto; returns
    (front, mosquitto's plain port)."""
    made = []

    def start(**kw):
        plain = tls_mosquitto(cert=None)
        made.append(ALPNFront(pki, plain, **kw))
        return made[-1], plain
    yield start
    for f in made:
        f.close()


def test_alpn_the_broker_agrees_on(tmp_path, pki, alpn_front):
    front, plain = alpn_front()
    _readings_reach_the_log(tmp_path, front.port, pki, "--cafile", pki["ca"], "--tls-alpn",
                            "x-amzn-mqtt-ca", plain_to=plain)
    assert front.agreed and set(front.agreed) == {"x-amzn-mqtt-ca"}, front.agreed


@pytest.mark.parametrize("module", ["umqtt3_pipeline.ingest", "umqtt3_pipeline.job"])
def test_alpn_the_broker_does_not_agree_on_is_refused_in_one_line(tmp_path, pki, alpn_front,
                                                                   module):
    args = ["--log", str(tmp_path / "log"), "--cafile", pki["ca"]]
    if module.endswith("job"):
        args += ["--out", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "ck")]
    front, _ = alpn_front()
    at = "the broker at 127.0.0.1:%d" % front.port
    # it selects none of what we offer (RFC 7301 lets a server go on so)
    refused(module, args + ["--broker", "127.0.0.1:%d" % front.port, "--tls-alpn", "mqtt"],
            at + " did not agree on the ALPN protocol mqtt: it chose none (--tls-alpn)",
            status=1)
    assert front.agreed and set(front.agreed) == {None}, front.agreed
    # it answers with the alert no_application_protocol
    front, _ = alpn_front(refuse=True)
    at = "the broker at 127.0.0.1:%d" % front.port
    refused(module, args + ["--broker", "127.0.0.1:%d" % front.port, "--tls-alpn",
                            "x-amzn-mqtt-ca"],
            at + " did not agree on the ALPN protocol x-amzn-mqtt-ca: it refused it: tlsv1 "
            "alert no application protocol (--tls-alpn)", status=1)


def _reader_logs_five(options, publish):
    """The source's reader with these options connects, and five readings
    that publish(msgs) sends reach its log."""
    from umqtt3_pipeline.source import StreamReader
    r = StreamReader(options)
    try:
        r.initialOffset()
        wait_for(lambda: r._ingest.connected.is_set() or r._ingest.error, 10, "the connection")
        r._ingest.check()
        publish([reading("n1", "temp", 1.5, 3, i) for i in range(5)])
        wait_for(lambda: len(_logged(options["path"])) == 5, 10, "the readings")
    finally:
        r.stop()


def _reader_refused(options, match):
    """The source's reader with these options fails its first connection
    with the refusal that match finds."""
    from umqtt3_pipeline.source import StreamReader
    r = StreamReader(options)
    try:
        r.initialOffset()
        wait_for(lambda: r._ingest.error, 20, "the refusal")
        with pytest.raises(RuntimeError, match=match):
            r._ingest.check()
    finally:
        r.stop()


def test_the_source_options_take_file_paths(tmp_path, pki, tls_mosquitto):
    """The source's cafile, certfile and keyfile (what the job passes on):
    its ingest connects over TLS with the client certificate; without it
    the batch fails with the refusal; a file it cannot use is named by the
    source's option."""
    from umqtt3_pipeline.source import StreamReader
    from umqtt3_pipeline.job import parser, tls_options
    port = tls_mosquitto(require=True)
    at = "127.0.0.1:%d" % port
    a = parser().parse_args(["--log", "l", "--out", "o", "--checkpoint", "c", "--capath",
                             os.path.relpath(pki["capath"]), "--cert", pki["client"], "--key",
                             pki["client.locked"], "--key-password-file",
                             os.path.relpath(pki["passphrase"])])
    o = tls_options(a)
    assert o == {"capath": pki["capath"], "certfile": pki["client"],
                 "keyfile": pki["client.locked"], "keyPasswordFile": pki["passphrase"]}
    assert not any("s3cret" in v for v in o.values()), o  # the file's name, not what it holds
    _reader_logs_five(dict(o, path=str(tmp_path / "log"), broker=at),
                      lambda msgs: _publish_over_tls(port, pki, msgs, "client"))
    _reader_refused({"path": str(tmp_path / "log2"), "broker": at, "cafile": pki["ca"]},
                    "it wants a client certificate")
    with pytest.raises(ValueError, match="^certfile and keyfile go together: certfile without"):
        StreamReader({"path": str(tmp_path / "log3"), "broker": at, "tls": "true",
                      "certfile": pki["client"]}).initialOffset()
    with pytest.raises(ValueError, match="^keyfile .*: the passphrase in keyPasswordFile "):
        StreamReader({"path": str(tmp_path / "log3"), "broker": at, "cafile": pki["ca"],
                      "certfile": pki["client"], "keyfile": pki["client.locked"],
                      "keyPasswordFile": pki["wrong"]}).initialOffset()


def test_the_source_option_alpn(tmp_path, pki, alpn_front):
    """What the job passes on for --tls-alpn: the source's ingest offers it
    and holds the broker to it."""
    from umqtt3_pipeline.job import parser, tls_options
    front, plain = alpn_front()
    a = parser().parse_args(["--log", "l", "--out", "o", "--checkpoint", "c", "--cafile",
                             pki["ca"], "--tls-alpn", "x-amzn-mqtt-ca"])
    o = tls_options(a)
    assert o == {"cafile": pki["ca"], "alpn": "x-amzn-mqtt-ca"}
    at = "127.0.0.1:%d" % front.port
    _reader_logs_five(dict(o, path=str(tmp_path / "log"), broker=at),
                      lambda msgs: _publish_over_tls(plain, pki, msgs, plain=True))
    _reader_refused(dict(o, path=str(tmp_path / "log2"), broker=at, alpn="mqtt"),
                    "did not agree on the ALPN protocol mqtt: it chose")


@pytest.mark.slow
def test_the_job_reads_over_tls_with_every_option(tmp_path, pki, alpn_front):
    """The job's options reach the source through Spark (readings()):
    --capath, a client certificate whose key is encrypted, its passphrase
    in a file, and ALPN, through the front that wants the client
    certificate and picks by ALPN; every reading is committed."""
    import re
    from pipeline_support import have_spark
    if have_spark() is not None:
        pytest.skip(have_spark())
    from umqtt3_pipeline import job
    from umqtt3_pipeline import log as L
    from umqtt3_pipeline.tls import context
    front, plain = alpn_front(require=True)
    tls = ["--capath", pki["capath"], "--cert", pki["client"], "--key", pki["client.locked"],
           "--key-password-file", pki["passphrase"], "--tls-alpn", "x-amzn-mqtt-ca"]
    # the session first: the broker keeps every reading for the job
    job.ensure_session("127.0.0.1:%d" % front.port, "umqtt3/+/+", 1, "tls-job",
                       tls=context(pki["ca"], False, pki["client"], pki["client.key"],
                                   alpn="x-amzn-mqtt-ca"), cert=True)
    msgs = [reading("n%d" % (i % 4), "temp", float(i), 5, i) for i in range(60)]
    _publish_over_tls(plain, pki, msgs, plain=True)
    p = subprocess.Popen([sys.executable, "-m", "umqtt3_pipeline.job", "--master", "local[1]",
                          "--broker", "127.0.0.1:%d" % front.port, "--client-id", "tls-job",
                          "--log", str(tmp_path / "log"), "--out", str(tmp_path / "out"),
                          "--checkpoint", str(tmp_path / "ck"), "--window", "1 seconds",
                          "--watermark", "1 seconds", "--trigger", "0.5", "--keep-log"] + tls,
                         env=dict(procs.python_env(), SPARK_LOCAL_IP="127.0.0.1"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        log = str(tmp_path / "log")
        wait_for(lambda: p.poll() is not None or os.path.isdir(log) and
                 L.count(log) >= len(msgs), 180, "every reading in the log")
        p.terminate()  # the job closes: every window written, then the summary
        out, err = p.communicate(timeout=180)
    finally:
        procs.stop(p, 5)
    assert p.returncode == 0, err
    assert re.search(r"^umqtt3 telemetry: stopped after \d+ s; 60 readings committed", out,
                     re.M), out + err
    # the job's ensure_session and its source's ingest: each agreed on the protocol
    assert len(front.agreed) >= 3 and set(front.agreed) == {"x-amzn-mqtt-ca"}, front.agreed
