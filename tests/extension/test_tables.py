"""DataFrames of every dtype as tables: columns as lists, JSON values."""

import datetime
import decimal
import json

import numpy as np
import pandas as pd

from kernelbridge_display.tables import dataframe_to_table


def test_every_dtype():
    frame = pd.DataFrame(
        {
            "int": np.array([1, -2, 3], dtype="int64"),
            "uint8": np.array([0, 255, 7], dtype="uint8"),
            "float": [1.5, np.nan, np.inf],
            "bool": [True, False, True],
            "object": ["a", None, 3],
            "string": pd.array(["x", None, "z"], dtype="string"),
            "nullable_int": pd.array([1, None, 3], dtype="Int64"),
            "datetime": pd.to_datetime(["2024-01-02 03:04:05", None, "2024-12-31"]),
            "datetime_tz": pd.to_datetime(["2024-01-01", "2024-06-01", None]).tz_localize("Europe/Paris"),
            "category": pd.Categorical(["red", "blue", "red"]),
            "timedelta": pd.to_timedelta([1, 90, None], unit="s"),
            "decimal": [decimal.Decimal("1.25"), None, decimal.Decimal("2")],
            "date": [datetime.date(2024, 2, 29), None, datetime.date(2000, 1, 1)],
        }
    )
    table = dataframe_to_table(frame)
    assert list(table) == list(frame.columns)
    assert table["int"] == [1, -2, 3]
    assert table["uint8"] == [0, 255, 7]
    assert table["float"] == [1.5, None, None]
    assert table["bool"] == [True, False, True]
    assert table["object"] == ["a", None, 3]
    assert table["string"] == ["x", None, "z"]
    assert table["nullable_int"] == [1, None, 3]
    assert table["datetime"] == ["2024-01-02T03:04:05", None, "2024-12-31T00:00:00"]
    assert table["datetime_tz"] == ["2024-01-01T00:00:00+01:00", "2024-06-01T00:00:00+02:00", None]
    assert table["category"] == ["red", "blue", "red"]
    assert table["timedelta"] == ["P0DT0H0M1S", "P0DT0H1M30S", None]
    assert table["decimal"] == [1.25, None, 2.0]
    assert table["date"] == ["2024-02-29", None, "2000-01-01"]
    json.dumps(table, allow_nan=False)


def test_numpy_scalars_in_object_columns_and_python_types():
    frame = pd.DataFrame({"mixed": pd.Series([np.int32(4), np.float32(0.5), np.bool_(True), [1, 2]], dtype=object)})
    assert dataframe_to_table(frame)["mixed"] == [4, 0.5, True, "[1, 2]"]


def test_default_index_is_left_out_other_indexes_come_first():
    frame = pd.DataFrame({"a": [1, 2]})
    assert dataframe_to_table(frame) == {"a": [1, 2]}
    grouped = pd.DataFrame({"k": ["x", "y", "x"], "v": [1, 2, 3]}).groupby("k").sum()
    assert dataframe_to_table(grouped) == {"k": ["x", "y"], "v": [4, 2]}
    dated = pd.DataFrame({"v": [1.0]}, index=pd.DatetimeIndex(["2024-03-01"], name="day"))
    assert dataframe_to_table(dated) == {"day": ["2024-03-01T00:00:00"], "v": [1.0]}
    unnamed = pd.DataFrame({"v": [5]}, index=["r"])
    assert dataframe_to_table(unnamed) == {"index": ["r"], "v": [5]}


def test_column_names_are_strings_and_unique():
    frame = pd.DataFrame([[1, 2, 3]], columns=[0, "a", "a"])
    assert dataframe_to_table(frame) == {"0": [1], "a": [2], "a.1": [3]}


def test_empty_frame():
    assert dataframe_to_table(pd.DataFrame({"a": []})) == {"a": []}
    assert dataframe_to_table(pd.DataFrame()) == {}
