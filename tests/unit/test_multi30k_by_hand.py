"""The Multi30k readers checked by hand: every split's documented line count (data README), the default
direction and the pairing of `read_pairs` against the files read directly, stripping of each line, a shorter
source side refused like a shorter target side, and unknown splits and languages refused by name."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from specbench.data import multi30k
from specbench.errors import DataError

pytestmark = pytest.mark.unit


def _gz(path: Path, text: str) -> Path:
    path.write_bytes(gzip.compress(text.encode("utf-8")))
    return path


def test_every_split_has_its_documented_line_count() -> None:
    counts = {"train": 29_000, "val": 1_014, "test_2016_flickr": 1_000, "test_2017_flickr": 1_000,
              "test_2017_mscoco": 461, "test_2018_flickr": 1_071}  # the data README
    assert set(multi30k.SPLITS) == set(counts)
    for split, n in counts.items():
        assert len(multi30k.read_lines(split, "de")) == len(multi30k.read_lines(split, "en")) == n


def test_read_pairs_is_german_to_english_by_default_and_pairs_line_by_line() -> None:
    from specbench.data.resolver import data_file

    def raw(lang: str) -> list[str]:
        with gzip.open(data_file(f"multi30k/val.{lang}.gz"), "rt", encoding="utf-8") as fh:
            return [line.strip() for line in fh]

    de, en = raw("de"), raw("en")
    pairs = multi30k.read_pairs("val")
    assert pairs[0] == (de[0], en[0]) and pairs[-1] == (de[-1], en[-1])
    assert multi30k.read_pairs("val", "en", "de")[5] == (en[5], de[5])


def test_lines_are_stripped(tmp_path: Path) -> None:
    path = _gz(tmp_path / "val.en.gz", "  a dog runs \ntwo cats\t\n")
    assert multi30k.read_lines_file(path) == ["a dog runs", "two cats"]


def test_a_shorter_source_side_is_refused_too(tmp_path: Path) -> None:
    de = _gz(tmp_path / "val.de.gz", "ein Hund\n")
    en = _gz(tmp_path / "val.en.gz", "a dog\ntwo dogs\nthree dogs\n")
    with pytest.raises(DataError, match=r"val\.en\.gz, line 2: has no counterpart in .*val\.de\.gz \(3 lines "
                                        r"against 1"):
        multi30k.read_pairs_files(de, en)


@pytest.mark.parametrize(("split", "lang", "match"), [
    ("dev", "en", r"unknown Multi30k split 'dev'; allowed: train, val, test_2016_flickr"),
    ("val", "fr", r"unknown Multi30k language 'fr'; allowed: de, en"),
])
def test_unknown_splits_and_languages_are_named(split: str, lang: str, match: str) -> None:
    with pytest.raises(DataError, match=match):
        multi30k.read_lines(split, lang)
