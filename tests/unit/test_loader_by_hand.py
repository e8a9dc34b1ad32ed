"""The strict TOML loader by hand: how a bad value is shown (long values cut at 80 characters), the types a
number key takes (an integer for a float key, never a boolean), required keys of a table list, a suite's own
checks and default name, which files an earlier job of a suite counts as writing, and a nightly's missing job
left for the nightly to name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specbench.config.loader import member_jobs
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


def test_a_table_for_a_list_of_tables_says_to_double_its_brackets(tmp_path: Path) -> None:
    message = refusal(write(tmp_path, 'kind = "nightly"\njobs = ["g.toml"]\n[tolerance]\nmetric = "x"'))
    assert "allowed: a list. Fix: write each table as [[tolerance]]." in message


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


def test_a_nightly_leaves_its_missing_jobs_for_itself_to_name(tmp_path: Path) -> None:
    graph = write(tmp_path, 'kind = "graph"\n', "graph.toml")
    nightly = write(tmp_path, 'kind = "nightly"\njobs = ["missing.toml", "graph.toml"]\n', "nightly.toml")
    members = member_jobs(nightly, load_config(nightly), load_config)
    assert [path for path, _ in members] == [graph.resolve()]


@pytest.mark.parametrize(("text", "said"), [
    ('kind = "speech"\nseed = -1\n', "key 'seed' = -1: out of range"),
    ('kind = "train_am"\n[training]\nseed = -1\n', "key 'training.seed' = -1: out of range"),
    ('kind = "train_mt"\n[training]\nseed = 4294967296\n', "key 'training.seed' = 4294967296: out of range"),
    ('kind = "train_lm"\n[training]\nseed = -1\n', "seed = -1: out of range"),
    ('kind = "bench_decoder"\nbeam = 1' + "0" * 400 + "\n", "key 'beam' = 1000000000.*: too large for a number"),
])
def test_seeds_below_zero_and_numbers_too_large_for_a_float_are_refused_at_load(tmp_path: Path, text: str,
                                                                              said: str) -> None:
    assert re.search(said, refusal(write(tmp_path, text))), refusal(write(tmp_path, text))

