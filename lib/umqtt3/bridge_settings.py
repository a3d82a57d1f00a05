# umqtt3.bridge_settings -- the checks of a bridge's settings, run once at
# boot: a device's dict (/config.json) or a file's lines (bridge_config),
# each value's type and range, the rules' lines, one-line refusals
# (docs/bridge.md). Imported by bridge.settings() and bridge.parse_rule()
# for the one call and dropped again after it (bridge._checks): its code
# is needed at boot only, and a module kept in sys.modules keeps its code
# in RAM for the life of the gateway.
from .codec import valid_filter, valid_name
from .bridge import Rule, OUT, IN, BOTH, MAX_WINDOW, MIN_KEEPALIVE, address

_DIRS = {"out": OUT, "in": IN, "both": BOTH}


# the settings of one bridge, with their defaults (docs/bridge.md)
DEFAULTS = {  # type: dict
    "name": "bridge",
    "host": "127.0.0.1",
    "port": 0,  # 0: 1883, or 8883 with TLS
    "addresses": None,  # ["HOST[:PORT]", ...] in place of host and port: the main one first
    "round_robin": False,  # False: back to the main address once it takes TCP again
    "rules": (),  # rule lines or Rules
    "client_id": "",  # "": umqtt3-<name>
    "user": None,
    "password": None,
    "tls": None,  # True, an ssl context, or None (plain TCP)
    "cafile": None,  # TLS checked against this CA certificate (PEM file): tls is ignored
    "certfile": None,  # with keyfile and cafile: the client certificate chain (PEM file)
    "keyfile": None,  # its private key (PEM file)
    "level": 4,  # 4: MQTT 3.1.1, 5: MQTT 5 (no local for `both`)
    "outgoing_retain": True,  # False: nothing goes up retained (the status and will too)
    "try_private": True,  # at 3.1.1: CONNECT with mosquitto's bridge bit (level | 0x80)
    "keepalive": 60,
    "backoff_ms": (500, 30000),
    "timeout_ms": 3000,  # dialling (TCP and TLS), CONNACK and the answers awaited
    "status_topic": "",  # "": $bridge status at umqtt3/bridge/<client id>/state; None: none
    "queue_size": 100,  # stored QoS 1/2 messages waiting for upstream
    "queue_qos0": 32,  # QoS 0 messages waiting in RAM (the oldest is dropped)
    "window": 8,  # QoS 1/2 messages with the upstream client at once
    "inflight_in": 32,  # QoS 2 messages from upstream the client holds at once (awaiting PUBREL)
    "link": None,  # () -> a link (transport.Pipe end) instead of a socket: tests
}


def _word(w):
    return b"" if w == '""' else w.encode()


def parse_rule(line):
    """A Rule from the words after `topic`; ValueError says what is wrong."""
    w = line.split()
    if w and w[0] == "topic":
        w = w[1:]
    if not w or len(w) > 5 or len(w) == 4:
        raise ValueError("topic rule %r: PATTERN [out|in|both [QOS [LOCAL REMOTE]]]" % line)
    d = _DIRS.get(w[1] if len(w) > 1 else "out")
    if d is None:
        raise ValueError("topic rule %r: direction %r is not out, in or both" % (line, w[1]))
    q = w[2] if len(w) > 2 else "0"
    if q not in ("0", "1", "2"):
        raise ValueError("topic rule %r: QoS %r is not 0, 1 or 2" % (line, q))
    local = _word(w[3]) if len(w) > 3 else b""
    remote = _word(w[4]) if len(w) > 3 else b""
    pat = _word(w[0])
    for side, p in (("local", local), ("remote", remote)):
        # a prefix is part of every topic name the bridge writes, and a
        # topic name has no wildcard [MQTT-4.7.1-1] (mosquitto refuses it too)
        if b"+" in p or b"#" in p:
            raise ValueError("topic rule %r: %s prefix %r has a wildcard (+ or #)"
                             % (line, side, p.decode()))
    for f in (local + pat, remote + pat):
        if not valid_filter(f, 0, len(f)):
            raise ValueError("topic rule %r: %r is not a topic filter" % (line, f.decode()))
    return Rule(pat, d, int(q), local, remote)


def _whole(c, k, lo, hi, name):
    # c[k] a whole number lo..hi, or ValueError naming the bridge and key
    v = c[k]
    if type(v) is not int or not lo <= v <= hi:
        raise ValueError("bridge %s: %s must be a whole number %d-%d, not %r" % (name, k, lo, hi, v))
    return v


def settings(cfg, files=True):
    """DEFAULTS with cfg on top, checked; ValueError names what is wrong.
    files=False: the certificate files are named but not read (a deploy
    checks a board's configuration on another machine)."""
    c = dict(DEFAULTS)
    for k in cfg:
        if k not in DEFAULTS:
            raise ValueError("bridge: unknown setting %r" % k)
        c[k] = cfg[k]
    name = c["name"]
    if not name or not isinstance(name, str) or not all(
            ch.isalpha() or ch.isdigit() or ch in "-_" for ch in name):
        raise ValueError("bridge name %r: letters, digits, - and _ only" % (name,))
    # a device's dict (/config.json) is typed by hand: each value's type is
    # checked here, at boot, not by a raise in the broker's loop later
    rules = c["rules"]
    if not isinstance(rules, (list, tuple)) or not all(isinstance(r, (str, Rule)) for r in rules):
        raise ValueError("bridge %s: rules must be a list of rule lines, not %r" % (name, rules))
    c["rules"] = [r if isinstance(r, Rule) else parse_rule(r) for r in rules]
    if not c["rules"]:
        raise ValueError("bridge %s: no topic rule" % name)
    if not c["host"] or not isinstance(c["host"], str):
        raise ValueError("bridge %s: host must be a host name or address" % name)
    _whole(c, "port", 0, 65535, name)
    a = c["addresses"]
    if a is not None:
        if not isinstance(a, (list, tuple)) or not a or not all(isinstance(x, str) for x in a):
            raise ValueError('bridge %s: addresses must be a list of "HOST[:PORT]", not %r'
                             % (name, a))
        if c["host"] != DEFAULTS["host"] or c["port"]:
            raise ValueError("bridge %s: addresses or host and port, not both" % name)
        for x in a:
            try:
                address(x)
            except ValueError as e:
                raise ValueError("bridge %s: %s" % (name, e))
    if c["level"] not in (4, 5):
        raise ValueError("bridge %s: protocol level must be 4 (3.1.1) or 5" % name)
    for k in ("client_id", "user", "password", "status_topic", "cafile", "certfile", "keyfile"):
        v = c[k]
        if v is not None and not isinstance(v, str) or (v == "" and k in ("cafile", "certfile",
                                                                          "keyfile")):
            # an empty file name would mean plain TCP without a word
            raise ValueError("bridge %s: %s must be a text, not %r" % (name, k, v))
    if c["password"] is not None and c["user"] is None and c["level"] == 4:
        # MQTT 3.1.1 has no password without a user name [MQTT-3.1.2-22]
        raise ValueError("bridge %s: a password needs a user name at MQTT 3.1.1 "
                         "(remote_username, or mqttv50)" % name)
    for k in ("outgoing_retain", "try_private", "round_robin"):
        if not isinstance(c[k], bool):
            raise ValueError("bridge %s: %s must be true or false" % (name, k))
    # Keep Alive is a Two Byte Integer (3.1.1 section 3.1.2.10); a bridge
    # never goes without one: a hung upstream would never be noticed
    if _whole(c, "keepalive", 0, 65535, name) < MIN_KEEPALIVE:
        c["keepalive"] = MIN_KEEPALIVE
    b = c["backoff_ms"]
    if (not isinstance(b, (list, tuple)) or len(b) != 2 or type(b[0]) is not int
            or type(b[1]) is not int or not 0 < b[0] <= b[1]):
        raise ValueError("bridge %s: backoff_ms must be two whole numbers 0 < LO <= HI, not %r"
                         % (name, b))
    _whole(c, "timeout_ms", 1, 0x7FFFFFFF, name)
    _whole(c, "queue_size", 1, 0x7FFFFFFF, name)
    _whole(c, "window", 1, MAX_WINDOW, name)
    _whole(c, "inflight_in", 1, 65535, name)
    _whole(c, "queue_qos0", 0, 0x7FFFFFFF, name)
    if not c["client_id"]:
        c["client_id"] = "umqtt3-" + name
    cert = c["certfile"]
    key = c["keyfile"]
    if bool(cert) != bool(key):
        raise ValueError("bridge %s: certfile and keyfile go together" % name)
    if cert and not c["cafile"]:
        # as mosquitto: a certificate only over TLS that checks the upstream
        raise ValueError("bridge %s: certfile needs cafile" % name)
    if c["cafile"] and files:
        from .compat.aio import tls_client
        try:
            ctx = tls_client(c["cafile"])
        except (OSError, ValueError) as e:
            raise ValueError("bridge %s: cafile %s: %s" % (name, c["cafile"], e))
        if cert:
            # the upstream checks it (AWS IoT Core, Azure IoT Hub's X.509
            # devices, mosquitto's require_certificate); a file missing,
            # unreadable or a key that is not the certificate's stops here
            try:
                ctx.load_cert_chain(cert, key)
            except (OSError, ValueError) as e:
                raise ValueError("bridge %s: certfile %s, keyfile %s: %s" % (name, cert, key, e))
        c["tls"] = ctx
    st = c["status_topic"]
    if st == "":
        st = c["status_topic"] = "umqtt3/bridge/%s/state" % c["client_id"]
    if st is not None:
        # the will and the status go there: a topic name [MQTT-3.3.2-2]
        t = st.encode()
        if not valid_name(t, 0, len(t)):
            raise ValueError("bridge %s: status topic %r is not a topic name "
                             "(no + or #)" % (name, st))
    return c
