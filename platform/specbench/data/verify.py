"""What `specbench data check` verifies beyond presence: the checksums and, through the project's own
readers, the content of each file.

`CONTENT_CHECKS` maps a data-relative path to the reader that validates it: SLURP's JSON lines and training
text (`specbench.data.slurp`), the speaker CSV files (their header and every row), CMUdict and its phone set
(`specbench.wfst.lexicon`), and both sides of each Multi30k split together (`specbench.data.multi30k`, which
also compares their line counts). Each raises `DataError` naming the file, the line and the fix.

`check_data` is `resolver.check_all` with these checks: by default they run on the files whose bytes differ
from the shipped checksum (to say where such a file is broken), with `full` on every file.
"""

from __future__ import annotations

import csv
from pathlib import Path

from specbench.data import multi30k, slurp
from specbench.data.resolver import REQUIRED_FILES, ContentCheck, FileCheck, check_all, malformed, text_lines
from specbench.errors import DataError
from specbench.paths import data_dir_candidate
from specbench.wfst.lexicon import PHONES, read_cmudict

SPEAKER_COLUMNS = ("user_id", "slurp_id", "sentence", "intent")


def check_speaker_csv(path: Path) -> int:
    """Check one gzipped speaker CSV: a header with `SPEAKER_COLUMNS`, every row as wide as the header, a
    non-empty `user_id` and an integer `slurp_id`; returns the number of rows."""
    lines = (text for _, text in text_lines(path))
    reader = csv.reader(lines)
    try:
        header = next(reader)
    except StopIteration:
        raise malformed(path, "holds no header (the file is empty)", 1) from None
    missing = [c for c in SPEAKER_COLUMNS if c not in header]
    if missing:
        raise malformed(
            path, f"the header lacks the column(s) {', '.join(map(repr, missing))} (has {header})", 1
        )
    user, sid = header.index("user_id"), header.index("slurp_id")
    rows = 0
    try:
        for row in reader:
            rows += 1
            lineno = reader.line_num
            if len(row) != len(header):
                raise malformed(path, f"{len(row)} fields where the header has {len(header)}", lineno)
            if not row[user].strip():
                raise malformed(path, "the user_id is empty", lineno)
            if not row[sid].strip().isdigit():
                raise malformed(path, f"slurp_id {row[sid]!r} is not an integer", lineno)
    except csv.Error as err:
        raise malformed(path, f"not valid CSV ({err})", reader.line_num) from None
    if not rows:
        raise malformed(path, "holds a header but no row", 2)
    return rows


def check_phones(path: Path) -> None:
    """Check CMUdict's phone set: one ``PHONE<TAB>class`` line per phone, exactly the 39 of `PHONES`."""
    seen: dict[str, int] = {}
    for lineno, text in text_lines(path):
        fields = text.split()
        if not fields:
            continue
        if len(fields) != 2 or fields[0] not in PHONES:
            raise malformed(
                path, f"expected 'PHONE class' with a phone of {' '.join(PHONES)}, got {text!r}", lineno
            )
        if fields[0] in seen:
            raise malformed(path, f"phone {fields[0]} repeats line {seen[fields[0]]}", lineno)
        seen[fields[0]] = lineno
    missing = [p for p in PHONES if p not in seen]
    if missing:
        raise malformed(path, f"lacks the phone(s) {' '.join(missing)} (CMUdict has 39 phones)")


def _multi30k_pair(path: Path) -> None:
    """Read `path`, then, when the other side of its split is there and reads cleanly, compare their line
    counts; a missing or damaged other side is reported on its own row, so that an intact file is not blamed."""
    name = path.name
    lang = name.rsplit(".", 2)[-2]
    other = path.with_name(name.replace(f".{lang}.gz", f".{'en' if lang == 'de' else 'de'}.gz"))
    multi30k.read_lines_file(path)  # this file's own faults first: the other side's are its own row's
    if not other.is_file():
        return
    try:
        multi30k.read_lines_file(other)
    except DataError:
        return
    if lang == "de":
        multi30k.read_pairs_files(path, other)
    else:
        multi30k.read_pairs_files(other, path)


CONTENT_CHECKS: dict[str, ContentCheck] = {
    "slurp/lm.txt.gz": slurp.read_training_text_file,
    "slurp/devel.jsonl.gz": slurp.read_split_file,
    "slurp/test.jsonl.gz": slurp.read_split_file,
    **{f.relpath: check_speaker_csv for f in REQUIRED_FILES if f.relpath.startswith("slurp/speakers/")},
    "cmudict/cmudict.dict": read_cmudict,
    "cmudict/cmudict.phones": check_phones,
    **{
        f"multi30k/{split}.{lang}.gz": _multi30k_pair
        for split in multi30k.SPLITS
        for lang in multi30k.LANGUAGES
    },
}


def check_data(full: bool = False) -> tuple[Path, str, list[FileCheck]]:
    """`resolver.check_all` with `CONTENT_CHECKS`: on changed files only, or on every file when `full`."""
    return check_all(CONTENT_CHECKS, always=full)


def content_problems(root: Path | None = None) -> dict[str, str]:
    """Run every content check on the data folder `root` (default: the configured one): relpath -> message
    (missing files are reported too). Used before recording new checksums."""
    root = root or data_dir_candidate()[0]
    problems = {}
    for relpath, check in CONTENT_CHECKS.items():
        path = root / relpath
        if not path.is_file():
            problems[relpath] = f"missing: {path}"
            continue
        try:
            check(path)
        except DataError as err:
            problems[relpath] = str(err)
    return problems
