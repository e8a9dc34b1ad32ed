"""Per-source prefetch thresholds (`prediction.by_source`): one threshold over offset scores acts as two
thresholds, checked against a direct two-threshold policy written out request by request."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from specbench.errors import ConfigError
from specbench.prediction.by_source import choose_offset, lm_only, offset_scores
from specbench.prediction.prefetch import first_prefetch


def _predictions(seed: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    rng = np.random.default_rng(seed)
    rows = []
    for r in range(30):
        for p in range(int(rng.integers(1, 6))):
            for c in range(int(rng.integers(1, 4))):
                kind = rng.choice(["lm", "personal", "both"])
                rows.append({"request_id": f"r{r}", "partial_index": p, "partial_time_ms": 120.0 * (p + 1),
                             "prediction_words": [f"w{p}", f"c{c}", kind], "added_words": int(rng.integers(0, 3)),
                             "source": kind, "in_lm": kind != "personal", "in_personal": kind != "lm",
                             "lm_log_prob": float(-rng.uniform(0, 10)), "correct": bool(rng.uniform() < 0.3)})
    requests = pl.DataFrame({"request_id": [f"r{r}" for r in range(30)], "end_of_speech_ms": [2000.0] * 30})
    return pl.DataFrame(rows), requests


def _two_thresholds(scores: np.ndarray, preds: pl.DataFrame, personal_threshold: float,
                    lm_threshold: float) -> dict[str, str]:
    """The outcome of every request under two thresholds, directly: at each partial in time order, the
    candidates that pass their own source's threshold; the one furthest above it is prefetched."""
    outcomes: dict[str, str] = {}
    frame = preds.with_columns(pl.Series("score", scores)).with_row_index("row")
    for (request,), rows in frame.group_by(["request_id"], maintain_order=True):
        outcomes[request] = "none"
        for _, partial in sorted(rows.group_by(["partial_index"]), key=lambda kv: kv[0][0]):
            best = None
            for row in partial.iter_rows(named=True):
                if row["added_words"] < 1:
                    continue
                threshold = lm_threshold if row["in_lm"] and not row["in_personal"] else personal_threshold
                margin = row["score"] - threshold
                if margin >= 0 and (best is None or margin > best[0]):
                    best = (margin, row["correct"])
            if best is not None:
                outcomes[request] = "success" if best[1] else "failure"
                break
    return outcomes


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_one_threshold_over_offset_scores_is_two_thresholds(seed: int) -> None:
    preds, requests = _predictions(seed)
    scores = np.random.default_rng(seed + 10).uniform(size=preds.height)
    for offset in (0.0, 0.15, 0.4):
        for threshold in (0.3, 0.6, 0.9):
            got = first_prefetch(offset_scores(scores, preds, offset), preds, requests, [threshold])
            want = _two_thresholds(scores, preds, threshold, threshold - offset)
            assert dict(zip(got["request_id"], got["outcome"])) == want, (offset, threshold)


def test_only_the_lm_only_rows_move_and_non_candidates_stay_minus_infinity() -> None:
    preds, _ = _predictions(3)
    scores = np.linspace(0.0, 1.0, preds.height)
    scores[0] = -math.inf
    moved = offset_scores(scores, preds, 0.25)
    mask = lm_only(preds)
    assert mask.any() and (~mask).any()
    np.testing.assert_array_equal(moved[~mask], scores[~mask])
    np.testing.assert_allclose(moved[mask][1:] - scores[mask][1:], 0.25)
    assert moved[0] == -math.inf
    with pytest.raises(ConfigError, match="source offset -0.1"):
        offset_scores(scores, preds, -0.1)


def test_the_offset_is_chosen_by_the_devel_figure_ties_to_the_smaller() -> None:
    figures = {0.0: 0.30, 0.2: 0.34, 0.4: 0.34, 0.6: float("nan")}
    offset, rows = choose_offset([0.6, 0.4, 0.2, 0.0], figures.__getitem__)
    assert offset == 0.2
    assert [r["offset"] for r in rows] == [0.0, 0.2, 0.4, 0.6] and math.isnan(rows[-1]["devel_success"])
    assert choose_offset([0.0, 0.3], lambda _: float("nan"))[0] == 0.0  # none reaches the budget: one threshold
    with pytest.raises(ConfigError, match="source_offsets"):
        choose_offset([], lambda _: 0.0)
