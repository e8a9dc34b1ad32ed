"""Fixtures shared by unit tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from specbench.acoustic.checkpoint import save_checkpoint
from specbench.acoustic.features import Cmvn, fbank
from specbench.acoustic.model import CausalCtcModel
from specbench.acoustic.settings import ModelConfig
from specbench.wfst.lexicon import PHONES


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small acoustic-model checkpoint with random weights and CMVN from random audio."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    model = CausalCtcModel(ModelConfig(hidden=64, layers=2)).eval()
    feats = [fbank(rng.normal(0, 0.1, 16000).astype(np.float32)) for _ in range(3)]
    path = tmp_path_factory.mktemp("ckpt") / "am.pt"
    save_checkpoint(path, model, Cmvn.estimate(feats), PHONES, {"note": "random weights"})
    return path
