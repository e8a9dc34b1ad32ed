"""The handlers of the command line's verbs: `cmd_<verb>(args) -> exit code`. Heavy modules are imported
inside the handlers, so that `specbench --help` and the light verbs start fast (and the GPU machine, which
lacks ray, mlflow and polars, can run `bench decoder`)."""

from __future__ import annotations

import argparse
import difflib
import shlex
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from specbench.cli.options import BENCHES, command_line_name, config_from_args
from specbench.text_files import json_text


def _options(args: argparse.Namespace, force: bool = False):  # type: ignore[no-untyped-def]
    from specbench.experiments.runner import RunOptions

    return RunOptions(
        tracking_uri=args.tracking_uri,
        ray_address=args.ray_address,
        force=force,
        device=getattr(args, "device", "auto"),
    )


def _checked_config(path: Path, kind: str | None = None):  # type: ignore[no-untyped-def]
    """The loaded job, suite or nightly file (which must be of `kind` when one is given), after checking that
    the files its jobs read (models, other job files) exist: a missing one fails here, before any MLflow run
    is opened."""
    from specbench.config import config_kind
    from specbench.config.loader import check_inputs
    from specbench.errors import ConfigError
    from specbench.experiments.registry import load_config, preflight

    config = load_config(path)
    if kind is not None and config_kind(config) != kind:
        raise ConfigError(f'{path}: this command needs a job with kind = "{kind}", not '
                          f'"{config_kind(config)}". Fix: give it a {kind} job file, or run this one with '
                          f"`specbench run {path}`.")
    check_inputs(path, config, load_config)
    preflight(path, config)
    return config


def _run_kind(args: argparse.Namespace, kind: str, force: bool = False) -> int:
    """Run a job file after checking it is of `kind` (the convenience verbs)."""
    from specbench.experiments.runner import run_file

    _checked_config(args.file, kind)
    for line in run_file(args.file, _options(args, force)):
        print(line)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from specbench.experiments.runner import run_file

    _checked_config(args.file)
    for line in run_file(args.file, _options(args)):
        print(line)
    cli = f"specbench --tracking-uri {args.tracking_uri}" if args.tracking_uri else "specbench"
    print(
        f"Open the runs with `{cli} ui` (MLflow UI on http://127.0.0.1:5000), list them with "
        f"`{cli} runs`, or put two side by side with `{cli} compare RUN_A RUN_B` (a suite's parent "
        "run holds its jobs' headline metrics)."
    )
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from specbench.config import SuiteConfig, config_kind
    from specbench.experiments.registry import load_config

    config = _checked_config(args.file)
    if config_kind(config) == "nightly":
        from specbench.experiments.nightly import validate

        for job, job_config in validate(args.file, config):
            print(f"{job}: ok ({config_kind(job_config)})")
        print(
            f"{args.file}: ok (nightly '{config.name}', {len(config.jobs)} jobs, {len(config.tolerance)} "
            "tolerances)"
        )
        return 0
    if isinstance(config, SuiteConfig):
        for job in config.jobs:
            print(f"{job}: ok ({config_kind(load_config(job))})")
        print(f"{args.file}: ok (suite '{config.name}', {len(config.jobs)} jobs)")
    else:
        print(f"{args.file}: ok ({config_kind(config)})")
    return 0


def cmd_submit(args: argparse.Namespace) -> int:
    from specbench.config.loader import _inputs, member_jobs
    from specbench.data.resolver import data_dir
    from specbench.errors import ConfigError
    from specbench.experiments.registry import load_config
    from specbench.paths import project_root, work_dir
    from specbench.runtime.jobs import check_dashboard_address, submission_home, submit, upload_exclusion
    from specbench.tracking.store import absolute_sqlite_uri, resolve_tracking_uri

    check_dashboard_address(args.address)  # its form, before anything is read
    root = project_root()
    load_config(args.file)  # its keys and values first: a file that does not load is refused wherever it is
    try:
        args.file.resolve().relative_to(root.resolve())
    except ValueError as err:
        raise ConfigError(f"{args.file}: a submitted job file must be inside the project ({root}), which is "
                          f"what the cluster receives. Fix: copy it into {root / 'jobs'}/ (the paths in it to "
                          "other job files are relative to it) and submit that copy.") from err
    left_out = upload_exclusion(root, args.file)
    if left_out is not None:
        raise ConfigError(f"{args.file}: the cluster would not receive this job file, since the upload of the "
                          f"project leaves it out ({left_out}); the job would fail there with no such job file. "
                          f"Fix: put the job file in {root / 'jobs'}/ or another tracked folder (not under "
                          ".specbench/ or a git-ignored folder such as build/) and submit it from there.")
    config = _checked_config(args.file)  # the files it reads and its preflight, before anything is started
    for job, job_config in member_jobs(args.file, config, load_config):  # which the upload must carry
        named = [(f"{args.file}: key 'jobs'", job, None)] if job != args.file else []
        named += [(f"{job}: key '{k}'", f, v) for k, v, f, *_ in _inputs(job, job_config)]
        for where, file, v in named:  # an input's .specbench/... is the job's work directory, not uploaded
            real = file.resolve()
            if real.is_relative_to(root.resolve()) and not (v and real.is_relative_to(work_dir().resolve())) \
                    and (left_out := upload_exclusion(root, real)):
                raise ConfigError(f"{where}: the cluster would not receive {file} ({left_out}). Fix: move it "
                                  "to a folder the upload carries.")
    # a relative SQLite file is the caller's, not one in the working_dir that Ray unpacks and deletes with the job
    uri = absolute_sqlite_uri(resolve_tracking_uri(args.submit_tracking_uri or args.tracking_uri))
    home = submission_home()  # never the working_dir, which Ray deletes with the job
    job_id = submit(args.address, root, args.file, uri, data_dir(), home=home)
    print(f"submitted {args.file} as {job_id} to {args.address} (work directory {home}: the cluster's nodes "
          f"must see it at that path; set SPECBENCH_HOME to choose another); follow it with "
          f"`specbench logs {job_id} --address {args.address} --follow`", flush=True)
    return _print_logs(args.address, job_id, follow=True) if args.follow else 0


def cmd_jobs(args: argparse.Namespace) -> int:
    import datetime

    from specbench.runtime.jobs import list_jobs

    jobs = list_jobs(args.address)
    if not jobs:
        print(f"no jobs at {args.address} (since the cluster started): submit one with `specbench submit "
              f"JOB.toml --address {args.address}`")
    else:
        print(f"{'JOB':32} {'STATUS':10} {'STARTED (UTC)':16}  ENTRYPOINT")
    for job in jobs:
        when = (
            datetime.datetime.fromtimestamp(job.start_time, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")
            if job.start_time
            else "-"
        )
        print(f"{job.job_id:32} {job.status:10} {when:16}  {job.entrypoint}")
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    return _print_logs(args.address, args.job_id, args.follow)


def _print_logs(address: str, job_id: str, follow: bool) -> int:
    """Print the job's logs; when following, until it ends, then how it ended (exit 1 unless it succeeded)."""
    from specbench.runtime.jobs import client, follow_logs, status

    jobs = client(address)  # one client: a cluster that stops as the job ends is lost, as while following
    for text in follow_logs(address, job_id, follow, jobs=jobs):
        print(text, end="", flush=True)
    if not follow:
        return 0
    final = status(address, job_id, jobs)
    print(f"\njob {job_id}: {final}")
    return 0 if final == "SUCCEEDED" else 1


def cmd_sync(args: argparse.Namespace) -> int:
    from specbench.tracking.runs import sync_journals

    report = sync_journals()  # each journal's server on its own: an unreachable one keeps its journals only
    for name, run_id, count in report.sent:
        print(f"{name}: {count} operations sent to run {run_id}")
    for why in report.busy:
        print(f"{why} (left alone for now)")
    if not report.sent and not report.problems and not report.busy and not report.kept:
        print("nothing to send: every run reached its server")
    # a damaged journal (not sent), a torn one (sent but for its last line), one whose server is unreachable
    for problem in [*report.problems, *report.kept]:
        print(f"specbench: error: {problem}", file=sys.stderr)
    return 2 if report.problems or report.kept else 0


def cmd_nightly(args: argparse.Namespace) -> int:
    return _run_kind(args, "nightly")


def cmd_baseline(args: argparse.Namespace) -> int:
    from specbench.experiments.registry import JOBS
    from specbench.tracking.baseline import set_baseline
    from specbench.tracking.store import check_readable_store

    check_readable_store(args.tracking_uri)  # an explicit store that is not there is refused, not created
    _refuse_missing_local_store(args.tracking_uri, "baseline set")
    versions = {kind: job.metrics_version for kind, job in JOBS.items()}
    run_id, name = set_baseline(args.run_id, args.tracking_uri, args.reason, versions)  # a full id or a prefix
    print(f"run {run_id} ({name}) is now the baseline of its job")
    return 0


def _refuse_missing_local_store(explicit: str | None, verb: str) -> None:
    """A verb that reads given runs, on an embedded default store no job has created yet: one clear error
    instead of an empty store created to find nothing in."""
    from specbench.errors import ConfigError
    from specbench.tracking.store import OPTION, local_store_missing, local_store_uri

    if local_store_missing(explicit):
        raise ConfigError(f"specbench {verb}: no runs yet, the local store {local_store_uri()} does not exist. "
                          f"Fix: run a job first (`specbench run jobs/quick.toml`), or give the store that "
                          f"holds the runs with {OPTION}.")


def cmd_data_speech(args: argparse.Namespace) -> int:
    return _run_kind(args, "speech")


def cmd_train(args: argparse.Namespace) -> int:
    kind = {"am": "train_am", "mt": "train_mt", "lm": "train_lm", "confidence": "train_confidence"}[
        args.train_command
    ]
    if kind == "train_mt" and args.no_mlflow:  # no tracking: the runner (and mlflow) is never imported
        from specbench.experiments import train_mt

        config = _checked_config(args.file, kind)
        for line in train_mt.summary(config, train_mt.run_train_mt(config, args.file, None, args.device)):
            print(line)
        return 0
    return _run_kind(args, kind)


def cmd_data_check(args: argparse.Namespace) -> int:
    import time

    from specbench.data.resolver import CHECKSUMS
    from specbench.data.verify import check_data

    start = time.perf_counter()
    root, how, checks = check_data(full=args.full)
    print(f"data directory: {root} (from {how})")
    if not root.is_dir():
        what = "it is a file, not a folder" if root.exists() else "the folder does not exist"
        print(
            f"  MISSING: {what}. Fix: set SPECBENCH_DATA to the folder holding slurp/, "
            f"cmudict/ and multi30k/, or place it at {root}."
        )
        return 1
    bad = [c for c in checks if not c.ok]
    for c in checks:
        print(f"  {'ok     ' if c.ok else 'PROBLEM'} {c.file.relpath}" + ("" if c.ok else f": {c.problem}"))
    for c in bad:
        print(f"  fix {c.file.relpath}: {c.fix}")
    content = "every file's content read" if args.full else "the content of changed files read"
    print(
        f"{len(checks) - len(bad)} of {len(checks)} files ok (sha256 and size compared with "
        f"{CHECKSUMS.name}, {content}; {time.perf_counter() - start:.2f} s)"
    )
    return 1 if bad else 0


def cmd_graph_build(args: argparse.Namespace) -> int:
    return _run_kind(args, "graph", force=args.force)


def cmd_decode(args: argparse.Namespace) -> int:
    from specbench.experiments.decode import decode_file

    summary = decode_file(
        args.graph,
        args.scores,
        args.out,
        args.backend,
        args.beam,
        args.max_active,
        args.acoustic_scale,
        args.frame_shift_ms,
        args.words,
        lattice_beam=args.lattice_beam,
        lattice_dir=args.lattice_dir,
        partial_every_ms=args.partial_every_ms,
        min_active=args.min_active,
        workers=args.workers,
        ray_address=args.ray_address,
        references=args.references,
    )
    print(json_text(summary, indent=2))
    return 1 if summary["failed"] == summary["utterances"] else 0


def cmd_compare(args: argparse.Namespace) -> int:
    from specbench.reports.compare import render_html, render_text
    from specbench.tracking.compare import compare_runs
    from specbench.tracking.runs import TrackedRun
    from specbench.tracking.store import check_readable_store

    check_readable_store(args.tracking_uri)  # an explicit store that is not there is refused, not created
    _refuse_missing_local_store(args.tracking_uri, "compare")
    comparison = compare_runs(args.run_ids, args.tracking_uri, args.all)  # full ids or unique prefixes
    print(render_text(comparison, args.all))
    if not args.no_artifact:
        full_ids = comparison.run_ids
        name = "compare-" + "-".join(i[:8] for i in full_ids)
        with TrackedRun(
            "compare", name, args.tracking_uri, {"kind": "compare", "compare.runs": ",".join(full_ids)}
        ) as run:
            run.log_text(render_html(comparison, args.all), "compare.html")
            print(f"\nHTML table: artifact compare.html of run {run.run_id} (experiment 'compare')")
    return 0


def _some_names(name: str, names: Iterable[str], uri: str, most: int = 10) -> str:
    """'one of: ' and `most` of `names` at most, the closest to `name` first, and how to list the rest."""
    ordered = sorted(names)
    close = difflib.get_close_matches(name.lower(), [n.lower() for n in ordered], n=most)
    shown = list(dict.fromkeys([n for c in close for n in ordered if n.lower() == c] + ordered))[:most]
    more = len(ordered) - len(shown)
    text = f"one of{' (closest first)' if close else ''}: {', '.join(shown) or '(none yet)'}"
    if more:
        text += (f" and {more} more (`MLFLOW_TRACKING_URI={shlex.quote(uri)} mlflow experiments search` lists "
                 "them all)")
    return text


def cmd_runs(args: argparse.Namespace) -> int:
    from specbench.errors import ConfigError
    from specbench.reports.headline import HEADLINE_METRICS
    from specbench.reports.numbers import figure
    from specbench.tracking.journal import orphaned_runs
    from specbench.tracking.queries import experiment_names, recent_runs
    from specbench.tracking.store import (
        check_readable_store,
        local_store_missing,
        local_store_uri,
        resolve_tracking_uri,
    )

    check_readable_store(args.tracking_uri)  # an explicit store that is not there is refused, not created
    if local_store_missing(args.tracking_uri):  # read, not created: the first job creates it
        print(f"no runs yet (no local store at {local_store_uri()}): try `specbench run jobs/quick.toml`")
        return 0
    rows = recent_runs(args.tracking_uri, args.limit, args.experiment, list(HEADLINE_METRICS))
    if not rows and args.experiment is not None:
        known, gone = (experiment_names(args.tracking_uri, d) for d in (False, True))
        if args.experiment in gone:
            uri, number = resolve_tracking_uri(args.tracking_uri), gone[args.experiment]
            fix = f"MLFLOW_TRACKING_URI={uri} mlflow experiments restore --experiment-id {number}"
            raise ConfigError(f"--experiment {args.experiment}: the experiment is deleted, so its runs are "
                              f"hidden. Fix: restore it in the MLflow UI or with `{fix}`.")
        if args.experiment not in known:
            names = _some_names(args.experiment, known, resolve_tracking_uri(args.tracking_uri))
            raise ConfigError(f"--experiment {args.experiment}: no such experiment in the store. Fix: pick "
                              f"{names}.")
    if not rows:
        print("no runs yet: try `specbench run jobs/quick.toml`")
        return 0
    orphaned = {r.run_id for r in rows if r.status == "RUNNING"} & orphaned_runs()
    header = ["run", "experiment", "name", "status", "started (UTC)", "headline metrics"]
    table = [
        [
            r.run_id[:12],
            r.experiment,
            r.name,
            f"{r.status} (process gone)" if r.run_id in orphaned else r.status,
            r.started,
            "; ".join(f"{k}={figure(v)}" for k, v in sorted(r.metrics.items())),
        ]
        for r in rows
    ]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *table, strict=True)]
    for line in [header, *table]:
        print("  ".join(str(x).ljust(w) for x, w in zip(line, widths, strict=True)).rstrip())
    if orphaned:
        print(f"{len(orphaned)} run(s) RUNNING whose process is gone (killed, or its Ray cluster stopped): "
              "nothing will end them. Fix: `specbench sync` (with this SPECBENCH_HOME) ends them FAILED from "
              "their journals.")
    return 0


def cmd_server(args: argparse.Namespace) -> int:
    from specbench.tracking.store import check_store_file, resolve_tracking_uri, sqlite_path, uri_source
    from specbench.tracking.ui import start_ui

    # the store is checked here, the host, port and artifact folder by start_ui: all before the server starts
    option = "--store" if args.store else uri_source(args.tracking_uri) or "the local store"
    uri = f"sqlite:///{check_store_file(args.store, option)}" if args.store else args.tracking_uri
    store = sqlite_path(resolve_tracking_uri(uri))
    if store is not None and not args.store:
        check_store_file(store, option)
    return _serve(lambda: start_ui(uri, host=args.host, port=args.port, artifacts=args.artifacts,
                                   store_option=option, allowed=args.allowed_hosts),
                  lambda address: f"MLflow tracking server at {address} (store {uri or 'the local store'}); jobs "
                  f"log to it with `specbench --tracking-uri {_reachable(address)} ...`; Ctrl-C or SIGTERM stops it")


def _reachable(address: str) -> str:
    """The address other machines log to: a server listening on every interface (0.0.0.0, ::) is reached by
    this machine's name, not by the wildcard it listens on."""
    import socket

    for wildcard in ("//0.0.0.0:", "//[::]:"):
        if wildcard in address:
            return address.replace(wildcard, f"//{socket.gethostname()}:")
    return address


def cmd_ui(args: argparse.Namespace) -> int:
    from specbench.tracking.store import check_readable_store, resolve_tracking_uri, uri_source
    from specbench.tracking.ui import start_ui

    check_readable_store(args.tracking_uri)  # an explicit store that is not there is refused, not created
    option = uri_source(args.tracking_uri) or "the local store"
    return _serve(lambda: start_ui(args.tracking_uri, host=args.host, port=args.port, store_option=option),
                  lambda address: f"MLflow UI for {resolve_tracking_uri(args.tracking_uri)} at {address} (Ctrl-C "
                  "or SIGTERM stops it)")


def _serve(start, describe) -> int:  # noqa: ANN001 - () -> (Popen, address), address -> str
    """Start an MLflow server, print `describe(address)`, and serve until it exits, Ctrl-C or SIGTERM (even
    one that comes while it starts); then stop its whole process group."""
    from specbench.tracking.ui import interrupted_by_signals, stop

    proc = None
    with interrupted_by_signals():
        try:
            proc, address = start()
            print(describe(address), flush=True)
            return _serve_until_stopped(proc)
        except KeyboardInterrupt:
            if proc is None:
                raise  # while it started: interrupted
            return 0  # between the start and the wait (as the address is printed): a stop like any other
        finally:
            if proc is not None:
                stop(proc)  # a no-op once stopped; covers a signal between the start and the wait


def _serve_until_stopped(proc) -> int:  # noqa: ANN001 - a subprocess.Popen
    """Wait for the MLflow server until it exits or Ctrl-C; always stop it and its workers."""
    from specbench.tracking.ui import output_tail, stop

    try:
        # waited in short steps: a Ctrl-C that the kernel hands to another thread (the output reader) only
        # sets Python's flag, and a main thread blocked in one long wait would not see it until the server exits
        while (code := proc.poll()) is None:
            time.sleep(0.2)
    except KeyboardInterrupt:
        code = 0
    finally:
        stop(proc)
    if code:
        said = output_tail(proc)
        print(f"specbench: error: the MLflow server exited with code {code}" +
              (f"; its last output:\n{said}" if said else ""), file=sys.stderr)
    return 1 if code else 0


def cmd_bench(args: argparse.Namespace) -> int:
    """Build the benchmark's config from the options given, measure, log (unless --no-mlflow), print."""
    if args.bench_command == "decoder":
        from specbench.hardware import limit_threads

        limit_threads()  # before numpy is imported, so that its BLAS starts with one thread
    import importlib

    from specbench.benchmarks.harness import emit, failed_backends_message, provenance
    from specbench.config.loader import check_inputs
    from specbench.errors import SpecbenchError
    from specbench.experiments.registry import JOBS, load_config
    from specbench.paths import project_root
    from specbench.text_files import check_output_path

    kind = BENCHES[args.bench_command][0]
    job = JOBS[kind]
    command = f"specbench bench {args.bench_command}"
    config = config_from_args(job.config, args, command)
    job_path = project_root() / "jobs" / f"{kind}.toml"  # where relative job paths resolve (the shipped jobs)
    try:
        check_inputs(job_path, config, load_config,
                     where=lambda _, key: f"{command}: {command_line_name(args, key)}")
    except SpecbenchError as err:  # a job file's fix wording; an option's path is not relative to a job file
        raise type(err)(str(err).replace("job file, relative to this one", "job file, by its path from the "
                                         "working directory or its name in jobs/")) from err
    check_output_path(args.output, command)
    module = importlib.import_module(job.runner.split(":")[0])
    result = provenance(module.measure(config, job_path), config)
    result["mlflow_run_id"] = None
    try:
        result["mlflow_run_id"] = None if args.no_mlflow else _log_bench(result, args.tracking_uri)
    except BaseException:  # the measurement is kept whatever the store does; the error is still the command's
        emit(result, args.output)
        print(f"specbench: the result above{f' (in {args.output})' if args.output else ''} was measured but "
              "not logged to MLflow", file=sys.stderr)
        raise
    emit(result, args.output)
    skipped = {name: entry.get("reason", "") for name, entry in (result.get("backends") or {}).items()
               if isinstance(entry, dict) and entry.get("status") == "unavailable"}
    for name, reason in skipped.items():  # measured without them: said where a person reads, not only in the JSON
        print(f"specbench: note: the {name} backend is unavailable here ({reason[:200]}); the result has no "
              "figures of it", file=sys.stderr)
    failed = failed_backends_message(result)
    if failed is not None:
        print(f"specbench: {failed}", file=sys.stderr)
        return 1
    return 0


def _log_bench(result: dict, tracking_uri: str | None) -> str | None:
    """Log to MLflow; on a machine without mlflow (the GPU machine) say so and go on."""
    try:
        from specbench.benchmarks.harness import log_bench

        return log_bench(result, tracking_uri)
    except ImportError as err:
        print(f"specbench: not logged to MLflow ({err}); the JSON holds the result", file=sys.stderr)
        return None
