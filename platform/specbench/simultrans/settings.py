"""Sizes and optimisation settings of the translation models: plain frozen dataclasses (no torch), usable as
TOML sections. Field metadata `range=(lo, hi)` bounds what a job file may set."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from specbench.checks import config_choices
from specbench.checks import config_range as _r


@dataclass(frozen=True)
class MtModelConfig:
    """Transformer sizes (`[model]`). `causal_encoder`: a unidirectional source encoder whose states are
    computed incrementally (the prefix-to-prefix wait-k model); else bidirectional (full-sentence model)."""

    vocab_size: int = field(default=6000, metadata=_r(100, 64000))
    d_model: int = field(default=256, metadata=_r(16, 1024))
    heads: int = field(default=4, metadata=_r(1, 16))
    ffn: int = field(default=512, metadata=_r(16, 8192))
    encoder_layers: int = field(default=3, metadata=_r(1, 12))
    decoder_layers: int = field(default=3, metadata=_r(1, 12))
    dropout: float = field(default=0.1, metadata=_r(0.0, 0.9))
    causal_encoder: bool = False
    max_positions: int = field(default=256, metadata=_r(16, 4096))

    def __post_init__(self) -> None:
        if self.d_model % self.heads:
            raise ValueError(f"d_model {self.d_model} must be a multiple of heads {self.heads}")

    def to_dict(self) -> dict[str, float | int | bool]:
        return asdict(self)


@dataclass(frozen=True)
class MtTrainSettings:
    """Optimisation settings (`[training]`). Wait-k models draw k uniformly from [k_min, k_max] per batch,
    and with probability `full_sentence_fraction` train a batch with the whole source visible.
    `weight_average_decay` > 0 scores and keeps an exponential moving average of the weights (Polyak and
    Juditsky 1992), a smoothed version of checkpoint averaging (Vaswani et al. 2017 average the last 5-20)."""

    max_minutes: float = field(default=75.0, metadata=_r(0.05, 24 * 60))
    max_epochs: int = field(default=100, metadata=_r(1, 10000))
    batch_tokens: int = field(default=6000, metadata=_r(100, 200000))
    learning_rate: float = field(default=1e-3, metadata=_r(1e-6, 1.0))
    warmup_steps: int = field(default=1000, metadata=_r(1, 100000))
    label_smoothing: float = field(default=0.1, metadata=_r(0.0, 0.5))
    patience: int = field(default=6, metadata=_r(1, 1000))
    k_min: int = field(default=1, metadata=_r(1, 100))
    k_max: int = field(default=9, metadata=_r(1, 100))
    full_sentence_fraction: float = field(default=0.1, metadata=_r(0.0, 1.0))
    checkpoint_minutes: float = field(default=5.0, metadata=_r(0.1, 1000))
    seed: int = field(default=0, metadata=_r(0, 2**32 - 1))  # numpy's and torch's seeds
    threads: int = field(default=0, metadata=_r(0, 256))  # 0: all cores
    # Polyak averaging: the model that devel scores and that is kept is an exponential moving average of the
    # weights, updated after every step with this decay (0: off, the raw weights)
    weight_average_decay: float = field(default=0.0, metadata=_r(0.0, 0.99999))

    def __post_init__(self) -> None:
        if self.k_min > self.k_max:
            raise ValueError(f"k_min {self.k_min} must be <= k_max {self.k_max}")

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


@dataclass(frozen=True)
class MtSelection:
    """Which epoch's weights are kept (`[selection]`). "devel_loss": the lowest devel loss. "sbs_bleu" (wait-k
    models): the highest sacreBLEU on the devel sentences of speculative beam search at (k, beam, window),
    the operating point the simultrans job reports, for when devel loss and wait-k BLEU disagree. Either way
    devel loss decides when training stops, and these settings do not change the optimisation (a saved run
    resumes under either)."""

    metric: str = field(default="devel_loss", metadata=config_choices("devel_loss", "sbs_bleu"))
    k: int = field(default=3, metadata=_r(1, 100))
    beam: int = field(default=5, metadata=_r(1, 50))
    window: int = field(default=2, metadata=_r(0, 20))

    def to_dict(self) -> dict[str, str | int]:
        return asdict(self)
