"""The SLURP readers checked by hand on tiny files and against the shipped data's documented counts: first-seen
order and whitespace when deduplicating the training text, every annotation field in its own place, the
`action` field required like the others, a line of spaces reported as blank, and an unknown split refused."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from specbench.data import slurp
from specbench.errors import DataError

pytestmark = pytest.mark.unit
_RECORD = {"slurp_id": 9, "sentence": "wake me up", "intent": "alarm_set", "scenario": "alarm", "action": "set",
           "recordings": []}


def _gz(path: Path, text: str) -> Path:
    path.write_bytes(gzip.compress(text.encode("utf-8")))
    return path


def test_training_text_keeps_first_seen_order_and_strips_each_line(tmp_path: Path) -> None:
    path = _gz(tmp_path / "lm.txt.gz", "play jazz\n  turn it up\nadd milk\nplay jazz\nturn it up  \n")
    # unique in first-seen order (not sorted): "play jazz", "turn it up", "add milk"
    assert slurp.read_training_text_file(path) == ["play jazz", "turn it up", "add milk"]
    assert slurp.read_training_text_file(path, deduplicate=False) == [
        "play jazz", "turn it up", "add milk", "play jazz", "turn it up"]


def test_the_shipped_training_text_has_its_documented_counts() -> None:
    # the data README: 29,104 lines holding 11,502 unique sentences
    assert len(slurp.read_training_text(deduplicate=False)) == 29_104
    assert len(slurp.read_training_text()) == 11_502


def test_each_annotation_lands_in_its_own_field(tmp_path: Path) -> None:
    rec = {**_RECORD, "intent": "I", "scenario": "S", "action": "A", "recordings": [{}, {}, {}]}
    (utt,) = slurp.read_split_file(_gz(tmp_path / "devel.jsonl.gz", json.dumps(rec) + "\n"))
    assert (utt.slurp_id, utt.sentence, utt.intent, utt.scenario, utt.action, utt.num_recordings) == (
        9, "wake me up", "I", "S", "A", 3)


@pytest.mark.parametrize("action", ["", "   ", None])
def test_an_empty_action_is_refused_like_the_other_text_fields(tmp_path: Path, action: object) -> None:
    path = _gz(tmp_path / "devel.jsonl.gz", json.dumps({**_RECORD, "action": action}) + "\n")
    with pytest.raises(DataError, match=r"line 1: field 'action' must be a non-empty string"):
        slurp.read_split_file(path)


def test_a_line_of_spaces_is_reported_as_blank(tmp_path: Path) -> None:
    path = _gz(tmp_path / "devel.jsonl.gz", json.dumps(_RECORD) + "\n   \n")
    with pytest.raises(DataError, match=r"line 2: is blank; expected one JSON object"):
        slurp.read_split_file(path)


def test_an_unknown_split_is_refused() -> None:
    with pytest.raises(ValueError, match="split must be 'devel' or 'test', got 'train'"):
        slurp.read_split("train")  # type: ignore[arg-type]
