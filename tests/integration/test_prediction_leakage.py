"""No leakage through the predictions table: `build_predictions` (the path the predictive-ASR job and the
confidence training take: the history as Ray tasks, the shipped word LM as a Ray stage) on a small log, and
a brute-force check that the personal predictions of every (request, partial) are exactly the final
hypotheses of the same user's earlier requests whose audio had ended, never the request's own, a later
request's, one still being spoken or another user's. Once on a hand-made log whose edge cases are named, once
on a log from the usage simulation."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from specbench.data.usage import UsageSettings, population, simulate_usage
from specbench.experiments.predictive_asr.lm_cache import LmCache
from specbench.experiments.predictive_asr.partials import PARTIAL
from specbench.experiments.predictive_asr.table import build_predictions
from specbench.prediction.history import FALLBACK_LOG_FREQ
from specbench.prediction.settings import CompletionSettings
from specbench.stage import STATUS_OK

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]

# (request, user, start s, duration ms, final words): every final differs within a user, so a leaked own or
# later final would show; a2 starts while a1 is still being spoken; b1 and b2 say a1's and a3's words
LOG = [("a1", "A", 1000, 2000.0, "play my music"), ("a2", "A", 1001, 1500.0, "play jazz now"),
       ("a3", "A", 5000, 1200.0, "play the news"), ("a4", "A", 9000, 1800.0, "play some rock music"),
       ("a5", "A", 9001, 900.0, "play my music please"), ("b1", "B", 500, 1000.0, "play the news"),
       ("b2", "B", 6000, 2500.0, "play my music")]


def _tables(log: list[tuple], evaluated: list[bool] | None = None) -> tuple[pa.Table, pa.Table]:
    """The requests and transcripts of `log`: two partials per request, its first word and its first two."""
    requests = pa.table({"request_id": [r[0] for r in log], "user_id": [r[1] for r in log],
                         "timestamp_s": pa.array([r[2] for r in log], pa.int64()),
                         "evaluated": evaluated or [True] * len(log)})
    partials = [[{"time_ms": 300.0, "words": text.split()[:1]}, {"time_ms": 600.0, "words": text.split()[:2]}]
                for *_, text in log]
    transcripts = pa.table({
        "request_id": [r[0] for r in log], "utt_id": [f"utt-{r[0]}" for r in log], "status": [STATUS_OK] * len(log),
        "final_words": [r[4].split() for r in log], "ref_words": [r[4].split() for r in log],
        "partials": pa.array(partials, pa.list_(PARTIAL)), "end_of_speech_ms": [r[3] for r in log],
        "end_source": ["decoder"] * len(log), "duration_ms": [r[3] for r in log]})
    return requests, transcripts


def _expected(request: tuple, prefix: tuple[str, ...], log: list[tuple] = LOG) -> set[tuple[str, ...]]:
    """Brute force: finals of the same user's requests whose audio ended (whole seconds up) before this one
    started, and that extend the prefix."""
    _, user, start, _, _ = request
    return {tuple(text.split()) for _, u, s, duration_ms, text in log
            if u == user and s + math.ceil(duration_ms / 1000.0) < start
            and tuple(text.split()[:len(prefix)]) == prefix}


def _predictions(requests: pa.Table, transcripts: pa.Table) -> pl.DataFrame:
    cache = LmCache(ROOT / "models" / "lm_slurp.pt", CompletionSettings(n_best=2, beam=2, max_new_words=4),
                    persist=False)  # every answer from the Ray stage, none from an earlier run
    return build_predictions(requests, transcripts, cache, shards=2)[0]


def _check_personal(predictions: pl.DataFrame, log: list[tuple], prefixes: Callable[[tuple], set],
                    checked: list[tuple] | None = None) -> int:
    """Every (request, prefix)'s personal predictions, for the requests `checked` (all of `log` by default),
    equal the brute force's over the whole log; returns how many there were."""
    seen = 0
    for request in log if checked is None else checked:
        for prefix in prefixes(request):
            rows = predictions.filter((predictions["request_id"] == request[0])
                                      & (predictions["partial_words"].list.join(" ") == " ".join(prefix)))
            personal = {tuple(w) for w, flag in zip(rows["prediction_words"].to_list(),
                                                    rows["in_personal"].to_list(), strict=True) if flag}
            assert personal == _expected(request, prefix, log), (request[0], prefix)
            seen += len(personal)
    return seen


def test_personal_predictions_come_only_from_earlier_finished_requests(ray_cluster: object) -> None:
    predictions = _predictions(*_tables(LOG))
    by_id = {r[0]: r for r in LOG}
    seen = _check_personal(predictions, LOG, lambda r: {("play",), tuple(r[4].split()[:2])})
    # the context columns too: the candidate was last said (its audio ended) before the request started
    said = predictions.filter(predictions["in_personal"])
    assert said["last_said_s"].null_count() == 0 and (said["last_said_s"] < said["timestamp_s"]).all()
    assert predictions.filter(~predictions["in_personal"])["last_said_s"].null_count() == (~predictions["in_personal"]).sum()
    # the log exercises the history: a3, a4 and a5 see earlier finals of A; a2 none (a1 is still being
    # spoken), a5 not a4 (a4 ends after a5 starts), b2 not A's "play my music"
    assert seen >= 6 and _expected(by_id["a2"], ("play",)) == set()
    assert _expected(by_id["a5"], ("play",)) == {("play", "my", "music"), ("play", "jazz", "now"),
                                                 ("play", "the", "news")}


def test_no_leak_on_a_simulated_log(ray_cluster: object) -> None:
    """A log from the usage simulation (three test users, a history week and an evaluated one, routines and
    one-offs): each final is the request's text followed by its own id, so all finals differ and a leaked
    own or later final would show; durations follow the text's length."""
    simulated = simulate_usage(population("test", 3), UsageSettings(weeks=2, history_weeks=1, routine_share=0.6))
    rows = simulated.to_pylist()
    log = [(r["request_id"], r["user_id"], r["timestamp_s"], 300.0 + 350.0 * len(r["normalized_text"].split()),
            f"{r['normalized_text']} {r['request_id'].lower()}") for r in rows]
    evaluated = [r["evaluated"] for r in rows]
    predictions = _predictions(*_tables(log, evaluated))
    assert set(predictions["request_id"].unique()) == {r[0] for r, e in zip(log, evaluated, strict=True) if e}
    checked = [r for r, e in zip(log, evaluated, strict=True) if e]
    seen = _check_personal(predictions, log, lambda r: {tuple(r[4].split()[:1]), tuple(r[4].split()[:2])},
                           checked)
    repeats = sum(r["routine"] for r, e in zip(rows, evaluated, strict=True) if e)
    assert repeats > 0 and seen > 0  # the history is exercised: repeats find their earlier renditions


# ---- every column of the table against a brute force over a log with each edge case -----------------------

# (request, user, start s, duration ms, final words, reference words, status, evaluated)
EDGE_LOG = [
    ("a0", "A", 400, 1000.0, "play my music", "play my music", STATUS_OK, False),  # history week: no rows
    ("a1", "A", 1000, 2000.0, "play jazz now", "play jazz now", STATUS_OK, True),
    ("a2", "A", 1001, 1500.0, "play the news", "play the news", STATUS_OK, True),  # a1 still being spoken
    ("a3", "A", 1003, 800.0, "play loud rock", "play loud rocks", STATUS_OK, True),  # a1 ends at 1002: seen
    ("a4", "A", 1005, 1200.0, "play failed words", "play failed words", "decoding: no path", True),
    ("a5", "A", 1006, 900.0, "play the rain", "play the rain", STATUS_OK, True),  # a4 failed: not seen
    ("a6", "A", 1008, 1500.0, "play jazz now", "play jazz now please", STATUS_OK, True),  # a5 ends 1006.9: 1007
    ("b1", "B", 500, 1500.0, "play the news", "play the news", STATUS_OK, True),
    ("b2", "B", 502, 2500.0, "play my music", "play my music", STATUS_OK, True),  # b1 ends 501.5: 502, not before
    ("b3", "B", 600, 700.0, "play my music", "play my music", STATUS_OK, True),
    ("c1", "C", 700, 1000.0, "play jazz", "play jazz", STATUS_OK, True),
]


def _edge_partials(words: list[str]) -> list[dict]:
    """An empty partial, the first word twice (two partials with the same words), then the first two."""
    return [{"time_ms": 120.0, "words": []}, {"time_ms": 360.0, "words": words[:1]},
            {"time_ms": 480.0, "words": words[:1]}, {"time_ms": 720.0, "words": words[:2]}]


def _edge_tables() -> tuple[pa.Table, pa.Table]:
    log = EDGE_LOG
    requests = pa.table({"request_id": [r[0] for r in log], "user_id": [r[1] for r in log],
                         "timestamp_s": pa.array([r[2] for r in log], pa.int64()), "evaluated": [r[7] for r in log]})
    ok = [r[6] == STATUS_OK for r in log]
    transcripts = pa.table({
        "request_id": [r[0] for r in log], "utt_id": [f"utt-{r[0]}" for r in log], "status": [r[6] for r in log],
        "final_words": [r[4].split() if o else [] for r, o in zip(log, ok)], "ref_words": [r[5].split() for r in log],
        "partials": pa.array([_edge_partials(r[4].split()) if o else [] for r, o in zip(log, ok)], pa.list_(PARTIAL)),
        "end_of_speech_ms": [r[3] for r in log], "end_source": ["decoder"] * len(log),
        "duration_ms": [r[3] for r in log]})
    return requests, transcripts


def _edge_rows(cache: LmCache) -> list[tuple]:
    """Every row the table should hold, from the log directly and the LM's answers as the cache holds them:
    per partial, the LM's n-best and the finals of the same user's earlier ok requests whose audio ended
    (whole seconds up) before this one started; the label against the final hypothesis, not the reference."""
    rows = []
    for rid, user, start, _, final, _, status, evaluated in EDGE_LOG:
        if not evaluated or status != STATUS_OK:
            continue
        earlier = [(s + math.ceil(d / 1000.0), tuple(f.split())) for _, u, s, d, f, _, st, _ in EDGE_LOG
                   if u == user and st == STATUS_OK and s + math.ceil(d / 1000.0) < start]
        for index, partial in enumerate(_edge_partials(final.split())):
            prefix = tuple(partial["words"])
            said = [(t, w) for t, w in earlier if w[:len(prefix)] == prefix]
            counts = Counter(w for _, w in said)
            history = {w: (math.log(c / len(said)), max(t for t, v in said if v == w)) for w, c in counts.items()}
            candidates = {prefix + w: (lp, rank, True) for w, lp, rank in cache.completions[prefix]}
            for w in history:
                candidates.setdefault(w, (cache.scores[(prefix, w[len(prefix):])], -1, False))
            for words, (log_prob, rank, in_lm) in candidates.items():
                freq, last = history.get(words, (FALLBACK_LOG_FREQ, None))
                rows.append((rid, index, partial["time_ms"], words, pytest.approx(log_prob), rank, in_lm,
                             words in history, pytest.approx(freq), last, len(words) - len(prefix),
                             words == tuple(final.split())))
    return sorted(rows, key=lambda r: (r[0], r[1], r[3]))


def test_every_row_of_the_table_equals_a_brute_force_over_the_log(ray_cluster: object) -> None:
    """Each rule on a log that names its edge cases: a2 does not see a1 (still being spoken), a3 does; a5 does
    not see a4 (its decoding failed); a6 sees a5 once its audio ended (whole seconds up); b2 does not see b1
    (it ends in the second b2 starts); a0 (the history week) gets no rows; a6's repeat of a1 is correct against
    the final hypothesis though the reference differs; each partial keeps its time, and two partials with the
    same words get rows each."""
    cache = LmCache(ROOT / "models" / "lm_slurp.pt", CompletionSettings(n_best=2, beam=2, max_new_words=4),
                    persist=False)
    predictions, requests = build_predictions(*_edge_tables(), cache, shards=2)
    columns = ["request_id", "partial_index", "partial_time_ms", "prediction_words", "lm_log_prob", "lm_rank",
               "in_lm", "in_personal", "personal_log_freq", "last_said_s", "added_words", "correct"]
    got = sorted(((*r[:3], tuple(r[3]), *r[4:]) for r in predictions.select(columns).iter_rows()),
                 key=lambda r: (r[0], r[1], r[3]))
    want = _edge_rows(cache)
    assert [(r[0], r[1], r[3]) for r in got] == [(r[0], r[1], r[3]) for r in want]  # none missing, extra or twice
    for g, w in zip(got, want, strict=True):
        assert g == w, g
    personal = {(r[0], r[3]) for r in got if r[7]}
    assert ("a2", ("play", "jazz", "now")) not in personal and ("a3", ("play", "jazz", "now")) in personal
    assert ("a6", ("play", "the", "rain")) in personal and ("a6", ("play", "failed", "words")) not in personal
    assert ("b2", ("play", "the", "news")) not in personal and ("b3", ("play", "the", "news")) in personal
    assert any(r[0] == "a6" and r[3] == ("play", "jazz", "now") and r[7] and r[11] for r in got)
    assert requests.height == len(EDGE_LOG) and "partials" not in requests.columns
