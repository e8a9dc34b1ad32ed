"""The data is verified, not only found: `specbench data check` compares every shipped file with its recorded
sha256, and every reader of SLURP, Multi30k, CMUdict and the speaker files fails on malformed content with
the file, the line and the fix.

Malformed files are built in tmp_path (the shipped data folder is never modified); a data folder with one
altered file is a tree of symbolic links to the shipped files with that one file replaced.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from specbench.cli import main
from specbench.data import multi30k, resolver, slurp, verify
from specbench.errors import DataError
from specbench.wfst.lexicon import read_cmudict

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
SHIPPED = resolver.data_dir()

_RECORD = {
    "slurp_id": 1,
    "sentence": "wake me up at six",
    "intent": "alarm_set",
    "scenario": "alarm",
    "action": "set",
    "recordings": [{"file": "audio-1.flac", "wer": 0.0, "ent_wer": 0.0, "status": "correct"}],
}


def _gz(path: Path, data: str | bytes) -> Path:
    path.write_bytes(gzip.compress(data.encode("utf-8") if isinstance(data, str) else data))
    return path


def _jsonl(*records: object) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records)


def _rec(**changes: object) -> dict[str, object]:
    rec = {**_RECORD, **changes}
    return {k: v for k, v in rec.items() if v is not _DROP}


_DROP = object()


def _fails(read: Callable[[Path], object], path: Path, line: int | None, *needles: str) -> str:
    """Assert that reading `path` raises a DataError naming the file, the line and a fix; return it."""
    with pytest.raises(DataError) as err:
        read(path)
    msg = str(err.value)
    assert str(path) in msg, msg
    if line is not None:
        assert f"line {line}:" in msg, msg
    else:
        assert re.search(r"line \d+:", msg), msg
    assert "Fix: " in msg and msg.endswith("."), msg
    for needle in needles:
        assert needle in msg, msg
    return msg


# ---------------------------------------------------------------------------------------- SLURP JSON lines
@pytest.mark.parametrize(
    ("lines", "line", "needle"),
    [
        ([_rec(), '{"slurp_id": 2, "sentence": "x" "intent": "a"}'], 2, "not valid JSON"),
        ([_rec(), _rec(slurp_id=2), _rec(slurp_id=3, intent=_DROP)], 3, "lacks the field(s) 'intent'"),
        ([_rec(slurp_id="7")], 1, "'slurp_id' must be an integer, got '7' (str)"),
        ([_rec(slurp_id=True)], 1, "'slurp_id' must be an integer"),
        ([_rec(), _rec(slurp_id=2, sentence=5)], 2, "'sentence' must be a non-empty string, got 5"),
        ([_rec(), _rec(slurp_id=2, scenario="  ")], 2, "'scenario' must be a non-empty string"),
        ([_rec(recordings="audio-1.flac")], 1, "'recordings' must be a list"),
        ([_rec(), "", _rec(slurp_id=2)], 2, "is blank"),
        ([_rec(), "[1, 2]"], 2, "expected a JSON object (a SLURP record), got a JSON list"),
        ([_rec(), _rec(slurp_id=2), _rec(slurp_id=1)], 3, "slurp_id 1 repeats line 1"),
    ],
    ids=["broken-json", "missing-field", "id-as-string", "id-as-bool", "sentence-number", "blank-scenario",
         "recordings-not-list", "blank-line", "not-an-object", "duplicate-id"],
)  # fmt: skip
def test_slurp_split_malformed_line(tmp_path: Path, lines: list[object], line: int, needle: str) -> None:
    path = _gz(tmp_path / "devel.jsonl.gz", _jsonl(*lines))
    _fails(slurp.read_split_file, path, line, needle)


def test_slurp_split_reads_a_good_file(tmp_path: Path) -> None:
    path = _gz(tmp_path / "devel.jsonl.gz", _jsonl(_rec(), _rec(slurp_id=2, recordings=[])))
    utts = slurp.read_split_file(path)
    assert [(u.slurp_id, u.num_recordings) for u in utts] == [(1, 1), (2, 0)]
    assert utts[0].sentence == "wake me up at six" and utts[0].intent == "alarm_set"


def test_slurp_split_empty_file(tmp_path: Path) -> None:
    _fails(slurp.read_split_file, _gz(tmp_path / "test.jsonl.gz", ""), 1, "holds no SLURP record")


def test_slurp_split_not_utf8(tmp_path: Path) -> None:
    data = _jsonl(_rec()).encode() + b'{"slurp_id": 2, "sentence": "caf\xe9"}\n'
    msg = _fails(slurp.read_split_file, _gz(tmp_path / "test.jsonl.gz", data), 2, "not UTF-8")
    assert "xe9" in msg


def test_slurp_split_truncated_gzip(tmp_path: Path) -> None:
    good = gzip.compress(
        _jsonl(*(_rec(slurp_id=i, sentence=f"sentence number {i} " * 8) for i in range(400))).encode()
    )
    path = tmp_path / "test.jsonl.gz"
    path.write_bytes(good[: len(good) // 2])
    _fails(slurp.read_split_file, path, None, "gzip data cannot be decompressed")


def test_slurp_split_not_gzip(tmp_path: Path) -> None:
    path = tmp_path / "test.jsonl.gz"
    path.write_text(_jsonl(_rec()), encoding="utf-8")
    _fails(slurp.read_split_file, path, 1, "gzip data cannot be decompressed", "Not a gzipped file")


# ----------------------------------------------------------------------------------------- SLURP LM text
def test_slurp_training_text_empty(tmp_path: Path) -> None:
    _fails(slurp.read_training_text_file, _gz(tmp_path / "lm.txt.gz", ""), 1, "holds no sentence")
    _fails(slurp.read_training_text_file, _gz(tmp_path / "lm2.txt.gz", "\n  \n"), 1, "holds no sentence")


def test_slurp_training_text_not_utf8(tmp_path: Path) -> None:
    path = _gz(tmp_path / "lm.txt.gz", b"turn on the lights\nplay \xff\xfe music\n")
    _fails(slurp.read_training_text_file, path, 2, "not UTF-8")


def test_slurp_training_text_dedups(tmp_path: Path) -> None:
    path = _gz(tmp_path / "lm.txt.gz", "a b\nc\n\na b\n")
    assert slurp.read_training_text_file(path) == ["a b", "c"]
    assert slurp.read_training_text_file(path, deduplicate=False) == ["a b", "c", "a b"]


# ------------------------------------------------------------------------------------------------ Multi30k
def test_multi30k_mismatched_line_counts(tmp_path: Path) -> None:
    de = _gz(tmp_path / "val.de.gz", "ein Hund\nzwei Hunde\ndrei Hunde\n")
    en = _gz(tmp_path / "val.en.gz", "a dog\ntwo dogs\n")
    msg = _fails(
        lambda p: multi30k.read_pairs_files(p, en), de, 3, "no counterpart", str(en), "3 lines against 2"
    )
    assert "val.en.gz" in msg.split("Fix:")[1]
    assert multi30k.read_pairs_files(de, _gz(tmp_path / "ok.en.gz", "a\nb\nc\n"))[2] == ("drei Hunde", "c")


def test_multi30k_blank_line(tmp_path: Path) -> None:
    _fails(multi30k.read_lines_file, _gz(tmp_path / "train.en.gz", "a dog\n\ntwo dogs\n"), 2, "is blank")


def test_multi30k_empty_file(tmp_path: Path) -> None:
    _fails(multi30k.read_lines_file, _gz(tmp_path / "train.de.gz", ""), 1, "holds no sentence")


def test_multi30k_corrupt_gzip(tmp_path: Path) -> None:
    data = bytearray(gzip.compress(("a dog runs across a field\n" * 2000).encode()))
    data[len(data) // 2 : len(data) // 2 + 8] = b"\x00" * 8
    path = tmp_path / "test_2016_flickr.en.gz"
    path.write_bytes(bytes(data))
    _fails(multi30k.read_lines_file, path, None, "gzip data cannot be decompressed")


def test_multi30k_not_utf8(tmp_path: Path) -> None:
    path = _gz(tmp_path / "val.de.gz", b"ein Hund\nzwei H\xfcnde\n")  # latin-1, not UTF-8
    _fails(multi30k.read_lines_file, path, 2, "not UTF-8")


# ------------------------------------------------------------------------------------------------ CMUdict
@pytest.mark.parametrize(
    ("text", "line", "needle"),
    [
        ("a AH0\nhello HH AH0 L OW9\n", 2, "'OW9' is not a CMUdict phone"),
        ("a AH0\nb B IY1\nhello\n", 3, "expected 'word PH1 PH2 ...'"),
        ("a AH0\nhel(lo HH AH0 L OW1\n", 2, "expected 'word PH1 PH2 ...'"),
        ("a AH0\nhello(x) HH AH0 L OW1\n", 2, "expected 'word PH1 PH2 ...'"),
        ("a AH0\nhello HH\tAH0 L ow1\n", 2, "'ow1'"),
    ],
    ids=["bad-phone", "no-phones", "bad-word", "bad-variant", "lower-case-phone"],
)
def test_cmudict_malformed_line(tmp_path: Path, text: str, line: int, needle: str) -> None:
    path = tmp_path / "cmudict.dict"
    path.write_text(text, encoding="utf-8")
    _fails(read_cmudict, path, line, needle)


def test_cmudict_empty_and_comment_only(tmp_path: Path) -> None:
    empty = tmp_path / "empty.dict"
    empty.write_text("", encoding="utf-8")
    _fails(read_cmudict, empty, 1, "holds no entry")
    comments = tmp_path / "comments.dict"
    comments.write_text("# nothing but a comment\n\n", encoding="utf-8")
    _fails(read_cmudict, comments, 1, "holds no entry")


def test_cmudict_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "cmudict.dict"
    path.write_bytes(b"a AH0\ncaf\xe9 K AE0 F EY1\n")
    _fails(read_cmudict, path, 2, "not UTF-8")


def test_cmudict_phones_file(tmp_path: Path) -> None:
    shipped = (SHIPPED / "cmudict/cmudict.phones").read_text(encoding="utf-8").splitlines()
    verify.check_phones(SHIPPED / "cmudict/cmudict.phones")
    path = tmp_path / "cmudict.phones"
    path.write_text("\n".join(shipped[:5] + ["QQ\tvowel"] + shipped[5:]) + "\n", encoding="utf-8")
    _fails(verify.check_phones, path, 6, "'QQ\\tvowel'")
    path.write_text("\n".join(shipped[1:]) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"lacks the phone\(s\) AA .*Fix: "):
        verify.check_phones(path)


# ------------------------------------------------------------------------------------------- speaker CSVs
_HEADER = ",Unnamed: 0,user_id,slurp_id,nlub_id,sentence,intent,recording_path\n"


@pytest.mark.parametrize(
    ("text", "line", "needle"),
    [
        (_HEADER.replace("slurp_id,", "") + "0,0,MO-433,x,y,alarm_set,a.flac\n", 1,
         "lacks the column(s) 'slurp_id'"),
        (_HEADER + "0,0,MO-433,13804,5,wake me,alarm_set,a.flac\n1,1,MO-433,13805,5,wake me\n", 3,
         "6 fields where"),
        (_HEADER + "0,0,MO-433,13804,5,wake me,alarm_set,a.flac\n1,1,MO-433,twelve,5,x,alarm_set,b.flac\n", 3,
         "slurp_id 'twelve' is not an integer"),
        (_HEADER, 2, "holds a header but no row"),
        ("", 1, "holds no header"),
    ],
    ids=["missing-column", "short-row", "bad-id", "no-rows", "empty"],
)  # fmt: skip
def test_speaker_csv_malformed(tmp_path: Path, text: str, line: int, needle: str) -> None:
    _fails(verify.check_speaker_csv, _gz(tmp_path / "SLURP_csv_slurp_mini_FE.csv.gz", text), line, needle)


# ------------------------------------------------------------------------ the readers, through SPECBENCH_DATA
@pytest.fixture
def data_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A data folder of symbolic links to the shipped files, the one SPECBENCH_DATA points at; a test replaces
    the files it alters (unlink, then write)."""
    copy = tmp_path / "data"
    for src in SHIPPED.rglob("*"):
        if src.is_file():
            dst = copy / src.relative_to(SHIPPED)
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.symlink_to(src)
    monkeypatch.setenv("SPECBENCH_DATA", str(copy))
    return copy


def _replace(copy: Path, relpath: str, data: bytes) -> Path:
    path = copy / relpath
    path.unlink()
    path.write_bytes(data)
    return path


def _shipped_text(relpath: str) -> str:
    with gzip.open(SHIPPED / relpath, "rt", encoding="utf-8") as fh:
        return fh.read()


def test_public_readers_name_the_file_line_and_fix(data_copy: Path) -> None:
    lines = _shipped_text("slurp/devel.jsonl.gz").splitlines(keepends=True)
    lines[4] = lines[4].replace('"intent": ', '"intent" ', 1)
    devel = _replace(data_copy, "slurp/devel.jsonl.gz", gzip.compress("".join(lines).encode()))
    _fails(lambda _: slurp.read_split("devel"), devel, 5, "not valid JSON")
    assert len(slurp.read_split("test")) == 2974  # the other split still reads

    lm = _replace(data_copy, "slurp/lm.txt.gz", gzip.compress(b""))
    _fails(lambda _: slurp.read_training_text(), lm, 1, "holds no sentence")

    en = _shipped_text("multi30k/val.en.gz").splitlines(keepends=True)
    _replace(data_copy, "multi30k/val.en.gz", gzip.compress("".join(en[:-3]).encode()))
    _fails(
        lambda _: multi30k.read_pairs("val"), data_copy / "multi30k/val.de.gz", len(en) - 2, "no counterpart"
    )


# -------------------------------------------------------------------------------------------- data check
def test_checksums_cover_the_shipped_folder() -> None:
    recorded = resolver.read_checksums()
    shipped = {p.relative_to(SHIPPED).as_posix() for p in SHIPPED.rglob("*") if p.is_file()}
    assert set(recorded) == shipped
    assert {f.relpath for f in resolver.REQUIRED_FILES} <= set(recorded)
    assert set(verify.CONTENT_CHECKS) <= set(recorded)


def test_shipped_data_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "check", "--full"]) == 0
    out = capsys.readouterr().out
    n = len(resolver.read_checksums())
    assert f"{n} of {n} files ok" in out and "PROBLEM" not in out and "every file's content read" in out


def test_check_names_an_altered_file_and_exits_nonzero(
    data_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = _shipped_text("slurp/devel.jsonl.gz").replace("wake me up", "wake us up", 1)  # still valid
    devel = _replace(data_copy, "slurp/devel.jsonl.gz", gzip.compress(text.encode()))
    assert main(["data", "check"]) == 1
    out = capsys.readouterr().out
    problems = [line for line in out.splitlines() if "PROBLEM" in line]
    assert len(problems) == 1 and "PROBLEM slurp/devel.jsonl.gz: differs from the shipped file" in problems[0]
    assert (
        f"fix slurp/devel.jsonl.gz: it is the SLURP devel set (JSON lines), and it differs from the shipped "
        f"data: put the shipped copy back at {devel}" in out
    )
    n = len(resolver.read_checksums())
    assert f"{n - 1} of {n} files ok" in out


def test_check_says_where_an_altered_file_is_broken(
    data_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = _shipped_text("slurp/devel.jsonl.gz").splitlines(keepends=True)
    lines[2] = lines[2][:40] + "\n"
    _replace(data_copy, "slurp/devel.jsonl.gz", gzip.compress("".join(lines).encode()))
    _replace(data_copy, "slurp/lm.txt.gz", gzip.compress(b""))
    cmu = (SHIPPED / "cmudict/cmudict.dict").read_bytes()
    _replace(
        data_copy, "cmudict/cmudict.dict", cmu.replace(b"\nabbey AE1 B IY0\n", b"\nabbey AE1 B IY7\n", 1)
    )
    (data_copy / "multi30k/README.md").unlink()
    assert main(["data", "check"]) == 1
    out = capsys.readouterr().out
    assert re.search(
        r"PROBLEM slurp/devel\.jsonl\.gz: line 3: not valid JSON .*; differs from the shipped file", out
    )
    assert "PROBLEM slurp/lm.txt.gz: line 1: holds no sentence (the file is empty); differs" in out
    assert "PROBLEM cmudict/cmudict.dict: line 104: 'IY7' is not a CMUdict phone" in out
    assert "PROBLEM multi30k/README.md: missing" in out
    assert "fix multi30k/README.md: it is a Multi30k file; get it from Multi30k task 1" in out
    assert "fix cmudict/cmudict.dict: it is the CMU Pronouncing Dictionary, and it differs" in out


def test_check_through_a_subprocess(data_copy: Path) -> None:
    _replace(
        data_copy, "multi30k/val.en.gz", gzip.compress(_shipped_text("multi30k/val.en.gz")[:-200].encode())
    )
    env = {**os.environ, "SPECBENCH_DATA": str(data_copy)}
    proc = subprocess.run(
        [sys.executable, "-m", "specbench", "data", "check"],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert re.search(
        r"PROBLEM multi30k/val\.en\.gz: .*multi30k/val\.de\.gz, line \d+: has no counterpart", proc.stdout
    )
    assert "fix multi30k/val.en.gz" in proc.stdout


def test_broken_checksum_file(tmp_path: Path) -> None:
    path = tmp_path / "checksums.json"
    path.write_text('{"files": {"a": {"sha256": "00", "size": 1}}}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"checksums\.json: files\.'a' must be .*Fix: .*write_data_checksums"):
        resolver.check_all(checksums=path)
    path.write_text('{"files": {\n  "a": \n}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"checksums\.json, line 3: not valid JSON.*Fix: restore"):
        resolver.read_checksums(path)


def test_write_checksums_round_trip(tmp_path: Path) -> None:
    folder = tmp_path / "folder"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "b.txt").write_text("bee\n", encoding="utf-8")
    (folder / "a.gz").write_bytes(gzip.compress(b"a\n"))
    out = tmp_path / "sums.json"
    sums = resolver.write_checksums(folder, out)
    assert list(sums) == ["a.gz", "sub/b.txt"]
    assert resolver.read_checksums(out) == sums
    assert sums["sub/b.txt"] == (hashlib.sha256(b"bee\n").hexdigest(), 4)


def test_checksum_script_refuses_a_broken_folder(data_copy: Path, tmp_path: Path) -> None:
    _replace(data_copy, "slurp/test.jsonl.gz", gzip.compress(b'{"slurp_id": 1}\n'))
    out = tmp_path / "sums.json"
    proc = subprocess.run(
        [sys.executable, "scripts/write_data_checksums.py", str(data_copy), "--out", str(out)],
        check=False,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 1 and not out.exists(), proc.stdout + proc.stderr
    assert "PROBLEM slurp/test.jsonl.gz" in proc.stdout and "lacks the field(s) 'sentence'" in proc.stdout
