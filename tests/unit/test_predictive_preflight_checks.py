"""What `specbench validate` refuses for the predictive-ASR jobs (and every job whose name becomes a path)
before anything runs, and the damaged caches the jobs name instead of failing with a traceback. Each
refusal names the file, the key and the fix."""

from __future__ import annotations

import inspect
import json
import time
from pathlib import Path

import pytest

from specbench.cli import main
from specbench.errors import ConfigError, DataError
from specbench.experiments.registry import load_config

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
JOBS = ROOT / "jobs"
GRAPH = JOBS / "graph_slurp.toml"


def _refused(path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """The one-line error `specbench validate` gives for `path` (which must be refused)."""
    assert main(["validate", str(path)]) != 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and path.name in err and "Fix:" in err, err
    return " ".join(err.split())


def _predictive(tmp_path: Path, body: str, asr: str = "") -> Path:
    job = tmp_path / "pa.toml"
    job.write_text(f'kind = "predictive_asr"\nusers = 2\ntune_users = 2\nrun_habit_sweep = false\n{body}\n'
                   f'[asr]\ngraph_job = "{GRAPH}"\n{asr}\n')
    return job


def test_the_devel_users_are_never_the_measured_population(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """split = "devel" would measure on the users that chose the thresholds (and the usage check keyed both
    populations "devel", so one went unchecked): refused with the key and the fix."""
    job = _predictive(tmp_path, 'split = "devel"')
    err = _refused(job, capsys)
    assert "split = 'devel'" in err and 'Fix: set split = "test"' in err
    with pytest.raises(ConfigError, match="split"):
        load_config(job)
    assert main(["validate", str(_predictive(tmp_path, 'split = "test"'))]) == 0


@pytest.mark.parametrize(("body", "asr", "expected"), [
    ("", "partial_posteriors = true", 'asr.partial_posteriors = true with asr.mode = "oracle-asr"'),
    ('confidence_posterior = "models/confidence_slurp_posterior.pt"', "",
     "confidence_posterior = 'models/confidence_slurp_posterior.pt' with asr.mode = \"oracle-asr\""),
])
def test_oracle_partials_have_no_posteriors(tmp_path: Path, body: str, asr: str, expected: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    job = _predictive(tmp_path, body, f'mode = "oracle-asr"\n{asr}')
    err = _refused(job, capsys)
    assert expected in err and "Fix:" in err.split(expected)[1]


def test_a_posterior_model_is_not_trained_on_oracle_partials(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = tmp_path / "conf.toml"
    for asr in ("", "partial_posteriors = true\n"):
        job.write_text(f'kind = "train_confidence"\nmodels = ["posterior"]\noutput = "{tmp_path / "c.pt"}"\n'
                       f'[asr]\nmode = "oracle-asr"\ngraph_job = "{GRAPH}"\n{asr}')
        err = _refused(job, capsys)
        assert "oracle-asr" in err and "posterior" in err


def test_partials_off_the_model_frames_are_refused_by_validate(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """The run's own check (`partials._setup`) made by the preflight: before, validate said ok."""
    job = _predictive(tmp_path, "", "partial_every_ms = 100.0")
    assert load_config(job)  # the file loads; the frame rule is the acoustic model's
    assert "asr.partial_every_ms = 100 is not a whole number of the acoustic model's 40 ms" in _refused(job, capsys)


def test_an_adaptation_job_that_adapts_nothing_is_refused_by_validate(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    eval_job = tmp_path / "eval.toml"
    eval_job.write_text(f'kind = "eval_am"\nspeech_job = "{JOBS / "speech_quick.toml"}"\ngraph_job = "{GRAPH}"\n'
                        "[vtln]\nenabled = false\n[speaker_transform]\nenabled = false\n")
    job = _predictive(tmp_path, "", f'adaptation_job = "{eval_job}"')
    assert "has neither [vtln] nor [speaker_transform] enabled" in _refused(job, capsys)
    # oracle-asr applies no adaptation, so it is not checked there (as the run does not)
    assert main(["validate", str(_predictive(tmp_path, "", f'mode = "oracle-asr"\nadaptation_job = "{eval_job}"'))]) == 0
    capsys.readouterr()
    eval_job.write_text(eval_job.read_text().replace("[vtln]\nenabled = false", "[vtln]\nenabled = true"))
    assert main(["validate", str(job)]) == 0


@pytest.mark.parametrize("key", ["use_personal", "use_context", "use_posterior"])
def test_model_features_are_decided_by_models_in_a_confidence_job(tmp_path: Path, key: str,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """They were overwritten by each role's values without a word; a value equal to the default too."""
    job = tmp_path / "conf.toml"
    head = (f'kind = "train_confidence"\nmodels = ["personal"]\noutput = "{tmp_path / "c.pt"}"\ntrain_users = 2\n'
            f'devel_users = 2\ncalibrate_routine_share = false\n[asr]\ngraph_job = "{GRAPH}"\n')
    job.write_text(head + f"[model]\n{key} = false\n")
    err = _refused(job, capsys)
    assert f"key 'model.{key}' is set" in err and "`models = [...]` decides" in err
    job.write_text(head + "[model]\nepochs = 2\n")
    assert main(["validate", str(job)]) == 0


def test_a_requests_per_day_typo_is_refused_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = _predictive(tmp_path, "[usage]\nrequests_per_day = 34000.0")
    start = time.perf_counter()
    err = _refused(job, capsys)
    assert time.perf_counter() - start < 30
    assert "usage.requests_per_day" in err and "1000" in err


@pytest.mark.parametrize(("usage", "bound"), [("weeks = 100000", "104"), ("routine_size = [3, 100000000000000000000]",
                                                                          "1000")])
def test_a_usage_size_typo_is_refused_at_once(tmp_path: Path, usage: str, bound: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """They were simulated (for minutes), or overflowed numpy's integers, before anything said so."""
    start = time.perf_counter()
    err = _refused(_predictive(tmp_path, f"[usage]\n{usage}"), capsys)
    assert time.perf_counter() - start < 30 and "usage" in err and usage.split()[0] in err and bound in err, err


@pytest.mark.parametrize("kind", ["graph", "speech", "eval_am", "train_am", "train_mt", "real_speech"])
@pytest.mark.parametrize("name", ["../../escape", "", "a/b", "."])
def test_a_job_name_that_would_leave_the_work_directory_is_refused(tmp_path: Path, kind: str, name: str,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    job = tmp_path / "job.toml"
    job.write_text(f'kind = "{kind}"\nname = "{name}"\n')
    err = _refused(job, capsys)
    assert f"name must be letters, digits, '-' or '_', got {name!r}" in err and "Fix: set name" in err


def test_headline_thresholds_always_come_from_the_devel_sweeps() -> None:
    from specbench.experiments.predictive_asr.job import headline

    tuning = inspect.signature(headline).parameters["tuning"]
    assert tuning.default is inspect.Parameter.empty and "None" not in str(tuning.annotation)


@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe\x00", b'{"flite:rms": {"checkpoint": null}}',
                                     b'["a list"]', b""])
def test_a_damaged_adaptation_cache_names_the_file_and_the_fix(tmp_path: Path, content: bytes) -> None:
    from specbench.experiments.predictive_asr.adaptation import read_adaptation

    folder = tmp_path / "adapt-0123"
    folder.mkdir()
    (folder / "adaptation.json").write_bytes(content)
    with pytest.raises(DataError, match=rf"{folder / 'adaptation.json'} cannot be read .* Fix: delete it"):
        read_adaptation(folder)


def test_an_adaptation_cache_reads_back(tmp_path: Path) -> None:
    from specbench.experiments.predictive_asr.adaptation import read_adaptation

    saved = {"flite:rms": {"vtln_warp": 1.08, "vtln_utterances": 100.0, "checkpoint": "rms.pt",
                           "speaker_transform_utterances": 100.0},
             "espeak:en-us+f4": {"vtln_warp": 0.96, "vtln_utterances": 100.0, "checkpoint": None,
                                 "speaker_transform_utterances": 0.0}}
    folder = tmp_path / "adapt-x"
    folder.mkdir()
    (folder / "adaptation.json").write_text(json.dumps(saved))
    got = read_adaptation(folder)
    assert got.key == "adapt-x" and got.warps == {"flite:rms": 1.08, "espeak:en-us+f4": 0.96}
    assert got.checkpoints == {"flite:rms": folder / "rms.pt"}
    assert got.details["flite:rms"] == {"vtln_warp": 1.08, "vtln_utterances": 100.0,
                                        "speaker_transform_utterances": 100.0}
