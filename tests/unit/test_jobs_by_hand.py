"""The job configs' own checks, read from job files: each range is checked on both sides of its bound (the last
value accepted and the first refused), each cross-key rule refuses the bad combination with a message naming
the file, the section or key, the value and the fix, and accepts the nearest good one."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from specbench.config import CorpusSection, NightlyConfig, ToleranceRule, WordConfidenceConfig
from specbench.errors import ConfigError
from specbench.experiments.registry import load_config

pytestmark = pytest.mark.unit


def loads(tmp_path: Path, text: str):
    path = tmp_path / "job.toml"
    path.write_text(text)
    return load_config(path)


def refusal(tmp_path: Path, text: str) -> str:
    """The message of the ConfigError the job file gets; it always names the file."""
    path = tmp_path / "job.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert str(path) in message
    return message


# (kind, section line or "", key, last accepted, first refused, the bounds as the message prints them)
BOUNDS = [
    ("graph", "[sphinx]", "silence_prob", 0.01, 0.0, "0.01 <= sphinx.silence_prob <= 0.99"),
    ("graph", "[sphinx]", "silence_prob", 0.99, 1.0, "0.01 <= sphinx.silence_prob <= 0.99"),
    ("graph", "[lm]", "order", 1, 0, "1 <= lm.order <= 6"),
    ("graph", "[lm]", "order", 6, 7, "1 <= lm.order <= 6"),
    ("real_speech", "", "bootstrap_samples", 10, 9, "10 <= bootstrap_samples <= 100000"),
    ("word_confidence", "", "calibration_bins", 2, 1, "2 <= calibration_bins <= 100"),
    ("eval_am", "[vtln]", "low", 1.0, 1.01, "0.5 <= vtln.low <= 1.0"),
    ("eval_am", "[vtln]", "low", 0.5, 0.49, "0.5 <= vtln.low <= 1.0"),
]


@pytest.mark.parametrize(("kind", "section", "key", "good", "bad", "allowed"), BOUNDS)
def test_a_range_accepts_its_bound_and_refuses_the_next_value(tmp_path: Path, kind: str, section: str, key: str,
                                                              good: float, bad: float, allowed: str) -> None:
    config = loads(tmp_path, f'kind = "{kind}"\n{section}\n{key} = {good}\n')
    holder = getattr(config, section.strip("[]")) if section else config
    assert getattr(holder, key) == good
    message = refusal(tmp_path, f'kind = "{kind}"\n{section}\n{key} = {bad}\n')
    dotted = f"{section.strip('[]')}.{key}" if section else key
    assert f"key '{dotted}' = {bad!r}: out of range; allowed: {allowed}. Fix: set '{dotted}'" in message


def test_a_job_name_may_hold_dashes_and_underscores(tmp_path: Path) -> None:
    assert loads(tmp_path, 'kind = "graph"\nname = "slurp-quick_2"\n').name == "slurp-quick_2"
    assert "name must be letters, digits, '-' or '_'" in refusal(tmp_path, 'kind = "graph"\nname = "a.b"\n')
    assert "(at most 100)" in refusal(tmp_path, f'kind = "graph"\nname = "{"a" * 101}"\n')  # a file name's length


def test_an_experiment_name_with_a_trailing_space_is_refused_with_the_trimmed_name(tmp_path: Path) -> None:
    message = refusal(tmp_path, 'kind = "graph"\n[tracking]\nexperiment = "bench "\n')
    assert "experiment = 'bench ': spaces around the name" in message
    assert "Fix: write experiment = 'bench'" in message


def test_a_corpus_built_in_code_names_its_own_key() -> None:
    # the plan calls it train_copies_per_sentence; the section's key is train_copies
    with pytest.raises(ValueError, match=r"^train_copies = 0: out of range; allowed: train_copies >= 1$"):
        CorpusSection(train_copies=0)


def test_a_word_floor_of_one_needs_a_sample_too(tmp_path: Path) -> None:
    message = refusal(tmp_path, 'kind = "real_speech"\nsample_min_words = 1\n')
    assert "top-level keys: sample_min_words only chooses the clips of a sample: set max_per_set too" in message
    config = loads(tmp_path, 'kind = "real_speech"\nsample_min_words = 1\nmax_per_set = 2\n')
    assert (config.sample_min_words, config.max_per_set) == (1, 2)


def test_a_devel_grid_point_of_zero_is_refused_in_code() -> None:
    # the loader's range (>= 0.1) stops 0 in a job file; a config built in code is checked by the grid rule
    with pytest.raises(ValueError, match=r"lattice_beams = \[0\.0, 4\.0\]: 0\.0 is not a finite number > 0\. "
                                         r"Fix: list distinct numbers > 0"):
        WordConfidenceConfig(lattice_beams=(0.0, 4.0))
    assert WordConfidenceConfig(lattice_beams=(0.1, 4.0)).lattice_beams == (0.1, 4.0)


def test_translation_jobs_need_german_and_english(tmp_path: Path) -> None:
    message = refusal(tmp_path, 'kind = "train_mt"\nsource = "de"\ntarget = "fr"\n')
    assert "top-level keys: source and target must be 'de' and 'en' (either way), got 'de' -> 'fr'" in message
    assert loads(tmp_path, 'kind = "train_mt"\nsource = "en"\ntarget = "de"\n').source == "en"


@pytest.mark.parametrize("splits", ['["val"]', '["train"]', '["test_2016_flickr", "test_2016_flickr"]', "[]"])
def test_test_splits_exclude_val_train_and_repeats(tmp_path: Path, splits: str) -> None:
    message = refusal(tmp_path, f'kind = "simultrans"\ntest_splits = {splits}\n')
    assert ("test_splits must name at least one split, each once, none of them the val split 'val' or train" in message
            or "key 'test_splits' = ['test_2016_flickr', 'test_2016_flickr']: 'test_2016_flickr' is listed twice" in message)


def test_settings_are_never_chosen_on_a_test_set(tmp_path: Path) -> None:
    message = refusal(tmp_path, 'kind = "simultrans"\nval_split = "test_2016_flickr"\ntest_splits = ["val"]\n')
    assert "val_split = 'test_2016_flickr': settings are chosen on val only" in message and "Fix: use 'val'" in message


def test_grid_k_must_be_one_of_ks(tmp_path: Path) -> None:
    message = refusal(tmp_path, 'kind = "simultrans"\nks = [1, 3]\ngrid_k = 2\n')
    assert "grid_k 2 must be one of ks [1, 3]" in message
    assert loads(tmp_path, 'kind = "simultrans"\nks = [1, 3]\ngrid_k = 1\n').grid_k == 1


def test_a_range_pair_may_be_one_point_but_not_reversed(tmp_path: Path) -> None:
    config = loads(tmp_path, 'kind = "predictive_asr"\n[asr]\nrate_range = [1.0, 1.0]\n')
    assert config.asr.rate_range == (1.0, 1.0)
    message = refusal(tmp_path, 'kind = "predictive_asr"\n[asr]\nrate_range = [1.1, 1.0]\n')
    assert "section [asr]: asr.rate_range must be [low, high] with low <= high, got [1.1, 1.0]" in message
    config = loads(tmp_path, 'kind = "predictive_asr"\n[habit]\nsnr_db_ranges = [[20.0, 20.0]]\n')
    assert config.habit.snr_db_ranges == ((20.0, 20.0),)
    message = refusal(tmp_path, 'kind = "predictive_asr"\n[habit]\nsnr_db_ranges = [[20.0, 19.0]]\n')
    assert "habit.snr_db_ranges: each must be [low, high] with low <= high, got [20.0, 19.0]" in message


def test_partial_posteriors_need_a_cpu_backend(tmp_path: Path) -> None:
    config = loads(tmp_path, 'kind = "predictive_asr"\n[asr]\npartial_posteriors = true\nbackend = "cpu_numpy"\n')
    assert config.asr.backend == "cpu_numpy"
    message = refusal(tmp_path, 'kind = "predictive_asr"\n[asr]\npartial_posteriors = true\nbackend = "twin"\n')
    assert "asr.partial_posteriors needs partial lattices, which the twin backend" in message
    assert 'does not make yet: set asr.backend = "cpu"' in message


def test_each_confidence_model_is_named_once(tmp_path: Path) -> None:
    message = refusal(tmp_path, 'kind = "train_confidence"\nmodels = ["personal", "personal"]\n')
    assert "key 'models' = ['personal', 'personal']: 'personal' is listed twice. Fix: list each value" in message


def test_a_posterior_model_needs_partial_posteriors(tmp_path: Path) -> None:
    message = refusal(tmp_path, 'kind = "train_confidence"\nmodels = ["posterior"]\n')
    assert "set asr.partial_posteriors = true" in message
    config = loads(tmp_path, 'kind = "train_confidence"\nmodels = ["posterior"]\n[asr]\npartial_posteriors = true\n')
    assert config.models == ("posterior",)


def test_thresholds_must_rise_strictly(tmp_path: Path) -> None:
    message = refusal(tmp_path, 'kind = "predictive_asr"\nthresholds = [0.2, 0.1]\n')
    assert "thresholds must be strictly increasing and non-empty, got [0.2, 0.1]" in message
    assert loads(tmp_path, 'kind = "predictive_asr"\nthresholds = [0.1, 0.2]\n').thresholds == (0.1, 0.2)


def test_max_attempts_must_hold_one_and_no_repeat(tmp_path: Path) -> None:
    assert "max_attempts must include 1" in refusal(tmp_path, 'kind = "predictive_asr"\nmax_attempts = [2, 3]\n')
    message = refusal(tmp_path, 'kind = "predictive_asr"\nmax_attempts = [1, 2, 2]\n')
    assert "key 'max_attempts' = [1, 2, 2]: 2 is listed twice. Fix: list each value of 'max_attempts' once" in message
    # any list of choices: a second voice of the same name made more users of the same voice
    message = refusal(tmp_path, 'kind = "predictive_asr"\n[asr]\nvoices = ["flite:rms", "flite:rms"]\n')
    assert "key 'asr.voices' = ['flite:rms', 'flite:rms']: 'flite:rms' is listed twice" in message
    assert "key 'corpus.rates' = [1.0, 1]: 1.0 is listed twice" in refusal(tmp_path, 'kind = "speech"\n[corpus]\nrates = [1.0, 1]\n')
    assert loads(tmp_path, 'kind = "predictive_asr"\n[asr]\nrate_range = [1.0, 1.0]\n').asr.rate_range == (1.0, 1.0)
    assert loads(tmp_path, 'kind = "predictive_asr"\nmax_attempts = [1]\n').max_attempts == (1,)


@pytest.mark.parametrize(("kind", "text", "expected"), [
    ("predictive_asr", "cache_weights = []", "cache_weights: give at least one weight"),
    ("real_speech", "[search]\nbackends = []", "acoustic_scales and backends must list at least one value"),
    ("real_speech", "[pocketsphinx]\nlanguage_weights = []", "language_weights must list at least one value"),
])
def test_an_empty_list_is_refused(tmp_path: Path, kind: str, text: str, expected: str) -> None:
    assert expected in refusal(tmp_path, f'kind = "{kind}"\n{text}\n')


def test_a_tolerance_may_pin_a_metric_to_one_value() -> None:
    rule = ToleranceRule(metric="asr.wer", min=0.5, max=0.5)  # min == max: only 0.5 passes, still a rule
    assert (rule.min, rule.max) == (0.5, 0.5)
    with pytest.raises(ValueError, match="min = 0.5 is above max = 0.4"):
        ToleranceRule(metric="asr.wer", min=0.5, max=0.4)
    with pytest.raises(ValueError, match="max_drop = inf is not a finite number"):
        ToleranceRule(metric="asr.wer", max_drop=math.inf)


def test_a_nightly_has_one_tolerance_per_metric() -> None:
    rule = ToleranceRule(metric="asr.wer", max_rise=0.0)
    with pytest.raises(ValueError, match=r"each metric may have one \[\[tolerance\]\] only"):
        NightlyConfig(jobs=(Path("graph.toml"),), tolerance=(rule, rule))
    other = ToleranceRule(metric="asr.per", max_rise=0.0)
    assert len(NightlyConfig(jobs=(Path("graph.toml"),), tolerance=(rule, other)).tolerance) == 2
