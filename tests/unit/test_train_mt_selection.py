"""Which epoch `train mt` keeps: by devel loss, or for a wait-k model by devel SBS BLEU at one operating point
(`[selection]`), on Multi30k with a tiny model: the kept checkpoint is the epoch with the highest recorded
SBS BLEU, the card says how it was chosen, and a saved run selected by loss is refused with the fix."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from specbench.errors import ConfigError
from specbench.experiments.registry import load_config
from specbench.experiments.train_mt import run_train_mt, summary
from specbench.simultrans.checkpoint import load_mt

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
BODY = """train_sentences = 1500
devel_sentences = 60
bleu_sentences = 0

[training]
max_epochs = {epochs}
batch_tokens = 8000
warmup_steps = 10
learning_rate = 3e-3
threads = 1

[selection]
metric = "{metric}"
k = 2
beam = 3
window = 1
"""


def job(write: Callable[..., Path], tmp_path: Path, metric: str, epochs: int, causal: bool = True) -> Path:
    return write("tiny_selection", tmp_path / "tiny.pt", BODY.format(metric=metric, epochs=epochs), causal)


def train(path: Path) -> dict:
    return run_train_mt(load_config(path), path, None, device="cpu")


def test_sbs_bleu_selection_keeps_the_epoch_with_the_highest_devel_sbs_bleu(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_mt_job: Callable[..., Path]) -> None:
    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "home"))
    path = job(tiny_mt_job, tmp_path, "sbs_bleu", 2)
    config = load_config(path)
    card = run_train_mt(config, path, None, device="cpu")
    history = card["history"]
    assert len(history) == 2 and card["train_pairs"] <= 1500  # train_sentences: the first 1,500 pairs
    assert all("selection_sbs_bleu" in h and "selection_greedy_bleu" in h for h in history)
    best = max(history, key=lambda h: h["selection_sbs_bleu"])
    assert card["best_epoch"] == best["epoch"]
    assert card["best_selection_sbs_bleu"] == best["selection_sbs_bleu"]
    assert card["best_devel_loss"] == best["devel_loss"]  # the kept epoch's loss, whichever epoch that is
    assert card["selection"] == {"metric": "sbs_bleu", "k": 2, "beam": 3, "window": 1}
    saved = load_mt(tmp_path / "tiny.pt", ROOT / "models" / "mt_bpe.model")
    assert saved.metadata["epoch"] == best["epoch"]
    assert saved.metadata["selection_sbs_bleu"] == best["selection_sbs_bleu"]
    line = summary(config, card)[0]
    assert "devel SBS BLEU" in line and f"at epoch {best['epoch']} of 2" in line
    markdown = (tmp_path / "tiny.md").read_text()
    assert "| selection.metric | sbs_bleu |" in markdown and "SBS BLEU at the selection point" in markdown
    state_file = tmp_path / "home" / "checkpoints" / "tiny_selection" / "last.pt"  # saved before the settings
    blob = torch.load(state_file, weights_only=False)  # each score was measured at were recorded: taken as now
    for entry in blob["state"]["history"]:
        entry.pop("selection_at")
    torch.save(blob, state_file)
    assert train(path)["best_epoch"] == best["epoch"]


def test_a_run_kept_by_loss_is_not_resumed_as_one_selected_by_sbs_bleu(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_mt_job: Callable[..., Path]) -> None:
    """The selection does not enter the resume tag, so the finished loss-selected run resumes under the new
    setting; none of its epochs has an SBS BLEU, and the error names the saved file and the fix. A resumed
    run whose kept weights are not at its output path says so too."""
    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "home"))
    first = job(tiny_mt_job, tmp_path, "devel_loss", 1)
    card = train(first)
    assert card["best_epoch"] == 1 and "best_selection_sbs_bleu" not in card
    assert "selection_sbs_bleu" not in card["history"][0]
    for epochs in (1, 2):  # 2: epoch 2 is scored, epoch 1 is not, and it was left out of the choice
        again = job(tiny_mt_job, tmp_path, "sbs_bleu", epochs)
        with pytest.raises(ConfigError, match=r"tiny_selection/last\.pt kept epoch\(s\) 1 by devel loss.*Fix: del"):
            train(again)
    (tmp_path / "tiny.pt").unlink()  # as if the first run had written its model to another output path
    first = job(tiny_mt_job, tmp_path, "devel_loss", 1)  # the same file name: write it again
    with pytest.raises(ConfigError, match=r"kept epoch 1, but its weights are not at output = .*tiny\.pt"):
        train(first)


def test_sbs_bleu_selection_needs_a_wait_k_model(tmp_path: Path,
                                                  tiny_mt_job: Callable[..., Path]) -> None:
    with pytest.raises(ConfigError, match="needs a wait-k model"):
        load_config(job(tiny_mt_job, tmp_path, "sbs_bleu", 1, causal=False))
    with pytest.raises(ConfigError, match="selection.metric"):
        load_config(job(tiny_mt_job, tmp_path, "bleu", 1))


def test_output_and_its_card_always_match(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          tiny_mt_job: Callable[..., Path]) -> None:
    """Fixed scores stand in for devel BLEU: epoch 1 has the best SBS BLEU, epoch 2 the best loss."""
    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "home"))
    scores = iter([30.0, 10.0])
    monkeypatch.setattr("specbench.experiments.train_mt.devel_bleu", lambda *a: next(scores) if "sbs" in a else 1.0)
    path = job(tiny_mt_job, tmp_path, "sbs_bleu", 2)
    assert train(path)["history"][1]["selection_at"] == "k 2, b 3, w 1"
    pair = lambda: [(tmp_path / name).read_bytes() for name in ("tiny.pt", "tiny.json")]
    old = pair()
    path = job(tiny_mt_job, tmp_path, "devel_loss", 2)
    with pytest.raises(ConfigError, match=r"keeps epoch 2, but .*tiny\.pt holds epoch 1\. Fix: rerun with"):
        train(path)
    path.write_text(path.read_text().replace("devel_loss", "sbs_bleu").replace("beam = 3", "beam = 4"))
    with pytest.raises(ConfigError, match=r"scored at k 2, b 3, w 1, not at k 2, b 4, w 1"):
        train(path)
    path = job(tiny_mt_job, tmp_path, "devel_loss", 1)
    path.write_text(path.read_text().replace("3e-3", "1e-3"))  # another run
    with monkeypatch.context() as patched, pytest.raises(SystemExit):
        patched.setattr("specbench.simultrans.training._save", lambda *a: sys.exit())  # stopped once epoch 1 is kept
        train(path)
    assert pair() == old  # untouched by the refused and the stopped runs
    card = train(path)
    assert card["training"]["learning_rate"] == 1e-3
    assert load_mt(tmp_path / "tiny.pt", ROOT / "models" / "mt_bpe.model").metadata["epoch"] == card["best_epoch"]
