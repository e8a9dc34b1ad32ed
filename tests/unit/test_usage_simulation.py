"""Simulated SLURP usage: real users and sentences (checked against the speaker files read here
independently), determinism, what each setting changes, calendar columns, and the Zipf routine."""

from __future__ import annotations

import csv
import functools
import gzip
import hashlib
import math
import re
from collections import Counter, defaultdict
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from specbench.data import usage
from specbench.data.resolver import data_file
from specbench.data.slurp import read_split
from specbench.data.text_norm import normalize
from specbench.data.usage import USAGE_SCHEMA, Population, UsageSettings, population, simulate_usage
from specbench.errors import ConfigError, DataError

pytestmark = pytest.mark.unit
DAY = 24 * 3600


@functools.cache
def speaker_rows(relpath: str) -> tuple[tuple[str, int], ...]:
    """(user_id, slurp_id) of every recording in one speaker file, read with the csv module."""
    with gzip.open(data_file(relpath), "rt", encoding="utf-8", newline="") as fh:
        return tuple((r["user_id"], int(r["slurp_id"])) for r in csv.DictReader(fh))


@functools.cache
def pop(split: str, **kwargs: Any) -> Population:
    return population(split, **kwargs)  # type: ignore[arg-type]


@functools.cache
def log(split: str, **kwargs: Any) -> pa.Table:
    return simulate_usage(pop(split), UsageSettings(**kwargs))


def rows(table: pa.Table) -> list[dict[str, Any]]:
    return table.to_pylist()


def test_devel_and_test_users_are_disjoint_test_speakers_with_their_own_test_sentences() -> None:
    recorded: dict[str, set[int]] = defaultdict(set)
    for user, sid in speaker_rows(usage.TEST_SPEAKER_FILE):
        recorded[user].add(sid)
    assert len(recorded) == 142
    test_ids = {u.slurp_id: u for u in read_split("test")}
    devel, test = pop("devel"), pop("test")
    devel_ids, test_ids_users = {u.user_id for u in devel.users}, {u.user_id for u in test.users}
    assert not devel_ids & test_ids_users
    # the documented stable rule: sha256 of the id, read as an integer, is even for devel speakers
    assert all(int(hashlib.sha256(u.encode()).hexdigest(), 16) % 2 == 0 for u in devel_ids)
    assert all(int(hashlib.sha256(u.encode()).hexdigest(), 16) % 2 == 1 for u in test_ids_users)
    assert len(devel.users) + devel.dropped_users + len(test.users) + test.dropped_users == 142
    assert 55 <= len(test.users) <= 75 and 55 <= len(devel.users) <= 75
    for p in (devel, test):
        for user in p.users:
            assert user.user_id in recorded
            texts = [s.normalized_text for s in user.sentences]
            assert len(texts) == len(set(texts)) >= 5
            assert [s.slurp_id for s in user.sentences] == sorted(s.slurp_id for s in user.sentences)
            for s in user.sentences:
                assert s.slurp_id in recorded[user.user_id]
                assert s.sentence == test_ids[s.slurp_id].sentence
                assert s.normalized_text == normalize(s.sentence)
                assert s.scenario == test_ids[s.slurp_id].scenario


def test_train_users_have_only_their_own_training_sentences() -> None:
    held_out = {u.slurp_id for split in ("devel", "test") for u in read_split(split)}
    recorded: dict[str, set[int]] = defaultdict(set)
    for relpath in usage.MINI_SPEAKER_FILES:
        for user, sid in speaker_rows(relpath):
            recorded[user].add(sid)
    train = pop("train")
    assert len(train.users) + train.dropped_users == len(recorded) == 157
    assert len(train.users) > 100
    for user in train.users:
        for s in user.sentences:
            assert s.slurp_id in recorded[user.user_id]
            assert s.slurp_id not in held_out
            assert s.scenario == (s.intent.split("_")[0] if "_" in s.intent else usage.UNKNOWN_SCENARIO)


def test_max_users_is_a_seeded_nested_sorted_sample() -> None:
    full = [u.user_id for u in pop("test").users]
    small, large = pop("test", max_users=10, seed=3), pop("test", max_users=20, seed=3)
    ids10, ids20 = [u.user_id for u in small.users], [u.user_id for u in large.users]
    assert len(ids10) == 10 and ids10 == sorted(ids10) and set(ids10) <= set(ids20) <= set(full)
    assert ids10 == [u.user_id for u in population("test", max_users=10, seed=3).users]
    assert ids10 != [u.user_id for u in pop("test", max_users=10, seed=4).users]
    assert len(pop("test", max_users=1000).users) == len(full)
    assert pop("test", min_sentences=50).dropped_users > pop("test").dropped_users


def test_sentences_are_deduplicated_and_unnormalizable_ones_counted() -> None:
    user, skipped = usage._build_user("X-1", [(7, "Set an alarm!", "alarm_set", "alarm"),
                                              (3, "set an ALARM", "alarm_set", "alarm"),
                                              (9, "<unk>", "general_quirky", "general"),
                                              (5, "play jazz", "play_music", "play")])
    assert skipped == 1
    kept = [(s.slurp_id, s.normalized_text) for s in user.sentences]
    assert kept == [(3, "set an alarm"), (5, "play jazz")]


def test_log_schema_order_and_calendar() -> None:
    table = log("test")
    assert table.schema == USAGE_SCHEMA
    data = rows(table)
    keys = [(r["user_id"], r["timestamp_s"]) for r in data]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)  # sorted, distinct within a user
    assert len({r["request_id"] for r in data}) == len(data)
    for r in data:
        assert 0 <= r["timestamp_s"] < 28 * DAY
        assert r["day"] == r["timestamp_s"] // DAY + 1
        assert r["week"] == (r["day"] - 1) // 7 + 1
        assert r["hour"] == pytest.approx((r["timestamp_s"] % DAY) / 3600, abs=1e-3)
        assert r["evaluated"] == (r["week"] > 1)
    evaluated = sum(r["evaluated"] for r in data)
    assert 3500 <= evaluated <= 6500  # about 3.4 requests a day, 21 days, ~60-70 users


def test_routine_requests_are_the_users_sentences_one_offs_another_speakers() -> None:
    for split in ("train", "test"):
        population_ = pop(split)
        own = {u.user_id: {(s.slurp_id, s.sentence, s.normalized_text, s.scenario, s.intent)
                           for s in u.sentences} for u in population_.users}
        pool = {s.normalized_text for s in population_.pool}
        data = rows(log(split))
        assert {r["user_id"] for r in data} <= set(own)
        sources = Counter(r["text_source"] for r in data)
        assert set(sources) == {"routine", "other_speaker"}, sources  # never the user's own unsaid sentences
        for r in data:
            key = (r["slurp_id"], r["sentence"], r["normalized_text"], r["scenario"], r["intent"])
            assert (key in own[r["user_id"]]) == (r["text_source"] == "routine"), r
            if r["text_source"] == "other_speaker":  # not even another reading of one of the user's own texts
                assert r["normalized_text"] not in {t[2] for t in own[r["user_id"]]}, r
            assert r["normalized_text"] in pool
            assert r["routine"] == (r["text_source"] == "routine")


def test_the_pool_is_every_speaker_of_the_split_with_unique_texts() -> None:
    full, sample = pop("test"), pop("test", max_users=7, seed=5)
    assert sample.pool == full.pool  # independent of sampling
    texts = [s.normalized_text for s in full.pool]
    assert len(texts) == len(set(texts))
    assert {s.normalized_text for u in full.users for s in u.sentences} <= set(texts)


def test_deterministic_and_independent_of_sampling() -> None:
    assert log("test").equals(simulate_usage(pop("test"), UsageSettings()))
    assert not log("test").equals(log("test", seed=1))
    sample = pop("test", max_users=7, seed=5)
    shuffled = Population(tuple(reversed(sample.users)), 0, "test", pool=sample.pool)
    part = simulate_usage(shuffled, UsageSettings())
    ids = {u.user_id for u in sample.users}
    full = [r for r in rows(log("test")) if r["user_id"] in ids]
    assert rows(part) == full and full


def test_history_weeks_changes_only_the_evaluated_flag() -> None:
    base, other = log("test"), log("test", history_weeks=2)
    for name in base.column_names:
        assert base[name].equals(other[name]) == (name != "evaluated"), name
    assert all(r["evaluated"] == (r["week"] > 2) for r in rows(other))


def test_settings_change_what_they_should() -> None:
    base = rows(log("test"))
    assert all(r["routine"] for r in rows(log("test", routine_share=1.0)))
    assert not any(r["routine"] for r in rows(log("test", routine_share=0.0)))
    assert 1.7 < len(rows(log("test", requests_per_day=6.8))) / len(base) < 2.3
    short = rows(log("test", weeks=2))
    assert max(r["day"] for r in short) <= 14 and {r["week"] for r in short} == {1, 2}
    one_off = [r for r in rows(log("test", one_off_hours=(10.0, 11.0))) if not r["routine"]]
    assert one_off and all(10.0 <= r["hour"] <= 11.01 for r in one_off)
    hours: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in rows(log("test", hour_std=0.0)):
        if r["routine"]:
            hours[(r["user_id"], r["normalized_text"])].append(r["hour"])
    assert all(max(h) - min(h) < 0.01 for h in hours.values())
    spread = {s: np.var(list(Counter(r["user_id"] for r in rows(log("test", activity_sigma=s))).values()))
              for s in (0.0, 1.0)}
    assert spread[1.0] > 5 * spread[0.0]


def test_one_offs_are_never_repeats_and_are_other_speakers_texts_of_a_scenario_of_the_user() -> None:
    users = {u.user_id: u for u in pop("test").users}
    for share in (0.3, 0.7, 0.9):
        borrowed = matched = 0
        for user_id, group in _by_user(rows(log("test", routine_share=share))).items():
            routine = {r["normalized_text"] for r in group if r["routine"]}
            one_offs = [r for r in group if not r["routine"]]
            texts = [r["normalized_text"] for r in one_offs]
            assert not routine & set(texts)
            assert len(set(texts)) == len(texts)  # each one-off is new to the user
            sentences = users[user_id].sentences
            assert not {s.normalized_text for s in sentences} & set(texts)  # never the user's own, unsaid ones
            assert all(r["text_source"] == "other_speaker" for r in one_offs)
            scenarios = {s.scenario for s in sentences}
            assert all(r["scenario"] in scenarios for r in one_offs if r["scenario_matched"])
            borrowed += len(one_offs)
            matched += sum(r["scenario_matched"] for r in one_offs)
        assert borrowed > 0 and matched / borrowed > 0.9


def test_a_sweep_of_the_routine_share_changes_only_requests_whose_kind_flips() -> None:
    low, high = rows(log("test", routine_share=0.5)), rows(log("test", routine_share=0.7))
    by_slot = {(r["user_id"], r["slot"]): r for r in low}
    assert len(by_slot) == len(low) == len(high)
    for r in high:
        before = by_slot[(r["user_id"], r["slot"])]
        assert before["routine"] <= r["routine"]  # a higher share only turns one-offs into routine requests
        if before["routine"] == r["routine"]:
            assert before["normalized_text"] == r["normalized_text"]


@pytest.mark.parametrize("share", [0.0, 0.3, 0.8])
def test_realized_repeat_rate_follows_the_routine_share(share: float) -> None:
    """Only routine requests repeat, so the repeat rate is the routine share less each item's first use."""
    summary = usage.usage_summary(log("test", routine_share=share))
    assert summary["usage.routine_request_share"] == pytest.approx(share, abs=0.03)
    assert share - 0.06 <= summary["usage.repeat_rate"] <= share + 1e-9
    if share == 0.0:
        assert summary["usage.repeat_rate"] == 0.0


def test_usage_summary_by_brute_force() -> None:
    data = rows(log("devel"))
    said: set[tuple[str, str]] = set()
    repeats = evaluated = 0
    for r in sorted(data, key=lambda r: (r["user_id"], r["timestamp_s"])):
        key = (r["user_id"], r["normalized_text"])
        if r["evaluated"]:
            evaluated += 1
            repeats += key in said
        said.add(key)
    assert usage.usage_summary(log("devel"))["usage.repeat_rate"] == pytest.approx(repeats / evaluated)


def test_splits_have_their_own_random_streams() -> None:
    """A speaker in two splits (here: the same users relabelled) gets other activity and request times."""
    test = pop("test")
    relabelled = Population(test.users, 0, "devel", pool=test.pool)
    a, b = log("test"), simulate_usage(relabelled, UsageSettings())
    assert a.num_rows != b.num_rows or a["timestamp_s"] != b["timestamp_s"]


def test_a_routine_larger_than_a_users_sentences_is_a_clear_error() -> None:
    fewest = min(len(u.sentences) for u in pop("test").users)
    with pytest.raises(ConfigError, match=rf"routine_size.*Fix: routine_size\[0\] <= {fewest}"):
        simulate_usage(pop("test"), UsageSettings(routine_size=(fewest + 1, fewest + 5)))


def test_an_exhausted_pool_of_new_texts_is_a_clear_error() -> None:
    test = pop("test")
    tiny = Population(test.users[:2], 0, "test", pool=test.pool[:60])
    with pytest.raises(DataError, match=r"never said.*holds \d+\. Fix: usage.requests_per_day <= ") as error:
        simulate_usage(tiny, UsageSettings(routine_share=0.0, requests_per_day=20.0))
    # the value named is one at which that user's requests fit, and the next step up is not
    user_id = re.search(r"user (\S+) of the test split", str(error.value)).group(1)
    named = float(re.search(r"requests_per_day <= ([0-9.]+)", str(error.value)).group(1))
    alone = Population(tuple(u for u in tiny.users if u.user_id == user_id), 0, "test", pool=test.pool[:60])
    assert simulate_usage(alone, UsageSettings(routine_share=0.0, requests_per_day=named)).num_rows > 0
    with pytest.raises(DataError, match=user_id):
        simulate_usage(alone, UsageSettings(routine_share=0.0, requests_per_day=named + 0.1))


def _by_user(data: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in data:
        out[r["user_id"]].append(r)
    return out


@pytest.mark.parametrize("exponent", [0.0, 1.1, 2.0])
def test_routine_repetition_follows_the_zipf_setting(exponent: float) -> None:
    """Ten routine items per user, only routine requests: pooled shares by rank match 1 / i**s."""
    users = population("test", min_sentences=11)
    table = simulate_usage(users, UsageSettings(routine_size=(10, 10), routine_share=1.0,
                                                requests_per_day=20.0, zipf_exponent=exponent))
    ranked = np.zeros(10)
    for group in _by_user(rows(table)).values():
        counts = sorted(Counter(r["normalized_text"] for r in group).values(), reverse=True)
        assert len(counts) <= 10
        ranked[: len(counts)] += np.array(counts) / len(group)
    shares = ranked / len(_by_user(rows(table)))
    weights = np.arange(1, 11) ** -exponent
    expected = weights / weights.sum()
    tol = 0.06 if exponent == 0.0 else 0.03  # sorting uniform counts inflates the top ranks
    assert np.abs(shares[:3] - expected[:3]).max() < tol, (shares, expected)


def test_distinct_seconds_brute_force() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        ts = np.sort(rng.integers(0, 12, size=int(rng.integers(0, 10))))
        out = usage._distinct(ts.astype(np.int64), end=12)
        assert np.all(np.diff(out) >= 1) and (out.size == 0 or (out.min() >= 0 and out.max() < 12))
        if np.all(np.diff(ts) >= 1):
            assert np.array_equal(out, ts)
        assert np.abs(out - ts).max(initial=0) <= ts.size


@pytest.mark.parametrize("field, value", [
    ("seed", -1), ("weeks", 0), ("weeks", 1.5), ("history_weeks", 4), ("history_weeks", -1),
    ("requests_per_day", 0.0), ("requests_per_day", math.nan), ("activity_sigma", -0.1),
    ("routine_size", (0, 3)), ("routine_size", (5, 3)), ("routine_size", (3,)), ("zipf_exponent", -1.0),
    ("routine_share", 1.5), ("hour_std", math.inf), ("one_off_hours", (20.0, 10.0)),
    ("one_off_hours", (7.0, 25.0)), ("seed", True),
])
def test_invalid_settings_name_the_field(field: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=field):
        UsageSettings(**{field: value})


def test_population_arguments_are_checked_and_params_are_flat() -> None:
    with pytest.raises(ConfigError, match="split"):
        population("eval")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="max_users"):
        population("test", max_users=0)
    params = UsageSettings(routine_size=[2, 4], one_off_hours=[8, 20]).as_params()  # type: ignore[arg-type]
    assert params["routine_size_min"] == 2 and params["one_off_hours_end"] == 20.0
    assert all(isinstance(v, (str, int, float)) for v in params.values()) and len(params) == 12


def test_mean_daily_rate_over_users_is_requests_per_day() -> None:
    """The log-normal activity keeps its mean: over all ~250 users, about 3.4 requests a day (sd ~ 0.1)."""
    users = sum(len(pop(split).users) for split in ("train", "devel", "test"))
    requests = sum(log(split).num_rows for split in ("train", "devel", "test"))
    assert requests / users / 28 == pytest.approx(3.4, abs=0.3)
