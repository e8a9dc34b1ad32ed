"""The data resolver on tiny hand-made folders and files: `text_lines` (CRLF line ends, the column of a
non-UTF-8 byte), checksum tables that are empty or record a negative size, `write_checksums` in sorted order,
`data_file` and `data_dir` refusing a folder or a file in the wrong place, and `check_all` on a folder of a
few files with its own checksum table: a file without a recorded checksum still gets its content checked, a
directory or an empty file where a file should be is named as such, and an unlisted file is described by its
folder."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest

from specbench.data import resolver
from specbench.errors import DataError

pytestmark = pytest.mark.unit


def _sums(path: Path, files: dict[str, bytes]) -> Path:
    table = {rel: {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)} for rel, data in files.items()}
    path.write_text(json.dumps({"files": table}), encoding="utf-8")
    return path


def test_text_lines_drops_crlf_and_names_the_column_of_a_bad_byte(tmp_path: Path) -> None:
    crlf = tmp_path / "crlf.txt"
    crlf.write_bytes(b"one\r\ntwo\r\n\r\nthree")
    assert list(resolver.text_lines(crlf)) == [(1, "one"), (2, "two"), (3, ""), (4, "three")]
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok\nab\xffc\n")  # the byte 0xff is the 3rd of line 2
    with pytest.raises(DataError, match=r"bad\.txt, line 2: not UTF-8 text \(byte b'\\xff' at column 3\)"):
        list(resolver.text_lines(bad))


@pytest.mark.parametrize("files", [{}, {"a": {"sha256": "0" * 64, "size": -1}}], ids=["empty", "negative-size"])
def test_a_checksum_table_that_is_empty_or_has_a_negative_size_is_refused(tmp_path: Path, files: dict) -> None:
    path = tmp_path / "sums.json"
    path.write_text(json.dumps({"files": files}), encoding="utf-8")
    with pytest.raises(DataError, match=r"sums\.json: .*Fix: restore sums\.json"):
        resolver.read_checksums(path)


def test_write_checksums_lists_files_in_sorted_order(tmp_path: Path) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    names = [f"{c}{i}.txt" for c in "zyxwvutsrq" for i in range(3)]
    for name in names:  # created in reverse order of their names
        (folder / name).write_text(name, encoding="utf-8")
    sums = resolver.write_checksums(folder, tmp_path / "sums.json")
    assert list(sums) == sorted(names)
    assert list(resolver.read_checksums(tmp_path / "sums.json")) == sorted(names)


def test_data_file_and_data_dir_refuse_the_wrong_kind_of_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "slurp").mkdir()
    monkeypatch.setenv("SPECBENCH_DATA", str(tmp_path))
    with pytest.raises(DataError, match=r"missing data file .*slurp\."):
        resolver.data_file("slurp")  # a folder, not a file
    with pytest.raises(DataError, match=r"lm\.txt\.gz\. It is the SLURP training text, one sentence per "
                                        r"recording; get it from SLURP"):
        resolver.data_file("slurp/lm.txt.gz")
    a_file = tmp_path / "data.txt"
    a_file.write_text("x", encoding="utf-8")
    monkeypatch.setenv("SPECBENCH_DATA", str(a_file))
    with pytest.raises(DataError, match=r"data directory .*data\.txt .*does not exist"):
        resolver.data_dir()


def test_check_all_on_a_folder_with_its_own_checksums(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "data"
    (root / "slurp").mkdir(parents=True)
    (root / "slurp" / "lm.txt.gz").write_bytes(gzip.compress(b"\n"))  # blank lines only: no sentence
    (root / "slurp" / "devel.jsonl.gz").mkdir()  # a folder where a file should be
    (root / "cmudict").mkdir()
    (root / "cmudict" / "cmudict.phones").write_bytes(b"")  # empty
    monkeypatch.setenv("SPECBENCH_DATA", str(root))
    sums = _sums(tmp_path / "sums.json", {"cmudict/cmudict.phones": b"", "slurp/speakers/extra.csv.gz": b"x",
                                          "other/notes.txt": b"y"})

    def never_called(path: Path) -> None:
        raise AssertionError(f"content check on {path}")

    def no_sentence(path: Path) -> None:
        raise resolver.malformed(path, "holds no sentence", 1)

    _, _, checks = resolver.check_all({"slurp/lm.txt.gz": no_sentence, "slurp/devel.jsonl.gz": never_called},
                                      checksums=sums)
    by = {c.file.relpath: c for c in checks}
    assert len(checks) == len(resolver.REQUIRED_FILES) + 2  # the required files, then the other recorded ones
    # no checksum recorded: its content is still checked, and the message leads with what is wrong there
    assert by["slurp/lm.txt.gz"].problem.startswith("line 1: holds no sentence; no checksum is recorded")
    assert by["slurp/devel.jsonl.gz"].problem == "not a regular file"
    assert by["cmudict/cmudict.phones"].problem == "empty"  # its checksum matches: only the emptiness is wrong
    assert by["slurp/speakers/extra.csv.gz"].problem == "missing"
    assert "it is a SLURP speaker file; get it from SLURP speaker metadata" in by["slurp/speakers/extra.csv.gz"].fix
    assert "it is a file of the shipped data folder; get it from the shipped data folder" in by["other/notes.txt"].fix
