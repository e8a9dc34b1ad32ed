"""Model cards of the prediction models: `<checkpoint>.json` (the data) and `<checkpoint>.md` (for people)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value))
    return str(value)


def render(card: dict[str, Any], title: str, command: str) -> str:
    """Markdown: scalar fields as a table, nested dicts as their own tables, the history as a table."""
    lines = [f"# {title} `{card['name']}`", "", f"Trained by {command}.", ""]
    if "data" in card:
        lines += ["## Data", "", card["data"], ""]
    scalars = [(k, v) for k, v in card.items() if not isinstance(v, dict) and k not in ("history", "data",
                                                                                         "licence", "name")]
    lines += ["## Model", "", "| field | value |", "| --- | --- |"]
    lines += [f"| {k} | {_value(v)} |" for k, v in scalars]
    for key, value in card.items():
        if isinstance(value, dict) and value:
            title = "Settings" if key == "model" else key.replace("_", " ").capitalize()
            lines += ["", f"## {title}", "", "| field | value |", "| --- | --- |"]
            lines += [f"| {k} | {_value(v)} |" for k, v in value.items()]
    history = card.get("history") or []
    if history and isinstance(history[0], dict):
        cols = list(history[0])
        lines += ["", "## Training history", "", "| " + " | ".join(cols) + " |", "|" + " --- |" * len(cols)]
        lines += ["| " + " | ".join(_value(h.get(c)) for c in cols) + " |" for h in history]
    lines += ["", "## Licence", "", card.get("licence", ""), ""]
    return "\n".join(lines)


def write_card(checkpoint: Path, card: dict[str, Any], title: str, command: str) -> None:
    """Write the JSON card and its Markdown beside `checkpoint`."""
    checkpoint.with_suffix(".json").write_text(json.dumps(card, indent=2, default=str) + "\n")
    checkpoint.with_suffix(".md").write_text(render(card, title, command))
