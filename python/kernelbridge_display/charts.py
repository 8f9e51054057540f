"""A matplotlib Figure as a chart (docs/charts.md): what an Axes plots.

Each Axes is read as one chart of one type, the first of these it holds:
box_and_whisker (boxplot), pie (wedges), bar (bar, barh, hist), line
(lines drawn with a line style), scatter (scatter, marker-only lines). An
Axes with none of them (an image, text, an empty Axes, a colorbar) is no
chart. A Figure with one chart is that chart; with several, a superchart
whose elements are the charts, in the Figure's order. A Figure with none
gives None, and no MIME type is added to its display.
"""

from .chart_axes import Axis
from .chart_boxes import boxes
from .chart_elements import bars, lines, scatters, wedges


def _title(ax):
    return ax.get_title() or ax.get_title("left") or ax.get_title("right")


def _point_chart(kind, ax, xaxis, yaxis, elements):
    chart = {"type": kind, "title": _title(ax)}
    chart.update(xaxis.describe("x"))
    chart.update(yaxis.describe("y"))
    chart["elements"] = elements
    return chart


def _chart2d(kind, ax, xaxis, yaxis, elements):
    return {
        "type": kind,
        "title": _title(ax),
        "x_label": xaxis.label(),
        "y_label": yaxis.label(),
        "x_unit": xaxis.unit(),
        "y_unit": yaxis.unit(),
        "elements": elements,
    }


def axes_to_chart(ax):
    """The chart one Axes draws, or None when it draws none."""
    xaxis, yaxis = Axis(ax.xaxis), Axis(ax.yaxis)
    found, skip = boxes(ax, xaxis, yaxis)
    if found:
        return _chart2d("box_and_whisker", ax, xaxis, yaxis, found)
    found = wedges(ax)
    if found:
        return {"type": "pie", "title": _title(ax), "elements": found}
    found = bars(ax, xaxis, yaxis)
    if found:
        return _chart2d("bar", ax, xaxis, yaxis, found)
    found = lines(ax, xaxis, yaxis, skip)
    if found:
        return _point_chart("line", ax, xaxis, yaxis, found)
    found = scatters(ax, xaxis, yaxis, skip)
    if found:
        return _point_chart("scatter", ax, xaxis, yaxis, found)
    return None


def _suptitle(figure):
    if hasattr(figure, "get_suptitle"):  # matplotlib 3.8 and later
        return figure.get_suptitle()
    text = getattr(figure, "_suptitle", None)  # before 3.8, its only record
    return text.get_text() if text is not None else ""


def figure_to_chart(figure):
    """The chart a Figure draws: one chart, a superchart, or None."""
    charts = []
    for ax in figure.get_axes():
        if not ax.get_visible():
            continue
        chart = axes_to_chart(ax)
        if chart is not None:
            charts.append(chart)
    if not charts:
        return None
    suptitle = _suptitle(figure)
    if len(charts) == 1:
        if not charts[0]["title"] and suptitle:
            charts[0]["title"] = suptitle
        return charts[0]
    return {"type": "superchart", "title": suptitle, "elements": charts}
