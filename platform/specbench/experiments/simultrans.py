"""The `simultrans` job: speculative beam search for simultaneous translation, from checkpoints.

1. On val, the (b, w) grid of single-step SBS for the wait-k model at `grid_k` and for the full-sentence
   model under test-time wait-k (w = 0 is greedy), for one or both speculation rankings; the best
   (ranking, b, w) per model (highest BLEU, then lowest AL, then the configured ranking).
2. On test, for every k: greedy, tail beam (b*) and SBS (b*, w*) for both models; the adaptive confidence
   policy (wait-k model) over thresholds with greedy chunks, beam search per chunk (b*, w = 0) and chunk
   SBS (b*, w*); full-sentence greedy and beam (b*) baselines.
Every configuration is decoded as Ray tasks over sentence shards; BLEU and latencies are logged as MLflow
metrics (step = index of k or threshold), tables (JSON) and BLEU-against-AL plots. Headline scalars:
`simul.bleu_full` (full-sentence beam search, test) and `simul.sbs_gain_bleu` (SBS minus greedy for the
wait-k model at grid_k, test), with `simul.sbs_al_increase` and the gain's paired-bootstrap 95% interval
(`simul.sbs_gain_bleu_low`, `_high`) and the share of resamples where SBS does not win
(`simul.sbs_gain_no_win_share`, Koehn 2004); the same for test-time wait-k with the full-sentence model is
`simul.testtime_sbs_gain_bleu` (`_low`, `_high`, `_no_win_share`). Speculations are ranked per token
(`length_normalized_speculation`), or, with `rank_speculations_on_val`, by whichever ranking wins the val
grid for each model (the grid is then decoded both ways; `simul.waitk_ranking_per_token`,
`simul.full_ranking_per_token` say which was chosen). The run also decodes the wait-k model's SBS at grid_k
with the ranking it did not choose and logs both gains and length ratios
(`simul.sbs_gain_bleu_per_token_ranking`, `_sum_ranking`).
3. On each of `extra_test_splits`: greedy and SBS at every k for both models with the same settings, each
   model's SBS gain at grid_k with its interval (`simul.<split>.sbs_gain_bleu`, ...), and the gain over the
   sentences of all test splits together (`simul.all_test.sbs_gain_bleu`, `simul.all_test.testtime_...`).
"""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specbench.config import SimultransConfig
from specbench.data.multi30k import read_pairs
from specbench.errors import DataError
from specbench.experiments.registry import RunOptions
from specbench.metrics.bleu_bootstrap import BleuGain, paired_bootstrap
from specbench.paths import from_root
from specbench.reports.plots import pyplot
from specbench.simultrans.experiment import Method, Shard, bleu_signature, decode_shard, score
from specbench.simultrans.tokenizer import Tokenizer

if TYPE_CHECKING:
    from specbench.tracking.runs import TrackedRun


class Evaluator:
    """Decodes one split with any Method through Ray tasks and scores it (results memoized)."""

    def __init__(self, config: SimultransConfig, split: str, limit: int, bpe: Path) -> None:
        pairs = read_pairs(split, config.source, config.target)
        self.pairs = pairs[:limit] if limit else pairs
        self.split, self.bpe, self.shard_size = split, str(bpe), config.shard_size
        tok = Tokenizer(bpe)
        self.reference_tokens = [len(tok.encode(t)) for _, t in self.pairs]
        self.results: dict[str, dict[str, float]] = {}
        self.hypotheses: dict[str, list[str]] = {}

    def __call__(self, method: Method) -> dict[str, float]:
        if method.label not in self.results:
            from specbench.runtime import run_tasks

            sources = [s for s, _ in self.pairs]
            shards = [Shard(method, self.bpe, sources[i:i + self.shard_size])
                      for i in range(0, len(sources), self.shard_size)]
            rows = [r for part in run_tasks(decode_shard, shards, progress=f"{self.split} {method.label}",
                                            metrics=_translated) for r in part]
            self.results[method.label] = score(rows, self.references, self.reference_tokens)
            self.hypotheses[method.label] = [r["hypothesis"] for r in rows]
            print(f"{self.split} {method.label}: " + ", ".join(f"{k} {v:.3g}" for k, v in
                                                                self.results[method.label].items()),
                  file=sys.stderr, flush=True)
        return self.results[method.label]

    @property
    def references(self) -> list[str]:
        return [t for _, t in self.pairs]

    def gain(self, better: Method, baseline: Method, samples: int) -> BleuGain:
        """Paired bootstrap of BLEU(better) − BLEU(baseline) on this split (both decoded first)."""
        self(better), self(baseline)
        return paired_bootstrap(self.hypotheses[better.label], self.hypotheses[baseline.label], self.references,
                                samples=samples)


def _translated(rows: list[dict[str, Any]]) -> dict[str, float]:
    """The Prometheus numbers of one decoded shard."""
    return {"sentences_translated": float(len(rows))}


def _best(results: dict[tuple[bool, int, int], dict[str, float]], default_ranking: bool) -> tuple[bool, int, int]:
    """The (length_normalized, b, w) with the highest BLEU, then the lowest AL, then the default ranking."""
    return max(results, key=lambda rbw: (round(results[rbw]["bleu"], 2), -results[rbw]["al"],
                                         rbw[0] == default_ranking))


def _ranking_suffix(ranking: bool, default_ranking: bool, separator: str) -> str:
    """Nothing for the default ranking; `/sum` or `/per_token` (with `separator`) for the other."""
    return "" if ranking == default_ranking else separator + ("per_token" if ranking else "sum")


def _grid_key(ranking: bool, b: int, w: int, default_ranking: bool) -> str:
    """`b5_w2` for the default ranking, `b5_w2/sum` or `b5_w2/per_token` for the other."""
    return f"b{b}_w{w}" + _ranking_suffix(ranking, default_ranking, "/")


def run_simultrans(config: SimultransConfig, job_path: Path, run: TrackedRun | None,
                   ray_address: str | None = None) -> dict[str, Any]:
    from specbench.runtime import connect

    bpe = from_root(config.bpe_model)
    models = {"waitk": str(from_root(config.waitk_model)), "full": str(from_root(config.full_model))}
    for path in (*models.values(), bpe):
        if not Path(path).is_file():
            raise DataError(f"{path} does not exist. Fix: train the models first: `specbench train mt "
                            "jobs/mt_waitk.toml` and `specbench train mt jobs/mt_full.toml`")
    connect(ray_address)
    val = Evaluator(config, config.val_split, config.val_sentences, bpe)
    test = Evaluator(config, config.test_split, config.test_sentences, bpe)
    try:  # read every test set before the long decoding starts
        others = [Evaluator(config, split, config.test_sentences, bpe) for split in config.extra_test_splits]
    except DataError as exc:
        raise DataError(f"{job_path}: extra_test_splits: {exc}") from exc
    report: dict[str, Any] = {"bleu_signature": bleu_signature(), "val_sentences": len(val.pairs),
                              "test_sentences": len(test.pairs), "grid": {}, "best": {}, "test": {}}

    default = config.length_normalized_speculation
    rankings = (default, not default) if config.rank_speculations_on_val else (default,)
    for name, path in models.items():  # 1. the (ranking, b, w) grid on val
        greedy = val(Method("waitk", path, k=config.grid_k))
        grid = {(ranking, b, w): (greedy if w == 0 else val(Method("waitk", path, "sbs", k=config.grid_k, beam=b,
                                                                   window=w, length_normalized=ranking)))
                for ranking in rankings for b in config.grid_beams for w in config.grid_windows}
        report["grid"][name] = {_grid_key(*key, default): r for key, r in grid.items()}
        report["best"][name] = dict(zip(("length_normalized", "beam", "window"), _best(grid, default), strict=True))
        _log_grid(run, name, default, grid)

    curves = _waitk_curves(test, models, report, config.ks, ("greedy", "tail", "sbs"))  # 2. the test curves
    normalized, b, w = _chosen(report, "waitk")
    for search in ("greedy", "beam", "sbs"):
        label = f"adaptive_{search}"
        curves[label] = []
        for threshold in config.thresholds:
            method = Method("adaptive", models["waitk"], search=search, threshold=threshold,
                            beam=b if search != "greedy" else 1, window=w if search == "sbs" else 0,
                            length_normalized=normalized)
            curves[label].append({"threshold": threshold, **test(method)})
    full_greedy = test(Method("full", models["full"], beam=1))
    full_beam = test(Method("full", models["full"], beam=b))
    report["test"] = {"curves": curves, "full_greedy": full_greedy, "full_beam": full_beam}

    # (SBS, greedy) at grid_k per model: already decoded when grid_k is in ks (memoized)
    at_k = {name: (_waitk_method(path, "sbs", config.grid_k, _chosen(report, name)),
                   _waitk_method(path, "greedy", config.grid_k, _chosen(report, name)))
            for name, path in models.items()}
    gains = {name: test.gain(sbs, greedy, config.bootstrap_samples) for name, (sbs, greedy) in at_k.items()}
    report["sbs_gain_bootstrap"] = {name: asdict(g) for name, g in gains.items()}
    sbs_k, greedy_k = (test(method) for method in at_k["waitk"])
    # ablation: the same SBS ranked the other way (summed log-probability, the seed's eq. 4, or per token)
    waitk_sbs = at_k["waitk"][0]
    other = test(replace(waitk_sbs, length_normalized=not waitk_sbs.length_normalized))
    per_token, summed = (sbs_k, other) if waitk_sbs.length_normalized else (other, sbs_k)
    report["speculation_ranking"] = {"per_token": per_token, "sum": summed, "greedy": greedy_k}
    gain, testtime = gains["waitk"], gains["full"]
    headline = {"simul.bleu_full": full_beam["bleu"], "simul.bleu_full_greedy": full_greedy["bleu"],
                "simul.bleu_full_lowercase": full_beam["bleu_lowercase"],
                **_gain_scalars("simul.sbs", gain), **_gain_scalars("simul.testtime_sbs", testtime),
                "simul.sbs_al_increase": sbs_k["al"] - greedy_k["al"],
                "simul.sbs_gain_bleu_per_token_ranking": per_token["bleu"] - greedy_k["bleu"],
                "simul.sbs_gain_bleu_sum_ranking": summed["bleu"] - greedy_k["bleu"],
                "simul.sbs_length_ratio_per_token_ranking": per_token["length_ratio"],
                "simul.sbs_length_ratio_sum_ranking": summed["length_ratio"],
                "simul.best_beam": float(b), "simul.best_window": float(w),
                **{f"simul.{name}_ranking_per_token": float(_chosen(report, name)[0]) for name in models}}
    headline.update(_other_test_sets(config, models, report, test, others, at_k))
    report["headline"] = headline
    if run is not None:
        _log_run(run, config, report, curves, headline)
    return report


def _waitk_method(path: str, search: str, k: int, chosen: tuple[bool, int, int]) -> Method:
    """Wait-k decoding of one model at k by greedy, tail beam or SBS with its (ranking, b, w) from val."""
    normalized, b, w = chosen
    return Method("waitk", path, search=search, k=k, beam=b if search != "greedy" else 1,
                  window=w if search == "sbs" else 0, length_normalized=normalized)


def _waitk_curves(evaluator: Evaluator, models: dict[str, str], report: dict[str, Any], ks: tuple[int, ...],
                  searches: tuple[str, ...]) -> dict[str, list[dict[str, float]]]:
    """`{model}_{search}`: one point per k, each model with the (ranking, b, w) chosen on val."""
    return {f"{name}_{search}": [{"k": k, **evaluator(_waitk_method(path, search, k, _chosen(report, name)))}
                                 for k in ks]
            for name, path in models.items() for search in searches}


_GAIN_PREFIX = {"waitk": "sbs", "full": "testtime_sbs"}  # headline name of each model's SBS gain at grid_k


def _gain_scalars(prefix: str, gain: BleuGain) -> dict[str, float]:
    return {f"{prefix}_gain_bleu": gain.gain, f"{prefix}_gain_bleu_low": gain.low,
            f"{prefix}_gain_bleu_high": gain.high, f"{prefix}_gain_no_win_share": gain.no_win_share}


def _other_test_sets(config: SimultransConfig, models: dict[str, str], report: dict[str, Any],
                     test: Evaluator, others: list[Evaluator],
                     at_k: dict[str, tuple[Method, Method]]) -> dict[str, float]:
    """Greedy and SBS at every k on each of `extra_test_splits` (the settings chosen on val), with each
    model's SBS gain at grid_k and its interval per split (`simul.<split>.sbs_gain_bleu`, ...), and the
    gain over the sentences of all test splits together (`simul.all_test.sbs_gain_bleu`, ...)."""
    if not others:
        return {}
    evaluators = [test, *others]
    scalars: dict[str, float] = {}
    report["other_test"] = {}
    for evaluator in evaluators[1:]:
        section = {"sentences": len(evaluator.pairs), "curves": _waitk_curves(
            evaluator, models, report, config.ks, ("greedy", "sbs")), "gains": {}}
        for name, (sbs, greedy) in at_k.items():
            gain = evaluator.gain(sbs, greedy, config.bootstrap_samples)
            section["gains"][name] = asdict(gain)
            prefix = f"simul.{evaluator.split}.{_GAIN_PREFIX[name]}"
            scalars.update(_gain_scalars(prefix, gain))
            scalars[f"{prefix}_al_increase"] = evaluator(sbs)["al"] - evaluator(greedy)["al"]
        report["other_test"][evaluator.split] = section
    pooled = {"splits": [e.split for e in evaluators], "sentences": sum(len(e.pairs) for e in evaluators),
              "gains": {}}
    references = [r for e in evaluators for r in e.references]
    for name, (sbs, greedy) in at_k.items():
        gain = paired_bootstrap([h for e in evaluators for h in e.hypotheses[sbs.label]],
                                [h for e in evaluators for h in e.hypotheses[greedy.label]], references,
                                samples=config.bootstrap_samples)
        pooled["gains"][name] = asdict(gain)
        scalars.update(_gain_scalars(f"simul.all_test.{_GAIN_PREFIX[name]}", gain))
    report["other_test"]["all_test"] = pooled
    return scalars


def _chosen(report: dict[str, Any], name: str) -> tuple[bool, int, int]:
    """(length_normalized, b, w) chosen on val for a model; w is at least 1 (w = 0 is greedy, so the SBS
    curves then speculate one step)."""
    best = report["best"][name]
    return best["length_normalized"], best["beam"], max(best["window"], 1)


def _log_grid(run: TrackedRun | None, name: str, default: bool,
              grid: dict[tuple[bool, int, int], dict[str, float]]) -> None:
    if run is None:
        return
    for (ranking, b, w), r in grid.items():
        key = f"simul.val_grid.{name}.b{b}" + _ranking_suffix(ranking, default, ".")
        run.log_metrics({f"{key}.bleu": r["bleu"], f"{key}.al": r["al"]}, step=w)


_CURVE_METRICS = ("bleu", "al", "laal", "dal", "ap", "cw")


def _log_run(run: TrackedRun, config: SimultransConfig, report: dict[str, Any],
             curves: dict[str, list[dict[str, float]]], headline: dict[str, float]) -> None:
    run.log_params({"simul.bleu_signature": report["bleu_signature"], "simul.grid_k": config.grid_k,
                    "simul.ks": list(config.ks), "simul.thresholds": list(config.thresholds),
                    "simul.length_normalized_speculation": config.length_normalized_speculation,
                    "simul.rank_speculations_on_val": config.rank_speculations_on_val})
    named_curves = [("simul", curves)] + [(f"simul.{split}", section["curves"])
                                          for split, section in report.get("other_test", {}).items()
                                          if "curves" in section]
    for prefix, some in named_curves:
        for label, points in some.items():
            for step, point in enumerate(points):
                run.log_metrics({f"{prefix}.{label}.{m}": point[m] for m in _CURVE_METRICS}, step=step)
    run.log_metrics(headline)
    run.log_dict(report, "simultrans_report.json")
    with tempfile.TemporaryDirectory() as tmp:
        plot = Path(tmp) / "bleu_vs_al.png"
        _plot(curves, report["test"], plot, heading=config.test_split)
        run.log_artifact(plot)
        for split, section in report.get("other_test", {}).items():
            if "curves" in section:  # greedy and SBS against AL on a further test set
                plot = Path(tmp) / f"bleu_vs_al_{split}.png"
                _plot(section["curves"], {}, plot, heading=split)
                run.log_artifact(plot)


def _plot(curves: dict[str, list[dict[str, float]]], test: dict[str, Any], path: Path, heading: str) -> None:
    plt = pyplot()

    panels = [(("waitk_", "full_"), "wait-k and test-time wait-k")]
    if any(label.startswith("adaptive_") for label in curves):
        panels.append((("adaptive_", "waitk_greedy", "waitk_sbs"), "adaptive policy"))
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 5), squeeze=False)
    for ax, (prefixes, title) in zip(axes[0], panels, strict=True):
        for label, points in curves.items():
            if label.startswith(prefixes):
                ax.plot([p["al"] for p in points], [p["bleu"] for p in points], marker="o", label=label)
        for key, marker in (("full_greedy", "*"), ("full_beam", "P")):
            if key not in test:  # a further test set has no full-sentence baselines
                continue
            ax.scatter([test[key]["al"]], [test[key]["bleu"]], marker=marker, s=120, label=key)
        ax.set_xlabel("AL (source tokens)")
        ax.set_ylabel("BLEU")
        ax.set_title(f"{heading}: {title}")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def summary(report: dict[str, Any]) -> list[str]:
    h = report["headline"]
    return [f"full-sentence BLEU {h['simul.bleu_full']:.2f} (greedy {h['simul.bleu_full_greedy']:.2f}); SBS gain "
            f"{h['simul.sbs_gain_bleu']:+.2f} BLEU at AL {h['simul.sbs_al_increase']:+.2f} (b={int(h['simul.best_beam'])}, "
            f"w={int(h['simul.best_window'])}); 95% interval of the gain [{h['simul.sbs_gain_bleu_low']:+.2f}, "
            f"{h['simul.sbs_gain_bleu_high']:+.2f}], no win in {h['simul.sbs_gain_no_win_share']:.1%} of "
            "resamples",
            *[f"  {split}: SBS gain {h[f'simul.{split}.sbs_gain_bleu']:+.2f} BLEU, 95% interval "
              f"[{h[f'simul.{split}.sbs_gain_bleu_low']:+.2f}, {h[f'simul.{split}.sbs_gain_bleu_high']:+.2f}]"
              for split in report.get("other_test", {})],
            f"  BLEU signature {report['bleu_signature']}"]


def write_report(report: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(report, indent=2), encoding="utf-8")


def execute(config: Any, path: Path, run: TrackedRun | None, opts: RunOptions) -> list[str]:
    """The job's runner (see `experiments.registry`): run it, return the summary lines."""
    return summary(run_simultrans(config, path, run, opts.ray_address))
