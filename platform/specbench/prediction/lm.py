"""Word-level LSTM language model of the predictive ASR ("a word-level 2-layer LSTM LM"), and its checkpoint.

The model reads token ids (see `specbench.prediction.vocab`: `<s>` first) and gives, at every position, the
logits of the next token. Checkpoints hold fp16 weights and plain data only (loaded with
`torch.load(weights_only=True)`, xz-compressed: `checkpoint_io`); the shipped one is about 1.1 MB.
`LmSettings` is defined (torch-free, for the job config) in `specbench.prediction.settings`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from specbench.checkpoint_io import read_checkpoint, write_checkpoint
from specbench.errors import ConfigError, DataError
from specbench.prediction.settings import LmSettings
from specbench.prediction.vocab import RETRAIN_FIX, WordVocab

FORMAT = "specbench-word-lstm-lm"
FORMAT_VERSION = 1
LstmState = tuple[torch.Tensor, torch.Tensor]


class WordLstmLm(nn.Module):
    """Embedding -> dropout -> `layers`-layer LSTM -> dropout -> linear over the vocabulary."""

    def __init__(self, vocab_size: int, settings: LmSettings) -> None:
        super().__init__()
        if vocab_size < 5:
            raise DataError(f"vocabulary of {vocab_size} tokens has no word besides the 4 specials. "
                            "Fix: train on a non-empty text.")
        self.settings = settings
        self.vocab_size = vocab_size
        self.embedding = nn.Embedding(vocab_size, settings.embed_dim)
        self.drop = nn.Dropout(settings.dropout)
        self.lstm = nn.LSTM(settings.embed_dim, settings.hidden_dim, settings.layers, batch_first=True,
                            dropout=settings.dropout if settings.layers > 1 else 0.0)
        self.output = nn.Linear(settings.hidden_dim, vocab_size)
        nn.init.uniform_(self.embedding.weight, -0.1, 0.1)
        nn.init.zeros_(self.output.bias)
        if settings.tie_embeddings:
            self.output.weight = self.embedding.weight

    def features(self, ids: torch.Tensor, lengths: torch.Tensor | None = None,
                 state: LstmState | None = None) -> tuple[torch.Tensor, LstmState]:
        """Top-layer outputs `(B, T, hidden)` float32 after dropout, and the (h, c) state
        `(layers, B, hidden)`.

        `ids`: `(B, T)` int64. With `lengths` (`(B,)` int64, each >= 1) the rows are packed: the returned
        state is each row's state after its last true token and outputs past a row's length are zeros.
        Without it the state is the one after position T - 1 (right padding then does not disturb the
        outputs at the true positions, the LSTM being causal)."""
        x = self.drop(self.embedding(ids))
        if lengths is None:
            out, new_state = self.lstm(x, state)
        else:
            packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
            out, new_state = self.lstm(packed, state)
            out, _ = pad_packed_sequence(out, batch_first=True, total_length=ids.shape[1])
        return self.drop(out), new_state

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor | None = None,
                state: LstmState | None = None) -> tuple[torch.Tensor, LstmState]:
        """Next-token logits `(B, T, V)` float32 for `ids` `(B, T)` int64, and the state (see `features`)."""
        out, new_state = self.features(ids, lengths, state)
        return self.output(out).float(), new_state

    def step(self, ids: torch.Tensor, state: LstmState | None) -> tuple[torch.Tensor, LstmState]:
        """One token per row: `ids` `(B,)` int64 -> next-token log-probs `(B, V)` float32 (natural log) and
        the new state `(layers, B, hidden)`; `state=None` starts from zeros (use `<s>` as the first id)."""
        out, new_state = self.lstm(self.drop(self.embedding(ids[:, None])), state)
        return F.log_softmax(self.output(self.drop(out[:, 0])).float(), dim=-1), new_state

    def last_log_probs(self, ids: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, LstmState]:
        """Log-probs `(B, V)` float32 of the token after each row's last true position (`lengths` `(B,)`
        int64 >= 1), and the state there `(layers, B, hidden)`: one padded pass over many prefixes."""
        _, (h, c) = self.features(ids, lengths)
        return F.log_softmax(self.output(self.drop(h[-1])).float(), dim=-1), (h, c)


@dataclass(frozen=True)
class LoadedLm:
    """A checkpoint read back: `model` float32 in eval mode on the requested device."""

    model: WordLstmLm
    vocab: WordVocab
    settings: LmSettings
    metrics: dict[str, Any]
    train_config: dict[str, Any]


def resolve_device(device: str | torch.device) -> torch.device:
    """`torch.device(device)`; asking for CUDA on a machine without it raises `ConfigError`."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ConfigError(f"device = {device!r} is not a torch device ({err}). "
                          "Fix: use 'cpu' or 'cuda'.") from err
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device = {device!r} was asked for but this machine has no usable CUDA device. "
                          "Fix: use device 'cpu', or run on a GPU machine.")
    return dev


def _plain(value: Any, where: str) -> Any:
    """`value` as plain Python data (dict with str keys, list, str, int, float, bool, None)."""
    if value is None:
        return None
    for kind in (bool, int, float, str):  # also numpy.float64, a float subclass, becomes a plain float
        if isinstance(value, kind):
            return kind(value)
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise TypeError(f"{where}: checkpoint dictionaries need string keys")
        return {k: _plain(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:  # numpy and torch scalars
        return _plain(value.item(), where)
    raise TypeError(f"{where}: {type(value).__name__} is not plain data a checkpoint may hold")


def save_lm(path: str | Path, model: WordLstmLm, vocab: WordVocab, settings: LmSettings,
            metrics: dict[str, Any], train_config: dict[str, Any]) -> None:
    """Write the fp16 inference checkpoint atomically (temp file, then rename). `metrics` and
    `train_config` must be plain data (numpy/torch scalars and paths are converted)."""
    path = Path(path)
    if model.vocab_size != len(vocab) or model.settings != settings:
        raise ValueError(f"model ({model.vocab_size} tokens, {model.settings}) does not match the vocabulary "
                         f"({len(vocab)} tokens) or the settings ({settings})")
    state = {k: v.detach().cpu().half() if v.is_floating_point() else v.detach().cpu()
             for k, v in model.state_dict().items()}
    if settings.tie_embeddings:
        del state["output.weight"]  # the same matrix as embedding.weight
    blob = {"format": FORMAT, "format_version": FORMAT_VERSION, "vocab": vocab.to_list(),
            "settings": asdict(settings), "state_dict": state, "metrics": _plain(metrics, "metrics"),
            "train_config": _plain(train_config, "train_config")}
    write_checkpoint(blob, path)


def _read_blob(path: Path) -> dict[str, Any]:
    blob = read_checkpoint(path, "prediction LM", RETRAIN_FIX, {"format": FORMAT, "format_version": FORMAT_VERSION})
    missing = [k for k in ("vocab", "settings", "state_dict", "metrics", "train_config") if k not in blob]
    if missing:
        raise DataError(f"{path}: checkpoint lacks {missing}. {RETRAIN_FIX}")
    return blob


def load_lm(path: str | Path, device: str | torch.device = "cpu") -> LoadedLm:
    """Read a checkpoint written by `save_lm`: the model in float32 and eval mode on `device`. A missing,
    corrupt or inconsistent file raises `DataError` naming the path and the fix."""
    path = Path(path)
    dev = resolve_device(device)
    blob = _read_blob(path)
    try:
        vocab = WordVocab.from_list(blob["vocab"])
        settings = LmSettings(**blob["settings"])
    except (DataError, ConfigError, TypeError) as err:
        raise DataError(f"{path}: bad vocabulary or model settings ({err}). {RETRAIN_FIX}") from err
    state = {k: v.float() if v.is_floating_point() else v for k, v in blob["state_dict"].items()}
    rows = state.get("embedding.weight", torch.empty(0)).shape[0]
    if rows != len(vocab):
        raise DataError(f"{path}: the weights are for {rows} tokens but the vocabulary has {len(vocab)}. "
                        f"{RETRAIN_FIX}")
    model = WordLstmLm(len(vocab), settings)
    if settings.tie_embeddings:
        state["output.weight"] = state["embedding.weight"]
    try:
        model.load_state_dict(state)
    except RuntimeError as err:
        raise DataError(f"{path}: weights do not fit the model settings ({err}). {RETRAIN_FIX}") from err
    model.to(dev).eval()
    return LoadedLm(model, vocab, settings, dict(blob["metrics"]), dict(blob["train_config"]))
