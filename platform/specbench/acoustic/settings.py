"""Sizes of the acoustic model and its optimisation settings: plain frozen dataclasses (no torch), so the job
loader can use them as TOML sections. Field metadata `range=(lo, hi)` bounds what a job file may set."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from specbench.checks import config_range as _r


@dataclass(frozen=True)
class ModelConfig:
    """Causal CTC model sizes (`[model]`): conv subsampling channels, LSTM width and depth, dropout."""

    num_bins: int = field(default=80, metadata=_r(80, 80))
    num_classes: int = field(default=40, metadata=_r(2, None))  # blank + 39 CMUdict phones
    conv_channels: int = field(default=32, metadata=_r(1, 256))
    hidden: int = field(default=320, metadata=_r(8, 1024))
    layers: int = field(default=3, metadata=_r(1, 8))
    dropout: float = field(default=0.1, metadata=_r(0.0, 0.9))

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


@dataclass(frozen=True)
class TrainSettings:
    """Optimisation settings (`[training]`)."""

    max_minutes: float = field(default=55.0, metadata=_r(0.05, 24 * 60))
    max_epochs: int = field(default=40, metadata=_r(1, 1000))
    batch_frames: int = field(default=12000, metadata=_r(500, 200000))
    learning_rate: float = field(default=1.5e-3, metadata=_r(1e-6, 1.0))
    warmup_steps: int = field(default=300, metadata=_r(1, 100000))
    patience: int = field(default=3, metadata=_r(1, 100))  # epochs without devel gain before stopping
    # epochs without devel gain before the learning rate is halved (counted again after each halving)
    lr_decay_patience: int = field(default=2, metadata=_r(1, 100))
    freq_masks: int = field(default=2, metadata=_r(0, 10))
    freq_mask_width: int = field(default=12, metadata=_r(0, 40))
    time_masks: int = field(default=2, metadata=_r(0, 10))
    time_mask_fraction: float = field(default=0.05, metadata=_r(0.0, 0.5))
    freq_warp: float = field(default=0.12, metadata=_r(0.0, 0.3))  # mel-axis stretch up to +-12% (VTLP-like)
    # Kaldi-style speed perturbation: features of every training utterance resampled by each factor (> 1 is
    # faster and higher: pitch and formants scale with it); each epoch picks one per utterance. (1.0,) is off.
    speed_factors: tuple[float, ...] = field(default=(1.0,), metadata=_r(0.5, 2.0))
    seed: int = field(default=0, metadata=_r(0, 2**32 - 1))  # numpy's and torch's seeds
    threads: int = field(default=0, metadata=_r(0, 256))  # 0: all cores
