"""Forced alignment on hand-made CTC scores whose best path is known."""

from __future__ import annotations

import numpy as np
import pytest

from specbench.acoustic.alignment import ForcedAligner
from specbench.errors import DataError
from specbench.wfst.lexicon import PHONES
from specbench.wfst.symbols import token_table
from specbench.wfst.topology import ctc_topology_text

pytestmark = pytest.mark.unit
PRONS = {"a": [("AH",), ("EY",)], "cat": [("K", "AE", "T")], "at": [("AE", "T")]}


def scores_for(path: list[str]) -> np.ndarray:
    """Log-probabilities (T, 40) with each frame's labelled token far ahead of the rest."""
    columns = {"<blk>": 0, **{p: i + 1 for i, p in enumerate(PHONES)}}
    mat = np.full((len(path), 40), -12.0, dtype=np.float32)
    for t, token in enumerate(path):
        mat[t, columns[token]] = -0.01
    return mat


@pytest.fixture(scope="module")
def aligner() -> ForcedAligner:
    tokens = token_table(PHONES, 0)
    return ForcedAligner(ctc_topology_text(tokens, PHONES), PRONS, tokens.ids)


def test_word_times_follow_the_best_path(aligner: ForcedAligner) -> None:
    path = ["<blk>", "<blk>", "AH", "<blk>", "K", "AE", "AE", "T", "<blk>", "<blk>", "<blk>", "<blk>"]
    times = aligner.align(["a", "cat"], scores_for(path))
    assert [(t.word, t.start_s, t.end_s) for t in times] == [("a", 0.08, 0.12), ("cat", 0.16, 0.32)]


def test_alternative_pronunciation_and_repeated_words(aligner: ForcedAligner) -> None:
    path = ["EY", "<blk>", "AE", "T", "<blk>", "AE", "<blk>", "T", "<blk>"]
    times = aligner.align(["a", "at", "at"], scores_for(path))
    assert [(t.start_s, t.end_s) for t in times] == [(0.0, 0.04), (0.08, 0.16), (0.2, 0.32)]


def test_impossible_alignment_is_a_clear_error(aligner: ForcedAligner) -> None:
    with pytest.raises(DataError, match="no alignment"):
        aligner.align(["cat", "cat", "cat"], scores_for(["K", "AE"]))  # too few frames
    with pytest.raises(DataError, match="no pronunciation"):
        aligner.align(["dog"], scores_for(["K"]))


def test_rows_aligned_from_given_scores_report_each_failure(aligner: ForcedAligner) -> None:
    """`align_scored_shard`'s row loop: scores computed once elsewhere, one status per row."""
    from specbench.acoustic.alignment import _align_rows, scores_lookup

    given = {"u1": scores_for(["<blk>", "AH", "<blk>", "K", "AE", "T"])}
    rows = [{"utt_id": "u1", "status": "ok", "normalized_text": "a cat"},
            {"utt_id": "u2", "status": "ok", "normalized_text": "a cat"},
            {"utt_id": "u3", "status": "synthesis failed", "normalized_text": "a"}]
    out = _align_rows(rows, aligner, scores_lookup(given))
    assert [w["word"] for w in out[0]["word_times"]] == ["a", "cat"] and out[0]["align_status"] == "ok"
    assert out[1]["word_times"] is None and "no scores" in out[1]["align_status"]
    assert "align_status" not in out[2] and out[2]["status"] == "synthesis failed"
