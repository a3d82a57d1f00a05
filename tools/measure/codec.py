"""Benchmark: encode and decode one QoS 1 PUBLISH (16-byte payload) on CPython.

    python -m tools.measure.codec            # about 20 s
    python -m tools.measure.codec --quick    # about 2 s

umqtt3.codec is measured next to two peers in the same process and run, so
the ratios compare like with like on this machine. What is timed, per
operation:

umqtt3   encode   codec.encode_publish into a preallocated bytearray.
         decode   codec.decode of the whole packet into one reused Packet
                  (fixed header, UTF-8 and wildcard checks of the topic, packet
                  id); topic and payload stay spans of the receive buffer.
         decode+copy  the same, then bytes() of the topic and of the payload,
                  since both peers hand back new objects for them.
paho-mqtt encode  Client._send_publish, the method publish() calls to build
                  the packet bytes, with the client's outgoing queue step
                  (_packet_queue, which would write to the socket) replaced by
                  a stub that keeps the packet. publish()'s own bookkeeping
                  (message id, MQTTMessageInfo, locks) is not counted.
         decode   paho.mqtt._packet.decode_publish, which paho runs on the
                  bytes after the fixed header once _packet_read has read
                  them (that byte-by-byte socket read is not counted).
amqtt    encode   PublishPacket.build(...).to_bytes().
         decode   PublishPacket.from_stream(BufferReader(bytes)), amqtt's
                  in-memory reader. The decoder is a coroutine; it never
                  suspends on an in-memory reader, so it is driven with
                  send(None) and no event-loop cost is counted.
enc+dec  encode then decode of the bytes just made, in one loop.

Topics are passed as bytes to umqtt3 and paho (paho's _send_publish requires
bytes) and as str to amqtt (its API requires str). Every rate is the median of
the rounds; `spread` is (max - min) / median over the rounds. This prints; it
checks nothing beyond that all three produce the same packet bytes.
"""

import sys
import time

from tools import args as _args
from tools.measure import common as _common
from umqtt3 import codec

TOPIC = b"bench/umqtt3/sensor/temperature"
PAYLOAD = bytes(range(0x41, 0x41 + 16))  # 16 bytes
PID = 1


# ---------------------------------------------------------------- umqtt3

def ours():
    buf = bytearray(256)
    end = codec.encode_publish(buf, 0, TOPIC, PAYLOAD, qos=1, pid=PID)
    wire = bytes(buf[:end])
    rx = bytearray(wire)
    pkt = codec.Packet()
    assert codec.decode(pkt, rx, 0, end) == codec.PUBLISH
    assert bytes(pkt.topic) == TOPIC and bytes(pkt.payload) == PAYLOAD and pkt.pid == PID

    enc = codec.encode_publish
    dec = codec.decode

    def encode(n):
        b, t, p, i = buf, TOPIC, PAYLOAD, PID
        for _ in range(n):
            enc(b, 0, t, p, 1, i)

    def decode(n):
        k, b, e = pkt, rx, end
        for _ in range(n):
            dec(k, b, 0, e)

    def decode_copy(n):
        k, b, e = pkt, rx, end
        for _ in range(n):
            dec(k, b, 0, e)
            o = k.topic_off
            bytes(b[o:o + k.topic_len])
            o = k.payload_off
            bytes(b[o:o + k.payload_len])

    def both(n):
        k, b, t, p, i = pkt, buf, TOPIC, PAYLOAD, PID
        for _ in range(n):
            dec(k, b, 0, enc(b, 0, t, p, 1, i))

    return wire, {"encode": encode, "decode": decode, "decode+copy": decode_copy, "enc+dec": both}


# ---------------------------------------------------------------- paho-mqtt

class _NoSocket:
    """Stands in for paho's socket: never written to, only closed."""

    def close(self):
        pass


def paho():
    try:
        import paho.mqtt.client as mqtt
        from paho.mqtt import _packet
        from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode, MQTTProtocolVersion
    except ImportError:
        return None, None
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="bench",
                         protocol=MQTTProtocolVersion.MQTTv311)
    out = [None]

    def keep(command, packet, mid, qos, info=None):
        # stands in for the outgoing queue and the socket write
        out[0] = packet
        return MQTTErrorCode.MQTT_ERR_SUCCESS

    client._sock = _NoSocket()  # _send_publish refuses to build without a socket
    client._packet_queue = keep
    client._send_publish(PID, TOPIC, PAYLOAD, 1, False, False, None, None)
    wire = bytes(out[0])
    v311 = MQTTProtocolVersion.MQTTv311
    body_at = 2  # one remaining-length byte for this packet
    res = _packet.decode_publish(wire[0], wire[body_at:], v311)
    assert res.topic == TOPIC and bytes(res.payload) == PAYLOAD and res.mid == PID

    send = client._send_publish
    dec = _packet.decode_publish
    header = wire[0]
    body = wire[body_at:]

    def encode(n):
        s, t, p, i = send, TOPIC, PAYLOAD, PID
        for _ in range(n):
            s(i, t, p, 1, False, False, None, None)

    def decode(n):
        h, b, v = header, body, v311
        for _ in range(n):
            dec(h, b, v)

    def both(n):
        s, t, p, i, v, o = send, TOPIC, PAYLOAD, PID, v311, out
        for _ in range(n):
            s(i, t, p, 1, False, False, None, None)
            w = o[0]
            dec(w[0], w[body_at:], v)

    return wire, {"encode": encode, "decode": decode, "enc+dec": both}


# ---------------------------------------------------------------- amqtt

def _drive(coro):
    # Run a coroutine that never suspends (an in-memory reader) to its end.
    try:
        coro.send(None)
    except StopIteration as e:
        return e.value
    coro.close()
    raise RuntimeError("the amqtt decoder suspended; it cannot be driven directly")


def amqtt():
    try:
        from amqtt.adapters import BufferReader
        from amqtt.mqtt.publish import PublishPacket
    except ImportError:
        return None, None
    topic = TOPIC.decode()
    wire = bytes(PublishPacket.build(topic, PAYLOAD, PID, False, 1, False).to_bytes())
    pkt = _drive(PublishPacket.from_stream(BufferReader(wire)))
    assert pkt.topic_name == topic and pkt.data == PAYLOAD and pkt.packet_id == PID

    build = PublishPacket.build
    from_stream = PublishPacket.from_stream

    def encode(n):
        b, t, p, i = build, topic, PAYLOAD, PID
        for _ in range(n):
            b(t, p, i, False, 1, False).to_bytes()

    def decode(n):
        f, r, w, d = from_stream, BufferReader, wire, _drive
        for _ in range(n):
            d(f(r(w)))

    def both(n):
        b, t, p, i = build, topic, PAYLOAD, PID
        f, r, d = from_stream, BufferReader, _drive
        for _ in range(n):
            d(f(r(b(t, p, i, False, 1, False).to_bytes())))

    return wire, {"encode": encode, "decode": decode, "enc+dec": both}


# ---------------------------------------------------------------- main

COLUMNS = ("encode", "decode", "enc+dec")


def main(argv=None):
    ap = _args.parser("python -m tools.measure.codec", __doc__)
    ap.add_argument("--quick", action="store_true", help="3 short rounds (about 2 s in all)")
    ap.add_argument("--rounds", type=_args.count,
                    help="timed rounds per measurement (default 7, quick 3)")
    ap.add_argument("--seconds", type=_args.positive,
                    help="length of one round in seconds (default 0.2, quick 0.04)")
    args = ap.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 7)
    seconds = args.seconds or (0.04 if args.quick else 0.2)

    started = time.perf_counter()
    libs = []
    for name, dist, setup in (("umqtt3", None, ours), ("paho-mqtt", "paho-mqtt", paho),
                              ("amqtt", "amqtt", amqtt)):
        wire, runs = setup()
        version = _common.dist_version(dist) if dist else "checkout"
        libs.append((name, version, wire, runs))

    ref = libs[0][2]
    print("umqtt3 codec benchmark: one QoS 1 PUBLISH, MQTT 3.1.1")
    print("  topic %r (%d bytes), payload %d bytes, packet %d bytes"
          % (TOPIC.decode(), len(TOPIC), len(PAYLOAD), len(ref)))
    print("  python: %s" % _common.python_version())
    for name, version, wire, runs in libs:
        if runs is None:
            print("  %-10s not installed, skipped" % name)
        else:
            same = "same bytes" if wire == ref else "DIFFERENT bytes: %s" % wire.hex()
            print("  %-10s %-9s %s" % (name, version, same))
    print("  median of %d rounds of about %.2f s each (time.perf_counter)" % (rounds, seconds))
    print()

    results = {}
    print("  %-22s %14s %9s %12s" % ("operation", "ops/s", "spread", "ops/round"))
    for name, _, _, runs in libs:
        if runs is None:
            continue
        for op, run in runs.items():
            r = _common.measure(name + " " + op, run, rounds, seconds)
            results[(name, op)] = r
            print("  %-22s %14s %8.1f%% %12d" % (r.name, _common.fmt_rate(r.rate), r.spread * 100, r.n))
            sys.stdout.flush()
    print()

    print("  ratio umqtt3 / peer (higher: umqtt3 faster)")
    print("  %-12s" % "peer" + "".join("%12s" % c for c in COLUMNS))
    for name, _, _, runs in libs[1:]:
        if runs is None:
            continue
        cells = [_common.fmt_ratio(results[("umqtt3", c)].rate, results[(name, c)].rate)
                 for c in COLUMNS]
        print("  %-12s" % name + "".join("%12s" % c for c in cells))
    ours_copy = results[("umqtt3", "decode+copy")].rate
    for name, _, _, runs in libs[1:]:
        if runs is not None:
            print("  %-12s decode with topic/payload copied out: %s"
                  % (name, _common.fmt_ratio(ours_copy, results[(name, "decode")].rate)))
    print()
    print("  total run time %.1f s" % (time.perf_counter() - started))


if __name__ == "__main__":
    main()
