"""The confidence model by hand: the history-only flag, the leakage check on the history's times, the
standardization taken from the training rows, the ensemble's probability as the mean of its members', early
stopping on the devel users' log-loss with its patience, the time budget shared among the members still to
train, and a model with the context features scored and saved like the others."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch

from specbench.errors import DataError
from specbench.prediction import confidence
from specbench.prediction.confidence import (
    ConfidenceSettings,
    feature_matrix,
    feature_names,
    load_confidence,
    log_loss,
    save_confidence,
    train_confidence_model,
)

pytestmark = pytest.mark.unit

QUICK = ConfidenceSettings(members=2, hidden=(8,), epochs=2, batch_size=64, learning_rate=1e-2, patience=2,
                           threads=1, max_minutes=5.0)
DAY, HOUR = 86400, 3600


def table(n: int, seed: int) -> pl.DataFrame:
    """Predictions whose label follows the LM log-probability and the personal frequency, with the context
    columns (a candidate said 1 to 100 hours before the request, or never)."""
    rng = np.random.default_rng(seed)
    added = rng.integers(1, 4, n)
    lm = rng.normal(-4.0, 2.0, n)
    said = rng.random(n) < 0.5
    personal = np.where(said, rng.normal(-1.0, 0.5, n), -10.0)
    stamp = 10 * DAY + rng.integers(0, DAY, n)
    return pl.DataFrame({
        "partial_words": [["play"] * int(k) for k in rng.integers(0, 4, n)],
        "prediction_words": [["play"] * int(k + 3) for k in rng.integers(0, 4, n)],
        "added_words": pl.Series(added, dtype=pl.Int32), "partial_time_ms": rng.uniform(100, 3000, n),
        "source": np.where(said, "personal", "lm"), "lm_log_prob": lm,
        "lm_rank": pl.Series(np.where(said, -1, rng.integers(0, 4, n)), dtype=pl.Int32),
        "personal_log_freq": personal, "timestamp_s": pl.Series(stamp, dtype=pl.Int64),
        "last_said_s": pl.Series([int(t - h * HOUR) if s else None
                                  for t, h, s in zip(stamp, rng.integers(1, 100, n), said)], dtype=pl.Int64),
        "said_mean_hour": [float(h) if s else None for h, s in zip(rng.uniform(0, 24, n), said)],
        "correct": (1.5 * (lm + 4.0) + 0.8 * (personal + 5.0) + rng.normal(0, 0.3, n)) > 0})


def test_the_history_flag_is_set_only_for_candidates_only_the_history_proposed() -> None:
    rows = table(3, 0).with_columns(source=pl.Series(["personal", "both", "lm"]))
    column = feature_names(True).index("source_personal")
    assert feature_matrix(rows, use_personal=True)[:, column].tolist() == [1.0, 0.0, 0.0]


def test_a_candidate_said_in_the_very_second_the_request_starts_is_a_leak() -> None:
    """The history holds requests whose audio ended strictly before the request started."""
    rows = table(4, 1).with_columns(last_said_s=pl.Series([None, None, None, None], dtype=pl.Int64))
    at_start = rows.with_columns(last_said_s=pl.when(pl.int_range(pl.len()) == 2).then(pl.col("timestamp_s"))
                                 .otherwise(None))
    with pytest.raises(DataError, match="last_said_s is not before"):
        feature_matrix(at_start, use_personal=True, use_context=True)
    before = at_start.with_columns(last_said_s=pl.col("last_said_s") - 1)
    assert feature_matrix(before, use_personal=True, use_context=True).shape == (4, len(feature_names(True, True)))


@pytest.fixture(scope="module")
def trained() -> tuple[object, object, pl.DataFrame, pl.DataFrame]:
    train, devel = table(400, 2), table(200, 3)
    model, report = train_confidence_model(train, devel, QUICK, progress=False)
    return model, report, train, devel


def test_standardization_is_the_training_rows_mean_and_std(trained: tuple) -> None:
    model, _, train, devel = trained
    x = feature_matrix(train, use_personal=True).astype(np.float64)
    assert np.abs(x.mean(axis=0) - feature_matrix(devel, use_personal=True).mean(axis=0)).max() > 0.05
    np.testing.assert_allclose(model.mean, x.mean(axis=0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(model.std, x.std(axis=0), rtol=1e-5, atol=1e-5)


def test_the_ensemble_probability_is_the_mean_of_its_members(trained: tuple) -> None:
    model, report, _, devel = trained
    x = feature_matrix(devel, use_personal=True)
    z = torch.from_numpy(((x - model.mean) / model.std).astype(np.float32))
    with torch.no_grad():
        each = np.stack([torch.sigmoid(m(z)).numpy() for m in model.members])
    assert len(model.members) == 2 and np.abs(each[0] - each[1]).max() > 1e-3
    np.testing.assert_allclose(model.predict(devel), each.mean(axis=0), atol=1e-6)
    assert report.devel_log_loss == pytest.approx(log_loss(devel["correct"].to_numpy(), each.mean(axis=0)), rel=1e-5)


def test_early_stopping_keeps_the_best_devel_epoch_and_waits_patience_epochs() -> None:
    """Devel labels opposite to the training ones: training makes the devel log-loss worse, so the member
    stops `patience` epochs after its best one, and its kept weights are no worse on devel than those
    after one epoch."""
    train = table(400, 4)
    devel = table(200, 5).with_columns(correct=~pl.col("correct"))
    settings = replace(QUICK, members=1, epochs=8, patience=2)
    _, report = train_confidence_model(train, devel, settings, progress=False)
    member = report.members[0]
    assert member.stopped == "patience" and member.epochs_run == member.best_epoch + 2 < 8
    _, once = train_confidence_model(train, devel, replace(settings, epochs=1), progress=False)
    assert member.devel_log_loss <= once.members[0].devel_log_loss + 1e-9
    # on devel data like the training data the devel loss falls, and the last epoch is kept
    _, falling = train_confidence_model(train, table(200, 6), replace(settings, epochs=3, patience=3),
                                        progress=False)
    assert falling.members[0].stopped == "epochs"


def test_the_time_budget_is_shared_among_the_members_still_to_train(monkeypatch: pytest.MonkeyPatch) -> None:
    shares: list[float] = []
    real = confidence._train_member

    def recording(data: tuple, settings: ConfidenceSettings, member: int, seconds: float, bar: object) -> tuple:
        shares.append(seconds)
        return real(data, settings, member, seconds, bar)

    monkeypatch.setattr(confidence, "_train_member", recording)
    train_confidence_model(table(200, 7), table(100, 8), replace(QUICK, members=4, epochs=1, max_minutes=2.0),
                           progress=False)
    budget, slack = 120.0, 20.0  # the whole training takes far less than `slack` seconds
    assert len(shares) == 4
    for member, share in enumerate(shares):  # what is left of the budget, split among the members to train
        assert (budget - slack) / (4 - member) < share <= budget / (4 - member)


def test_a_member_past_its_time_stops_after_its_epoch_unless_it_was_the_last() -> None:
    tiny = replace(QUICK, members=1, max_minutes=1e-9)
    _, report = train_confidence_model(table(200, 9), table(100, 10), replace(tiny, epochs=3), progress=False)
    assert (report.members[0].stopped, report.members[0].epochs_run) == ("time", 1)
    _, report = train_confidence_model(table(200, 9), table(100, 10), replace(tiny, epochs=1), progress=False)
    assert (report.members[0].stopped, report.members[0].epochs_run) == ("epochs", 1)


def test_a_context_model_scores_its_own_features_and_survives_a_round_trip(tmp_path: Path) -> None:
    devel = table(100, 12)
    model, _ = train_confidence_model(table(200, 11), devel, replace(QUICK, members=1, epochs=1, use_context=True),
                                      progress=False)
    assert model.use_context and not model.use_posterior
    by_hand = model.predict_matrix(feature_matrix(devel, use_personal=True, use_context=True))
    np.testing.assert_array_equal(model.predict(devel), by_hand)
    save_confidence(tmp_path / "context.pt", model, {}, {})
    loaded = load_confidence(tmp_path / "context.pt")
    assert loaded.features == feature_names(True, True)
    np.testing.assert_array_equal(loaded.predict(devel), by_hand)
    assert not math.isnan(float(by_hand.mean()))
