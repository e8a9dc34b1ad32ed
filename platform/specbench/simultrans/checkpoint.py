"""Loading the fp16 translation checkpoints written by `specbench train mt` (with their BPE)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specbench.checkpoint_io import read_checkpoint
from specbench.errors import DataError
from specbench.simultrans.model import MtTransformer
from specbench.simultrans.settings import MtModelConfig
from specbench.simultrans.tokenizer import Tokenizer
from specbench.simultrans.training import STATE_VERSION


@dataclass
class MtCheckpoint:
    model: MtTransformer
    tokenizer: Tokenizer
    metadata: dict[str, Any]


def load_mt(path: Path, bpe_path: Path) -> MtCheckpoint:
    """Load for inference (fp32, eval mode); the BPE must be the one the model was trained with."""
    path = Path(path)
    fix = "Fix: train it with `specbench train mt jobs/mt_waitk.toml` (or jobs/mt_full.toml)."
    blob = read_checkpoint(path, "translation model", fix, {"format_version": STATE_VERSION})
    tokenizer = Tokenizer(bpe_path)
    if blob["bpe_sha256"] != tokenizer.sha256:
        raise DataError(f"{path} was trained with another BPE model than {bpe_path} (sha256 differs). {fix}")
    model = MtTransformer(MtModelConfig(**blob["model_config"]))
    model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in blob["state_dict"].items()})
    model.eval()
    return MtCheckpoint(model, tokenizer, blob["metadata"])
