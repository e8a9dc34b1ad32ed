"""The prefetch policy and its metrics: hand-made tables with known outcomes, and a brute-force reference
(plain loops over requests and partials) that the vectorized single- and multi-attempt policies must equal."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specbench.errors import ConfigError, DataError
from specbench.prediction.prefetch import (
    SWEEP_COLUMNS,
    Outcome,
    first_prefetch,
    multi_prefetch,
    operating_point,
    oracle_gain_ms,
    oracle_rate,
    summarize,
    sweep,
    validate_thresholds,
)

pytestmark = pytest.mark.unit


@dataclass(frozen=True)
class Row:
    request: str
    partial_index: int
    time_ms: float
    partial: tuple[str, ...]
    prediction: tuple[str, ...]
    source: str
    lm_log_prob: float
    correct: bool

    @property
    def added(self) -> int:
        return len(self.prediction) - len(self.partial)


def tables(rows: list[Row], requests: dict[str, float], arrow: bool = False) -> tuple[object, object]:
    """(predictions, requests) tables with the documented columns."""
    pred = pl.DataFrame({
        "request_id": pl.Series([r.request for r in rows], dtype=pl.String),
        "partial_index": pl.Series([r.partial_index for r in rows], dtype=pl.Int32),
        "partial_time_ms": pl.Series([r.time_ms for r in rows], dtype=pl.Float64),
        "partial_words": pl.Series([list(r.partial) for r in rows], dtype=pl.List(pl.String)),
        "prediction_words": pl.Series([list(r.prediction) for r in rows], dtype=pl.List(pl.String)),
        "added_words": pl.Series([r.added for r in rows], dtype=pl.Int32),
        "source": pl.Series([r.source for r in rows], dtype=pl.String),
        "lm_log_prob": pl.Series([r.lm_log_prob for r in rows], dtype=pl.Float64),
        "lm_rank": pl.Series([0] * len(rows), dtype=pl.Int32),
        "personal_log_freq": pl.Series([-10.0] * len(rows), dtype=pl.Float64),
        "correct": pl.Series([r.correct for r in rows], dtype=pl.Boolean),
    })
    req = pl.DataFrame({"request_id": list(requests), "end_of_speech_ms": list(requests.values()),
                        "final_words": [["x"]] * len(requests)})
    return (pred.to_arrow(), req.to_arrow()) if arrow else (pred, req)


def reference(scores: list[float], rows: list[Row], requests: dict[str, float], thresholds: list[float],
              max_attempts: int) -> list[dict[str, object]]:
    """The policy written as plain loops, one (threshold, request) at a time."""
    out = []
    for t in thresholds:
        for rid, end_ms in requests.items():
            cands = [i for i, r in enumerate(rows) if r.request == rid and r.added >= 1]
            attempts: list[int] = []
            won = None
            for p in sorted({rows[i].partial_index for i in cands}):
                group = [i for i in cands if rows[i].partial_index == p]
                best = min(group, key=lambda i: (-scores[i], -rows[i].lm_log_prob,
                                                 rows[i].source == "lm", rows[i].prediction, i))
                if scores[best] < t or rows[best].prediction in [rows[a].prediction for a in attempts]:
                    continue
                attempts.append(best)
                if rows[best].correct:
                    won = best
                    break
                if len(attempts) == max_attempts:
                    break
            last = attempts[-1] if attempts else None
            out.append({
                "threshold": t, "request_id": rid,
                "outcome": "none" if last is None else "success" if won is not None else "failure",
                "attempts": len(attempts), "failed_attempts": len(attempts) - (won is not None),
                "partial_index": None if last is None else rows[last].partial_index,
                "partial_time_ms": None if last is None else rows[last].time_ms,
                "gain_ms": None if won is None else end_ms - rows[won].time_ms,
                "gain_words": None if won is None else rows[won].added,
            })
    return out


def as_records(frame: pl.DataFrame) -> list[dict[str, object]]:
    return frame.to_dicts()


def same(got: list[dict[str, object]], want: list[dict[str, object]]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.keys() == w.keys()
        for key in w:
            if isinstance(w[key], float):
                assert g[key] == pytest.approx(w[key], abs=1e-9), (key, g, w)
            else:
                assert g[key] == w[key], (key, g, w)


# --- hand-made cases -------------------------------------------------------------------------------------------

def R(req: str, p: int, partial: str, prediction: str, final: str, source: str = "lm", lm: float = -1.0,
      time_ms: float | None = None) -> Row:
    return Row(req, p, 120.0 * (p + 1) if time_ms is None else time_ms, tuple(partial.split()),
               tuple(prediction.split()), source, lm, prediction == final)


def test_known_outcomes_at_each_threshold() -> None:
    rows = [
        R("ok", 0, "turn", "turn on the light", "turn on the light"),  # correct, score 0.6
        R("ok", 0, "turn", "turn off", "turn on the light"),  # wrong, score 0.3
        R("bad", 0, "play", "play music", "play jazz"),  # wrong, score 0.8
        R("bad", 1, "play jazz", "play jazz", "play jazz"),  # adds nothing: never a candidate
        R("late", 0, "stop the", "stop the timer", "stop the timer", time_ms=2500.0),  # after end of speech
    ]
    scores = [0.6, 0.3, 0.8, 0.99, 0.7]
    pred, req = tables(rows, {"ok": 1000.0, "bad": 900.0, "late": 2000.0, "empty": 500.0})
    out = first_prefetch(scores, pred, req, [0.5, 0.65, 0.9])
    got = {(r["threshold"], r["request_id"]): r for r in out.to_dicts()}
    assert got[(0.5, "ok")]["outcome"] == Outcome.SUCCESS
    assert got[(0.5, "ok")]["gain_ms"] == 1000.0 - 120.0 and got[(0.5, "ok")]["gain_words"] == 3
    assert got[(0.65, "ok")]["outcome"] == Outcome.NONE
    assert got[(0.5, "bad")]["outcome"] == Outcome.FAILURE and got[(0.5, "bad")]["gain_ms"] is None
    assert got[(0.5, "bad")]["failed_attempts"] == 1 and got[(0.5, "bad")]["partial_index"] == 0
    assert got[(0.9, "bad")]["outcome"] == Outcome.NONE  # the 0.99 row adds no word
    assert got[(0.5, "late")]["outcome"] == Outcome.SUCCESS and got[(0.5, "late")]["gain_ms"] == -500.0
    assert all(got[(t, "empty")]["outcome"] == Outcome.NONE for t in (0.5, 0.65, 0.9))
    assert got[(0.5, "empty")]["partial_index"] is None and got[(0.5, "empty")]["attempts"] == 0
    table = summarize(out)
    assert table.columns == list(SWEEP_COLUMNS)
    first = table.row(0, named=True)
    assert (first["success"], first["failure"], first["none"], first["requests"]) == (2, 1, 1, 4)
    assert first["failed_rate"] == 0.25 and first["success_rate"] == 0.5
    assert first["gain_ms_success"] == pytest.approx((880.0 - 500.0) / 2)
    assert first["gain_ms_all"] == pytest.approx((880.0 - 500.0) / 4)
    assert first["gain_words_success"] == pytest.approx(2.0)
    last = table.row(2, named=True)
    assert last["none"] == 4 and math.isnan(last["gain_ms_success"]) and last["gain_ms_all"] == 0.0


def test_later_partial_prefetches_when_earlier_ones_fall_short() -> None:
    rows = [R("a", 0, "set", "set a", "set an alarm"), R("a", 1, "set an", "set an alarm", "set an alarm"),
            R("a", 2, "set an alarm", "set an alarm for", "set an alarm")]
    pred, req = tables(rows, {"a": 1000.0})
    out = first_prefetch([0.2, 0.7, 0.9], pred, req, [0.1, 0.5, 0.8, 0.95]).to_dicts()
    assert [(r["outcome"], r["partial_index"]) for r in out] == [
        ("failure", 0), ("success", 1), ("failure", 2), ("none", None)]
    assert out[1]["gain_ms"] == 1000.0 - 240.0


def test_ties_prefer_lm_probability_then_personal_source_then_words() -> None:
    """Equal scores; in each request the rule under test picks the right candidate and every later rule
    would pick the wrong one ("call dad" < "call mum" in word order)."""
    rows = [  # a: the LM probability decides, against the personal source and the word order
            R("a", 0, "call", "call mum", "call mum", "lm", lm=-1.0),
            R("a", 0, "call", "call dad", "call mum", "personal", lm=-2.0),
            # b: the personal source decides, against the word order
            R("b", 0, "call", "call mum", "call mum", "personal"), R("b", 0, "call", "call dad", "call mum", "lm"),
            # c: the word order decides
            R("c", 0, "call", "call mum", "call dad"), R("c", 0, "call", "call dad", "call dad"),
            # d: a history candidate the LM also proposed ("both") is a personal one too
            R("d", 0, "call", "call mum", "call mum", "both"),
            R("d", 0, "call", "call dad", "call mum", "lm")]
    pred, req = tables(rows, {"a": 900.0, "b": 900.0, "c": 900.0, "d": 900.0})
    out = first_prefetch([0.5] * 8, pred, req, [0.5]).to_dicts()
    assert [(r["request_id"], r["outcome"]) for r in out] == [(rid, "success") for rid in "abcd"]
    scored = first_prefetch([0.5, 0.6, 0.5, 0.6, 0.5, 0.5, 0.5, 0.5], pred, req, [0.5]).to_dicts()
    assert [r["outcome"] for r in scored] == ["failure", "failure", "success", "success"]  # higher score 1st


def test_multi_attempts_skip_repeats_and_stop_at_success() -> None:
    rows = [R("a", 0, "play", "play rock", "play the news"), R("a", 1, "play", "play rock", "play the news"),
            R("a", 2, "play the", "play the radio", "play the news"),
            R("a", 3, "play the", "play the news", "play the news")]
    pred, req = tables(rows, {"a": 1000.0})
    scores = [0.9, 0.9, 0.9, 0.9]
    k1, k2, k3, k9 = (multi_prefetch(scores, pred, req, [0.5], k).row(0, named=True) for k in (1, 2, 3, 9))
    assert (k1["outcome"], k1["attempts"], k1["failed_attempts"], k1["partial_index"]) == ("failure", 1, 1, 0)
    assert (k2["outcome"], k2["attempts"], k2["failed_attempts"], k2["partial_index"]) == ("failure", 2, 2, 2)
    assert (k3["outcome"], k3["attempts"], k3["failed_attempts"], k3["gain_ms"]) == ("success", 3, 2, 520.0)
    assert k9 == k3
    table = sweep(scores, pred, req, [0.5], max_attempts=3)
    assert table["failed_rate"][0] == 2.0 and table["success_rate"][0] == 1.0


def test_input_errors_name_the_problem() -> None:
    pred, req = tables([R("a", 0, "x", "x y", "x y")], {"a": 500.0})
    with pytest.raises(DataError, match=r"\(1,\)"):
        first_prefetch([0.5, 0.5], pred, req, [0.5])
    with pytest.raises(DataError, match="NaN"):
        first_prefetch([math.nan], pred, req, [0.5])
    with pytest.raises(DataError, match="'lm_log_prob'"):
        first_prefetch([0.5], pred.drop("lm_log_prob"), req, [0.5])
    with pytest.raises(DataError, match="'end_of_speech_ms'"):
        oracle_rate(pred, req.drop("end_of_speech_ms"))
    with pytest.raises(DataError, match="'a'"):
        multi_prefetch([0.5], pred, tables([], {"b": 500.0})[1], [0.5])
    with pytest.raises(DataError, match="more than once"):
        sweep([0.5], pred, pl.concat([req, req]), [0.5])
    with pytest.raises(ConfigError, match="max_attempts"):
        multi_prefetch([0.5], pred, req, [0.5], max_attempts=0)


@pytest.mark.parametrize("bad", [[], [0.5, 0.5], [0.6, 0.4], [0.1, math.inf], [math.nan], ["x"]])
def test_thresholds_must_be_finite_and_strictly_increasing(bad: list[object]) -> None:
    with pytest.raises(ConfigError, match="thresholds"):
        validate_thresholds(bad)
    pred, req = tables([], {"a": 1.0})
    with pytest.raises(ConfigError):
        first_prefetch([], pred, req, bad)


def test_validate_thresholds_takes_arrays() -> None:
    assert validate_thresholds(np.array([-3, 0.5])) == (-3.0, 0.5)
    assert validate_thresholds(np.linspace(0.0, 1.0, 5)) == (0.0, 0.25, 0.5, 0.75, 1.0)


def test_oracle_counts_the_first_correct_candidate() -> None:
    rows = [R("a", 0, "x", "x y", "x z"), R("a", 1, "x", "x z", "x z"), R("a", 2, "x z", "x z", "x z"),
            R("b", 0, "q", "q r", "q s"), R("c", 0, "m n", "m n", "m n")]
    pred, req = tables(rows, {"a": 1000.0, "b": 800.0, "c": 700.0, "d": 600.0}, arrow=True)
    assert oracle_rate(pred, req) == 0.25  # c's correct row adds nothing
    assert oracle_gain_ms(pred, req) == 1000.0 - 240.0
    assert math.isnan(oracle_gain_ms(tables(rows[3:4], {"b": 1.0})[0], tables([], {"b": 1.0})[1]))


def test_operating_point_picks_lowest_threshold_within_failed_budget() -> None:
    table = pl.DataFrame({"threshold": [0.2, 0.4, 0.6, 0.8], "success_rate": [0.5, 0.4, 0.3, 0.1],
                          "failed_rate": [0.3, 0.12, 0.08, 0.01], "gain_ms_all": [1.0, 2.0, 3.0, 4.0],
                          "gain_ms_success": [5.0, 6.0, 7.0, 8.0], "gain_words_success": [1.0, 1.5, 2.0, 2.5]})
    op = operating_point(table, 0.10)
    assert op == {"threshold": 0.6, "success_rate": 0.3, "failed_rate": 0.08, "gain_ms_all": 3.0,
                  "gain_ms_success": 7.0, "gain_words_success": 2.0}
    assert operating_point(table, 0.12)["threshold"] == 0.4
    none = operating_point(table, 0.005)
    assert none["threshold"] is None and math.isnan(none["success_rate"])
    with pytest.raises(ConfigError, match="max_failed_rate"):
        operating_point(table, 1.5)


# --- random tables against the brute-force reference -----------------------------------------------------------

VOCAB = ("a", "b", "ab", "c")


@st.composite
def problems(draw: st.DrawFn) -> tuple[list[Row], dict[str, float], list[float], list[float]]:
    words = st.sampled_from(VOCAB)
    requests: dict[str, float] = {}
    rows: list[Row] = []
    for r in range(draw(st.integers(1, 4))):
        rid = f"r{r}"
        requests[rid] = draw(st.sampled_from([100.0, 400.0, 700.0]))
        final = tuple(draw(st.lists(words, min_size=1, max_size=4)))
        for p in range(draw(st.integers(0, 4))):
            partial = final[:draw(st.integers(0, len(final)))]
            for _ in range(draw(st.integers(0, 3))):
                extra = final[len(partial):] if draw(st.booleans()) else tuple(draw(st.lists(words, max_size=2)))
                prediction = partial + extra
                rows.append(Row(rid, p, 120.0 * (p + 1), partial, prediction,
                                draw(st.sampled_from(["lm", "personal", "both"])),
                                draw(st.sampled_from([-1.0, -2.0])),
                                prediction == final))
    scores = [draw(st.sampled_from([0.2, 0.5, 0.8])) for _ in rows]
    thresholds = sorted(draw(st.sets(st.sampled_from([0.1, 0.2, 0.35, 0.5, 0.8, 0.9]), min_size=1)))
    return rows, requests, scores, thresholds


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems(), st.integers(1, 3), st.booleans())
def test_vectorized_policies_equal_brute_force(problem: tuple, k: int, arrow: bool) -> None:
    rows, requests, scores, thresholds = problem
    pred, req = tables(rows, requests, arrow=arrow)
    multi = multi_prefetch(scores, pred, req, thresholds, max_attempts=k)
    same(as_records(multi), reference(scores, rows, requests, thresholds, k))
    first = first_prefetch(scores, pred, req, thresholds)
    same(as_records(first), reference(scores, rows, requests, thresholds, 1))
    if k == 1:
        assert first.equals(multi)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems(), st.integers(1, 3))
def test_sweep_counts_every_request_once_and_stays_below_oracle(problem: tuple, k: int) -> None:
    rows, requests, scores, thresholds = problem
    pred, req = tables(rows, requests)
    table = sweep(scores, pred, req, thresholds, max_attempts=k)
    assert table["threshold"].to_list() == thresholds
    assert (table["none"] + table["success"] + table["failure"] == table["requests"]).all()
    assert (table["requests"] == len(requests)).all()
    oracle = oracle_rate(pred, req)
    assert (table["success_rate"] <= oracle + 1e-12).all()
    if k == 1:
        assert (table["failed_rate"] * len(requests) - table["failure"]).abs().max() < 1e-9


def test_larger_random_table_single_equals_multi_one() -> None:
    rng = np.random.default_rng(3)
    n_req, per = 300, 40
    rows = []
    for r in range(n_req):
        for i in range(per):
            p = i // 4
            partial = tuple(VOCAB[j] for j in rng.integers(0, 4, p % 3))
            pred_words = partial + tuple(VOCAB[j] for j in rng.integers(0, 4, rng.integers(0, 3)))
            rows.append(Row(f"q{r}", p, 120.0 * p, partial, pred_words, "lm" if i % 3 else "personal",
                            float(rng.integers(-3, 0)), bool(rng.random() < 0.2)))
    requests = {f"q{r}": float(rng.uniform(0, 1500)) for r in range(n_req + 5)}
    scores = rng.integers(0, 20, len(rows)) / 20.0
    pred, req = tables(rows, requests)
    grid = validate_thresholds(np.linspace(0.0, 1.0, 21))
    single = first_prefetch(scores, pred, req, grid)
    assert single.equals(multi_prefetch(scores, pred, req, grid, max_attempts=1))
    assert single.height == len(grid) * len(requests)
    subset = [0.35, 0.7]
    same(as_records(multi_prefetch(scores, pred, req, subset, max_attempts=2)),
         reference(list(scores), rows, requests, subset, 2))
