# gateway -- the broker on the board: Wi-Fi as a station (join a network) or
# as an access point (the sensor nodes join the gateway), then umqtt3's
# broker with its limits from the board profile, the watchdog fed per tick.
from umqtt3.compat import ticks_ms, sleep_ms
from umqtt3.broker import Broker

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


def run(cfg, board, secrets=None, stop=None, log=None, host="0.0.0.0"):
    """Serve until stop() returns True (forever on a device)."""
    secrets = secrets or {}
    wdt = None
    if getattr(board, "WDT_MS", 0) and cfg.get("watchdog", True):
        import machine
        wdt = machine.WDT(timeout=board.WDT_MS)
    if cfg.get("wifi_mode", "sta") == "ap":
        access_point(secrets)
    else:
        _node.wifi(secrets, cfg.get("wifi_timeout_s", 20),
                   wdt.feed if wdt else None, ticks_ms, sleep_ms)
    users = None
    if secrets.get("mqtt_user"):
        users = {secrets["mqtt_user"].encode(): secrets.get("mqtt_password", "").encode()}
    b = Broker(host=host, port=cfg.get("port", 1883), max_clients=board.MAX_CLIENTS,
               max_packet=board.MAX_PACKET, users=users, log=log)
    try:
        while not (stop and stop()):
            b.poll_once(100)
            if wdt:
                wdt.feed()
    finally:
        b.close()
    return b
