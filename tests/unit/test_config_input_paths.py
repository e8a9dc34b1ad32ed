"""Input paths of job files: where `.specbench/...` resolves (the work directory, `SPECBENCH_HOME` when set),
folders where a file is needed, and values the loader must refuse before any MLflow run opens. Real TOML
files in tmp_path, loaded through the real loader, `check_inputs` and `specbench validate`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specbench.cli import main
from specbench.config.loader import check_inputs
from specbench.errors import ConfigError, DataError
from specbench.experiments.registry import load_config
from specbench.paths import from_root

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
GRAPH_JOB = ROOT / "jobs/graph_slurp.toml"


def write(tmp_path: Path, text: str, name: str = "job.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def validate(path: Path) -> None:
    check_inputs(path, load_config(path), load_config)


# (A) `.specbench/...` is the work directory


def test_work_directory_paths_follow_specbench_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("SPECBENCH_HOME", str(home))
    assert from_root(Path(".specbench/scores/x/test.parquet")) == home.resolve() / "scores/x/test.parquet"
    assert from_root(Path("models/am_slurp.pt")) == ROOT / "models/am_slurp.pt"
    assert not home.exists()  # resolving creates nothing
    monkeypatch.delenv("SPECBENCH_HOME")
    assert from_root(Path(".specbench/scores/x")) == (ROOT / ".specbench").resolve() / "scores/x"


def test_the_quick_decoder_benchmark_reads_its_scores_under_specbench_home(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from specbench.benchmarks.decoder.bench import scores_path

    home = tmp_path / "home"
    monkeypatch.setenv("SPECBENCH_HOME", str(home))
    job = ROOT / "jobs/bench_decoder_quick.toml"
    config = load_config(job)
    scores = home.resolve() / "scores/am_slurp/test.parquet"
    missing = rf"key 'scores' = .*: {re.escape(str(scores))} does not exist\. Fix: write them first"
    with pytest.raises(DataError, match=missing):
        validate(job)  # validate names the file under SPECBENCH_HOME, not the checkout's
    scores.parent.mkdir(parents=True)
    scores.write_bytes(b"")
    validate(job)
    assert scores_path(config, job) == scores  # the run reads the very file validate checked


def test_the_hclg_benchmark_reads_the_real_speech_score_folder_under_specbench_home(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("SPECBENCH_HOME", str(home))
    job = ROOT / "jobs/bench_decoder_hclg.toml"
    folder = home.resolve() / "real_speech/scores"
    with pytest.raises(DataError, match=rf"{re.escape(str(folder))} does not exist\. Fix: write them first "
                                        r"\(`specbench run jobs/real_speech\.toml`\), or"):
        validate(job)
    folder.mkdir(parents=True)
    validate(job)  # a folder is allowed here: workload = "real_speech"


# (B) a folder (or the project root) where a file is needed


def test_a_model_key_naming_a_folder_is_refused(tmp_path: Path) -> None:
    job = write(tmp_path, 'kind = "simultrans"\nbpe_model = "models"\n')
    folder = re.escape(str(ROOT / "models"))
    expected = rf"job.toml: key 'bpe_model' = 'models': {folder} is a folder; it must name a file\. Fix: "
    with pytest.raises(ConfigError, match=expected):
        validate(job)


def test_a_job_key_naming_a_folder_is_refused(tmp_path: Path) -> None:
    job = write(tmp_path, 'kind = "bench_decoder"\ngraph_job = "."\nscores = "models"\n')
    with pytest.raises(ConfigError, match=r"job.toml: key 'graph_job' = '\.': .* is a folder; it must name a "
                                          r"job file\. Fix: name an existing kind = \"graph\" job file"):
        validate(job)


def test_scores_may_be_a_folder_only_for_the_real_speech_workload(tmp_path: Path) -> None:
    folder = tmp_path / "scores"
    folder.mkdir()
    held_out = write(tmp_path, f'kind = "bench_decoder"\ngraph_job = "{GRAPH_JOB}"\nscores = "models"\n')
    expected = (r"key 'scores' = 'models': .* is a folder; it must name a file "
                r"\(a folder only with workload = \"real_speech\"\)\. Fix: write them")
    with pytest.raises(ConfigError, match=expected):
        validate(held_out)
    real = write(tmp_path, f'kind = "bench_decoder"\nworkload = "real_speech"\ngraph_job = "{GRAPH_JOB}"\n'
                           f'scores = "{folder}"\n', "real.toml")
    validate(real)


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_path_is_refused_when_the_job_is_read(tmp_path: Path, value: str) -> None:
    job = write(tmp_path, f'kind = "bench_decoder"\nscores = "{value}"\n')
    expected = r"job.toml: key 'scores' = '\s*': an empty path .* Fix: set 'scores' to the path of a file"
    with pytest.raises(ConfigError, match=expected):
        load_config(job)


def test_validate_refuses_a_folder_with_one_message(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    job = write(tmp_path, 'kind = "simultrans"\nbpe_model = "models"\n')
    assert main(["validate", str(job)]) == 2
    err = capsys.readouterr().err
    assert "key 'bpe_model' = 'models'" in err and "is a folder" in err and "Fix:" in err
    assert "Traceback" not in err


# (C) values that used to fail with a traceback


def test_a_kind_that_is_not_a_string_is_refused(tmp_path: Path) -> None:
    job = write(tmp_path, 'kind = ["graph"]\n')
    with pytest.raises(ConfigError, match=r"job.toml: key 'kind' = \['graph'\]: wrong type list; allowed: a "
                                          r"string, one of 'graph'.*Fix: give one kind as a quoted string"):
        load_config(job)


@pytest.mark.parametrize(("value", "problem"), [
    ("", r"experiment = '': an empty experiment name\. Fix: set experiment to a name"),
    ("   ", r"experiment = '   ': an empty experiment name\. Fix:"),
    (" bench", r"experiment = ' bench': spaces around the name .* Fix: write experiment = 'bench'"),
])
def test_an_empty_or_padded_experiment_name_is_refused(tmp_path: Path, value: str, problem: str) -> None:
    job = write(tmp_path, f'kind = "graph"\n[tracking]\nexperiment = "{value}"\n')
    with pytest.raises(ConfigError, match=r"job.toml: section \[tracking\]: " + problem) as err:
        load_config(job)
    assert str(err.value).count("Fix:") == 1


def test_a_good_experiment_name_loads(tmp_path: Path) -> None:
    job = write(tmp_path, 'kind = "graph"\n[tracking]\nexperiment = "graph_nightly"\n')
    assert load_config(job).tracking.experiment == "graph_nightly"
