"""A cached TLG graph directory is checked before reuse (`graph_recipe.verify_graph`) for every file the jobs
read from it, `lexicon.txt` and `train.txt` included (eval_am and train_am read them): before, a reused
directory without `train.txt` failed later with a raw FileNotFoundError. Each refusal names the file and the
command that rebuilds the graph."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path

import pytest

from specbench.errors import DataError
from specbench.experiments.graph_recipe import GraphStats, build_graph, graph_dir, verify_graph
from specbench.experiments.registry import load_config

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
FIX = "Fix: rebuild the graph that holds it with `specbench graph build JOB.toml --force`"


def _refused(directory: Path) -> str:
    with pytest.raises(DataError) as err:
        verify_graph(directory)
    assert FIX in str(err.value), err.value
    return str(err.value)


def test_a_whole_graph_passes(tiny_tlg: Callable[..., Path]) -> None:
    verify_graph(tiny_tlg("g"))


@pytest.mark.parametrize("name", ["train.txt", "lexicon.txt", "tokens.txt", "TLG.fst"])
def test_a_missing_file_is_named(name: str, tiny_tlg: Callable[..., Path]) -> None:
    directory = tiny_tlg("g")
    (directory / name).unlink()
    assert f"{directory}: this cached graph lacks {name}" in _refused(directory)


def test_a_damaged_lexicon_or_lm_text_is_named(tiny_tlg: Callable[..., Path]) -> None:
    directory = tiny_tlg("g")
    lexicon = directory / "lexicon.txt"
    lexicon.write_text(lexicon.read_text() + "broken line\n")
    assert f"{lexicon}, line 4: expected 3 tab-separated fields" in _refused(directory)
    lexicon.write_text(lexicon.read_text().replace("broken line\n", ""))
    verify_graph(directory)
    (directory / "train.txt").write_bytes(b"play caf\xe9\n")
    assert f"{directory / 'train.txt'}, line 1: not UTF-8 text" in _refused(directory)


def test_build_graph_refuses_a_reused_directory_without_train_txt(tiny_tlg: Callable[..., Path], tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the path every job takes (`build_graph` on a graph whose directory exists): the error comes
    before the graph is handed to a job."""
    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "home"))
    config = load_config(ROOT / "jobs" / "graph_slurp.toml")
    cached = graph_dir(config)
    cached.parent.mkdir(parents=True)
    shutil.copytree(tiny_tlg("g"), cached)
    stats = {f.name: [3] if f.name == "ngrams" else 1 for f in fields(GraphStats)}
    (cached / "stats.json").write_text(json.dumps(stats))
    assert build_graph(config).reused  # a whole cached directory is reused, not rebuilt
    (cached / "train.txt").unlink()
    with pytest.raises(DataError, match=f"{cached}: this cached graph lacks train.txt") as err:
        build_graph(config)
    assert FIX in str(err.value)


@pytest.mark.parametrize("name, damage", [
    ("TLG.fst", lambda path: path.write_bytes(path.read_bytes()[:40])),  # a truncated FST
    ("words.txt", lambda path: path.write_text("<eps> zero\n")),  # a symbol id that is not a number
    ("lm.arpa", lambda path: path.write_text("not an ARPA file\n")),
])
def test_a_damaged_graph_file_names_the_rebuild_that_replaces_it(name: str, damage: Callable[[Path], None],
                                                                 tiny_tlg: Callable[..., Path]) -> None:
    """The readers' own fixes say `--force`: without it `graph build` reuses the cached directory and meets
    the same damaged file again."""
    directory = tiny_tlg("g")
    damage(directory / name)
    with pytest.raises(DataError) as err:
        verify_graph(directory)
    assert name in str(err.value) and "`specbench graph build JOB.toml --force`" in str(err.value), err.value
