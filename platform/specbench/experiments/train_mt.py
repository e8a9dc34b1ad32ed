"""The `train_mt` job: train a translation model on Multi30k (De->En by default) with the project's joint
BPE (trained first when missing), keep the best epoch (by devel loss, or for a wait-k model by devel SBS BLEU:
`[selection]`), and write it in fp16 to `models/` with a model card. Per epoch: train and devel loss, greedy
devel BLEU (sacrebleu), logged to MLflow. Trains on a CUDA device when one is usable (`device = "auto"`);
devel BLEU is then decoded by a CPU copy of the model."""

from __future__ import annotations

import copy
import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sacrebleu
import torch

from specbench.checkpoint_io import load_blob, write_checkpoint
from specbench.config import TrainMtConfig
from specbench.data.multi30k import read_pairs
from specbench.errors import ConfigError
from specbench.experiments.registry import RunOptions
from specbench.paths import from_root, work_dir
from specbench.reports.model_card import translation_markdown, write_card
from specbench.simultrans.model import MtTransformer, parameter_count
from specbench.simultrans.search import full_sentence, wait_k
from specbench.simultrans.tokenizer import EOS, Tokenizer, train_bpe
from specbench.simultrans.training import (
    TrainState,
    config_hash,
    make_examples,
    save_model,
    stopped_because,
    train,
)

if TYPE_CHECKING:  # the GPU machine trains without mlflow (`specbench train mt --no-mlflow`)
    from specbench.tracking.runs import TrackedRun

LICENCE = ("Multi30k (task 1, Elliott et al. 2016) is distributed for research and education; this model is "
           "trained on its training split only and inherits those terms.")
BLEU_WAIT_K = 5  # the wait-k model's devel BLEU is also measured at this k


def devel_bleu(model: MtTransformer, tokenizer: Tokenizer, pairs: list[tuple[str, str]], k: int | None,
               method: str = "greedy", beam: int = 5, window: int = 2) -> float:
    """sacreBLEU (13a, cased, detokenized) on `pairs` of greedy full-sentence decoding (k None) or of wait-k
    decoding by `method` (greedy, tail or sbs with `beam` and `window`), decoded on the CPU (the search builds
    its index tensors there)."""
    if model.embed.weight.device.type != "cpu":
        return devel_bleu(copy.deepcopy(model).cpu(), tokenizer, pairs, k, method, beam, window)
    model.eval()
    sources = [tokenizer.encode(s) + [EOS] for s, _ in pairs]
    hyps = []
    for i in range(0, len(sources), 100):
        chunk = sources[i:i + 100]
        out = full_sentence(model, chunk) if k is None else wait_k(model, chunk, k, method, beam, window)
        hyps += [tokenizer.decode(t.tokens) for t in out]
    model.train()
    return sacrebleu.corpus_bleu(hyps, [[t for _, t in pairs]]).score


def training_device(device: str) -> torch.device:
    """"auto": the first CUDA device when torch can use one, else the CPU; "cpu"; "cuda" (an error without
    a usable GPU)."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device not in ("cpu", "cuda"):
        raise ConfigError(f"device must be auto, cpu or cuda, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device cuda was asked for, but torch sees no usable CUDA device here. Fix: train with "
                          "--device cpu (or auto)")
    return torch.device(device)


def data_tag(bpe_sha256: str, config: TrainMtConfig, train_pairs: list) -> str:
    """What a resumed state must have trained on: the BPE, the direction, the training subset (a run on all
    pairs adds nothing, so its tag is what it always was)."""
    tag = f"{bpe_sha256}:{config.source}-{config.target}"
    return tag + (f":first{len(train_pairs)}" if config.train_sentences else "")


def judged_on(devel_pairs: list, bleu_pairs: list) -> str:
    """The val sentences that early stopping, the kept epoch and the selection BLEU read (sha256, 16 hex
    digits): a resume on another set would compare its losses with the old set's best, so it starts afresh."""
    return hashlib.sha256(json.dumps([devel_pairs, bleu_pairs]).encode()).hexdigest()[:16]


def run_train_mt(config: TrainMtConfig, job_path: Path, run: TrackedRun | None,
                 device: str = "auto") -> dict[str, Any]:
    """Train on `device` (see `training_device`); returns the model card's data (also written beside the
    checkpoint)."""
    where = training_device(device)
    out, bpe_path = from_root(config.output), from_root(config.bpe_model)
    all_train_pairs = read_pairs("train", config.source, config.target)
    train_pairs = all_train_pairs[:config.train_sentences] if config.train_sentences else all_train_pairs
    val_pairs = read_pairs("val", config.source, config.target)
    if not bpe_path.is_file():
        train_bpe([s for pair in all_train_pairs for s in pair], bpe_path, config.model.vocab_size)
    tokenizer = Tokenizer(bpe_path)
    if tokenizer.vocab_size != config.model.vocab_size:
        raise ConfigError(f"{job_path}: model.vocab_size = {config.model.vocab_size}, but the BPE model "
                          f"{bpe_path} has {tokenizer.vocab_size} pieces. Fix: set vocab_size to "
                          f"{tokenizer.vocab_size}, or delete {bpe_path} to train a new BPE (then retrain every "
                          "model that uses it)")
    encode = tokenizer.encode_many
    max_len = config.model.max_positions
    train_set = make_examples(list(zip(encode([s for s, _ in train_pairs]), encode([t for _, t in train_pairs]),
                                       strict=True)), max_len)
    devel_pairs = val_pairs[:config.devel_sentences]
    devel_set = make_examples(list(zip(encode([s for s, _ in devel_pairs]), encode([t for _, t in devel_pairs]),
                                       strict=True)), max_len)
    bleu_pairs = val_pairs[:config.bleu_sentences]
    torch.manual_seed(config.training.seed)
    model = MtTransformer(config.model).to(where)
    tag = config_hash(config.model, config.training, data_tag(tokenizer.sha256, config, train_pairs))
    state_path = work_dir() / "checkpoints" / config.name / "last.pt"
    if config.training.threads == 0:
        torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))
    card: dict[str, Any] = {
        "name": config.name, "kind": "wait-k (causal encoder)" if config.model.causal_encoder else "full-sentence",
        "direction": f"{config.source}->{config.target}", "parameters": parameter_count(model),
        "train_pairs": len(train_set), "devel_pairs": len(devel_set), "bpe_model": str(config.bpe_model),
        "bpe_sha256": tokenizer.sha256, "model": config.model.to_dict(), "training": config.training.to_dict(),
        "device": where.type if where.type == "cpu" else f"cuda ({torch.cuda.get_device_name(where)})",
        "selection": config.selection.to_dict(), "licence": LICENCE,
    }
    if run is not None:
        run.log_params({"mt.parameters": card["parameters"], "mt.train_pairs": len(train_set)})

    selection = config.selection
    by_bleu = selection.metric == "sbs_bleu"
    at = f"k {selection.k}, b {selection.beam}, w {selection.window}"
    best_path = state_path.with_name("best.pt")  # the kept weights, put at `output` with the card

    def kept_entry(state: TrainState) -> dict[str, Any] | None:
        """The history entry of the epoch kept so far: training's devel-loss choice, or the first epoch with
        the highest devel SBS BLEU (None when none qualifies; scores at other settings are refused)."""
        if not by_bleu:
            return next((h for h in state.history if h["epoch"] == state.best_epoch), None)
        scored = [h for h in state.history if "selection_sbs_bleu" in h]
        if unscored := [str(h["epoch"]) for h in state.history if "selection_sbs_bleu" not in h]:
            raise ConfigError(f"{config.name}: the saved run {state_path} kept epoch(s) {', '.join(unscored)} by "
                              "devel loss, which have no devel SBS BLEU to select by (only the later ones "
                              "would be candidates). Fix: delete that file to train again with "
                              "selection.metric = 'sbs_bleu', or select by 'devel_loss'")
        if other := {h.get("selection_at", at) for h in scored} - {at}:  # none recorded (older runs): taken as at
            raise ConfigError(f"{config.name}: {state_path} holds SBS BLEU scored at {' / '.join(other)}, "
                              f"not at {at}. Fix: rerun with that [selection], or delete it to retrain")
        return max(scored, key=lambda h: h["selection_sbs_bleu"], default=None)

    def on_epoch(model: MtTransformer, state: TrainState, metrics: dict[str, float]) -> None:
        if bleu_pairs:
            metrics["devel_bleu"] = devel_bleu(model, tokenizer, bleu_pairs, None)
            if config.model.causal_encoder:
                metrics[f"devel_bleu_wait{BLEU_WAIT_K}"] = devel_bleu(model, tokenizer, bleu_pairs, BLEU_WAIT_K)
        if by_bleu:  # on every devel sentence, at the operating point that selects
            metrics["selection_greedy_bleu"] = devel_bleu(model, tokenizer, devel_pairs, selection.k)
            metrics["selection_sbs_bleu"] = devel_bleu(model, tokenizer, devel_pairs, selection.k, "sbs",
                                                       selection.beam, selection.window)
        state.history[-1].update(metrics, **{"selection_at": at} if by_bleu else {})
        if run is not None:
            run.log_metrics({f"mt.{k}": v for k, v in metrics.items()}, step=state.epoch)
        if kept_entry(state) is state.history[-1]:
            save_model(best_path, model, tokenizer.sha256, {"epoch": state.epoch, **metrics})
        print(f"epoch {state.epoch}: " + ", ".join(f"{k} {v:.4g}" for k, v in metrics.items()), flush=True)

    state = train(model, train_set, devel_set, config.training, state_path, tag, on_epoch,
                  judged_on=judged_on(devel_pairs, bleu_pairs))
    best = kept_entry(state)
    if best is None:
        raise ConfigError(f"{config.name}: training ended without a finished epoch; raise "
                          "training.max_minutes")
    weights = best_path if best_path.is_file() else out
    if not weights.is_file():
        raise ConfigError(f"{config.name}: the saved run {state_path} kept epoch {best['epoch']}, "
                          f"but its weights are not at output = {out} (written to another output path "
                          "before the run was resumed?). Fix: copy that checkpoint to it, or delete the "
                          "saved run to train again")
    blob = load_blob(weights)
    if blob["metadata"]["epoch"] != best["epoch"]:
        raise ConfigError(f"{config.name}: [selection] keeps epoch {best['epoch']}, but {weights} holds "
                          f"epoch {blob['metadata']['epoch']}. Fix: rerun with the [selection] that kept "
                          f"it, or delete {state_path} to retrain")
    card.update(best_epoch=best["epoch"], best_devel_loss=best["devel_loss"],
                best_devel_bleu=best.get("devel_bleu"))
    card.update({f"best_{k}": best[k] for k in ("selection_sbs_bleu", "selection_greedy_bleu") if by_bleu},
                epochs=state.epoch, minutes=state.elapsed_s / 60,
                stopped_because=stopped_because(state, config.training), history=state.history)
    write_card(out, card, translation_markdown(card))
    if weights != out:  # only now: an interrupted run leaves the old pair
        write_checkpoint(blob, out)
        weights.unlink()
    if run is not None:
        best = {"mt.best_devel_loss": card["best_devel_loss"], "mt.best_devel_bleu": card["best_devel_bleu"],
                "mt.best_selection_sbs_bleu": card.get("best_selection_sbs_bleu")}
        run.log_metrics({k: v for k, v in best.items() if v is not None})
        run.log_artifact(out.with_suffix(".md"))
    return card


def summary(config: TrainMtConfig, card: dict[str, Any]) -> list[str]:
    if "best_selection_sbs_bleu" in card:
        s = card["selection"]
        kept = (f"devel SBS BLEU {card['best_selection_sbs_bleu']:.2f} at k {s['k']}, b {s['beam']}, "
                f"w {s['window']} (greedy {card['best_selection_greedy_bleu']:.2f}; devel loss "
                f"{card['best_devel_loss']:.3f})")
    else:
        kept = (f"best devel loss {card['best_devel_loss']:.3f} (BLEU "
                f"{card['best_devel_bleu'] or float('nan'):.2f})")
    return [f"translation model {config.output}: {card['parameters']:,} parameters, {kept} at epoch "
            f"{card['best_epoch']} of {card['epochs']} ({card['stopped_because']}), trained on {card['device']}"]


def execute(config: Any, path: Path, run: TrackedRun | None, opts: RunOptions) -> list[str]:
    """The job's runner (see `experiments.registry`): run it, return the summary lines."""
    return summary(config, run_train_mt(config, path, run, opts.device))
