"""Word-confidence measures at their edges: NCE with confidences of exactly 0 or 1 (clipped to
[1e-6, 1 - 1e-6], as the module says), a single class of labels, and the calibration table's bins on values
that lie on bin edges (scikit-learn's bins (k/b, (k+1)/b], the first one closed), all computed by hand."""

from __future__ import annotations

import math

import pytest

from specbench.metrics import confidence_measures as cm

pytestmark = pytest.mark.unit


def test_nce_clips_certain_confidences() -> None:
    # one wrong word with confidence 1 (clipped to 1 - 1e-6) and one right word with confidence 0.5
    h_constant = 2.0  # share 1/2: -(log2 .5 + log2 .5)
    h_given = -(math.log2(0.5) + math.log2(1e-6))
    got = cm.normalized_cross_entropy([1.0, 0.5], [False, True])
    assert got == pytest.approx((h_constant - h_given) / h_constant, rel=1e-9)
    # and a right word with confidence 0 (clipped to 1e-6)
    assert cm.normalized_cross_entropy([0.0, 0.5], [True, False]) == pytest.approx(
        (h_constant + math.log2(1e-6) + math.log2(0.5)) / h_constant, rel=1e-9)


def test_a_single_class_has_no_nce_and_no_auc() -> None:
    assert cm.normalized_cross_entropy([0.2, 0.9], [False, False]) is None
    assert cm.auc([0.2, 0.9], [False, False]) is None
    assert cm.auc([0.2, 0.9], [True, True]) is None
    assert cm.normalized_cross_entropy([], []) is None and cm.auc([], []) is None


def test_calibration_bins_values_on_edges_into_the_lower_bin() -> None:
    # 4 bins with exact edges 0.25, 0.5, 0.75: [0, .25] gets 0, .25, .25; (.25, .5] gets .3, .5; then .75; 1.0
    p = [0.25, 0.25, 0.3, 0.5, 0.75, 1.0, 0.0]
    c = [True, False, True, True, False, True, False]
    table = cm.calibration_table(p, c, bins=4)
    assert [row["words"] for row in table] == [3, 2, 1, 1]
    assert [row["mean_confidence"] for row in table] == pytest.approx([0.5 / 3, 0.4, 0.75, 1.0])
    assert [row["share_correct"] for row in table] == pytest.approx([1 / 3, 1.0, 0.0, 1.0])


@pytest.mark.parametrize("measure", [cm.normalized_cross_entropy, cm.auc, cm.calibration_table])
def test_mismatched_or_non_probability_confidences_are_an_error(measure) -> None:
    with pytest.raises(ValueError, match="3 confidences but 2 labels"):
        measure([0.5, 0.5, 0.2], [True, False])
    for bad in (math.nan, 1.5, -0.1):
        with pytest.raises(ValueError, match="not a probability"):
            measure([bad, 0.5], [True, False])
