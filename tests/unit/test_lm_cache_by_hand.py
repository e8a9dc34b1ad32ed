"""The word LM's disk store by hand (`experiments/predictive_asr/lm_cache.py`): the store's folder is named
after the checkpoint's bytes (not its path), every completion setting, the device ("auto" resolved first), the
LM modules' code (a comment edit keeps it) and torch's version; what one cache wrote, another of the same key
reads back exactly, completions and scores apart; a half-written part under its temporary name is never read;
an unreadable part is an error naming it and the fix; a cache that knows every answer asks nothing."""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from specbench.errors import DataError
from specbench.experiments.predictive_asr.lm_cache import LM_MODULES, LmCache, store_dir
from specbench.prediction import lm_stage
from specbench.prediction.settings import CompletionSettings

pytestmark = pytest.mark.unit
SETTINGS = CompletionSettings(n_best=2, beam=3, max_new_words=4, batch_size=8)
# rows as the LM stage returns them: a completion row has no continuation, a score row has one
ROWS = [
    {"prefix": ["play"], "continuation": None, "log_prob": None, "status": "ok",
     "completions": [{"words": ["my", "music"], "log_prob": -1.5, "rank": 0},
                     {"words": ["jazz"], "log_prob": -2.75, "rank": 1}]},
    {"prefix": ["play"], "continuation": ["my", "music"], "completions": None, "log_prob": -2.25, "status": "ok"},
    {"prefix": ["what", "is"], "continuation": ["the", "time"], "completions": None, "log_prob": -0.5, "status": "ok"},
]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "home"))
    return tmp_path


@pytest.fixture
def checkpoint(home: Path) -> Path:
    path = home / "lm.pt"
    path.write_bytes(b"weights of a word LM")
    return path


def test_the_store_is_named_after_the_checkpoints_bytes_not_its_path(checkpoint: Path, home: Path) -> None:
    store = store_dir(checkpoint, SETTINGS, "cpu")
    # by hand: the first 16 hex digits of the checkpoint's sha256, then 8 of the settings and code, then the device
    digest = hashlib.sha256(b"weights of a word LM").hexdigest()[:16]
    assert store.parent == (home / "home").resolve() / "lm-cache"
    assert store.name.startswith(f"{digest}-") and store.name.endswith("-cpu") and len(store.name) == 16 + 1 + 8 + 4
    copy = home / "elsewhere" / "other-name.pt"
    copy.parent.mkdir()
    shutil.copy(checkpoint, copy)
    assert store_dir(copy, SETTINGS, "cpu") == store
    checkpoint.write_bytes(b"weights of another word LM")
    assert store_dir(checkpoint, SETTINGS, "cpu").name.split("-")[0] == hashlib.sha256(
        b"weights of another word LM").hexdigest()[:16]


@pytest.mark.parametrize("change", [{"n_best": 3, "beam": 3}, {"beam": 4}, {"max_new_words": 5},
                                    {"batch_size": 9}])
def test_every_completion_setting_has_its_own_store(checkpoint: Path, change: dict) -> None:
    assert store_dir(checkpoint, replace(SETTINGS, **change), "cpu") != store_dir(checkpoint, SETTINGS, "cpu")
    assert store_dir(checkpoint, replace(SETTINGS), "cpu") == store_dir(checkpoint, SETTINGS, "cpu")


def test_the_device_and_torchs_version_have_their_own_store(checkpoint: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    cpu = store_dir(checkpoint, SETTINGS, "cpu")
    assert store_dir(checkpoint, SETTINGS, "cuda").name == cpu.name[:-len("cpu")] + "cuda"
    monkeypatch.setattr(torch, "__version__", torch.__version__ + "+other")
    assert store_dir(checkpoint, SETTINGS, "cpu") != cpu


@pytest.mark.parametrize("module", LM_MODULES)
def test_an_edit_to_the_lm_code_starts_a_new_store_and_a_comment_does_not(
        module: str, checkpoint: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert set(LM_MODULES) >= {"lm.py", "completion.py", "lm_stage.py", "vocab.py", "lm_training.py"}
    code = home / "code"
    code.mkdir()
    for name in LM_MODULES:
        shutil.copy(Path(lm_stage.__file__).with_name(name), code / name)
    monkeypatch.setattr(lm_stage, "__file__", str(code / "lm_stage.py"))
    before = store_dir(checkpoint, SETTINGS, "cpu")
    with open(code / module, "a") as f:
        f.write("\n# a comment\n")
    assert store_dir(checkpoint, SETTINGS, "cpu") == before
    with open(code / module, "a") as f:
        f.write("\nEDITED = 1\n")
    assert store_dir(checkpoint, SETTINGS, "cpu") != before


def test_what_one_cache_wrote_another_reads_back(checkpoint: Path) -> None:
    first = LmCache(checkpoint, SETTINGS)
    assert first.store == store_dir(checkpoint, SETTINGS, "cpu") and not first.completions and not first.scores
    first._write_part(ROWS[:2])
    first._write_part(ROWS[2:])
    parts = sorted(p.name for p in first.store.iterdir())
    assert len(parts) == 2 and all(p.startswith("part-") and p.endswith(".parquet") for p in parts)  # no .tmp
    second = LmCache(checkpoint, SETTINGS)
    assert second.completions == {("play",): [(("my", "music"), -1.5, 0), (("jazz",), -2.75, 1)]}
    assert second.scores == {(("play",), ("my", "music")): -2.25, (("what", "is"), ("the", "time")): -0.5}
    assert second.computed == 0
    second.fill({("play",)}, {(("what", "is"), ("the", "time"))})  # all known: the LM stage is not started
    assert second.computed == 0
    assert not LmCache(checkpoint, replace(SETTINGS, max_new_words=5)).completions  # another key: another store
    in_memory = LmCache(checkpoint, SETTINGS, persist=False)
    assert in_memory.store is None and not in_memory.completions and not in_memory.scores


def test_auto_is_resolved_before_the_store_is_named(checkpoint: Path) -> None:
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    cache = LmCache(checkpoint, SETTINGS, device="auto")
    assert cache.device == expected and cache.store == store_dir(checkpoint, SETTINGS, expected)


def test_a_half_written_part_under_its_temporary_name_is_not_read(checkpoint: Path) -> None:
    first = LmCache(checkpoint, SETTINGS)
    first._write_part(ROWS[1:2])
    (first.store / ".part-0123abcd.parquet.tmp").write_bytes(b"PAR1 half a part")  # a writer that died
    assert LmCache(checkpoint, SETTINGS).scores == {(("play",), ("my", "music")): -2.25}


def test_a_truncated_part_is_an_error_naming_it_and_the_fix(checkpoint: Path) -> None:
    first = LmCache(checkpoint, SETTINGS)
    first._write_part(ROWS)
    (part,) = first.store.glob("part-*.parquet")
    data = part.read_bytes()
    part.write_bytes(data[:len(data) // 2])
    with pytest.raises(DataError, match=rf"LM cache part {part} cannot be read .*Fix: delete it .*{first.store}"):
        LmCache(checkpoint, SETTINGS)


def test_a_missing_checkpoint_is_an_error_with_the_fix(home: Path) -> None:
    with pytest.raises(DataError, match=r"prediction LM .*missing\.pt does not exist\. Fix: train it"):
        LmCache(home / "missing.pt", SETTINGS)


def test_a_part_without_the_parts_columns_is_an_error_naming_them(checkpoint: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    store = LmCache(checkpoint, SETTINGS).store
    store.mkdir(parents=True)
    pq.write_table(pa.table({"prefix": [["play"]], "log_prob": [-1.0]}), store / "part-other.parquet")
    with pytest.raises(DataError, match=r"part-other\.parquet cannot be read \(it has no column continuation, "
                                        r"completions\)\. Fix: delete it"):
        LmCache(checkpoint, SETTINGS)
