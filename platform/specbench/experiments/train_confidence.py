"""The `train_confidence` job: the paper's confidence model, trained on every prediction (that adds a word)
of the training users' simulated requests, early-stopped on the devel users', with partials from the same
ASR pipeline as the test users (held-out voices, our decoder). Up to three models (`models`): with the
personal feature (`output`), without it (`<output stem>_nopersonal.pt`), and with the personal and the
context features (`<output stem>_context.pt`: time of day, hours since the user said the candidate, the gap
to the hour the user usually says it at); and, on request, with the personal and the partial's lattice
posterior features (`<output stem>_posterior.pt`; the transcripts need `asr.partial_posteriors`).

With `calibrate_routine_share`, the users are simulated at the routine share the predictive-ASR job
calibrates its headline population to (`predictive_asr/habit.py`): the devel users' LM + personal oracle is
measured at each `[habit] routine_shares` value and interpolated to `target_oracle`. The predictive-ASR job
repeats the same devel sweep (its transcripts and LM answers then come from the caches), so both land on the
same share; the models record the usage they were trained at, and the job checks it."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from specbench.config import TrainConfidenceConfig, config_to_dict
from specbench.errors import DataError
from specbench.experiments.predictive_asr.checks import train_confidence_preflight
from specbench.experiments.predictive_asr.habit import calibrate
from specbench.experiments.predictive_asr.job import lm_personal_oracle, predict_population
from specbench.experiments.predictive_asr.lm_cache import LmCache
from specbench.experiments.predictive_asr.partials import require_decoder_resources
from specbench.experiments.registry import RunOptions
from specbench.paths import from_root
from specbench.prediction.confidence import save_confidence, train_confidence_model
from specbench.reports.model_card import prediction_markdown, write_card
from specbench.runtime import connect

if TYPE_CHECKING:
    from specbench.tracking.runs import TrackedRun

LICENCE = ("Trained on predictions for simulated usage of SLURP texts and speakers (Bastianelli et al. 2020, "
           "CC BY 4.0); a derived work under the same licence.")


def no_personal_path(output: Path) -> Path:
    return output.with_name(output.stem + "_nopersonal" + output.suffix)


def context_path(output: Path) -> Path:
    return output.with_name(output.stem + "_context" + output.suffix)


def posterior_path(output: Path) -> Path:
    return output.with_name(output.stem + "_posterior" + output.suffix)


# model role -> (use_personal, use_context, use_posterior, its path from `output`); these replace `[model]`'s
# flags, which a job file may therefore not set (`checks.check_model_section`, in the preflight)
ROLES = {"personal": (True, False, False, lambda out: out), "no_personal": (False, False, False, no_personal_path),
         "context": (True, True, False, context_path), "posterior": (True, False, True, posterior_path)}


def _log_calibration(run: TrackedRun, sweep: list[dict[str, float]]) -> None:
    """The devel oracle sweep: `confidence.calibration.<figure>`, one step per routine share."""
    for step, row in enumerate(sweep):
        run.log_metrics({f"confidence.calibration.{k}": float(v) for k, v in row.items()}, step=step)


def _rows(predictions: pl.DataFrame) -> pl.DataFrame:
    """The paper's training rows: every prediction with at least one predicted word."""
    return predictions.filter(pl.col("added_words") >= 1)


def run_train_confidence(config: TrainConfidenceConfig, job_path: Path, run: TrackedRun | None,
                         ray_address: str | None = None) -> dict[str, Any]:
    """Build the training and devel predictions, train the `models` named, write them with cards."""
    train_confidence_preflight(config, job_path)
    connect(ray_address)
    require_decoder_resources(config.asr, job_path)
    cache = LmCache(from_root(config.lm), config.completion, device="auto")
    usage, sweep = config.usage, []
    if config.calibrate_routine_share:
        for share in sorted(config.habit.routine_shares):
            point = dataclasses.replace(config.usage, routine_share=share)
            pop = predict_population("devel", config.devel_users, point, config, job_path, cache)
            sweep.append({"routine_share": share, "devel_oracle_rate": lm_personal_oracle(pop),
                          "repeat_rate": pop.repeat_rate})
        try:
            share = calibrate(sweep, config.habit.target_oracle)
        except DataError:
            if run is not None:  # the sweep is logged before the error stops the job
                _log_calibration(run, sweep)
            raise
        usage = dataclasses.replace(config.usage, routine_share=share)
    train = predict_population("train", config.train_users, usage, config, job_path, cache)
    devel = predict_population("devel", config.devel_users, usage, config, job_path, cache)
    train_rows, devel_rows = _rows(train.predictions), _rows(devel.predictions)
    out = from_root(config.output)
    data = {"train_requests": train.requests.height, "devel_requests": devel.requests.height,
            "train_predictions": train_rows.height, "devel_predictions": devel_rows.height,
            "train_positive_rate": float(train_rows["correct"].mean() or 0.0),
            "devel_positive_rate": float(devel_rows["correct"].mean() or 0.0),
            "asr_wer_train_users": train.asr_wer, "asr_wer_devel_users": devel.asr_wer,
            "asr_mode": config.asr.mode, "routine_share": usage.routine_share,
            "devel_oracle_rate": lm_personal_oracle(devel), **{f"train_{k}": v for k, v in train.simulation.items()}}
    cards = {}
    for role in config.models:
        use_personal, use_context, use_posterior, path_of = ROLES[role]
        path = path_of(out)
        settings = dataclasses.replace(config.model, use_personal=use_personal, use_context=use_context,
                                       use_posterior=use_posterior)
        model, report = train_confidence_model(train_rows, devel_rows, settings, progress=True)
        save_confidence(path, model, report, config_to_dict(dataclasses.replace(config, usage=usage)),
                        half=config.half_precision_file)
        card = {"name": path.stem, "use_personal": use_personal, "use_context": use_context,
                "use_posterior": use_posterior, **data, "model": dataclasses.asdict(settings),
                "report": _plain_report(report), "licence": LICENCE,
                "data": ("Predictions (LM n-best and personal history) from every partial of the simulated "
                         "requests of the SLURP training users (training sentences, held-out voices, our "
                         "decoder's partials every 120 ms); early stopping on the devel users.")}
        write_card(path, card, prediction_markdown(card, "Prefetch confidence model",
                                                   f"`specbench train confidence jobs/{job_path.name}`"))
        cards[role] = card
    if run is not None:
        run.set_tags({"asr": config.asr.mode})
        run.log_metrics({f"confidence.{k}": float(v) for k, v in data.items() if isinstance(v, (int, float))})
        _log_calibration(run, sweep)
        for name, card in cards.items():
            run.log_metrics({f"confidence.{name}.{k}": float(v) for k, v in card["report"].items()
                             if isinstance(v, (int, float)) and not isinstance(v, bool)})
    return {"output": out, "data": data, "cards": cards}


def _plain_report(report: Any) -> dict[str, Any]:
    raw = dataclasses.asdict(report) if dataclasses.is_dataclass(report) else dict(report)
    plain = {k: v for k, v in raw.items() if isinstance(v, (int, float, str, bool, list))}
    members = raw.get("members") or ()
    if members:  # what each member ran, so a card says whether the epoch cap, patience or the time budget ended it
        plain["members_epochs_run"] = ", ".join(str(m["epochs_run"]) for m in members)
        plain["members_best_epoch"] = ", ".join(str(m["best_epoch"]) for m in members)
        plain["members_stopped"] = ", ".join(str(m["stopped"]) for m in members)
    return plain


def summary(result: dict[str, Any]) -> list[str]:
    d = result["data"]
    lines = [f"confidence models {', '.join(result['cards'])} ({result['output']} and beside it): "
             f"{d['train_predictions']:,} training and "
             f"{d['devel_predictions']:,} devel predictions (positive {d['train_positive_rate']:.3f} / "
             f"{d['devel_positive_rate']:.3f}); ASR WER train users {d['asr_wer_train_users']:.3f}, devel users "
             f"{d['asr_wer_devel_users']:.3f}"]
    for name, card in result["cards"].items():
        r = card["report"]
        lines.append(f"  {name}: " + ", ".join(f"{k} {v:.4g}" for k, v in r.items() if isinstance(v, float)))
    return lines


def execute(config: Any, path: Path, run: TrackedRun | None, opts: RunOptions) -> list[str]:
    """The job's runner (see `experiments.registry`): run it, return the summary lines."""
    return summary(run_train_confidence(config, path, run, opts.ray_address))
