"""Write the committed results file of a finished job run whose report is one JSON artifact: the run's
identity, wall time and conditions, and the report, numbers rounded to 4 decimals. `--kind real_speech`
(the default; `real_speech.json`: tuning, WER per set and system with intervals, speed; with --graph-run,
also the build of its graph: the `graph` job's run with build seconds, peak memory, sizes, per-stage
seconds, LM sizes and perplexities) or `--kind word_confidence` (`word_confidence.json`: the devel grid,
NCE, AUC and calibration per backend).

    python scripts/write_job_results.py RUN_ID [--kind real_speech|word_confidence] [--tracking-uri URI]
        [--output FILE] [--note TEXT] [--job FILE] [--graph-run GRAPH_RUN_ID] [--graph-note TEXT]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "platform"))
sys.path.insert(0, str(ROOT / "scripts"))

from results_file import finished_run, rounded, write_results

from specbench.errors import ConfigError
from specbench.tracking.queries import json_artifact, resolve_run_id, run_minutes


def _r(value: Any) -> Any:
    return rounded(value, 4)


def _in_project(path: str) -> str:
    """A job file path as the project names it (relative to the checkout where it lies inside it)."""
    try:
        return str(Path(path).resolve().relative_to(ROOT)) if path else path
    except ValueError:
        return path


def graph_build(run_id: str, tracking_uri: str | None, note: str) -> dict[str, Any]:
    run = finished_run(run_id, "graph", tracking_uri)
    return {"mlflow_run_id": run_id, "job": _in_project(run.tags.get("job_file", "")),
            "hardware": run.tags.get("hardware", ""),
            "git_commit": run.tags.get("git_commit", ""), "conditions": note,
            "metrics": _r(dict(sorted(run.metrics.items()))), "params": dict(sorted(run.params.items()))}


def results(run_id: str, tracking_uri: str | None, note: str, job: str, kind: str = "real_speech") -> dict[str, Any]:
    run = finished_run(run_id, kind, tracking_uri)
    return {
        "job": job, "kind": kind, "mlflow_run_id": run_id, "status": run.status,
        "hardware": run.tags.get("hardware", ""), "git_commit": run.tags.get("git_commit", ""),
        "metrics_version": run.tags.get("metrics.version", "1"),
        "wall_minutes": _r(run_minutes(run_id, tracking_uri)), "conditions": note,
        "params": dict(sorted(run.params.items())),
        "report": _r(json_artifact(run_id, f"{kind}.json", tracking_uri)),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_id")
    parser.add_argument("--tracking-uri")
    parser.add_argument("--kind", choices=("real_speech", "word_confidence"), default="real_speech")
    parser.add_argument("--output", type=Path, help="default: benchmarks/results/<kind>_cpu.json")
    parser.add_argument("--note", default="", help="the conditions of the run (load, overridden settings)")
    parser.add_argument("--job", help="the job file the run came from (default: jobs/<kind>.toml)")
    parser.add_argument("--graph-run", help="the MLflow run of the graph job that built the run's HCLG")
    parser.add_argument("--graph-note", default="", help="the conditions of the graph build (load)")
    args = parser.parse_args()
    output = args.output or ROOT / "benchmarks" / "results" / f"{args.kind}_cpu.json"
    try:
        run_id = resolve_run_id(args.run_id, args.tracking_uri)
        written = results(run_id, args.tracking_uri, args.note, args.job or f"jobs/{args.kind}.toml", args.kind)
        if args.graph_run:
            written["graph_build"] = graph_build(resolve_run_id(args.graph_run, args.tracking_uri),
                                                 args.tracking_uri, args.graph_note)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    write_results(output, written)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
