"""A cached TLG graph directory is checked before reuse (`graph_recipe.verify_graph`) for every file the jobs
read from it, `lexicon.txt` and `train.txt` included (eval_am and train_am read them): before, a reused
directory without `train.txt` failed later with a raw FileNotFoundError. Each refusal names the file and the
command that rebuilds the graph."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path

import pytest

from specbench.errors import DataError
from specbench.experiments.graph_recipe import (
    REUSED_FILES,
    GraphStats,
    build_graph,
    graph_dir,
    remove_abandoned_builds,
    verify_graph,
)
from specbench.experiments.registry import load_config

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
FIX = "Fix: rebuild the graph that holds it with `specbench graph build JOB.toml --force`"


@pytest.fixture
def tiny_tlg(tiny_tlg: Callable[..., Path]) -> Callable[..., Path]:
    """The conftest's tiny graph with `lm.raw.arpa` too, as the recipe writes every graph directory."""
    def build(name: str, order: int = 2) -> Path:
        directory = tiny_tlg(name, order)
        shutil.copyfile(directory / "lm.arpa", directory / "lm.raw.arpa")
        return directory

    return build


def _refused(directory: Path) -> str:
    with pytest.raises(DataError) as err:
        verify_graph(directory)
    assert FIX in str(err.value), err.value
    return str(err.value)


def test_a_whole_graph_passes(tiny_tlg: Callable[..., Path]) -> None:
    verify_graph(tiny_tlg("g"))


@pytest.mark.parametrize("name", ["train.txt", "lexicon.txt", "tokens.txt", "TLG.fst", "L_disambig.fst",
                                  "lm.raw.arpa"])
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


def test_emptied_or_cut_symbol_tables_and_texts_are_named(tiny_tlg: Callable[..., Path]) -> None:
    directory = tiny_tlg("g")
    for name in ("words.txt", "tokens.txt", "lexicon.txt", "train.txt"):
        whole = (directory / name).read_bytes()
        (directory / name).write_bytes(b"")  # as a copy cut short leaves it
        said = f"{name} is empty" if name.endswith(("lexicon.txt", "train.txt")) else f"{name} has 0 symbols"
        assert f"{directory}: this cached graph's files do not fit together ({said}" in _refused(directory)
        (directory / name).write_bytes(whole)
    verify_graph(directory)


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


def test_every_file_the_content_digest_covers_is_checked(tiny_tlg: Callable[..., Path]) -> None:
    """A file the recipe does not write would change the content digest that other caches key on."""
    directory = tiny_tlg("g")
    (directory / "notes.txt").write_text("x\n")
    refusal = _refused(directory)
    assert f"{directory}: this cached graph holds notes.txt, which the recipe does not write" in refusal
    assert set(REUSED_FILES) == {p.name for p in directory.iterdir()} - {"notes.txt"}  # tiny_tlg's files


def test_a_build_removes_the_partial_folders_of_dead_builds_only(tmp_path: Path) -> None:
    final = tmp_path / "graphs" / "slurp-0123"
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    dead = done.stdout.strip()  # the pid of a process that has ended
    here = socket.gethostname()
    gone, running = (final.with_name(f"{final.name}.partial-{here}-{pid}") for pid in (dead, os.getpid()))
    legacy, aside = final.with_name(f"{final.name}.partial-{dead}"), final.with_name(f"{final.name}.old-{here}-{dead}")
    other = final.with_name(f"other-0123.partial-{here}-{dead}")  # another graph's: not this build's
    elsewhere = final.with_name(f"{final.name}.partial-another-host-{dead}")  # its pid says nothing here
    for folder in (gone, running, legacy, aside, other, elsewhere):
        folder.mkdir(parents=True)
    remove_abandoned_builds(final)
    assert not any(f.exists() for f in (gone, legacy, aside)) and all(f.is_dir() for f in (running, other, elsewhere))


def test_the_graph_folder_keys_on_what_shapes_the_graph_only(tmp_path: Path) -> None:
    def folder(text: str) -> Path:
        (tmp_path / "g.toml").write_text(f'kind = "graph"\nname = "g"\n{text}')
        return graph_dir(load_config(tmp_path / "g.toml"))

    same = folder("")
    assert folder('[tracking]\nexperiment = "elsewhere"\n') == same  # where the run is logged
    assert folder('[lm]\nmemory = "2G"\n') == same  # lmplz's sorting memory
    assert folder("[lm]\norder = 2\n") != same


def test_a_forced_rebuild_swaps_the_old_graph_out_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The old folder used to be deleted file by file before the new one was renamed in, so a reader could
    find it half deleted; now it is renamed aside whole and removed once the new one is in place."""
    from specbench.experiments import graph_recipe

    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "home"))
    config = load_config(ROOT / "jobs" / "graph_slurp.toml")
    final = graph_dir(config)
    final.mkdir(parents=True)
    for name in ("stats.json", "TLG.fst"):
        (final / name).write_text("old")
    during = []

    def build(config: object, out: Path, step: object) -> GraphStats:
        during.append((final / "TLG.fst").read_text())  # the old graph stays whole while the new one builds
        (out / "TLG.fst").write_text("new")
        return GraphStats(**{f.name: 0 for f in fields(GraphStats)})

    monkeypatch.setattr(graph_recipe, "_build_into", build)
    assert not build_graph(config, force=True).reused and during == ["old"]
    assert (final / "TLG.fst").read_text() == "new" and [p.name for p in final.parent.iterdir()] == [final.name]
