"""Baselines for the nightly: `specbench baseline set RUN_ID` tags one run per (experiment, run name) with
`baseline=true`; `find_baseline` returns it, else the latest nightly run of that job from a nightly that
passed, in both cases only among runs whose `metrics.version` tag (absent: 1) is the version asked for.

Once a nightly's checks have run, `record_nightly_verdict` tags its runs `nightly.verdict` = `passed` or
`regressed`. Only runs of a nightly that passed are "previous nightly" baselines, so a regression never
becomes the next night's baseline (it would otherwise pass from then on). A nightly child run without that
tag (logged before the tag existed, offline, or by a nightly that stopped before its checks) counts only when
its parent run, the nightly, ended FINISHED: a nightly's parent ends FAILED on a regression or a crash.

A baseline value must be a finite number: where the chosen run has none for a metric (NaN, infinite, or not
logged), that metric's value comes from the next older passing nightly run of the job that has one (its run is
named per metric in `Baseline.sources`), and where no run has one, `Baseline.missing` says why, so the caller
reports "no baseline value" instead of silently comparing with nothing.

A speed metric (`hardware_bound`: a ratio of two decoders timed side by side still depends on the cores, the
caches and the GPU) takes its baseline value only from a run measured on the same hardware (the runs'
`hardware` tag, `hardware.describe()`): a value of the chosen run measured elsewhere counts as missing, and is
filled like a NaN, from the newest older passing nightly run on this hardware; under a pinned baseline measured
on other hardware, when no passing nightly older than the pin ran on this hardware, from the newest passing
nightly on it (a pin cannot pin another machine's speed)."""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from mlflow.entities import Run
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from specbench.errors import ConfigError
from specbench.tracking.journal import is_unreachable
from specbench.tracking.queries import logged, resolve_run_id
from specbench.tracking.runs import OFFLINE_PREFIX, PARENT_TAG
from specbench.tracking.store import quiet_mlflow, resolve_tracking_uri

VERDICT_TAG = "nightly.verdict"  # on a nightly's parent and child runs once its checks have run
PASSED, REGRESSED = "passed", "regressed"
_PAGE = 100
_MAX_LOOKBACK = 1000  # earlier nightly runs of one job searched for a baseline (newest first)


def _client(tracking_uri: str | None) -> MlflowClient:
    quiet_mlflow()
    return MlflowClient(tracking_uri=resolve_tracking_uri(tracking_uri))


def set_baseline(run_id: str, tracking_uri: str | None = None, reason: str | None = None,
                 current_versions: Mapping[str, int] | None = None) -> tuple[str, str]:
    """Tag `run_id` (a full id or a unique prefix, see `resolve_run_id`) baseline=true (and clear the tag
    on other runs of the same job), with `reason` as its `baseline.reason` tag (why the baseline was reset,
    e.g. a metric that changed meaning); returns (its full run id, its run name).

    Refused (ConfigError naming the fix), so that `baseline set` never reports a baseline the nightly would
    not use: a run that did not finish, a deleted run, a run that is not a nightly's job run (the nightly
    looks for baselines among its own runs only), and, with `current_versions` (job kind -> its current
    `metrics_version`), a run logged at another metrics version."""
    run_id = resolve_run_id(run_id, tracking_uri)
    client = _client(tracking_uri)
    run = client.get_run(run_id)
    fix = "Fix: pick a FINISHED run of the job from a nightly (`specbench runs --experiment nightly`)."
    if run.info.status != "FINISHED":
        raise ConfigError(f"run {run_id} has status {run.info.status}: a baseline must be a finished run. {fix}")
    if run.info.lifecycle_stage != "active":
        raise ConfigError(f"run {run_id} is deleted: the nightly never searches deleted runs. Fix: restore it "
                          "(`mlflow runs restore`), or pick another run.")
    tags = run.data.tags
    if tags.get("suite") != "nightly" or not tags.get(PARENT_TAG):
        raise ConfigError(f"run {run_id} ({run.info.run_name}) is not a job run of a nightly (tag suite = "
                          f"{tags.get('suite', 'none')!r}): the nightly compares a job with its own earlier runs "
                          f"in its experiment only, so it would never use this one. {fix}")
    kind, version = tags.get("kind", ""), tags.get("metrics.version", "1")
    if current_versions is not None and kind in current_versions and version != str(current_versions[kind]):
        raise ConfigError(f"run {run_id} ({run.info.run_name}) logged metrics version {version} of {kind}, but "
                          f"the current version is {current_versions[kind]}: its metrics mean something else, and "
                          "the nightly only compares runs of the current version. Fix: pick a run of the current "
                          "version, or let the next nightly start the new baseline.")
    name = run.info.run_name or ""
    others = client.search_runs([run.info.experiment_id], filter_string="tags.baseline = 'true'")
    for other in others:
        if other.info.run_name == name and other.info.run_id != run_id:
            client.set_tag(other.info.run_id, "baseline", "false")
    client.set_tag(run_id, "baseline", "true")
    if reason:
        client.set_tag(run_id, "baseline.reason", reason)
    return run_id, name


def quoted(value: str) -> str:
    """`value` as a string literal of an MLflow search filter: in single quotes, or in double quotes when it
    holds a single quote (a job name such as `bob's`); ConfigError when it holds both."""
    if "'" not in value:
        return f"'{value}'"
    if '"' not in value:
        return f'"{value}"'
    raise ConfigError(f"the run name {value!r} holds both kinds of quote, so no MLflow search can name it. Fix: "
                      "rename the job (its `name` key) without quotes.")


@dataclass(frozen=True)
class Baseline:
    """The baseline of a job's run. `run_id` and `why` ("baseline=true" or "previous nightly"): the run
    chosen; `metrics`: its finite metrics, plus, for each metric asked for that it has no finite value of,
    the value of the newest older passing nightly run that has one; `sources`: the run each value of
    `metrics` comes from; `missing`: each metric asked for without any finite baseline value, with why."""

    run_id: str
    why: str
    metrics: dict[str, float]
    sources: dict[str, str] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)


def _version_ok(run: Run, metrics_version: int | None) -> bool:
    tag = run.data.tags.get("metrics.version", "1")
    version = int(tag) if tag.isdigit() else None  # a hand-edited, unreadable tag: not a baseline
    return metrics_version is None or version == metrics_version


class BaselineOutOfReach(ConfigError):
    """Every run `find_baseline` may search came from a nightly that did not pass: a baseline may exist
    further back, so the runs cannot be judged as having none."""


def _runs(client: MlflowClient, experiment_id: str, where: str, cut: list[str] | None = None) -> Iterator[Run]:
    """The runs matching `where`, newest first, page by page (at most `_MAX_LOOKBACK`; `where` is appended
    to `cut`, when given, if more runs matched than that)."""
    token, seen = None, 0
    while True:
        page = client.search_runs([experiment_id], filter_string=where, max_results=_PAGE, page_token=token,
                                  order_by=["attributes.start_time DESC"])
        for run in page:
            if seen >= _MAX_LOOKBACK:  # a run past the lookback exists: the search was cut short
                if cut is not None:
                    cut.append(where)
                return
            seen += 1
            yield run
        token = page.token
        if not token or not page:
            return


def _version_filter(metrics_version: int | None) -> str:
    """The search clause that keeps only runs of `metrics_version`, so that runs of another version do not
    use up the lookback. Version 1 is also every run without the tag (`_version_ok`), which a search cannot
    ask for, so those runs are sorted out after the search."""
    if metrics_version is None or metrics_version == 1:
        return ""
    return f" and tags.`metrics.version` = '{int(metrics_version)}'"


def nightly_passed(client: MlflowClient, run: Run, parents: dict[str, str | None] | None = None) -> bool:
    """Whether `run`, a nightly's child run, belongs to a nightly that passed: its `nightly.verdict` tag, or,
    without one, its parent run's status (FINISHED: passed; FAILED, deleted, missing, or no parent: not)."""
    verdict = run.data.tags.get(VERDICT_TAG)
    if verdict is not None:
        return verdict == PASSED
    parent = run.data.tags.get(PARENT_TAG)
    if not parent:
        return False
    parents = {} if parents is None else parents
    if parent not in parents:
        try:
            info = client.get_run(parent).info
            # a deleted parent keeps its status in the store, but its verdict is no longer one to trust
            parents[parent] = info.status if info.lifecycle_stage == "active" else None
        except MlflowException as err:
            if is_unreachable(err):
                raise
            parents[parent] = None  # purged or never synced: no verdict to trust
    return parents[parent] == "FINISHED"


def find_baseline(experiment_id: str, run_name: str, nightly_id: str, tracking_uri: str | None = None,
                  metrics_version: int | None = None, metrics: Sequence[str] = (), hardware: str | None = None,
                  hardware_bound: Collection[str] = ()) -> Baseline | None:
    """The baseline of a job's run (see the module docstring): the run tagged baseline=true, else the latest
    finished nightly run of the same job, from a nightly that passed, before this nightly; with
    `metrics_version`, only runs of that version count. Each of `metrics` that the chosen run has no finite
    value of is taken from the newest older passing nightly run that has one, or named in `missing`; with
    `hardware`, a metric of `hardware_bound` counts only where the run's `hardware` tag equals it. None when
    there is no baseline run at all."""
    client = _client(tracking_uri)
    name = quoted(run_name)

    def usable(run: Run, metric: str) -> bool:
        """Whether `run` gives `metric` a baseline value: a finite one, measured on this hardware if it is
        hardware-bound."""
        return (math.isfinite(logged(run.data.metrics.get(metric, math.nan)))
                and (hardware is None or metric not in hardware_bound or run.data.tags.get("hardware") == hardware))

    def eligible(run: Run) -> bool:
        return run.data.tags.get("nightly.id") != nightly_id and _version_ok(run, metrics_version)

    version = _version_filter(metrics_version)
    explicit = next((r for r in _runs(client, experiment_id,
                                      f"tags.baseline = 'true' and attributes.run_name = {name}{version}")
                     if eligible(r)), None)
    parents: dict[str, str | None] = {}
    cut: list[str] = []  # searches stopped at the lookback

    def passing_nightlies(before: int | None = None) -> Iterator[Run]:
        """Finished runs of the job from passing nightlies, newest first, started before `before` (ms)."""
        where = (f"tags.suite = 'nightly' and attributes.run_name = {name} and attributes.status = 'FINISHED'"
                 f"{version}")
        if before is not None:
            where += f" and attributes.start_time < {int(before)}"
        return (r for r in _runs(client, experiment_id, where, cut)
                if eligible(r) and (explicit is None or r.info.run_id != explicit.info.run_id)
                and nightly_passed(client, r, parents))

    nightlies = passing_nightlies()
    chosen, why = ((explicit, "baseline=true") if explicit is not None
                   else (next(nightlies, None), "previous nightly"))
    if chosen is None:
        if cut:  # the newest runs all came from failed nightlies: no baseline found is not "no baseline"
            raise BaselineOutOfReach(
                f"no run of job {run_name!r} from a nightly that passed is among its newest {_MAX_LOOKBACK} "
                f"nightly runs{'' if metrics_version is None else f' of metrics version {metrics_version}'} in "
                f"experiment {experiment_id} ({resolve_tracking_uri(tracking_uri)}), so its "
                "baseline is out of reach. Fix: pin one with `specbench baseline set RUN_ID`")
        return None
    values = {k: v for k, v in chosen.data.metrics.items() if usable(chosen, k)}
    sources = dict.fromkeys(values, chosen.info.run_id)
    gaps = [m for m in metrics if m not in values]
    seen = [chosen]
    # older passing nightlies, for the metrics the chosen run lacks; under a pinned baseline only those older
    # than it (a newer one would move the pinned baseline night by night)
    def fill(runs: Iterator[Run], wanted: list[str]) -> None:
        """Take each of `wanted` (all in `gaps`) from the first of `runs` that has it."""
        for run in runs if wanted else ():
            if all(run.info.run_id != r.info.run_id for r in seen):
                seen.append(run)
            for metric in [m for m in wanted if usable(run, m)]:
                values[metric], sources[metric] = run.data.metrics[metric], run.info.run_id
                wanted.remove(metric)
                if metric in gaps:
                    gaps.remove(metric)
            if not wanted:
                return

    fill(nightlies if explicit is None else passing_nightlies(before=chosen.info.start_time or 0), gaps)
    if explicit is not None and hardware is not None:
        # a pin measured on other hardware cannot pin this machine's speed: the newest passing nightly on it does
        fill(passing_nightlies(), [m for m in gaps if m in hardware_bound])
    missing = {m: _why_missing(m, seen, hardware if m in hardware_bound else None) for m in gaps}
    return Baseline(chosen.info.run_id, why, values, sources, missing)


def _why_missing(metric: str, runs: Sequence[Run], hardware: str | None = None) -> str:
    """Why no run of `runs` (the chosen baseline run, then the older passing nightly runs searched) gives
    `metric` a finite baseline value (with `hardware`: one measured on that hardware)."""
    first = runs[0]
    value = first.data.metrics.get(metric)
    value = None if value is None else logged(value)
    elsewhere = first.data.tags.get("hardware", "it has no hardware tag")
    what = f"baseline run {first.info.run_id} " + (
        "did not log it" if value is None else f"logged {value}" if not math.isfinite(value) or hardware is None
        else f"measured it on other hardware ({elsewhere})")
    here = f" on this hardware ({hardware})" if hardware is not None else ""
    older = len(runs) - 1
    return what + (f", nor did any of the {older} older passing nightly runs of the job log a finite value{here}"
                   if older else f", and no older passing nightly run of the job exists{here}")


def record_nightly_verdict(run_ids: Sequence[str], verdict: str,
                           tracking_uri: str | None = None) -> list[str]:
    """Tag each run `nightly.verdict` = `verdict` (`passed` or `regressed`) once a nightly's checks have run;
    returns the runs it could not tag (offline, or the server became unreachable): those count as passed only
    when their parent run ended FINISHED (`nightly_passed`)."""
    if verdict not in (PASSED, REGRESSED):
        raise ValueError(f"nightly verdict {verdict!r}: expected {PASSED!r} or {REGRESSED!r}")
    client, untagged = _client(tracking_uri), []
    for run_id in run_ids:
        if run_id.startswith(OFFLINE_PREFIX):
            untagged.append(run_id)
            continue
        try:
            client.set_tag(run_id, VERDICT_TAG, verdict)
        except Exception as err:  # noqa: BLE001 - only an unreachable server is tolerated
            if not is_unreachable(err):
                raise
            untagged.append(run_id)
    return untagged


def note_baseline_reset(run_id: str, reason: str, tracking_uri: str | None = None) -> None:
    """Tag a run `baseline.reason` = `reason`: it starts a new baseline because its metrics changed meaning."""
    _client(tracking_uri).set_tag(run_id, "baseline.reason", reason)
