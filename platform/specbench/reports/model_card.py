"""Model cards: the JSON card written beside a checkpoint, rendered as Markdown (`<checkpoint>.md`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _table(rows: list[tuple[str, Any]]) -> list[str]:
    out = ["| field | value |", "| --- | --- |"]
    for key, value in rows:
        shown = f"{value:.4g}" if isinstance(value, float) else (", ".join(map(str, value))
                                                                  if isinstance(value, list) else value)
        out.append(f"| {key} | {shown} |")
    return out


def render(card: dict[str, Any]) -> str:
    """Markdown for an acoustic-model card (data, voices, config, metrics, licence)."""
    lines = [f"# Acoustic model `{card['name']}`", "",
             "A causal CTC acoustic model over blank + the 39 CMUdict phones (column 0 is the blank, column k "
             "the k-th phone), trained by `specbench train am jobs/am.toml` on speech synthesized from SLURP "
             "text. Synthetic speech, honestly labelled: it says how the platform behaves, not how a product "
             "ASR would do on people.", "", "## Data", ""]
    lines += _table([("training utterances", card["train_utterances"]), ("training hours", card["train_hours"]),
                     ("training voices", card["train_voices"]), ("devel utterances", card["devel_utterances"]),
                     ("devel/test voices (held out of training)", card["devel_voices"]),
                     ("corpus", card["corpus"])])
    lines += ["", "## Model and training", ""]
    lines += _table([("parameters", card["parameters"]), ("lookahead (ms)", card["lookahead_ms"]),
                     ("output frame shift (ms)", card["frame_shift_ms"]),
                     *((f"model.{k}", v) for k, v in card["model"].items()),
                     *((f"training.{k}", v) for k, v in card["training"].items()),
                     ("best epoch", card["best_epoch"]), ("best devel PER (greedy)", card["best_devel_per"]),
                     ("stopped because", card["stopped_because"])])
    if "evaluation" in card:
        lines += ["", "## Evaluation (`specbench run jobs/am_eval.toml`)", ""]
        lines += _table(sorted(card["evaluation"].items()))
    lines += ["", "## Licence", "", card["licence"], ""]
    return "\n".join(lines)


def update(checkpoint: Path, evaluation: dict[str, float] | None = None) -> Path | None:
    """Add `evaluation` to the checkpoint's JSON card (if it has one) and re-render its Markdown."""
    card_path = checkpoint.with_suffix(".json")
    if not card_path.is_file():
        return None
    card = json.loads(card_path.read_text())
    if evaluation is not None:
        card["evaluation"] = {k: float(v) for k, v in evaluation.items()}
        card_path.write_text(json.dumps(card, indent=2) + "\n")
    md = checkpoint.with_suffix(".md")
    md.write_text(render(card))
    return md
