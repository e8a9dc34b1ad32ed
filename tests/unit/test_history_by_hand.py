"""The personal history (`prediction/history.py`) at its edges: a mean hour just
before midnight that rounds to 24.0, a null word or a null value in the Arrow tables, and a window that is a
boolean rather than a number of seconds."""

from __future__ import annotations

import math

import pyarrow as pa
import pytest

from specbench.errors import ConfigError, DataError
from specbench.prediction.history import HistoryEntry, PersonalHistory, circular_hour, personal_predictions

pytestmark = pytest.mark.unit
HOUR = 3600


def test_mean_hour_stays_below_24_when_the_mean_is_midnight() -> None:
    """Said at 00:00, 02:00 and 22:00: the circular mean is midnight, 0.0 h. The sines of 02:00 and 22:00
    cancel to about -5e-16 in floating point, a direction a hair before midnight, which `% 24` rounds to
    24.0, outside the documented [0, 24)."""
    entries = [HistoryEntry("a", 0, ("x",)), HistoryEntry("b", 2 * HOUR, ("x",)),
               HistoryEntry("c", 24 * HOUR + 22 * HOUR, ("x",))]
    (got,) = PersonalHistory(entries).matches((), 3 * 24 * HOUR)
    assert 0.0 <= got.mean_hour < 24.0 and got.mean_hour == pytest.approx(0.0, abs=1e-9)
    assert circular_hour(1.0, -1e-300) == 0.0


def _table(words: list[list[str | None]], column: str) -> pa.Table:
    return pa.table({"user_id": ["u"] * len(words), "request_id": [f"r{i}" for i in range(len(words))],
                     "timestamp_s": pa.array(range(len(words)), pa.int64()),
                     column: pa.array(words, pa.list_(pa.string()))})


def test_a_null_word_is_refused() -> None:
    history, queries = _table([["set", "an", "alarm"]], "words"), _table([["set"]], "prefix")
    queries = queries.set_column(2, "timestamp_s", pa.array([5], pa.int64()))
    assert personal_predictions(history, queries).column("words").to_pylist() == [["set", "an", "alarm"]]
    with pytest.raises(DataError, match="'words' holds a null word"):
        personal_predictions(_table([["set", None]], "words"), queries)
    with pytest.raises(DataError, match="'prefix' holds a null word"):
        personal_predictions(history, _table([[None]], "prefix"))


def test_a_null_value_in_a_needed_column_is_refused_with_its_name() -> None:
    history, queries = _table([["set", "an", "alarm"]], "words"), _table([["set"]], "prefix")
    for column in ("timestamp_s", "user_id", "request_id"):
        index = history.column_names.index(column)
        nulled = history.set_column(index, column, pa.nulls(1, history.schema.field(column).type))
        with pytest.raises(DataError, match=f"column '{column}' has 1 null value"):
            personal_predictions(nulled, queries)


def test_a_boolean_window_is_refused_not_read_as_one_second() -> None:
    history = PersonalHistory([HistoryEntry("a", 10, ("x",))])
    assert [p.words for p in history.matches((), 11, window_s=1)] == [("x",)]  # 11 - 1 <= 10 < 11
    with pytest.raises(ConfigError, match="window_s"):
        history.matches((), 11, window_s=True)


def test_mean_hour_is_nan_when_the_times_cancel_and_the_gap_then_reads_six() -> None:
    """06:00 and 18:00 have no circular mean: the direction of their rounding noise was an arbitrary hour."""
    import polars as pl

    from specbench.prediction.confidence import _expression
    for hours in ((6, 18), (3, 15), (0, 8, 16)):
        entries = [HistoryEntry(str(i), h * HOUR, ("x",)) for i, h in enumerate(hours)]
        assert math.isnan(PersonalHistory(entries).matches((), 30 * HOUR)[0].mean_hour)
    near = [HistoryEntry("a", 6 * HOUR, ("x",)), HistoryEntry("b", 18 * HOUR + 1, ("x",))]
    assert PersonalHistory(near).matches((), 30 * HOUR)[0].mean_hour == pytest.approx(0.5 / HOUR)
    table = pl.DataFrame({"timestamp_s": [40 * HOUR] * 3, "said_mean_hour": [math.nan, 20.0, None]})
    assert table.select(_expression("said_hour_gap")).to_series().to_list() == [6.0, 4.0, 12.0]
