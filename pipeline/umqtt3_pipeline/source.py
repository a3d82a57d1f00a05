"""The Spark data source ``umqtt3`` (PySpark's Python Data Source API).

    spark.dataSource.register(Umqtt3DataSource)
    df = (spark.readStream.format("umqtt3")
          .option("broker", "127.0.0.1:1883").option("topics", "umqtt3/+/+")
          .option("qos", "1").option("clientId", "telemetry")
          .option("path", "/shared/ingest-log")
          .option("maxRowsPerBatch", "50000")
          .load())

The stream reader lives on the driver, in the Python worker Spark keeps for
the query; that is where the ingest (ingest.Ingest: the client and the
single writer of the log) runs, in a background thread. Offsets are log
positions ``{"pos": byte position, "n": message number}``; latestOffset()
sees only what is durable, commit() only trims the log, and executors only
read byte ranges of it. ``spark.read.format("umqtt3")`` with just ``path``
reads the log as a batch, for re-processing history.

Options: path (the log directory; required), broker (host:port), topics
(comma-separated filters), qos (1 or 2), clientId (fixed: it names the
persistent session), maxRowsPerBatch, minRowsPerBatch and maxTriggerDelay
(while the log keeps growing, a batch waits for that many rows, at most that
many seconds), keepalive, level (5: MQTT 5, the default; 4: MQTT 3.1.1), maxPacket (bytes: the
largest message the ingest takes, 65536 by default; ingest.MAX_PACKET),
segmentBytes, splitBytes, trim ("false" keeps the history for the batch
reader), user and passwordFile (the broker's login: a file whose first line
is the password, so that the password is in no plan or log), cafile,
capath, tls, certfile, keyfile, keyPasswordFile and alpn (TLS to the broker,
as the job's --cafile, --capath, --tls, --cert, --key, --key-password-file
and --tls-alpn: file paths, never key material or a passphrase), checkpoint (the query's
checkpointLocation: its new offsets, commits and state files are fsynced
before a trim), ingest ("external": no ingest here; path holds one log per
sub-directory, each written by its own ``python -m umqtt3_pipeline.ingest``,
for instance under one MQTT 5 shared subscription; offsets per log;
minRowsPerBatch counts the rows of all of them), columns (comma-separated
names of SCHEMA's columns: only these reach Spark; the job asks for the
eight it uses, so the payload never crosses into the JVM).
"""
import os
import time

from pyspark.sql.datasource import (DataSource, DataSourceReader, DataSourceStreamReader,
                                    InputPartition)
from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadMaxRows,
                                              SupportsTriggerAvailableNow)

from . import log as _log
from .telemetry import parse, parse_columns

# The row a bounded run's close adds to the stream (request_close()): its
# received_at is when the ingest stopped, and the job turns it into an event
# time that moves the watermark past every window the run saw.
CLOSE_TOPIC = "$close"
CLOSE_FILE = "CLOSE"

SCHEMA = ("topic string, payload binary, qos int, retain boolean, dup boolean, "
          "offset long, received_at timestamp, node string, metric string, value double, "
          "boot long, seq long, sent_at timestamp")

_BATCH_ROWS = 8192
QUIET = 0.1  # seconds without a sync after which the log is not growing
# seconds latestOffset() waits at most for minRowsPerBatch in one call: more
# than the default maxTriggerDelay, so that a wait ends in a batch with rows.
# Answering "no batch yet" makes Spark run a batch without data whenever the
# last one moved the watermark (as good as every batch of a stream), at the
# fixed cost of a batch: about 0.3 s of the JVM's CPU (docs/pipeline.md).
BLOCK = 2.0


NAMES = tuple(c.split()[0] for c in SCHEMA.split(", "))


def columns(options):
    """The columns option as a tuple of SCHEMA's names, in SCHEMA's order
    (all of them without it); ValueError for a name SCHEMA has not."""
    given = {k.lower(): v for k, v in options.items()}.get("columns")
    if not given:
        return NAMES
    want = {c.strip() for c in given.split(",") if c.strip()}
    unknown = sorted(want.difference(NAMES))
    if unknown:
        raise ValueError("umqtt3: option 'columns': no column %s (the columns: %s)"
                         % (", ".join(unknown), ", ".join(NAMES)))
    return tuple(c for c in NAMES if c in want)


def schema_of(names):
    """The Spark schema (DDL) of the given columns of SCHEMA."""
    return ", ".join(c for c in SCHEMA.split(", ") if c.split()[0] in names)


def _arrow_schema(names=NAMES):
    import pyarrow as pa
    ts = pa.timestamp("us", tz="UTC")  # Spark's TimestampType in Arrow
    full = pa.schema([("topic", pa.string()), ("payload", pa.binary()), ("qos", pa.int32()),
                      ("retain", pa.bool_()), ("dup", pa.bool_()), ("offset", pa.int64()),
                      ("received_at", ts), ("node", pa.string()), ("metric", pa.string()),
                      ("value", pa.float64()), ("boot", pa.int64()), ("seq", pa.int64()),
                      ("sent_at", ts)])
    return pa.schema([f for f in full if f.name in names])


class LogRange(InputPartition):
    """Messages from position start (message number n) to position end, of
    the log in the sub-directory part (None: the log is the path itself)."""

    def __init__(self, start, n, end, part=None):
        self.start = start
        self.n = n
        self.end = end
        self.part = part

    def __repr__(self):
        return "LogRange(%d, %d, %d, %r)" % (self.start, self.n, self.end, self.part)


def rows(path, part, names=NAMES):
    """The messages of a LogRange as Arrow record batches in the given
    columns of SCHEMA, built column by column: the log's fields picked out by
    numpy (log.read_columns), the readings parsed by Arrow's compute
    functions (telemetry.parse_columns); a batch with a row those cannot take
    is built row by row (_rows_slow), with the same result."""
    import pyarrow as pa
    import pyarrow.compute as pc
    schema = _arrow_schema(names)
    for numbers, flags, t_ms, topics, payloads in _log.read_columns(path, part.start, part.n,
                                                                   part.end, _BATCH_ROWS):
        try:
            text = topics.cast(pa.string())  # UTF-8 [MQTT-1.5.3-1], checked here
        except pa.ArrowInvalid:
            text = None
        p = None
        if text is not None and t_ms.min() >= 0 and t_ms.max() <= _MAX_MS:
            p = parse_columns(text, payloads)
        if p is None:  # a row only parse() takes
            yield _rows_slow(numbers, flags, t_ms, topics, payloads, schema)
            continue
        ts = pa.timestamp("us", tz="UTC")  # as in _arrow_schema()
        cols = {"topic": text, "payload": payloads, "qos": pa.array(flags & 3, pa.int32()),
                "retain": pa.array((flags & 4) != 0), "dup": pa.array((flags & 8) != 0),
                "offset": pa.array(numbers), "received_at": pa.array(t_ms * 1000).cast(ts),
                "node": p["node"], "metric": p["metric"], "value": p["value"],
                "boot": p["boot"], "seq": p["seq"],
                # int(t * 1000000) of parse()'s seconds: truncated toward zero
                "sent_at": pc.multiply(p["t"], 1e6).cast(pa.int64(), safe=False).cast(ts)}
        yield pa.RecordBatch.from_arrays([cols[f.name] for f in schema], schema=schema)


_MAX_MS = (1 << 63) // 1000 - 1  # received ms that fit Spark's timestamps (µs)


def _rows_slow(numbers, flags, t_ms, topics, payloads, schema):
    """One record batch of the given columns, row by row with parse()."""
    import pyarrow as pa
    cols = {f.name: [] for f in schema}
    for i, tp in enumerate(topics.to_pylist()):
        pl = payloads[i].as_py()
        fl = int(flags[i])
        p = parse(tp, pl)
        row = {"topic": tp.decode("utf-8", "replace"), "payload": pl, "qos": fl & 3,
               "retain": bool(fl & 4), "dup": bool(fl & 8), "offset": int(numbers[i]),
               "received_at": int(t_ms[i]) * 1000}
        if p is None:
            row.update(node=None, metric=None, value=None, boot=None, seq=None, sent_at=None)
        else:
            # parse() keeps only numbers these columns hold (telemetry._fits)
            row.update(node=p[0], metric=p[1], value=p[2], boot=p[3], seq=p[4],
                       sent_at=None if p[5] is None else int(p[5] * 1000000))
        for k, v in cols.items():
            v.append(row[k])
    return pa.RecordBatch.from_arrays([pa.array(cols[f.name], f.type) for f in schema],
                                      schema=schema)


class CloseMark(InputPartition):
    """The one row of a close: at (ms since 1970) is when the ingest stopped."""

    def __init__(self, at):
        self.at = at


def close_row(at_ms, names=NAMES):
    """The close as an Arrow record batch in the given columns of SCHEMA."""
    import pyarrow as pa
    schema = _arrow_schema(names)
    given = {"topic": CLOSE_TOPIC, "received_at": at_ms * 1000}
    cols = [[given.get(f.name)] for f in schema]
    return pa.RecordBatch.from_arrays([pa.array(c, f.type) for c, f in zip(cols, schema)],
                                      schema=schema)


def request_close(path, clock=time.time):
    """Ask the stream reader of the log at path to close: at its next
    latestOffset() it stops the ingest (the broker keeps what comes next for
    the session) and ends its stream with the close row once the batch
    reaches the end of the log. Returns the request's time in ms: every
    offset whose "close" is at least that has closed."""
    at = int(clock() * 1000)
    tmp = os.path.join(path, CLOSE_FILE + ".tmp")
    with open(tmp, "w") as f:
        f.write("%d\n" % at)
    os.replace(tmp, os.path.join(path, CLOSE_FILE))
    return at


def cancel_close(path):
    """Forget a close request a previous run left behind."""
    try:
        os.remove(os.path.join(path, CLOSE_FILE))
    except FileNotFoundError:
        pass


def _close_requested(path):
    try:
        with open(os.path.join(path, CLOSE_FILE)) as f:
            return int(f.read().strip() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def split(start, n, end, cuts, part=None):
    """LogRanges covering [start, end), cut at the given (position, number)."""
    parts = []
    for pos, m in cuts:
        parts.append(LogRange(start, n, pos, part))
        start, n = pos, m
    parts.append(LogRange(start, n, end, part))
    return parts


def log_parts(path):
    """The logs under path that separate ingest processes write (one
    sub-directory each, python -m umqtt3_pipeline.ingest --log path/NAME):
    their names, sorted."""
    if not os.path.isdir(path):
        return []
    return sorted(d for d in os.listdir(path)
                  if os.path.isdir(os.path.join(path, d)) and _log.segments(os.path.join(path, d)))


def _offset(pos, n, closed):
    """An offset; "close" (the last close, ms) only once there was one, so
    offsets of runs that never closed read as before."""
    o = {"pos": pos, "n": n}
    if closed:
        o["close"] = closed
    return o


def _lower(options):
    # Spark hands options over with their names lower-cased
    o = {k.lower(): v for k, v in options.items()}
    if "path" not in o:
        raise ValueError("umqtt3: option 'path' (the ingest log directory) is required")
    return o


def _bool(s, default):
    if s is None:
        return default
    return str(s).lower() in ("1", "true", "yes", "on")


class Umqtt3DataSource(DataSource):
    @classmethod
    def name(cls):
        return "umqtt3"

    def schema(self):
        return schema_of(columns(self.options))

    def streamReader(self, schema):
        return StreamReader(self.options)

    def reader(self, schema):
        return BatchReader(self.options)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Picklable: the ingest starts on the first call that needs it (Spark
    builds this object in several processes, and after a restart its first
    call may be partitions()); executors only call read()."""

    def __init__(self, options):
        options = _lower(options)
        self.options = options
        self.path = options["path"]
        self.names = columns(options)
        self.max_rows = int(options.get("maxrowsperbatch", 0) or 0)
        # Kafka's minOffsetsPerTrigger and maxTriggerDelay: each batch costs
        # Spark a fixed part, so under load fewer, larger batches go faster
        self.min_rows = int(options.get("minrowsperbatch", 0) or 0)
        self.max_delay = float(options.get("maxtriggerdelay", 1) or 0)
        self._waiting = None  # (message number, when rows after it were first seen)
        self.trim = _bool(options.get("trim"), True)
        self.checkpoint = options.get("checkpoint")  # the query's checkpointLocation
        self.split_bytes = int(options.get("splitbytes", 1 << 20))
        self.target = None  # Trigger.AvailableNow: the end fixed at its start
        # "external": the logs are written by ingest processes of their own,
        # one sub-directory each (scale-out over a shared subscription)
        self.external = options.get("ingest", "") == "external"
        self.target_parts = None  # the same for those: {name: (position, number)}
        self._tails = {}  # {name: (position, number)}: how far each was scanned
        self._ingest = None

    def __getstate__(self):
        d = dict(self.__dict__)
        d["_ingest"] = None
        return d

    def _log(self):
        if self._ingest is None:
            from .ingest import MAX_PACKET, Ingest, read_password
            from .tls import from_options
            o = self.options
            topics = [t.strip() for t in o.get("topics", "#").split(",") if t.strip()]
            self._ingest = Ingest(self.path, o.get("broker", "127.0.0.1:1883"), topics,
                                  o.get("clientid", "umqtt3-spark"), int(o.get("qos", 1)),
                                  int(o.get("keepalive", 30)),
                                  int(o.get("segmentbytes", 64 << 20)),
                                  level=int(o.get("level", 5)), user=o.get("user") or None,
                                  password=read_password(o.get("passwordfile")),
                                  tls=from_options(o), cert=bool(o.get("certfile")),
                                  bufsize=int(o.get("maxpacket", MAX_PACKET))).start()
        self._ingest.check()
        return self._ingest.log

    def initialOffset(self):
        if self.external:
            return {"parts": {}}
        pos, n = self._log().first()
        return {"pos": pos, "n": n}

    def _external_end(self, start):
        """Each partition's end of whole records, from start on (a partition
        that appeared since starts at its first record), and how many
        messages lie between start and those ends. A partition's end found
        before is scanned on from, not from start again."""
        parts = dict(start.get("parts", {}))
        rows = 0
        for name in log_parts(self.path):
            d = os.path.join(self.path, name)
            at = parts.get(name)
            if at is None:
                first = _log.first(d)
                if first is None:
                    continue
                at = {"pos": first[0], "n": first[1]}
            if self.target_parts is not None:
                pos, n = self.target_parts.get(name, (at["pos"], at["n"]))
            else:
                pos, n = at["pos"], at["n"]
                done = _log.synced(d)
                if done is not None:
                    # only what the ingest has synced: a power loss cannot take it
                    if done[0] > pos:
                        pos, n = done
                else:  # a writer that publishes no synced end: its whole records
                    seen = self._tails.get(name)
                    if seen is not None and seen[0] >= pos:
                        pos, n = seen
                    pos, n = _log.tail(d, pos, n)
                    self._tails[name] = (pos, n)
            parts[name] = {"pos": pos, "n": n}
            rows += n - at["n"]
        return parts, rows

    def _growing(self):
        """Whether an ingest wrote to its log within the last QUIET seconds."""
        now = time.time()
        for name in log_parts(self.path):
            d = os.path.join(self.path, name)
            bases = _log.segments(d)
            try:
                if bases and now - os.stat(os.path.join(d, _log.seg_name(bases[-1]))).st_mtime < QUIET:
                    return True
            except FileNotFoundError:
                continue
        return False

    def _external_wait(self, start, parts, rows):
        """minRowsPerBatch over every partition, as _wait for one log: the
        ends to read up to, or None for "no batch yet"."""
        key = tuple(sorted((k, v["n"]) for k, v in start.get("parts", {}).items()))
        now = time.monotonic()
        if self._waiting is None or self._waiting[0] != key:
            self._waiting = (key, now)
        until = min(self._waiting[1] + self.max_delay, now + BLOCK)
        while True:
            if rows >= self.min_rows or now >= self._waiting[1] + self.max_delay:
                return parts
            if not self._growing():
                return parts
            if now >= until:
                return None
            time.sleep(0.02)
            parts, rows = self._external_end(start)
            now = time.monotonic()

    def getDefaultReadLimit(self):
        return ReadMaxRows(self.max_rows) if self.max_rows > 0 else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self):
        if self.external:
            ends = self._external_end({"parts": {}})[0]
            self.target_parts = {k: (v["pos"], v["n"]) for k, v in ends.items()}
            return
        self.target = self._log().durable()

    def latestOffset(self, start, limit):
        if self.external:
            # the ingests run apart and never wait for Spark: no maxRowsPerBatch
            closed = start.get("close", 0)
            asked = _close_requested(self.path)
            parts, rows = self._external_end(start)
            if asked <= closed and self.target_parts is None and 0 < rows < self.min_rows:
                parts = self._external_wait(start, parts, rows)
                if parts is None:
                    return start  # no batch yet: more rows are coming in
            if asked > closed:
                closed = max(asked, int(time.time() * 1000))
            end = {"parts": parts}
            if closed:
                end["close"] = closed
            return end
        log = self._log()
        closed = start.get("close", 0)
        asked = _close_requested(self.path)
        if asked > closed:
            self._ingest.pause()  # nothing enters the log after the close
        end, n = self.target or log.durable()
        if self.target is None and asked <= closed and 0 < n - start["n"] < self.min_rows:
            end, n = self._wait(log, start)
            if end is None:
                return start  # no batch yet: more rows are coming in
        if isinstance(limit, ReadMaxRows) and n - start["n"] > limit.max_rows:
            end, n = _log.advance(self.path, start["pos"], start["n"], end, limit.max_rows)
        elif asked > closed:
            # the close comes after every row of the log: a later row would
            # be behind the watermark it moves
            closed = max(asked, int(time.time() * 1000))
        return _offset(end, n, closed)

    def _wait(self, log, start):
        """While the log grows (a quiet one is read at once) and the rows
        after start are fewer than min_rows and have waited less than
        max_delay: wait here, up to BLOCK seconds a call, so that Spark
        neither asks again and again nor runs a batch without data meanwhile
        (each costs its JVM and this process CPU the ingest's thread needs).
        Returns the durable end to read up
        to, or (None, None) to answer "no batch yet"."""
        now = time.monotonic()
        if self._waiting is None or self._waiting[0] != start["n"]:
            self._waiting = (start["n"], now)
        until = min(self._waiting[1] + self.max_delay, now + BLOCK)
        while True:
            end, n = log.durable()
            now = time.monotonic()
            if n - start["n"] >= self.min_rows or now - log.synced_at >= QUIET:
                return end, n
            if now >= self._waiting[1] + self.max_delay:
                return end, n
            if now >= until:
                return None, None
            time.sleep(0.005)

    def reportLatestOffset(self):
        if self.external:
            return {"parts": self._external_end({"parts": {}})[0]}
        pos, n = self._log().durable()
        return {"pos": pos, "n": n}

    def partitions(self, start, end):
        parts = []
        if end.get("close", 0) > start.get("close", 0):
            parts.append(CloseMark(end["close"]))
        if self.external:
            for name, e in sorted(end["parts"].items()):
                d = os.path.join(self.path, name)
                s = start.get("parts", {}).get(name)
                if s is None:
                    first = _log.first(d)
                    s = {"pos": first[0], "n": first[1]}
                if e["pos"] > s["pos"]:
                    cuts = _log.cuts_between(d, s["pos"], s["n"], e["pos"], self.split_bytes)
                    parts.extend(split(s["pos"], s["n"], e["pos"], cuts, name))
            return parts
        log = self._log()
        if end["pos"] <= start["pos"]:
            return parts
        for p in split(start["pos"], start["n"], end["pos"],
                       log.cut_points(start["pos"], end["pos"])):
            if p.end - p.start > 2 * self.split_bytes:
                # not covered by the writer's index (written before a restart)
                cuts = _log.cuts_between(self.path, p.start, p.n, p.end, self.split_bytes)
                parts.extend(split(p.start, p.n, p.end, cuts))
            else:
                parts.append(p)
        return parts

    def read(self, partition):
        if isinstance(partition, CloseMark):
            return iter([close_row(partition.at, self.names)])
        return rows(_part_path(self.path, partition), partition, self.names)

    def commit(self, end):
        if self.external:
            return  # the ingests own their logs; the history stays for the batch reader
        log = self._log()
        if self.trim:
            if self.checkpoint:
                # Spark wrote the batch's commit only to the page cache: a
                # power loss after the trim would leave a checkpoint that
                # replays a batch whose segments are gone
                sync_checkpoint(self.checkpoint)
            log.trim(end["pos"])

    def stop(self):
        if self._ingest is not None:
            self._ingest.stop()
            self._ingest = None


def sync_checkpoint(root):
    """fsync what Spark wrote for the last committed batch N of the
    checkpoint at root (a path or a file: URI; other file systems are left
    to their own durability): offsets/N, commits/N, every state store's
    files of version N + 1, and their directories. Returns N, or None."""
    from urllib.parse import urlparse
    if "://" in root or root.startswith("file:"):
        u = urlparse(root)
        if u.scheme != "file":
            return None
        root = u.path
    commits = os.path.join(root, "commits")
    done = [int(f) for f in os.listdir(commits) if f.isdigit()] if os.path.isdir(commits) else []
    if not done:
        return None
    n = max(done)
    for sub in ("offsets", "commits"):
        f = os.path.join(root, sub, str(n))
        if os.path.exists(f):
            _log.fsync_path(f)
        _log.fsync_path(os.path.join(root, sub))
    state = os.path.join(root, "state")
    version = "%d." % (n + 1)
    for op in os.listdir(state) if os.path.isdir(state) else ():
        for part in os.listdir(os.path.join(state, op)):
            d = os.path.join(state, op, part)
            if part.isdigit() and os.path.isdir(d):
                for f in os.listdir(d):
                    if f.startswith(version):
                        _log.fsync_path(os.path.join(d, f))
                _log.fsync_path(d)
    if os.path.exists(os.path.join(root, "metadata")):
        _log.fsync_path(os.path.join(root, "metadata"))  # the query's id, written once at its start
    _log.fsync_path(root)
    return n


def _part_path(path, partition):
    return path if partition.part is None else os.path.join(path, partition.part)


class BatchReader(DataSourceReader):
    """The whole retained log (or every partition's, with ingest=external),
    one partition per split_bytes of it."""

    def __init__(self, options):
        options = _lower(options)
        self.path = options["path"]
        self.names = columns(options)
        self.split_bytes = int(options.get("splitbytes", 16 << 20))
        self.external = options.get("ingest", "") == "external"

    def partitions(self):
        parts = []
        for name in log_parts(self.path) if self.external else [None]:
            d = self.path if name is None else os.path.join(self.path, name)
            bases = _log.segments(d)
            for i, base in enumerate(bases):
                hdr = _log.read_header(d, base)
                end = bases[i + 1] if i + 1 < len(bases) else None
                if hdr is None:
                    if end is not None:  # only the last one may be a torn create
                        raise _log.Corrupt("log %s: segment %s: bad header at position %d"
                                           % (d, _log.seg_name(base), base))
                    continue
                cuts, stop = _log.boundaries(d, base, hdr[0], hdr[1], self.split_bytes)
                parts.extend(split(base + hdr[0], hdr[1], end if end is not None else stop, cuts,
                                   name))
        return parts or [LogRange(0, 0, 0)]

    def read(self, partition):
        return rows(_part_path(self.path, partition), partition, self.names)
