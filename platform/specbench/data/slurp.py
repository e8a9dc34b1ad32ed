"""Readers for the SLURP text in the shared data directory.

`lm.txt.gz` is SLURP's training text, one line per recording (29,104 lines, 11,502 unique sentences).
The repetition counts recordings, not how often people say a sentence, so the project **deduplicates** it
(first occurrence order) everywhere it trains a language model: the n-gram LM of the decoding graph and the
word LSTM alike.

`devel.jsonl.gz` and `test.jsonl.gz` hold one JSON object per line with at least `slurp_id` (int),
`sentence`, `intent`, `scenario`, `action` (non-empty strings) and `recordings` (a list); `slurp_id` is
unique within a file. A line that breaks any of this is a `DataError` naming the file, the line and the fix.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from specbench.data.resolver import data_file, malformed, text_lines

Split = Literal["devel", "test"]
_TEXT_FIELDS = ("sentence", "intent", "scenario", "action")
REQUIRED_FIELDS = ("slurp_id", *_TEXT_FIELDS, "recordings")


@dataclass(frozen=True)
class SlurpUtterance:
    """One SLURP text with its annotations (one of possibly several recordings)."""

    slurp_id: int
    sentence: str
    intent: str
    scenario: str
    action: str
    num_recordings: int


def read_training_text(deduplicate: bool = True) -> list[str]:
    """SLURP training sentences (raw, not normalized); unique in first-seen order when `deduplicate`."""
    return read_training_text_file(data_file("slurp/lm.txt.gz"), deduplicate)


def read_training_text_file(path: Path, deduplicate: bool = True) -> list[str]:
    """`read_training_text` of a given file: one sentence per line, blank lines skipped; an empty file (or
    one of blank lines only) is a `DataError`."""
    lines = [text.strip() for _, text in text_lines(path)]
    lines = [line for line in lines if line]
    if not lines:
        raise malformed(path, "holds no sentence (the file is empty)", 1)
    return list(dict.fromkeys(lines)) if deduplicate else lines


def read_split(split: Split) -> list[SlurpUtterance]:
    """The devel or test texts of SLURP, one entry per unique text (`slurp_id`)."""
    if split not in ("devel", "test"):
        raise ValueError(f"split must be 'devel' or 'test', got {split!r}")
    return read_split_file(data_file(f"slurp/{split}.jsonl.gz"))


def read_split_file(path: Path) -> list[SlurpUtterance]:
    """The records of one SLURP JSON-lines file (see the module docstring for what each line must hold)."""
    out: list[SlurpUtterance] = []
    first_line: dict[int, int] = {}
    for lineno, text in text_lines(path):
        utt = _record(_json_object(text, path, lineno), path, lineno)
        if utt.slurp_id in first_line:
            raise malformed(
                path,
                f"slurp_id {utt.slurp_id} repeats line {first_line[utt.slurp_id]} (each text has one line)",
                lineno,
            )
        first_line[utt.slurp_id] = lineno
        out.append(utt)
    if not out:
        raise malformed(path, "holds no SLURP record (the file is empty)", 1)
    return out


def _json_object(text: str, path: Path, lineno: int) -> dict[str, Any]:
    if not text.strip():
        raise malformed(path, "is blank; expected one JSON object (a SLURP record) per line", lineno)
    try:
        rec = json.loads(text)
    except json.JSONDecodeError as err:
        raise malformed(path, f"not valid JSON ({err.msg} at column {err.colno})", lineno) from None
    if not isinstance(rec, dict):
        raise malformed(
            path, f"expected a JSON object (a SLURP record), got a JSON {type(rec).__name__}", lineno
        )
    return rec


def _record(rec: dict[str, Any], path: Path, lineno: int) -> SlurpUtterance:
    missing = [f for f in REQUIRED_FIELDS if f not in rec]
    if missing:
        raise malformed(path, f"SLURP record lacks the field(s) {', '.join(map(repr, missing))}", lineno)
    sid = rec["slurp_id"]
    if isinstance(sid, bool) or not isinstance(sid, int):
        raise malformed(
            path, f"field 'slurp_id' must be an integer, got {sid!r} ({type(sid).__name__})", lineno
        )
    for name in _TEXT_FIELDS:
        value = rec[name]
        if not isinstance(value, str) or not value.strip():
            raise malformed(path, f"field {name!r} must be a non-empty string, got {value!r}", lineno)
    if not isinstance(rec["recordings"], list):
        got = rec["recordings"]
        raise malformed(
            path, f"field 'recordings' must be a list, got {got!r} ({type(got).__name__})", lineno
        )
    return SlurpUtterance(
        sid, rec["sentence"], rec["intent"], rec["scenario"], rec["action"], len(rec["recordings"])
    )
