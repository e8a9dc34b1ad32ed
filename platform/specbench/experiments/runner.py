"""Run a job or a suite: load and validate, open the MLflow runs, run, print a summary.

A job run on its own is one MLflow run in its job's experiment (`[tracking] experiment`). A suite
(`kind = "suite"`; the nightly too, see `experiments/nightly.py`) is one run to compare: a parent run in an
experiment named after the suite, each job a nested child run of it in the same experiment (so the MLflow UI
lists the jobs under their suite), and the parent carries the children's headline metrics
(`reports/headline.py`), so two suites compare in one row each, in the MLflow UI and in `specbench compare`.
Every run's description (`mlflow.note.content`) is the summary the command line prints for it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specbench.config import SuiteConfig, config_kind, config_to_dict, flatten
from specbench.errors import SpecbenchError
from specbench.experiments.registry import RunOptions, job_kind, load_config
from specbench.reports.headline import HEADLINE_METRICS
from specbench.tracking.runs import TrackedRun


@dataclass(frozen=True)
class JobRun:
    """What running one job left: its summary lines (as printed), its MLflow run and the metrics it logged."""

    lines: list[str]
    run_id: str
    run_name: str
    experiment: str
    experiment_id: str
    metrics: dict[str, float] = field(default_factory=dict)
    hardware: str = ""  # the run's `hardware` tag (`hardware.describe()`)


def run_name(config: Any) -> str:
    """The MLflow run name of a job: `<kind>-<name>` (a nightly compares runs of the same name)."""
    return f"{config_kind(config)}-{config.name}"


def run_job(path: Path, config: Any, opts: RunOptions, suite: str | None,
            extra_tags: dict[str, str] | None = None, parent: TrackedRun | None = None) -> JobRun:
    """Run one loaded job in its own MLflow run: a run of the job's experiment, or, with `parent`, a nested
    child run of `parent` in the parent's experiment (the job's own experiment is then its tag
    `job_experiment`)."""
    kind = config_kind(config)
    tags = {"kind": kind, "job_file": str(path), "metrics.version": str(job_kind(kind).metrics_version),
            **(extra_tags or {})}
    if suite:
        tags["suite"] = suite
    experiment = config.tracking.experiment
    if parent is not None:
        tags["job_experiment"] = experiment
        experiment = parent.experiment
    with TrackedRun(experiment, run_name(config), opts.tracking_uri, tags, parent=parent) as run:
        resolved = config_to_dict(config)
        run.log_params(flatten(resolved))
        run.log_dict(resolved, "config.resolved.json")
        run.log_artifact(path, "config")
        join_cluster(opts)
        lines = job_kind(kind).load_runner()(config, path, run, opts)
        run.set_description(lines)
        lines.append(f"  MLflow run {run.run_id} in experiment '{experiment}' ({run.tracking_uri})")
        return JobRun(lines, run.run_id, run.run_name, experiment, run.experiment_id, dict(run.metrics),
                      run.hardware)


def join_cluster(opts: RunOptions) -> None:
    """With `--ray-address` (`opts.ray_address`), join that cluster now, inside the job's run: every stage
    the job then maps reuses this connection, whichever module starts it (a runner that connects without an
    address would otherwise start a local Ray), and a cluster that is not there ends the run FAILED before
    the job does any work. Without it, nothing is started here: a job that needs Ray connects on its own
    (`$RAY_ADDRESS`, else a local Ray), and one that does not need Ray never starts it."""
    if opts.ray_address:
        from specbench.runtime import connect

        connect(opts.ray_address)


# ---- the suite's parent run --------------------------------------------------------------------------------

def headline_of(job: JobRun) -> dict[str, float]:
    """The headline metrics (`reports.headline.HEADLINE_METRICS`) that a job logged."""
    return {k: v for k, v in job.metrics.items() if k in HEADLINE_METRICS}


def parent_metrics(jobs: Sequence[JobRun]) -> dict[str, tuple[float, str]]:
    """{metric: (value, child run name)}: every child's headline metrics under their own names; when two
    children log the same one, the later child's value is kept as `<child run name>/<metric>` too."""
    out: dict[str, tuple[float, str]] = {}
    for job in jobs:
        for name, value in sorted(headline_of(job).items()):
            key = name if name not in out else f"{job.run_name}/{name}"
            out[key] = (value, job.run_name)
    return out


def headline_lines(metrics: Mapping[str, tuple[float, str]]) -> list[str]:
    """The parent's headline metrics as summary lines: name, value, the child run that logged it."""
    if not metrics:
        return ["  no headline metrics"]
    width = max(map(len, metrics))
    return [f"  {name:{width}}  {value:12.6g}  ({job})" for name, (value, job) in sorted(metrics.items())]


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {seconds % 60:.0f} s"


class SuiteRun:
    """The parent run of a suite: opened before the first job, it takes each finished child's headline
    metrics at once (so the UI shows a suite's progress) and its kind's metrics version (tag
    `metrics.versions`, `graph=1,simultrans=5`, which `specbench compare` checks), and ends with the suite's
    summary as its description; a job that raises ends it FAILED with what finished until then."""

    def __init__(self, experiment: str, name: str, kind: str, opts: RunOptions, path: Path,
                 job_files: Sequence[Path], tags: Mapping[str, str] | None = None) -> None:
        self.name, self.kind, self.opts = name, kind, opts
        self.jobs: list[JobRun] = []
        self.versions: dict[str, str] = {}  # each finished child's kind: its metrics version
        self.run = TrackedRun(experiment, name if name == kind else f"{kind}-{name}", opts.tracking_uri,
                              {"kind": kind, "suite": name, "job_file": str(path), **(tags or {})})
        self.start = time.perf_counter()
        self.run.log_params({"suite.name": name, "suite.jobs": ",".join(Path(j).name for j in job_files)})
        self.run.log_artifact(path, "config")

    def run_job(self, path: Path, config: Any, suite_tag: str, extra_tags: dict[str, str] | None = None) -> JobRun:
        """Run one job as a child run; log the parent's headline metrics so far."""
        try:
            job = run_job(path, config, self.opts, suite=suite_tag, extra_tags=extra_tags, parent=self.run)
        except BaseException as err:
            self.run.set_description([*self.summary(), f"  FAILED at {Path(path).name}: "
                                      f"{type(err).__name__}: {err}"[:2000]])
            raise
        self.jobs.append(job)
        self.versions[config_kind(config)] = str(job_kind(config_kind(config)).metrics_version)
        versions = ",".join(f"{k}={v}" for k, v in sorted(self.versions.items()))
        self.run.set_tags({"metrics.versions": versions})
        self.run.log_metrics({**{k: v for k, (v, _) in parent_metrics(self.jobs).items()},
                              "suite.jobs_finished": float(len(self.jobs))})
        return job

    def summary(self) -> list[str]:
        """The suite's own summary: how many jobs ran in how long, and every headline metric they logged."""
        seconds = time.perf_counter() - self.start
        label = self.name if self.name == self.kind else f"{self.kind} {self.name}"
        return [f"{label}: {len(self.jobs)} jobs in {_minutes(seconds)}; headline metrics:",
                *headline_lines(parent_metrics(self.jobs))]

    def finish(self, lines: Sequence[str] = ()) -> list[str]:
        """Log the suite's time, describe the parent with its summary (and `lines`), end it FINISHED;
        returns the summary with the parent's run line."""
        summary = [*self.summary(), *lines]
        self.run.log_metrics({"suite.seconds": time.perf_counter() - self.start})
        self.run.set_description(summary)
        self.run.finish()
        where = (f"  MLflow parent run {self.run.run_id} in experiment '{self.run.experiment}' "
                 f"({self.run.tracking_uri}), {len(self.jobs)} child runs")
        return [*summary, where]

    def __enter__(self) -> SuiteRun:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if exc is not None:
            self.run.fail(exc)
        else:
            self.run.finish()


def run_suite(path: Path, config: SuiteConfig, opts: RunOptions) -> list[str]:
    """Run a suite's jobs in order as child runs of one parent run (experiment: the suite's name)."""
    jobs = [(job, load_config(job)) for job in config.jobs]  # validate every job before running any
    lines: list[str] = []
    with SuiteRun(config.name, config.name, "suite", opts, path, config.jobs) as suite:
        for job, job_config in jobs:
            lines += suite.run_job(job, job_config, suite_tag=config.name).lines
        return lines + suite.finish()


RAY_PACKAGE_PREFIX = "_ray_pkg_"  # how Ray names the folder it unpacks a submitted job's working_dir into


def check_artifacts_outlive_job(opts: RunOptions) -> None:
    """Refuse, before any MLflow run or experiment is created, a local store (SQLite or file) whose database
    file or artifacts would land inside the working_dir that Ray unpacked for a submitted job (a relative
    `sqlite:///runs.db`, which is relative to that folder; the work directory defaulted to
    `<working_dir>/.specbench`): Ray deletes that folder with the job, and the run would end FINISHED with its
    records or artifacts gone. `specbench submit` makes a relative SQLite path absolute and passes the client's
    work directory as SPECBENCH_HOME; a job submitted some other way (`ray job submit`) must do the same."""
    from specbench.paths import work_dir
    from specbench.tracking.store import resolve_tracking_uri, sqlite_path

    uri = resolve_tracking_uri(opts.tracking_uri)
    if not uri.startswith(("sqlite:", "file:")):
        return  # a server keeps artifacts where it says; a local store keeps them in the work directory
    server = "or log to an MLflow server (`specbench server`, then --tracking-uri http://HOST:5000)"
    database = sqlite_path(uri)
    database = database.resolve() if database is not None else None  # a relative path: from this folder
    package = _ray_package(database) if database is not None else None
    if package is not None:
        raise SpecbenchError(
            f"the MLflow store {uri} is the file {database}, inside the working_dir that Ray "
            f"unpacked for the job ({package}) and deletes with it: the job's runs would be lost with it. Fix: "
            "give the store as an absolute path to a folder that outlives the job (`specbench submit` makes a "
            f"relative sqlite:/// path absolute against the folder it is run from), {server}.")
    home = work_dir()
    package = _ray_package(home)
    if package is None:
        return
    raise SpecbenchError(
        f"the MLflow store {uri} would keep this job's artifacts under {home / 'mlartifacts'}, inside the "
        f"working_dir that Ray unpacked for the job ({package}) and deletes with it. Fix: submit with "
        "`specbench submit` (it passes your work directory as SPECBENCH_HOME), or set SPECBENCH_HOME in the "
        f"job's runtime_env env_vars to a folder that outlives the job, {server}.")


def _ray_package(path: Path) -> Path | None:
    """The folder Ray unpacked a submitted job's working_dir into that holds `path` (None: none does)."""
    return next((p for p in (path, *path.parents) if p.name.startswith(RAY_PACKAGE_PREFIX)), None)


def run_file(path: Path, opts: RunOptions = RunOptions()) -> list[str]:
    """Run a job or suite file; returns the summary lines. A suite raises on its first failing job; a nightly
    goes on past one and raises at the end (`experiments.nightly`)."""
    path = Path(path)
    config = load_config(path)
    check_artifacts_outlive_job(opts)
    if isinstance(config, SuiteConfig):
        return run_suite(path, config, opts)
    if config_kind(config) == "nightly":  # a suite of its own: parent run, child runs, then the comparison
        return job_kind("nightly").load_runner()(path, config, opts)  # type: ignore[no-any-return]
    return run_job(path, config, opts, suite=None).lines
