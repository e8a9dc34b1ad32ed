"""Find the shared data and check every file the jobs read.

The data directory is `SPECBENCH_DATA`, else `../shared/data` beside the checkout. Each file a job reads is
listed in `REQUIRED_FILES` with what it is and where it comes from, so that `specbench data check` can say
what is missing and how to get it, and a job can fail early with a message that names the file and the fix.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path

from specbench.errors import DataError
from specbench.paths import data_dir_candidate


@dataclass(frozen=True)
class DataFile:
    """One file a job reads, relative to the data directory."""

    relpath: str
    what: str
    source: str


_SLURP = "SLURP (https://github.com/pswietojanski/slurp, CC BY 4.0): dataset/slurp/*.jsonl"
_SLURP_SPK = "SLURP speaker metadata, derived from SLURP's per-recording CSV files (CC BY 4.0)"
_M30K = "Multi30k task 1 raw text (https://github.com/multi30k/dataset, data/task1/raw)"
REQUIRED_FILES: tuple[DataFile, ...] = (
    DataFile("slurp/lm.txt.gz", "SLURP training text, one sentence per recording", _SLURP),
    DataFile("slurp/devel.jsonl.gz", "SLURP devel set (JSON lines)", _SLURP),
    DataFile("slurp/test.jsonl.gz", "SLURP test set (JSON lines)", _SLURP),
    DataFile("slurp/speakers/SLURP_csv_slurp_test_per_speaker.csv.gz", "test recordings per speaker", _SLURP_SPK),
    *(
        DataFile(f"slurp/speakers/SLURP_csv_slurp_mini_{g}.csv.gz", "train+test recordings per speaker", _SLURP_SPK)
        for g in ("FE", "FO", "ME", "MO", "UNK")
    ),
    DataFile("cmudict/cmudict.dict", "CMU Pronouncing Dictionary", "https://github.com/cmusphinx/cmudict"),
    DataFile("cmudict/cmudict.phones", "CMUdict phone set (39 phones)", "https://github.com/cmusphinx/cmudict"),
    *(
        DataFile(f"multi30k/{split}.{lang}.gz", f"Multi30k {split} ({lang})", _M30K)
        for split in ("train", "val", "test_2016_flickr", "test_2017_flickr")
        for lang in ("de", "en")
    ),
)


@dataclass(frozen=True)
class FileCheck:
    """The outcome of checking one required file."""

    file: DataFile
    path: Path
    problem: str | None  # None when the file is present and readable

    @property
    def ok(self) -> bool:
        return self.problem is None


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
    """Absolute path of one data file, checked to exist; the error says what the file is and where to get it."""
    root = data_dir()
    path = root / relpath
    if not path.is_file():
        known = {f.relpath: f for f in REQUIRED_FILES}.get(relpath)
        hint = f" It is the {known.what}; get it from {known.source}." if known else ""
        raise DataError(f"missing data file {path}.{hint} Run `specbench data check` for the full list.")
    return path


def _problem(path: Path) -> str | None:
    if not path.exists():
        return "missing"
    if not path.is_file():
        return "not a regular file"
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as fh:
                while fh.read(1 << 20):
                    pass
        else:
            with path.open("rb") as fh:
                if not fh.read(1):
                    return "empty"
    except (OSError, EOFError) as err:
        return f"unreadable ({err})"
    return None


def check_all() -> tuple[Path, str, list[FileCheck]]:
    """Check every required file: the data directory, how it was chosen, and one result per file."""
    root, how = data_dir_candidate()
    return root, how, [FileCheck(f, root / f.relpath, _problem(root / f.relpath)) for f in REQUIRED_FILES]
