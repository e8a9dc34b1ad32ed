"""The command line's parser: one small function per verb (`_add_<verb>`), each binding its handler from
`commands.py`. The `bench` verbs take their options from their benchmark configs (`options.py`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from specbench.cli.commands import (
    cmd_baseline,
    cmd_bench,
    cmd_compare,
    cmd_data_check,
    cmd_data_speech,
    cmd_decode,
    cmd_graph_build,
    cmd_jobs,
    cmd_logs,
    cmd_nightly,
    cmd_run,
    cmd_runs,
    cmd_server,
    cmd_submit,
    cmd_sync,
    cmd_train,
    cmd_ui,
    cmd_validate,
)
from specbench.cli.options import BENCH_POSITIONAL, BENCHES, add_config_options


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="specbench",
        description="Evaluate latency-hiding ASR and simultaneous "
        "translation: jobs on Ray, results in MLflow.",
    )
    p.add_argument(
        "--tracking-uri",
        type=_tracking_uri,
        help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else the local store .specbench/mlflow.db)",
    )
    p.add_argument(
        "--ray-address",
        type=_ray_address,
        help="Ray cluster to join (HOST:PORT, auto or ray://HOST:PORT); default: a local Ray "
        "bound to 127.0.0.1, or $RAY_ADDRESS",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (
        _add_run,
        _add_validate,
        _add_nightly,
        _add_submit,
        _add_jobs,
        _add_logs,
        _add_sync,
        _add_baseline,
        _add_data,
        _add_train,
        _add_graph,
        _add_decode,
        _add_compare,
        _add_runs,
        _add_server,
        _add_ui,
        _add_bench,
    ):
        add(sub)
    return p


def _ray_address(text: str) -> str:
    """An argparse type: a Ray address of a form Ray joins (argparse names the option on failure); whether
    the cluster answers is checked when the job connects (`runtime.cluster.connect`)."""
    from specbench.runtime.address import FORMS, address_problem

    problem = address_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(f"{text!r}: {problem}. Fix: {FORMS}; or leave the option out to run on "
                                         "a local Ray")
    return text


def _tracking_uri(text: str) -> str:
    """An argparse type: a tracking URI given at all (an empty one, from an unset shell variable say, would
    otherwise mean the default store without a word); its form is checked where it is used."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty URI. Fix: give the store's URI (sqlite:///PATH.db or "
                                         "http://HOST:PORT), or leave the option out for the default store")
    return text


def _port(text: str) -> int:
    """An argparse type: a TCP port, a whole number from 1 to 65535 (`tracking.ui.is_port`)."""
    from specbench.tracking.ui import PORTS, is_port

    try:
        value = int(text)
    except ValueError:
        value = 0
    if not is_port(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a port. Fix: give {PORTS} (e.g. 5000)")
    return value


def _verb(sub, name: str, handler, help: str, file: str | None = None) -> argparse.ArgumentParser:  # noqa: A002, ANN001
    """A verb's parser bound to its handler; with `file`, a positional job file argument so described."""
    parser = sub.add_parser(name, help=help)
    parser.set_defaults(handler=handler)
    if file:
        parser.add_argument("file", type=Path, help=file)
    return parser


def _add_run(sub) -> None:  # noqa: ANN001 - argparse's private subparsers action
    _verb(sub, "run", cmd_run, "run a job or a suite", "a job or suite file (jobs/*.toml)")


def _add_validate(sub) -> None:  # noqa: ANN001
    _verb(
        sub, "validate", cmd_validate, "check a job or suite file without running it", "a job or suite file"
    )


def _add_nightly(sub) -> None:  # noqa: ANN001
    _verb(
        sub,
        "nightly",
        cmd_nightly,
        "run the nightly suite, compare headline metrics with their baselines, exit non-zero on a regression",
        "the nightly file (jobs/nightly.toml)",
    )


def _add_submit(sub) -> None:  # noqa: ANN001
    sm = _verb(
        sub,
        "submit",
        cmd_submit,
        "submit a job to a Ray cluster through the Jobs API (the project is its working_dir)",
        "a job or suite file inside the project",
    )
    sm.add_argument("--address", required=True, help="the cluster's dashboard, e.g. http://HEAD:8265")
    sm.add_argument(
        "--tracking-uri",
        type=_tracking_uri,
        dest="submit_tracking_uri",
        help="MLflow tracking URI the job logs to (an http:// server for multi-node clusters)",
    )
    sm.add_argument("--follow", action="store_true", help="print the job's logs until it ends")


def _add_jobs(sub) -> None:  # noqa: ANN001
    _verb(sub, "jobs", cmd_jobs, "the jobs of a Ray cluster").add_argument("--address", required=True)


def _add_logs(sub) -> None:  # noqa: ANN001
    lg = _verb(sub, "logs", cmd_logs, "the logs of a submitted job")
    lg.add_argument("job_id")
    lg.add_argument("--address", required=True)
    lg.add_argument("--follow", action="store_true", help="keep printing until the job ends")


def _add_sync(sub) -> None:  # noqa: ANN001
    _verb(sub, "sync", cmd_sync, "send runs that were logged while their MLflow server was unreachable")


def _add_baseline(sub) -> None:  # noqa: ANN001
    base = sub.add_parser("baseline", help="the nightly's baselines").add_subparsers(
        dest="baseline_command", required=True
    )
    bset = _verb(base, "set", cmd_baseline, "make a run the baseline of its job")
    bset.add_argument(
        "run_id",
        metavar="RUN_ID",
        help="a run id, or any unique prefix of one (as `specbench runs` prints it)",
    )
    bset.add_argument(
        "--reason",
        help="why the baseline is reset (kept as the run's baseline.reason tag), e.g. "
        "a headline metric that changed meaning",
    )


def _add_data(sub) -> None:  # noqa: ANN001
    data = sub.add_parser("data", help="the shared data").add_subparsers(dest="data_command", required=True)
    check = _verb(
        data, "check", cmd_data_check,
        "verify every shipped data file: present, readable and identical to its recorded sha256",
    )
    check.add_argument(
        "--full",
        action="store_true",
        help="also read every file with the project's readers (about 2 s; by default only changed files are)",
    )
    _verb(data, "speech", cmd_data_speech, "synthesize the speech corpus of a speech job", "a speech job")


def _add_train(sub) -> None:  # noqa: ANN001
    train = sub.add_parser("train", help="train a model").add_subparsers(dest="train_command", required=True)
    _verb(train, "am", cmd_train, "train the causal CTC acoustic model", "a train_am job (jobs/am.toml)")
    tmt = _verb(
        train,
        "mt",
        cmd_train,
        "train a translation model (wait-k or full-sentence; resumes from its last checkpoint)",
        "a train_mt job (jobs/mt_waitk.toml)",
    )
    tmt.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda"),
        default="auto",
        help="auto: a CUDA device when torch can use one, else the CPU",
    )
    tmt.add_argument(
        "--no-mlflow",
        action="store_true",
        help="do not log an MLflow run (the card and the checkpoint are written all the same)",
    )
    _verb(train, "lm", cmd_train, "train the word LSTM LM of prediction", "a train_lm job (jobs/lm.toml)")
    _verb(
        train,
        "confidence",
        cmd_train,
        "train the prefetch confidence models (with the personal feature, without it, with the personal "
        "and context features)",
        "a train_confidence job (jobs/confidence.toml)",
    )


def _add_graph(sub) -> None:  # noqa: ANN001
    graph = sub.add_parser("graph", help="the decoding graph").add_subparsers(
        dest="graph_command", required=True
    )
    build = _verb(graph, "build", cmd_graph_build, "build the TLG of a graph job", "a graph job")
    build.add_argument("--force", action="store_true", help="rebuild even if a matching graph exists")


def _add_decode(sub) -> None:  # noqa: ANN001
    dec = _verb(
        sub,
        "decode",
        cmd_decode,
        "decode acoustic scores with a WFST (CPU, GPU, the GPU algorithm's "
        "numpy twin, or Kaldi's FasterDecoder)",
    )
    dec.add_argument(
        "--graph", type=Path, required=True, help="OpenFst graph (vector or const): the TLG.fst or HCLG.fst in the "
        "folder `specbench graph build JOB.toml` prints (under .specbench/graphs/)"
    )
    dec.add_argument("--scores", type=Path, required=True, help=".parquet, Kaldi .scp/.ark, .npy or .npz")
    dec.add_argument(
        "--out", type=Path, required=True, help="output: .jsonl (one JSON line each) or .parquet"
    )
    dec.add_argument("--words", type=Path, help="words.txt (beside the graph): write words as strings, not only "
                     "output labels")
    dec.add_argument(
        "--backend",
        choices=("cpu", "cpu_numpy", "gpu", "twin", "kaldi", "auto"),
        default="cpu",
        help="auto: gpu when a CUDA device is usable, else cpu",
    )
    dec.add_argument("--frame-shift-ms", type=float,
                     help="frame shift of Kaldi/numpy scores (Parquet scores record theirs: another is refused)")
    dec.add_argument("--beam", type=float, default=15.0, help="search beam, in cost units (default 15)")
    dec.add_argument("--max-active", type=int, default=10000, help="most tokens kept a frame (default 10000)")
    dec.add_argument("--min-active", type=int, default=20, help="fewest tokens kept a frame (default 20)")
    dec.add_argument("--acoustic-scale", type=float, default=1.0,
                     help="weight of the acoustic scores against the graph's (default 1.0, which suits our CTC "
                     "model's scores over the SLURP TLG; the Sphinx HCLG wants 0.08 to 0.1, as the real-speech "
                     "job tunes it)")
    dec.add_argument(
        "--lattice-beam", type=float, help="keep lattices within this beam (default 8 with --lattice-dir)"
    )
    dec.add_argument("--lattice-dir", type=Path, help="write one OpenFst word lattice per utterance here")
    dec.add_argument(
        "--workers", type=int, help="decoders in parallel, as Ray actors sharing one memory-mapped graph "
        "(cpu, cpu_numpy, kaldi; default: one per core from 300,000 frames on, else 1; 1: no Ray)"
    )
    dec.add_argument("--partial-every-ms", type=float, help="partial hypotheses every this many ms of audio "
                     "(rounded to whole frames)")
    dec.add_argument("--references", type=Path, help="Kaldi text file (utterance id, then its words; needs "
                     "--words): the summary adds the WER and, with --lattice-dir, the lattice oracle WER")


def _add_compare(sub) -> None:  # noqa: ANN001
    cmp = _verb(
        sub,
        "compare",
        cmd_compare,
        "params and metrics of runs side by side, with deltas (only what "
        "differs unless --all); the HTML table is kept as an MLflow artifact",
    )
    cmp.add_argument(
        "run_ids",
        nargs="+",
        metavar="RUN_ID",
        help="run ids, or unique prefixes of them (as `specbench runs` prints them)",
    )
    cmp.add_argument("--all", action="store_true", help="show every param and metric, not only differences")
    cmp.add_argument("--no-artifact", action="store_true", help="print only; log no `compare` run")


def _at_least_one(text: str) -> int:
    """An argparse type: a whole number from 1 to 50,000, the most runs one MLflow search returns (argparse
    names the option and the value on failure)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1 (e.g. 20)")
    if value > 50_000:
        raise argparse.ArgumentTypeError(f"{text!r} is more than 50000, the most runs MLflow lists at once")
    return value


def _add_runs(sub) -> None:  # noqa: ANN001
    runs = _verb(sub, "runs", cmd_runs, "recent MLflow runs with their headline metrics")
    runs.add_argument("--limit", type=_at_least_one, default=20, help="how many runs, newest first (default 20)")
    runs.add_argument("--experiment", help="only this experiment's runs")


def _add_server(sub) -> None:  # noqa: ANN001
    srv = _verb(
        sub,
        "server",
        cmd_server,
        "run an MLflow tracking server (SQLite store, artifacts served over HTTP) until Ctrl-C or SIGTERM",
    )
    srv.add_argument("--store", type=Path, help="SQLite .db file, created with its folder if missing (default: "
                     "the store --tracking-uri or $MLFLOW_TRACKING_URI selects, else .specbench/mlflow.db)")
    srv.add_argument("--artifacts", type=Path, help="artifact folder for any store, created if missing "
                     "(default .specbench/mlartifacts for a SQLite store, MLflow's ./mlartifacts for another)")
    srv.add_argument(
        "--host", default="127.0.0.1", help="bind address (default 127.0.0.1: this machine only)"
    )
    srv.add_argument("--port", type=_port, default=5000, help="1 to 65535 (default 5000)")
    srv.add_argument("--allowed-hosts", metavar="NAMES", help="more host names clients may use "
                     "(A,B; '*': any)")


def _add_ui(sub) -> None:  # noqa: ANN001
    ui = _verb(sub, "ui", cmd_ui, "start the MLflow UI on 127.0.0.1 and print its address")
    ui.add_argument("--port", type=_port, default=5000, help="1 to 65535 (default 5000)")
    ui.add_argument("--host", default="127.0.0.1")


def _add_bench(sub) -> None:  # noqa: ANN001
    from specbench.experiments.registry import JOBS

    bench = sub.add_parser("bench", help="benchmarks (JSON to stdout, logged to MLflow)")
    bsub = bench.add_subparsers(dest="bench_command", required=True)
    for name, (kind, text) in BENCHES.items():
        parser = _verb(bsub, name, cmd_bench, text)
        add_config_options(parser, JOBS[kind].config, positional=BENCH_POSITIONAL.get(name, ()))
        parser.add_argument("--output", type=Path, help="also write the JSON here")
        parser.add_argument("--no-mlflow", action="store_true", help="do not log an MLflow run")
