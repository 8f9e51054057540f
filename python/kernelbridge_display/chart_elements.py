"""The plotted elements of one matplotlib Axes, by chart type.

Each finder returns the elements of one kind on an Axes (an empty list when
there are none): lines, scatter points, bars, pie wedges, boxes. Only what
is on the Axes is read; nothing is drawn.
"""

from .chart_axes import number


def series_label(artist):
    """An artist's legend label; matplotlib's defaults ("_child0") are ""."""
    label = artist.get_label()
    label = "" if label is None else str(label)
    return "" if label.startswith("_") else label


_NONE = (None, "None", "none", " ", "")


def marker_only(line):
    """Whether a Line2D draws markers and no line (plot(x, y, "o"))."""
    return line.get_linestyle() in _NONE and line.get_marker() not in _NONE


def _points(xy, xaxis, yaxis):
    return [[xaxis.value(x), yaxis.value(y)] for x, y in xy]


def lines(ax, xaxis, yaxis, skip):
    """Line2D artists drawn with a line style (not a box plot's parts)."""
    found = []
    for line in ax.lines:
        if id(line) in skip or marker_only(line) or not line.get_visible():
            continue
        found.append({"label": series_label(line), "points": _points(line.get_xydata(), xaxis, yaxis)})
    return found


def scatters(ax, xaxis, yaxis, skip):
    """scatter() collections, and plot() lines of markers only."""
    from matplotlib.collections import PathCollection

    found = []
    for collection in ax.collections:
        if isinstance(collection, PathCollection) and collection.get_visible():
            offsets = collection.get_offsets()
            found.append({"label": series_label(collection), "points": _points(offsets, xaxis, yaxis)})
    for line in ax.lines:
        if id(line) not in skip and marker_only(line) and line.get_visible():
            found.append({"label": series_label(line), "points": _points(line.get_xydata(), xaxis, yaxis)})
    return found


def _tick_text(axis, position):
    """The label of the major tick at position, if one is there."""
    for tick, text in zip(axis.axis.get_majorticklocs(), axis.axis.get_majorticklabels()):
        if abs(tick - position) < 1e-9 * max(1.0, abs(position)) and text.get_text():
            return text.get_text()
    return None


def category(axis, position):
    """What the bar or box at position stands for, as a string."""
    value = axis.value(position)
    if axis.scale in ("categorical", "datetime") and value is not None:
        return str(value)
    text = _tick_text(axis, position)
    if text is not None:
        return text
    return "" if value is None else str(value)


def bars(ax, xaxis, yaxis):
    """The bars of bar(), barh() and hist(), one element per bar."""
    from matplotlib.container import BarContainer

    found = []
    for container in ax.containers:
        if not isinstance(container, BarContainer):
            continue
        group = series_label(container)
        horizontal = getattr(container, "orientation", None) == "horizontal"
        values = container.datavalues
        for index, rect in enumerate(container.patches):
            if horizontal:
                where, size = rect.get_y() + rect.get_height() / 2, rect.get_width()
                label = category(yaxis, where)
            else:
                where, size = rect.get_x() + rect.get_width() / 2, rect.get_height()
                label = category(xaxis, where)
            value = values[index] if values is not None and index < len(values) else size
            found.append({"label": label, "group": group, "value": number(value)})
    return found


def wedges(ax):
    """The wedges of pie(): label, angle in degrees, radius."""
    from matplotlib.patches import Wedge

    found = []
    for patch in ax.patches:
        if isinstance(patch, Wedge):
            angle = round(patch.theta2 - patch.theta1, 4)
            found.append({"label": series_label(patch), "angle": number(angle), "radius": number(patch.r)})
    return found
