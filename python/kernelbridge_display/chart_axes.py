"""An axis of a matplotlib Axes as the chart format describes it.

Its scale ("linear", "log", "datetime", "categorical", ...), its label and
the unit written in the label's trailing parentheses or brackets, its ticks
and tick labels, and the conversion of a plotted coordinate (a float, as
matplotlib stores it) back to what was plotted: an ISO 8601 string on a
date axis, the category's string on a categorical axis, else a number.
"""

import math
import re

_UNIT = re.compile(r"[\(\[]([^\(\)\[\]]+)[\)\]]\s*$")
_MATH = re.compile(r"\\mathdefault\{((?:[^{}]|\{[^{}]*\})*)\}")
_POWER = re.compile(r"\^\{([^{}]*)\}")


def plain(text):
    """A tick label without mathtext: "$\\mathdefault{10^{2}}$" is "10^2"."""
    if "$" in text:
        text = _MATH.sub(r"\1", text.replace("$", ""))
        text = _POWER.sub(r"^\1", text).replace("\\times", "×").replace("\\cdot", "·")
        text = text.replace("\\mathdefault", "").replace("{", "").replace("}", "")
    return text.replace("\u2212", "-")


def number(value):
    """A float or int for JSON, or None for NaN, infinities and masked."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(value):
        return None
    return int(value) if value.is_integer() and abs(value) < 2**53 else value


def _modules(obj):
    """The modules of obj's class and its bases (pandas' date converters
    derive from matplotlib's)."""
    return {cls.__module__ for cls in type(obj).__mro__}


def scale(axis):
    """The axis' scale: "datetime" and "categorical" from its converter."""
    converter = getattr(axis, "converter", None)
    modules = _modules(converter) if converter is not None else set()
    if "matplotlib.dates" in modules or "matplotlib.dates" in _modules(axis.get_major_formatter()):
        return "datetime"
    if "matplotlib.category" in modules:
        return "categorical"
    return axis.get_scale()


class Axis:
    """One axis (x or y) of an Axes, and how to read its coordinates."""

    def __init__(self, axis):
        self.axis = axis
        self.scale = scale(axis)
        formatter = axis.get_major_formatter()
        self.names = None
        # pandas' DataFrame.plot() of a regular time series plots periods'
        # ordinals, in the frequency its date formatter keeps
        self.freq = None
        if self.scale == "datetime" and type(formatter).__module__.startswith("pandas"):
            self.freq = getattr(formatter, "freq", None)
        if self.scale == "categorical" and type(formatter).__module__ == "matplotlib.category":
            self.names = formatter  # maps a category's position to its name

    def value(self, coordinate):
        """A plotted coordinate as what was plotted."""
        if self.scale == "datetime" and self.freq is not None:
            return period_date(coordinate, self.freq)
        if self.scale == "datetime":
            return iso_date(coordinate)
        found = number(coordinate)
        if self.names is not None and isinstance(found, int):
            return self.names(found) or found
        return found

    def label(self):
        return self.axis.get_label_text()

    def unit(self):
        found = _UNIT.search(self.label())
        return found.group(1).strip() if found else None

    def ticks(self):
        """The major ticks inside the view, and their labels' texts."""
        low, high = sorted(self.axis.get_view_interval())
        ticks, labels = [], []
        # the labels as a draw makes them (Axis._update_ticks formats the
        # locator's ticks the same way), without updating every Tick artist
        locs = list(self.axis.get_majorticklocs())
        shown = self.axis.get_major_formatter().format_ticks(locs)
        for tick, text in zip(locs, shown):
            if low - 1e-9 * abs(high - low) <= tick <= high + 1e-9 * abs(high - low):
                ticks.append(self.value(tick))
                labels.append(plain(text))
        return ticks, labels

    def describe(self, prefix):
        """The label, unit, ticks, tick labels and scale, keyed with prefix."""
        ticks, labels = self.ticks()
        return {
            prefix + "_label": self.label(),
            prefix + "_unit": self.unit(),
            prefix + "_ticks": ticks,
            prefix + "_tick_labels": labels,
            prefix + "_scale": self.scale,
        }


def iso_date(coordinate):
    """A date axis' float (days since matplotlib's epoch) as ISO 8601."""
    if number(coordinate) is None:
        return None
    from matplotlib import dates

    moment = dates.num2date(float(coordinate))
    if moment.utcoffset() is not None and not moment.utcoffset():
        moment = moment.replace(tzinfo=None)
    return moment.isoformat()


def period_date(coordinate, freq):
    """A pandas period ordinal (in freq) as the ISO 8601 of its start."""
    if number(coordinate) is None:
        return None
    import pandas

    ordinal = float(coordinate)
    if not ordinal.is_integer():
        return iso_date(coordinate)
    return pandas.Period(ordinal=int(ordinal), freq=freq).to_timestamp().isoformat()
