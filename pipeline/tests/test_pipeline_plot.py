"""The plot: a title with the span, a unit per metric, one legend that
explains the lines and the bands."""
import pytest

pytest.importorskip("matplotlib")


def windows_dir(tmp_path, nodes=("a", "b"), metrics=("temp", "soil")):
    import pandas as pd
    import pyarrow as pa
    from umqtt3_pipeline.output import write_batch
    t0 = pd.Timestamp("2026-11-25 10:00:00", tz="UTC")
    rows = [dict(window_start=t0 + pd.Timedelta(seconds=10 * i),
                 window_end=t0 + pd.Timedelta(seconds=10 * i + 10), node=node, metric=metric,
                 count=3, min=1.0, max=3.0, mean=2.0)
            for i in range(6) for node in nodes for metric in metrics]
    out = tmp_path / "out"
    write_batch(str(out), pa.Table.from_pandas(pd.DataFrame(rows)), 0)
    return out


def test_plot_has_a_title_units_and_a_legend(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt
    from umqtt3_pipeline import plot
    figs = []
    monkeypatch.setattr(plt, "close", figs.append)  # keep the figure to look at it
    png = tmp_path / "t.png"
    assert plot.plot(str(windows_dir(tmp_path)), str(png), units={"soil": "%"}) == 24
    assert png.stat().st_size > 0
    fig = figs[0]
    assert fig.get_suptitle() == \
        "umqtt3 telemetry: 2 node(s), 10 s windows, 2026-11-25 10:00:00 to 10:01:00 UTC"
    axes = fig.get_axes()
    assert [(a.get_title(loc="left"), a.get_ylabel()) for a in axes] == [("soil", "%"),
                                                                         ("temp", "°C")]
    labels = [t.get_text() for t in axes[0].get_legend().get_texts()]
    assert labels == ["a", "b", "min to max of a window"]
    assert axes[0].get_legend().get_title().get_text() == "line: window mean"


def test_every_builtin_sensor_has_a_unit():
    from tools.desktop import sim
    from umqtt3_pipeline.plot import UNITS
    src = open(sim.fw["sensors"].__file__).read()
    for name in ("temp", "vbat", "uptime", "mem"):
        assert '"%s"' % name in src and name in UNITS


def test_plot_cli_refuses_a_missing_output_and_an_unwritable_png(tmp_path):
    from refusal import refused, run  # tests/refusal.py
    out = windows_dir(tmp_path)
    refused("umqtt3_pipeline.plot", [str(tmp_path / "no-such-out"), str(tmp_path / "x.png")],
            "no-such-out: no such directory")
    assert not (tmp_path / "x.png").exists()
    refused("umqtt3_pipeline.plot", [str(out), str(tmp_path / "nope" / "x.png")],
            "is not a directory")
    refused("umqtt3_pipeline.plot", [str(out), "/proc/x.png"], "/proc/x.png: ")
    r = run("umqtt3_pipeline.plot", str(out), str(tmp_path / "x.png"))
    assert r.returncode == 0 and r.stdout.startswith("24 windows -> ") and (tmp_path / "x.png").exists()


def test_names_from_topics_are_shown_as_they_are(tmp_path, monkeypatch):
    # a node or metric is whatever a topic level holds: "$" in one started
    # matplotlib's mathtext, which stopped the plot at the end of a run
    import matplotlib.pyplot as plt
    from umqtt3_pipeline import plot
    figs = []
    monkeypatch.setattr(plt, "close", figs.append)
    out = windows_dir(tmp_path, nodes=("$\\frac$", "a$^$b"), metrics=("$x_$", "temp"))
    png = tmp_path / "t.png"
    assert plot.plot(str(out), str(png)) == 24 and png.stat().st_size > 0
    axes = figs[0].get_axes()
    assert axes[0].get_title(loc="left") == "\\$x_\\$"  # "\$": a literal "$"
    assert [t.get_text() for t in axes[0].get_legend().get_texts()][:2] == \
        ["\\$\\frac\\$", "a\\$^\\$b"]


def test_plot_file_must_be_a_format_matplotlib_writes(tmp_path):
    from refusal import refused
    from umqtt3_pipeline.plot import unusable
    assert unusable("x.png") is None and unusable("x.SVG") is None
    for name in ("x.txt", "x", "x.png.bak"):
        assert unusable(name).startswith(name + ": the name must end in a format")
    out = windows_dir(tmp_path)
    refused("umqtt3_pipeline.plot", [str(out), str(tmp_path / "x.txt")],
            "x.txt: the name must end in a format matplotlib writes: .")
    assert not (tmp_path / "x.txt").exists()
