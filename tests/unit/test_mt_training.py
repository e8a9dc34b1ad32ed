"""Translation-model training on a toy copy task: batching, the loss going down, checkpoints, resuming."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from specbench.simultrans.model import MtTransformer
from specbench.simultrans.settings import MtModelConfig, MtTrainSettings
from specbench.simultrans.tokenizer import BOS, EOS, PAD
from specbench.simultrans.training import batches, collate, config_hash, make_examples, train

pytestmark = pytest.mark.unit
CONFIG = MtModelConfig(vocab_size=12, d_model=32, heads=2, ffn=64, encoder_layers=1, decoder_layers=1,
                       dropout=0.0, causal_encoder=True, max_positions=32)


def copy_task(n: int, seed: int = 0) -> list:
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        s = [rng.randint(4, 11) for _ in range(rng.randint(1, 6))]
        pairs.append((s, list(s)))
    return make_examples(pairs, 32)


def test_batches_respect_the_token_budget_and_cover_everything() -> None:
    examples = copy_task(200)
    plan = batches(examples, 40, random.Random(0))
    assert sorted(id(e) for b in plan for e in b) == sorted(id(e) for e in examples)
    for b in plan:
        longest = max(max(len(e.src), len(e.tgt) + 1) for e in b)
        assert longest * len(b) <= 40 or len(b) == 1
    src, tin, tout = collate(plan[0])
    assert (tin[:, 0] == BOS).all() and ((tout == EOS).sum(1) == 1).all() and (src[:, 0] != PAD).all()
    assert make_examples([([], [5]), ([5] * 40, [5])], 32) == []


def test_training_learns_and_resumes(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = MtTransformer(CONFIG)
    examples, devel = copy_task(300), copy_task(40, seed=1)
    settings = MtTrainSettings(max_minutes=5, max_epochs=2, batch_tokens=200, learning_rate=3e-3, warmup_steps=20,
                               k_min=1, k_max=3, patience=10, threads=1)
    state_path, seen = tmp_path / "last.pt", []
    tag = config_hash(CONFIG, settings, "toy")
    state = train(model, examples, devel, settings, state_path, tag, lambda m, s, metrics: seen.append(metrics))
    assert state.epoch == 2 and state_path.is_file() and len(seen) == 2
    assert seen[1]["devel_loss"] < seen[0]["devel_loss"]
    longer = MtTrainSettings(**{**settings.to_dict(), "max_epochs": 3})
    assert config_hash(CONFIG, longer, "toy") == tag  # a longer budget resumes the same run
    resumed = MtTransformer(CONFIG)
    state2 = train(resumed, examples, devel, longer, state_path, tag, lambda m, s, metrics: seen.append(metrics))
    assert state2.epoch == 3 and len(state2.history) == 3 and len(seen) == 3
    other = MtTrainSettings(**{**settings.to_dict(), "learning_rate": 1e-4})
    assert config_hash(CONFIG, other, "toy") != tag
