"""Fixtures shared by unit tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from specbench.acoustic.checkpoint import AcousticCheckpoint, save_checkpoint
from specbench.acoustic.features import Cmvn, fbank
from specbench.acoustic.inference import score_samples
from specbench.acoustic.model import CausalCtcModel, lookahead_ms
from specbench.acoustic.settings import ModelConfig
from specbench.wfst.lexicon import PHONES


@pytest.fixture(scope="session")
def assert_causal() -> Callable[[AcousticCheckpoint, float], None]:
    """A check that changing the audio after 1 s leaves the scores before 1 s minus the lookahead unchanged
    (and changes later ones), for a checkpoint scored with a VTLN warp."""

    def check(ckpt: AcousticCheckpoint, warp: float) -> None:
        rng = np.random.default_rng(11)
        audio = rng.normal(0, 0.1, 32000).astype(np.float32)
        changed = audio.copy()
        changed[16000:] = rng.normal(0, 0.3, 16000)
        a, b = score_samples(ckpt, audio, warp=warp), score_samples(ckpt, changed, warp=warp)
        safe = int((1000 - lookahead_ms()) // 40.0) + 1
        assert np.array_equal(a[:safe], b[:safe]) and not np.allclose(a[safe + 1:], b[safe + 1:])

    return check


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
