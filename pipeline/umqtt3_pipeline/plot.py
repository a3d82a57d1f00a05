"""Each node's windowed series from the job's Parquet output, as one PNG: a
panel per metric, a line per node (the window mean, shaded from min to max).

    python -m umqtt3_pipeline.plot OUT_DIR telemetry.png
"""
import json
import os
import sys
from urllib.parse import unquote, urlparse


def committed_files(out):
    """The Parquet files of the batches the file sink committed, from its
    _spark_metadata log (files of a batch still being written, or of one that
    a crash cut short, are not in it)."""
    meta = os.path.join(out, "_spark_metadata")
    if not os.path.isdir(meta):
        return []
    files = {}
    for name in os.listdir(meta):
        if name.startswith(".") or name.endswith(".tmp") or name.endswith(".crc"):
            continue
        with open(os.path.join(meta, name)) as f:
            for line in f.read().splitlines()[1:]:
                e = json.loads(line)
                if e.get("action", "add") == "delete":
                    files.pop(e["path"], None)
                else:
                    files[e["path"]] = e
    out = []
    for p in sorted(files):
        u = urlparse(p)
        out.append(unquote(u.path) if u.scheme in ("file", "") else p)
    return out


def load(out):
    """The windows committed so far, as a pandas DataFrame (empty if none)."""
    import pandas as pd
    import pyarrow.parquet as pq
    files = committed_files(out)
    if not files:
        return pd.DataFrame(columns=["window_start", "window_end", "node", "metric", "count",
                                     "min", "max", "mean"])
    return pd.concat([pq.read_table(f).to_pandas() for f in files], ignore_index=True)


def plot(out, png):
    """Write the PNG; returns the number of windows plotted."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    df = load(out)
    metrics = sorted(df["metric"].unique()) or ["(no windows yet)"]
    fig, axes = plt.subplots(len(metrics), 1, figsize=(9, 2.6 * len(metrics)), squeeze=False,
                             sharex=True)
    for ax, metric in zip(axes[:, 0], metrics):
        ax.set_title(metric, fontsize=10, loc="left")
        m = df[df["metric"] == metric]
        for node in sorted(m["node"].unique()):
            s = m[m["node"] == node].sort_values("window_start")
            ax.plot(s["window_start"], s["mean"], marker=".", label=node)
            ax.fill_between(s["window_start"], s["min"], s["max"], alpha=0.2)
        if len(m):
            ax.legend(fontsize=8, loc="upper left")
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("window start (UTC)")
    fig.tight_layout()
    fig.savefig(png, dpi=80)
    plt.close(fig)
    return len(df)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    print("%d windows -> %s" % (plot(sys.argv[1], sys.argv[2]), sys.argv[2]))
