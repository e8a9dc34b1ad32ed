"""The predictive-ASR checks that read data, models and the job files a job names, made when a job is
validated and before its MLflow run opens (the registry's `preflight`), and again by the jobs themselves:
every usage setting simulated for every population (a routine longer than a user's sentences, a pool of new
texts that runs out), the confidence models' roles, partials on whole acoustic-model frames, and an
adaptation job that adapts something. Light to import: no Ray, no decoder.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from specbench.acoustic.inference import OUTPUT_FRAME_SHIFT_MS
from specbench.config import AsrSection, EvalAmConfig, PredictiveAsrConfig, TrainConfidenceConfig, read_toml
from specbench.data.usage import UsageSettings, population, simulate_usage
from specbench.errors import ConfigError, DataError
from specbench.experiments.job_refs import ctc_graph_job, referenced_job
from specbench.paths import from_root
from specbench.prediction.confidence import load_confidence


def simulate_population(split: str, users: int, usage: UsageSettings) -> pa.Table:
    """The simulated request log of the first `users` users of `split` (0: all)."""
    return simulate_usage(population(split, max_users=users or None, seed=usage.seed), usage)


def check_usage(splits: dict[str, int], variants: list[UsageSettings], job_path: Path) -> None:
    """Every usage setting the job will simulate, simulated for every population it simulates before
    anything is synthesized: a routine larger than a user's sentences (`ConfigError`) or a pool of new texts
    that runs out (`DataError`) stops the job here, naming the job file, the key and a value that works.
    Simulating is cheap (about a second per population)."""
    try:
        for split, users in splits.items():
            for usage in variants:
                simulate_population(split, users, usage)  # checks the routine
    except (ConfigError, DataError) as err:
        raise type(err)(f"{job_path}: [usage] {err}") from None


@dataclass(frozen=True)
class Models:
    """The confidence models: with the personal feature, without it, with the personal and context ones, and
    (optional) with the personal and the posterior ones."""

    personal: Any
    no_personal: Any
    context: Any
    posterior: Any = None


def load_models(config: PredictiveAsrConfig, job_path: Path, written_later: bool = False) -> Models:
    """The confidence models, checked for their roles (with the personal feature, without it, with the
    personal and the context features, and, when `confidence_posterior` names one, with the personal and the
    posterior features, which need `asr.partial_posteriors`); errors name the job file and the key. With
    `written_later`, a model file that is not there yet is passed by (an earlier job of the suite writes it:
    `check_inputs` has made sure of that) and left None."""
    if config.confidence_posterior is not None and not config.asr.partial_posteriors:
        raise ConfigError(f"{job_path}: key 'confidence_posterior' = '{config.confidence_posterior}' scores the "
                          "partials' lattice posteriors, but asr.partial_posteriors is false, so the transcripts "
                          "carry none. Fix: set asr.partial_posteriors = true, or leave confidence_posterior unset")
    keys = ("confidence", "confidence_no_personal", "confidence_context", "confidence_posterior")
    loaded = []
    for key in keys:
        path = getattr(config, key)
        if path is None or (written_later and not from_root(path).is_file()):
            loaded.append(None)
            continue
        try:
            loaded.append(load_confidence(from_root(path)))
        except DataError as err:
            raise DataError(f"{job_path}: key '{key}' = '{path}': {err}") from None
    models = Models(*loaded)
    roles = ((models.personal, (True, False, False), "confidence"),
             (models.no_personal, (False, False, False), "confidence_no_personal"),
             (models.context, (True, True, False), "confidence_context"),
             (models.posterior, (True, False, True), "confidence_posterior"))
    for model, wanted, key in roles:
        if model is None:
            continue
        trained = (model.use_personal, model.use_context, model.use_posterior)
        if trained != wanted:
            raise DataError(f"{job_path}: key '{key}' = '{getattr(config, key)}' was trained with (use_personal, "
                            f"use_context, use_posterior) = {trained}; the key needs {wanted}. Fix: point '{key}' at "
                            f"the model of that role ({_ROLE_FILES[key]}), or retrain it with `specbench train "
                            "confidence` and the job file of that model")
    return models


# the shipped model of each confidence role (`models/`)
_ROLE_FILES = {"confidence": "models/confidence_slurp.pt", "confidence_no_personal": "models/confidence_slurp_nopersonal.pt",
               "confidence_context": "models/confidence_slurp_context.pt",
               "confidence_posterior": "models/confidence_slurp_posterior.pt"}


def usage_checks(config: PredictiveAsrConfig, job_path: Path) -> None:
    """Every usage setting of the job simulated for its devel and its test users (`check_usage`; the config
    refuses split = "devel", so the two populations have keys of their own)."""
    variants = [dataclasses.replace(config.usage, routine_share=s) for s in config.habit.routine_shares]
    check_usage({"devel": config.tune_users, config.split: config.users},
                [config.usage, *(variants if config.run_habit_sweep else [])], job_path)


def check_partial_interval(asr: AsrSection, job_path: Path) -> None:
    """`ConfigError` unless partials fall on whole output frames of the acoustic model (no silent rounding)."""
    frames = asr.partial_every_ms / OUTPUT_FRAME_SHIFT_MS
    if abs(frames - round(frames)) > 1e-6 or round(frames) < 1:
        nearest = max(1, round(frames)) * OUTPUT_FRAME_SHIFT_MS
        raise ConfigError(f"{job_path}: asr.partial_every_ms = {asr.partial_every_ms:g} is not a whole number of "
                          f"the acoustic model's {OUTPUT_FRAME_SHIFT_MS:g} ms output frames. Fix: use a multiple "
                          f"of {OUTPUT_FRAME_SHIFT_MS:g}, e.g. {nearest:g}.")


def adaptation_job(asr: AsrSection, job_path: Path) -> EvalAmConfig | None:
    """The `eval_am` job `asr.adaptation_job` names (None without one), refused (`ConfigError`) when it
    enables neither `[vtln]` nor `[speaker_transform]`: there would be no adaptation to apply."""
    if asr.adaptation_job is None:
        return None
    eval_cfg = referenced_job(job_path, "asr.adaptation_job", asr.adaptation_job, EvalAmConfig)
    if not (eval_cfg.vtln.enabled or eval_cfg.speaker_transform.enabled):
        raise ConfigError(f"{job_path}: asr.adaptation_job = '{asr.adaptation_job}' has neither [vtln] nor "
                          "[speaker_transform] enabled, so there is no adaptation to apply. Fix: name the eval job "
                          "of the ASR headline (e.g. \"am_eval.toml\"), or remove asr.adaptation_job.")
    return eval_cfg


def asr_checks(asr: AsrSection, job_path: Path) -> None:
    """The `[asr]` checks that transcribing makes before it renders anything (`partials._setup`), made here
    before the run opens: partials on whole output frames, a graph job of the CTC TLG recipe
    (`job_refs.ctc_graph_job`), and (decoder mode, where the adaptation is applied) an adaptation job that
    adapts."""
    check_partial_interval(asr, job_path)
    ctc_graph_job(job_path, "asr.graph_job", asr.graph_job)
    if asr.mode == "decoder":
        adaptation_job(asr, job_path)


def preflight(config: PredictiveAsrConfig, job_path: Path) -> None:
    """The checks that read models, data and referenced job files, made when the job is validated and before
    its MLflow run opens: the `[asr]` section (`asr_checks`), the confidence models' roles, and every usage
    setting simulated for every population (a few seconds)."""
    asr_checks(config.asr, job_path)
    load_models(config, job_path, written_later=True)
    usage_checks(config, job_path)


# `[model]` keys of a train_confidence job that `models` decides per model (`train_confidence.ROLES`)
ROLE_KEYS = ("use_personal", "use_context", "use_posterior")


def check_model_section(job_path: Path) -> None:
    """`ConfigError` when the train_confidence job file sets a `[model]` key that `models` decides (each role
    has its own features): it would be overwritten without a word. Reads the file, since a value equal to the
    default is as misleading as another."""
    if not job_path.is_file():  # a config built in code, not read from a job file: nothing was written
        return
    model = read_toml(job_path).get("model")
    keys = [k for k in ROLE_KEYS if isinstance(model, dict) and k in model]
    if keys:
        raise ConfigError(f"{job_path}: key 'model.{keys[0]}' is set, but in a train_confidence job `models = "
                          "[...]` decides the features of each model it trains (\"personal\": use_personal; "
                          "\"no_personal\": none; \"context\": use_personal and use_context; \"posterior\": "
                          f"use_personal and use_posterior). Fix: remove {', '.join(f'model.{k}' for k in keys)} "
                          "and list the models to train in `models`.")


def train_confidence_preflight(config: TrainConfidenceConfig, job_path: Path) -> None:
    """The train_confidence job's checks before it runs: no `[model]` key that `models` decides
    (`check_model_section`), the `[asr]` section (`asr_checks`), and every usage setting the training
    simulates, simulated for its populations (a few seconds)."""
    check_model_section(job_path)
    asr_checks(config.asr, job_path)
    shares = config.habit.routine_shares if config.calibrate_routine_share else ()
    check_usage({"train": config.train_users, "devel": config.devel_users},
                [config.usage, *(dataclasses.replace(config.usage, routine_share=s) for s in shares)], job_path)


def scale_warning(asr: AsrSection, checkpoint: Path) -> str | None:
    """A warning when the requests' acoustic scale (`asr.acoustic_scale`, set by hand) differs from the one
    the checkpoint's eval job chose on devel for its adapted scores (its model card's `asr.acoustic_scale`);
    None when they agree or the card has none."""
    try:
        chosen = json.loads(checkpoint.with_suffix(".json").read_text())["evaluation"]["asr.acoustic_scale"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return None if chosen == asr.acoustic_scale else (
        f"asr.acoustic_scale = {asr.acoustic_scale:g}, set by hand, but {checkpoint.name}'s eval job chose "
        f"{chosen:g} on devel for its adapted scores")
