"""Translation-model training on a toy copy task: batching, the loss going down, checkpoints, resuming."""

from __future__ import annotations

import dataclasses
import itertools
import random
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from specbench.errors import DataError
from specbench.simultrans import training
from specbench.simultrans.model import MtTransformer
from specbench.simultrans.settings import MtModelConfig, MtTrainSettings
from specbench.simultrans.tokenizer import BOS, EOS, PAD
from specbench.simultrans.training import (
    WeightAverage,
    batches,
    collate,
    config_hash,
    devel_loss,
    make_examples,
    read_state,
    train,
)

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


def test_a_run_stopped_mid_epoch_goes_on_from_the_batch_where_it_stopped(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(training, "time", SimpleNamespace(monotonic=itertools.count().__next__))  # 1 s a read
    examples, devel = copy_task(300), copy_task(40, seed=1)
    settings = MtTrainSettings(max_minutes=5, max_epochs=1, batch_tokens=60, learning_rate=3e-3, warmup_steps=20,
                               k_min=1, k_max=3, patience=10, threads=1)
    tag, runs = config_hash(CONFIG, settings, "toy"), {}
    for name, budgets in (("whole", [5]), ("cut", [1e-6, 5]), ("late", [0.7, 5])):  # stopped at batch 1, 22 of 24
        torch.manual_seed(0)
        model = MtTransformer(CONFIG)
        for minutes in budgets:
            state = train(model, examples, devel, dataclasses.replace(settings, max_minutes=minutes),
                          tmp_path / f"{name}.pt", tag, lambda m, s, metrics: None)
            if minutes < 1:
                assert (state.epoch, state.step) == (0, 1 if name == "cut" else 22)
        runs[name] = (state, model.state_dict())
    whole, weights = runs.pop("whole")
    for cut, resumed in runs.values():
        assert cut.step == whole.step and cut.history[0]["train_loss"] == pytest.approx(whole.history[0]["train_loss"])
        assert all(torch.equal(resumed[k], weights[k]) for k in weights)  # the same batches, once each, in order


def test_weight_average_is_the_bias_corrected_moving_average_and_swaps_back() -> None:
    model = torch.nn.Linear(2, 1, bias=False)
    average = WeightAverage(model, 0.5)
    steps = [torch.tensor([[1.0, 2.0]]), torch.tensor([[3.0, 0.0]]), torch.tensor([[5.0, 4.0]])]
    for w in steps:
        with torch.no_grad():
            model.weight.copy_(w)
        average.update()
    # by hand: 0.5^2 * w1 + 0.5 * w2 + w3 (each times 1 - 0.5), over 1 - 0.5^3
    expected = (0.25 * 0.5 * steps[0] + 0.5 * 0.5 * steps[1] + 0.5 * steps[2]) / (1 - 0.125)
    assert torch.allclose(average.averaged()[0], expected)
    with average.swapped_in():
        assert torch.allclose(model.weight, expected)
    assert torch.equal(model.weight, steps[2])
    restored = WeightAverage(model, 0.5)
    restored.load(average.state())
    assert torch.allclose(restored.averaged()[0], expected)
    with pytest.raises(ValueError, match="weight_average_decay"):
        WeightAverage(model, 1.0)
    fresh = WeightAverage(model, 0.5)  # no update yet: no average to swap in
    with fresh.swapped_in():
        assert torch.equal(model.weight, steps[2])


def test_a_run_without_averaging_keeps_the_tag_it_had_before_averaging_existed() -> None:
    import hashlib
    import json

    settings = MtTrainSettings(max_minutes=5, learning_rate=3e-3)
    training = {k: v for k, v in settings.to_dict().items()
                if k not in ("max_minutes", "max_epochs", "patience", "checkpoint_minutes", "threads",
                             "weight_average_decay")}
    blob = json.dumps({"model": CONFIG.to_dict(), "training": training, "data": "toy", "version": 1},
                      sort_keys=True)
    assert config_hash(CONFIG, settings, "toy") == hashlib.sha256(blob.encode()).hexdigest()[:16]


def test_training_with_weight_averaging_scores_the_average_and_resumes_it(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = MtTransformer(CONFIG)
    examples, devel = copy_task(300), copy_task(40, seed=1)
    settings = MtTrainSettings(max_minutes=5, max_epochs=2, batch_tokens=200, learning_rate=3e-3,
                               warmup_steps=20, k_min=1, k_max=3, patience=10, threads=1,
                               weight_average_decay=0.9)
    plain = MtTrainSettings(**{**settings.to_dict(), "weight_average_decay": 0.0})
    assert config_hash(CONFIG, settings, "toy") != config_hash(CONFIG, plain, "toy")
    kept: list[dict] = []

    def on_epoch(m: MtTransformer, state, metrics: dict) -> None:  # noqa: ANN001
        kept.append({k: v.clone() for k, v in m.state_dict().items()})

    tag = config_hash(CONFIG, settings, "toy")
    state = train(model, examples, devel, settings, tmp_path / "last.pt", tag, on_epoch)
    assert state.epoch == 2 and state.history[1]["devel_loss"] < state.history[0]["devel_loss"]
    # on_epoch saw the averaged weights; the model trains on with its own, which differ from them
    assert not torch.equal(kept[-1]["embed.weight"], model.state_dict()["embed.weight"])
    blob = torch.load(tmp_path / "last.pt", weights_only=False)
    saved = WeightAverage(model, 0.9)
    saved.load(blob["average"])
    names = [n for n, p in model.named_parameters() if p.is_floating_point()]
    assert torch.allclose(saved.averaged()[names.index("embed.weight")], kept[-1]["embed.weight"])
    with saved.swapped_in():  # the devel loss recorded is that of the averaged model
        recorded = state.history[-1]["devel_loss"]
        assert devel_loss(model, devel, [3, 5, 7, None]) == pytest.approx(recorded, rel=1e-5)
    longer = MtTrainSettings(**{**settings.to_dict(), "max_epochs": 3})
    state2 = train(MtTransformer(CONFIG), examples, devel, longer, tmp_path / "last.pt", tag, on_epoch)
    assert state2.epoch == 3 and len(kept) == 3
    resumed = torch.load(tmp_path / "last.pt", weights_only=False)["average"]
    assert resumed["updates"] == state2.step > state.step  # the average went on from the saved one


def test_a_resume_needs_the_same_devel_sentences(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Early stopping, the kept epoch and the selection BLEU read the devel sentences: a saved state judged on
    another set starts afresh instead of comparing its losses with the old set's best; one saved before the
    set was recorded resumes on its tag, which a run on all pairs keeps."""
    from specbench.config import TrainMtConfig
    from specbench.experiments.train_mt import data_tag, judged_on

    pairs = [("ein hund", "a dog"), ("eine katze", "a cat"), ("ein haus", "a house")]
    assert data_tag("sha", TrainMtConfig(), pairs) == "sha:de-en"  # the tag of every earlier run on all pairs
    first = judged_on(pairs[:2], pairs[:2])
    assert judged_on(pairs[:2], pairs[:2]) == first
    assert len({first, judged_on(pairs[:3], pairs[:2]), judged_on(pairs[:2], pairs[:3])}) == 3
    settings = MtTrainSettings(batch_tokens=64, max_epochs=1, patience=5, warmup_steps=4, seed=0)
    examples = make_examples([([5, 6, 7], [8, 9]), ([6, 7], [9, 10, 11])] * 4, 32)
    tag, state_path = config_hash(CONFIG, settings, "toy"), tmp_path / "last.pt"

    def run(epochs: int, judged: str) -> bool:
        """Train to `epochs`; whether it resumed."""
        capsys.readouterr()
        train(MtTransformer(CONFIG), examples, examples[:2], dataclasses.replace(settings, max_epochs=epochs),
              state_path, tag, lambda m, s, x: None, judged_on=judged)
        return "resuming from" in capsys.readouterr().err

    assert not run(1, first)
    assert run(2, first)  # the same devel set: resumed
    assert not run(3, judged_on(pairs[:1], pairs[:1]))  # another devel set: from the start
    blob = torch.load(state_path, weights_only=False)
    del blob["judged_on"]  # a state saved before the devel set was recorded
    torch.save(blob, state_path)
    assert run(4, first)  # resumed on its tag


class _Payload:
    """An object whose unpickling would run code (`__reduce__` calls `exec`)."""

    def __reduce__(self):
        return (exec, ("import pathlib; pathlib.Path('ran').touch()",))


def test_training_leaves_torch_threads_as_it_found_them_and_its_state_reads_as_data(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    settings = MtTrainSettings(max_minutes=5, max_epochs=1, batch_tokens=200, learning_rate=3e-3, warmup_steps=20,
                               k_min=1, k_max=3, patience=10, threads=2)
    state_path, before = tmp_path / "last.pt", torch.get_num_threads()
    train(MtTransformer(CONFIG), copy_task(20), copy_task(5, seed=1), settings, state_path, "t", lambda *a: None)
    assert torch.get_num_threads() == before  # 2 during training, the caller's count after
    blob = read_state(state_path)
    assert blob["tag"] == "t" and blob["state"]["epoch"] == 1
    monkeypatch.chdir(tmp_path)
    torch.save({"tag": "t", "x": _Payload()}, tmp_path / "bad.pt")
    with pytest.raises(DataError, match=r"bad\.pt: not a training resume state .*delete it"):
        read_state(tmp_path / "bad.pt")
    assert not (tmp_path / "ran").exists()
    torch.save([1, 2], tmp_path / "list.pt")
    with pytest.raises(DataError, match="holds a dict, this file a list"):
        read_state(tmp_path / "list.pt")
