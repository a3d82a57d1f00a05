"""The ingest log on its own (pipeline/umqtt3_pipeline/log.py) and the firmware
format's parsing: no broker, no Spark."""
import os

import pytest

from umqtt3_pipeline import log as L
from umqtt3_pipeline.telemetry import dedup_key, parse


def msgs(path):
    """Every message in the log, read the way executors read it."""
    bases = L.segments(path)
    h = L.read_header(path, bases[0])
    return list(L.read_range(path, bases[0] + h[0], h[1]))


def fill(g, k, qos=1, first=0, sync_every=3, topic=b"umqtt3/n1/temp"):
    for i in range(first, first + k):
        g.append_msg(topic, b"%d" % i, qos, 0, 0, i % 65535 + 1, 1000 + i)
        if i % sync_every == sync_every - 1:
            g.sync()
    g.sync()


def test_appended_messages_read_back_in_order_with_numbers(tmp_path):
    g = L.Log(str(tmp_path))
    fill(g, 50)
    got = msgs(str(tmp_path))
    assert [m[6] for m in got] == [b"%d" % i for i in range(50)]
    assert [m[1] for m in got] == list(range(50))  # message numbers, Kafka's "offset"
    assert [m[4] for m in got] == [1000 + i for i in range(50)]
    assert g.durable()[1] == 50
    g.close()


def test_only_synced_records_are_durable(tmp_path):
    g = L.Log(str(tmp_path))
    fill(g, 4, sync_every=100)
    end = g.durable()
    g.append_msg(b"a/b/c", b"x", 1, 0, 0, 9, 1)
    assert g.durable() == end  # appended, not yet synced: invisible to Spark
    g.sync()
    assert g.durable()[1] == end[1] + 1 and g.durable()[0] > end[0]
    g.close()


@pytest.mark.parametrize("damage", ["torn", "crc", "length"])
def test_recovery_cuts_a_torn_tail(tmp_path, damage):
    p = str(tmp_path)
    g = L.Log(p)
    fill(g, 10)
    end = g.durable()
    g.close()
    seg = os.path.join(p, L.seg_name(L.segments(p)[-1]))
    rec = L.encode_record(L.MSG, 1, 3, 5, b"a/b/c", b"half-written")
    if damage == "torn":
        bad = rec[:len(rec) - 4]
    elif damage == "crc":
        bad = rec[:-1] + bytes([rec[-1] ^ 1])
    else:
        bad = b"\xff\xff\xff\xff" + rec[4:]
    with open(seg, "ab") as f:
        f.write(bad)
    g = L.Log(p)
    assert g.durable() == end
    assert os.path.getsize(seg) == end[0] - L.segments(p)[-1]  # cut off on disk
    fill(g, 2, first=10)
    assert [m[6] for m in msgs(p)] == [b"%d" % i for i in range(12)]
    assert [m[1] for m in msgs(p)] == list(range(12))
    g.close()


def test_segments_roll_and_positions_continue_across_reopen(tmp_path):
    p = str(tmp_path)
    g = L.Log(p, segment_bytes=400)
    fill(g, 40)
    assert len(L.segments(p)) > 3
    end = g.durable()
    g.close()
    g = L.Log(p, segment_bytes=400)
    assert g.durable() == end
    fill(g, 10, first=40)
    assert [m[1] for m in msgs(p)] == list(range(50))
    pos = [m[0] for m in msgs(p)]
    assert pos == sorted(set(pos))
    g.close()


def test_trim_deletes_only_segments_before_the_committed_position(tmp_path):
    p = str(tmp_path)
    g = L.Log(p, segment_bytes=400)
    fill(g, 40)
    all_msgs = msgs(p)
    cut = all_msgs[25]  # Spark committed up to message 25
    before = L.segments(p)
    dropped = g.trim(cut[0])
    after = L.segments(p)
    assert dropped == len(before) - len(after) > 0
    assert after[0] <= cut[0]  # the segment holding message 25 stays
    first = g.first()
    assert first[1] <= 25
    rest = list(L.read_range(p, first[0], first[1], g.durable()[0]))
    assert [m[1] for m in rest] == list(range(first[1], 40))
    assert rest == [m for m in all_msgs if m[1] >= first[1]]
    g.trim(g.durable()[0] + 1000)
    assert L.segments(p) == after[-1:]  # the segment being written always stays
    g.close()


def test_advance_stops_after_max_rows(tmp_path):
    p = str(tmp_path)
    g = L.Log(p, segment_bytes=400)
    fill(g, 30)
    first = g.first()
    end = g.durable()
    pos, n = L.advance(p, first[0], first[1], end[0], 7)
    assert n == 7
    assert [m[1] for m in L.read_range(p, first[0], first[1], pos)] == list(range(7))
    pos2, n2 = L.advance(p, pos, n, end[0], 100)
    assert (pos2, n2) == end
    g.close()


def test_held_qos2_ids_survive_reopen_and_releases(tmp_path):
    p = str(tmp_path)
    g = L.Log(p, segment_bytes=300)
    g.append_msg(b"a/b/c", b"1", 2, 0, 0, 11, 1)
    g.append_msg(b"a/b/c", b"2", 2, 0, 0, 12, 1)
    g.sync()
    g.append_release(11)
    g.sync()
    g.close()
    g = L.Log(p, segment_bytes=300)
    assert g.held == {12}
    fill(g, 30)  # roll: the new segments' headers carry id 12
    g.close()
    assert len(L.segments(p)) > 2
    g = L.Log(p, segment_bytes=300)
    assert 12 in g.held
    g.append_release(12)
    g.append_msg(b"a/b/c", b"3", 2, 0, 0, 13, 1)
    g.append_clear()  # the broker lost our session
    g.sync()
    g.close()
    g = L.Log(p, segment_bytes=300)
    assert g.held == set()
    g.close()


def test_an_unsynced_release_is_not_durable(tmp_path):
    p = str(tmp_path)
    g = L.Log(p)
    g.append_msg(b"a/b/c", b"1", 2, 0, 0, 7, 1)
    g.sync()
    g.append_release(7)  # crash before the group commit: PUBCOMP never left
    g.lockf.close()
    g.f.close()
    g = L.Log(p)
    assert g.held == {7}  # the broker's PUBREL comes again
    g.close()


def test_a_rolled_segment_with_a_torn_header_is_dropped(tmp_path):
    p = str(tmp_path)
    g = L.Log(p, segment_bytes=300)
    fill(g, 10)
    end = g.durable()
    g.close()
    with open(os.path.join(p, L.seg_name(end[0] + 1)), "wb") as f:
        f.write(L.MAGIC + b"\x00")  # a crash while the next header was written
    g = L.Log(p, segment_bytes=300)
    assert g.durable() == end
    assert L.segments(p)[-1] < end[0]
    g.close()


def test_one_writer_per_directory(tmp_path):
    g = L.Log(str(tmp_path))
    with pytest.raises(OSError):
        L.Log(str(tmp_path), lock_timeout=0.2)
    g.close()
    L.Log(str(tmp_path)).close()


def test_parse_firmware_readings_and_dedup_keys():
    t, p = b"umqtt3/node1/temp", b'{"v":21.50,"boot":4711,"seq":17}'
    assert parse(t, p) == ("node1", "temp", 21.5, 4711, 17, None)
    assert parse(b"site/a/umqtt3/n2/vbat", b'{"v": 3, "boot": 1, "seq": 2, "t": 1700000000.5}') == \
        ("n2", "vbat", 3.0, 1, 2, 1700000000.5)
    # a reading sent again has the same key; another reading never does
    assert dedup_key(t, p) == dedup_key(t, p) == ("node1", 4711, 17)
    assert dedup_key(t, b'{"v":21.50,"boot":4711,"seq":18}') != dedup_key(t, p)
    assert dedup_key(t, b'{"v":21.50,"boot":4712,"seq":17}') != dedup_key(t, p)
    for topic, payload in [(b"umqtt3/node1/status", b"online"), (b"temp", p),
                           (t, b'{"v":"warm","boot":1,"seq":1}'), (t, b'{"v":1,"seq":1}'),
                           (t, b"{not json"), (t, b'{"v":true,"boot":1,"seq":1}'),
                           (t, b'{"v":nan,"boot":1,"seq":1}'), (b"a/\xff/temp", p)]:
        assert parse(topic, payload) is None


@pytest.mark.parametrize("payload", [
    b'{"v":1,"boot":1,"seq":1,"t":99999999999999}',  # the firmware's form, beyond year 290000
    b'{"v":1,"boot":1,"seq":1,"t":NaN}', b'{"v":1,"boot":1,"seq":1,"t":Infinity}',
    b'{"v":1,"boot":1,"seq":1,"t":1e300}', b'{"v":1,"boot":1,"seq":1,"t":-1e300}',
    b'{"v":1,"boot":1,"seq":1,"t":%d}' % 10**400,
    b'{"v":NaN,"boot":1,"seq":1}', b'{"v":Infinity,"boot":1,"seq":1}',
    b'{"v":-Infinity,"boot":1,"seq":1}', b'{"v":1e999,"boot":1,"seq":1}',
    b'{"v":1%s,"boot":1,"seq":1}' % (b"0" * 400), b'{"v":%d,"boot":1,"seq":1}' % 10**400,
    b'{"v":1,"boot":9223372036854775808,"seq":1}', b'{"v":1,"boot":1,"seq":-9223372036854775809}',
    b'{"v":1.7e308,"boot":1,"seq":1}', b'{"v":-1.7e308,"boot":1,"seq":1}',  # a mean of inf
    b'{"v":1.5,"boot":true,"seq":1}', b'{"v":1.5,"boot":1,"seq":false}',  # stopped the job
    b'{"v":1,"boot":1,"seq":1,"x":' + b"[" * 3000 + b"]" * 3000 + b"}",  # RecursionError
])
def test_parse_refuses_numbers_spark_cannot_hold(payload):
    # a time Spark's timestamps cannot hold would stop the job at every
    # restart; a value that is no finite number would spoil its window's
    # min/max/mean; a boot or seq beyond 64 bits would be null and merge
    # readings in the de-duplication key
    assert parse(b"umqtt3/n1/temp", payload) is None


def test_parse_keeps_what_spark_holds():
    t = b"umqtt3/n1/temp"
    assert parse(t, b'{"v":1,"boot":4294967295,"seq":9223372036854775807,"t":9000000000000}') \
        == ("n1", "temp", 1.0, 4294967295, (1 << 63) - 1, 9e12)
    assert parse(t, b'{"v":-1e300, "boot":-9223372036854775808, "seq":0, "t":-1.5}') \
        == ("n1", "temp", -1e300, -(1 << 63), 0, -1.5)


def test_parse_fast_path_agrees_with_json():
    # the firmware's exact format is read without json; every variant must
    # give what json.loads gives, and whatever the fast path misses falls back
    import json
    t = b"umqtt3/n7/temp"
    for v in ("21.50", "-3.25", "0", "-17", "12345678901234567890", "1e3", "1.5E-2", "-0.00"):
        for boot, seq in (("4711", "17"), ("-1", "0"), ("0", "99999999999")):
            for sep in ((",", ":"), (", ", ": ")):
                pl = ('{"v"%s%s%s"boot"%s%s%s"seq"%s%s}' % (sep[1], v, sep[0], sep[1], boot,
                                                          sep[0], sep[1], seq)).encode()
                d = json.loads(pl)
                assert parse(t, pl) == ("n7", "temp", float(d["v"]), d["boot"], d["seq"], None)
                assert type(parse(t, pl)[2]) is float
                # with the node's own time, as the firmware adds it when it knows it
                for tt in ("1700000000", "1700000000.25", "0", "-5", "017", "1e9"):
                    plt = pl[:-1] + (',"t"%s%s}' % (sep[1], tt)).encode()
                    want = json.loads(plt)["t"] if tt not in ("017",) else None
                    got = parse(t, plt)
                    if tt == "017":  # not JSON: refused by both paths
                        assert got is None
                    else:
                        assert got == ("n7", "temp", float(d["v"]), d["boot"], d["seq"], want)
    for pl in (b'{"v":1.,"boot":1,"seq":1}', b'{"v":01,"boot":1,"seq":1}',
               b'{"v":1,"boot":1.5,"seq":1}', b'{"v":1,"boot":1,"seq":1}x',
               b'{"v":1,"boot":1,"seq":1}\n{"v":2}'):
        assert parse(t, pl) is None


def flip(path, pos):
    """Flip one bit at log position pos (a bad sector, bit rot)."""
    base = max(b for b in L.segments(path) if b <= pos)
    with open(os.path.join(path, L.seg_name(base)), "r+b") as f:
        f.seek(pos - base)
        b = f.read(1)
        f.seek(pos - base)
        f.write(bytes([b[0] ^ 1]))


def record_starts(path, base):
    with open(os.path.join(path, L.seg_name(base)), "rb") as f:
        buf = f.read()
    return [base + o for o, _, _ in L.scan(buf, L.decode_header(buf)[0])]


def test_a_damaged_record_length_is_cut_as_a_torn_tail_and_kept_aside(tmp_path):
    # a length made larger reaches past the end, as a torn record's does,
    # and what lies inside a record's length is its data (below): cut, but
    # the bytes are kept in the segment's .bad file
    p = str(tmp_path)
    g = L.Log(p)
    fill(g, 10, sync_every=1)
    g.close()
    base = L.segments(p)[-1]
    name = os.path.join(p, L.seg_name(base))
    with open(name, "rb") as f:
        before = f.read()
    at = record_starts(p, base)[3]
    flip(p, at + 1)
    L.Log(p).close()
    with open(name + ".bad", "rb") as f:
        kept = f.read()
    assert os.path.getsize(name) == at - base
    assert len(kept) == len(before) - (at - base) and kept[2:] == before[at - base + 2:]


def test_a_torn_record_whose_payload_holds_records_opens(tmp_path):
    # a publisher's payload may hold whole log records; a crash that tears
    # such a record must leave a log that opens (the torn tail cut)
    p = str(tmp_path)
    g = L.Log(p)
    fill(g, 3, sync_every=1)
    g.close()
    base = L.segments(p)[-1]
    name = os.path.join(p, L.seg_name(base))
    with open(name, "rb") as f:
        synced = f.read()
    inner = synced[record_starts(p, base)[1] - base:]  # whole records, as a payload
    g = L.Log(p)
    g.append_msg(b"a/b/c", inner + b"." * 40, 1, 0, 0, 0, 1)
    g.sync()
    g.close()
    with open(name, "rb") as f:
        full = f.read()
    with open(name, "wb") as f:
        f.write(full[:len(synced) + 8 + 40 + len(inner)])  # torn inside the payload
    g = L.Log(p)
    assert g.durable()[0] == base + len(synced)  # the three synced records, nothing cut of them
    g.close()


@pytest.mark.parametrize("where", ["body"])
def test_recovery_refuses_a_corrupt_record_with_synced_records_after_it(tmp_path, where):
    p = str(tmp_path)
    g = L.Log(p)
    fill(g, 10, sync_every=1)  # every record synced, so acknowledged
    end = g.durable()
    g.close()
    base = L.segments(p)[-1]
    at = record_starts(p, base)[3]
    flip(p, at + (30 if where == "body" else 1))
    size = os.path.getsize(os.path.join(p, L.seg_name(base)))
    with pytest.raises(L.Corrupt) as e:
        L.Log(p)
    assert L.seg_name(base) in str(e.value) and "position %d" % at in str(e.value)
    assert os.path.getsize(os.path.join(p, L.seg_name(base))) == size  # nothing cut
    flip(p, at + (30 if where == "body" else 1))  # repaired: every record is back
    g = L.Log(p)
    assert g.durable() == end
    g.close()


def test_recovery_refuses_a_corrupt_header_of_a_segment_with_records(tmp_path):
    p = str(tmp_path)
    g = L.Log(p, segment_bytes=600)
    fill(g, 40, sync_every=1)
    g.close()
    bases = L.segments(p)
    assert len(bases) > 2
    flip(p, bases[-1] + 6)  # the last segment's first message number
    with pytest.raises(L.Corrupt) as e:
        L.Log(p, segment_bytes=600)
    assert L.seg_name(bases[-1]) in str(e.value)
    assert L.segments(p) == bases  # nothing deleted
    flip(p, bases[-1] + 6)
    flip(p, bases[-2] + 6)  # an older segment's header
    with pytest.raises(L.Corrupt) as e:
        L.Log(p, segment_bytes=600)
    assert L.seg_name(bases[-2]) in str(e.value)
    assert L.segments(p) == bases


def test_readers_refuse_a_corrupt_record_inside_the_range(tmp_path):
    from umqtt3_pipeline import source
    p = str(tmp_path)
    g = L.Log(p, segment_bytes=600)
    fill(g, 40, sync_every=1)
    end = g.durable()
    first = g.first()
    bases = L.segments(p)
    g.close()
    every = list(source.rows(p, source.LogRange(first[0], first[1], end[0])))
    assert sum(b.num_rows for b in every) == 40
    at = record_starts(p, bases[0])[1]  # the 2nd record of the first (closed) segment
    flip(p, at + 30)
    with pytest.raises(L.Corrupt) as e:
        list(source.rows(p, source.LogRange(first[0], first[1], end[0])))
    assert L.seg_name(bases[0]) in str(e.value) and "position %d" % at in str(e.value)
    with pytest.raises(L.Corrupt):
        list(L.read_range(p, first[0], first[1], end[0]))
    with pytest.raises(L.Corrupt):
        list(L.read_range(p, first[0], first[1]))  # to the end: an older segment is whole
    with pytest.raises(L.Corrupt):
        source.BatchReader({"path": p}).partitions()  # the batch reader reads that range
    flip(p, at + 30)
    at = record_starts(p, bases[-1])[1]  # the last segment, the one being written
    flip(p, at + 30)
    with pytest.raises(L.Corrupt):
        source.BatchReader({"path": p}).partitions()  # not read as its torn tail
    # ranges that do not reach the bad record read as before
    got = list(L.read_range(p, first[0], first[1], at))
    assert [m[1] for m in got] == list(range(40))[:len(got)]
    assert got[-1][0] == record_starts(p, bases[-1])[0]


def test_tail_refuses_a_corrupt_record_in_a_segment_that_has_a_successor(tmp_path):
    p = str(tmp_path)
    g = L.Log(p, segment_bytes=600)
    fill(g, 40, sync_every=1)
    first, end = g.first(), g.durable()
    bases = L.segments(p)
    g.close()
    assert L.tail(p, first[0], first[1]) == end
    at = record_starts(p, bases[0])[2]
    flip(p, at + 30)
    with pytest.raises(L.Corrupt) as e:  # not a stall at the bad record for ever
        L.tail(p, first[0], first[1])
    assert "position %d" % at in str(e.value)
