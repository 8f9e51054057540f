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


def scale(axis):
    """The axis' scale: "datetime" and "categorical" from its converter."""
    converter = getattr(axis, "converter", None)
    module = type(converter).__module__ if converter is not None else ""
    if module == "matplotlib.dates":
        return "datetime"
    if module == "matplotlib.category":
        return "categorical"
    if type(axis.get_major_formatter()).__module__ == "matplotlib.dates":
        return "datetime"
    return axis.get_scale()


class Axis:
    """One axis (x or y) of an Axes, and how to read its coordinates."""

    def __init__(self, axis):
        self.axis = axis
        self.scale = scale(axis)
        formatter = axis.get_major_formatter()
        self.names = None
        if self.scale == "categorical" and type(formatter).__module__ == "matplotlib.category":
            self.names = formatter  # maps a category's position to its name

    def value(self, coordinate):
        """A plotted coordinate as what was plotted."""
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
        shown = self.axis.get_majorticklabels()
        for tick, text in zip(self.axis.get_majorticklocs(), shown):
            if low - 1e-9 * abs(high - low) <= tick <= high + 1e-9 * abs(high - low):
                ticks.append(self.value(tick))
                labels.append(plain(text.get_text()))
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
