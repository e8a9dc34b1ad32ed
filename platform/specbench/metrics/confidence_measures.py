"""How good word confidences are: each hypothesis word labelled correct or not by aligning it with the
reference, then normalized cross entropy (NCE, the NIST measure), the area under the ROC curve and a
calibration table.

NCE = (H(C) - H(C | p)) / H(C): H(C) the binary entropy (in bits, summed over words) of a constant
confidence equal to the share of correct words, H(C | p) the cross entropy of the confidences p
(clipped to [1e-6, 1 - 1e-6]). Above 0: better than that constant; 1: certain and right. AUC and the
calibration table are scikit-learn's (`roc_auc_score`, `calibration_curve`).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import numpy as np
from sklearn.calibration import calibration_curve
from sklearn.metrics import roc_auc_score

CLIP = 1e-6


def hypothesis_correct(reference: Sequence[Hashable], hypothesis: Sequence[Hashable]) -> list[bool]:
    """For each hypothesis word, whether a minimum-edit alignment with the reference matches it with an
    equal word (among the minimum-edit alignments, one with the most matches)."""
    n, m = len(reference), len(hypothesis)
    # (edits, -matches) per prefix pair, compared as tuples
    table = [[(0, 0)] * (m + 1) for _ in range(n + 1)]
    for i in range(1, n + 1):
        table[i][0] = (i, 0)
    for j in range(1, m + 1):
        table[0][j] = (j, 0)
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            same = reference[i - 1] == hypothesis[j - 1]
            e, neg = table[i - 1][j - 1]
            table[i][j] = min((e + (not same), neg - same), (table[i - 1][j][0] + 1, table[i - 1][j][1]),
                              (table[i][j - 1][0] + 1, table[i][j - 1][1]))
    correct, i, j = [False] * m, n, m
    while i > 0 and j > 0:
        same = reference[i - 1] == hypothesis[j - 1]
        e, neg = table[i - 1][j - 1]
        if table[i][j] == (e + (not same), neg - same):
            correct[j - 1] = same
            i, j = i - 1, j - 1
        elif table[i][j] == (table[i - 1][j][0] + 1, table[i - 1][j][1]):
            i -= 1
        else:
            j -= 1
    return correct


def _pairs(confidences: Sequence[float], correct: Sequence[bool]) -> tuple[np.ndarray, np.ndarray]:
    """The confidences and labels as arrays; ValueError unless one label per confidence, each in [0, 1]."""
    p, c = np.asarray(confidences, dtype=np.float64), np.asarray(correct, dtype=bool)
    if p.ndim != 1 or p.shape != c.shape:
        raise ValueError(f"{p.size} confidences but {c.size} labels: give one label per confidence")
    if not ((p >= 0.0) & (p <= 1.0)).all():  # NaN fails too
        bad = p[~((p >= 0.0) & (p <= 1.0))][0]
        raise ValueError(f"confidence {bad} is not a probability in [0, 1]")
    return p, c


def normalized_cross_entropy(confidences: Sequence[float], correct: Sequence[bool]) -> float | None:
    """NCE of `confidences` for the labels `correct`; None when every word is correct or every one wrong
    (H(C) = 0: nothing to measure)."""
    p, c = _pairs(confidences, correct)
    p = np.clip(p, CLIP, 1 - CLIP)
    n, k = len(c), int(c.sum())
    if n == 0 or k in (0, n):
        return None
    share = k / n
    h_constant = -(k * math.log2(share) + (n - k) * math.log2(1 - share))
    h_given = -(np.log2(p[c]).sum() + np.log2(1 - p[~c]).sum())
    return float((h_constant - h_given) / h_constant)


def auc(confidences: Sequence[float], correct: Sequence[bool]) -> float | None:
    """Area under the ROC curve of `confidences` separating correct from wrong words; None with one class."""
    p, c = _pairs(confidences, correct)
    if c.size == 0 or c.all() or not c.any():
        return None
    return float(roc_auc_score(c, p))


def calibration_table(confidences: Sequence[float], correct: Sequence[bool], bins: int = 10) -> list[dict]:
    """Per non-empty bin of [0, 1] (equal widths): the mean confidence, the share correct and the count."""
    p, c = _pairs(confidences, correct)
    if p.size == 0:
        return []
    share, mean = calibration_curve(c, p, n_bins=bins, strategy="uniform")
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.searchsorted(edges[1:-1], p)  # scikit-learn's binning, so the counts line up with its bins
    counts = np.bincount(which, minlength=bins)
    return [{"mean_confidence": float(m), "share_correct": float(s), "words": int(n)}
            for m, s, n in zip(mean, share, counts[counts > 0])]
