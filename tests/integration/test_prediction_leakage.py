"""No leakage through the predictions table: `build_predictions` (the path the predictive-ASR job and the
confidence training take: the history as Ray tasks, the shipped word LM as a Ray stage) on a small log, and
a brute-force check that the personal predictions of every (request, partial) are exactly the final
hypotheses of the same user's earlier requests whose audio had ended, never the request's own, a later
request's, one still being spoken or another user's."""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow as pa
import pytest

from specbench.experiments.predictive_asr.lm_cache import LmCache
from specbench.experiments.predictive_asr.partials import PARTIAL
from specbench.experiments.predictive_asr.table import build_predictions
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


def _tables() -> tuple[pa.Table, pa.Table]:
    requests = pa.table({"request_id": [r[0] for r in LOG], "user_id": [r[1] for r in LOG],
                         "timestamp_s": pa.array([r[2] for r in LOG], pa.int64()), "evaluated": [True] * len(LOG)})
    partials = [[{"time_ms": 300.0, "words": ["play"]}, {"time_ms": 600.0, "words": text.split()[:2]}]
                for *_, text in LOG]
    transcripts = pa.table({
        "request_id": [r[0] for r in LOG], "utt_id": [f"utt-{r[0]}" for r in LOG], "status": [STATUS_OK] * len(LOG),
        "final_words": [r[4].split() for r in LOG], "ref_words": [r[4].split() for r in LOG],
        "partials": pa.array(partials, pa.list_(PARTIAL)), "end_of_speech_ms": [r[3] for r in LOG],
        "end_source": ["decoder"] * len(LOG), "duration_ms": [r[3] for r in LOG]})
    return requests, transcripts


def _expected(request: tuple, prefix: tuple[str, ...]) -> set[tuple[str, ...]]:
    """Brute force: finals of the same user's requests whose audio ended (whole seconds up) before this one
    started, and that extend the prefix."""
    _, user, start, _, _ = request
    return {tuple(text.split()) for _, u, s, duration_ms, text in LOG
            if u == user and s + math.ceil(duration_ms / 1000.0) < start
            and tuple(text.split()[:len(prefix)]) == prefix}


def test_personal_predictions_come_only_from_earlier_finished_requests(ray_cluster: object) -> None:
    requests, transcripts = _tables()
    cache = LmCache(ROOT / "models" / "lm_slurp.pt", CompletionSettings(n_best=2, beam=2, max_new_words=4),
                    persist=False)  # every answer from the Ray stage, none from an earlier run
    predictions, _ = build_predictions(requests, transcripts, cache, shards=2)
    by_id = {r[0]: r for r in LOG}
    seen = 0
    for request_id, request in by_id.items():
        for prefix in {("play",), tuple(request[4].split()[:2])}:
            rows = predictions.filter((predictions["request_id"] == request_id)
                                      & (predictions["partial_words"].list.join(" ") == " ".join(prefix)))
            personal = {tuple(w) for w, flag in zip(rows["prediction_words"].to_list(),
                                                    rows["in_personal"].to_list(), strict=True) if flag}
            assert personal == _expected(request, prefix), (request_id, prefix)
            seen += len(personal)
    # the context columns too: the candidate was last said (its audio ended) before the request started
    said = predictions.filter(predictions["in_personal"])
    assert said["last_said_s"].null_count() == 0 and (said["last_said_s"] < said["timestamp_s"]).all()
    assert predictions.filter(~predictions["in_personal"])["last_said_s"].null_count() == (~predictions["in_personal"]).sum()
    # the log exercises the history: a3, a4 and a5 see earlier finals of A; a2 none (a1 is still being
    # spoken), a5 not a4 (a4 ends after a5 starts), b2 not A's "play my music"
    assert seen >= 6 and _expected(by_id["a2"], ("play",)) == set()
    assert _expected(by_id["a5"], ("play",)) == {("play", "my", "music"), ("play", "jazz", "now"),
                                                 ("play", "the", "news")}
