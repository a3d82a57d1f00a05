"""The job's Parquet output: windows partitioned by day, one file per batch
that writes windows, folded into fewer files as the day goes on.

    <out>/day=2026-11-25/batch-000000000042.parquet   a batch's windows of that day
    <out>/day=2026-11-25/fold-000000000420.parquet    batches up to 420, folded

A batch's file is named by its batch id and written whole (a temporary file,
then a rename), so a batch Spark replays after a crash writes the very same
file again: exactly once; a replayed batch that a fold already holds (its id
at most the fold's) writes nothing. Every `fold_every` batch files a day's batch files
are folded into one fold file; when a later day appears (the watermark has
passed the day's end, so none of its windows is still open) the day's files
become one. A fold writes and fsyncs its file before it removes the ones it replaces
(batch files a crash left beside it are removed by the day's next fold
call), so a reader may see a window twice for that moment: load() keeps one
copy of each (window, node, metric), and refuses two copies that differ.
Every file and its directory are fsynced before write_batch() returns.

A month of a fleet is then about one file a day (Spark's file sink wrote one
per batch: 114 files for 261 windows in a 2-node run).
"""
import os
import re

from .log import fsync_path

COLUMNS = ["window_start", "window_end", "node", "metric", "count", "min", "max", "mean"]
KEY = ["window_start", "node", "metric"]
_FILE = re.compile(r"(batch|fold)-(\d{12})\.parquet\Z")


def day_dirs(out):
    """The day directories of out, oldest first."""
    if not os.path.isdir(out):
        return []
    return sorted(os.path.join(out, d) for d in os.listdir(out) if d.startswith("day="))


def files(out):
    """Every Parquet file of the output (temporary files left out)."""
    return [os.path.join(d, f) for d in day_dirs(out) for f in sorted(os.listdir(d))
            if _FILE.match(f)]


def _write(table, path):
    # durable before it counts: Spark commits the batch once write_batch()
    # returns, and the source then trims the log that held its readings
    import pyarrow.parquet as pq
    tmp = path + ".tmp"
    pq.write_table(table, tmp)
    fsync_path(tmp)
    os.replace(tmp, path)
    fsync_path(os.path.dirname(path))


def _makedirs(d):
    # a new directory's entry is synced in its parent, up to one that was there
    new = []
    while not os.path.isdir(d):
        new.append(d)
        d = os.path.dirname(d)
    for d in reversed(new):
        os.makedirs(d, exist_ok=True)
        fsync_path(os.path.dirname(d))


def write_batch(out, table, batch_id, fold_every=360):
    """Write one batch's windows (a pyarrow Table in COLUMNS), a file per
    day, then fold what is due. Returns the files written."""
    import pyarrow.compute as pc
    if table.num_rows == 0:
        return []
    table = table.select(COLUMNS)
    days = pc.strftime(table.column("window_start"), format="%Y-%m-%d")
    written = []
    for day in sorted(set(days.to_pylist())):
        d = os.path.join(out, "day=" + day)
        _makedirs(os.path.abspath(d))
        if batch_id <= _folded(d):
            continue  # a replay of a batch a fold already holds: written once
        path = os.path.join(d, "batch-%012d.parquet" % batch_id)
        _write(table.filter(pc.equal(days, day)), path)
        written.append(path)
    dirs = day_dirs(out)
    for d in dirs[:-1]:
        fold(d, everything=True)  # a later day has windows: this one is complete
    if dirs:
        fold(dirs[-1], at_least=fold_every)
    return written


def _folded(day_dir):
    """The newest batch id the day's fold files hold, -1 without one."""
    ids = [int(m.group(2)) for m in map(_FILE.match, os.listdir(day_dir))
           if m and m.group(1) == "fold"]
    return max(ids, default=-1)


def fold(day_dir, at_least=2, everything=False):
    """Fold the day's batch files (everything: its fold files too) into one
    fold file once there are at_least of them. Returns the new file or None."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    names = [f for f in sorted(os.listdir(day_dir)) if _FILE.match(f)]
    folded = _folded(day_dir)
    stale = [f for f in names if f.startswith("batch-") and int(_FILE.match(f).group(2)) <= folded]
    for f in stale:  # left by a fold a crash cut short: that fold holds them
        os.remove(os.path.join(day_dir, f))
    names = [f for f in names if f not in stale]
    parts = names if everything else [f for f in names if f.startswith("batch-")]
    if len(parts) < max(at_least, 2):
        return None
    top = max(int(_FILE.match(f).group(2)) for f in parts)
    table = unique(pa.concat_tables([pq.read_table(os.path.join(day_dir, f)) for f in parts]))
    path = os.path.join(day_dir, "fold-%012d.parquet" % top)
    _write(table.sort_by([(k, "ascending") for k in KEY]), path)
    for f in parts:
        if os.path.join(day_dir, f) != path:
            os.remove(os.path.join(day_dir, f))
    return path


def unique(table):
    """One row per (window, node, metric); ValueError if two copies differ
    (a window counted twice)."""
    import pyarrow as pa
    df = table.to_pandas().drop_duplicates()
    if df.duplicated(KEY).any():
        raise ValueError("a window written twice with different values: %r"
                         % (df[df.duplicated(KEY, keep=False)].head(2).to_dict("records"),))
    return pa.Table.from_pandas(df, schema=table.schema, preserve_index=False)


def load(out):
    """The windows written so far, as a pandas DataFrame (empty if none)."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq
    for _ in range(10):
        try:
            tables = [pq.read_table(f) for f in files(out)]
            break
        except FileNotFoundError:  # folded away meanwhile: list again
            continue
    else:
        raise OSError("%s: files keep being folded away while read" % out)
    if not tables:
        return pd.DataFrame(columns=COLUMNS)
    return unique(pa.concat_tables(tables)).to_pandas()
