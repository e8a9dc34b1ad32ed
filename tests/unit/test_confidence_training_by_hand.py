"""Confidence-model training by hand: each ensemble member learns from its own bootstrap resample of the
training rows (a row the resample did not draw has no influence on that member, every drawn row does), the
member keeps the weights and reports the 1-based epoch of its lowest devel log-loss, a feature constant over
the training rows is standardized with std 1, an empty devel table is refused, and the log-loss clips the
probabilities at 1e-7."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np
import polars as pl
import pytest
import torch

from specbench.errors import DataError
from specbench.prediction.confidence import (
    ConfidenceSettings,
    feature_matrix,
    feature_names,
    log_loss,
    roc_auc,
    train_confidence_model,
)

pytestmark = pytest.mark.unit

TINY = ConfidenceSettings(members=2, hidden=(4,), epochs=2, batch_size=8, learning_rate=5e-2, patience=5,
                          threads=1, max_minutes=5.0, seed=3)


def rows(n: int, seed: int) -> pl.DataFrame:
    """Predictions (no context columns) whose label mostly follows the LM log-probability."""
    rng = np.random.default_rng(seed)
    lm = rng.normal(-4.0, 2.0, n)
    personal = np.where(rng.random(n) < 0.5, rng.normal(-1.0, 0.5, n), -10.0)
    return pl.DataFrame({
        "partial_words": [["play"] * int(k) for k in rng.integers(0, 4, n)],
        "prediction_words": [["play"] * int(k + 3) for k in rng.integers(0, 4, n)],
        "added_words": pl.Series(rng.integers(1, 4, n), dtype=pl.Int32), "partial_time_ms": rng.uniform(100, 3000, n),
        "source": np.where(personal > -10.0, "personal", "lm"), "lm_log_prob": lm,
        "lm_rank": pl.Series(rng.integers(-1, 4, n), dtype=pl.Int32), "personal_log_freq": personal,
        "correct": (lm + 4.0 + rng.normal(0, 1.0, n)) > 0})


def member_weights(train: pl.DataFrame, devel: pl.DataFrame, settings: ConfidenceSettings) -> list[np.ndarray]:
    """Each member's weights, flattened into one vector."""
    model, _ = train_confidence_model(train, devel, settings, progress=False)
    return [torch.cat([p.detach().flatten() for p in m.parameters()]).numpy().copy() for m in model.members]


def test_each_member_learns_from_its_own_bootstrap_resample_of_the_training_rows() -> None:
    """Flipping one training row's label leaves its features, and so the standardization, unchanged: a
    member's weights then change exactly when the row is in its resample. Member m's resample is n draws
    with replacement, seeded with seed + m: about 1 - 1/e of the rows (63 %) are drawn."""
    n = 30
    train, devel = rows(n, 0), rows(20, 1)
    base = member_weights(train, devel, TINY)
    influential: list[set[int]] = [set(), set()]
    for row in range(n):
        flipped = train.with_columns(correct=pl.when(pl.int_range(pl.len()) == row).then(~pl.col("correct"))
                                     .otherwise(pl.col("correct")))
        for member, weights in enumerate(member_weights(flipped, devel, TINY)):
            if not np.array_equal(weights, base[member]):
                influential[member].add(row)
    drawn = [set(np.random.default_rng(TINY.seed + m).integers(0, n, n).tolist()) for m in range(2)]
    assert influential == drawn
    assert influential[0] != influential[1]  # each member draws its own sample
    for rows_drawn in influential:  # with replacement: some rows are left out, most are drawn
        assert 0.45 * n <= len(rows_drawn) <= 0.8 * n


def test_a_member_keeps_the_weights_and_reports_the_epoch_of_its_lowest_devel_loss() -> None:
    """Runs that stop after e = 1..E epochs repeat the first e epochs of the longest run (same seeds). The
    kept devel loss after e epochs is the lowest of epochs 1..e, so the best epoch of the longest run is the
    first e whose run already reaches its loss, and that run ends on (and keeps) the same weights."""
    train = rows(200, 2)
    # a quarter of the devel labels flipped: the devel loss first falls, then rises
    devel = rows(120, 3).with_columns(correct=pl.when(pl.int_range(pl.len()) % 4 == 0).then(~pl.col("correct"))
                                      .otherwise(pl.col("correct")))
    settings = replace(TINY, members=1, epochs=8, patience=8, learning_rate=1e-2, batch_size=16)
    full_model, full = train_confidence_model(train, devel, settings, progress=False)
    losses = [train_confidence_model(train, devel, replace(settings, epochs=e), progress=False)[1]
              .members[0].devel_log_loss for e in range(1, 9)]
    assert all(b <= a for a, b in itertools.pairwise(losses))  # the kept loss never rises
    best = next(e for e, loss in enumerate(losses, 1) if loss == full.members[0].devel_log_loss)
    assert 1 < best < 8  # the lowest devel loss is neither the first nor the last epoch
    member = full.members[0]
    assert (member.best_epoch, member.epochs_run, member.stopped) == (best, 8, "epochs")
    at_best, _ = train_confidence_model(train, devel, replace(settings, epochs=best), progress=False)
    x = feature_matrix(devel, use_personal=True)
    np.testing.assert_array_equal(full_model.predict_matrix(x), at_best.predict_matrix(x))


def test_a_feature_constant_over_the_training_rows_is_divided_by_one() -> None:
    """All training rows come from the LM only (source_personal 0.0 everywhere): that column's std is 0, so
    it is standardized with std 1.0, and a devel row from the history scores 1.0 - 0.0 = 1.0 there."""
    train = rows(40, 4).with_columns(source=pl.lit("lm"))
    model, _ = train_confidence_model(train, rows(20, 5), replace(TINY, members=1, epochs=1), progress=False)
    column = feature_names(True).index("source_personal")
    assert (model.mean[column], model.std[column]) == (0.0, 1.0)
    x = feature_matrix(rows(20, 5), use_personal=True)
    assert x[:, column].max() == 1.0
    assert model.standardize(x)[:, column].tolist() == x[:, column].tolist()


def test_an_empty_devel_or_training_table_is_refused() -> None:
    train = rows(20, 6)
    with pytest.raises(DataError, match="devel table is empty"):
        train_confidence_model(train, train.head(0), replace(TINY, members=1, epochs=1), progress=False)
    with pytest.raises(DataError, match="train table is empty"):
        train_confidence_model(train.head(0), train, replace(TINY, members=1, epochs=1), progress=False)


def test_log_loss_by_hand_with_the_clip_at_one_in_ten_million() -> None:
    # -(log 0.8 + log(1 - 0.4)) / 2 = -(-0.22314 - 0.51083) / 2 = 0.36698
    assert log_loss(np.array([1, 0]), np.array([0.8, 0.4])) == pytest.approx(0.366985, abs=1e-6)
    # a certain mistake costs -log(1e-7) = 16.1181 nats, not infinity
    assert log_loss(np.array([True]), np.array([0.0])) == pytest.approx(-math.log(1e-7), rel=1e-9)
    assert log_loss(np.array([False]), np.array([1.0])) == pytest.approx(-math.log(1e-7), rel=1e-6)
    # 0.999 is inside the clip: -log(0.999) = 0.0010005
    assert log_loss(np.array([1]), np.array([0.999])) == pytest.approx(-math.log(0.999), rel=1e-9)


def test_auc_by_hand_with_a_tie_across_the_classes() -> None:
    # positives 0.9, 0.5; negatives 0.5, 0.1: pairs (0.9>0.5) 1, (0.9>0.1) 1, (0.5=0.5) 1/2, (0.5>0.1) 1
    # -> 3.5 / 4
    assert roc_auc(np.array([1, 1, 0, 0]), np.array([0.9, 0.5, 0.5, 0.1])) == 0.875
    assert math.isnan(roc_auc(np.array([1, 1]), np.array([0.2, 0.3])))
