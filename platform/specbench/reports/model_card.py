"""Model cards: the JSON card written beside a checkpoint (`<checkpoint>.json`, the data) and its Markdown
(`<checkpoint>.md`, for people).

One renderer, `render(title, intro, sections)`, writes the Markdown of every model kind from three kinds of
section: `Fields` (a field/value table), `Text` (free text) and `Table` (a table with columns). Each model
kind has a small function that builds its card's Markdown from its card dict: `acoustic_markdown` (the
acoustic model; `update` re-renders it after an evaluation), `prediction_markdown` (the word LM and the
confidence models) and `translation_markdown` (the translation models). `write_card` writes both files.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specbench.reports.numbers import figure, markdown_cell, markdown_text
from specbench.text_files import json_number, plain_json, replace_text, table_json


@dataclass(frozen=True)
class Fields:
    """A two-column table, `| field | value |`, of `(field, value)` rows."""

    rows: Sequence[tuple[str, Any]]
    title: str | None = None


@dataclass(frozen=True)
class Text:
    """A paragraph of free text."""

    text: str
    title: str | None = None


@dataclass(frozen=True)
class Table:
    """A table with the given column names, one row of values per item."""

    columns: Sequence[str]
    rows: Sequence[Sequence[Any]]
    title: str | None = None


Section = Fields | Text | Table


def format_value(value: Any) -> str:
    """A table cell: floats to 4 significant digits, lists and tuples comma-separated, the rest `str`."""
    if isinstance(value, float):  # but never a share short of all (0.99996) printed as all, "1", or as none
        short = f"{value:.4g}"
        return figure(value) if short in ("0", "1", "-0", "-1") and float(short) != value else short
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value))
    return str(value)


def _table_lines(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    return lines + ["| " + " | ".join(markdown_cell(format_value(v)) for v in row) + " |" for row in rows]


def _section_lines(section: Section) -> list[str]:
    """A section's Markdown lines: a blank line, its `## title` and a blank line (when titled), its body."""
    lines = ["", f"## {section.title}", ""] if section.title else [""]
    if isinstance(section, Text):
        return lines + [markdown_text(section.text)]
    if isinstance(section, Fields):
        return lines + _table_lines(("field", "value"), section.rows)
    return lines + _table_lines(section.columns, section.rows)


def render(title: str, intro: str, sections: Sequence[Section]) -> str:
    """Markdown: `# title`, the introduction, then each section in order; ends with a newline."""
    lines = [f"# {title}", "", intro]
    for section in sections:
        lines += _section_lines(section)
    return "\n".join([*lines, ""])


def write_card(checkpoint: Path, card: dict[str, Any], markdown: str) -> None:
    """Write the JSON card (`<checkpoint>.json`) and its Markdown (`<checkpoint>.md`) beside `checkpoint`, each
    whole or not at all."""
    replace_text(checkpoint.with_suffix(".json"), table_json(plain_json(card), default=str) + "\n")
    replace_text(checkpoint.with_suffix(".md"), markdown)


# ------------------------------------------------------------------------------------------- acoustic model

ACOUSTIC_INTRO = ("A causal CTC acoustic model over blank + the 39 CMUdict phones (column 0 is the blank, column "
                  "k the k-th phone), trained by `specbench train am jobs/am.toml` on speech synthesized from "
                  "SLURP text. Synthetic speech, honestly labelled: it says how the platform behaves, not how a "
                  "product ASR would do on people.")


def acoustic_markdown(card: dict[str, Any]) -> str:
    """Markdown for an acoustic-model card (data, voices, config, metrics, evaluation when present, licence)."""
    sections: list[Section] = [
        Fields([("training utterances", card["train_utterances"]), ("training hours", card["train_hours"]),
                ("training voices", card["train_voices"]), ("devel utterances", card["devel_utterances"]),
                ("devel/test voices (held out of training)", card["devel_voices"]),
                ("corpus", card["corpus"])], "Data"),
        Fields([("parameters", card["parameters"]), ("lookahead (ms)", card["lookahead_ms"]),
                ("output frame shift (ms)", card["frame_shift_ms"]),
                *((f"model.{k}", v) for k, v in card["model"].items()),
                *((f"training.{k}", v) for k, v in card["training"].items()),
                ("best epoch", card["best_epoch"]), ("best devel PER (greedy)", card["best_devel_per"]),
                ("stopped because", card["stopped_because"])], "Model and training")]
    if "evaluation" in card:
        sections.append(Fields(sorted(card["evaluation"].items()),
                               "Evaluation (`specbench run jobs/am_eval.toml`)"))
    sections.append(Text(card["licence"], "Licence"))
    return render(f"Acoustic model `{card['name']}`", ACOUSTIC_INTRO, sections)


def update(checkpoint: Path, evaluation: dict[str, float] | None = None) -> Path | None:
    """Add `evaluation` to the checkpoint's JSON card (if it has one) and re-render its Markdown."""
    card_path = checkpoint.with_suffix(".json")
    if not card_path.is_file():
        return None
    card = json.loads(card_path.read_text(encoding="utf-8"))
    card["best_devel_per"] = json_number(card["best_devel_per"])  # a NaN was written as null
    if "evaluation" in card:
        card["evaluation"] = {k: json_number(v) for k, v in card["evaluation"].items()}
    if evaluation is None:
        replace_text(checkpoint.with_suffix(".md"), acoustic_markdown(card))
    else:
        card["evaluation"] = {k: float(v) for k, v in evaluation.items()}
        write_card(checkpoint, card, acoustic_markdown(card))
    return checkpoint.with_suffix(".md")


# -------------------------------------------------------------------------------------- prediction models

_PREDICTION_TEXT = ("history", "data", "licence", "name")  # card keys that are not rows of the Model table


def prediction_markdown(card: dict[str, Any], title: str, command: str) -> str:
    """Markdown for a word-LM or confidence-model card: the data note, the scalar fields as the Model table,
    each non-empty nested dict as its own table (`model` as Settings), the history as a table, the licence."""
    sections: list[Section] = [Text(card["data"], "Data")] if "data" in card else []
    sections.append(Fields([(k, v) for k, v in card.items()
                            if not isinstance(v, dict) and k not in _PREDICTION_TEXT], "Model"))
    for key, value in card.items():
        if isinstance(value, dict) and value:
            sections.append(Fields(list(value.items()),
                                   "Settings" if key == "model" else key.replace("_", " ").capitalize()))
    history = card.get("history") or []
    if history and isinstance(history[0], dict):
        columns = list(history[0])
        sections.append(Table(columns, [[h.get(c) for c in columns] for h in history], "Training history"))
    sections.append(Text(card.get("licence", ""), "Licence"))
    return render(f"{title} `{card['name']}`", f"Trained by {command}.", sections)


# ------------------------------------------------------------------------------------- translation models

_TRANSLATION_FIELDS = ("parameters", "device", "trained_by", "best_epoch", "best_devel_loss", "best_devel_bleu",
                       "best_selection_sbs_bleu", "best_selection_greedy_bleu", "epochs", "minutes",
                       "stopped_because", "bpe_sha256")
_OPTIONAL = ("trained_by", "best_selection_sbs_bleu", "best_selection_greedy_bleu")  # left out when None


def _epoch_rows(history: list[dict[str, Any]], sbs: bool) -> list[list[str]]:
    """The Per epoch table's rows: losses to 3 decimals, BLEU to 2 (nan where an epoch has none)."""
    nan = float("nan")
    rows = []
    for h in history:
        row = [str(h["epoch"]), f"{h['train_loss']:.3f}", f"{h['devel_loss']:.3f}",
               f"{h.get('devel_bleu', nan):.2f}"]
        if sbs:
            row.append(f"{h.get('selection_greedy_bleu', nan):.2f} / {h.get('selection_sbs_bleu', nan):.2f}")
        rows.append(row)
    return rows


def translation_markdown(card: dict[str, Any]) -> str:
    """Markdown for a translation-model card: the results and settings as one table (settings as written,
    unrounded), the per-epoch history, the licence."""
    intro = (f"A {card['kind']} Transformer for Multi30k {card['direction']}, trained by `specbench train mt` "
             f"on the {card['train_pairs']:,} training pairs with the project's joint BPE "
             f"(`{card['bpe_model']}`).")
    rows: list[tuple[str, Any]] = [(k, card.get(k)) for k in _TRANSLATION_FIELDS
                                   if card.get(k) is not None or k not in _OPTIONAL]
    for group in ("model", "training", "selection"):
        rows += [(f"{group}.{k}", str(v)) for k, v in card.get(group, {}).items()]
    sbs = any("selection_sbs_bleu" in h for h in card["history"])
    columns = ["epoch", "train loss", "devel loss", "devel BLEU"]
    columns += ["devel greedy / SBS BLEU at the selection point"] if sbs else []
    return render(f"Translation model `{card['name']}`", intro,
                  [Fields(rows), Table(columns, _epoch_rows(card["history"], sbs), "Per epoch"),
                   Text(card["licence"], "Licence")])
