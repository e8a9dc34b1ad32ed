"""The `train_lm` job: train the word LSTM of prediction on SLURP's training text (deduplicated, normalized),
early-stopped on the devel texts; write it in fp16 to `models/` with a card; measure perplexity on devel and
test **with the weights as stored** (fp16) and log everything to MLflow."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from specbench.config import TrainLmConfig, config_to_dict
from specbench.data.slurp import read_split, read_training_text
from specbench.data.text_norm import normalize
from specbench.experiments.registry import RunOptions
from specbench.paths import from_root
from specbench.prediction.lm import load_lm, save_lm
from specbench.prediction.lm_training import perplexity_details, train_lm
from specbench.reports.model_card import prediction_markdown, write_card

if TYPE_CHECKING:
    from specbench.tracking.runs import TrackedRun

LICENCE = ("Trained on the SLURP training text (Bastianelli et al. 2020), CC BY 4.0; this model is a derived "
           "work under the same licence.")
DATA_NOTE = ("SLURP training text (slurp/lm.txt.gz, deduplicated, normalized like the decoder's words); early "
             "stopping on the SLURP devel texts; perplexity on the devel and test texts, one per SLURP text id. The vocabulary "
             "is the {vocab:,} words seen at least {min_count} times in the training text; every other word is "
             "<unk>, which counts as a token in the perplexity (the usual closed-vocabulary convention; the "
             "OOV rates are given), so it is not directly comparable with the paper's 283k-word LM.")
PAPER_PERPLEXITY = 31.0  # the paper's SLURP LM on test: a 149M-parameter LM fine-tuned on SLURP


def _sentences(raw: list[str]) -> list[list[str]]:
    return [words for s in raw if (words := normalize(s).split())]


def lm_texts() -> dict[str, list[list[str]]]:
    """Normalized word lists: `train` (lm.txt's distinct lines: 11,502, of which two pairs normalize alike),
    `devel` and `test` (one per SLURP text id: 2,033 and 2,974; 2,032 and 2,972 distinct once normalized)."""
    return {"train": _sentences(read_training_text(deduplicate=True)),
            "devel": _sentences([u.sentence for u in read_split("devel")]),
            "test": _sentences([u.sentence for u in read_split("test")])}


def run_train_lm(config: TrainLmConfig, run: TrackedRun | None) -> dict[str, Any]:
    """Train, save, evaluate; returns the card's data (also written beside the checkpoint)."""
    torch.set_num_threads(config.training.threads)
    texts = lm_texts()
    trained = train_lm(texts["train"], texts["devel"], config.model, config.training, progress=True)
    out = from_root(config.output)
    params = sum(p.numel() for p in trained.model.parameters() if p.requires_grad)
    save_lm(out, trained.model, trained.vocab, config.model, {}, config_to_dict(config))
    stored = load_lm(out)  # measure what ships: the fp16 weights
    metrics: dict[str, float] = {}
    for split in ("devel", "test"):
        res = perplexity_details(stored.model, stored.vocab, texts[split])
        metrics[f"lm.{split}_perplexity"] = res.perplexity
        metrics[f"lm.{split}_oov_rate"] = res.oov_tokens / max(1, res.tokens)
    card = {"name": config.name, "kind": "word LSTM LM for prediction", "parameters": params,
            "vocabulary": len(stored.vocab), "model": asdict(config.model), "training": asdict(config.training),
            "train_sentences": len(texts["train"]), "devel_sentences": len(texts["devel"]),
            "test_sentences": len(texts["test"]), "best_epoch": trained.best_epoch,
            "stopped_because": trained.stopped_because, "history": list(trained.history),
            "paper_test_perplexity": PAPER_PERPLEXITY,
            "evaluation": metrics, "licence": LICENCE,
            "data": DATA_NOTE.format(min_count=config.training.min_count, vocab=len(stored.vocab) - 4)}
    save_lm(out, trained.model, trained.vocab, config.model, metrics, config_to_dict(config))
    card["checkpoint_bytes"] = out.stat().st_size  # the file that ships, with its metrics
    write_card(out, card, prediction_markdown(card, "Word LSTM language model",
                                              "`specbench train lm jobs/lm.toml`"))
    if run is not None:
        for i, epoch in enumerate(trained.history):
            run.log_metrics({f"lm.epoch_{k}": float(v) for k, v in epoch.items() if isinstance(v, (int, float))},
                            step=i)
        run.log_metrics({**metrics, "lm.parameters": float(params), "lm.vocabulary": float(len(stored.vocab)),
                         "lm.best_epoch": float(trained.best_epoch)})
        run.log_artifact(out.with_suffix(".json"), "model")
        run.log_artifact(out.with_suffix(".md"), "model")
    return card


def summary(card: dict[str, Any], out: Path) -> list[str]:
    ev = card["evaluation"]
    return [f"word LM {out}: {card['parameters']:,} parameters, vocabulary {card['vocabulary']:,}, perplexity "
            f"devel {ev['lm.devel_perplexity']:.1f}, test {ev['lm.test_perplexity']:.1f} (the paper's SLURP LM: "
            f"{PAPER_PERPLEXITY:.0f}); best epoch {card['best_epoch']} ({card['stopped_because']})",
            json.dumps({k: round(v, 4) for k, v in ev.items()})]


def execute(config: Any, path: Path, run: TrackedRun | None, opts: RunOptions) -> list[str]:
    """The job's runner (see `experiments.registry`): run it, return the summary lines."""
    out = from_root(config.output)
    return summary(run_train_lm(config, run), out)
