"""Confidence model for predictive ASR: an ensemble of small MLPs that estimates the probability that a
prediction of the full utterance, made from a partial hypothesis, equals the final hypothesis.

Input rows come from the predictions table described in `specbench.prediction.prefetch` (pyarrow Table or
polars DataFrame); the features below are computed from its columns. Training additionally needs
`correct: bool` (the label). Only predictions that add at least one word are scored in training.
`ConfidenceSettings` (ensemble size, layer widths, optimisation) lives in `specbench.prediction.settings`,
so that job files load without torch; it is re-exported here.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch
from torch import nn
from tqdm import tqdm

from specbench.checkpoint_io import read_checkpoint, write_checkpoint
from specbench.errors import DataError
from specbench.prediction.history import HISTORY_WINDOW_S
from specbench.prediction.prefetch import as_polars, require_columns
from specbench.prediction.settings import ConfidenceSettings
from specbench.torch_threads import torch_threads

FORMAT_VERSION = 1
DROPOUT = 0.1
RETRAIN_FIX = "Fix: retrain it with `specbench train confidence jobs/confidence.toml`."

# Feature name -> (source column, meaning). Order is the column order of `feature_matrix`.
FEATURES: dict[str, tuple[str, str]] = {
    "lm_log_prob": ("lm_log_prob", "log P(continuation + </s> | partial) under the LM"),
    "lm_rank": ("lm_rank", "0-based rank in the LM n-best; -1 when not in it"),
    "lm_rank_missing": ("lm_rank", "1.0 when lm_rank == -1 (not in the LM n-best), else 0.0"),
    "partial_words": ("partial_words", "words in the partial hypothesis"),
    "partial_chars": ("partial_words", "characters of the partial, words joined with single spaces"),
    "prediction_words": ("prediction_words", "words in the predicted full utterance"),
    "prediction_chars": ("prediction_words", "characters of the prediction, words joined with single spaces"),
    "added_words": ("added_words", "words the prediction adds beyond the partial"),
    "partial_time_ms": ("partial_time_ms", "time of the partial's last frame since utterance start, ms"),
    "personal_log_freq": ("personal_log_freq", "log frequency in the user's history (-10.0 when unseen)"),
    "source_personal": ("source", "1.0 when the prediction comes only from the user's history (source "
                                  "\"personal\", not also in the LM n-best), else 0.0"),
    # context features (`use_context`): when the request is made, and when and at which hour the user said
    # the candidate before (the simulation gives routine requests a preferred hour)
    "hour_sin": ("timestamp_s", "sin(2 pi h / 24), h the request's time of day in hours"),
    "hour_cos": ("timestamp_s", "cos(2 pi h / 24)"),
    "log_hours_since_said": ("last_said_s", "log(1 + hours since the user last said the candidate); "
                                            "log(1 + 672), the history window, when never"),
    "said_hour_gap": ("said_mean_hour", "hours (0-12, around the clock) between the request's time of day and "
                                        "the circular mean hour the user said the candidate at; 12 when "
                                        "never, 6 (the mean gap to a uniform hour) when its hours cancel"),
    # posterior features (`use_posterior`): the recognizer's own doubt about the partial, from the lattice of
    # the audio so far (`asr.partial_posteriors`); a partial without words is not in doubt (1.0)
    "partial_min_posterior": ("partial_posteriors", ("lowest lattice posterior of the partial's words; 1.0 "
                                                     "without words, 0.0 when undefined")),
    "partial_last_posterior": ("partial_posteriors", ("lattice posterior of the partial's last word; 1.0 without "
                                                      "words, 0.0 when undefined")),
    "partial_posterior_missing": ("partial_posteriors", ("1.0 when the partial's posteriors are undefined (no "
                                                         "lattice, or no complete path), else 0.0")),
}
PERSONAL_FEATURES = ("personal_log_freq",)
CONTEXT_FEATURES = ("hour_sin", "hour_cos", "log_hours_since_said", "said_hour_gap")
POSTERIOR_FEATURES = ("partial_min_posterior", "partial_last_posterior", "partial_posterior_missing")
NULL_MEANS_UNDEFINED = "partial_posteriors"  # null: the partial's posteriors are undefined (never NaN)
POSTERIOR_FIX = ("Fix: transcribe with asr.partial_posteriors = true in the job's [asr] section (the transcripts "
                 "then carry each partial's word posteriors)")
NEVER_SAID_HOURS = HISTORY_WINDOW_S / 3600.0
NULL_MEANS_NEVER = {"last_said_s", "said_mean_hour"}  # history columns, null for a candidate never said


def feature_names(use_personal: bool, use_context: bool = False, use_posterior: bool = False) -> tuple[str, ...]:
    """Feature order of `feature_matrix`: without personal features `personal_log_freq` is left out, the
    context features only with `use_context` (which needs the personal ones: they describe the history), the
    posterior features only with `use_posterior`."""
    if use_context and not use_personal:
        raise ValueError("context features describe the user's history: use_context needs use_personal")
    return tuple(n for n in FEATURES if (use_personal or n not in PERSONAL_FEATURES)
                 and (use_context or n not in CONTEXT_FEATURES) and (use_posterior or n not in POSTERIOR_FEATURES))


def _columns(name: str) -> tuple[str, ...]:
    """The predictions-table columns a feature is computed from."""
    return (FEATURES[name][0], "timestamp_s") if name in CONTEXT_FEATURES else (FEATURES[name][0],)


def _hour_of_day() -> pl.Expr:
    return (pl.col("timestamp_s") % 86400).cast(pl.Float64) / 3600.0


def _expression(name: str) -> pl.Expr:
    column = pl.col(FEATURES[name][0])
    if name in ("hour_sin", "hour_cos"):
        angle = _hour_of_day() * (2.0 * math.pi / 24.0)
        return angle.sin() if name == "hour_sin" else angle.cos()
    if name == "log_hours_since_said":
        hours = (pl.col("timestamp_s") - column).cast(pl.Float64) / 3600.0
        return hours.fill_null(NEVER_SAID_HOURS).log1p()
    if name == "said_hour_gap":
        gap = (_hour_of_day() - column.cast(pl.Float64)).abs() % 24.0
        nearest = pl.min_horizontal(gap, 24.0 - gap)
        return pl.when(column.cast(pl.Float64).is_nan()).then(6.0).otherwise(nearest).fill_null(12.0)
    if name in POSTERIOR_FEATURES:
        if name == "partial_posterior_missing":
            return column.is_null().cast(pl.Float64)
        value = column.list.min() if name == "partial_min_posterior" else column.list.last()
        return (pl.when(column.is_null()).then(0.0).when(column.list.len() == 0).then(1.0)
                .otherwise(value.cast(pl.Float64)))
    if name == "lm_rank_missing":
        return (column == -1).cast(pl.Float64)
    if name in ("partial_words", "prediction_words"):
        return column.list.len().cast(pl.Float64)
    if name in ("partial_chars", "prediction_chars"):
        return column.list.join(" ").str.len_chars().cast(pl.Float64)
    if name == "source_personal":
        return (column == "personal").cast(pl.Float64)
    return column.cast(pl.Float64)


def feature_matrix(table: Any, use_personal: bool, use_context: bool = False, use_posterior: bool = False) -> np.ndarray:
    """Features of every row: `(N, F)` float32, columns in `feature_names(use_personal, use_context,
    use_posterior)` order. Missing columns, nulls (other than a never-said candidate's history times and an
    undefined partial posterior) and non-finite values raise `DataError` naming the column; so do posteriors
    undefined in every row (transcripts made without them)."""
    frame = as_polars(table, "predictions")
    names = feature_names(use_personal, use_context, use_posterior)
    needed = {c for n in names for c in _columns(n)}
    if use_posterior:
        if NULL_MEANS_UNDEFINED not in frame.columns:
            raise DataError(f"predictions table has no column {NULL_MEANS_UNDEFINED!r}, which the posterior "
                            f"features need. {POSTERIOR_FIX}.")
        if frame.height and frame[NULL_MEANS_UNDEFINED].null_count() == frame.height:
            raise DataError(f"predictions table column {NULL_MEANS_UNDEFINED!r} is null in every row: the "
                            f"transcripts carry no word posteriors. {POSTERIOR_FIX}.")
        needed.discard(NULL_MEANS_UNDEFINED)
    require_columns(frame, sorted(needed - NULL_MEANS_NEVER), "predictions")
    require_columns(frame.select(sorted(needed & NULL_MEANS_NEVER & set(frame.columns))).fill_null(0),
                    sorted(needed & NULL_MEANS_NEVER), "predictions")  # present; null: never said
    if "last_said_s" in needed and (frame["timestamp_s"] <= frame["last_said_s"]).any():
        raise DataError("predictions table: a row's last_said_s is not before its request's timestamp_s, so the "
                        "history saw the request itself or a later one. Fix: build the history only from requests "
                        "whose audio ended before the request started (experiments/predictive_asr/table.py).")
    values = frame.select([_expression(n).alias(n) for n in names]).to_numpy().astype(np.float64)
    values = values.reshape(frame.height, len(names))
    bad = ~np.isfinite(values).all(axis=0)
    if bad.any():
        column = FEATURES[names[int(np.flatnonzero(bad)[0])]][0]
        raise DataError(f"predictions table column {column!r} holds a non-finite value (inf or NaN). "
                        f"Fix: write finite values (floor log probabilities, e.g. at -100).")
    return values.astype(np.float32)


@dataclass(frozen=True)
class MemberReport:
    """One ensemble member: `seed` (its torch and bootstrap seed), `best_epoch` (1-based epoch whose weights
    were kept), `epochs_run`, devel log-loss (nats per row) and AUC of the kept weights, why training
    stopped (`"patience"`, `"epochs"` or `"time"`) and training `seconds`."""

    member: int
    seed: int
    best_epoch: int
    epochs_run: int
    devel_log_loss: float
    devel_auc: float
    stopped: str
    seconds: float


@dataclass(frozen=True)
class ConfidenceReport:
    """Training summary: row counts and positive rates (share of `correct`), the ensemble's devel log-loss
    (nats per row) and AUC, the feature order and per-member reports."""

    train_rows: int
    devel_rows: int
    train_positive_rate: float
    devel_positive_rate: float
    devel_log_loss: float
    devel_auc: float
    features: tuple[str, ...]
    members: tuple[MemberReport, ...]
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["features"] = list(self.features)
        out["members"] = [asdict(m) for m in self.members]
        return out


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Exact ROC AUC: the probability that a random positive scores above a random negative, ties counting
    one half (Mann-Whitney U with average ranks). `labels: (N,)` bool, `scores: (N,)` float. NaN when the
    labels hold only one class."""
    labels = np.asarray(labels, dtype=bool)
    scores = np.asarray(scores, dtype=np.float64)
    positives = int(labels.sum())
    negatives = labels.size - positives
    if positives == 0 or negatives == 0:
        return math.nan
    _, inverse, counts = np.unique(scores, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    mean_rank = ends - (counts - 1) / 2.0  # 1-based average rank of each distinct score
    rank_sum = float(mean_rank[inverse][labels].sum())
    return (rank_sum - positives * (positives + 1) / 2.0) / (positives * negatives)


def log_loss(labels: np.ndarray, probabilities: np.ndarray) -> float:
    """Mean binary cross-entropy in nats; probabilities clipped to [1e-7, 1 - 1e-7]."""
    p = np.clip(np.asarray(probabilities, dtype=np.float64), 1e-7, 1 - 1e-7)
    y = np.asarray(labels, dtype=np.float64)
    return float(-(y * np.log(p) + (1 - y) * np.log1p(-p)).mean())


class _Mlp(nn.Module):
    """`(B, F)` standardized features -> `(B,)` logits: Linear + ReLU + dropout per hidden layer."""

    def __init__(self, inputs: int, hidden: tuple[int, ...]) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = inputs
        for size in hidden:
            layers += [nn.Linear(width, size), nn.ReLU(), nn.Dropout(DROPOUT)]
            width = size
        layers.append(nn.Linear(width, 1))
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x).squeeze(-1)


class ConfidenceModel:
    """Standardization (training mean and std per feature) and an ensemble of MLPs whose sigmoid outputs
    are averaged. `features` fixes the input order; `metadata` holds the report and training config of a
    loaded checkpoint."""

    def __init__(self, features: tuple[str, ...], mean: np.ndarray, std: np.ndarray, hidden: tuple[int, ...],
                 members: list[_Mlp], metadata: dict[str, Any] | None = None) -> None:
        self.features = tuple(features)
        self.mean = np.asarray(mean, dtype=np.float32)
        self.std = np.asarray(std, dtype=np.float32)
        self.hidden = tuple(hidden)
        self.members = members
        self.metadata = metadata or {}
        for member in self.members:
            member.eval()

    @property
    def use_personal(self) -> bool:
        return any(n in self.features for n in PERSONAL_FEATURES)

    @property
    def use_context(self) -> bool:
        return any(n in self.features for n in CONTEXT_FEATURES)

    @property
    def use_posterior(self) -> bool:
        return any(n in self.features for n in POSTERIOR_FEATURES)

    def standardize(self, x: np.ndarray) -> np.ndarray:
        """`(N, F)` float32 raw features -> standardized `(N, F)` float32."""
        return ((x - self.mean) / self.std).astype(np.float32)

    def predict_matrix(self, x: np.ndarray, batch_size: int = 65536) -> np.ndarray:
        """`(N, F)` float32 raw features -> `(N,)` float32 probabilities, mean over members."""
        z = torch.from_numpy(self.standardize(x))
        out = np.zeros(z.shape[0], dtype=np.float32)
        with torch.no_grad():
            for start in range(0, z.shape[0], batch_size):
                batch = z[start:start + batch_size]
                probs = torch.stack([torch.sigmoid(m(batch)) for m in self.members]).mean(0)
                out[start:start + batch.shape[0]] = probs.numpy()
        return out

    def predict(self, table: Any, batch_size: int = 65536) -> np.ndarray:
        """Probability that each row's prediction is correct: `(N,)` float32 in [0, 1]."""
        return self.predict_matrix(feature_matrix(table, self.use_personal, self.use_context, self.use_posterior),
                                   batch_size)


def _labelled(table: Any, what: str, settings: ConfidenceSettings) -> tuple[np.ndarray, np.ndarray]:
    frame = as_polars(table, what)
    require_columns(frame, ("added_words", "correct"), what)
    if frame.height == 0:
        raise DataError(f"{what} table is empty. Fix: give the confidence model {what} predictions.")
    zero = int((frame.get_column("added_words") < 1).sum())
    if zero:
        raise DataError(f"{what} table holds {zero} row(s) with added_words < 1; the confidence model scores only "
                        "predictions that add words. Fix: keep rows with added_words >= 1 before training.")
    features = feature_matrix(frame, settings.use_personal, settings.use_context, settings.use_posterior)
    return features, frame.get_column("correct").cast(pl.Boolean).to_numpy()


def _member_log_loss(model: _Mlp, x: torch.Tensor, y: torch.Tensor) -> tuple[float, np.ndarray]:
    model.eval()
    with torch.no_grad():
        logits = torch.cat([model(x[i:i + 65536]) for i in range(0, x.shape[0], 65536)])
        loss = nn.functional.binary_cross_entropy_with_logits(logits, y).item()
    return loss, torch.sigmoid(logits).numpy()


def _train_member(data: tuple[torch.Tensor, ...], settings: ConfidenceSettings, member: int,
                  seconds: float, bar: tqdm | None) -> tuple[_Mlp, MemberReport]:
    """One member on a bootstrap sample of the training rows, early-stopped on devel log-loss."""
    x, y, x_dev, y_dev = data
    seed = settings.seed + member
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    boot = torch.from_numpy(rng.integers(0, x.shape[0], x.shape[0]))
    model = _Mlp(x.shape[1], tuple(settings.hidden))
    optimizer = torch.optim.Adam(model.parameters(), lr=settings.learning_rate)
    best = (math.inf, 0, {k: v.clone() for k, v in model.state_dict().items()})
    start, stopped, epoch = time.monotonic(), "epochs", 0
    for epoch in range(1, settings.epochs + 1):
        model.train()
        order = boot[torch.from_numpy(rng.permutation(boot.shape[0]))]
        for i in range(0, order.shape[0], settings.batch_size):
            rows = order[i:i + settings.batch_size]
            loss = nn.functional.binary_cross_entropy_with_logits(model(x[rows]), y[rows])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        dev_loss, _ = _member_log_loss(model, x_dev, y_dev)
        if dev_loss < best[0]:
            best = (dev_loss, epoch, {k: v.clone() for k, v in model.state_dict().items()})
        if bar is not None:
            bar.update(1)
            bar.set_postfix(member=member, devel_loss=f"{dev_loss:.4f}")
        if epoch - best[1] >= settings.patience:
            stopped = "patience"
            break
        if time.monotonic() - start > seconds and epoch < settings.epochs:
            stopped = "time"
            break
    model.load_state_dict(best[2])
    loss, probs = _member_log_loss(model, x_dev, y_dev)
    report = MemberReport(member=member, seed=seed, best_epoch=best[1], epochs_run=epoch, devel_log_loss=loss,
                          devel_auc=roc_auc(y_dev.numpy() > 0.5, probs), stopped=stopped,
                          seconds=time.monotonic() - start)
    return model, report


def train_confidence_model(train_table: Any, devel_table: Any, settings: ConfidenceSettings | None = None,
                           progress: bool = True) -> tuple[ConfidenceModel, ConfidenceReport]:
    """Train the ensemble on `train_table` and early-stop each member on `devel_table` (both hold only rows
    with added_words >= 1 and a `correct` label, else `DataError`). Member m uses seed `settings.seed + m`
    for its weights, dropout and bootstrap sample. Returns the model (eval mode) and its report."""
    settings = settings or ConfidenceSettings()
    started = time.monotonic()
    x_raw, y = _labelled(train_table, "train", settings)
    x_dev_raw, y_dev = _labelled(devel_table, "devel", settings)
    mean = x_raw.mean(axis=0, dtype=np.float64).astype(np.float32)
    std = x_raw.std(axis=0, dtype=np.float64).astype(np.float32)
    std = np.where(std > 1e-6, std, 1.0).astype(np.float32)
    names = feature_names(settings.use_personal, settings.use_context, settings.use_posterior)
    model = ConfidenceModel(names, mean, std, tuple(settings.hidden), [])
    data = (torch.from_numpy(model.standardize(x_raw)), torch.from_numpy(y.astype(np.float32)),
            torch.from_numpy(model.standardize(x_dev_raw)), torch.from_numpy(y_dev.astype(np.float32)))
    reports: list[MemberReport] = []
    bar = tqdm(total=settings.members * settings.epochs, desc="confidence", unit="epoch") if progress else None
    try:
        with torch_threads(settings.threads):
            for member in range(settings.members):
                left = settings.max_minutes * 60.0 - (time.monotonic() - started)
                net, member_report = _train_member(data, settings, member, left / (settings.members - member), bar)
                model.members.append(net)
                reports.append(member_report)
    finally:
        if bar is not None:
            bar.close()
    probs = model.predict_matrix(x_dev_raw)
    report = ConfidenceReport(
        train_rows=int(y.size), devel_rows=int(y_dev.size), train_positive_rate=float(y.mean()),
        devel_positive_rate=float(y_dev.mean()), devel_log_loss=log_loss(y_dev, probs),
        devel_auc=roc_auc(y_dev, probs), features=model.features, members=tuple(reports),
        seconds=time.monotonic() - started)
    return model, report


def _plain(value: Any, where: str) -> Any:
    """`value` as plain checkpoint data (dict with str keys, list, str, int, float, bool, None)."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {str(k): _plain(v, f"{where}.{k}") for k, v in value.items()}
    raise TypeError(f"{where} is a {type(value).__name__}; a checkpoint holds only plain data")


def save_confidence(path: Path, model: ConfidenceModel, report: ConfidenceReport | dict[str, Any],
                    train_config: dict[str, Any], half: bool = False) -> None:
    """Write the model atomically (temp file + rename): fp32 tensors (the members' weights as fp16 with
    `half`: half the file, read back into fp32), feature list and plain metadata."""
    dtype = torch.float16 if half else torch.float32
    blob = {
        "format_version": FORMAT_VERSION,
        "features": list(model.features),
        "hidden": list(model.hidden),
        "mean": torch.from_numpy(model.mean.copy()),
        "std": torch.from_numpy(model.std.copy()),
        "members": [{k: v.detach().cpu().to(dtype).clone() for k, v in m.state_dict().items()} for m in model.members],
        "report": _plain(report.to_dict() if isinstance(report, ConfidenceReport) else report, "report"),
        "train_config": _plain(train_config, "train_config"),
    }
    write_checkpoint(blob, path)


def load_confidence(path: Path) -> ConfidenceModel:
    """Load a model written by `save_confidence` (eval mode); `DataError` naming the file and the fix for a
    missing, damaged or outdated checkpoint (one whose feature list differs from this code's)."""
    path = Path(path)
    blob = read_checkpoint(path, "confidence model", RETRAIN_FIX, {"format_version": FORMAT_VERSION})
    features = tuple(blob.get("features", ()))
    personal, context, posterior = (any(n in features for n in group)
                                    for group in (PERSONAL_FEATURES, CONTEXT_FEATURES, POSTERIOR_FEATURES))
    expected = feature_names(personal, personal and context, posterior)
    if features != expected:
        raise DataError(f"{path} was trained on features {list(features)}, but this code computes "
                        f"{list(expected)}. {RETRAIN_FIX}")
    try:
        hidden = tuple(int(h) for h in blob["hidden"])
        members = []
        for state in blob["members"]:
            net = _Mlp(len(features), hidden)
            net.load_state_dict(state)
            members.append(net)
        mean, std = blob["mean"].numpy(), blob["std"].numpy()
    except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as err:
        raise DataError(f"{path}: incomplete or inconsistent confidence model ({err!r}). {RETRAIN_FIX}") from err
    if not members or mean.shape != (len(features),) or std.shape != (len(features),):
        raise DataError(f"{path}: no members, or standardization of the wrong size. {RETRAIN_FIX}")
    metadata = {"report": blob.get("report", {}), "train_config": blob.get("train_config", {})}
    return ConfidenceModel(features, mean, std, hidden, members, metadata)
