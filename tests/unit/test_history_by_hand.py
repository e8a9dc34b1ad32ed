"""The personal history (`prediction/history.py`) at its edges: a mean hour just
before midnight that rounds to 24.0, and a null word in the Arrow tables."""

from __future__ import annotations

import pyarrow as pa
import pytest

from specbench.errors import DataError
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
