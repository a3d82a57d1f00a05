"""Each node's windowed series from the job's Parquet output, as one PNG: a
title with the span, a panel per metric with its unit, a line per node (the
window mean, shaded from min to max) and a legend that says so.

    python -m umqtt3_pipeline.plot OUT_DIR telemetry.png
"""
import os
import sys


def load(out):
    """The windows written so far, as a pandas DataFrame (empty if none)."""
    from .output import load as _load
    return _load(out)


# the unit of each built-in metric of firmware/sensors.py; plot(units=...)
# adds or overrides (a node's own sensor)
UNITS = {"temp": "°C", "vbat": "V", "uptime": "s", "mem": "bytes"}


def literal(name):
    """A name from a topic as matplotlib shows it: its "$" literal, not the
    start of mathtext ("$\\frac$" would stop the plot)."""
    return name.replace("$", r"\$")


def unusable(path):
    """Why matplotlib cannot write a figure to path (its suffix names no
    format it writes), or None."""
    suffix = os.path.splitext(path)[1][1:].lower()
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        return "the plot needs matplotlib (pip install 'umqtt3[spark]', or '.[spark]' in a clone)"
    kinds = FigureCanvasBase.get_supported_filetypes()
    if suffix not in kinds:
        return ("%s: the name must end in a format matplotlib writes: .%s"
                % (path, ", .".join(sorted(kinds))))
    return None


def title(df):
    """What the figure shows: nodes, window length and the time span."""
    if not len(df):
        return "umqtt3 telemetry: no windows yet"
    width = (df["window_end"] - df["window_start"]).min().total_seconds()
    return "umqtt3 telemetry: %d node(s), %g s windows, %s to %s UTC" % (
        df["node"].nunique(), width, df["window_start"].min().strftime("%Y-%m-%d %H:%M:%S"),
        df["window_end"].max().strftime("%H:%M:%S"))


def plot(out, png, units=None):
    """Write the PNG; returns the number of windows plotted. units:
    {metric: unit} on top of UNITS."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.dates as mdates
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    u = dict(UNITS, **(units or {}))
    df = load(out)
    metrics = sorted(df["metric"].unique()) or ["(no windows yet)"]
    fig, axes = plt.subplots(len(metrics), 1, figsize=(9, 2.6 * len(metrics) + 0.6),
                             squeeze=False, sharex=True)
    fig.suptitle(title(df), fontsize=11)
    # one colour per node in every panel, one legend for the figure
    nodes = sorted(df["node"].unique())
    colours = {n: "C%d" % (i % 10) for i, n in enumerate(nodes)}
    for ax, metric in zip(axes[:, 0], metrics):
        ax.set_title(literal(metric), fontsize=10, loc="left")
        ax.set_ylabel(u.get(metric, ""))
        m = df[df["metric"] == metric]
        for node in sorted(m["node"].unique()):
            s = m[m["node"] == node].sort_values("window_start")
            mid = s["window_start"] + (s["window_end"] - s["window_start"]) / 2
            ax.plot(mid, s["mean"], marker=".", color=colours[node])
            ax.fill_between(mid, s["min"], s["max"], alpha=0.2, color=colours[node])
        ax.grid(alpha=0.3)
    if nodes:
        handles = [Line2D([], [], marker=".", color=colours[n], label=literal(n)) for n in nodes]
        handles.append(Patch(color="grey", alpha=0.3, label="min to max of a window"))
        axes[0, 0].legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1),
                          title="line: window mean", title_fontsize=8)
    # a few ticks, each as short as it can be: labels of a short run do not run together
    ticks = mdates.AutoDateLocator(maxticks=8)
    axes[-1, 0].xaxis.set_major_locator(ticks)
    axes[-1, 0].xaxis.set_major_formatter(mdates.ConciseDateFormatter(ticks))
    axes[-1, 0].set_xlabel("window middle (UTC)")
    fig.tight_layout()
    fig.savefig(png, dpi=80)
    plt.close(fig)
    return len(df)


def main(argv=None):
    """python -m umqtt3_pipeline.plot OUT PNG; a missing OUT or a PNG that
    cannot be written refused in one line with exit status 2."""
    from .cli import Help, Parser
    ap = Parser(prog="python -m umqtt3_pipeline.plot", description=__doc__, formatter_class=Help)
    ap.add_argument("out", help="the job's Parquet output directory (--out)")
    ap.add_argument("png", help="the PNG to write (or .svg, .pdf: a format matplotlib writes)")
    a = ap.parse_args(argv)
    if not os.path.isdir(a.out):
        ap.error("%s: no such directory (the job's --out)" % a.out)
    why = unusable(a.png)
    if why:
        ap.error(why)
    where = os.path.dirname(os.path.abspath(a.png))
    if not os.path.isdir(where):
        ap.error("%s: %s is not a directory" % (a.png, where))
    try:
        n = plot(a.out, a.png)
    except OSError as e:
        ap.error("%s: %s" % (a.png, e.strerror or e))
    print("%d windows -> %s" % (n, a.png))
    return 0


if __name__ == "__main__":
    sys.exit(main())
