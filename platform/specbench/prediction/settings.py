"""Settings of the prediction models and of completion: plain frozen dataclasses (no torch), so the job
config imports them without loading torch. Each validates its fields and names the field and the fix."""

from __future__ import annotations

from dataclasses import dataclass

from specbench.errors import ConfigError


def _check(ok: bool, name: str, value: object, allowed: str) -> None:
    if not ok:
        raise ConfigError(f"{name} = {value!r} is out of range; allowed: {allowed}")


@dataclass(frozen=True)
class LmSettings:
    """Sizes of the word LSTM LM. Embeddings tied with the output layer need `embed_dim == hidden_dim`."""

    embed_dim: int = 128
    hidden_dim: int = 128
    layers: int = 2
    dropout: float = 0.2
    tie_embeddings: bool = True

    def __post_init__(self) -> None:
        _check(8 <= self.embed_dim <= 2048, "embed_dim", self.embed_dim, "8..2048")
        _check(8 <= self.hidden_dim <= 2048, "hidden_dim", self.hidden_dim, "8..2048")
        _check(1 <= self.layers <= 4, "layers", self.layers, "1..4")
        _check(0.0 <= self.dropout < 1.0, "dropout", self.dropout, "0 <= dropout < 1")
        if self.tie_embeddings and self.embed_dim != self.hidden_dim:
            raise ConfigError(f"tie_embeddings needs embed_dim == hidden_dim, got {self.embed_dim} and "
                              f"{self.hidden_dim}; set them equal or tie_embeddings = false")


@dataclass(frozen=True)
class LmTrainSettings:
    """Optimisation of the word LM: Adam, gradient clipping, early stopping on devel perplexity."""

    epochs: int = 30
    batch_size: int = 64
    learning_rate: float = 2e-3
    max_minutes: float = 20.0
    patience: int = 3
    seed: int = 0
    threads: int = 2
    min_count: int = 1

    def __post_init__(self) -> None:
        _check(1 <= self.epochs <= 1000, "epochs", self.epochs, "1..1000")
        _check(1 <= self.batch_size <= 4096, "batch_size", self.batch_size, "1..4096")
        _check(0 < self.learning_rate <= 1.0, "learning_rate", self.learning_rate, "0 < lr <= 1")
        _check(0 < self.max_minutes <= 24 * 60, "max_minutes", self.max_minutes, "0 < minutes <= 1440")
        _check(1 <= self.patience <= 100, "patience", self.patience, "1..100")
        _check(1 <= self.threads <= 256, "threads", self.threads, "1..256")
        _check(1 <= self.min_count <= 1000, "min_count", self.min_count, "1..1000")


@dataclass(frozen=True)
class CompletionSettings:
    """N-best completion of a partial hypothesis by beam search (the paper's N_LM = 4)."""

    n_best: int = 4
    beam: int = 4
    max_new_words: int = 12
    batch_size: int = 64  # prefixes per search batch: fastest on 2 CPU cores (larger batches leave the cache)

    def __post_init__(self) -> None:
        _check(1 <= self.n_best <= 64, "n_best", self.n_best, "1..64")
        _check(self.n_best <= self.beam <= 256, "beam", self.beam, f"n_best ({self.n_best})..256")
        _check(1 <= self.max_new_words <= 100, "max_new_words", self.max_new_words, "1..100")
        _check(1 <= self.batch_size <= 65536, "batch_size", self.batch_size, "1..65536")


@dataclass(frozen=True)
class ConfidenceSettings:
    """The confidence model: an ensemble of MLPs (up to 4 dense layers of width at most 512)."""

    members: int = 4
    hidden: tuple[int, ...] = (256, 256)
    epochs: int = 20
    batch_size: int = 1024
    learning_rate: float = 1e-3
    patience: int = 3
    seed: int = 0
    use_personal: bool = True
    threads: int = 2
    max_minutes: float = 10.0

    def __post_init__(self) -> None:
        _check(1 <= self.members <= 32, "members", self.members, "1..32")
        _check(1 <= len(self.hidden) <= 4 and all(1 <= h <= 512 for h in self.hidden), "hidden", self.hidden,
               "1 to 4 layer widths, each 1..512")
        _check(1 <= self.epochs <= 1000, "epochs", self.epochs, "1..1000")
        _check(1 <= self.batch_size <= 1 << 20, "batch_size", self.batch_size, "1..1048576")
        _check(0 < self.learning_rate <= 1.0, "learning_rate", self.learning_rate, "0 < lr <= 1")
        _check(1 <= self.patience <= 100, "patience", self.patience, "1..100")
        _check(1 <= self.threads <= 256, "threads", self.threads, "1..256")
        _check(0 < self.max_minutes <= 24 * 60, "max_minutes", self.max_minutes, "0 < minutes <= 1440")
