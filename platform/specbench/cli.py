"""`specbench`: the one command-line entry point. `main(argv) -> int`.

The parser is built from one small function per verb (`_add_<verb>`), each binding its handler. Every
user-fixable error is a `SpecbenchError`: printed as one message (file, field, fix), exit code 2, no
traceback. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from specbench.cli_options import add_config_options, config_from_args
from specbench.errors import SpecbenchError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specbench", description="Evaluate latency-hiding ASR and simultaneous "
                                "translation: jobs on Ray, results in MLflow.")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else the "
                                          "local store .specbench/mlflow.db)")
    p.add_argument("--ray-address", help="Ray cluster to join (HOST:PORT or auto); default: a local Ray "
                                         "bound to 127.0.0.1, or $RAY_ADDRESS")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (_add_run, _add_validate, _add_nightly, _add_submit, _add_jobs, _add_logs, _add_sync,
                _add_baseline, _add_data, _add_train, _add_graph, _add_decode, _add_compare, _add_runs,
                _add_server, _add_ui, _add_bench):
        add(sub)
    return p


def _verb(sub, name: str, handler, help: str, file: str | None = None) -> argparse.ArgumentParser:  # noqa: A002, ANN001
    """A verb's parser bound to its handler; with `file`, a positional job file argument so described."""
    parser = sub.add_parser(name, help=help)
    parser.set_defaults(handler=handler)
    if file:
        parser.add_argument("file", type=Path, help=file)
    return parser


def _add_run(sub) -> None:  # noqa: ANN001 - argparse's private subparsers action
    _verb(sub, "run", _cmd_run, "run a job or a suite", "a job or suite file (jobs/*.toml)")


def _add_validate(sub) -> None:  # noqa: ANN001
    _verb(sub, "validate", _cmd_validate, "check a job or suite file without running it", "a job or suite file")


def _add_nightly(sub) -> None:  # noqa: ANN001
    _verb(sub, "nightly", _cmd_nightly, "run the nightly suite, compare headline metrics with their baselines, "
          "exit non-zero on a regression", "the nightly file (jobs/nightly.toml)")


def _add_submit(sub) -> None:  # noqa: ANN001
    sm = _verb(sub, "submit", _cmd_submit, "submit a job to a Ray cluster through the Jobs API (the project is "
               "its working_dir)", "a job or suite file inside the project")
    sm.add_argument("--address", required=True, help="the cluster's dashboard, e.g. http://HEAD:8265")
    sm.add_argument("--tracking-uri", dest="submit_tracking_uri",
                    help="MLflow tracking URI the job logs to (an http:// server for multi-node clusters)")
    sm.add_argument("--follow", action="store_true", help="print the job's logs until it ends")


def _add_jobs(sub) -> None:  # noqa: ANN001
    _verb(sub, "jobs", _cmd_jobs, "the jobs of a Ray cluster").add_argument("--address", required=True)


def _add_logs(sub) -> None:  # noqa: ANN001
    lg = _verb(sub, "logs", _cmd_logs, "the logs of a submitted job")
    lg.add_argument("job_id")
    lg.add_argument("--address", required=True)
    lg.add_argument("--follow", action="store_true", help="keep printing until the job ends")


def _add_sync(sub) -> None:  # noqa: ANN001
    _verb(sub, "sync", _cmd_sync, "send runs that were logged while their MLflow server was unreachable")


def _add_baseline(sub) -> None:  # noqa: ANN001
    base = sub.add_parser("baseline", help="the nightly's baselines").add_subparsers(
        dest="baseline_command", required=True)
    _verb(base, "set", _cmd_baseline, "make a run the baseline of its job").add_argument("run_id")


def _add_data(sub) -> None:  # noqa: ANN001
    data = sub.add_parser("data", help="the shared data").add_subparsers(dest="data_command", required=True)
    _verb(data, "check", _cmd_data_check, "verify every file the jobs read")
    _verb(data, "speech", _cmd_data_speech, "synthesize the speech corpus of a speech job", "a speech job")


def _add_train(sub) -> None:  # noqa: ANN001
    train = sub.add_parser("train", help="train a model").add_subparsers(dest="train_command", required=True)
    _verb(train, "am", _cmd_train, "train the causal CTC acoustic model", "a train_am job (jobs/am.toml)")
    tmt = _verb(train, "mt", _cmd_train, "train a translation model (wait-k or full-sentence; resumes from its "
                "last checkpoint)", "a train_mt job (jobs/mt_waitk.toml)")
    tmt.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                     help="auto: a CUDA device when torch can use one, else the CPU")
    tmt.add_argument("--no-mlflow", action="store_true", help="do not log an MLflow run (the card and the "
                     "checkpoint are written all the same)")
    _verb(train, "lm", _cmd_train, "train the word LSTM LM of prediction", "a train_lm job (jobs/lm.toml)")
    _verb(train, "confidence", _cmd_train, "train the prefetch confidence models (with and without the personal "
          "feature)", "a train_confidence job (jobs/confidence.toml)")


def _add_graph(sub) -> None:  # noqa: ANN001
    graph = sub.add_parser("graph", help="the decoding graph").add_subparsers(dest="graph_command", required=True)
    build = _verb(graph, "build", _cmd_graph_build, "build the TLG of a graph job", "a graph job")
    build.add_argument("--force", action="store_true", help="rebuild even if a matching graph exists")


def _add_decode(sub) -> None:  # noqa: ANN001
    dec = _verb(sub, "decode", _cmd_decode, "decode acoustic scores with a WFST (CPU, GPU, the GPU algorithm's "
                "numpy twin, or Kaldi's FasterDecoder)")
    dec.add_argument("--graph", type=Path, required=True, help="OpenFst graph (vector or const), e.g. TLG.fst")
    dec.add_argument("--scores", type=Path, required=True, help=".parquet, Kaldi .scp/.ark, .npy or .npz")
    dec.add_argument("--out", type=Path, required=True, help="output: .jsonl (one JSON line each) or .parquet")
    dec.add_argument("--words", type=Path, help="words.txt: write words as strings, not output labels")
    dec.add_argument("--backend", choices=("cpu", "cpu_numpy", "gpu", "twin", "kaldi", "auto"), default="cpu",
                     help="auto: gpu when a CUDA device is usable, else cpu")
    dec.add_argument("--frame-shift-ms", type=float, help="frame shift of Kaldi/numpy scores")
    dec.add_argument("--beam", type=float, default=15.0)
    dec.add_argument("--max-active", type=int, default=10000)
    dec.add_argument("--min-active", type=int, default=20)
    dec.add_argument("--acoustic-scale", type=float, default=1.0)
    dec.add_argument("--lattice-beam", type=float, help="keep lattices within this beam (default 8 with "
                                                        "--lattice-dir)")
    dec.add_argument("--lattice-dir", type=Path, help="write one OpenFst word lattice per utterance here")
    dec.add_argument("--partial-every-ms", type=float, help="partial hypotheses every this many ms of audio")


def _add_compare(sub) -> None:  # noqa: ANN001
    cmp = _verb(sub, "compare", _cmd_compare, "params and metrics of runs side by side, with deltas (only what "
                "differs unless --all); the HTML table is kept as an MLflow artifact")
    cmp.add_argument("run_ids", nargs="+", metavar="RUN_ID")
    cmp.add_argument("--all", action="store_true", help="show every param and metric, not only differences")
    cmp.add_argument("--no-artifact", action="store_true", help="print only; log no `compare` run")


def _add_runs(sub) -> None:  # noqa: ANN001
    runs = _verb(sub, "runs", _cmd_runs, "recent MLflow runs with their headline metrics")
    runs.add_argument("--limit", type=int, default=20)
    runs.add_argument("--experiment")


def _add_server(sub) -> None:  # noqa: ANN001
    srv = _verb(sub, "server", _cmd_server, "run an MLflow tracking server (SQLite store, artifacts served over "
                "HTTP) until Ctrl-C or SIGTERM")
    srv.add_argument("--store", type=Path, help="SQLite file (default .specbench/mlflow.db)")
    srv.add_argument("--artifacts", type=Path, help="artifact folder (default .specbench/mlartifacts)")
    srv.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1: this machine only)")
    srv.add_argument("--port", type=int, default=5000)


def _add_ui(sub) -> None:  # noqa: ANN001
    ui = _verb(sub, "ui", _cmd_ui, "start the MLflow UI on 127.0.0.1 and print its address")
    ui.add_argument("--port", type=int, default=5000)
    ui.add_argument("--host", default="127.0.0.1")


# `specbench bench NAME`: the options are the fields of the benchmark's config (config/benchmarks.py), so
# the verb and a job file of the same kind share one set of defaults.
BENCHES = {"graph": ("bench_graph", "graph build time; CSR load vs kaldifst arc iteration"),
           "acoustic": ("bench_acoustic", "synthesis throughput; features + model real-time factor"),
           "decoder": ("bench_decoder", "Kaldi, CPU, twin and GPU decoders side by side on the same utterances: "
                                        "real-time factors, speedups, 1-best agreement"),
           "simultrans": ("bench_simultrans", "speculative beam search speed on test_2016_flickr; batched vs "
                                              "one sentence at a time"),
           "completion": ("bench_completion", "n-best completion of many prefixes batched vs one prefix at a "
                                              "time")}


def _add_bench(sub) -> None:  # noqa: ANN001
    from specbench.experiments.registry import JOBS

    bench = sub.add_parser("bench", help="benchmarks (JSON to stdout, logged to MLflow)")
    bsub = bench.add_subparsers(dest="bench_command", required=True)
    for name, (kind, text) in BENCHES.items():
        parser = _verb(bsub, name, _cmd_bench, text)
        add_config_options(parser, JOBS[kind].config, positional=("graph_job",) if name == "graph" else ())
        parser.add_argument("--output", type=Path, help="also write the JSON here")
        parser.add_argument("--no-mlflow", action="store_true", help="do not log an MLflow run")


def _options(args: argparse.Namespace, force: bool = False):  # type: ignore[no-untyped-def]
    from specbench.experiments.runner import RunOptions

    return RunOptions(tracking_uri=args.tracking_uri, ray_address=args.ray_address, force=force,
                      device=getattr(args, "device", "auto"))


def _job_of_kind(path: Path, kind: str):  # type: ignore[no-untyped-def]
    """The loaded job file, which must be of `kind` (the convenience verbs)."""
    from specbench.config import config_kind
    from specbench.errors import ConfigError
    from specbench.experiments.registry import load_config

    config = load_config(path)
    if config_kind(config) != kind:
        raise ConfigError(f"{path}: this command needs a job with kind = \"{kind}\"")
    return config


def _run_kind(args: argparse.Namespace, kind: str, force: bool = False) -> int:
    """Run a job file after checking it is of `kind` (the convenience verbs)."""
    from specbench.experiments.runner import run_file

    _job_of_kind(args.file, kind)
    for line in run_file(args.file, _options(args, force)):
        print(line)
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from specbench.experiments.runner import run_file

    for line in run_file(args.file, _options(args)):
        print(line)
    print("Open the runs with `specbench ui` (MLflow UI on http://127.0.0.1:5000), or list them with "
          "`specbench runs`.")
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from specbench.config import SuiteConfig, config_kind
    from specbench.experiments.registry import load_config

    config = load_config(args.file)
    if config_kind(config) == "nightly":
        from specbench.experiments.nightly import validate

        for job, job_config in validate(args.file, config):
            print(f"{job}: ok ({config_kind(job_config)})")
        print(f"{args.file}: ok (nightly '{config.name}', {len(config.jobs)} jobs, {len(config.tolerance)} "
              "tolerances)")
        return 0
    if isinstance(config, SuiteConfig):
        for job in config.jobs:
            print(f"{job}: ok ({config_kind(load_config(job))})")
        print(f"{args.file}: ok (suite '{config.name}', {len(config.jobs)} jobs)")
    else:
        print(f"{args.file}: ok ({config_kind(config)})")
    return 0


def _cmd_submit(args: argparse.Namespace) -> int:
    from specbench.data.resolver import data_dir
    from specbench.errors import ConfigError
    from specbench.experiments.registry import load_config
    from specbench.paths import project_root
    from specbench.runtime.jobs import follow_logs, status, submit
    from specbench.tracking.store import resolve_tracking_uri

    root = project_root()
    load_config(args.file)  # a job file that does not validate is refused before anything is started
    try:
        args.file.resolve().relative_to(root.resolve())
    except ValueError as err:
        raise ConfigError(f"{args.file}: a submitted job file must be inside the project ({root})") from err
    uri = resolve_tracking_uri(args.submit_tracking_uri or args.tracking_uri)
    job_id = submit(args.address, root, args.file, uri, data_dir())
    print(f"submitted {args.file} as {job_id} to {args.address}; follow it with `specbench logs {job_id} "
          f"--address {args.address} --follow`", flush=True)
    if not args.follow:
        return 0
    for text in follow_logs(args.address, job_id, follow=True):
        print(text, end="", flush=True)
    final = status(args.address, job_id)
    print(f"\njob {job_id}: {final}")
    return 0 if final == "SUCCEEDED" else 1


def _cmd_jobs(args: argparse.Namespace) -> int:
    import datetime

    from specbench.runtime.jobs import list_jobs

    for job in list_jobs(args.address):
        when = (datetime.datetime.fromtimestamp(job.start_time, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")
                if job.start_time else "-")
        print(f"{job.job_id:32} {job.status:10} {when}  {job.entrypoint}")
    return 0


def _cmd_logs(args: argparse.Namespace) -> int:
    from specbench.runtime.jobs import follow_logs

    for text in follow_logs(args.address, args.job_id, args.follow):
        print(text, end="", flush=True)
    return 0


def _cmd_sync(args: argparse.Namespace) -> int:
    from specbench.errors import SpecbenchError
    from specbench.tracking.journal import is_unreachable
    from specbench.tracking.runs import sync_journals

    try:
        done = sync_journals()
    except Exception as err:  # noqa: BLE001
        if is_unreachable(err):
            raise SpecbenchError(f"the MLflow server is still unreachable ({err}); the journals are kept, run "
                                 "`specbench sync` again later") from err
        raise
    for name, run_id, count in done:
        print(f"{name}: {count} operations sent to run {run_id}")
    if not done:
        print("nothing to send: every run reached its server")
    return 0


def _cmd_nightly(args: argparse.Namespace) -> int:
    return _run_kind(args, "nightly")


def _cmd_baseline(args: argparse.Namespace) -> int:
    from specbench.tracking.baseline import set_baseline

    name = set_baseline(args.run_id, args.tracking_uri)
    print(f"run {args.run_id} ({name}) is now the baseline of its job")
    return 0


def _cmd_data_speech(args: argparse.Namespace) -> int:
    return _run_kind(args, "speech")


def _cmd_train(args: argparse.Namespace) -> int:
    kind = {"am": "train_am", "mt": "train_mt", "lm": "train_lm", "confidence": "train_confidence"}[args.train_command]
    if kind == "train_mt" and args.no_mlflow:  # no tracking: the runner (and mlflow) is never imported
        from specbench.experiments import train_mt

        config = _job_of_kind(args.file, kind)
        for line in train_mt.summary(config, train_mt.run_train_mt(config, args.file, None, args.device)):
            print(line)
        return 0
    return _run_kind(args, kind)


def _cmd_data_check(args: argparse.Namespace) -> int:
    from specbench.data.resolver import check_all

    root, how, checks = check_all()
    print(f"data directory: {root} (from {how})")
    if not root.is_dir():
        print(f"  MISSING: the folder does not exist. Fix: set SPECBENCH_DATA to the folder holding slurp/, "
              f"cmudict/ and multi30k/, or place it at {root}.")
        return 1
    bad = [c for c in checks if not c.ok]
    for c in checks:
        print(f"  {'ok     ' if c.ok else 'PROBLEM'} {c.file.relpath}" + ("" if c.ok else f": {c.problem}"))
    for c in bad:
        print(f"  fix {c.file.relpath}: it is the {c.file.what}; get it from {c.file.source} and place it at {c.path}")
    print(f"{len(checks) - len(bad)} of {len(checks)} files ok")
    return 1 if bad else 0


def _cmd_graph_build(args: argparse.Namespace) -> int:
    return _run_kind(args, "graph", force=args.force)


def _cmd_decode(args: argparse.Namespace) -> int:
    from specbench.experiments.decode import decode_file

    summary = decode_file(args.graph, args.scores, args.out, args.backend, args.beam, args.max_active,
                          args.acoustic_scale, args.frame_shift_ms, args.words, lattice_beam=args.lattice_beam,
                          lattice_dir=args.lattice_dir, partial_every_ms=args.partial_every_ms,
                          min_active=args.min_active)
    print(json.dumps(summary, indent=2))
    return 1 if summary["failed"] == summary["utterances"] else 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from specbench.reports.compare import render_html, render_text
    from specbench.tracking.compare import compare_runs
    from specbench.tracking.runs import TrackedRun

    comparison = compare_runs(args.run_ids, args.tracking_uri)
    print(render_text(comparison, args.all))
    if not args.no_artifact:
        name = "compare-" + "-".join(i[:8] for i in args.run_ids)
        with TrackedRun("compare", name, args.tracking_uri, {"kind": "compare",
                                                              "compare.runs": ",".join(args.run_ids)}) as run:
            run.log_text(render_html(comparison, args.all), "compare.html")
            print(f"\nHTML table: artifact compare.html of run {run.run_id} (experiment 'compare')")
    return 0


def _cmd_runs(args: argparse.Namespace) -> int:
    from specbench.reports.headline import HEADLINE_METRICS
    from specbench.tracking.queries import recent_runs

    rows = recent_runs(args.tracking_uri, args.limit, args.experiment, list(HEADLINE_METRICS))
    if not rows:
        print("no runs yet: try `specbench run jobs/quick.toml`")
        return 0
    header = ["run", "experiment", "name", "status", "started (UTC)", "headline metrics"]
    table = [[r.run_id[:12], r.experiment, r.name, r.status, r.started,
              ", ".join(f"{k}={v:.4g}" for k, v in sorted(r.metrics.items()))] for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *table)]
    for line in [header, *table]:
        print("  ".join(str(x).ljust(w) for x, w in zip(line, widths)).rstrip())
    return 0


def _cmd_server(args: argparse.Namespace) -> int:
    import signal

    from specbench.tracking.ui import start_ui

    uri = f"sqlite:///{args.store.resolve()}" if args.store else args.tracking_uri
    if args.store:
        args.store.parent.mkdir(parents=True, exist_ok=True)
    proc, address = start_ui(uri, host=args.host, port=args.port, artifacts=args.artifacts)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    print(f"MLflow tracking server at {address} (store {uri or 'the local store'}); jobs log to it with "
          f"`specbench --tracking-uri {address} ...`; Ctrl-C or SIGTERM stops it", flush=True)
    return _serve_until_stopped(proc)


def _cmd_ui(args: argparse.Namespace) -> int:
    from specbench.tracking.store import resolve_tracking_uri
    from specbench.tracking.ui import start_ui

    proc, address = start_ui(args.tracking_uri, host=args.host, port=args.port)
    print(f"MLflow UI for {resolve_tracking_uri(args.tracking_uri)} at {address} (Ctrl-C stops it)", flush=True)
    return _serve_until_stopped(proc)


def _serve_until_stopped(proc) -> int:  # noqa: ANN001 - a subprocess.Popen
    """Wait for the MLflow server until it exits or Ctrl-C; always stop it and its workers."""
    from specbench.tracking.ui import stop

    try:
        code = proc.wait()
    except KeyboardInterrupt:
        code = 0
    finally:
        stop(proc)
    if code:
        print(f"specbench: error: the MLflow server exited with code {code}", file=sys.stderr)
    return 1 if code else 0


def _cmd_bench(args: argparse.Namespace) -> int:
    """Build the benchmark's config from the options given, measure, log (unless --no-mlflow), print."""
    if args.bench_command == "decoder":
        from specbench.hardware import limit_threads

        limit_threads()  # before numpy is imported, so that its BLAS starts with one thread
    import importlib

    from specbench.benchmarks.harness import emit
    from specbench.experiments.registry import JOBS
    from specbench.paths import project_root

    kind = BENCHES[args.bench_command][0]
    job = JOBS[kind]
    config = config_from_args(job.config, args, f"specbench bench {args.bench_command}")
    module = importlib.import_module(job.runner.split(":")[0])
    result = module.measure(config, project_root() / "jobs" / f"{kind}.toml")
    result["mlflow_run_id"] = None if args.no_mlflow else _log_bench(result, args.tracking_uri)
    emit(result, args.output)
    if result.get("errors"):
        print(f"specbench: bench {args.bench_command}: these backends failed: {', '.join(result['errors'])} "
              "(see `backends` in the JSON)", file=sys.stderr)
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


def main(argv: Sequence[str] | None = None) -> int:
    """Parse `argv` and run the command; returns the exit code."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    try:
        return args.handler(args)
    except SpecbenchError as err:
        print(f"specbench: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("specbench: interrupted", file=sys.stderr)
        return 130


def entry_point() -> None:
    sys.exit(main())
