"""Batched completion on the GPU against the CPU search, with the shipped word LM (skipped without CUDA).

Runs on the H200 machine from the source tree (`make gpu-check`): torch and pytest only (no hypothesis)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from specbench.prediction.completion import Completer
from specbench.prediction.lm import load_lm
from specbench.prediction.settings import CompletionSettings

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]
LM = Path(__file__).resolve().parents[2] / "models" / "lm_slurp.pt"


def _prefixes(count: int) -> list[list[str]]:
    words = [w for w in load_lm(LM).vocab.to_list()[4:200]]
    rng = random.Random(0)
    return [[rng.choice(words) for _ in range(rng.randrange(0, 6))] + (["qqunknown"] if i % 7 == 0 else [])
            for i in range(count)]


def test_gpu_nbest_equals_cpu_on_the_shipped_lm() -> None:
    prefixes = _prefixes(300)
    settings = CompletionSettings(batch_size=128)
    cpu = Completer(load_lm(LM), settings).complete(prefixes)
    gpu = Completer(load_lm(LM, device="cuda"), settings, device="cuda").complete(prefixes)
    same = sum([c.words for c in a] == [c.words for c in b] for a, b in zip(cpu, gpu, strict=True))
    assert same >= 0.98 * len(prefixes)  # float32 sums on two devices may swap exact near-ties
    for a, b in zip(cpu, gpu, strict=True):
        if [c.words for c in a] == [c.words for c in b]:
            assert [c.log_prob for c in a] == pytest.approx([c.log_prob for c in b], rel=1e-3, abs=1e-3)
