"""The personal history of one user: past recognitions that complete a partial hypothesis.

Personalized predictive ASR proposes, for a partial hypothesis (a word prefix), every earlier final
recognition of the same user that starts with that prefix, within a window of personal history (28 days).
"Earlier" is strict: a query at time ``before_s`` sees entries with
``before_s - window_s <= timestamp_s < before_s``, so an utterance never sees itself or anything later.

Each distinct word sequence among the matching entries is one `HistoryPrediction`: how often it occurs
(`count`), its natural-log relative frequency among the matching entries (`log_freq = log(count / total)`),
when it was last seen and the circular mean of the times of day it was said at (`mean_hour`; a routine
request has a preferred hour, so the gap between now and it is a context feature of the confidence model;
NaN when the times cancel around the clock, e.g. 06:00 and 18:00, and no hour is preferred).
An entry's time is when its final recognition became available (the job passes the end of its audio), so
"said at" means "finished saying at"; the two differ by the request's few seconds. A candidate that is not
among the matching entries gets `FALLBACK_LOG_FREQ` (-10.0) as its log frequency (the job's prediction table,
`experiments/predictive_asr/table.py`).

The index sorts the entries by time and maps every word prefix (lengths 0 .. n of each entry) to the
ascending timestamps and positions of the entries that start with it; a query is a dictionary look-up and
two binary searches, then a count over the matching entries only.

`personal_predictions` (Arrow tables, any number of users) is the stateless entry point that the job maps
over user partitions (Ray tasks, `experiments/predictive_asr/table.py`); `query_user` answers the queries of
one user from plain Python values (the tests check the two against each other).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from specbench.errors import ConfigError, DataError

FALLBACK_LOG_FREQ = -10.0
HISTORY_WINDOW_S = 28 * 24 * 3600

HISTORY_COLUMNS = ("user_id", "request_id", "timestamp_s", "words")
QUERY_COLUMNS = ("user_id", "request_id", "timestamp_s", "prefix")
PREDICTIONS_SCHEMA = pa.schema([
    pa.field("user_id", pa.string(), nullable=False),
    pa.field("request_id", pa.string(), nullable=False),
    pa.field("prefix", pa.list_(pa.string()), nullable=False),
    pa.field("words", pa.list_(pa.string()), nullable=False),
    pa.field("count", pa.int64(), nullable=False),
    pa.field("log_freq", pa.float64(), nullable=False),
    pa.field("last_seen_s", pa.int64(), nullable=False),
    pa.field("mean_hour", pa.float64(), nullable=False),
])
SECONDS_PER_DAY = 24 * 3600


@dataclass(frozen=True)
class HistoryEntry:
    """One past final recognition of a user: its request, time (seconds) and words."""

    request_id: str
    timestamp_s: int
    words: tuple[str, ...]


@dataclass(frozen=True)
class HistoryQuery:
    """A partial hypothesis `prefix` of request `request_id`, spoken at `before_s` (seconds)."""

    request_id: str
    before_s: int
    prefix: tuple[str, ...]


@dataclass(frozen=True)
class HistoryPrediction:
    """A distinct word sequence among the entries matching a prefix.

    Attributes:
        words: the full earlier recognition.
        count: matching entries with exactly these words (>= 1).
        log_freq: natural log of count / number of matching entries (<= 0).
        last_seen_s: the latest timestamp (seconds) of those entries.
        mean_hour: circular mean of their times of day, hours in [0, 24) (timestamps count from midnight);
            NaN when those times cancel (`circular_hour`).
    """

    words: tuple[str, ...]
    count: int
    log_freq: float
    last_seen_s: int
    mean_hour: float


def _check_window(window_s: int) -> None:
    if isinstance(window_s, bool) or not isinstance(window_s, int) or window_s < 0:
        raise ConfigError(f"history window_s: need an integer number of seconds >= 0, got {window_s!r}")


class PersonalHistory:
    """The history index of ONE user, built from that user's entries (in any order)."""

    def __init__(self, entries: Sequence[HistoryEntry]) -> None:
        ordered = sorted(entries, key=lambda e: (e.timestamp_s, e.request_id))
        seen: set[str] = set()
        for e in ordered:
            if e.request_id in seen:
                raise DataError(
                    f"history: request_id {e.request_id!r} appears twice. Fix: keep one entry per request."
                )
            seen.add(e.request_id)
        self._entries: tuple[HistoryEntry, ...] = tuple(ordered)
        # prefix -> (ascending timestamps, positions in self._entries), both in time order
        self._index: dict[tuple[str, ...], tuple[list[int], list[int]]] = {}
        for pos, e in enumerate(self._entries):
            words = tuple(e.words)
            for n in range(len(words) + 1):
                times, positions = self._index.setdefault(words[:n], ([], []))
                times.append(int(e.timestamp_s))
                positions.append(pos)

    def __len__(self) -> int:
        return len(self._entries)

    def _matching(self, prefix: Sequence[str], before_s: int, window_s: int) -> list[HistoryEntry]:
        """Entries whose words start with `prefix` and with before_s - window_s <= timestamp_s < before_s."""
        _check_window(window_s)
        hit = self._index.get(tuple(prefix))
        if hit is None:
            return []
        times, positions = hit
        lo = bisect_left(times, before_s - window_s)
        hi = bisect_left(times, before_s)
        return [self._entries[p] for p in positions[lo:hi]]

    def matches(self, prefix: Sequence[str], before_s: int,
                window_s: int = HISTORY_WINDOW_S) -> list[HistoryPrediction]:
        """Distinct completions of `prefix` seen in [before_s - window_s, before_s), sorted by count desc,
        then last_seen_s desc, then words; empty when nothing matches."""
        entries = self._matching(prefix, before_s, window_s)
        counts: Counter[tuple[str, ...]] = Counter()
        last: dict[tuple[str, ...], int] = {}
        clock: dict[tuple[str, ...], tuple[float, float]] = {}  # sums of the time of day as a unit vector
        for e in entries:  # time order: the last write is the latest
            words = tuple(e.words)
            counts[words] += 1
            last[words] = int(e.timestamp_s)
            angle = 2.0 * math.pi * (int(e.timestamp_s) % SECONDS_PER_DAY) / SECONDS_PER_DAY
            x, y = clock.get(words, (0.0, 0.0))
            clock[words] = (x + math.cos(angle), y + math.sin(angle))
        total = len(entries)
        out = [HistoryPrediction(w, c, math.log(c / total), last[w], circular_hour(*clock[w], c))
               for w, c in counts.items()]
        out.sort(key=lambda p: (-p.count, -p.last_seen_s, p.words))
        return out


def circular_hour(x: float, y: float, count: int = 1) -> float:
    """The time of day, hours in [0, 24), of the direction (x, y) on a 24-hour clock (0 h along +x), the
    sum of `count` unit vectors; NaN when they cancel (a resultant under 1e-9 per vector is rounding noise,
    whose direction would be an arbitrary hour)."""
    if math.hypot(x, y) <= 1e-9 * count:
        return math.nan
    hour = (math.degrees(math.atan2(y, x)) / 15.0) % 24.0
    return hour if hour < 24.0 else 0.0  # a tiny negative angle rounds up to 24.0 under %


def query_user(entries: Sequence[HistoryEntry], queries: Sequence[HistoryQuery],
               window_s: int = HISTORY_WINDOW_S) -> list[list[HistoryPrediction]]:
    """The predictions of every query of ONE user, in query order (pure: builds the index, answers)."""
    history = PersonalHistory(entries)
    return [history.matches(q.prefix, q.before_s, window_s) for q in queries]


def _columns(table: pa.Table, names: Sequence[str], what: str) -> dict[str, list[Any]]:
    """The named columns as Python lists; DataError naming a missing column or a null value."""
    missing = [n for n in names if n not in table.column_names]
    if missing:
        raise DataError(f"{what} table: missing column(s) {missing}; it has {table.column_names}.")
    out = {}
    for n in names:
        col = table.column(n)
        if col.null_count:
            raise DataError(f"{what} table: column {n!r} has {col.null_count} null value(s); need none.")
        out[n] = col.to_pylist()
    for n in ("words", "prefix"):
        if n in out and any(None in seq for seq in out[n]):
            raise DataError(f"{what} table: column {n!r} holds a null word; need strings only.")
    return out


def personal_predictions(history: pa.Table, queries: pa.Table, window_s: int = HISTORY_WINDOW_S) -> pa.Table:
    """Per-user history predictions for a batch of queries of any number of users.

    history: columns ``user_id: string, request_id: string, timestamp_s: int64, words: list<string>``.
    queries: columns ``user_id: string, request_id: string, timestamp_s: int64 (the query's before_s),
    prefix: list<string>``. Returns a `PREDICTIONS_SCHEMA` table, one row per (query, prediction), queries
    in input order and each query's predictions in `PersonalHistory.matches` order; a query without any
    match has no row.
    """
    h = _columns(history, HISTORY_COLUMNS, "history")
    q = _columns(queries, QUERY_COLUMNS, "queries")
    by_user: dict[str, list[HistoryEntry]] = {}
    for user, rid, ts, words in zip(h["user_id"], h["request_id"], h["timestamp_s"], h["words"], strict=True):
        by_user.setdefault(user, []).append(HistoryEntry(rid, int(ts), tuple(words)))
    indexes = {user: PersonalHistory(entries) for user, entries in by_user.items()}
    empty = PersonalHistory([])
    rows: dict[str, list[Any]] = {f.name: [] for f in PREDICTIONS_SCHEMA}
    queries_rows = zip(q["user_id"], q["request_id"], q["timestamp_s"], q["prefix"], strict=True)
    for user, rid, ts, prefix in queries_rows:
        for p in indexes.get(user, empty).matches(tuple(prefix), int(ts), window_s):
            rows["user_id"].append(user)
            rows["request_id"].append(rid)
            rows["prefix"].append(list(prefix))
            rows["words"].append(list(p.words))
            rows["count"].append(p.count)
            rows["log_freq"].append(p.log_freq)
            rows["last_seen_s"].append(p.last_seen_s)
            rows["mean_hour"].append(p.mean_hour)
    return pa.Table.from_pydict(rows, schema=PREDICTIONS_SCHEMA)
