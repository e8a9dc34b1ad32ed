"""`experiments.predictive_asr.table`: the request frame (every request kept, in request order, a request
without a transcript included with empty transcript columns), the partial rows (only evaluated requests whose
transcript is ok, one row per partial with its index, time, words, posteriors and the words joined by spaces
as the prefix key; a request without partials has none), and the candidates of one (request, prefix) (the LM
n-best and the user's own predictions, each candidate once, with where it came from). Tiny tables written by
hand; the expected rows are read off them."""

from __future__ import annotations

import pyarrow as pa
import pytest

from specbench.experiments.predictive_asr.table import NOT_SAID, _candidates, _partial_rows, request_frame
from specbench.prediction.history import FALLBACK_LOG_FREQ

pytestmark = pytest.mark.unit
PARTIAL = pa.struct([("time_ms", pa.int64()), ("words", pa.list_(pa.string())),
                     ("posteriors", pa.list_(pa.float64()))])


def _partials(*words: list[str]) -> list[dict]:
    """Partials every 120 ms holding `words`, each word of posterior 0.5."""
    return [{"time_ms": 120 * (i + 1), "words": w, "posteriors": [0.5] * len(w)} for i, w in enumerate(words)]


def _tables() -> tuple[pa.Table, pa.Table]:
    requests = pa.table({"request_id": ["r1", "r2", "r3", "r4", "r5", "r6"],
                         "user_id": ["u1", "u1", "u2", "u2", "u1", "u2"], "timestamp_s": [100, 200, 300, 400, 500, 600],
                         "evaluated": [True, False, True, True, True, True], "slot": [0, 1, 2, 3, 4, 5]})
    three = _partials([], ["turn"], ["turn", "off"])
    transcripts = pa.table({  # in another order than the requests; r4 has none
        "request_id": ["r3", "r5", "r1", "r2", "r6"], "utt_id": ["t3", "t5", "t1", "t2", "t6"],
        "status": ["failed: no audio", "ok", "ok", "ok", "ok"],
        "final_words": [[], ["hi"], ["turn", "off"], ["lights", "on"], ["bye"]],
        "ref_words": [["x"], ["hi"], ["turn", "off"], ["lights", "on"], ["bye"]],
        "partials": pa.array([three, [], three, _partials(["lights"]), None], pa.list_(PARTIAL)),
        "end_of_speech_ms": [0.0, 300.0, 500.0, 400.0, 200.0], "end_source": ["none", "vad", "vad", "vad", "vad"],
        "duration_ms": [0.0, 400.0, 700.0, 600.0, 300.0], "audio_sha256": ["a", "b", "c", "d", "e"]})
    return requests, transcripts


def test_the_request_frame_keeps_every_request_in_order() -> None:
    frame = request_frame(*_tables())
    assert frame.columns == ["request_id", "user_id", "timestamp_s", "evaluated", "utt_id", "status",
                             "final_words", "ref_words", "partials", "end_of_speech_ms", "end_source", "duration_ms"]
    assert frame["request_id"].to_list() == ["r1", "r2", "r3", "r4", "r5", "r6"]
    assert frame["utt_id"].to_list() == ["t1", "t2", "t3", None, "t5", "t6"]  # r4: never transcribed
    assert frame["final_words"].to_list() == [["turn", "off"], ["lights", "on"], [], None, ["hi"], ["bye"]]


def test_partial_rows_are_those_of_evaluated_ok_requests() -> None:
    rows = _partial_rows(request_frame(*_tables()))
    # r2 is not evaluated, r3 failed, r4 has no transcript, r5 has no partial and r6 none recorded (null):
    # only r1's three partials
    assert rows["request_id"].to_list() == ["r1"] * 3
    assert rows["partial_index"].to_list() == [0, 1, 2] and str(rows["partial_index"].dtype) == "Int32"
    assert rows["partial_time_ms"].to_list() == [120.0, 240.0, 360.0]
    assert rows["partial_words"].to_list() == [[], ["turn"], ["turn", "off"]]
    assert rows["partial_posteriors"].to_list() == [[], [0.5], [0.5, 0.5]]
    assert rows["prefix_key"].to_list() == ["", "turn", "turn off"]
    assert (rows["user_id"].to_list(), rows["timestamp_s"].to_list()) == (["u1"] * 3, [100] * 3)


def test_each_candidate_appears_once_with_its_source_and_history() -> None:
    key = ("turn",)
    lm = [(("off",), -0.5, 0), (("on",), -1.5, 1)]
    personal = [(("turn", "on"), (-0.7, 900, 21.5)), (("turn", "up"), (-2.0, 600, 7.0))]
    scores = {(key, ("up",)): -6.25, (key, ("on",)): -99.0}  # the score of "on" goes unused: the LM completes it
    rows = _candidates(key, lm, personal, scores)
    assert [(r["prediction_words"], r["source"], r["lm_rank"], r["lm_log_prob"], r["in_lm"], r["in_personal"])
            for r in rows] == [(["turn", "off"], "lm", 0, -0.5, True, False),
                               (["turn", "on"], "both", 1, -1.5, True, True),
                               (["turn", "up"], "personal", -1, -6.25, False, True)]
    assert [(r["personal_log_freq"], r["last_said_s"], r["said_mean_hour"]) for r in rows] == [
        (FALLBACK_LOG_FREQ, None, None), (-0.7, 900, 21.5), (-2.0, 600, 7.0)]
    assert NOT_SAID == (FALLBACK_LOG_FREQ, None, None)
