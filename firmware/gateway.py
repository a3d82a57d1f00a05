# gateway -- the broker on the board: Wi-Fi as a station (join a network) or
# as an access point (the sensor nodes join the gateway), then umqtt3's
# broker with its limits from the board profile, the watchdog fed per tick.
# With cfg["bridge"] the broker keeps a store and bridges to the upstream
# broker(s) (umqtt3.bridge, loaded only then; docs/bridge.md).
from umqtt3.compat import ticks_ms, sleep_ms
from umqtt3.broker import Broker

import config as _config
import node as _node


def access_point(secrets):
    """Open an access point named secrets["ap_ssid"] (WPA2 with
    secrets["ap_password"], at least 8 characters)."""
    import network
    ap = network.WLAN(network.AP_IF)
    ap.active(True)
    kw = {"essid": secrets.get("ap_ssid", "umqtt3-gw")}
    pw = secrets.get("ap_password", "")
    if pw:
        kw["password"] = pw
        # WPA2-PSK: WLAN.SEC_WPA2 on recent ports, network.AUTH_WPA2_PSK on older ESP32
        sec = getattr(network.WLAN, "SEC_WPA2", getattr(network, "AUTH_WPA2_PSK", None))
        if sec is not None:
            kw["security"] = sec
    ap.config(**kw)
    return ap


def bridge_settings(cfg, board, secrets):
    """The bridges of cfg["bridge"] (a dict or a list), with the board's
    queue and window and the secrets' credentials as defaults, checked
    (umqtt3.bridge.settings: ValueError names what is wrong, a missing
    cafile too)."""
    br = cfg.get("bridge")
    if not br:
        return []
    from umqtt3.bridge import settings
    out = []  # type: list[dict]
    for c in (br if isinstance(br, list) else [br]):
        c = dict(c)
        if "queue_size" not in c:
            c["queue_size"] = getattr(board, "BRIDGE_QUEUE", 64)
        if "window" not in c:
            c["window"] = getattr(board, "BRIDGE_WINDOW", 4)
        if "user" not in c and secrets.get("bridge_user"):
            c["user"] = secrets["bridge_user"]
            c["password"] = secrets.get("bridge_password", "")
        c = settings(c)
        if any(b["name"] == c["name"] for b in out):
            # one upstream session and one queue per name
            raise ValueError("bridge %s: a second bridge of that name" % c["name"])
        out.append(c)
    return out


def run(cfg, board, secrets=None, stop=None, log=None, host="0.0.0.0", bridges=None):
    """Serve until stop() returns True (forever on a device). bridges:
    bridge_settings(), when the caller checked them already."""
    secrets = secrets or {}
    wdt = None
    if getattr(board, "WDT_MS", 0) and cfg.get("watchdog", True):
        import machine
        wdt = machine.WDT(timeout=board.WDT_MS)
    feed = wdt.feed if wdt else None
    link = None
    if cfg.get("wifi_mode", "sta") == "ap":
        access_point(secrets)
    else:
        d = _config.DEFAULTS
        timeout = cfg.get("wifi_timeout_s", d["wifi_timeout_s"])
        w = _node.wifi(secrets, timeout, feed, ticks_ms, sleep_ms)
        link = _node.keep_joined(w, secrets, cfg.get("wifi_rejoin_s", d["wifi_rejoin_s"]), timeout,
                                 feed, ticks_ms, sleep_ms, log)
    users = None
    if secrets.get("mqtt_user"):
        users = {secrets["mqtt_user"].encode(): secrets.get("mqtt_password", "").encode()}
    if bridges is None:
        bridges = bridge_settings(cfg, board, secrets)
    store = None
    if bridges:
        store = cfg.get("gateway_store") or getattr(board, "GATEWAY_STORE", "/gw")
        from umqtt3.bridge import undo_cut
        undo_cut(store)  # before the broker loads its store
    b = Broker(host=host, port=cfg.get("port", 1883), max_clients=board.MAX_CLIENTS,
               max_packet=board.MAX_PACKET, users=users, log=log, store=store,
               allow_fat=cfg.get("allow_fat", False),
               max_queued_bytes=getattr(board, "MAX_QUEUED_BYTES", 4096),
               mem_budget=getattr(board, "MEM_BUDGET", 16384),
               queue_full=cfg.get("queue_full", _config.DEFAULTS["queue_full"]))
    if bridges:
        from umqtt3.bridge import install
        install(b, bridges)
    try:
        while not (stop and stop()):
            b.poll_once(100)
            if link:
                link()  # the Wi-Fi joined again when it stays down
            if wdt:
                wdt.feed()
    finally:
        b.close()
    return b
