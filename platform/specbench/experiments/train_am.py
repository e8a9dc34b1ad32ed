"""The `train_am` job: train the causal CTC acoustic model on the synthesized corpus, keep the best devel
epoch, and write it in fp16 to `models/` with a model card. The `eval_am` job evaluates it and adds its
metrics to the card."""

from __future__ import annotations

import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from specbench.acoustic.checkpoint import save_checkpoint
from specbench.acoustic.dataset import load_examples
from specbench.acoustic.features import Cmvn
from specbench.acoustic.model import CausalCtcModel, lookahead_ms
from specbench.acoustic.training import new_model, train
from specbench.config import SpeechConfig, TrainAmConfig
from specbench.experiments.graph_recipe import GraphArtifacts, build_graph
from specbench.experiments.job_refs import ctc_graph_job, referenced_job
from specbench.experiments.registry import RunOptions
from specbench.experiments.speech import Corpus, build_corpus
from specbench.paths import from_root, work_dir
from specbench.reports import model_card
from specbench.text_files import plain_json, replace_text, table_json
from specbench.wfst.lexicon import PHONES, read_lexicon

if TYPE_CHECKING:
    from specbench.tracking.runs import TrackedRun


def output_path(config: TrainAmConfig) -> Path:
    return from_root(config.output)


def _progress(desc: str):  # type: ignore[no-untyped-def]
    return lambda items: tqdm(items, desc=desc, unit="utt", file=sys.stderr, mininterval=2.0)


def run_train_am(config: TrainAmConfig, job_path: Path, run: TrackedRun | None,
                 ray_address: str | None = None) -> dict[str, Any]:
    """Train; returns the model card's data (also written beside the checkpoint)."""
    speech_cfg = referenced_job(job_path, "speech_job", config.speech_job, SpeechConfig)
    graph_cfg = ctc_graph_job(job_path, "graph_job", config.graph_job)  # before any build
    graph: GraphArtifacts = build_graph(graph_cfg)
    corpus: Corpus = build_corpus(speech_cfg, None, ray_address)
    prons = read_lexicon(graph.directory / "lexicon.txt").prons
    train_rows = corpus.rows("train")
    devel_rows = corpus.rows("devel")[: config.devel_utterances]
    train_set = load_examples(train_rows, corpus.root, prons, PHONES, _progress("features (train)"),
                              config.training.speed_factors)
    devel_set = load_examples(devel_rows, corpus.root, prons, PHONES, _progress("features (devel)"))
    cmvn = Cmvn.estimate([e.feats.astype("float32") for e in train_set])
    model_config = replace(config.model, num_classes=len(PHONES) + 1)
    model = new_model(model_config, config.training.seed)
    last = work_dir() / "checkpoints" / f"{config.name}.last.pt"  # the latest epoch whole, to inspect (no resume)
    bar = tqdm(desc="training", unit="batch", file=sys.stderr, mininterval=5.0)

    def on_step(i: int, n: int, loss: float) -> None:
        if i == 0:
            bar.reset(total=n)
        bar.set_postfix(loss=f"{loss:.3f}", refresh=False)
        bar.update(1)

    def on_epoch(record: dict[str, float], m: CausalCtcModel) -> None:
        print(f"epoch {int(record['epoch'])}: train loss {record['train_loss']:.3f}, devel PER "
              f"{record['devel_per']:.3f}, {record['minutes']:.1f} min", file=sys.stderr, flush=True)
        save_checkpoint(last, m, cmvn, PHONES, {"epoch": record["epoch"]}, fp16=False)
        if run is not None:
            run.log_metrics({f"am.{k}": v for k, v in record.items() if k != "epoch"}, step=int(record["epoch"]))

    history = train(model, train_set, devel_set, cmvn, config.training, on_epoch, on_step)
    bar.close()
    card = {
        "name": config.name,
        "parameters": model.num_parameters,
        "model": model_config.to_dict(),
        "training": asdict(config.training),
        "lookahead_ms": lookahead_ms(),
        "frame_shift_ms": 40.0,
        "phones": list(PHONES),
        "train_utterances": len(train_set),
        "train_hours": sum(len(e.feats) for e in train_set) / 100 / 3600,
        "train_voices": sorted({e.voice for e in train_set}),
        "devel_utterances": len(devel_set),
        "devel_voices": sorted({e.voice for e in devel_set}),
        "corpus": f"{config.speech_job}: {len({r['normalized_text'] for r in train_rows}):,} unique SLURP "
                  f"training sentences, {len(train_rows):,} utterances (in {corpus.root.name})",
        "graph": str(graph.directory),
        "history": history.epochs,
        "best_epoch": history.best_epoch,
        "best_devel_per": history.best_per,
        "stopped_because": history.stopped_because,
        "licence": "SLURP text CC BY 4.0; CMUdict BSD-style; the weights: Apache-2.0",
    }
    out = output_path(config)
    save_checkpoint(out, model, cmvn, PHONES, {k: v for k, v in card.items() if k != "history"})
    replace_text(out.with_suffix(".json"), table_json(plain_json(card)) + "\n")
    model_card.update(out)
    if run is not None:
        run.log_metrics({"am.best_devel_per": history.best_per, "am.parameters": float(model.num_parameters),
                         "am.checkpoint_mb": out.stat().st_size / 2**20})
        run.log_artifact(out.with_suffix(".json"), "model")
    return card


def execute(config: Any, path: Path, run: TrackedRun | None, opts: RunOptions) -> list[str]:
    """The job's runner (see `experiments.registry`): run it, return the summary lines."""
    card = run_train_am(config, path, run, opts.ray_address)
    return [f"acoustic model {output_path(config)}: {card['parameters']:,} parameters, best devel PER "
            f"{card['best_devel_per']:.3f} at epoch {card['best_epoch']} ({card['stopped_because']})"]
