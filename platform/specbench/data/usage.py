"""Simulated weeks of voice-assistant use by real SLURP speakers, built on each speaker's own sentences.

Personalized predictive ASR completes a partial hypothesis from the user's past recognitions (a personal
history of up to four weeks). SLURP speakers read prompts once; they never used an assistant over weeks. So
the *usage* is simulated, while everything said in it is real:

What is real
- The users: SLURP speaker ids (`user_id`, e.g. ``FE-128``).
- What each user says: only sentences that this same speaker recorded in SLURP, with their SLURP ids and
  intents. `population` builds the users of one split:
  - ``train``: the 157 speakers of ``SLURP_csv_slurp_mini_{FE,FO,ME,MO,UNK}.csv.gz`` with their *training*
    sentences (rows whose `slurp_id` is neither a devel nor a test id). The scenario is the intent's part
    before the first ``_``; SLURP labels about 2 % of training recordings with the action alone (``query``,
    ``joke``), whose scenario is not recoverable: it is ``"unknown"`` there. The training text of SLURP
    repeats a few devel/test texts under other ids (115 texts read by these speakers); they are kept, as in
    SLURP's own training text.
  - ``devel`` and ``test``: the 142 speakers of ``SLURP_csv_slurp_test_per_speaker.csv.gz``, split by
    speaker into two disjoint halves by a stable rule: a speaker is in ``devel`` when
    ``int(sha256(user_id).hexdigest(), 16)`` is even, else in ``test`` (74 / 68 speakers before the
    `min_sentences` filter). Their sentences are the SLURP *test* texts they recorded; sentence, intent and
    scenario are SLURP's own for that `slurp_id` (``test.jsonl.gz``, the text the project's test audio is
    made from).
  A user's sentences are unique by normalized text (the one with the smallest `slurp_id` is kept), ordered
  by `slurp_id`. Sentences that normalize to nothing are skipped and counted (`Population.skipped_sentences`);
  users left with fewer than `min_sentences` sentences are dropped and counted (`Population.dropped_users`).

What is simulated (`simulate_usage`, all settings in `UsageSettings`)
- Activity: the user's mean number of requests per day is ``requests_per_day * exp(activity_sigma * z -
  activity_sigma**2 / 2)`` with ``z ~ N(0, 1)`` (a log-normal spread whose mean is `requests_per_day`); the
  number of requests on each of the ``7 * weeks`` days is Poisson with that mean.
- Routine: each user has a routine of ``k`` of their sentences, ``k`` drawn uniformly from `routine_size`
  (min, max) and capped at the user's sentence count (a `routine_size` minimum above some user's count is a
  `ConfigError` naming the value that works). The routine items are taken in a
  random order, item ``i`` (1-based) has weight ``1 / i**zipf_exponent``, and each item has a preferred hour
  drawn uniformly in [7, 22).
- Requests: with probability `routine_share` a request comes from the routine (an item drawn by weight,
  at its preferred hour plus ``N(0, hour_std)`` hours); otherwise it is a one-off, at an hour drawn
  uniformly in `one_off_hours`, whose text the user has **never said before** (`text_source`). Every
  request is given the new text it says if it is a one-off, whether it is one or not, in decreasing order of
  the uniform draw that decides its kind (routine when the draw is below `routine_share`). The one-offs at any
  share are the requests with the highest draws. Every new text is ``other_speaker``: a text of another
  speaker of the same split (`Population.pool`: for a test user the other test-half speakers' SLURP test
  texts, for a devel user the devel half's, for a training user the other training speakers' sentences),
  never one of the user's own sentences (routine or not) and never one handed out before. Its scenario is
  the scenario of one of the user's own sentences drawn uniformly, so the request is plausible for that
  person (`scenario_matched`); when no unused text of that scenario is left, any unused text. The user's
  own sentences are the routine's source only.
  A sweep of `routine_share` flips only the requests whose draw lies between two shares, and only those
  change text (a routine hour past 24 h is clipped to the day's last second and `_distinct` pushes a tie
  forward, so an unflipped request can move into the next day, and rarely change whether it is evaluated).
  A one-off is therefore never a repeat: the share of evaluated requests whose text the user said before
  (`repeat_rate`) follows `routine_share` and the routine's size. No sentence is ever drawn with
  replacement; a pool that runs out is a `DataError` naming the setting to lower.
  Hours are clipped to [0, 24).
- Time: `timestamp_s` counts seconds from the start of week 1 (day 1, 00:00). Requests of one user that
  fall on the same second are moved apart by whole seconds, so that timestamps are distinct within a user.
  Weeks 1 .. `history_weeks` are history only; later requests are `evaluated`.

Every user has its own random generators, seeded from (`seed`, the split, sha256 of `user_id`): the log of a
user does not depend on which other users are simulated, on their order or on `max_users` sampling (the pool
of other speakers' texts is the whole split's), and a speaker who is in two splits gets independent streams.
"""

from __future__ import annotations

import csv
import functools
import gzip
import hashlib
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from specbench.checks import check_choice, check_float, check_int, check_pair, config_range
from specbench.data import slurp
from specbench.data.resolver import data_file
from specbench.data.text_norm import normalize
from specbench.errors import ConfigError, DataError

UsageSplit = Literal["train", "devel", "test"]
TEST_SPEAKER_FILE = "slurp/speakers/SLURP_csv_slurp_test_per_speaker.csv.gz"
MINI_SPEAKER_FILES = tuple(
    f"slurp/speakers/SLURP_csv_slurp_mini_{g}.csv.gz" for g in ("FE", "FO", "ME", "MO", "UNK")
)
UNKNOWN_SCENARIO = "unknown"
MAX_REQUESTS_PER_DAY = 1000.0  # UsageSettings.requests_per_day's upper bound
MAX_WEEKS, MAX_ROUTINE = 104, 1000  # UsageSettings.weeks' and routine_size's: a typo is refused, not simulated
ROUTINE_HOURS = (7.0, 22.0)
SECONDS_PER_DAY = 24 * 3600

USAGE_SCHEMA = pa.schema([
    pa.field("request_id", pa.string(), nullable=False),
    pa.field("user_id", pa.string(), nullable=False),
    pa.field("timestamp_s", pa.int64(), nullable=False),
    pa.field("week", pa.int32(), nullable=False),
    pa.field("day", pa.int32(), nullable=False),
    pa.field("hour", pa.float32(), nullable=False),
    pa.field("slurp_id", pa.int64(), nullable=False),
    pa.field("sentence", pa.string(), nullable=False),
    pa.field("normalized_text", pa.string(), nullable=False),
    pa.field("scenario", pa.string(), nullable=False),
    pa.field("intent", pa.string(), nullable=False),
    pa.field("routine", pa.bool_(), nullable=False),
    pa.field("evaluated", pa.bool_(), nullable=False),
    pa.field("slot", pa.int32(), nullable=False),  # the request's index before time ordering: see simulate_usage
    pa.field("text_source", pa.string(), nullable=False),  # "routine" or "other_speaker"
    pa.field("scenario_matched", pa.bool_(), nullable=False),  # other_speaker: drawn in the wanted scenario
])


@dataclass(frozen=True)
class UserSentence:
    """One real SLURP sentence of a user: raw text, its normalized form and SLURP's labels."""

    slurp_id: int
    sentence: str
    normalized_text: str
    scenario: str
    intent: str


@dataclass(frozen=True)
class User:
    """A SLURP speaker and their sentences (unique by normalized text, ordered by `slurp_id`)."""

    user_id: str
    sentences: tuple[UserSentence, ...]


@dataclass(frozen=True)
class Population:
    """The users of one split, sorted by `user_id`.

    Attributes:
        users: the kept users.
        skipped_sentences: (user, sentence) pairs skipped because the sentence normalizes to nothing.
        split: "train", "devel" or "test".
        dropped_users: users with fewer than `min_sentences` sentences, left out (before sampling).
        pool: every distinct text (by normalized text, smallest `slurp_id`) of every speaker of the split,
            sampled or not: where one-offs come from (never from the user's own sentences).
    """

    users: tuple[User, ...]
    skipped_sentences: int
    split: str
    dropped_users: int = 0
    pool: tuple[UserSentence, ...] = ()


# ----------------------------------------------------------------------------------------------- reading


def _read_rows(relpath: str, columns: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """The `columns` of every row of one gzipped speaker CSV; DataError when a column is missing."""
    return _read_rows_at(data_file(relpath), columns)


@functools.cache
def _read_rows_at(path: Path, columns: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """`_read_rows` of a resolved path (cached by path, so a changed data directory is read anew)."""
    try:
        with gzip.open(path, "rt", encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in columns if c not in (reader.fieldnames or [])]
            if missing:
                raise DataError(
                    f"{path}: missing column(s) {missing} (has {reader.fieldnames}). Fix: restore the file "
                    "(see `specbench data check`)."
                )
            rows = []
            for row in reader:
                if None in row or None in row.values():  # csv fills a short row with None, keeps extras apart
                    what = "more" if None in row else "fewer"
                    raise DataError(f"{path}, line {reader.line_num}: {what} fields than the header's "
                                    f"{len(reader.fieldnames)}. Fix: restore the file (see `specbench data check`).")
                rows.append(tuple(row[c] for c in columns))
            return tuple(rows)
    except (OSError, EOFError, csv.Error, UnicodeDecodeError) as err:
        raise DataError(f"{path}: unreadable speaker CSV ({err}). Fix: restore the file.") from err


def _slurp_texts(split: slurp.Split) -> dict[int, slurp.SlurpUtterance]:
    """SLURP's devel or test texts by `slurp_id` (do not modify: cached)."""
    return _slurp_texts_at(split, data_file(f"slurp/{split}.jsonl.gz"))


@functools.cache
def _slurp_texts_at(split: slurp.Split, path: Path) -> dict[int, slurp.SlurpUtterance]:
    """`_slurp_texts`, cached by the resolved path of the split's file."""
    return {u.slurp_id: u for u in slurp.read_split(split)}


def _slurp_id(value: str, relpath: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise DataError(f"{relpath}: slurp_id {value!r} is not an integer. Fix: restore the file.") from None


def is_devel_speaker(user_id: str) -> bool:
    """The stable devel/test rule for SLURP test speakers: sha256 of the id, as an integer, is even."""
    return int(hashlib.sha256(user_id.encode("utf-8")).hexdigest(), 16) % 2 == 0


def _scenario_of(intent: str) -> str:
    """SLURP's scenario is the intent's part before the first ``_``; unknown for action-only labels."""
    head, sep, _ = intent.partition("_")
    return head if sep else UNKNOWN_SCENARIO


def _train_candidates() -> dict[str, list[tuple[int, str, str, str]]]:
    """(slurp_id, sentence, intent, scenario) of every training recording, by speaker."""
    held_out = set(_slurp_texts("devel")) | set(_slurp_texts("test"))
    out: dict[str, list[tuple[int, str, str, str]]] = {}
    for relpath in MINI_SPEAKER_FILES:
        rows = _read_rows(relpath, ("user_id", "slurp_id", "sentence", "intent"))
        for user_id, sid_text, sentence, intent in rows:
            sid = _slurp_id(sid_text, relpath)
            out.setdefault(user_id, [])
            if sid not in held_out:
                out[user_id].append((sid, sentence, intent, _scenario_of(intent)))
    return out


def _eval_candidates(split: str) -> dict[str, list[tuple[int, str, str, str]]]:
    """(slurp_id, sentence, intent, scenario) of the test recordings of the devel or test speakers."""
    texts = _slurp_texts("test")
    out: dict[str, list[tuple[int, str, str, str]]] = {}
    for user_id, sid_text in _read_rows(TEST_SPEAKER_FILE, ("user_id", "slurp_id")):
        if is_devel_speaker(user_id) != (split == "devel"):
            continue
        sid = _slurp_id(sid_text, TEST_SPEAKER_FILE)
        utt = texts.get(sid)
        if utt is None:
            raise DataError(
                f"{TEST_SPEAKER_FILE}: slurp_id {sid} of {user_id} is not in SLURP's test.jsonl.gz. "
                "Fix: restore both files from the same SLURP release."
            )
        out.setdefault(user_id, []).append((sid, utt.sentence, utt.intent, utt.scenario))
    return out


def _build_user(user_id: str, rows: list[tuple[int, str, str, str]]) -> tuple[User, int]:
    """A user with unique normalized sentences (smallest slurp_id kept), and the number skipped."""
    kept: dict[str, UserSentence] = {}
    skipped: set[str] = set()
    for sid, sentence, intent, scenario in sorted(set(rows)):
        try:
            norm = normalize(sentence)
        except ValueError:
            norm = ""
        if not norm:
            skipped.add(sentence)
        elif norm not in kept:
            kept[norm] = UserSentence(sid, sentence, norm, scenario, intent)
    return User(user_id, tuple(sorted(kept.values(), key=lambda s: s.slurp_id))), len(skipped)


def _sample_key(seed: int, user_id: str) -> bytes:
    return hashlib.sha256(f"{seed}:{user_id}".encode()).digest()


def population(split: UsageSplit, max_users: int | None = None, seed: int = 0,
               min_sentences: int = 5) -> Population:
    """The users of one split (see the module docstring), sorted by `user_id`.

    `max_users` keeps a seeded sample: the users with the smallest sha256 of ``f"{seed}:{user_id}"``, so a
    smaller sample is a subset of a larger one with the same seed. Users with fewer than `min_sentences`
    sentences are dropped before sampling.
    """
    check_choice("population.split", split, ("train", "devel", "test"))
    if max_users is not None:
        check_int("population.max_users", max_users, 1)
    check_int("population.seed", seed, 0)
    check_int("population.min_sentences", min_sentences, 1)
    candidates = _train_candidates() if split == "train" else _eval_candidates(split)
    pool, _ = _build_user("", [row for rows in candidates.values() for row in rows])
    users: list[User] = []
    skipped = dropped = 0
    for user_id in sorted(candidates):
        user, n_skipped = _build_user(user_id, candidates[user_id])
        skipped += n_skipped
        if len(user.sentences) < min_sentences:
            dropped += 1
        else:
            users.append(user)
    if max_users is not None and max_users < len(users):
        users = sorted(sorted(users, key=lambda u: _sample_key(seed, u.user_id))[:max_users],
                       key=lambda u: u.user_id)
    return Population(tuple(users), skipped, split, dropped, pool.sentences)


# ------------------------------------------------------------------------------------------------ settings


@dataclass(frozen=True)
class UsageSettings:
    """Parameters of the simulated usage (the module docstring says how each is used).

    Attributes:
        seed: seeds every draw (>= 0).
        weeks: simulated weeks (1 to `MAX_WEEKS`), 7 days each.
        history_weeks: leading weeks that are history only (0 <= history_weeks < weeks).
        requests_per_day: mean requests per user and day over users (> 0, at most `MAX_REQUESTS_PER_DAY`).
        activity_sigma: log-normal spread of a user's daily rate (>= 0; 0 = every user has the mean).
        routine_size: (min, max) items of a user's routine, 1 <= min <= max <= `MAX_ROUTINE`.
        zipf_exponent: routine item i (1-based) has weight 1 / i**zipf_exponent (>= 0; 0 = uniform).
        routine_share: probability that a request comes from the routine, in [0, 1].
        hour_std: hours; spread of routine requests around the item's preferred hour (>= 0).
        one_off_hours: (start, end) hours of the uniform time of one-off requests, 0 <= start < end <= 24.
    """

    seed: int = 0
    weeks: int = field(default=4, metadata=config_range(1, MAX_WEEKS))
    history_weeks: int = 1
    # bounded so that a typo (34000 for 3.4) is refused at once rather than simulated (the supply check
    # would search down from it for minutes); the seed's users make a few requests a day
    requests_per_day: float = field(default=3.4, metadata=config_range(0.0, MAX_REQUESTS_PER_DAY))
    activity_sigma: float = 0.5
    routine_size: tuple[int, int] = (3, 12)
    zipf_exponent: float = 1.1
    routine_share: float = 0.7
    hour_std: float = 1.5
    one_off_hours: tuple[float, float] = (7.0, 23.0)

    def __post_init__(self) -> None:
        for name, lo, top in (("seed", 0, None), ("weeks", 1, MAX_WEEKS), ("history_weeks", 0, None)):
            object.__setattr__(self, name, check_int(name, getattr(self, name), lo, top))
        if self.history_weeks >= self.weeks:
            raise ConfigError(
                f"history_weeks: need fewer than weeks={self.weeks} so that some weeks are "
                f"evaluated, got {self.history_weeks}"
            )
        object.__setattr__(self, "requests_per_day", check_float(
            "requests_per_day", self.requests_per_day, 0.0, MAX_REQUESTS_PER_DAY, lo_open=True))
        for name, hi in (("activity_sigma", 5.0), ("zipf_exponent", 10.0), ("routine_share", 1.0),
                         ("hour_std", 24.0)):
            object.__setattr__(self, name, check_float(name, getattr(self, name), 0.0, hi))
        lo, hi = check_pair("routine_size", self.routine_size)
        lo = check_int("routine_size[0] (min)", lo, 1)
        hi = check_int("routine_size[1] (max)", hi, lo, MAX_ROUTINE)
        start, end = check_pair("one_off_hours", self.one_off_hours)
        start = check_float("one_off_hours[0] (start)", start, 0.0, 24.0, hi_open=True)
        end = check_float("one_off_hours[1] (end)", end, 0.0, 24.0)
        if end <= start:
            raise ConfigError(
                f"one_off_hours: need start < end, got {list(self.one_off_hours)}"
            )
        object.__setattr__(self, "routine_size", (lo, hi))
        object.__setattr__(self, "one_off_hours", (start, end))

    def as_params(self) -> dict[str, str | float | int]:
        """Flat parameters for logging (pairs split into ``_min``/``_max`` and ``_start``/``_end``)."""
        return {
            "seed": self.seed, "weeks": self.weeks, "history_weeks": self.history_weeks,
            "requests_per_day": self.requests_per_day, "activity_sigma": self.activity_sigma,
            "routine_size_min": self.routine_size[0], "routine_size_max": self.routine_size[1],
            "zipf_exponent": self.zipf_exponent, "routine_share": self.routine_share,
            "hour_std": self.hour_std, "one_off_hours_start": self.one_off_hours[0],
            "one_off_hours_end": self.one_off_hours[1],
        }


# ---------------------------------------------------------------------------------------------- simulation


def _user_generators(seed: int, split: str, user_id: str, count: int) -> list[np.random.Generator]:
    """`count` independent generators of one user of one split, from (seed, split, sha256 of the user id)."""
    digest = hashlib.sha256(f"{split}:{user_id}".encode()).digest()
    words = [int.from_bytes(digest[i:i + 4], "little") for i in range(0, 16, 4)]
    return [np.random.default_rng(s) for s in np.random.SeedSequence([seed, *words]).spawn(count)]


def _distinct(ts: np.ndarray, end: int) -> np.ndarray:
    """Sorted int64 seconds made strictly increasing by moving ties apart, all kept below `end`."""
    if ts.size == 0:
        return ts
    idx = np.arange(ts.size, dtype=np.int64)
    ts = np.maximum.accumulate(ts - idx) + idx  # t_i >= t_{i-1} + 1
    ts = np.minimum(ts, end - 1)
    return (np.minimum.accumulate((ts - idx)[::-1])[::-1] + idx).astype(np.int64)


def _routine(n_sentences: int, s: UsageSettings, rng: np.random.Generator
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Routine sentence indices (by rank), their Zipf weights and preferred hours, all of shape (k,)."""
    k = min(int(rng.integers(s.routine_size[0], s.routine_size[1] + 1)), n_sentences)
    items = rng.permutation(n_sentences)[:k]
    weights = np.arange(1, k + 1, dtype=np.float64) ** -s.zipf_exponent
    hours = rng.uniform(*ROUTINE_HOURS, size=k)
    return items, weights / weights.sum(), hours


class _NewTexts:
    """One user's supply of never-said texts: other speakers' texts of a wanted scenario (each scenario's list
    shuffled once, on first use), each text at most once, never one of the user's own sentences."""

    def __init__(self, user: User, pool: tuple[UserSentence, ...], rng: np.random.Generator) -> None:
        self.rng, self.user = rng, user
        self.used = {s.normalized_text for s in user.sentences}  # own texts are never borrowed back
        self.by_scenario: dict[str, list[UserSentence]] = {}
        for sentence in pool:
            if sentence.normalized_text not in self.used:
                self.by_scenario.setdefault(sentence.scenario, []).append(sentence)
        self.order: dict[str, list[UserSentence]] = {}
        self.any_order: list[UserSentence] | None = None

    @property
    def supply(self) -> int:
        """How many texts `draw` can hand out: the distinct texts of the pool that are not the user's own."""
        return len({t.normalized_text for texts in self.by_scenario.values() for t in texts})

    def _next_unused(self, queue: list[UserSentence]) -> UserSentence | None:
        while queue:
            sentence = queue.pop()
            if sentence.normalized_text not in self.used:
                return sentence
        return None

    def draw(self) -> tuple[UserSentence, str, bool]:
        """(sentence, text source, scenario matched) of the next one-off."""
        wanted = self.user.sentences[int(self.rng.integers(len(self.user.sentences)))].scenario
        if wanted not in self.order:
            found = self.by_scenario.get(wanted, [])
            self.order[wanted] = [found[int(i)] for i in self.rng.permutation(len(found))]
        sentence, matched = self._next_unused(self.order[wanted]), True
        if sentence is None:
            if self.any_order is None:
                every = [t for texts in self.by_scenario.values() for t in texts]
                self.any_order = [every[int(i)] for i in self.rng.permutation(len(every))]
            sentence, matched = self._next_unused(self.any_order), False
        if sentence is None:  # _check_supply rules this out before the first draw
            raise RuntimeError(f"usage simulation: user {self.user.user_id} drew more one-offs than its supply")
        self.used.add(sentence.normalized_text)
        return sentence, "other_speaker", matched


def _request_days(g_rate: np.random.Generator, g_days: np.random.Generator, s: UsageSettings) -> np.ndarray:
    """Each request's 0-based day, in order: a per-user log-normal activity level (mean
    `requests_per_day`), then a Poisson count per day."""
    sigma = s.activity_sigma
    rate = s.requests_per_day * math.exp(sigma * g_rate.standard_normal() - sigma * sigma / 2)
    n_days = 7 * s.weeks
    return np.repeat(np.arange(n_days, dtype=np.int64), g_days.poisson(rate, size=n_days))


def _request_count(user_id: str, split: str, s: UsageSettings) -> int:
    g_rate, g_days = _user_generators(s.seed, split, user_id, 5)[:2]  # spawned as in _simulate_user: same draws
    return int(_request_days(g_rate, g_days, s).size)


def _check_supply(user: User, split: str, s: UsageSettings, n: int, supply: int) -> None:
    """`DataError` when the user's `n` requests need more never-said texts than `supply` (every request is
    given the text it would say as a one-off, whatever the routine share), naming the largest
    `requests_per_day` (in steps of 0.1) and `weeks` at which this user's requests fit."""
    if n <= supply:
        return
    below = math.ceil(round(s.requests_per_day * 10, 9)) - 1  # the largest step of 0.1 below the rate
    per_day = next((v / 10 for v in range(below, 0, -1)
                    if _request_count(user.user_id, split, replace(s, requests_per_day=v / 10)) <= supply), None)
    weeks = next((w for w in range(s.weeks - 1, s.history_weeks, -1)
                  if _request_count(user.user_id, split, replace(s, weeks=w)) <= supply), None)
    fixes = [f"usage.requests_per_day <= {per_day:g}" if per_day else None,
             f"usage.weeks <= {weeks}" if weeks else None]
    fix = " or ".join(f for f in fixes if f) or "a larger pool of texts (more speakers in the split)"
    raise DataError(
        f"usage simulation: user {user.user_id} of the {split} split makes {n} requests at "
        f"usage.requests_per_day = {s.requests_per_day:g} and usage.weeks = {s.weeks}, and each needs a text the "
        f"user never said, but the split's pool of other speakers' texts (not the user's own) holds "
        f"{supply}. Fix: {fix} (where this user's requests fit; another user may need less)."
    )


def _simulate_user(user: User, pool: tuple[UserSentence, ...], split: str, s: UsageSettings
                   ) -> tuple[np.ndarray, list[UserSentence], np.ndarray, list[str], np.ndarray, np.ndarray]:
    """One user's requests in time order: timestamps (s, int64), sentences, routine flags, text sources,
    scenario-matched flags and slots (each request's index before time ordering)."""
    g_rate, g_days, g_routine, g_requests, g_one_off = _user_generators(s.seed, split, user.user_id, 5)
    n_days = 7 * s.weeks
    day0 = _request_days(g_rate, g_days, s)
    n = day0.size
    items, weights, pref = _routine(len(user.sentences), s, g_routine)
    kind_draw = g_requests.random(n)  # a request is routine when its draw is below routine_share
    routine = kind_draw < s.routine_share
    pick = g_requests.choice(items.size, size=n, p=weights)
    jitter = g_requests.normal(0.0, s.hour_std, size=n)
    hours = np.where(routine, pref[pick] + jitter, g_requests.uniform(*s.one_off_hours, size=n))
    seconds = np.clip(np.floor(np.clip(hours, 0.0, 24.0) * 3600.0), 0, SECONDS_PER_DAY - 1).astype(np.int64)
    order = np.lexsort((np.arange(n), day0 * SECONDS_PER_DAY + seconds))
    ts = _distinct((day0 * SECONDS_PER_DAY + seconds)[order], n_days * SECONDS_PER_DAY)
    routine, item, kind_draw = routine[order], items[pick[order]], kind_draw[order]
    # Every request gets the new text it says if it is a one-off, whether or not it is one at this routine
    # share, handed out in decreasing order of its kind draw: the requests that are one-offs at a share are
    # exactly those with the highest draws, so a sweep of the share changes only the requests whose kind
    # changes.
    new_texts = _NewTexts(user, pool, g_one_off)
    _check_supply(user, split, s, n, new_texts.supply)
    one_off_text: list[tuple[UserSentence, str, bool]] = [None] * n  # type: ignore[list-item]
    for i in np.lexsort((order, -kind_draw)):  # ties (never seen) broken by slot, not by time
        one_off_text[int(i)] = new_texts.draw()
    sentences, sources, matched = [], [], np.zeros(n, dtype=bool)
    for i in range(n):
        if routine[i]:
            sentences.append(user.sentences[int(item[i])])
            sources.append("routine")
        else:
            sentence, source, matched[i] = one_off_text[i]
            sentences.append(sentence)
            sources.append(source)
    return ts, sentences, routine, sources, matched, order


def check_routine_fits(population: Population, settings: UsageSettings) -> None:
    """`ConfigError` when a user has fewer sentences than the routine's minimum size (before any work)."""
    if not population.users:
        return
    fewest = min(population.users, key=lambda u: len(u.sentences))
    if settings.routine_size[0] > len(fewest.sentences):
        raise ConfigError(
            f"usage.routine_size = {list(settings.routine_size)}: user {fewest.user_id} of the "
            f"{population.split} split has only {len(fewest.sentences)} sentences, fewer than the routine's "
            f"minimum. Fix: routine_size[0] <= {len(fewest.sentences)} (e.g. [{len(fewest.sentences)}, "
            f"{max(len(fewest.sentences), settings.routine_size[1])}])."
        )


def simulate_usage(population: Population, settings: UsageSettings | None = None) -> pa.Table:
    """The simulated request log of every user of `population`: a `USAGE_SCHEMA` table, one row per
    request, sorted by (user_id, timestamp_s).

    `timestamp_s` (int64) is seconds from the start of week 1 and distinct within a user; `day` (int32) is
    the 1-based day from the start (1 .. 7 * weeks); `week` (int32) is 1-based; `hour` (float32) is the hour
    of day in [0, 24); `request_id` is ``f"{user_id}-{n:05d}"`` with n the request's 0-based rank in time
    within the user; `evaluated` is ``week > history_weeks``; `text_source` and `scenario_matched` say
    where a request's text came from (the module docstring). `slot` identifies a request of a user across
    settings that move requests in time: it is the request's index among the user's requests ordered by day
    (the Poisson draws) before the hours are drawn, so a sweep of `routine_share`, which changes the hours
    of the requests whose kind flips and with them the ranks in `request_id`, keeps every request's slot.
    """
    s = settings if settings is not None else UsageSettings()
    check_routine_fits(population, s)
    cols: dict[str, list[Any]] = {f.name: [] for f in USAGE_SCHEMA}
    for user in sorted(population.users, key=lambda u: u.user_id):
        ts, chosen, routine, sources, matched, slot = _simulate_user(user, population.pool, population.split, s)
        day = ts // SECONDS_PER_DAY + 1
        week = (day - 1) // 7 + 1
        cols["request_id"] += [f"{user.user_id}-{i:05d}" for i in range(ts.size)]
        cols["user_id"] += [user.user_id] * ts.size
        cols["timestamp_s"].append(ts)
        cols["week"].append(week.astype(np.int32))
        cols["day"].append(day.astype(np.int32))
        cols["hour"].append(((ts % SECONDS_PER_DAY) / 3600.0).astype(np.float32))
        cols["routine"].append(routine)
        cols["evaluated"].append(week > s.history_weeks)
        cols["slot"].append(slot.astype(np.int32))
        cols["text_source"] += sources
        cols["scenario_matched"].append(matched)
        cols["slurp_id"] += [c.slurp_id for c in chosen]
        for name in ("sentence", "normalized_text", "scenario", "intent"):
            cols[name] += [getattr(c, name) for c in chosen]
    arrays = []
    for f in USAGE_SCHEMA:
        values: Any = cols[f.name]
        if values and isinstance(values[0], np.ndarray):
            values = np.concatenate(values)
        arrays.append(pa.array(values, type=f.type))
    return pa.Table.from_arrays(arrays, schema=USAGE_SCHEMA)


def usage_summary(log: pa.Table) -> dict[str, float]:
    """What the simulation realized, for logging: the repeat rate (evaluated requests whose text the same
    user said earlier), the share of evaluated requests from the routine, the share of one-offs that are
    other speakers' texts, and the share of those drawn in the wanted scenario (nan where undefined)."""
    import polars as pl

    frame = pl.from_arrow(log.select(["user_id", "normalized_text", "evaluated", "text_source",
                                      "scenario_matched", "timestamp_s"])).sort(["user_id", "timestamp_s"])
    frame = frame.with_columns(pl.int_range(pl.len()).over(["user_id", "normalized_text"]).gt(0).alias("repeat"))
    evaluated = frame.filter(pl.col("evaluated"))
    one_offs = evaluated.filter(pl.col("text_source") != "routine")
    borrowed = one_offs.filter(pl.col("text_source") == "other_speaker")

    def share(part: int, whole: int) -> float:
        return part / whole if whole else math.nan

    return {
        "usage.repeat_rate": share(evaluated["repeat"].sum(), evaluated.height),
        "usage.routine_request_share": share(evaluated.filter(pl.col("text_source") == "routine").height,
                                             evaluated.height),
        "usage.one_off_other_speaker_share": share(borrowed.height, one_offs.height),
        "usage.other_speaker_same_scenario_share": share(borrowed["scenario_matched"].sum(), borrowed.height),
    }
