"""Fixtures shared by unit tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
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


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread() -> Iterator[None]:
    """Unit tests run tiny models, beside the integration tests on the same cores: two torch threads contend
    and run them tens of times slower than one."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


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


@pytest.fixture
def tiny_mt_job(tmp_path: Path) -> Callable[..., Path]:
    """A writer of `train_mt` job files for a tiny model (d 32, one layer a side) on Multi30k with the shipped
    BPE: `write(name, output, body)` puts `body` (the top-level keys and sections that differ: devel and BLEU
    sentences, `[training]`, `[selection]`, `causal`) around the shared `[model]` table."""

    def write(name: str, output: Path, body: str, causal: bool = True) -> Path:
        path = tmp_path / f"{name}.toml"
        head, _, sections = body.partition("\n[")
        model = ("[model]\nvocab_size = 4000\nd_model = 32\nheads = 2\nffn = 64\nencoder_layers = 1\n"
                 f"decoder_layers = 1\ncausal_encoder = {str(causal).lower()}\n")
        rest = f"\n[{sections}" if sections else ""
        path.write_text(f'kind = "train_mt"\nname = "{name}"\noutput = "{output}"\n'
                        f'bpe_model = "models/mt_bpe.model"\n{head}\n\n{model}{rest}')
        return path

    return write


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh folder for the compiled decoder's numba cache and ahead-of-time modules, AOT on by default."""
    import numba

    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("SPECBENCH_DECODER_AOT", raising=False)
    return tmp_path
