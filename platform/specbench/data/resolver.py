"""Find the shared data, verify it against the shipped checksums, and read its text files line by line.

The data directory is `SPECBENCH_DATA`, else `../shared/data` beside the checkout. Each file a job reads is
listed in `REQUIRED_FILES` with what it is and where it comes from, so that `specbench data check` can say
what is missing and how to get it, and a job can fail early with a message that names the file and the fix.

`CHECKSUMS` (``checksums.json`` beside this module) records the sha256 and size of every file of the shipped
data folder, by path relative to it; `check_all` compares each file with it, so a file that was truncated,
edited or replaced is named, not only a missing one. ``scripts/write_data_checksums.py`` writes it (once per
release of the data folder). Hashing the whole folder (about 9 MB) takes a fraction of a second.

`text_lines` is the one way the readers of SLURP, Multi30k and the speaker files iterate a text file: gzip
and UTF-8 errors become a `DataError` naming the file and the line, and `malformed` builds the message of a
line whose content is wrong (file, line, what is wrong, and the fix).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from specbench.errors import DataError
from specbench.paths import data_dir_candidate

CHECKSUMS = Path(__file__).with_name("checksums.json")
CHECKSUMS_SCRIPT = "scripts/write_data_checksums.py"
RESTORE_FIX = (
    "restore the file from the shipped data folder (`specbench data check` names every file that differs "
    "from it)"
)


@dataclass(frozen=True)
class DataFile:
    """One file of the data folder, relative to it: what it is and where it comes from."""

    relpath: str
    what: str
    source: str


_SLURP = "SLURP (https://github.com/pswietojanski/slurp, CC BY 4.0): dataset/slurp/*.jsonl"
_SLURP_SPK = "SLURP speaker metadata, derived from SLURP's per-recording CSV files (CC BY 4.0)"
_M30K = "Multi30k task 1 raw text (https://github.com/multi30k/dataset, data/task1/raw)"
_CMUDICT = "https://github.com/cmusphinx/cmudict"
REQUIRED_FILES: tuple[DataFile, ...] = (
    DataFile("slurp/lm.txt.gz", "SLURP training text, one sentence per recording", _SLURP),
    DataFile("slurp/devel.jsonl.gz", "SLURP devel set (JSON lines)", _SLURP),
    DataFile("slurp/test.jsonl.gz", "SLURP test set (JSON lines)", _SLURP),
    DataFile(
        "slurp/speakers/SLURP_csv_slurp_test_per_speaker.csv.gz", "test recordings per speaker", _SLURP_SPK
    ),
    *(
        DataFile(
            f"slurp/speakers/SLURP_csv_slurp_mini_{g}.csv.gz", "train+test recordings per speaker", _SLURP_SPK
        )
        for g in ("FE", "FO", "ME", "MO", "UNK")
    ),
    DataFile("cmudict/cmudict.dict", "CMU Pronouncing Dictionary", _CMUDICT),
    DataFile("cmudict/cmudict.phones", "CMUdict phone set (39 phones)", _CMUDICT),
    *(
        DataFile(f"multi30k/{split}.{lang}.gz", f"Multi30k {split} ({lang})", _M30K)
        for split in (
            "train",
            "val",
            "test_2016_flickr",
            "test_2017_flickr",
            "test_2017_mscoco",
            "test_2018_flickr",
        )
        for lang in ("de", "en")
    ),
)
# What the other shipped files (licences, READMEs, the smoke-test speech) are, by folder: longest prefix wins.
_FOLDERS: tuple[tuple[str, str, str], ...] = (
    ("slurp/speakers/", "a SLURP speaker file", _SLURP_SPK),
    ("slurp/", "a SLURP file", _SLURP),
    ("multi30k/", "a Multi30k file", _M30K),
    ("cmudict/", "a CMUdict file", _CMUDICT),
    (
        "speech/librivox/",
        "a LibriVox smoke-test recording or transcript",
        "the shipped data folder (pocketsphinx test data)",
    ),
    (
        "speech/librispeech/",
        "a LibriSpeech smoke-test recording or transcript",
        "the shipped data folder (lhotse test data)",
    ),
    ("", "a file of the shipped data folder", "the shipped data folder (see its README.md)"),
)


@dataclass(frozen=True)
class FileCheck:
    """The outcome of checking one file of the data folder.

    Attributes:
        file: which file.
        path: where it was looked for.
        problem: None when the file is present, readable and as shipped; else what is wrong with it.
        changed: True when the file is present but its bytes differ from the shipped checksum.
    """

    file: DataFile
    path: Path
    problem: str | None
    changed: bool = False

    @property
    def ok(self) -> bool:
        return self.problem is None

    @property
    def fix(self) -> str:
        """What to do about the problem (one sentence, no "Fix:" prefix)."""
        if self.changed:
            return (
                f"it is {_article(self.file.what)}, and it differs from the shipped data: put the shipped "
                f"copy back at {self.path} (from a fresh copy of the data folder, or from {self.file.source})"
            )
        return f"it is {_article(self.file.what)}; get it from {self.file.source} and place it at {self.path}"


def _article(what: str) -> str:
    return what if what.startswith(("a ", "an ")) else f"the {what}"


# ------------------------------------------------------------------------------------------ finding files
def data_dir(must_exist: bool = True) -> Path:
    """The data directory; raises `DataError` naming how it was chosen when it does not exist."""
    path, how = data_dir_candidate()
    if must_exist and not path.is_dir():
        raise DataError(
            f"data directory {path} (from {how}) does not exist. Fix: point SPECBENCH_DATA at the folder "
            "holding slurp/, cmudict/ and multi30k/ (see `specbench data check`)."
        )
    return path


def data_file(relpath: str) -> Path:
    """Absolute path of one data file, checked to exist; the error says what it is and where to get it."""
    root = data_dir()
    path = root / relpath
    if not path.is_file():
        known = {f.relpath: f for f in REQUIRED_FILES}.get(relpath)
        hint = f" It is the {known.what}; get it from {known.source}." if known else ""
        raise DataError(
            f"missing data file {path}.{hint} Fix: run `specbench data check` for the full list of what is "
            "missing and where to get it."
        )
    return path


# ------------------------------------------------------------------------------------------ reading lines
def malformed(path: Path, detail: str, line: int | None = None, fix: str = RESTORE_FIX) -> DataError:
    """The error for malformed content: ``<path>, line <n>: <detail>. Fix: <fix>.``"""
    where = f"{path}, line {line}" if line is not None else str(path)
    return DataError(f"{where}: {detail}. Fix: {fix}.")


def text_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number from 1, text without the line end) of a UTF-8 file, gunzipped when the name ends in .gz.

    Raises `DataError` naming the file when it cannot be opened, and the line when the line is not UTF-8 or
    the gzip data is corrupt or truncated there (the line is approximate: gzip is read in blocks).
    """
    path = Path(path)
    try:
        fh = gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")  # noqa: SIM115 - closed below
    except OSError as err:
        raise malformed(path, f"cannot be opened ({err.strerror or err})") from err
    lineno = 0
    with fh:
        try:
            for lineno, raw in enumerate(fh, 1):
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as err:
                    bad = raw[err.start : err.end]
                    raise malformed(
                        path, f"not UTF-8 text (byte {bad!r} at column {err.start + 1})", lineno
                    ) from None
                yield lineno, text.rstrip("\r\n")
        except (OSError, EOFError, zlib.error) as err:
            detail = f"the gzip data cannot be decompressed at or shortly after this line ({err})"
            raise malformed(path, detail, lineno + 1) from err


# ------------------------------------------------------------------------------------------------ checksums
def file_digest(path: Path) -> tuple[str, int]:
    """(sha256 as hex, size in bytes) of one file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    size = 0
    with Path(path).open("rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
            size += len(block)
    return digest.hexdigest(), size


def read_checksums(path: Path = CHECKSUMS) -> dict[str, tuple[str, int]]:
    """The recorded checksums: data-relative path -> (sha256 hex, size in bytes)."""
    fix = f"restore {path.name} from the repository, or rewrite it with `python {CHECKSUMS_SCRIPT}`"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise DataError(
            f"cannot read the data checksums {path} ({err.strerror or err}). Fix: {fix}."
        ) from err
    except json.JSONDecodeError as err:
        raise malformed(path, f"not valid JSON ({err.msg}, column {err.colno})", err.lineno, fix) from err
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, dict) or not files:
        raise malformed(path, "has no 'files' table (data-relative path -> {sha256, size})", None, fix)
    out: dict[str, tuple[str, int]] = {}
    for relpath, entry in files.items():
        sha, size = (entry.get("sha256"), entry.get("size")) if isinstance(entry, dict) else (None, None)
        if not (isinstance(sha, str) and len(sha) == 64 and isinstance(size, int) and size >= 0):
            raise malformed(
                path,
                f'files.{relpath!r} must be {{"sha256": <64 hex digits>, "size": <bytes>}}, got {entry!r}',
                None,
                fix,
            )
        out[relpath] = (sha, size)
    return out


def write_checksums(root: Path, path: Path = CHECKSUMS) -> dict[str, tuple[str, int]]:
    """Record the sha256 and size of every regular file under `root` in `path` (sorted); returns them."""
    root = Path(root)
    sums = {p.relative_to(root).as_posix(): file_digest(p) for p in sorted(root.rglob("*")) if p.is_file()}
    about = (
        "sha256 and size in bytes of every file of the shipped data folder, by path relative to it; "
        f"checked by `specbench data check`, written by `python {CHECKSUMS_SCRIPT}`"
    )
    entries = ",\n".join(
        f"  {json.dumps(rel)}: {json.dumps({'sha256': sha, 'size': size})}"
        for rel, (sha, size) in sums.items()
    )
    path.write_text(
        f'{{\n "about": {json.dumps(about)},\n "files": {{\n{entries}\n }}\n}}\n', encoding="utf-8"
    )
    return sums


# ---------------------------------------------------------------------------------------------- checking
ContentCheck = Callable[[Path], object]


def _describe(relpath: str) -> DataFile:
    known = {f.relpath: f for f in REQUIRED_FILES}.get(relpath)
    if known:
        return known
    what, source = next((w, s) for prefix, w, s in _FOLDERS if relpath.startswith(prefix))
    return DataFile(relpath, what, source)


def _readable(path: Path) -> str | None:
    """Why the file cannot be read at all (not a file, empty, gzip that does not decompress), or None."""
    if not path.exists():
        return "missing"
    if not path.is_file():
        return "not a regular file"
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as fh:
                while fh.read(1 << 20):
                    pass
        elif path.stat().st_size == 0:
            return "empty"
    except (OSError, EOFError, zlib.error) as err:
        return f"unreadable ({err})"
    return None


def _content(check: ContentCheck, path: Path) -> str | None:
    """What the reader's check says is wrong (the message without the path and the fix), or None."""
    try:
        check(path)
    except DataError as err:
        text = str(err).split(" Fix: ", 1)[0].rstrip(".")
        return text.removeprefix(f"{path}, ").removeprefix(f"{path}: ").removeprefix(str(path))
    return None


def _check_one(
    file: DataFile, path: Path, shipped: tuple[str, int] | None, content: ContentCheck | None, always: bool
) -> FileCheck:
    unreadable = _readable(path)
    if unreadable == "missing" or unreadable == "not a regular file":
        return FileCheck(file, path, unreadable)
    problems = [unreadable] if unreadable else []
    changed = False
    if shipped is None:
        problems.append(f"no checksum is recorded for it in {CHECKSUMS} (run `python {CHECKSUMS_SCRIPT}`)")
    else:
        sha, size = file_digest(path)
        if (sha, size) != shipped:
            changed = True
            problems.append(
                f"differs from the shipped file ({size} bytes, sha256 {sha[:12]}...; shipped: "
                f"{shipped[1]} bytes, sha256 {shipped[0][:12]}...)"
            )
    if content is not None and not unreadable and (always or changed or shipped is None):
        found = _content(content, path)
        if found:
            problems.insert(0, found)
    return FileCheck(file, path, "; ".join(problems) or None, changed)


def check_all(
    content: Mapping[str, ContentCheck] | None = None, always: bool = False, checksums: Path = CHECKSUMS
) -> tuple[Path, str, list[FileCheck]]:
    """Check the data folder: the directory, how it was chosen, and one result per file.

    The files are `REQUIRED_FILES`, then every other file `checksums` records. Each must exist, be readable
    (gzip files decompress, others are not empty) and match its recorded sha256 and size. `content` maps a
    data-relative path to a reader check (raises `DataError` on malformed content); it runs on files that
    differ from their checksum or have none, to say where they are broken, and on every file when `always`.
    """
    root, how = data_dir_candidate()
    shipped = read_checksums(checksums)
    required = [f.relpath for f in REQUIRED_FILES]
    relpaths = required + sorted(set(shipped) - set(required))
    content = content or {}
    return (
        root,
        how,
        [
            _check_one(_describe(rel), root / rel, shipped.get(rel), content.get(rel), always)
            for rel in relpaths
        ],
    )
