"""`specbench nightly jobs/nightly.toml`: run the nightly suite, compare every headline metric with its
baseline under the file's tolerances, write a regression report (Markdown, HTML, a plot), and fail (naming the
metric, the baseline value and the new value) on any regression.

The nightly is one parent MLflow run (`kind = nightly`, in the file's `[tracking] experiment`) with each job
as a nested child run in the same experiment (`experiments/runner.py`): the parent carries the children's
headline metrics, the report as artifacts, `nightly.checks` and `nightly.regressions`, and the printed
summary as its description; it ends FAILED when there is a regression or a job failed. A job that fails (an
error, or a benchmark whose backends failed) ends its own run FAILED and is reported as a failed check
(`JOB FAILED`); the nightly goes on with the next job, so one failure does not hide the others' regressions.
Once the checks have run, the parent and every child run that finished are tagged `nightly.verdict` =
`passed` or `regressed` (the nightly's outcome; a failed child run, never a baseline, is left as it is);
`passed` only once the parent has ended FINISHED, so a crash while ending it leaves no run `passed`.

Checked before anything runs: every job file loads, and every headline metric the jobs produce
(the registry's `nightly_metrics`) has a `[[tolerance]]`. The baseline of a job's run is the run of the same job
(same experiment and run name) tagged `baseline=true` (`specbench baseline set RUN_ID`), else the latest
finished earlier nightly run of that job from a nightly that passed (a regressed nightly's runs are never
baselines, so a regression cannot become the norm; an untagged run counts when its nightly's parent run ended
FINISHED), in both cases of the job kind's current `metrics_version` (`experiments.registry`). A metric the
baseline run has no finite value of (NaN, or not logged) is compared with the newest older passing nightly
run that has one; where none has, the check says "no baseline value" (printed with the runs searched) and
only the absolute bounds apply. A timed metric (`reports.headline.TIMED_METRICS`) counts only from a run
measured on the same hardware (the runs' `hardware` tag): one measured elsewhere is a missing value, filled the
same way. When earlier runs exist but none of that version, the metrics changed meaning:
the baseline is reset (nothing to compare; the tolerances' absolute bounds still apply), the reason is
printed and tagged on the job's run as `baseline.reason`, and that run is the next nightly's baseline (if
that nightly passes). A job run logged offline, or one whose baseline cannot be looked up because the
server stopped answering, is reported as not compared: every metric a failed check, so the nightly does not
pass. A tolerance that bounds only the direction in which its metric improves (`reports.headline.BETTER`) is
refused before anything runs.
"""

from __future__ import annotations

import math
import uuid
from pathlib import Path
from typing import Any

from specbench.config import NightlyConfig, ToleranceRule, config_kind
from specbench.errors import ConfigError, SpecbenchError
from specbench.experiments.registry import JOBS, OPTIONAL_NIGHTLY_METRICS, RunOptions, load_config
from specbench.experiments.runner import JobRun, SuiteRun, run_name
from specbench.reports.headline import BETTER, TIMED_METRICS
from specbench.reports.nightly import JOB_FAILED, Check, render_html, render_markdown, write_plot
from specbench.reports.numbers import apart, figure
from specbench.tracking.baseline import (
    PASSED,
    REGRESSED,
    VERDICT_TAG,
    BaselineOutOfReach,
    find_baseline,
    note_baseline_reset,
    quoted,
    record_nightly_verdict,
)
from specbench.tracking.journal import is_unreachable
from specbench.tracking.runs import OFFLINE_PREFIX


class RegressionError(SpecbenchError):
    """The nightly found regressions (the report was written first)."""


def judge(rule: ToleranceRule, new: float, baseline: float | None) -> str | None:
    """Why `new` breaks `rule` against `baseline` (None when it does not)."""
    if not math.isfinite(new):
        return f"new value {new} is not finite"
    for bound, past, side in ((rule.min, -1.0, "below the minimum"), (rule.max, 1.0, "above the maximum")):
        # as for moves: a value at the bound, but for the rounding of binary floats, is within it
        if bound is not None and _beyond(past * (new - bound), 0.0, max(abs(bound), abs(new))):
            shown, limit = apart(new, bound)
            return f"{shown} is {side} {limit}"
    if baseline is None or not math.isfinite(baseline):  # find_baseline never gives one that is not finite
        return None
    scale = max(abs(baseline), abs(new))
    for moved, allowed, verb, noun in ((baseline - new, rule.max_drop, "fell", "drop"),
                                       (new - baseline, rule.max_rise, "rose", "rise")):
        if allowed is not None and _beyond(moved, allowed, scale):
            before, after = apart(baseline, new)
            return f"{verb} by {_by(moved, allowed)} from {before} to {after} (allowed {noun} {figure(allowed)})"
    return None


def _by(moved: float, allowed: float) -> str:
    """A move past `allowed`, to as many digits (4 or more) as show it is past."""
    return figure(moved) if float(moved).is_integer() else next(
        f"{moved:.{d}g}" for d in range(4, 18) if f"{moved:.{d}g}" != f"{allowed:.{d}g}" or d == 17)


def _beyond(moved: float, allowed: float, scale: float) -> bool:
    """Whether a move of `moved` exceeds `allowed` by more than the rounding of binary floats (relative 1e-9
    of the values' size `scale`): a drop of exactly 0.03 from 0.05 to 0.02 computes as 0.030000000000000002,
    and a value at the tolerance's edge must pass."""
    return moved - allowed > 1e-9 * scale


def validate(path: Path, config: NightlyConfig) -> list[tuple[Path, Any]]:
    """Load every job and check that each headline metric it produces has a tolerance."""
    jobs = []
    for raw in config.jobs:
        job = raw if raw.is_absolute() else (path.parent / raw).resolve()
        if not job.is_file():
            what = "is a directory, not a job file" if job.is_dir() else "does not exist"
            raise ConfigError(f"{path}: key 'jobs' lists '{raw}', but {job} {what}. Fix: list existing "
                              "job files, relative to the nightly file.")
        job_config = load_config(job)
        if config_kind(job_config) in ("nightly", "suite"):
            raise ConfigError(f"{path}: key 'jobs' lists '{raw}', which is itself a {config_kind(job_config)}. "
                              "Fix: list its jobs here instead.")
        try:  # a name no MLflow search can hold would stop the nightly at its baseline, after the job ran
            quoted(run_name(job_config))
        except ConfigError as err:
            raise ConfigError(f"{path}: key 'jobs' lists '{raw}', whose {err}") from err
        twin = next((other for other, c in jobs if run_name(c) == run_name(job_config)), None)
        if twin is not None:  # their baselines would be each other's runs, and their bars one label
            raise ConfigError(f"{path}: key 'jobs' lists {twin} and {job}, whose runs are both named "
                              f"'{run_name(job_config)}'. Fix: give one of them another name = \"...\".")
        jobs.append((job, job_config))
    rules = {r.metric for r in config.tolerance}
    comparable = {m for kind in JOBS.values() for m in kind.nightly_metrics} | set(OPTIONAL_NIGHTLY_METRICS)
    unknown = sorted(rules - comparable)
    if unknown:
        raise ConfigError(f"{path}: [[tolerance]] metric = \"{unknown[0]}\" is not a metric the nightly compares "
                          f"(a misspelt name would never be checked). Fix: use one of {', '.join(sorted(comparable))}, "
                          "or remove that [[tolerance]].")
    produced = {m for _, c in jobs for m in JOBS[config_kind(c)].nightly_metrics}
    missing = sorted(produced - rules)
    if missing:
        raise ConfigError(f"{path}: no [[tolerance]] for {', '.join(missing)}. Fix: add one per metric, e.g. "
                          f"[[tolerance]] metric = \"{missing[0]}\" max_drop = 0.01")
    for rule in config.tolerance:
        check_direction(path, rule)
    return jobs


def check_direction(path: Path, rule: ToleranceRule) -> None:
    """Refuse a rule with no bound on the side where its metric gets worse (`max_drop` or `min` where higher
    is better, `max_rise` or `max` where lower is better): the regressions would never be checked, and a bound
    on the improving side (`max_drop` or `min` alone on a perplexity) reports improvements as regressions."""
    better = BETTER.get(rule.metric)
    worse, improving = ("max_drop", "min"), ("max_rise", "max")
    if better == "lower":
        worse, improving = improving, worse
    if better is None or any(getattr(rule, b) is not None for b in worse):
        return
    i, bound = next((i, b) for i, b in enumerate(improving) if getattr(rule, b) is not None)
    raise ConfigError(f"{path}: [[tolerance]] metric = \"{rule.metric}\" sets {bound} but neither "
                      f"{' nor '.join(worse)}, and {better} is better for it: it would flag improvements "
                      f"and never a regression. Fix: use {worse[i]} = {getattr(rule, bound)} (or both, for "
                      "a metric that must not move either way).")


def checks_of(job: JobRun, job_config: Any, rules: dict[str, ToleranceRule], nightly_id: str,
              opts: RunOptions) -> list[Check]:
    """The job's headline metrics against its baseline (see the module docstring)."""
    checks = []
    kind = JOBS[config_kind(job_config)]
    metrics = job.metrics
    wanted = list(kind.nightly_metrics) + [m for m in OPTIONAL_NIGHTLY_METRICS if m in metrics and m in rules]
    try:
        base = _baseline(job, kind, nightly_id, opts, wanted)
    except BaselineOutOfReach as err:  # judged as not compared: the nightly does not pass
        why, _, fix = str(err).partition(". Fix: ")
        return _not_compared(job, wanted, rules, why, fix)
    except Exception as err:  # noqa: BLE001 - only an unreachable server is tolerated
        if not is_unreachable(err):
            raise
        return _not_compared(job, wanted, rules, "the tracking server could not be reached")
    if base is _OFFLINE:
        return _not_compared(job, wanted, rules, "its run was logged offline (the tracking server could not be "
                                                 "reached)")
    for metric, why in sorted(base.missing.items()) if base else ():
        fix = ("nothing to do: this run, if its nightly passes, is the baseline on this hardware"
               if metric in TIMED_METRICS else "nothing to do for a new metric; else make a run that "
               "logged it the baseline (`specbench baseline set RUN_ID`)")
        job.lines.append(f"  no baseline value for {metric} of {job.run_name}: {why}; only its absolute "
                         f"bounds are checked. Fix: {fix}")
    for metric in wanted:
        if metric not in metrics:
            checks.append(Check(job.run_name, metric, math.nan, None, None, rules[metric],
                                "the job did not log it"))
            continue
        old = base.metrics.get(metric) if base else None
        source = base.sources.get(metric) if base else None  # none where no run gave a value
        checks.append(Check(job.run_name, metric, metrics[metric], old, source, rules[metric],
                            judge(rules[metric], metrics[metric], old)))
    return checks


_OFFLINE = object()  # a job run logged offline: no baseline can be looked up for it


def _baseline(job: JobRun, kind: Any, nightly_id: str, opts: RunOptions, wanted: list[str]) -> Any:
    """The job run's baseline (None: none of the current metrics version; the reset is noted), or `_OFFLINE`."""
    if job.run_id.startswith(OFFLINE_PREFIX) or not job.experiment_id:
        return _OFFLINE
    base = find_baseline(job.experiment_id, job.run_name, nightly_id, opts.tracking_uri, kind.metrics_version,
                         wanted, job.hardware, TIMED_METRICS)
    if base is None and _has_earlier_baseline(job, nightly_id, opts):
        reason = f"metrics version {kind.metrics_version}: {kind.metrics_change}"
        note_baseline_reset(job.run_id, reason, opts.tracking_uri)
        job.lines.append(f"  baseline reset for {job.run_name} ({reason})")
    return base


def _has_earlier_baseline(job: JobRun, nightly_id: str, opts: RunOptions) -> bool:
    """Whether the job had a baseline of any metrics version (so that none of the current one is a reset)."""
    try:
        return find_baseline(job.experiment_id, job.run_name, nightly_id, opts.tracking_uri) is not None
    except BaselineOutOfReach:  # runs of earlier versions exist, only none from a passing nightly in reach
        return True


def _not_compared(job: JobRun, wanted: list[str], rules: dict[str, ToleranceRule], why: str,
                  fix: str = "run the nightly again once the server answers") -> list[Check]:
    """Checks of a job whose baseline could not be looked up: the absolute bounds are judged, and every metric
    is a problem (not compared), so the nightly does not pass and its runs never become baselines."""
    job.lines.append(f"  {job.run_name}: not compared with a baseline: {why}. Fix: {fix}")
    return [Check(job.run_name, metric, job.metrics.get(metric, math.nan), None, None, rules[metric],
                  judge(rules[metric], job.metrics.get(metric, math.nan), None)
                  or f"not compared with a baseline: {why}") for metric in wanted]


def _tag_verdict(parent_id: str, jobs: list[JobRun], verdict: str, opts: RunOptions) -> list[str]:
    """Tag the nightly's parent and its finished child runs with the verdict; a line for those left untagged."""
    untagged = record_nightly_verdict([parent_id, *(j.run_id for j in jobs)], verdict, opts.tracking_uri)
    if not untagged:
        return []
    why = "(offline, or the server was unreachable): as baselines they count if the nightly's parent FINISHED"
    return [f"  {VERDICT_TAG} not tagged on {', '.join(untagged)} {why}"]


def run_nightly(path: Path, config: NightlyConfig, opts: RunOptions) -> list[str]:
    jobs = validate(path, config)
    nightly_id = uuid.uuid4().hex[:12]
    rules = {r.metric: r for r in config.tolerance}
    lines, checks = [f"nightly {nightly_id}: {len(jobs)} jobs"], []
    with SuiteRun(config.tracking.experiment, config.name, "nightly", opts, path, [j for j, _ in jobs],
                  {"nightly.id": nightly_id}) as suite:
        for job, job_config in jobs:
            try:
                done = suite.run_job(job, job_config, suite_tag="nightly", extra_tags={"nightly.id": nightly_id})
            except Exception as err:  # noqa: BLE001 - reported as a failed check; the later jobs still run
                message = f"{type(err).__name__}: {err}"
                name = run_name(job_config)
                checks.append(Check(name, JOB_FAILED, math.nan, None, None, None,
                                    f"the job failed ({job.name}): {message}"[:2000]))
                lines.append(f"  {name} ({job.name}) FAILED: {message[:500]}; the nightly goes on")
                continue
            checks += checks_of(done, job_config, rules, nightly_id, opts)  # may add a baseline-reset line
            lines += done.lines
        run = suite.run
        run.log_text(render_markdown(checks, nightly_id), "regression_report.md")
        run.log_text(render_html(checks, nightly_id), "regression_report.html")
        with write_plot(checks) as plot:
            run.log_artifact(plot)
        bad = [c for c in checks if c.problem]
        run.log_metrics({"nightly.checks": float(len(checks)), "nightly.regressions": float(len(bad))})
        verdicts = [f"  {c.verdict:16} {c.job}: {c.problem}" if c.rule is None else
                    f"  {c.verdict:16} {c.job} {c.metric}: {figure(c.new)} (baseline {figure(c.baseline)})"
                    for c in checks]
        report = [f"  report: artifacts regression_report.md/.html of run {run.run_id}"]
        if not bad:  # tagged only once the parent ended FINISHED: a crash while ending it leaves no `passed`
            done = suite.finish([*verdicts, *report])
            return lines + _tag_verdict(run.run_id, suite.jobs, PASSED, opts) + done
        lines += _tag_verdict(run.run_id, suite.jobs, REGRESSED, opts)  # only a passed nightly's are baselines
        error = RegressionError("nightly regressions: " + "; ".join(
            f"{c.job}: {c.problem}" if c.rule is None else
            f"{c.metric} ({c.job}): baseline {figure(c.baseline)}, new {figure(c.new)}: {c.problem}" for c in bad))
        run.set_description([*suite.summary(), *verdicts, *report])
        print("\n".join([*lines, *suite.summary(), *verdicts, *report]))
        raise error
