"""A pandas DataFrame as a table (docs/charts.md): its columns as lists.

The table is a JSON object, one member per column in the DataFrame's order,
each a list of the column's values: integers and floats as numbers, NaN,
NaT, None and infinities as null, booleans as booleans, timestamps as ISO
8601 strings (with their offset when tz-aware), timedeltas as ISO 8601
durations, categories as their values, anything else as its str(). An index
other than the default 0..n-1 comes first, as reset_index() would make it.
Column names are strings; a repeated name gets ".1", ".2", ... appended.
"""

import datetime
import decimal
import math
import numbers


def _value(value):
    """One cell as JSON."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, (numbers.Real, decimal.Decimal)):
        value = float(value)
        return value if math.isfinite(value) else None
    if type(value).__name__ in ("NaTType", "NAType"):
        return None
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    isoformat = getattr(value, "isoformat", None)
    if isoformat is not None and type(value).__module__.startswith("pandas"):
        return isoformat()
    if hasattr(value, "item") and type(value).__module__ == "numpy":
        return _value(value.item())
    return str(value)


def _column(series):
    """A Series' values as a JSON list."""
    dtype = series.dtype
    if type(dtype).__module__ == "numpy" and dtype.kind in "iub":
        return series.tolist()
    if type(dtype).__module__ == "numpy" and dtype.kind == "f":
        return [v if math.isfinite(v) else None for v in series.tolist()]
    return [_value(v) for v in series]


def _unique(names):
    seen, out = {}, []
    for name in names:
        name = str(name)
        count = seen.get(name, 0)
        seen[name] = count + 1
        out.append(name if count == 0 else "%s.%d" % (name, count))
    return out


def dataframe_to_table(frame):
    """The table of a DataFrame: {column name: [values]}."""
    import pandas

    index = frame.index
    counting = isinstance(index, pandas.RangeIndex) and index.start == 0 and index.step == 1
    default = (counting or len(index) == 0) and index.nlevels == 1 and index.name is None
    if not default:
        frame = frame.reset_index(allow_duplicates=True)
    names = _unique(frame.columns)
    return {name: _column(frame.iloc[:, position]) for position, name in enumerate(names)}
