"""Charts read from real matplotlib figures, compared with what was plotted."""

import datetime

import matplotlib.pyplot as plt
import numpy as np
import pytest

from kernelbridge_display.charts import figure_to_chart


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_line_chart_points_labels_title_units():
    x = np.linspace(0, 10, 50)
    fig, ax = plt.subplots()
    ax.plot(x, np.sin(x), label="sin(x)")
    ax.plot(x, np.cos(x), label="cos(x)")
    ax.set_title("Waves")
    ax.set_xlabel("Time (s)")
    ax.set_ylabel("Amplitude [Hz]")
    chart = figure_to_chart(fig)
    assert chart["type"] == "line"
    assert chart["title"] == "Waves"
    assert (chart["x_label"], chart["x_unit"]) == ("Time (s)", "s")
    assert (chart["y_label"], chart["y_unit"]) == ("Amplitude [Hz]", "Hz")
    assert chart["x_scale"] == chart["y_scale"] == "linear"
    assert [e["label"] for e in chart["elements"]] == ["sin(x)", "cos(x)"]
    for element, y in zip(chart["elements"], (np.sin(x), np.cos(x))):
        assert np.allclose(np.array(element["points"], dtype=float), np.column_stack([x, y]))
    assert chart["x_ticks"] and len(chart["x_ticks"]) == len(chart["x_tick_labels"])
    assert all(0 <= t <= 10 for t in chart["x_ticks"])
    assert chart["x_tick_labels"][chart["x_ticks"].index(2)] == "2"


def test_unlabelled_line_has_empty_label_and_nan_is_null():
    fig, ax = plt.subplots()
    ax.plot([1, 2, 3], [1.0, np.nan, 3.0])
    chart = figure_to_chart(fig)
    assert chart["elements"] == [{"label": "", "points": [[1, 1], [2, None], [3, 3]]}]


def test_scatter_from_scatter_and_marker_only_plot():
    rng = np.random.default_rng(1)
    x, y = rng.random(30), rng.random(30)
    fig, ax = plt.subplots()
    ax.scatter(x, y, label="random")
    ax.plot([0.5, 0.25], [0.1, 0.2], "o", label="dots")
    chart = figure_to_chart(fig)
    assert chart["type"] == "scatter"
    assert [e["label"] for e in chart["elements"]] == ["random", "dots"]
    assert np.allclose(np.array(chart["elements"][0]["points"]), np.column_stack([x, y]))
    assert chart["elements"][1]["points"] == [[0.5, 0.1], [0.25, 0.2]]
    assert "x_ticks" in chart and "y_scale" in chart


def test_bar_chart_categorical_groups():
    fig, ax = plt.subplots()
    authors = ["Author A", "Author B", "Author C"]
    ax.bar(np.arange(3) - 0.2, [100, 200, 300], width=0.4, label="2023")
    ax.bar(np.arange(3) + 0.2, [150, 250, 50], width=0.4, label="2024")
    ax.set_xticks(np.arange(3) - 0.2, authors)
    ax.set_xlabel("Authors")
    ax.set_ylabel("Books (count)")
    fig2, ax2 = plt.subplots()
    ax2.bar(authors, [1.5, 2.5, 3.5], label="Sold")
    chart = figure_to_chart(fig2)
    assert chart["type"] == "bar"
    assert chart["elements"] == [
        {"label": "Author A", "group": "Sold", "value": 1.5},
        {"label": "Author B", "group": "Sold", "value": 2.5},
        {"label": "Author C", "group": "Sold", "value": 3.5},
    ]
    grouped = figure_to_chart(fig)
    assert (grouped["x_label"], grouped["y_unit"]) == ("Authors", "count")
    assert [(e["group"], e["value"]) for e in grouped["elements"]] == [
        ("2023", 100), ("2023", 200), ("2023", 300), ("2024", 150), ("2024", 250), ("2024", 50)
    ]
    assert [e["label"] for e in grouped["elements"][:3]] == authors


def test_horizontal_bars_and_histogram():
    fig, (ax1, ax2) = plt.subplots(1, 2)
    ax1.barh(["x", "y"], [3, 7])
    counts, _, _ = ax2.hist([1, 1, 2, 3, 3, 3], bins=3)
    chart = figure_to_chart(fig)
    assert chart["type"] == "superchart"
    barh, hist = chart["elements"]
    assert [(e["label"], e["value"]) for e in barh["elements"]] == [("x", 3), ("y", 7)]
    assert [e["value"] for e in hist["elements"]] == counts.tolist()


def test_pie_angles_follow_the_values():
    sizes = [15, 30, 45, 10]
    fig, ax = plt.subplots()
    ax.pie(sizes, labels=["Frogs", "Hogs", "Dogs", "Logs"])
    ax.set_title("Pets")
    chart = figure_to_chart(fig)
    assert chart["type"] == "pie" and chart["title"] == "Pets"
    assert [e["label"] for e in chart["elements"]] == ["Frogs", "Hogs", "Dogs", "Logs"]
    assert [e["angle"] for e in chart["elements"]] == pytest.approx([360 * s / 100 for s in sizes])
    assert {e["radius"] for e in chart["elements"]} == {1}


def _quartiles(data):
    q1, median, q3 = np.percentile(data, [25, 50, 75])
    iqr = q3 - q1
    inside = [v for v in data if q1 - 1.5 * iqr <= v <= q3 + 1.5 * iqr]
    outliers = sorted(v for v in data if v not in inside)
    return min(inside), q1, median, q3, max(inside), outliers


@pytest.mark.parametrize("vert,patch_artist", [(True, False), (False, True)])
def test_box_and_whisker_statistics(vert, patch_artist):
    data = [[1, 2, 3, 4, 5, 6, 40], [10, 12, 13, 15, 18, -20]]
    fig, ax = plt.subplots()
    ax.boxplot(data, labels=["first", "second"], vert=vert, patch_artist=patch_artist)
    ax.set_ylabel("Value (m)")
    chart = figure_to_chart(fig)
    assert chart["type"] == "box_and_whisker"
    assert [e["label"] for e in chart["elements"]] == ["first", "second"]
    for element, values in zip(chart["elements"], data):
        low, q1, median, q3, high, outliers = _quartiles(values)
        assert element["min"] == pytest.approx(low)
        assert element["first_quartile"] == pytest.approx(q1)
        assert element["median"] == pytest.approx(median)
        assert element["third_quartile"] == pytest.approx(q3)
        assert element["max"] == pytest.approx(high)
        assert sorted(element["outliers"]) == outliers


def test_dates_on_the_x_axis_are_iso_strings():
    days = [datetime.datetime(2024, 1, 1) + datetime.timedelta(days=i) for i in range(5)]
    fig, ax = plt.subplots()
    ax.plot(days, [1, 4, 9, 16, 25], label="squares")
    chart = figure_to_chart(fig)
    assert chart["x_scale"] == "datetime"
    assert chart["elements"][0]["points"][0] == ["2024-01-01T00:00:00", 1]
    assert chart["elements"][0]["points"][4] == ["2024-01-05T00:00:00", 25]
    assert all(isinstance(t, str) and t.startswith("2024-01-0") for t in chart["x_ticks"])


def test_categorical_axis_gives_the_categories():
    fig, ax = plt.subplots()
    ax.plot(["mon", "tue", "wed"], [3, 1, 2])
    chart = figure_to_chart(fig)
    assert chart["x_scale"] == "categorical"
    assert chart["elements"][0]["points"] == [["mon", 3], ["tue", 1], ["wed", 2]]
    assert chart["x_ticks"] == ["mon", "tue", "wed"]
    assert chart["x_tick_labels"] == ["mon", "tue", "wed"]


def test_log_scales():
    x = np.array([1, 10, 100, 1000])
    fig, ax = plt.subplots()
    ax.plot(x, x**2)
    ax.set_xscale("log")
    ax.set_yscale("log")
    chart = figure_to_chart(fig)
    assert chart["x_scale"] == chart["y_scale"] == "log"
    assert chart["elements"][0]["points"] == [[1, 1], [10, 100], [100, 10000], [1000, 1000000]]
    assert "10^2" in chart["x_tick_labels"]
    assert 100 in chart["x_ticks"]


def test_superchart_of_several_axes():
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3)
    fig.suptitle("Overview")
    ax1.plot([1, 2], [3, 4])
    ax1.set_title("line")
    ax2.bar(["a", "b"], [1, 2])
    ax3.scatter([1], [2])
    chart = figure_to_chart(fig)
    assert chart["type"] == "superchart"
    assert chart["title"] == "Overview"
    assert [c["type"] for c in chart["elements"]] == ["line", "bar", "scatter"]
    assert chart["elements"][0]["title"] == "line"


def test_imshow_is_no_chart_and_no_error():
    fig, ax = plt.subplots()
    image = ax.imshow(np.arange(16).reshape(4, 4))
    fig.colorbar(image)
    assert figure_to_chart(fig) is None
    empty = plt.figure()
    assert figure_to_chart(empty) is None


def test_figure_suptitle_names_a_single_chart():
    fig, ax = plt.subplots()
    fig.suptitle("Only")
    ax.plot([0, 1], [0, 1])
    assert figure_to_chart(fig)["title"] == "Only"


@pytest.mark.parametrize(
    "freq,second", [("D", "2024-01-02T00:00:00"), ("MS", "2024-02-01T00:00:00"), (None, "2024-01-03T00:00:00")]
)
def test_dataframe_plot_of_a_time_series(freq, second):
    import pandas as pd

    if freq:
        index = pd.date_range("2024-01-01", periods=3, freq=freq)
    else:
        index = pd.to_datetime(["2024-01-01", "2024-01-03", "2024-01-10"])
    ax = pd.DataFrame({"v": [1, 2, 3]}, index=index).plot()
    chart = figure_to_chart(ax.figure)
    assert chart["x_scale"] == "datetime"
    assert chart["elements"][0]["label"] == "v"
    assert chart["elements"][0]["points"][:2] == [["2024-01-01T00:00:00", 1], [second, 2]]
