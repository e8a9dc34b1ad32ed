"""Personal history index: every answer equals a brute-force filter over all entries (strictly earlier,
inside the window, word-prefix match), frequencies form a distribution of the brute-force counts, and the
Arrow entry point equals the per-user function."""

from __future__ import annotations

import math
from collections import Counter

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specbench.errors import ConfigError, DataError
from specbench.prediction.history import (
    HISTORY_WINDOW_S,
    PREDICTIONS_SCHEMA,
    HistoryEntry,
    HistoryPrediction,
    HistoryQuery,
    PersonalHistory,
    circular_hour,
    personal_predictions,
    query_user,
)

pytestmark = pytest.mark.unit

WORDS = st.lists(st.sampled_from(["set", "an", "alarm", "play"]), max_size=4).map(tuple)
PREFIX = st.lists(st.sampled_from(["set", "an", "alarm", "play"]), max_size=3).map(tuple)
TIMES = st.integers(0, 40)
WINDOWS = st.integers(0, 45)


@st.composite
def histories(draw: st.DrawFn, user: str = "u") -> list[HistoryEntry]:
    items = draw(st.lists(st.tuples(TIMES, WORDS), max_size=25))
    return [HistoryEntry(f"{user}-{i}", t, w) for i, (t, w) in enumerate(items)]


def brute_force(entries: list[HistoryEntry], prefix: tuple[str, ...], before_s: int,
                window_s: int) -> dict[tuple[str, ...], tuple[int, int]]:
    """{words: (count, last_seen)} over the entries a query may see, by a plain scan."""
    seen = [e for e in entries
            if before_s - window_s <= e.timestamp_s < before_s and e.words[: len(prefix)] == prefix]
    counts = Counter(e.words for e in seen)
    return {w: (c, max(e.timestamp_s for e in seen if e.words == w)) for w, c in counts.items()}


@settings(max_examples=150, deadline=None)
@given(histories(), PREFIX, st.integers(-5, 50), WINDOWS)
def test_matches_equal_brute_force(entries: list[HistoryEntry], prefix: tuple[str, ...], before_s: int,
                                   window_s: int) -> None:
    got = PersonalHistory(list(reversed(entries))).matches(prefix, before_s, window_s)
    expected = brute_force(entries, prefix, before_s, window_s)
    assert {p.words: (p.count, p.last_seen_s) for p in got} == expected
    assert len(got) == len(expected)  # distinct word sequences
    keys = [(-p.count, -p.last_seen_s, p.words) for p in got]
    assert keys == sorted(keys)
    for p in got:  # strictly earlier, inside the window
        assert before_s - window_s <= p.last_seen_s < before_s
        assert p.words[: len(prefix)] == prefix


@settings(max_examples=100, deadline=None)
@given(histories(), st.data())
def test_no_query_sees_its_own_utterance_or_later(entries: list[HistoryEntry], data: st.DataObject) -> None:
    """Query at each entry's own time with a prefix of its own words: the entry and later ones never count."""
    history = PersonalHistory(entries)
    for e in entries:
        k = data.draw(st.integers(0, len(e.words)))
        got = history.matches(e.words[:k], e.timestamp_s)
        earlier = [x for x in entries if x.timestamp_s < e.timestamp_s and x.words[:k] == e.words[:k]]
        assert sum(p.count for p in got) == len(earlier)
        assert all(p.last_seen_s < e.timestamp_s for p in got)
        # its own words are a prediction only when an earlier entry said them
        assert (e.words in {p.words for p in got}) == any(x.words == e.words for x in earlier)


@settings(max_examples=150, deadline=None)
@given(histories(), PREFIX, st.integers(-5, 50), WINDOWS)
def test_log_frequencies_form_a_distribution_of_the_brute_force_counts(
    entries: list[HistoryEntry], prefix: tuple[str, ...], before_s: int, window_s: int,
) -> None:
    history = PersonalHistory(entries)
    got = history.matches(prefix, before_s, window_s)
    if got:
        assert math.fsum(math.exp(p.log_freq) for p in got) == pytest.approx(1.0, abs=1e-12)
        assert all(p.log_freq <= 0.0 for p in got)
    counts = brute_force(entries, prefix, before_s, window_s)
    total = sum(c for c, _ in counts.values())
    for p in got:
        assert p.log_freq == math.log(counts[p.words][0] / total)


def test_worked_example() -> None:
    day = 24 * 3600
    entries = [
        HistoryEntry("r1", 10, ("set", "an", "alarm")),
        HistoryEntry("r2", 20, ("set", "an", "alarm")),
        HistoryEntry("r3", 30, ("set", "the", "lights")),
        HistoryEntry("r4", 40, ("play", "jazz")),
        HistoryEntry("r5", 50, ("set", "an", "alarm")),
    ]
    h = PersonalHistory(entries)
    assert h.matches(("set",), 50) == [
        HistoryPrediction(("set", "an", "alarm"), 2, math.log(2 / 3), 20, pytest.approx(15 / 3600)),
        HistoryPrediction(("set", "the", "lights"), 1, math.log(1 / 3), 30, pytest.approx(30 / 3600)),
    ]
    assert [p.count for p in h.matches((), 51)] == [3, 1, 1]
    assert [p.words for p in h.matches((), 51)][1:] == [("play", "jazz"), ("set", "the", "lights")]  # recency
    assert h.matches(("set", "an", "alarm"), 10) == []  # never itself
    assert h.matches(("set",), 35, window_s=10) == [HistoryPrediction(("set", "the", "lights"), 1, 0.0, 30,
                                                                      pytest.approx(30 / 3600))]
    assert ("play", "jazz") not in [p.words for p in h.matches(("set",), 60)]
    assert [(p.words, p.log_freq) for p in h.matches(("set", "an"), 60)] == [(("set", "an", "alarm"), 0.0)]
    late = PersonalHistory([HistoryEntry("a", 0, ("x",)), HistoryEntry("b", HISTORY_WINDOW_S, ("x",))])
    assert late.matches(("x",), HISTORY_WINDOW_S + 1)[0].count == 1  # 28 days + 1 s: the first is out
    assert late.matches(("x",), HISTORY_WINDOW_S)[0].count == 1  # exactly 28 days back: still in
    assert HISTORY_WINDOW_S == 28 * day


def test_mean_hour_is_the_circular_mean_of_the_times_of_day() -> None:
    day, hour = 24 * 3600, 3600
    entries = [HistoryEntry("a", 23 * hour, ("x",)), HistoryEntry("b", day + 1 * hour, ("x",)),  # 23:00, 01:00
               HistoryEntry("c", 2 * day + 8 * hour, ("y",)), HistoryEntry("d", 3 * day + 10 * hour, ("y",))]
    got = {p.words: p.mean_hour for p in PersonalHistory(entries).matches((), 4 * day)}
    assert min(got[("x",)], 24.0 - got[("x",)]) == pytest.approx(0.0, abs=1e-9)  # around midnight, not noon
    assert got[("y",)] == pytest.approx(9.0)
    assert circular_hour(0.0, -1.0) == pytest.approx(18.0) and circular_hour(1.0, 0.0) == 0.0


def test_bad_input_is_reported() -> None:
    with pytest.raises(DataError, match="r1"):
        PersonalHistory([HistoryEntry("r1", 1, ("a",)), HistoryEntry("r1", 2, ("b",))])
    with pytest.raises(ConfigError, match="window_s"):
        PersonalHistory([]).matches((), 5, window_s=-1)
    with pytest.raises(DataError, match="prefix"):
        personal_predictions(_history_table({}), pa.table({"user_id": ["u"], "request_id": ["q"],
                                                           "timestamp_s": [1]}))


def _history_table(users: dict[str, list[HistoryEntry]]) -> pa.Table:
    rows = [(u, e) for u, entries in users.items() for e in entries]
    return pa.table({
        "user_id": pa.array([u for u, _ in rows], pa.string()),
        "request_id": pa.array([e.request_id for _, e in rows], pa.string()),
        "timestamp_s": pa.array([e.timestamp_s for _, e in rows], pa.int64()),
        "words": pa.array([list(e.words) for _, e in rows], pa.list_(pa.string())),
    })


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(st.sampled_from(["ann", "bob", "cy"]), st.lists(st.tuples(TIMES, WORDS), max_size=12)),
    st.lists(st.tuples(st.sampled_from(["ann", "bob", "cy", "dee"]), st.integers(-5, 50), PREFIX),
             max_size=12),
    WINDOWS,
)
def test_arrow_entry_point_equals_per_user_queries(
    raw: dict[str, list[tuple[int, tuple[str, ...]]]], raw_queries: list[tuple[str, int, tuple[str, ...]]],
    window_s: int,
) -> None:
    users = {u: [HistoryEntry(f"{u}-{i}", t, w) for i, (t, w) in enumerate(items)]
             for u, items in raw.items()}
    queries = [(u, HistoryQuery(f"q{i}", t, p)) for i, (u, t, p) in enumerate(raw_queries)]
    table = personal_predictions(_history_table(users), pa.table({
        "user_id": pa.array([u for u, _ in queries], pa.string()),
        "request_id": pa.array([q.request_id for _, q in queries], pa.string()),
        "timestamp_s": pa.array([q.before_s for _, q in queries], pa.int64()),
        "prefix": pa.array([list(q.prefix) for _, q in queries], pa.list_(pa.string())),
    }), window_s=window_s)
    assert table.schema == PREDICTIONS_SCHEMA
    expected = []
    for u, q in queries:
        (preds,) = query_user(users.get(u, []), [q], window_s=window_s)
        expected += [{"user_id": u, "request_id": q.request_id, "prefix": list(q.prefix),
                      "words": list(p.words), "count": p.count, "log_freq": p.log_freq,
                      "last_seen_s": p.last_seen_s, "mean_hour": p.mean_hour} for p in preds]
    assert table.to_pylist() == expected
