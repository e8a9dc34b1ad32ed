"""Write the committed results file of a finished `simultrans` run (benchmarks/results/simultrans_job_cpu.json):
the run's identity and wall time, the settings chosen on val, the headline scalars, and compact tables of
every test set's curves, decomposition, full-sentence baselines and corpus statistics, read back from the
run's `simultrans_report.json` (values rounded to 3 decimals, and a scalar that a table holds kept once: the
tracked tree is kept small).

    python scripts/write_simultrans_results.py RUN_ID [--tracking-uri URI] [--output FILE]
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
from specbench.experiments.simultrans_sets import COMPARISONS
from specbench.tracking.queries import json_artifact, resolve_run_id, run_minutes

CURVE_COLUMNS = ("k", "bleu", "laal_words", "al_ref_words", "al_words", "al", "length_ratio", "brevity_penalty")
CORPUS_COLUMNS = ("bleu", "precision_1", "precision_2", "precision_3", "precision_4", "brevity_penalty",
                  "sacrebleu_length_ratio")
COMPARISON_COLUMNS = ("k", "gain", "low", "high", "no_win_share", "laal_increase", "al_ref_increase")
ADAPTIVE_COLUMNS = ("threshold", "bleu", "laal_words", "al_ref_words", "al_words", "length_ratio")
RANKING_COLUMNS = CORPUS_COLUMNS + ("laal_words", "length_ratio")


def _r(value: Any) -> Any:
    return rounded(value, 3)


def _rows(points: list[dict[str, Any]], columns: tuple[str, ...]) -> list[list[Any]]:
    return [[_r(p[c]) for c in columns] for p in points]


def compact(report: dict[str, Any], grid_k: int) -> dict[str, Any]:
    """The tables of the report, one row per k (or threshold), columns named once."""
    sets: dict[str, Any] = {}
    for split, section in report["sets"].items():
        at = next((i for i, p in enumerate(section["curves"]["waitk_sbs"]) if p["k"] == grid_k), None)
        if at is None:
            raise ConfigError(f"the report's {split} curves have no point at grid_k = {grid_k}. Fix: give a run "
                              "whose job decoded k = grid_k (the full simultrans job does)")
        sets[split] = {
            "sentences": section["sentences"],
            "curves": {label: _rows(points, ADAPTIVE_COLUMNS if label.startswith("adaptive_") else CURVE_COLUMNS)
                       for label, points in section["curves"].items()},
            "full_sentence": {name: [_r(section[name][c]) for c in CORPUS_COLUMNS] + [_r(section[name]["laal_words"])]
                              for name in ("full_sentence_greedy", "full_sentence_beam")},
            "corpus_statistics_at_grid_k": {label: [_r(points[at][c]) for c in CORPUS_COLUMNS]
                                            for label, points in section["curves"].items()
                                            if not label.startswith("adaptive_")},
            "decomposition": {model: {comparison: [[_r(p["k"])] + [_r(p[comparison][c]) for c in COMPARISON_COLUMNS[1:]]
                                                   for p in points]
                                      for comparison in ("speculation", "sbs_vs_greedy", "tail_vs_greedy")}
                              for model, points in section["decomposition"].items()},
        }
    return sets


def kept_scalars(headline: dict[str, float], splits: list[str]) -> dict[str, float]:
    """The run's headline scalars without those the file's tables already hold: each test set's and val's
    decomposition at grid_k (`simul.<split>.speculation_gain_bleu`, ..., `simul.val.testtime_...`) is the
    k = grid_k row of `sets[<split>].decomposition` or `val_decomposition_at_grid_k`."""
    tables = tuple(f"simul.{split}.{model}{comparison}_" for split in (*splits, "val")
                   for model in ("", "testtime_") for comparison, _, _ in COMPARISONS)
    return {k: _r(v) for k, v in sorted(headline.items()) if not k.startswith(tables)}


def results(run_id: str, tracking_uri: str | None) -> dict[str, Any]:
    run = finished_run(run_id, "simultrans", tracking_uri)
    report = json_artifact(run_id, "simultrans_report.json", tracking_uri)
    headline = report["headline"]
    return {
        "job": "jobs/simultrans.toml", "kind": "simultrans", "mlflow_run_id": run_id, "status": run.status,
        "hardware": run.tags.get("hardware", ""), "git_commit": run.tags.get("git_commit", ""),
        "metrics_version": run.tags.get("metrics.version", "1"), "settings": dict(sorted(run.params.items())),
        "wall_minutes": _r(run_minutes(run_id, tracking_uri)), "bleu_signature": report["bleu_signature"],
        "protocol": "docs/translation.md, 'Protocol': settings chosen on val only; every test set reported; headline "
                    "= speculation-only gain (SBS - tail beam), wait-k model, k = grid_k, test sets pooled",
        "grid_k": report["grid_k"], "val_sentences": report["val_sentences"],
        "test_sentences": report["test_sentences"], "pooled_sentences": report["pooled_sentences"],
        "chosen_on_val": report["best"],
        **({"stage_seconds": {stage: round(s, 1) for stage, s in report["seconds"].items()}}
           if "seconds" in report else {}),  # runs before the job timed its stages have none
        "headline": kept_scalars(headline, list(report["test_sentences"])),
        "val_decomposition_at_grid_k": {model: {c: {m: _r(v) for m, v in values.items()}
                                                for c, values in comparisons.items()}
                                        for model, comparisons in report["val"].items()},
        "speculation_ranking": {split: {name: [_r(section[m]) for m in RANKING_COLUMNS]
                                        for name, section in ablation.items()}
                                for split, ablation in report["speculation_ranking"].items()},
        "columns": {"curves": CURVE_COLUMNS, "adaptive curves": ADAPTIVE_COLUMNS,
                    "full_sentence": CORPUS_COLUMNS + ("laal_words",), "corpus_statistics_at_grid_k": CORPUS_COLUMNS,
                    "decomposition": COMPARISON_COLUMNS, "speculation_ranking": RANKING_COLUMNS},
        "sets": compact(report, report["grid_k"]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_id", help="the run id (or a unique prefix) of a finished simultrans run")
    parser.add_argument("--tracking-uri", default=None)
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "simultrans_job_cpu.json")
    args = parser.parse_args()
    try:
        data = results(resolve_run_id(args.run_id, args.tracking_uri), args.tracking_uri)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    write_results(args.output, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
