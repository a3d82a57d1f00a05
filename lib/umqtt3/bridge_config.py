# umqtt3.bridge_config -- bridges from a mosquitto-style configuration file
# and from the desktop broker's command line (docs/bridge.md).
#
#     cfgs = parse(open("bridge.conf").read())   # [settings dict, ...]
#
#     connection cloud
#     address 10.0.0.2:1883
#     topic sensors/# out 2 gw/ site1/
#     topic cmd/# in 1 dev/ site1/
#     remote_username gw1
#     remote_password secret
#     bridge_protocol_version mqttv50
#
# One `connection NAME` line starts each bridge; the lines after it until the
# next belong to it. Lines mosquitto has but this broker does not are
# refused by name, never ignored. A device gives the settings as a dict
# (firmware/config.py), which bridge.install takes directly, or reads such
# a file with parse(). add_flags / from_args / prepare: the desktop CLI's.


# mosquitto's lines whose one value says what this bridge always does: the
# value accepted, and why the other is not
_AS_WE_DO = {
    "bridge_insecure": ("false", "the upstream's name is always checked with bridge_cafile; "
                                 "give bridge.install an ssl context to change that"),
    "start_type": ("automatic", "the bridge connects at start-up and after every loss"),
    "bridge_attempt_unsubscribe": ("false", "the bridge never unsubscribes upstream"),
}


# the lines parse() reads, each with a value
_KEYS = ("address", "addresses", "topic", "remote_clientid", "remote_username",
         "remote_password", "bridge_protocol_version", "keepalive_interval", "restart_timeout",
         "cleansession", "notifications", "notification_topic", "bridge_tls", "bridge_cafile",
         "bridge_certfile", "bridge_keyfile", "bridge_outgoing_retain", "bridge_capath",
         "bridge_queue_size", "bridge_queue_qos0", "bridge_window", "bridge_inflight_in",
         "try_private", "round_robin")


def settings(c):
    from .bridge import settings  # loaded once a bridge is asked for
    return settings(c)


def parse_rule(v):
    from .bridge import parse_rule
    return parse_rule(v)


def _bool(v, what):
    if v in ("true", "1", "yes", "on"):
        return True
    if v in ("false", "0", "no", "off"):
        return False
    raise ValueError("%s: %r is not true or false" % (what, v))


def _int(v, what, lo=0, hi=None):
    try:
        n = int(v)
    except ValueError:
        raise ValueError("%s: %r is not a whole number" % (what, v))
    if n < lo:
        raise ValueError("%s: %d is below %d" % (what, n, lo))
    if hi is not None and n > hi:
        raise ValueError("%s: %d is above %d" % (what, n, hi))
    return n


def address(v):
    from .bridge import address
    return address(v)


def _addresses(c, a):
    # an `address` line's (or --bridge's) HOST[:PORT] words into c: several,
    # the main address first, then the others in turn (mosquitto's failover,
    # see round_robin); a later line replaces an earlier
    for x in a:
        address(x)
    c.pop("addresses", None)
    c.pop("host", None)
    c.pop("port", None)
    if len(a) > 1:
        c["addresses"] = a
    else:
        c["host"], c["port"] = address(a[0])


def parse(text):
    """The bridges of a configuration file's text; ValueError names the line."""
    out = []  # type: list[dict]
    notify = []  # per bridge: [notifications, notification_topic]
    c = None  # type: dict | None
    for no, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line[0] == "#":
            continue
        w = line.split(None, 1)
        key = w[0]
        v = w[1].strip() if len(w) > 1 else ""
        try:
            if key == "connection":
                if not v:
                    raise ValueError("connection needs a name")
                if any(b["name"] == v for b in out):
                    # one upstream session and one queue per name (mosquitto
                    # refuses it too)
                    raise ValueError("connection %s: a second bridge of that name" % v)
                c = {"name": v, "rules": []}
                out.append(c)
                notify.append([True, ""])
                continue
            if c is None:
                raise ValueError("%s before the first `connection NAME`" % key)
            if not v and (key in _KEYS or key in _AS_WE_DO):
                # never a default in its place (a bare bridge_cafile is not
                # plain TCP)
                raise ValueError("%s without its value" % key)
            if key == "address" or key == "addresses":
                _addresses(c, v.split())
            elif key == "topic":
                parse_rule(v)
                c["rules"].append(v)
            elif key == "remote_clientid":
                c["client_id"] = v
            elif key == "remote_username":
                c["user"] = v
            elif key == "remote_password":
                c["password"] = v
            elif key == "bridge_protocol_version":
                lv = {"mqttv311": 4, "mqttv50": 5}.get(v)
                if lv is None:
                    raise ValueError("bridge_protocol_version: mqttv311 or mqttv50, not %r" % v)
                c["level"] = lv
            elif key == "keepalive_interval":
                # a Two Byte Integer; below 5 (0 too) settings() raises it
                # to 5, as mosquitto does
                c["keepalive"] = _int(v, key, 0, 65535)
            elif key == "restart_timeout":
                # mosquitto's: one value a constant delay, two the backoff's
                # base and cap
                w = v.split()
                if len(w) > 2:
                    raise ValueError("restart_timeout: one value (constant) or two (base, cap)")
                lo = _int(w[0], key, 1)
                hi = _int(w[1], key, lo) if len(w) > 1 else lo
                c["backoff_ms"] = (lo * 1000, hi * 1000)
            elif key == "cleansession":
                if _bool(v, key):
                    raise ValueError("cleansession true: the bridge keeps a persistent session")
            elif key == "notifications":
                # on or off whatever the order of the two lines (mosquitto's)
                notify[-1][0] = _bool(v, key)
            elif key == "notification_topic":
                notify[-1][1] = v
            elif key == "bridge_tls":
                # TLS as the client's ssl=True: on the desktop the system's
                # CAs check the upstream; a device encrypts without a check
                c["tls"] = True if _bool(v, key) else None
            elif key == "bridge_cafile":
                # TLS that trusts this CA certificate alone (mosquitto's
                # meaning); the file is read when the settings are checked
                c["cafile"] = v
            elif key == "bridge_certfile":
                # the client certificate (PEM), with bridge_keyfile and
                # bridge_cafile, as mosquitto; read when the settings are checked
                c["certfile"] = v
            elif key == "bridge_keyfile":
                c["keyfile"] = v
            elif key == "bridge_outgoing_retain":
                # false: every message goes up without the retain flag (an
                # upstream at 3.1.1 that keeps no retained messages)
                c["outgoing_retain"] = _bool(v, key)
            elif key == "round_robin":
                # false: the first address is the main one, and the bridge
                # goes back to it once it takes connections again
                c["round_robin"] = _bool(v, key)
            elif key == "try_private":
                # at 3.1.1 mosquitto's bridge bit in CONNECT (default true,
                # as mosquitto); false for an upstream that closes the
                # connection on it instead of answering CONNACK 0x01
                c["try_private"] = _bool(v, key)
            elif key in _AS_WE_DO:
                # lines that say what this bridge does anyway: accepted;
                # the other value is refused with why
                want, why = _AS_WE_DO[key]
                if v != want:
                    raise ValueError("%s %s: not supported; %s" % (key, v, why))
            elif key == "bridge_capath":
                raise ValueError("%s: not supported; bridge_cafile FILE or bridge_tls true, "
                                 "or give bridge.install an ssl context" % key)
            elif key == "bridge_queue_size":
                c["queue_size"] = _int(v, key, 1)
            elif key == "bridge_queue_qos0":
                c["queue_qos0"] = _int(v, key)
            elif key == "bridge_window":
                from .bridge import MAX_WINDOW
                c["window"] = _int(v, key, 1, MAX_WINDOW)
            elif key == "bridge_inflight_in":
                c["inflight_in"] = _int(v, key, 1)
            else:
                raise ValueError("%s is not a bridge setting of this broker" % key)
        except ValueError as e:
            raise ValueError("line %d: %s" % (no, e))
    cfgs = []
    for b, (on, topic) in zip(out, notify):
        b["status_topic"] = topic if on else None
        _client_id(b)
        settings(b)  # refused now, not when the broker starts
        cfgs.append(b)
    if not cfgs:
        raise ValueError("no `connection NAME` in it")
    return cfgs


def _client_id(c):
    # mosquitto's default remote_clientid, HOSTNAME.NAME: two gateways
    # with one file keep two upstream sessions. Where there is no host name
    # (MicroPython) settings() makes it umqtt3-NAME.
    if c.get("client_id"):
        return
    from . import compat
    h = getattr(compat.socket, "gethostname", None)
    try:
        host = h() if h else ""
    except OSError:
        host = ""
    if host:
        c["client_id"] = "%s.%s" % (host, c["name"])


def add_flags(ap):
    """The broker CLI's bridge options (umqtt3_cli.broker.parser)."""
    ap.add_argument("--bridge-config", metavar="FILE",
                    help="bridges to upstream brokers, in mosquitto's `connection` "
                         "form (docs/bridge.md)")
    ap.add_argument("--bridge", metavar="HOST[:PORT][,HOST[:PORT]...]",
                    help="one bridge to this upstream broker, with --bridge-topic rules; "
                         "more addresses, comma-separated: failover, the first one main")
    ap.add_argument("--bridge-topic", metavar="RULE", action="append", default=[],
                    help="`PATTERN out|in|both QOS LOCAL-PREFIX REMOTE-PREFIX`, repeatable")


def from_args(a):
    """The bridges the command line asks for (a list, maybe empty);
    ValueError in one line for what is wrong."""
    cfgs = []
    if a.bridge_config:
        try:
            with open(a.bridge_config) as f:
                text = f.read()
        except OSError as e:
            raise ValueError("--bridge-config %s: %s" % (a.bridge_config, e.strerror or e))
        try:
            cfgs = parse(text)
        except ValueError as e:
            raise ValueError("--bridge-config %s: %s" % (a.bridge_config, e))
    if a.bridge:
        c = {"name": "bridge", "rules": a.bridge_topic}
        words = a.bridge.replace(",", " ").split()
        if not words:
            raise ValueError("--bridge: no address")
        try:
            _addresses(c, words)
        except ValueError as e:
            raise ValueError("--bridge: %s" % e)
        _client_id(c)
        try:
            settings(c)
        except ValueError as e:
            raise ValueError("--bridge: %s" % e)
        if any(b["name"] == "bridge" for b in cfgs):
            raise ValueError("--bridge: --bridge-config has a `connection bridge` already")
        cfgs.append(c)
    elif a.bridge_topic:
        raise ValueError("--bridge-topic without --bridge")
    return cfgs


def prepare(a, said=None):
    """Before the broker starts: the bridges asked for, and their queues
    made consistent with the store (bridge.undo_cut, which tells said of a
    torn tail it cut). None: no bridge."""
    cfgs = from_args(a)
    if not cfgs:
        return None
    if a.store:
        from .bridge import undo_cut
        undo_cut(a.store, None, said)
    return cfgs
