"""The firmware's message format, parsed: topic ``<prefix>/<node>/<metric>``,
payload ``{"v": value, "boot": boot_id, "seq": n, "t": time}`` (firmware/node.py)
where ``"t"``, the reading's own time in seconds since 1970, is there only when
the node knows the time (its clock synced over NTP); readings without it are
valid and fall back to their arrival time downstream. Status messages (``<prefix>/<node>/status``,
plain text) and anything else parse to None."""
import json
import re

# (node, boot, seq) names a reading: boot is random per boot of the node and
# seq counts its readings, so a reading the node or the broker sends again
# has the same key, and two different readings never do.
DEDUP_KEY = ("node", "boot", "seq")


# exactly what firmware/node.py sends ('{"v":%s,"boot":%d,"seq":%d}', then
# ',"t":%d' when it knows the time), read without the json module (a third of
# the reader's time per row); anything else, spaces included, goes through
# json.loads
_INT = rb"(-?(?:0|[1-9][0-9]*))"  # JSON's grammar: no leading zeros
_FIRMWARE = re.compile(rb'\{"v":(-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?),"boot":' + _INT
                       + rb',"seq":' + _INT + rb'(?:,"t":((?:0|[1-9][0-9]*)(?:\.[0-9]+)?))?\}\Z')


def parse(topic, payload):
    """(node, metric, value, boot, seq, t) or None."""
    if payload[:1] != b"{":
        return None
    parts = topic.split(b"/")
    if len(parts) < 3:
        return None
    m = _FIRMWARE.match(payload)
    if m is not None:
        try:
            t = m.group(4)
            return (parts[-2].decode(), parts[-1].decode(), float(m.group(1)),
                    int(m.group(2)), int(m.group(3)), None if t is None else float(t))
        except UnicodeDecodeError:
            return None
    try:
        d = json.loads(payload)
        v = d["v"]
        boot = d["boot"]
        seq = d["seq"]
    except (ValueError, KeyError, TypeError):
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    if not isinstance(boot, int) or not isinstance(seq, int):
        return None
    t = d.get("t")
    if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float))):
        t = None
    try:
        node = parts[-2].decode()
        metric = parts[-1].decode()
    except UnicodeDecodeError:
        return None
    return node, metric, float(v), boot, seq, t


def dedup_key(topic, payload):
    """The key duplicates share, or None when the message has none."""
    p = parse(topic, payload)
    if p is None:
        return None
    return p[0], p[3], p[4]
