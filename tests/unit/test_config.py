"""The TOML loader: valid jobs load; unknown keys, wrong types and out-of-range values are rejected."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbench.config import GraphConfig, SuiteConfig, config_to_dict, flatten
from specbench.errors import ConfigError
from specbench.experiments.registry import load_config

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str, name: str = "job.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_shipped_jobs_load() -> None:
    config = load_config(ROOT / "jobs/graph_slurp.toml")
    assert isinstance(config, GraphConfig)
    assert config.lm.order == 3 and config.lm.deduplicate and config.lm.extra_vocabulary == ("devel", "test")
    suite = load_config(ROOT / "jobs/quick.toml")
    assert isinstance(suite, SuiteConfig)
    assert suite.jobs[0] == (ROOT / "jobs/graph_slurp.toml").resolve()


def test_defaults_fill_missing_sections(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, 'kind = "graph"\n'))
    assert config == GraphConfig()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('kind = "graph"\nbogus = 1\n', ["'bogus'", "unknown key", "allowed keys here", "lm"]),
        ('kind = "graph"\n[lm]\nordr = 3\n', ["'lm.ordr'", "unknown key", "order"]),
        ('kind = "graph"\n[lm]\norder = "3"\n', ["'lm.order'", "'3'", "wrong type str", "allowed: int"]),
        ('kind = "graph"\n[lm]\norder = 3.0\n', ["'lm.order'", "wrong type float"]),
        ('kind = "graph"\n[lm]\norder = true\n', ["'lm.order'", "wrong type bool"]),
        ('kind = "graph"\n[lm]\norder = 9\n', ["'lm.order'", "= 9", "out of range", "allowed: 1 <= lm.order <= 6"]),
        ('kind = "graph"\n[lm]\norder = 0\n', ["'lm.order'", "out of range"]),
        ('kind = "graph"\n[lm]\nextra_vocabulary = ["train"]\n', ["'lm.extra_vocabulary[0]'", "'devel'"]),
        ('kind = "graph"\n[lm]\nextra_vocabulary = "test"\n', ["'lm.extra_vocabulary'", "a list"]),
        ('kind = "graph"\nlm = 3\n', ["'lm'", "must be a table"]),
        ('kind = "graph"\nname = "a b"\n', ["name must be letters"]),
        ('kind = "graf"\n', ["'kind'", "unknown job kind", "'graph'", "'suite'"]),
        ('name = "x"\n', ["required key 'kind'"]),
        ('kind = "graph"\n[lm\n', ["not valid TOML"]),
    ],
)
def test_rejections_name_file_key_value_and_allowed(tmp_path: Path, text: str, expected: list[str]) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert str(path) in message
    for fragment in expected:
        assert fragment in message, message


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such job file"):
        load_config(tmp_path / "nope.toml")


def test_suite_rejects_missing_job_and_unknown_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(write(tmp_path, 'kind = "suite"\njobs = ["missing.toml"]\n'))
    with pytest.raises(ConfigError, match="unknown key"):
        load_config(write(tmp_path, 'kind = "suite"\njobs = ["x.toml"]\nextra = 1\n'))
    with pytest.raises(ConfigError, match="non-empty list"):
        load_config(write(tmp_path, 'kind = "suite"\njobs = []\n'))


def test_resolved_config_round_trips_to_params() -> None:
    data = config_to_dict(GraphConfig())
    assert data["kind"] == "graph" and data["lm"]["order"] == 3
    params = flatten(data)
    assert params["lm.order"] == "3"
    assert params["lm.extra_vocabulary"] == "devel,test"
    assert params["tracking.experiment"] == "graph"


def test_suite_may_not_nest_and_scales_may_not_be_empty(tmp_path: Path) -> None:
    write(tmp_path, 'kind = "suite"\njobs = ["graph.toml"]\n', "inner.toml")
    write(tmp_path, 'kind = "graph"\n', "graph.toml")
    with pytest.raises(ConfigError, match="is itself a suite"):
        load_config(write(tmp_path, 'kind = "suite"\njobs = ["inner.toml"]\n', "outer.toml"))
    with pytest.raises(ConfigError, match="acoustic_scales must list at least one value"):
        load_config(write(tmp_path, 'kind = "eval_am"\n[decode]\nacoustic_scales = []\n'))


def test_a_word_floor_without_a_sample_is_refused_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"top-level keys: sample_min_words .* set max_per_set too"):
        load_config(write(tmp_path, 'kind = "real_speech"\nsample_min_words = 3\n'))
    with pytest.raises(ConfigError, match=r"section \[decode\]: acoustic_scales"):
        load_config(write(tmp_path, 'kind = "eval_am"\n[decode]\nacoustic_scales = []\n'))
