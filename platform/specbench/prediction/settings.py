"""Settings of the prediction models and of completion: plain frozen dataclasses (no torch), so the job
config imports them without loading torch. Each validates its fields and names the field and the fix."""

from __future__ import annotations

from dataclasses import dataclass, field

from specbench.checks import check_range
from specbench.errors import ConfigError


@dataclass(frozen=True)
class LmSettings:
    """Sizes of the word LSTM LM. Embeddings tied with the output layer need `embed_dim == hidden_dim`."""

    embed_dim: int = 128
    hidden_dim: int = 128
    layers: int = 2
    dropout: float = 0.2
    tie_embeddings: bool = True

    def __post_init__(self) -> None:
        check_range("embed_dim", self.embed_dim, 8, 2048)
        check_range("hidden_dim", self.hidden_dim, 8, 2048)
        check_range("layers", self.layers, 1, 4)
        check_range("dropout", self.dropout, 0, 1, hi_open=True)
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
        check_range("epochs", self.epochs, 1, 1000)
        check_range("batch_size", self.batch_size, 1, 4096)
        check_range("learning_rate", self.learning_rate, 0, 1, lo_open=True)
        check_range("max_minutes", self.max_minutes, 0, 24 * 60, lo_open=True)
        check_range("patience", self.patience, 1, 100)
        check_range("threads", self.threads, 1, 256)
        check_range("seed", self.seed, 0, 2**32 - 1)
        check_range("min_count", self.min_count, 1, 1000)


@dataclass(frozen=True)
class CompletionSettings:
    """N-best completion of a partial hypothesis by beam search (the paper's N_LM = 4)."""

    n_best: int = 4
    beam: int = 4
    max_new_words: int = 12
    batch_size: int = 64  # prefixes per search batch: fastest on 2 CPU cores (larger batches leave the cache)

    def __post_init__(self) -> None:
        check_range("n_best", self.n_best, 1, 64)
        check_range("beam", self.beam, self.n_best, 256)  # a beam of at least n_best
        check_range("max_new_words", self.max_new_words, 1, 100)
        check_range("batch_size", self.batch_size, 1, 65536)


@dataclass(frozen=True)
class ConfidenceSettings:
    """The confidence model: an ensemble of MLPs (up to 4 dense layers of width at most 512)."""

    members: int = 4
    hidden: tuple[int, ...] = field(default=(256, 256), metadata={"repeats": True})  # layer widths
    epochs: int = 20
    batch_size: int = 1024
    learning_rate: float = 1e-3
    patience: int = 3
    seed: int = 0
    use_personal: bool = True
    use_context: bool = False  # time of day, hours since the candidate was said, gap to its usual hour
    use_posterior: bool = False  # the partial's lattice word posteriors (transcripts with asr.partial_posteriors)
    threads: int = 2
    max_minutes: float = 10.0

    def __post_init__(self) -> None:
        check_range("members", self.members, 1, 32)
        check_range("len(hidden)", len(self.hidden), 1, 4)  # 1 to 4 layers
        for i, width in enumerate(self.hidden):
            check_range(f"hidden[{i}]", width, 1, 512)
        check_range("epochs", self.epochs, 1, 1000)
        check_range("batch_size", self.batch_size, 1, 1 << 20)
        check_range("learning_rate", self.learning_rate, 0, 1, lo_open=True)
        check_range("patience", self.patience, 1, 100)
        check_range("threads", self.threads, 1, 256)
        check_range("seed", self.seed, 0, 2**32 - 1)
        check_range("max_minutes", self.max_minutes, 0, 24 * 60, lo_open=True)
        if self.use_context and not self.use_personal:
            raise ValueError("use_context needs use_personal: the context features describe the user's history")
