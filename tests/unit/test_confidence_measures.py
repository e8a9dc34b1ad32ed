"""Word-confidence measures (metrics/confidence_measures.py): the correct/wrong labels against every
alignment of tiny word sequences, NCE against its definition, AUC and calibration on known cases."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from specbench.metrics import confidence_measures as cm
from specbench.metrics.wer import edit_distance

pytestmark = pytest.mark.unit


def alignments(ref: tuple, hyp: tuple):
    """Every alignment as (edits, matched hypothesis positions)."""
    if not ref or not hyp:
        yield len(ref) + len(hyp), frozenset()
        return
    for edits, matched in alignments(ref[1:], hyp[1:]):
        same = ref[0] == hyp[0]
        yield edits + (not same), frozenset(j + 1 for j in matched) | ({0} if same else set())
    for edits, matched in alignments(ref[1:], hyp):
        yield edits + 1, matched
    for edits, matched in alignments(ref, hyp[1:]):
        yield edits + 1, frozenset(j + 1 for j in matched)


def test_labels_come_from_a_minimum_edit_alignment_with_the_most_matches() -> None:
    rng = np.random.default_rng(0)
    for _ in range(300):
        ref = tuple(rng.integers(0, 3, size=rng.integers(0, 5)).tolist())
        hyp = tuple(rng.integers(0, 3, size=rng.integers(0, 5)).tolist())
        labels = cm.hypothesis_correct(ref, hyp)
        best = min(e for e, _ in alignments(ref, hyp))
        assert best == edit_distance(ref, hyp)
        most = max(len(m) for e, m in alignments(ref, hyp) if e == best)
        assert sum(labels) == most
        assert any(m == {j for j, c in enumerate(labels) if c} for e, m in alignments(ref, hyp) if e == best)


def test_nce_follows_its_definition() -> None:
    correct = [True, True, True, False]
    assert cm.normalized_cross_entropy([0.75] * 4, correct) == pytest.approx(0.0, abs=1e-12)
    p = [0.9, 0.8, 0.6, 0.3]
    h_constant = -(3 * math.log2(0.75) + math.log2(0.25))
    h_given = -(math.log2(0.9) + math.log2(0.8) + math.log2(0.6) + math.log2(0.7))
    assert cm.normalized_cross_entropy(p, correct) == pytest.approx((h_constant - h_given) / h_constant)
    assert cm.normalized_cross_entropy([1.0, 1.0, 1.0, 0.0], correct) == pytest.approx(1.0, abs=1e-4)
    assert cm.normalized_cross_entropy([0.5, 0.5], [True, True]) is None


def test_auc_and_calibration() -> None:
    assert cm.auc([0.9, 0.8, 0.2, 0.1], [True, True, False, False]) == 1.0
    assert cm.auc([0.1, 0.9, 0.5, 0.5], [True, False, True, False]) == pytest.approx(0.125)  # one tie of 4 pairs
    assert cm.auc([0.3], [True]) is None
    table = cm.calibration_table([0.05, 0.15, 0.12, 0.95, 1.0], [False, True, False, True, True], bins=10)
    assert [row["words"] for row in table] == [1, 2, 2]
    assert table[1] == {"mean_confidence": pytest.approx(0.135), "share_correct": 0.5, "words": 2}
    assert table[2]["share_correct"] == 1.0 and cm.calibration_table([], []) == []


def test_every_word_is_labelled() -> None:
    for ref, hyp in itertools.product([(), ("a",), ("a", "b")], repeat=2):
        assert len(cm.hypothesis_correct(ref, hyp)) == len(hyp)
