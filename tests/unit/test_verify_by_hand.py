"""The content checks of `specbench data check` on tiny hand-made files: the speaker CSV's required columns,
row widths, blank speaker ids and signed ids; CMUdict's phone file with an extra column or a repeated phone;
and `content_problems` on a folder holding only some of the files (the others reported missing, a broken
phone file reported with its line, one side of a Multi30k split not blamed for the other's absence)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from specbench.data import verify
from specbench.errors import DataError
from specbench.wfst.lexicon import PHONES

pytestmark = pytest.mark.unit
_HEADER = "user_id,slurp_id,sentence,intent\n"


def _gz(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(text.encode("utf-8")))
    return path


def _phones(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


def test_a_good_speaker_csv_counts_its_rows(tmp_path: Path) -> None:
    path = _gz(tmp_path / "s.csv.gz", _HEADER + "FE-1,12,wake me,alarm_set\nMO-2,13,\"hi, there\",greet\n")
    assert verify.check_speaker_csv(path) == 2


@pytest.mark.parametrize(("text", "match"), [
    ("user_id,slurp_id,sentence\nFE-1,12,wake me\n", r"line 1: the header lacks the column\(s\) 'intent'"),
    (_HEADER + "FE-1,12,wake me,alarm_set\nFE-1,13,x,y,extra\n", r"line 3: 5 fields where the header has 4"),
    (_HEADER + "FE-1,12,wake me,alarm_set\n  ,13,x,y\n", r"line 3: the user_id is empty"),
    (_HEADER + "FE-1,-12,wake me,alarm_set\n", r"line 2: slurp_id '-12' is not an integer"),
], ids=["no-intent-column", "wide-row", "blank-user", "negative-id"])
def test_speaker_csv_rows_that_break_the_format(tmp_path: Path, text: str, match: str) -> None:
    with pytest.raises(DataError, match=match):
        verify.check_speaker_csv(_gz(tmp_path / "s.csv.gz", text))


def test_a_phone_line_with_an_extra_column_or_a_repeated_phone_is_refused(tmp_path: Path) -> None:
    good = [f"{p}\tvowel" for p in PHONES]
    verify.check_phones(_phones(tmp_path / "good.phones", good))
    wide = _phones(tmp_path / "wide.phones", [*good[:2], "AA\tvowel\textra", *good[2:]])
    with pytest.raises(DataError, match=r"line 3: expected 'PHONE class'"):
        verify.check_phones(wide)
    twice = _phones(tmp_path / "twice.phones", [*good, good[0]])
    with pytest.raises(DataError, match=rf"line {len(good) + 1}: phone {PHONES[0]} repeats line 1"):
        verify.check_phones(twice)


def test_content_problems_names_missing_files_and_a_broken_one(tmp_path: Path) -> None:
    _gz(tmp_path / "slurp/lm.txt.gz", "play jazz\n")  # fine
    _gz(tmp_path / "multi30k/val.en.gz", "A dog runs.\n")  # fine: its German side is missing, not it
    _phones(tmp_path / "cmudict/cmudict.phones", ["AA\tvowel", "QQ\tvowel"])  # line 2 is no CMUdict phone
    problems = verify.content_problems(tmp_path)
    others = set(verify.CONTENT_CHECKS) - {"slurp/lm.txt.gz", "cmudict/cmudict.phones", "multi30k/val.en.gz"}
    assert set(problems) == others | {"cmudict/cmudict.phones"}
    assert all(problems[rel] == f"missing: {tmp_path / rel}" for rel in others)
    assert "cmudict.phones, line 2: expected 'PHONE class'" in problems["cmudict/cmudict.phones"]


def test_a_damaged_side_of_a_multi30k_split_is_blamed_alone(tmp_path: Path) -> None:
    _gz(tmp_path / "multi30k/val.de.gz", "Ein Hund rennt.\n")  # intact
    bad = tmp_path / "multi30k/val.en.gz"
    bad.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(bad, "wb") as f:
        f.write(b"A dog \xff runs.\n")
    problems = verify.content_problems(tmp_path)
    assert "multi30k/val.de.gz" not in problems and "not UTF-8" in problems["multi30k/val.en.gz"]
    _gz(bad, "A dog runs.\nA cat sleeps.\n")  # both read, the counts differ: a problem of each
    assert {"multi30k/val.de.gz", "multi30k/val.en.gz"} <= set(verify.content_problems(tmp_path))
