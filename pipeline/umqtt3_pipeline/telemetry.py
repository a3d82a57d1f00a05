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

# What Spark's columns hold: boot and seq as 64-bit integers (a key part
# out of range would become null and merge distinct readings), "t" as a
# timestamp in microseconds since 1970 (int64; a little under 2**63 / 1e6
# seconds, so that int(t * 1e6) fits after rounding). A reading beyond
# these, or with a value or time that is not a finite number (json.loads
# takes NaN, Infinity and 1e999), is refused as malformed.
MIN_INT, MAX_INT = -(1 << 63), (1 << 63) - 1
MAX_T = 9.2e12  # seconds, either side of 1970
# a value's magnitude at most this: a window's mean sums its values as a
# double, and two readings of 1.7e308 made it infinite
MAX_V = 1e300


# exactly what firmware/node.py sends ('{"v":%s,"boot":%d,"seq":%d}', then
# ',"t":%d' when it knows the time), read without the json module (a third of
# the reader's time per row); anything else, spaces included, goes through
# json.loads
_INT = rb"(-?(?:0|[1-9][0-9]*))"  # JSON's grammar: no leading zeros
_FIRMWARE = re.compile(rb'\{"v":(-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?),"boot":' + _INT
                       + rb',"seq":' + _INT + rb'(?:,"t":((?:0|[1-9][0-9]*)(?:\.[0-9]+)?))?\}\Z')


# The same two patterns for Arrow's regular expressions (RE2), to parse a
# whole column at once (parse_columns): the node and metric are the last two
# levels of a topic of at least three
_NUM = r"-?(?:0|[1-9][0-9]*)"
_FIRMWARE_RE2 = (r'\A\{"v":(?P<v>' + _NUM + r'(?:\.[0-9]+)?),"boot":(?P<boot>' + _NUM
                 + r'),"seq":(?P<seq>' + _NUM
                 + r')(?:,"t":(?P<t>(?:0|[1-9][0-9]*)(?:\.[0-9]+)?))?\}\z')
_LEVELS_RE2 = r"/(?P<node>[^/]*)/(?P<metric>[^/]*)\z"


def parse_columns(topics, payloads):
    """parse() for whole columns (topics: an Arrow string array, payloads: a
    binary one), with Arrow's compute functions: {"node", "metric", "value",
    "boot", "seq", "t": Arrow arrays, null where parse() gives None}, or
    None when a row needs parse()'s own path (a payload in JSON other than
    the firmware's, a number too large for Arrow's casts or for Spark): the
    caller then parses row by row."""
    import pyarrow as pa
    import pyarrow.compute as pc
    levels = pc.extract_regex(topics, _LEVELS_RE2)
    fw = pc.extract_regex(payloads, _FIRMWARE_RE2)
    ok = pc.and_(pc.is_valid(levels), pc.is_valid(fw))
    # rows parse() would try json.loads on: a topic with a node and a metric
    # and a payload starting with "{" that is not the firmware's
    other = pc.and_kleene(pc.is_valid(levels), pc.invert(pc.is_valid(fw)))
    if pc.any(pc.and_(other, pc.starts_with(payloads, b"{"))).as_py():
        return None

    def number(name, kind):  # the digits of a group, where both patterns matched
        return pc.if_else(ok, fw.field(name), None).cast(pa.string()).cast(kind)
    try:
        value = number("v", pa.float64())
        boot = number("boot", pa.int64())
        seq = number("seq", pa.int64())
        t_text = pc.if_else(ok, fw.field("t"), None)
        # "t" is optional: RE2 gives "" where the group took no part
        t = pc.if_else(pc.equal(pc.binary_length(t_text), 0), None, t_text) \
            .cast(pa.string()).cast(pa.float64())
    except pa.ArrowInvalid:
        return None  # an integer beyond int64: parse() refuses the reading
    # digits beyond a double's range (inf), a time beyond Spark's: parse() refuses them
    if (not pc.all(pc.is_finite(value)).as_py()
            or pc.any(pc.greater_equal(t, MAX_T)).as_py()):
        return None
    return {"node": pc.if_else(ok, levels.field("node"), None),
            "metric": pc.if_else(ok, levels.field("metric"), None),
            "value": value, "boot": boot, "seq": seq, "t": t}


def _fits(v, boot, seq, t):
    """The numbers fit Spark's columns (MIN_INT, MAX_T)."""
    return (-MAX_V <= v <= MAX_V and MIN_INT <= boot <= MAX_INT and MIN_INT <= seq <= MAX_INT
            and (t is None or -MAX_T < t < MAX_T))  # False for NaN


def parse(topic, payload):
    """(node, metric, value, boot, seq, t) or None (not a reading, or one
    whose numbers Spark cannot hold: _fits)."""
    if payload[:1] != b"{":
        return None
    parts = topic.split(b"/")
    if len(parts) < 3:
        return None
    m = _FIRMWARE.match(payload)
    if m is not None:
        try:
            t = m.group(4)
            r = (parts[-2].decode(), parts[-1].decode(), float(m.group(1)),
                 int(m.group(2)), int(m.group(3)), None if t is None else float(t))
        except UnicodeDecodeError:
            return None
        return r if _fits(*r[2:]) else None
    try:
        d = json.loads(payload)
        v = d["v"]
        boot = d["boot"]
        seq = d["seq"]
    except (ValueError, KeyError, TypeError, RecursionError):
        return None  # (RecursionError: a payload nested thousands deep)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        v = float(v)
    except OverflowError:  # an integer beyond a double's range
        return None
    if type(boot) is not int or type(seq) is not int:
        return None  # (a bool is an int to isinstance(), not to Spark's long column)
    t = d.get("t")
    if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float))):
        t = None
    try:
        node = parts[-2].decode()
        metric = parts[-1].decode()
    except UnicodeDecodeError:
        return None
    return (node, metric, v, boot, seq, t) if _fits(v, boot, seq, t) else None


def dedup_key(topic, payload):
    """The key duplicates share, or None when the message has none."""
    p = parse(topic, payload)
    if p is None:
        return None
    return p[0], p[3], p[4]
