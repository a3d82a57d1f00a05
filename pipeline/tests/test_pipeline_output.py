"""The job's output files: partitioned by day, a batch replayed after a
crash written once, a day's files folded into one, two differing copies of a
window refused."""
import os

import pytest

pa = pytest.importorskip("pyarrow")


def batch(day, hours, node="n1", mean=2.0):
    import pandas as pd
    rows = []
    for h in hours:
        t = pd.Timestamp("%s %02d:00:00" % (day, h), tz="UTC")
        rows.append(dict(window_start=t, window_end=t + pd.Timedelta(seconds=10), node=node,
                         metric="temp", count=1, min=mean, max=mean, mean=mean))
    return pa.Table.from_pandas(pd.DataFrame(rows))


def names(out):
    from umqtt3_pipeline.output import files
    return sorted(os.path.relpath(f, out) for f in files(out))


def test_batches_by_day_replays_once_and_days_fold_into_one_file(tmp_path):
    from umqtt3_pipeline.output import load, write_batch
    out = str(tmp_path)
    for i in range(5):
        write_batch(out, batch("2026-11-24", [i]), i, fold_every=3)
    # every 3 batch files of the current day become one fold file
    assert names(out) == ["day=2026-11-24/batch-000000000003.parquet",
                          "day=2026-11-24/batch-000000000004.parquet",
                          "day=2026-11-24/fold-000000000002.parquet"]
    write_batch(out, batch("2026-11-24", [4]), 4, fold_every=3)  # batch 4 replayed
    assert len(load(out)) == 5
    # a batch with windows of the next day: the day before is complete, one file
    write_batch(out, batch("2026-11-24", [23]), 5, fold_every=3)
    write_batch(out, batch("2026-11-25", [0, 1]), 6, fold_every=3)
    assert names(out) == ["day=2026-11-24/fold-000000000005.parquet",
                          "day=2026-11-25/batch-000000000006.parquet"]
    df = load(out)
    assert len(df) == 8 and not df.duplicated(["window_start", "node", "metric"]).any()
    # a fold that stopped before removing what it folded: still every window once
    write_batch(out, batch("2026-11-24", [2]), 2, fold_every=3)
    assert len(load(out)) == 8
    assert write_batch(out, batch("2026-11-24", [1]).slice(0, 0), 9) == []  # nothing to write


def test_a_window_written_twice_with_other_values_is_refused(tmp_path):
    from umqtt3_pipeline.output import load, write_batch
    write_batch(str(tmp_path), batch("2026-11-24", [1]), 0)
    write_batch(str(tmp_path), batch("2026-11-24", [1], mean=3.0), 1)
    with pytest.raises(ValueError, match="written twice"):
        load(str(tmp_path))


def test_a_batch_replayed_after_its_fold_writes_nothing(tmp_path):
    import pyarrow.parquet as pq
    from umqtt3_pipeline.output import load, write_batch
    out = str(tmp_path)
    for i in range(1, 5):
        write_batch(out, batch("2026-11-24", [i]), i, fold_every=4)  # batch 4 folds 1..4
    assert names(out) == ["day=2026-11-24/fold-000000000004.parquet"]
    assert write_batch(out, batch("2026-11-24", [4]), 4, fold_every=4) == []  # replayed
    assert write_batch(out, batch("2026-11-24", [3]), 3, fold_every=4) == []
    assert names(out) == ["day=2026-11-24/fold-000000000004.parquet"]
    assert pq.read_table(out).num_rows == 4  # as spark.read.parquet(out) reads the directory
    assert len(load(out)) == 4
    write_batch(out, batch("2026-11-24", [5]), 5, fold_every=4)  # the next batch is written
    assert pq.read_table(out).num_rows == 5
