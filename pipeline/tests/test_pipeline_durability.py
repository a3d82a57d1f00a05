"""What the job writes besides the log is on disk before the log is trimmed:
the Parquet output before write_batch() returns (Spark then commits the
batch), the checkpoint's files of the committed batch before commit()
deletes segments. os.fsync is watched (the path of each fsynced descriptor,
in order with renames, removals and the trim); no Spark."""
import os

import pytest

pa = pytest.importorskip("pyarrow")

from test_pipeline_output import batch  # noqa: E402


@pytest.fixture
def events(monkeypatch):
    """[("fsync", path) | ("replace", dst) | ("remove", path) | ("trim", pos)]"""
    seen = []
    real_fsync, real_replace, real_remove = os.fsync, os.replace, os.remove

    def fsync(fd):
        seen.append(("fsync", os.readlink("/proc/self/fd/%d" % fd)))
        return real_fsync(fd)

    def replace(src, dst):
        seen.append(("replace", os.path.abspath(dst)))
        return real_replace(src, dst)

    def remove(path):
        seen.append(("remove", os.path.abspath(path)))
        return real_remove(path)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "remove", remove)
    return seen


def test_output_files_and_directories_are_synced_before_they_count(tmp_path, events):
    from umqtt3_pipeline.output import write_batch
    out = str(tmp_path / "out")
    day = os.path.join(out, "day=2026-11-24")
    f1 = os.path.join(day, "batch-000000000001.parquet")
    assert write_batch(out, batch("2026-11-24", [1]), 1, fold_every=2) == [f1]
    assert ("fsync", f1 + ".tmp") in events  # the file's data, before its rename
    i = events.index(("replace", f1))
    assert events.index(("fsync", f1 + ".tmp")) < i
    assert ("fsync", day) in events[i:]  # the rename itself
    assert ("fsync", out) in events and ("fsync", str(tmp_path)) in events  # new directories
    events.clear()
    write_batch(out, batch("2026-11-24", [2]), 2, fold_every=2)  # folds 1 and 2
    fold = os.path.join(day, "fold-000000000002.parquet")
    first_remove = min(i for i, e in enumerate(events) if e[0] == "remove")
    synced = events[:first_remove]
    assert ("fsync", fold + ".tmp") in synced and ("replace", fold) in synced
    assert synced.index(("replace", fold)) < synced.index(("fsync", day), synced.index(("replace", fold)))


def test_a_fold_cut_short_by_a_crash_leaves_no_copy_behind(tmp_path):
    import shutil

    import pyarrow.parquet as pq
    from umqtt3_pipeline.output import write_batch
    out = str(tmp_path / "out")
    day = os.path.join(out, "day=2026-11-24")
    write_batch(out, batch("2026-11-24", [1]), 1, fold_every=3)
    keep = str(tmp_path / "copy")
    shutil.copy(os.path.join(day, "batch-000000000001.parquet"), keep)
    write_batch(out, batch("2026-11-24", [2]), 2, fold_every=3)
    write_batch(out, batch("2026-11-24", [3]), 3, fold_every=3)  # fold-3
    shutil.copy(keep, os.path.join(day, "batch-000000000001.parquet"))  # its unlink was lost
    write_batch(out, batch("2026-11-24", [4]), 4, fold_every=3)
    assert sorted(os.listdir(day)) == ["batch-000000000004.parquet", "fold-000000000003.parquet"]
    assert pq.read_table(out).num_rows == 4


def checkpoint(root, n):
    """The files Spark's checkpoint holds after batch n committed."""
    for sub in ("offsets", "commits"):
        os.makedirs(os.path.join(root, sub), exist_ok=True)
        for i in range(n + 1):
            open(os.path.join(root, sub, str(i)), "w").close()
    for op in ("0", "1"):
        d = os.path.join(root, "state", op, "0")
        os.makedirs(os.path.join(root, "state", op, "_metadata"), exist_ok=True)
        os.makedirs(d, exist_ok=True)
        for v in range(1, n + 2):
            open(os.path.join(d, "%d.delta" % v), "w").close()
    open(os.path.join(root, "metadata"), "w").close()


def test_commit_syncs_the_checkpoint_before_it_trims_the_log(tmp_path, events, monkeypatch):
    from umqtt3_pipeline import log as L
    from umqtt3_pipeline.ingest import Ingest
    from umqtt3_pipeline.source import StreamReader
    ck = str(tmp_path / "ck")
    checkpoint(ck, 7)
    path = str(tmp_path / "log")
    r = StreamReader({"path": path, "checkpoint": ck})
    ing = Ingest(path)  # not started: its log is enough for commit()
    ing.log = L.Log(path, segment_bytes=300)
    for i in range(20):
        ing.log.append_msg(b"a/b/c", b"%d" % i, 1, 0, 0, i + 1, 1)
        ing.log.sync()
    r._ingest = ing
    monkeypatch.setattr(ing.log, "trim", lambda pos: events.append(("trim", pos)))
    events.clear()
    end = ing.log.durable()
    r.commit({"pos": end[0], "n": end[1]})
    trim = events.index(("trim", end[0]))
    synced = {p for k, p in events[:trim] if k == "fsync"}
    for f in ("offsets/7", "commits/7", "offsets", "commits", "state/0/0/8.delta",
              "state/1/0/8.delta", "state/0/0", "state/1/0", "metadata", ""):
        assert os.path.normpath(os.path.join(ck, f)) in synced, f
    assert os.path.join(ck, "commits/6") not in synced  # only the new batch's files
    ing.log.close()
