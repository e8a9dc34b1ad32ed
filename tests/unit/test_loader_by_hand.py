"""The strict TOML loader by hand: how a bad value is shown (long values cut at 80 characters), the types a
number key takes (an integer for a float key, never a boolean), required keys of a table list, a suite's own
checks and default name, which files an earlier job of a suite counts as writing, and a nightly's missing job
left for the nightly to name."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbench.config.loader import _written_as, member_jobs
from specbench.errors import ConfigError
from specbench.experiments.registry import load_config

pytestmark = pytest.mark.unit


def write(tmp_path: Path, text: str, name: str = "job.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def refusal(path: Path) -> str:
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(path) in str(err.value)
    return str(err.value)


def test_a_value_of_79_characters_is_shown_whole_and_one_of_80_is_cut(tmp_path: Path) -> None:
    # repr("x" * 77) is 79 characters: shown as it is
    whole = refusal(write(tmp_path, f'kind = "graph"\nbogus = "{"x" * 77}"\n'))
    assert f"key 'bogus' = '{'x' * 77}': unknown key" in whole
    # repr("x" * 78) is 80 characters: its first 77 ("'" and 76 x) and "..."
    cut = refusal(write(tmp_path, f'kind = "graph"\nbogus = "{"x" * 78}"\n'))
    assert f"key 'bogus' = '{'x' * 76}...: unknown key" in cut


def test_a_float_key_takes_an_integer_as_a_float_but_not_a_boolean(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, 'kind = "bench_decoder"\nbeam = 15\n'))
    assert type(config.beam) is float and config.beam == 15.0
    message = refusal(write(tmp_path, 'kind = "bench_decoder"\nbeam = true\n'))
    assert "key 'beam' = True: wrong type bool; allowed: float. Fix: set 'beam' to an allowed value." in message


def test_a_path_key_given_a_number_is_refused(tmp_path: Path) -> None:
    message = refusal(write(tmp_path, 'kind = "bench_decoder"\ngraph_job = 3\n'))
    assert "key 'graph_job' = 3: wrong type; allowed: a path string" in message


def test_a_tolerance_without_its_metric_names_the_required_key(tmp_path: Path) -> None:
    message = refusal(write(tmp_path, 'kind = "nightly"\njobs = ["graph.toml"]\n[[tolerance]]\nmax_rise = 0.0\n'))
    assert "required key 'tolerance[0].metric' is missing. Fix: add it." in message


def test_a_suite_lists_job_paths_as_strings(tmp_path: Path) -> None:
    message = refusal(write(tmp_path, 'kind = "suite"\njobs = [1]\n'))
    assert "key 'jobs' = [1]: must be a non-empty list of job file paths (relative to the suite)" in message


def test_a_suite_may_not_list_a_nightly(tmp_path: Path) -> None:
    write(tmp_path, 'kind = "nightly"\njobs = ["graph.toml"]\n', "nightly.toml")
    message = refusal(write(tmp_path, 'kind = "suite"\njobs = ["nightly.toml"]\n', "suite.toml"))
    assert "key 'jobs' = 'nightly.toml': is itself a nightly; a suite lists jobs only" in message
    assert "Fix: list that nightly's jobs here instead (or run it with `specbench nightly`)." in message


def test_a_suite_is_named_after_its_file_unless_it_names_itself(tmp_path: Path) -> None:
    write(tmp_path, 'kind = "graph"\n', "graph.toml")
    assert load_config(write(tmp_path, 'kind = "suite"\njobs = ["graph.toml"]\n', "quick_run.toml")).name == "quick_run"
    named = write(tmp_path, 'kind = "suite"\nname = "mine"\njobs = ["graph.toml"]\n', "other.toml")
    assert load_config(named).name == "mine"
    for text, file in (('name = "nightly"\n', "plain.toml"), ("", "nightly.toml")):  # the nightly's tag
        message = refusal(write(tmp_path, f'kind = "suite"\n{text}jobs = ["graph.toml"]\n', file))
        assert "key 'name' = 'nightly': a plain suite may not be named 'nightly'" in message, message


@pytest.mark.parametrize(("file", "written"), [
    ("m/c.pt", True),               # the output itself
    ("m/c_nopersonal.pt", True),    # a sibling named after it
    ("m/c_context.pt", True),
    ("m/c2.pt", False),             # another stem that merely starts like it
    ("m/cx_nopersonal.pt", False),
    ("m/c_nopersonal.npz", False),  # another suffix
    ("n/c_nopersonal.pt", False),   # another folder
])
def test_which_files_a_job_writing_an_output_counts_as_writing(tmp_path: Path, file: str, written: bool) -> None:
    assert _written_as(tmp_path / file, tmp_path / "m/c.pt") is written


def test_a_nightly_leaves_its_missing_jobs_for_itself_to_name(tmp_path: Path) -> None:
    graph = write(tmp_path, 'kind = "graph"\n', "graph.toml")
    nightly = write(tmp_path, 'kind = "nightly"\njobs = ["missing.toml", "graph.toml"]\n', "nightly.toml")
    members = member_jobs(nightly, load_config(nightly), load_config)
    assert [path for path, _ in members] == [graph.resolve()]
