"""Acoustic-model checkpoints: fp16 weights plus what inference needs (phones, CMVN, model sizes).

Saved (`checkpoint_io.write_checkpoint`) as a dict of tensors and plain values and loaded with `weights_only=True`, so a
checkpoint can never run code. The phone list travels with the weights: a checkpoint trained over another
phone set is refused with a message naming both sets.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from specbench.acoustic.features import Cmvn
from specbench.acoustic.model import CausalCtcModel
from specbench.acoustic.settings import ModelConfig
from specbench.checkpoint_io import read_checkpoint, write_checkpoint
from specbench.errors import DataError

FORMAT_VERSION = 1


@dataclass(frozen=True)
class AcousticCheckpoint:
    """A trained model with its CMVN and phone list (`phones[k-1]` is output column k; column 0 is blank)."""

    model: CausalCtcModel
    cmvn: Cmvn
    phones: tuple[str, ...]
    metadata: dict[str, Any]


def save_checkpoint(path: Path, model: CausalCtcModel, cmvn: Cmvn, phones: tuple[str, ...],
                    metadata: dict[str, Any], fp16: bool = True) -> None:
    """Write atomically (temp file + rename); weights in fp16 unless `fp16=False` (the training job's
    latest epoch, kept whole)."""
    state = {k: (v.half() if fp16 and v.is_floating_point() else v).cpu() for k, v in model.state_dict().items()}
    blob = {
        "format_version": FORMAT_VERSION,
        "state_dict": state,
        "model_config": model.config.to_dict(),
        "cmvn_mean": torch.from_numpy(cmvn.mean),
        "cmvn_inv_std": torch.from_numpy(cmvn.inv_std),
        "phones": list(phones),
        "metadata": metadata,
    }
    write_checkpoint(blob, path)


def load_checkpoint(path: Path, expected_phones: tuple[str, ...] | None = None,
                    device: str = "cpu") -> AcousticCheckpoint:
    """Load for inference (fp32 weights, eval mode). Raises `DataError` naming the file and the fix."""
    path = Path(path)
    fix = "Fix: train one with `specbench train am jobs/am.toml`, or point the job at the right checkpoint."
    blob = read_checkpoint(path, "acoustic model checkpoint", fix, {"format_version": FORMAT_VERSION})
    phones = tuple(blob["phones"])
    if expected_phones is not None and phones != tuple(expected_phones):
        raise DataError(f"{path}: the checkpoint was trained over the phones {' '.join(phones)}, but the graph "
                        f"uses {' '.join(expected_phones)}. {fix}")
    known = {f.name for f in fields(ModelConfig)}
    config = ModelConfig(**{k: v for k, v in blob["model_config"].items() if k in known})
    model = CausalCtcModel(config)
    if any(k.startswith("input_transform.") for k in blob["state_dict"]):
        model.add_input_transform()  # a speaker-adapted copy (`acoustic.speaker_transform`)
    model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in blob["state_dict"].items()})
    model.eval().to(device)
    cmvn = Cmvn(np.asarray(blob["cmvn_mean"].numpy(), dtype=np.float32),
                np.asarray(blob["cmvn_inv_std"].numpy(), dtype=np.float32))
    return AcousticCheckpoint(model, cmvn, phones, dict(blob.get("metadata", {})))
