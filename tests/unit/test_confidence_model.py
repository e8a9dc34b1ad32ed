"""The confidence model: features, exact AUC against a pairwise count, learning a synthetic problem, the
personal switch, the checkpoint round trip and the input checks."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specbench.checkpoint_io import load_blob
from specbench.errors import ConfigError, DataError
from specbench.prediction.confidence import (
    CONTEXT_FEATURES,
    POSTERIOR_FEATURES,
    ConfidenceSettings,
    feature_matrix,
    feature_names,
    load_confidence,
    log_loss,
    roc_auc,
    save_confidence,
    train_confidence_model,
)

pytestmark = pytest.mark.unit

FAST = ConfidenceSettings(members=2, hidden=(32,), epochs=12, batch_size=128, learning_rate=3e-3, patience=3,
                          threads=1, max_minutes=1.0)


def synthetic(n: int, seed: int) -> pl.DataFrame:
    """Predictions whose correctness depends on the LM probability, the personal frequency and the added
    words (plus a little noise)."""
    rng = np.random.default_rng(seed)
    vocab = np.array(["set", "an", "alarm", "for", "seven", "play", "music"])
    partial_len = rng.integers(0, 4, n)
    added = rng.integers(1, 4, n)
    lm = rng.normal(-4.0, 2.0, n)
    personal = np.where(rng.random(n) < 0.4, rng.normal(-2.0, 1.0, n), -10.0)
    logit = 1.5 * (lm + 4.0) + 0.8 * (personal + 5.0) - 1.0 * (added - 2) + rng.normal(0, 0.3, n)
    return pl.DataFrame({
        "request_id": [f"r{i}" for i in range(n)],
        "partial_index": pl.Series(rng.integers(0, 10, n), dtype=pl.Int32),
        "partial_time_ms": rng.uniform(100, 3000, n),
        "partial_words": [list(vocab[rng.integers(0, 7, k)]) for k in partial_len],
        "prediction_words": [list(vocab[rng.integers(0, 7, k + a)]) for k, a in zip(partial_len, added)],
        "added_words": pl.Series(added, dtype=pl.Int32),
        "source": np.where(personal > -10.0, "personal", "lm"),
        "lm_log_prob": lm,
        "lm_rank": pl.Series(np.where(rng.random(n) < 0.2, -1, rng.integers(0, 4, n)), dtype=pl.Int32),
        "personal_log_freq": personal,
        "correct": logit > 0,
    })


@pytest.fixture(scope="module")
def data() -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    return synthetic(3000, 0), synthetic(800, 1), synthetic(800, 2)


@pytest.fixture(scope="module")
def trained(data: tuple[pl.DataFrame, ...]) -> tuple[object, object]:
    train, devel, _ = data
    return train_confidence_model(train, devel, FAST, progress=False)


def brute_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    pos = [s for s, y in zip(scores, labels) if y]
    neg = [s for s, y in zip(scores, labels) if not y]
    if not pos or not neg:
        return math.nan
    wins = sum(1.0 if p > q else 0.5 if p == q else 0.0 for p in pos for q in neg)
    return wins / (len(pos) * len(neg))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.sampled_from([0.0, 0.1, 0.5, 0.5, 0.9, -2.0])), max_size=30))
def test_auc_equals_pairwise_count(pairs: list[tuple[bool, float]]) -> None:
    labels = np.array([p[0] for p in pairs], dtype=bool)
    scores = np.array([p[1] for p in pairs], dtype=np.float64)
    want = brute_auc(labels, scores)
    got = roc_auc(labels, scores)
    assert (math.isnan(want) and math.isnan(got)) or got == pytest.approx(want, abs=1e-12)


def test_auc_and_log_loss_known_values() -> None:
    assert roc_auc(np.array([0, 0, 1, 1]), np.array([0.1, 0.4, 0.35, 0.8])) == 0.75
    assert roc_auc(np.array([1, 0]), np.array([0.3, 0.3])) == 0.5
    assert log_loss(np.array([1, 0]), np.array([0.5, 0.5])) == pytest.approx(math.log(2))


def test_feature_matrix_values_and_personal_switch() -> None:
    table = pl.DataFrame({
        "partial_words": [["set", "an"]], "prediction_words": [["set", "an", "alarm"]],
        "added_words": [1], "partial_time_ms": [360.0], "source": ["personal"], "lm_log_prob": [-3.5],
        "lm_rank": [-1], "personal_log_freq": [-1.25], "correct": [True]})
    x = feature_matrix(table.to_arrow(), use_personal=True)
    assert x.dtype == np.float32 and x.shape == (1, len(feature_names(True)))
    got = dict(zip(feature_names(True), x[0].tolist()))
    assert got == {"lm_log_prob": -3.5, "lm_rank": -1.0, "lm_rank_missing": 1.0, "partial_words": 2.0,
                   "partial_chars": 6.0, "prediction_words": 3.0, "prediction_chars": 12.0, "added_words": 1.0,
                   "partial_time_ms": 360.0, "personal_log_freq": -1.25, "source_personal": 1.0}
    without = feature_matrix(table.drop("personal_log_freq"), use_personal=False)
    assert feature_names(False) == tuple(n for n in feature_names(True) if n != "personal_log_freq")
    assert without.tolist() == np.delete(x, feature_names(True).index("personal_log_freq"), axis=1).tolist()
    with pytest.raises(DataError, match="'personal_log_freq'"):
        feature_matrix(table.drop("personal_log_freq"), use_personal=True)
    with pytest.raises(DataError, match="'lm_log_prob'"):
        feature_matrix(table.with_columns(lm_log_prob=pl.lit(-math.inf)), use_personal=True)


def test_context_features_from_the_request_time_and_the_history() -> None:
    day, hour = 86400, 3600
    table = pl.DataFrame({
        "partial_words": [["lights"]] * 3, "prediction_words": [["lights", "on"]] * 3, "added_words": [1] * 3,
        "partial_time_ms": [120.0] * 3, "source": ["personal", "both", "lm"], "lm_log_prob": [-2.0] * 3,
        "lm_rank": [-1, 0, 1], "personal_log_freq": [0.0, -0.5, -10.0],
        "timestamp_s": [3 * day + 6 * hour, 3 * day + 23 * hour, 3 * day + 12 * hour],
        "last_said_s": [2 * day + 6 * hour, 3 * day + 20 * hour, None],
        "said_mean_hour": [7.5, 1.0, None]}, schema_overrides={"last_said_s": pl.Int64})
    names = feature_names(True, True)
    assert names[:len(feature_names(True))] == feature_names(True) and names[-4:] == CONTEXT_FEATURES
    x = feature_matrix(table, use_personal=True, use_context=True)
    got = [dict(zip(names, row, strict=True)) for row in x.tolist()]
    assert got[0]["hour_sin"] == pytest.approx(1.0) and got[0]["hour_cos"] == pytest.approx(0.0, abs=1e-6)
    assert got[0]["log_hours_since_said"] == pytest.approx(math.log1p(24.0))
    assert got[0]["said_hour_gap"] == pytest.approx(1.5)
    assert got[1]["log_hours_since_said"] == pytest.approx(math.log1p(3.0))
    assert got[1]["said_hour_gap"] == pytest.approx(2.0)  # 23:00 against 01:00: around midnight
    assert got[2]["log_hours_since_said"] == pytest.approx(math.log1p(672.0)) and got[2]["said_hour_gap"] == 12.0
    with pytest.raises(DataError, match="'timestamp_s'"):
        feature_matrix(table.drop("timestamp_s"), use_personal=True, use_context=True)
    with pytest.raises(ValueError, match="use_personal"):
        feature_names(False, True)
    leaked = table.with_columns(last_said_s=pl.Series([3 * day + 7 * hour, None, None], dtype=pl.Int64))
    with pytest.raises(DataError, match="last_said_s is not before"):  # said after the request started
        feature_matrix(leaked, use_personal=True, use_context=True)


def test_posterior_features_from_the_partial_posteriors() -> None:
    """The lowest and the last posterior of the partial's words, 1.0 for a partial without words, and an
    undefined posterior (null) as 0.0 with its indicator: never NaN."""
    table = pl.DataFrame({
        "partial_words": [["set", "an"], [], ["play"]], "prediction_words": [["set", "an", "alarm"], ["hi"],
                                                                             ["play", "it"]],
        "added_words": [1, 1, 1], "partial_time_ms": [360.0, 120.0, 240.0], "source": ["lm"] * 3,
        "lm_log_prob": [-3.5] * 3, "lm_rank": [0] * 3, "personal_log_freq": [-10.0] * 3,
        "partial_posteriors": [[0.9, 0.4], [], None]}, schema_overrides={"partial_posteriors": pl.List(pl.Float32)})
    names = feature_names(True, use_posterior=True)
    assert names[-3:] == POSTERIOR_FEATURES and names[:-3] == feature_names(True)
    got = [dict(zip(names, row, strict=True)) for row in feature_matrix(table, True, use_posterior=True).tolist()]
    assert [(g["partial_min_posterior"], g["partial_last_posterior"], g["partial_posterior_missing"]) for g in got] \
        == [(pytest.approx(0.4), pytest.approx(0.4), 0.0), (1.0, 1.0, 0.0), (0.0, 0.0, 1.0)]
    assert got[0]["partial_last_posterior"] == pytest.approx(0.4)
    first = feature_matrix(table.with_columns(partial_posteriors=pl.Series([[0.4, 0.9], [], None],
                                                                           dtype=pl.List(pl.Float32))),
                           True, use_posterior=True)[0].tolist()
    assert dict(zip(names, first))["partial_last_posterior"] == pytest.approx(0.9)
    with pytest.raises(DataError, match="asr.partial_posteriors = true"):  # transcripts without posteriors
        feature_matrix(table.with_columns(partial_posteriors=pl.lit(None, pl.List(pl.Float32))), True,
                       use_posterior=True)
    with pytest.raises(DataError, match="no column 'partial_posteriors'"):
        feature_matrix(table.drop("partial_posteriors"), True, use_posterior=True)
    assert feature_matrix(table.drop("partial_posteriors"), True).shape == (3, len(feature_names(True)))


def test_a_half_precision_file_is_half_the_size_and_loads_as_float32(trained: tuple, data: tuple[pl.DataFrame, ...],
                                                                     tmp_path: Path) -> None:
    model, report = trained
    save_confidence(tmp_path / "full.pt", model, report, {})
    save_confidence(tmp_path / "half.pt", model, report, {}, half=True)
    half = load_confidence(tmp_path / "half.pt")
    weights = sum(p.numel() for m in model.members for p in m.state_dict().values())
    saved = (tmp_path / "full.pt").stat().st_size - (tmp_path / "half.pt").stat().st_size
    assert saved >= 2 * weights - 1024  # two bytes a weight, give or take the archive's alignment
    assert all(p.dtype == torch.float32 for m in half.members for p in m.parameters())
    np.testing.assert_allclose(half.predict(data[2]), model.predict(data[2]), atol=5e-3)


def test_learns_synthetic_problem(trained: tuple, data: tuple[pl.DataFrame, ...]) -> None:
    model, report = trained
    _, devel, test = data
    probs = model.predict(test)
    assert probs.shape == (test.height,) and probs.dtype == np.float32
    assert ((probs >= 0) & (probs <= 1)).all()
    assert roc_auc(test["correct"].to_numpy(), probs) > 0.9
    assert report.devel_auc > 0.9 and report.devel_log_loss < 0.45
    assert (report.train_rows, report.devel_rows) == (3000, 800)
    assert report.train_positive_rate == pytest.approx(float(data[0]["correct"].mean()))
    assert report.devel_positive_rate == pytest.approx(float(devel["correct"].mean()))
    assert len(report.members) == 2 and {m.seed for m in report.members} == {0, 1}
    for member in report.members:
        assert 1 <= member.best_epoch <= member.epochs_run <= FAST.epochs
        assert member.devel_auc > 0.85 and member.stopped in ("patience", "epochs", "time")
    # the ensemble's devel log-loss is computed from the mean of the members' probabilities
    assert report.devel_log_loss == pytest.approx(log_loss(devel["correct"].to_numpy(), model.predict(devel)),
                                                  rel=1e-5)


def test_without_personal_ignores_personal_column(data: tuple[pl.DataFrame, ...]) -> None:
    train, devel, test = data
    quick = ConfidenceSettings(members=1, hidden=(16,), epochs=3, batch_size=256, threads=1, max_minutes=1.0,
                               use_personal=False)
    model, report = train_confidence_model(train, devel, quick, progress=False)
    assert "personal_log_freq" not in report.features
    shuffled = test.with_columns(personal_log_freq=pl.Series(np.random.default_rng(5).normal(size=test.height)))
    base = model.predict(test)
    assert np.array_equal(base, model.predict(shuffled))
    assert np.array_equal(base, model.predict(test.drop("personal_log_freq")))
    personal, _ = train_confidence_model(train, devel, replace(quick, use_personal=True),
                                         progress=False)
    assert not np.array_equal(personal.predict(test), personal.predict(shuffled))


def test_save_load_round_trip(trained: tuple, data: tuple[pl.DataFrame, ...], tmp_path: Path) -> None:
    model, report = trained
    path = tmp_path / "models" / "confidence.pt"
    save_confidence(path, model, report, {"job": "confidence", "thresholds": (0.5, 0.9)})
    loaded = load_confidence(path)
    test = data[2]
    assert np.array_equal(loaded.predict(test), model.predict(test))
    assert loaded.features == model.features and loaded.use_personal
    assert loaded.metadata["report"]["devel_auc"] == report.devel_auc
    assert loaded.metadata["train_config"]["thresholds"] == [0.5, 0.9]
    assert [p.name for p in path.parent.iterdir()] == ["confidence.pt"]  # no temporary file left


def test_default_size_checkpoint_is_small(data: tuple[pl.DataFrame, ...], tmp_path: Path) -> None:
    train, devel, _ = data
    sizes = ConfidenceSettings(epochs=1, threads=1, max_minutes=1.0)  # 4 members of (256, 256)
    model, report = train_confidence_model(train.head(300), devel.head(100), sizes, progress=False)
    path = tmp_path / "c.pt"
    save_confidence(path, model, report, {})
    assert path.stat().st_size < 3 * 1024 * 1024
    assert np.array_equal(load_confidence(path).predict(devel), model.predict(devel))


def test_load_rejects_missing_damaged_and_outdated(trained: tuple, tmp_path: Path) -> None:
    model, report = trained
    fix = "specbench train confidence jobs/confidence.toml"
    with pytest.raises(DataError, match=fix):
        load_confidence(tmp_path / "absent.pt")
    damaged = tmp_path / "damaged.pt"
    damaged.write_bytes(b"not a checkpoint")
    with pytest.raises(DataError, match=fix):
        load_confidence(damaged)
    path = tmp_path / "old.pt"
    save_confidence(path, model, report, {})
    blob = load_blob(path)
    blob["features"] = blob["features"][:-1] + ["user_age"]
    torch.save(blob, path)
    with pytest.raises(DataError, match=f"user_age.*{fix}"):
        load_confidence(path)
    save_confidence(path, model, report, {})
    blob = load_blob(path)
    blob["hidden"] = [64]
    torch.save(blob, path)
    with pytest.raises(DataError, match=f"inconsistent.*{fix}"):
        load_confidence(path)
    with pytest.raises(TypeError, match="train_config.model"):
        save_confidence(path, model, report, {"model": object()})


def test_training_rejects_rows_without_added_words(data: tuple[pl.DataFrame, ...]) -> None:
    train, devel, _ = data
    zero = train.with_columns(added_words=pl.when(pl.int_range(pl.len()) == 7).then(0)
                              .otherwise(pl.col("added_words")).cast(pl.Int32))
    with pytest.raises(DataError, match="added_words"):
        train_confidence_model(zero, devel, FAST, progress=False)
    with pytest.raises(DataError, match="devel.*added_words"):
        train_confidence_model(train, zero.to_arrow(), FAST, progress=False)
    with pytest.raises(DataError, match="'correct'"):
        train_confidence_model(train.drop("correct"), devel, FAST, progress=False)


@pytest.mark.parametrize("bad", [{"hidden": (600,)}, {"hidden": (8,) * 5}, {"members": 0}, {"epochs": 0}])
def test_settings_are_validated(bad: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        ConfidenceSettings(**bad)
