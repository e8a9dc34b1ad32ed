"""`experiments.predictive_asr.checks`, called directly: partials on whole 40 ms output frames (the nearest
multiple offered, never 0 ms), the `[model]` keys a train_confidence job may not set (the first one named, all
of them in the fix), an adaptation job that enables either adaptation, each confidence key checked for its
model's role (the message gives the trained and the wanted features and the shipped file of that role), a
model an earlier job writes passed by only when it is missing, and the usage settings simulated for both
populations of a job (the devel users counted by `tune_users` or `devel_users`, the measured ones by `users`
or `train_users`), errors prefixed with the job file. Uses the shipped models and the SLURP data."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from specbench.config import AsrSection, PredictiveAsrConfig, TrainConfidenceConfig
from specbench.data.usage import UsageSettings
from specbench.errors import ConfigError, DataError
from specbench.experiments.predictive_asr.checks import (
    adaptation_job,
    check_model_section,
    check_partial_interval,
    load_models,
    train_confidence_preflight,
    usage_checks,
)

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
JOBS = ROOT / "jobs"
JOB = Path("pa.toml")


@pytest.mark.parametrize(("every_ms", "nearest"), [(10.0, 40), (100.0, 80), (140.0, 160)])
def test_partials_off_the_frames_name_the_nearest_multiple(every_ms: float, nearest: int) -> None:
    # 10/40 = 0.25 frames rounds to 0, so 1 frame (40 ms); 2.5 rounds to 2 (80 ms), 3.5 to 4 (160 ms)
    with pytest.raises(ConfigError) as err:
        check_partial_interval(AsrSection(partial_every_ms=every_ms), JOB)
    assert str(err.value) == (f"pa.toml: asr.partial_every_ms = {every_ms:g} is not a whole number of the acoustic "
                              f"model's 40 ms output frames. Fix: use a multiple of 40, e.g. {nearest}.")
    for whole in (40.0, 120.0, 4000.0):
        check_partial_interval(AsrSection(partial_every_ms=whole), JOB)


def test_model_keys_that_models_decides_are_named(tmp_path: Path) -> None:
    job = tmp_path / "conf.toml"
    check_model_section(job)  # no file: a config built in code
    job.write_text('kind = "train_confidence"\n[model]\nuse_context = true\nepochs = 2\nuse_personal = false\n')
    with pytest.raises(ConfigError) as err:
        check_model_section(job)
    message = str(err.value)
    assert message.startswith(f"{job}: key 'model.use_personal' is set")  # the first in ROLE_KEYS' order
    assert message.endswith("Fix: remove model.use_personal, model.use_context and list the models to train in "
                            "`models`.")
    job.write_text('kind = "train_confidence"\n[model]\nepochs = 2\n')
    check_model_section(job)
    job.write_text('kind = "train_confidence"\n')
    check_model_section(job)


def test_an_adaptation_job_with_only_the_speaker_transform_adapts(tmp_path: Path) -> None:
    eval_job = tmp_path / "eval.toml"
    eval_job.write_text(f'kind = "eval_am"\nspeech_job = "{JOBS / "speech_quick.toml"}"\n'
                        f'graph_job = "{JOBS / "graph_slurp.toml"}"\n'
                        "[vtln]\nenabled = false\n[speaker_transform]\nenabled = true\n")
    assert adaptation_job(AsrSection(), tmp_path / "pa.toml") is None  # none named
    config = adaptation_job(AsrSection(adaptation_job=Path("eval.toml")), tmp_path / "pa.toml")
    assert config is not None and config.speaker_transform.enabled and not config.vtln.enabled


def test_the_shipped_models_have_their_roles() -> None:
    config = PredictiveAsrConfig(confidence_posterior=Path("models/confidence_slurp_posterior.pt"),
                                 asr=AsrSection(partial_posteriors=True))
    models = load_models(config, JOB)
    roles = [(m.use_personal, m.use_context, m.use_posterior)
             for m in (models.personal, models.no_personal, models.context, models.posterior)]
    assert roles == [(True, False, False), (False, False, False), (True, True, False), (True, False, True)]


@pytest.mark.parametrize(("key", "wrong", "trained", "wanted", "right"), [
    ("confidence", "nopersonal", (False, False, False), (True, False, False), ""),
    ("confidence_no_personal", "", (True, False, False), (False, False, False), "_nopersonal"),
    ("confidence_context", "", (True, False, False), (True, True, False), "_context"),
    ("confidence_posterior", "context", (True, True, False), (True, False, True), "_posterior"),
])
def test_a_model_of_another_role_is_refused_with_the_right_file(key: str, wrong: str, trained: tuple, wanted: tuple,
                                                                right: str) -> None:
    path = Path(f"models/confidence_slurp{'_' + wrong if wrong else ''}.pt")
    config = dataclasses.replace(PredictiveAsrConfig(asr=AsrSection(partial_posteriors=True)), **{key: path})
    with pytest.raises(DataError) as err:
        load_models(config, JOB)
    assert str(err.value) == (
        f"pa.toml: key '{key}' = '{path}' was trained with (use_personal, use_context, use_posterior) = {trained}; "
        f"the key needs {wanted}. Fix: point '{key}' at the model of that role (models/confidence_slurp{right}.pt), "
        "or retrain it with `specbench train confidence` and the job file of that model")


def test_only_a_missing_model_is_left_to_an_earlier_job(tmp_path: Path) -> None:
    missing = tmp_path / "later.pt"
    config = PredictiveAsrConfig(confidence=missing)
    models = load_models(config, JOB, written_later=True)
    assert models.personal is None and models.no_personal is not None and models.context is not None
    assert models.posterior is None  # not asked for
    with pytest.raises(DataError, match=f"^pa.toml: key 'confidence' = '{missing}': "):
        load_models(config, JOB)


# The fewest sentences of a user: 5 in the devel split (UNK-327) and in the test split (MO-050); the first user
# of the devel split has 35, of the test split 42, of the train split 129. A routine of at least 6 sentences so
# fits the first user of each split, but not every user.
TOO_LONG = UsageSettings(routine_size=(6, 12))


def _too_long(split: str, user: str) -> str:
    return (f"pa.toml: [usage] usage.routine_size = [6, 12]: user {user} of the {split} split has only 5 sentences, "
            "fewer than the routine's minimum. Fix: routine_size[0] <= 5 (e.g. [5, 12]).")


@pytest.mark.parametrize(("users", "tune_users", "split", "user"), [(1, 0, "devel", "UNK-327"),
                                                                     (0, 1, "test", "MO-050")])
def test_both_populations_of_a_predictive_job_are_simulated(users: int, tune_users: int, split: str,
                                                            user: str) -> None:
    config = PredictiveAsrConfig(users=users, tune_users=tune_users, run_habit_sweep=False, usage=TOO_LONG)
    with pytest.raises(ConfigError) as err:
        usage_checks(config, JOB)
    assert str(err.value) == _too_long(split, user)
    usage_checks(dataclasses.replace(config, users=1, tune_users=1), JOB)  # the first users fit


def test_a_pool_that_runs_out_names_the_job_file() -> None:
    config = PredictiveAsrConfig(users=1, tune_users=1, run_habit_sweep=False,
                                 usage=UsageSettings(requests_per_day=400.0))
    with pytest.raises(DataError, match=r"^pa.toml: \[usage\] usage simulation: user .* of the devel split makes"):
        usage_checks(config, JOB)


def test_the_devel_users_of_a_confidence_job_are_simulated() -> None:
    config = TrainConfidenceConfig(train_users=1, devel_users=0, calibrate_routine_share=False, usage=TOO_LONG)
    job = JOBS / "pa.toml"  # not a file: nothing to read; its graph job is jobs/graph_slurp.toml
    with pytest.raises(ConfigError) as err:
        train_confidence_preflight(config, job)
    assert str(err.value) == _too_long("devel", "UNK-327").replace("pa.toml", str(job))  # train's first user fits
