"""firmware/config.py's check of /config.json: every number and true/false the
firmware reads has its type and range checked, so a config that would stop the
node at every boot is refused by deploy (one line, exit 2, before anything is
staged) and, on the board, by main.py, which says so and stays at the REPL
instead of resetting for ever. main.py runs for real under the WebAssembly
MicroPython with the config at /config.json."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from tools import procs
from tools.desktop.sim import fw

ROOT = procs.ROOT
fw_config = fw["config"]
RUN_MJS = os.path.join(ROOT, "tests", "mp", "run.mjs")
WASM = os.path.join(ROOT, "node_modules", "@micropython", "micropython-webassembly-pyscript",
                    "micropython.mjs")
NODE = shutil.which("node")

# (config, the setting the refusal names): each stops the node at boot unchecked
BAD = [
    ({"period_s": "10"}, "period_s"),  # "10" * 1000 in node.run
    ({"period_s": 0}, "period_s"),
    ({"period_s": float("nan")}, "period_s"),
    ({"period_s": 10 ** 6}, "period_s"),  # ticks_add on a board: under 2**29 ms
    ({"keepalive": 100000}, "keepalive"),  # the client refuses above 65535
    ({"keepalive": -1}, "keepalive"),
    ({"keepalive": 1.5}, "keepalive"),
    ({"port": 0}, "port"),
    ({"port": 65536}, "port"),
    ({"port": "1883"}, "port"),
    ({"port": True}, "port"),
    ({"wifi_timeout_s": "20"}, "wifi_timeout_s"),
    ({"wifi_timeout_s": -1}, "wifi_timeout_s"),
    ({"drain_ms": "2000"}, "drain_ms"),
    ({"drain_ms": -5}, "drain_ms"),
    ({"cycles": 2.5}, "cycles"),
    ({"cycles": -1}, "cycles"),
    ({"deep_sleep": "false"}, "deep_sleep"),  # a non-empty string is true
    # every wake is a new boot, counting from 0 again: the node never stopped
    ({"deep_sleep": True, "cycles": 3}, "cycles"),
    ({"watchdog": 0}, "watchdog"),
    ({"allow_fat": "yes"}, "allow_fat"),
    ({"ntp": 1}, "ntp"),
    ({"qos": 1.0}, "qos"),
    ({"qos": True}, "qos"),
    ({"role": "gw"}, "role"),
    ({"wifi_mode": "station"}, "wifi_mode"),
    ({"queue_full": "keep"}, "queue_full"),
    ({"broker": 10}, "broker"),
    ({"prefix": None}, "prefix"),
    ({"node_id": 7}, "node_id"),
    ({"bridge": [1]}, "bridge"),
    ({"wifi_rejoin_s": -1}, "wifi_rejoin_s"),
    ({"wifi_rejoin_s": "30"}, "wifi_rejoin_s"),
    # in every topic the node publishes to (the will's too), where a topic
    # name may hold no wildcard [MQTT-4.7.1-1] and no NUL [MQTT-4.7.3-2]: the
    # broker closes the CONNECT, at every boot
    ({"prefix": "site/+"}, "prefix"),
    ({"prefix": "#"}, "prefix"),
    ({"prefix": "a\x00b"}, "prefix"),
    ({"node_id": "n+1"}, "node_id"),
    ({"node_id": "n#"}, "node_id"),
    ({"broker": ""}, "broker"),  # connects nowhere
    # longer than the board's buffer takes in a CONNECT or a reading: MQTTError
    # 0x95 out of connect(), at every boot
    ({"prefix": "p" * 600}, "prefix"),
    ({"prefix": "p" * 100, "node_id": "n" * 29}, "prefix"),
    ({"node_id": "n" * 129, "prefix": ""}, "node_id"),
]

GOOD = [
    {},
    {"period_s": 0.05, "keepalive": 0, "port": 1, "drain_ms": 0, "wifi_timeout_s": 0.5},
    {"period_s": 86400, "keepalive": 65535, "port": 65535, "cycles": 3, "deep_sleep": False,
     "watchdog": False, "allow_fat": True, "ntp": False, "ntp_host": "pool.ntp.org",
     "qos": 2, "role": "gateway", "wifi_mode": "ap", "country": "DE",
     "bridge": [{"host": "10.0.0.2"}], "mine": "kept", "wifi_rejoin_s": 0},
    {"prefix": "site/a/b", "node_id": "n-1_x", "broker": "broker.local", "wifi_rejoin_s": 2.5},
    {"prefix": "p" * 64, "node_id": "n" * 64},  # TOPIC_ROOM, 128 bytes
    {"deep_sleep": True, "cycles": 0},
]


@pytest.mark.parametrize("cfg,key", BAD)
def test_merge_refuses_wrong_types_and_ranges(cfg, key):
    with pytest.raises(ValueError) as e:
        fw_config.merge(cfg)
    assert str(e.value).startswith(key + " must be "), e.value


def test_merge_takes_every_type_and_range_it_documents():
    for cfg in GOOD:
        c = fw_config.merge(cfg)
        for k in cfg:
            assert c[k] == cfg[k]
    with pytest.raises(ValueError):
        fw_config.merge([1])


def deploy(tmp_path, cfg):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return subprocess.run([sys.executable, "-m", "tools.device.deploy", "--board", "esp32",
                           "--dry-run", "--build", str(tmp_path / "stage"), "--config", str(path)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env=procs.python_env())


@pytest.mark.parametrize("cfg,key", [BAD[0], BAD[4], BAD[8], BAD[12], BAD[13], BAD[17]] + [
    b for b in BAD if b[1] in ("prefix", "node_id", "broker") and isinstance(b[0][b[1]], str)])
def test_deploy_refuses_a_config_the_node_cannot_boot_with(tmp_path, cfg, key):
    p = deploy(tmp_path, cfg)
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.startswith("deploy: config %s: %s must be " % (tmp_path / "config.json", key))
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr
    assert not (tmp_path / "stage").exists()  # refused before anything is staged


def test_deploy_takes_a_good_config(tmp_path):
    p = deploy(tmp_path, GOOD[1])
    assert p.returncode == 0, p.stderr
    staged = json.load(open(str(tmp_path / "stage" / "config.json")))
    assert staged == dict(GOOD[1], role="node", board="")


def run_main(tmp_path, text):
    """firmware/main.py under the WebAssembly MicroPython, /config.json holding text."""
    cfg = tmp_path / "config.json"
    cfg.write_text(text)
    return subprocess.run(["node", RUN_MJS, "--mount", "%s=/config.json" % cfg,
                           os.path.join(ROOT, "firmware", "main.py")],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)


@pytest.mark.skipif(not (NODE and os.path.exists(WASM)), reason="no WebAssembly MicroPython")
@pytest.mark.parametrize("text,msg", [
    ('{"period_s": "10"}', 'period_s must be a number from 0.001 to 86400, not "10"'),
    ('{"keepalive": 100000}', "keepalive must be a whole number from 0 to 65535, not 100000"),
    ('{"qos": 1.0}', "qos must be one of 0, 1, 2, not 1.0"),
    ('{"period_s": 10', "/config.json: "),  # JSON that does not parse
    ('{"prefix": "site/+"}', "prefix must be free of '+', '#' and NUL"),
    ('{"prefix": "%s"}' % ("p" * 600), "prefix must be shorter"),
    ('{"deep_sleep": true, "cycles": 3}', "cycles must be 0 with deep_sleep"),
])
def test_main_on_the_board_says_what_is_wrong_and_does_not_reset(tmp_path, text, msg):
    # before the fix, the error went to main.py's reset-after-a-pause (for ever)
    p = run_main(tmp_path, text)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.startswith("/config.json: ") and msg in p.stdout, p.stdout
    assert p.stdout.rstrip().endswith(": not starting") and not p.stderr, p.stdout + p.stderr


@pytest.mark.skipif(not (NODE and os.path.exists(WASM)), reason="no WebAssembly MicroPython")
def test_a_gateway_whose_bridge_is_refused_says_so_and_does_not_reset(tmp_path):
    # a /config.json edited on the board (no deploy to check it): the bridge's
    # settings are checked before the network and the broker start
    cfg = tmp_path / "config.json"
    cfg.write_text('{"role": "gateway", "bridge": {"host": "h", "rules": ["a/# sideways"]}}')
    p = subprocess.run(["node", RUN_MJS, "--mount", "%s=/config.json" % cfg, "--mount",
                        "%s=/board.py" % os.path.join(ROOT, "boards", "esp32.py"),
                        os.path.join(ROOT, "firmware", "main.py")],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 0 and not p.stderr, p.stdout + p.stderr
    assert p.stdout.strip() == ("/config.json: topic rule 'a/# sideways': direction 'sideways' "
                                "is not out, in or both: not starting"), p.stdout


@pytest.mark.parametrize("bridge,msg", [
    ({"host": "h", "rules": ["a/# sideways"]}, "direction 'sideways' is not out, in or both"),
    ([{"hots": "h", "rules": ["a/# out 1"]}], "bridge: unknown setting 'hots'"),
    ({"host": "h", "rules": ["a/# out 1"], "window": 0}, "window must be a whole number 1-1024"),
    # typed by hand: the wrong type is refused here, not by the board's loop
    ({"host": "h", "rules": "a/#"}, "rules must be a list of rule lines"),
    ({"host": "h", "rules": ["a/# out 1"], "backoff_ms": [1000]}, "backoff_ms must be two whole"),
    ({"host": "h", "rules": ["a/# out 1"], "keepalive": "60"}, "keepalive must be a whole number"),
    # the files are the board's, but which go together is checked here
    ({"host": "h", "rules": ["a/# out 1"], "cafile": "/ca.pem", "certfile": "/c.pem"},
     "certfile and keyfile go together"),
    ({"host": "h", "rules": ["a/# out 1"], "certfile": "/c.pem", "keyfile": "/k.pem"},
     "certfile needs cafile"),
])
def test_deploy_refuses_a_gateway_bridge_the_library_would_refuse_at_boot(tmp_path, bridge, msg):
    p = deploy(tmp_path, {"role": "gateway", "bridge": bridge})
    assert p.returncode == 2 and msg in p.stderr and p.stderr.count("\n") == 1, p.stderr
    # a cafile names a file on the board: not read here
    ok = {"host": "h", "rules": ["a/# out 1"], "cafile": "/ca.pem"}
    assert deploy(tmp_path, {"role": "gateway", "bridge": ok}).returncode == 0
    ok = dict(ok, certfile="/c.pem", keyfile="/k.pem")
    assert deploy(tmp_path, {"role": "gateway", "bridge": ok}).returncode == 0


# /secrets.json as a hand edit leaves it: each went to main.py's reset after a
# pause, at every boot, with an error that did not name the file
BAD_SECRETS = [
    ('{"ssid": "x"', ""),  # JSON that does not parse (cut short)
    ('["x"]', "must be a JSON object"),
    ('{"ssid": "x", "password": 1234}', "password must be a string"),
]


# a trailing comma: refused by CPython's json (deploy), taken by MicroPython's
@pytest.mark.parametrize("text,msg", BAD_SECRETS + [('{"ssid": "x",}', "")])
def test_load_secrets_refuses_what_the_board_cannot_use(tmp_path, text, msg):
    path = tmp_path / "secrets.json"
    path.write_text(text)
    with pytest.raises(ValueError) as e:
        fw_config.load_secrets(str(path))
    assert msg in str(e.value) and "1234" not in str(e.value)  # never a value: it is secret
    path.write_text('{"ssid": "x", "password": "y"}')
    assert fw_config.load_secrets(str(path)) == {"ssid": "x", "password": "y"}
    assert fw_config.load_secrets(str(tmp_path / "none.json")) == {}  # no file: no secrets


def test_deploy_refuses_secrets_the_board_would_refuse(tmp_path):
    secrets = tmp_path / "secrets.json"
    secrets.write_text(BAD_SECRETS[2][0])
    path = tmp_path / "config.json"
    path.write_text("{}")
    p = subprocess.run([sys.executable, "-m", "tools.device.deploy", "--board", "esp32",
                        "--dry-run", "--build", str(tmp_path / "stage"), "--config", str(path),
                        "--secrets", str(secrets)],
                       capture_output=True, text=True, timeout=120, cwd=ROOT,
                       env=procs.python_env())
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr == "deploy: secrets %s: password must be a string\n" % secrets, p.stderr
    assert not (tmp_path / "stage").exists()  # refused before anything is staged


def test_a_refused_deploy_leaves_the_last_staging_as_it_was(tmp_path):
    # before: stage() emptied the staging directory, then refused the secrets
    # half way: no main.py where the last good staging was
    path, secrets = tmp_path / "config.json", tmp_path / "secrets.json"
    path.write_text("{}")
    secrets.write_text('{"ssid": "lab"}')

    def deploy_():
        return subprocess.run([sys.executable, "-m", "tools.device.deploy", "--board", "esp32",
                               "--dry-run", "--build", str(tmp_path / "stage"), "--config",
                               str(path), "--secrets", str(secrets)],
                              capture_output=True, text=True, timeout=120, cwd=ROOT,
                              env=procs.python_env())
    assert deploy_().returncode == 0
    before = sorted(p.name for p in (tmp_path / "stage").iterdir())
    assert "main.py" in before and "secrets.json" in before
    secrets.write_text('{"ssid": 5}')
    p = deploy_()
    assert p.returncode == 2 and p.stderr == "deploy: secrets %s: ssid must be a string\n" % secrets
    assert sorted(p.name for p in (tmp_path / "stage").iterdir()) == before


@pytest.mark.skipif(not (NODE and os.path.exists(WASM)), reason="no WebAssembly MicroPython")
@pytest.mark.parametrize("text,msg", BAD_SECRETS)
def test_main_on_the_board_says_its_secrets_are_bad_and_does_not_reset(tmp_path, text, msg):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "secrets.json").write_text(text)
    p = subprocess.run(["node", RUN_MJS, "--mount", "%s=/config.json" % (tmp_path / "config.json"),
                        "--mount", "%s=/secrets.json" % (tmp_path / "secrets.json"),
                        "--mount", "%s=/board.py" % os.path.join(ROOT, "boards", "esp32.py"),
                        os.path.join(ROOT, "firmware", "main.py")],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    # before: the exception printed (not naming the file), 10 s, machine.reset()
    assert p.returncode == 0 and not p.stderr, p.stdout + p.stderr
    out = p.stdout.strip()
    assert out.startswith("/secrets.json: ") and out.endswith(": not starting"), out
    assert msg in out and "\n" not in out, out


def test_check_board_refuses_a_station_without_ssid_and_a_store_dir_without_parent(tmp_path):
    node, gw = fw_config.merge({}), fw_config.merge({"role": "gateway"})
    for c in (node, gw):
        with pytest.raises(ValueError) as e:
            fw_config.check_board(c, {"password": "pw"})
        assert str(e.value) == "/secrets.json: no ssid (the Wi-Fi network to join)"
    fw_config.check_board(node, {"ssid": "lab"})
    fw_config.check_board(fw_config.merge({"role": "gateway", "wifi_mode": "ap"}), {})
    for k in ("store_dir", "gateway_store"):
        missing = str(tmp_path / "no" / "mq")
        with pytest.raises(ValueError) as e:
            fw_config.check_board(fw_config.merge({k: missing}), {"ssid": "lab"})
        assert str(e.value) == ("/config.json: %s %s: its parent directory does not exist"
                                % (k, missing))
        fw_config.check_board(fw_config.merge({k: str(tmp_path / "mq")}), {"ssid": "lab"})


@pytest.mark.skipif(not (NODE and os.path.exists(WASM)), reason="no WebAssembly MicroPython")
@pytest.mark.parametrize("config,secrets,msg", [
    ("{}", '{"password": "pw"}', "/secrets.json: no ssid (the Wi-Fi network to join)"),
    ("{}", None, "/secrets.json: no ssid (the Wi-Fi network to join)"),  # no file at all
    ('{"store": "file", "store_dir": "/data/mq"}', '{"ssid": "lab"}',
     "/config.json: store_dir /data/mq: its parent directory does not exist"),
])
def test_main_on_the_board_refuses_what_a_reset_would_not_mend(tmp_path, config, secrets, msg):
    # before: node.start() armed the watchdog, then wifi() (no ssid) or the
    # FileStore (no parent) raised: main.py's pause and machine.reset(), at every boot
    (tmp_path / "config.json").write_text(config)
    mounts = ["--mount", "%s=/config.json" % (tmp_path / "config.json"),
              "--mount", "%s=/board.py" % os.path.join(ROOT, "boards", "esp32.py")]
    if secrets is not None:
        (tmp_path / "secrets.json").write_text(secrets)
        mounts += ["--mount", "%s=/secrets.json" % (tmp_path / "secrets.json")]
    p = subprocess.run(["node", RUN_MJS] + mounts + [os.path.join(ROOT, "firmware", "main.py")],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 0 and not p.stderr, p.stdout + p.stderr
    assert p.stdout.strip() == msg + ": not starting", p.stdout
