"""`wfst.mapped` by hand: a graph file read through memory-mapped arrays holds the file's graph (start state
included), follows the file when it is rewritten, gives writable copy-on-write arrays that never change the
shared files, reuses a folder another process already put in place, and names the problem and the fix for a
missing graph or a damaged folder."""

from __future__ import annotations

import os
from pathlib import Path

import kaldifst
import numpy as np
import pytest

from specbench.errors import DataError
from specbench.wfst import mapped
from specbench.wfst.graph import read_graph

pytestmark = pytest.mark.unit

# start state 2: 2 --3:3/1--> 1 --eps:0/2--> 0 --5:6/0.5--> 1; state 1 final 0.5
GRAPH = "2 1 3 3 1\n1 0 0 0 2\n0 1 5 6 0.5\n1 0.5\n"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def write_graph(path: Path, text: str) -> Path:
    assert kaldifst.compile(text, keep_state_numbering=True).write(str(path))
    return path


def test_the_mapped_graph_keeps_a_start_state_other_than_zero(home: Path, tmp_path: Path) -> None:
    graph = mapped.mapped_graph(write_graph(tmp_path / "g.fst", GRAPH))
    assert graph.start == 2
    assert graph.final.tolist() == [np.inf, 0.5, np.inf]
    assert graph.emitting.ilabel.tolist() == [5, 3] and graph.epsilon.dest.tolist() == [0]


def test_a_rewritten_graph_file_is_mapped_again(home: Path, tmp_path: Path) -> None:
    path = write_graph(tmp_path / "g.fst", GRAPH)
    assert mapped.mapped_graph(path).num_arcs == 3
    write_graph(path, "0 1 7 7 0.25\n1\n")  # another graph under the same name
    os.utime(path, ns=(1, 1))  # a different modification time even on a coarse clock
    again = mapped.mapped_graph(path)
    assert again.start == 0 and again.emitting.ilabel.tolist() == [7]
    assert np.array_equal(again.final, read_graph(path).final)


def test_mapped_arrays_are_writable_copies_on_write(home: Path, tmp_path: Path) -> None:
    path = write_graph(tmp_path / "g.fst", GRAPH)
    graph = mapped.mapped_graph(path)
    assert graph.final.flags.writeable and graph.emitting.weight.flags.writeable
    graph.final[1] = 99.0  # a private copy of the page: the files the other processes map stay as they were
    assert mapped.mapped_graph(path).final.tolist() == [np.inf, 0.5, np.inf]


def test_a_missing_graph_file_is_a_data_error_with_the_fix(home: Path, tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"no such file\. Fix: build it with `specbench graph build`"):
        mapped.mapped_graph(tmp_path / "nope.fst")


def test_a_folder_another_process_put_in_place_first_is_used(home: Path, tmp_path: Path) -> None:
    path = write_graph(tmp_path / "g.fst", GRAPH)
    folder = mapped.mapped_dir(path)
    graph = read_graph(path)
    mapped._write(graph, folder)
    mapped._write(graph, folder)  # a second writer finds the folder there: no error, nothing left behind
    assert sorted(p.name for p in folder.parent.iterdir()) == [folder.name]
    assert mapped.mapped_graph(path).start == 2


def test_a_damaged_folder_is_a_data_error_naming_it(home: Path, tmp_path: Path) -> None:
    path = write_graph(tmp_path / "g.fst", GRAPH)
    mapped.mapped_graph(path)
    folder = mapped.mapped_dir(path)
    (folder / "epsilon_dest.npy").write_bytes(b"not an array")
    with pytest.raises(DataError, match="unreadable mapped graph .*Fix: delete that folder"):
        mapped.mapped_graph(path)


def test_a_new_folder_removes_those_of_changed_or_gone_files_and_abandoned_temporaries(home: Path,
                                                                                       tmp_path: Path) -> None:
    kept, gone = write_graph(tmp_path / "kept.fst", GRAPH), write_graph(tmp_path / "gone.fst", GRAPH)
    mapped.mapped_graph(kept), mapped.mapped_graph(gone)
    old_kept, old_gone = mapped.mapped_dir(kept), mapped.mapped_dir(gone)
    root = old_kept.parent
    (root / "0123456789abcdef").mkdir()  # a folder of an older version: no record of its file
    abandoned, filling = root / "feedbeef.abandoned", root / "feedbeef.filling"  # writers' temporaries
    abandoned.mkdir(), filling.mkdir()
    os.utime(abandoned, (1, 1))
    gone.unlink()
    write_graph(kept, "0 1 7 7 0.25\n1\n")
    os.utime(kept, ns=(1, 1))
    assert mapped.mapped_graph(kept).emitting.ilabel.tolist() == [7]
    assert sorted(p.name for p in root.iterdir()) == sorted([mapped.mapped_dir(kept).name, filling.name])
    assert not old_kept.exists() and not old_gone.exists()
