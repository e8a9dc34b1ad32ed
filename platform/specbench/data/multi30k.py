"""Multi30k task 1 (raw text, parallel by line) from the data folder: `read_pairs("train", "de", "en")`."""

from __future__ import annotations

import gzip

from specbench.data.resolver import data_file
from specbench.errors import DataError

SPLITS = ("train", "val", "test_2016_flickr", "test_2017_flickr", "test_2017_mscoco", "test_2018_flickr")
LANGUAGES = ("de", "en")


def read_lines(split: str, lang: str) -> list[str]:
    """The sentences of one side of a split, stripped, one per line."""
    if split not in SPLITS:
        raise DataError(f"unknown Multi30k split {split!r}; allowed: {', '.join(SPLITS)}")
    if lang not in LANGUAGES:
        raise DataError(f"unknown Multi30k language {lang!r}; allowed: {', '.join(LANGUAGES)}")
    path = data_file(f"multi30k/{split}.{lang}.gz")
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [line.strip() for line in fh]


def read_pairs(split: str, source: str = "de", target: str = "en") -> list[tuple[str, str]]:
    """(source, target) sentence pairs of a split; a split whose two sides differ in length is an error."""
    src, tgt = read_lines(split, source), read_lines(split, target)
    if len(src) != len(tgt):
        raise DataError(f"multi30k/{split}: {len(src)} {source} lines but {len(tgt)} {target} lines; the files "
                        "must be parallel by line (re-download them)")
    return list(zip(src, tgt, strict=True))
