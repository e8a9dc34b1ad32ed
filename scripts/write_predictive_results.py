"""Write the committed results file of a finished `predictive_asr` run (benchmarks/results/predictive_asr_cpu.json):
the run's identity and wall time, the headline population's usage settings (its routine share calibrated on
devel), every scalar metric of the run (values rounded to 4 decimals: the tracked tree is kept small), the habit
sweep and the rendering-knob variants, read back from the run's tables. Metrics logged once per sweep point (MLflow
steps: the threshold sweeps, the habit sweep) are left out of `metrics`, where only their last point's value would
show under a name that reads like the configuration's result; the sweep tables and the MLflow run hold them. With `--slim` (a run kept for one
figure, such as a time, beside the headline's file), the habit sweep, the knob variants, the test curves and
the devel sweeps are left out and the file says so; the MLflow run keeps them.

    python scripts/write_predictive_results.py RUN_ID [--tracking-uri URI] [--output FILE] [--slim]
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "platform"))
sys.path.insert(0, str(ROOT / "scripts"))

from results_file import finished_run, rounded, write_results

from specbench.errors import ConfigError
from specbench.tracking.queries import resolve_run_id, run_minutes, stepped_metrics, text_artifact


def _r(value: Any) -> Any:
    """Floats rounded to 4 decimals; NaN as null, infinities as "inf"/"-inf" (JSON has no NaN)."""
    return rounded(value, 4)


def _table(run_id: str, name: str, tracking_uri: str | None) -> dict[str, Any] | None:
    """A CSV table of the run as {"columns": [...], "rows": [[...], ...]}, numbers rounded; None when the run
    has no such table (a run without the habit sweep)."""
    try:
        text = text_artifact(run_id, name, tracking_uri)
    except ConfigError:
        return None
    reader = csv.reader(io.StringIO(text))
    columns = next(reader)

    def value(text: str) -> Any:
        try:
            return _r(float(text))
        except ValueError:
            return text
    return {"columns": columns, "rows": [[value(v) for v in row] for row in reader]}


def results(run_id: str, tracking_uri: str | None) -> dict[str, Any]:
    run = finished_run(run_id, "predictive_asr", tracking_uri)
    swept = stepped_metrics(run_id, tracking_uri)
    return {
        "job": run.tags.get("job_file", "jobs/predictive_asr.toml"), "kind": "predictive_asr", "mlflow_run_id": run_id,
        "status": run.status,
        "hardware": run.tags.get("hardware", ""), "git_commit": run.tags.get("git_commit", ""),
        "metrics_version": run.tags.get("metrics.version", ""),
        "wall_minutes": _r(run_minutes(run_id, tracking_uri)),
        "protocol": "docs/prediction.md: thresholds" + (", the cache model's weight" if "prefetch.cache_weight" in
                                                        run.metrics else "")
                    + " and the calibrated routine share chosen on devel users only; test users measured at the "
                      "calibrated share with those settings",
        "headline_usage": {k.removeprefix("headline_usage."): v for k, v in sorted(run.params.items())
                           if k.startswith("headline_usage.")},
        "tags": {k: v for k, v in sorted(run.tags.items()) if not k.startswith("mlflow.")},
        "metrics": {k: _r(v) for k, v in sorted(run.metrics.items()) if k not in swept},
        "metrics_left_out": f"{len(swept)} metrics logged once per sweep point (MLflow steps)",
        "habit_sweep": _table(run_id, "tables/habit_sweep.csv", tracking_uri),
        "habit_knobs": _table(run_id, "tables/habit_knobs.csv", tracking_uri),
    }


SLIM_NOTE = ("slim: the habit sweep, the knob variants, the test curves (*_curve_at_failNN) and the devel sweeps "
             "(prefetch.devel.*) are left out; the MLflow run holds them")


def slim(data: dict[str, Any]) -> dict[str, Any]:
    """`data` without the habit sweep, the knob variants, the test curves and the devel sweeps."""
    out = {k: v for k, v in data.items() if k not in ("habit_sweep", "habit_knobs")}
    out["metrics"] = {k: v for k, v in data["metrics"].items()
                      if not k.startswith(("habit.", "prefetch.devel.")) and "_curve_at_fail" not in k}
    out["slim"] = SLIM_NOTE
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_id", help="the run id (or a unique prefix) of a finished predictive_asr run")
    parser.add_argument("--tracking-uri", default=None)
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "predictive_asr_cpu.json")
    parser.add_argument("--slim", action="store_true", help="leave out the habit sweep, the knobs, the test "
                        "curves and the devel sweeps (a run kept for one figure)")
    args = parser.parse_args()
    try:
        data = results(resolve_run_id(args.run_id, args.tracking_uri), args.tracking_uri)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    write_results(args.output, slim(data) if args.slim else data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
