"""Readers for the SLURP text in the shared data directory.

`lm.txt.gz` is SLURP's training text, one line per recording (29,104 lines, 11,502 unique sentences).
The repetition counts recordings, not how often people say a sentence, so the project **deduplicates** it
(first occurrence order) everywhere it trains a language model: the n-gram LM of the decoding graph and the
word LSTM alike.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from typing import Literal

from specbench.data.resolver import data_file
from specbench.errors import DataError

Split = Literal["devel", "test"]


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
    path = data_file("slurp/lm.txt.gz")
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        lines = [line.strip() for line in fh]
    lines = [line for line in lines if line]
    return list(dict.fromkeys(lines)) if deduplicate else lines


def read_split(split: Split) -> list[SlurpUtterance]:
    """The devel or test texts of SLURP, one entry per unique text (`slurp_id`)."""
    if split not in ("devel", "test"):
        raise ValueError(f"split must be 'devel' or 'test', got {split!r}")
    path = data_file(f"slurp/{split}.jsonl.gz")
    out: list[SlurpUtterance] = []
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            try:
                rec = json.loads(line)
                out.append(
                    SlurpUtterance(
                        slurp_id=int(rec["slurp_id"]),
                        sentence=str(rec["sentence"]),
                        intent=str(rec["intent"]),
                        scenario=str(rec["scenario"]),
                        action=str(rec["action"]),
                        num_recordings=len(rec.get("recordings", [])),
                    )
                )
            except (KeyError, ValueError, TypeError) as err:
                raise DataError(
                    f"{path}, line {lineno}: not a SLURP record ({err}). Fix: restore the file from the SLURP "
                    "release (see `specbench data check`)."
                ) from err
    return out
