"""Multi30k task 1 (raw text, parallel by line) from the data folder: `read_pairs("train", "de", "en")`.

Each file holds one sentence per line; the two languages of a split have the same number of lines and line
*n* of one translates line *n* of the other. An empty file, a blank line, text that is not UTF-8, a corrupt
gzip stream or two sides of different length are a `DataError` naming the file, the line and the fix.
"""

from __future__ import annotations

from pathlib import Path

from specbench.data.resolver import data_file, malformed, text_lines
from specbench.errors import DataError

TEST_SPLITS = ("test_2016_flickr", "test_2017_flickr", "test_2017_mscoco", "test_2018_flickr")
SPLITS = ("train", "val", *TEST_SPLITS)
LANGUAGES = ("de", "en")


def _path(split: str, lang: str) -> Path:
    if split not in SPLITS:
        raise DataError(f"unknown Multi30k split {split!r}; allowed: {', '.join(SPLITS)}")
    if lang not in LANGUAGES:
        raise DataError(f"unknown Multi30k language {lang!r}; allowed: {', '.join(LANGUAGES)}")
    return data_file(f"multi30k/{split}.{lang}.gz")


def read_lines(split: str, lang: str) -> list[str]:
    """The sentences of one side of a split, stripped, one per line."""
    return read_lines_file(_path(split, lang))


def read_lines_file(path: Path) -> list[str]:
    """The sentences of one Multi30k file, stripped, one per line; none may be blank."""
    lines: list[str] = []
    for lineno, text in text_lines(path):
        sentence = text.strip()
        if not sentence:
            raise malformed(
                path, "is blank; every line holds one sentence (the files are parallel by line)", lineno
            )
        lines.append(sentence)
    if not lines:
        raise malformed(path, "holds no sentence (the file is empty)", 1)
    return lines


def read_pairs(split: str, source: str = "de", target: str = "en") -> list[tuple[str, str]]:
    """(source, target) sentence pairs of a split; a split whose two sides differ in length is an error."""
    return read_pairs_files(_path(split, source), _path(split, target))


def read_pairs_files(source: Path, target: Path) -> list[tuple[str, str]]:
    """(source, target) sentence pairs of two parallel files (see `read_pairs`)."""
    src, tgt = read_lines_file(source), read_lines_file(target)
    check_parallel(source, len(src), target, len(tgt))
    return list(zip(src, tgt, strict=True))


def check_parallel(source: Path, source_lines: int, target: Path, target_lines: int) -> None:
    """Raise `DataError` naming the longer file and its first line without a counterpart if counts differ."""
    if source_lines == target_lines:
        return
    (longer, n_long), (shorter, n_short) = sorted(
        [(source, source_lines), (target, target_lines)], key=lambda item: -item[1]
    )
    raise malformed(
        longer,
        f"has no counterpart in {shorter} ({n_long} lines against {n_short}; the two sides of a split are "
        "parallel by line)",
        n_short + 1,
        f"restore both {Path(source).name} and {Path(target).name} from the shipped data folder "
        "(`specbench data check` names every file that differs from it)",
    )
