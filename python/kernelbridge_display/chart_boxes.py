"""The boxes of a box-and-whisker plot, read back from its artists.

boxplot() draws each box as a closed rectangle (a Line2D of five points, or
a PathPatch with patch_artist=True), its median as a segment across it,
two whiskers from its edges along its centre line, a cap at each whisker's
end, and its outliers as a marker-only line on the centre line. A box is
recognised by that geometry, vertical or horizontal; every artist that
belongs to a box is reported so that it is not read again as a line.
"""

from .chart_axes import number
from .chart_elements import category, marker_only

_EPS = 1e-9


def _close(a, b):
    return abs(a - b) <= _EPS * max(1.0, abs(a), abs(b))


def _rectangle(xy):
    """(x0, x1, y0, y1) if the points are an axis-aligned rectangle's corners."""
    if len(xy) == 5 and _close(xy[0][0], xy[4][0]) and _close(xy[0][1], xy[4][1]):
        xy = xy[:4]
    if len(xy) != 4:
        return None
    xs = sorted({round(float(x), 12) for x, _ in xy})
    ys = sorted({round(float(y), 12) for _, y in xy})
    if len(xs) != 2 or len(ys) != 2:
        return None
    return xs[0], xs[1], ys[0], ys[1]


def _candidates(ax):
    from matplotlib.patches import PathPatch

    for line in ax.lines:
        rect = _rectangle(line.get_xydata())
        if rect:
            yield line, rect
    for patch in ax.patches:
        if isinstance(patch, PathPatch):
            path = patch.get_path()
            verts = path.vertices
            if path.codes is not None:
                verts = verts[path.codes != path.CLOSEPOLY]
            rect = _rectangle(verts) if len(verts) in (4, 5) else None
            if rect:
                yield patch, rect


def _segments(ax):
    """Two-point lines: (line, (a0, b0), (a1, b1)) in data coordinates."""
    for line in ax.lines:
        xy = line.get_xydata()
        if len(xy) == 2 and not marker_only(line):
            yield line, (float(xy[0][0]), float(xy[0][1])), (float(xy[1][0]), float(xy[1][1]))


def _box(ax, rect, vertical):
    """One box's statistics, and the artists it is drawn with, or None."""
    x0, x1, y0, y1 = rect if vertical else (rect[2], rect[3], rect[0], rect[1])
    centre = (x0 + x1) / 2
    swap = (lambda p: p) if vertical else (lambda p: (p[1], p[0]))

    def on_edge(y):
        return _close(y, y0) or _close(y, y1)

    whiskers, medians, across = [], [], []
    for line, a, b in _segments(ax):
        a, b = swap(a), swap(b)
        if _close(a[0], centre) and _close(b[0], centre):
            if on_edge(a[1]) or on_edge(b[1]):
                whiskers.append((line, a, b))
        elif _close(a[1], b[1]) and _close((a[0] + b[0]) / 2, centre):
            inside = x0 - _EPS <= min(a[0], b[0]) and max(a[0], b[0]) <= x1 + _EPS
            if inside and y0 - _EPS <= a[1] <= y1 + _EPS:
                medians.append((line, a[1]))
            else:
                across.append((line, a[1]))
    if len(whiskers) != 2 or not medians:
        return None
    medians.sort(key=lambda m: on_edge(m[1]))
    ends = [p[1] for _, a, b in whiskers for p in (a, b) if not on_edge(p[1])]
    low, high = min(ends + [y0]), max(ends + [y1])
    used = [line for line, _, _ in whiskers] + [medians[0][0]]
    used += [line for line, y in across if _close(y, low) or _close(y, high)]
    outliers = []
    for line in ax.lines:
        points = [swap((float(x), float(y))) for x, y in line.get_xydata()]
        if points and marker_only(line) and all(_close(p[0], centre) for p in points):
            outliers.extend(number(p[1]) for p in points)
            used.append(line)
    stats = {
        "min": number(low),
        "first_quartile": number(y0),
        "median": number(medians[0][1]),
        "third_quartile": number(y1),
        "max": number(high),
        "outliers": outliers,
    }
    return centre, stats, used


def boxes(ax, xaxis, yaxis):
    """([BoxAndWhiskerData], ids of the artists the boxes are drawn with)."""
    found, used = [], set()
    for artist, rect in _candidates(ax):
        for vertical in (True, False):
            box = _box(ax, rect, vertical)
            if box is not None:
                centre, stats, artists = box
                label = category(xaxis if vertical else yaxis, centre)
                found.append(dict({"label": label}, **stats))
                used.update(id(a) for a in artists + [artist])
                break
    return found, used
