"""kernelbridge's IPython extension: charts and tables as data.

Loaded with ``%load_ext kernelbridge_display`` (or through IPython's
``extensions`` setting), it adds two MIME types to what IPython displays:

- ``application/vnd.kernelbridge.chart+json`` beside the PNG of every
  matplotlib Figure that plots a chart (docs/charts.md: line, scatter, bar,
  pie, box_and_whisker, or a superchart of several Axes);
- ``application/vnd.kernelbridge.table+json`` beside the HTML of every
  pandas DataFrame: its columns as lists.

And a PIL image saved to a path is also displayed (images.py); a
published message over the daemon's --max-message-size is replaced by a
small one that says so (guard.py); the kernel's output waits for the
daemon rather than being dropped by its iopub socket (backpressure.py).

It costs nothing to other objects: the formatters know their types by name
(module and class), so an object's type is matched against them without
importing matplotlib or pandas: a value of any other type costs one
dictionary lookup per class in its MRO. A chart or table that cannot be
read gives no MIME type, never an error in the cell's output.
"""

from IPython.core.formatters import BaseFormatter
from traitlets import ObjectName, Unicode

from . import backpressure, guard, images

CHART_MIME = "application/vnd.kernelbridge.chart+json"
TABLE_MIME = "application/vnd.kernelbridge.table+json"

__all__ = ["CHART_MIME", "TABLE_MIME", "load_ipython_extension", "unload_ipython_extension"]


class _JSONFormatter(BaseFormatter):
    """A formatter of JSON objects for the types it is given by name.

    An object's type and its bases are looked up by (module, class name) in
    a dict of this formatter's own, so nothing is imported to check them.
    """

    _return_type = (dict, list)
    print_method = ObjectName("_repr_kernelbridge_json_")

    def __init__(self, by_name, **kwargs):
        super().__init__(**kwargs)
        self.by_name = by_name

    def lookup(self, obj):
        for cls in type(obj).__mro__:
            printer = self.by_name.get((cls.__module__, cls.__name__))
            if printer is not None:
                return printer
        raise KeyError(type(obj))

    def __call__(self, obj):
        if not self.enabled:
            return None
        try:
            printer = self.lookup(obj)
        except KeyError:
            return None
        return printer(obj)


class ChartFormatter(_JSONFormatter):
    format_type = Unicode(CHART_MIME)


class TableFormatter(_JSONFormatter):
    format_type = Unicode(TABLE_MIME)


def _chart(figure):
    from .charts import figure_to_chart

    try:
        return figure_to_chart(figure)
    except Exception:  # a figure this module cannot read is shown as before
        return None


def _table(frame):
    from .tables import dataframe_to_table

    try:
        return dataframe_to_table(frame)
    except Exception:  # a frame this module cannot read is shown as before
        return None


def load_ipython_extension(ipython):
    """Registers the chart and table formatters and displays saved images."""
    formatters = ipython.display_formatter.formatters
    parent = ipython.display_formatter
    formatters[CHART_MIME] = ChartFormatter({("matplotlib.figure", "Figure"): _chart}, parent=parent)
    formatters[TABLE_MIME] = TableFormatter({("pandas.core.frame", "DataFrame"): _table}, parent=parent)
    images.install()
    guard.install()
    backpressure.install(ipython)


def unload_ipython_extension(ipython):
    formatters = ipython.display_formatter.formatters
    formatters.pop(CHART_MIME, None)
    formatters.pop(TABLE_MIME, None)
    images.uninstall()
    guard.uninstall()
    backpressure.uninstall()
