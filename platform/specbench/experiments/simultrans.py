"""The `simultrans` job: speculative beam search for simultaneous translation, from checkpoints.

The protocol (docs/translation.md states it before any result): every setting is chosen on val, then every
test set of `test_splits` is decoded the same way, and the headline pools them.

1. On val, the (b, w) grid of single-step SBS for the wait-k model at `grid_k` and, with `test_time_wait_k`,
   for the full-sentence model under test-time wait-k (w = 0 is SBS without speculation: the tail beam at
   beam b, so every cell has the tail beam b), for one or both speculation rankings; the best
   (ranking, b, w) per model (highest BLEU, then lowest AL, then the configured ranking; a winning w = 0 is
   kept, and its speculation gain is 0). The tail beam
   (b*) is decoded on val too, so val reports the same decomposition as test (`simul.val.speculation_...`).
2. On each test set, for every k: greedy, tail beam (b*) and SBS (b*, w*) for each model decoded under
   wait-k, and the
   full-sentence greedy and beam (b*) baselines; the adaptive confidence policy (wait-k model) over
   thresholds with greedy chunks, beam search per chunk (b*, w = 0) and chunk SBS (b*, w*); the wait-k
   model's SBS at grid_k with the ranking val did not choose (an ablation).
3. For each test set and for all of them pooled ("pooled"), each model and each k, the decomposition of the
   gain (`simultrans_sets.COMPARISONS`): SBS minus tail beam (**speculation**), SBS minus greedy, tail minus
   greedy, each with its paired-bootstrap 95% interval, the share of resamples without a win, and the
   latency differences in source words (LAAL, AL with the reference length, STACL's AL).

Headline scalars: `simul.speculation_gain_bleu` (SBS minus tail beam, wait-k model, grid_k, pooled; with
`_low`, `_high`, `simul.speculation_gain_no_win_share` and `simul.speculation_laal_increase`), beside it
`simul.sbs_vs_greedy_gain_bleu` and `simul.tail_vs_greedy_gain_bleu` (same form), the test-time wait-k
versions (`simul.testtime_...`), each per test set (`simul.<split>.speculation_gain_bleu`, ...), and
`simul.bleu_full_pooled` (full-sentence beam search, pooled). Curves are MLflow metrics with steps
(`simul.<set>.<model>_<search>.<metric>`, step = index of k; among the metrics `ended_before_source`, the
share of outputs that ended before their source was read, and `empty_outputs`, the sentences left out of the
latency means), the report is JSON, and each set has a
BLEU-against-LAAL plot; the wall time of each stage is `simul.seconds.<stage>` and the report's `seconds`
(the val grid per model, the test curves per model, the full-sentence baselines, the adaptive curves, the
ranking ablation). Every configuration is decoded once, as Ray tasks over sentence shards, on all test
sets in one round (each set keeps its own shards, so its results are what decoding it alone gives).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specbench.config import SimultransConfig
from specbench.data.multi30k import TEST_SPLITS as MULTI30K_TEST_SPLITS
from specbench.errors import DataError
from specbench.experiments.registry import RunOptions
from specbench.experiments.simultrans_sets import COMPARISONS, PooledEvaluator, ScoredSet, SplitEvaluator
from specbench.experiments.stage_clock import clock
from specbench.paths import from_root
from specbench.reports.coverage import left_out, left_out_lines
from specbench.reports.plots import pyplot
from specbench.simultrans.experiment import Method, bleu_signature, model_for
from specbench.simultrans.search import longest_source

if TYPE_CHECKING:
    from specbench.tracking.runs import TrackedRun

SEARCHES = ("greedy", "tail", "sbs")
POOLED = "pooled"
# the full-sentence model with the whole source, greedy and beam b* (the wait-k model's chosen beam): named
# apart from the curves `full_<search>` (the same model under test-time wait-k)
FULL_SENTENCE = ("full_sentence_greedy", "full_sentence_beam")
_MODEL_PREFIX = {"waitk": "", "full": "testtime_"}  # headline names: the wait-k model's, test-time wait-k's


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


def _open_sets(config: SimultransConfig, job_path: Path, bpe: Path,
               longest: int) -> tuple[SplitEvaluator, list[SplitEvaluator]]:
    """Read val and every test set before any decoding, so a bad file, or a sentence longer than the
    models take (`longest` source tokens), stops the job at once."""
    try:
        val = SplitEvaluator(config, config.val_split, config.val_sentences, bpe, longest)
        tests = [SplitEvaluator(config, split, config.test_sentences, bpe, longest) for split in config.test_splits]
    except DataError as exc:
        raise DataError(f"{job_path}: val_split / test_splits: {exc}") from exc
    return val, tests


def run_simultrans(config: SimultransConfig, job_path: Path, run: TrackedRun | None,
                   ray_address: str | None = None) -> dict[str, Any]:
    from specbench.runtime import connect

    bpe = from_root(config.bpe_model)
    full_model = str(from_root(config.full_model))
    models = {"waitk": str(from_root(config.waitk_model))}  # the models decoded under wait-k
    if config.test_time_wait_k:
        models["full"] = full_model
    for path in (*models.values(), full_model, bpe):
        if not Path(path).is_file():
            raise DataError(f"{path} does not exist. Fix: train the models first: `specbench train mt "
                            "jobs/mt_waitk.toml` and `specbench train mt jobs/mt_full.toml`")
    longest = min(longest_source(model_for(path, str(bpe)).model.config.max_positions)
                  for path in {*models.values(), full_model})
    val, tests = _open_sets(config, job_path, bpe, longest)
    connect(ray_address)
    pooled = PooledEvaluator(tests)
    report: dict[str, Any] = {"bleu_signature": bleu_signature(), "grid_k": config.grid_k,
                              "val_sentences": len(val.pairs),
                              "test_splits": list(config.test_splits),
                              "test_splits_left_out": left_out(config.test_splits, MULTI30K_TEST_SPLITS),
                              "test_sentences": {t.split: len(t.pairs) for t in tests},
                              "pooled_sentences": len(pooled.references), "grid": {}, "best": {}, "val": {},
                              "sets": {}, "seconds": {}}
    seconds = report["seconds"]

    default = config.length_normalized_speculation
    rankings = (default, not default) if config.rank_speculations_on_val else (default,)
    for name, path in models.items():  # 1. the (ranking, b, w) grid on val, then val's decomposition
        with clock(seconds, f"val_grid.{name}"):
            grid = {key: val(method) for key, method in grid_methods(path, config.grid_k, rankings,
                                                                      config.grid_beams, config.grid_windows).items()}
            report["grid"][name] = {_grid_key(*key, default): r for key, r in grid.items()}
            report["best"][name] = dict(zip(("length_normalized", "beam", "window"), _best(grid, default),
                                            strict=True))
            _log_grid(run, name, default, grid)
            report["val"][name] = val.decomposition(waitk_methods(path, config.grid_k, _chosen(report, name)),
                                                    config.bootstrap_samples)

    # 2-3. all test sets pooled first (each method decoded on every set in one round of tasks), then each set
    pooled_section = _test_set(pooled, config, models, full_model, report)
    for evaluator in tests:
        report["sets"][evaluator.split] = _test_set(evaluator, config, models, full_model, report)
    report["sets"][POOLED] = pooled_section
    report["speculation_ranking"] = {}
    for evaluator in (pooled, *tests):  # pooled first: each method decoded on every set in one round
        with clock(seconds, "adaptive"):
            report["sets"][evaluator.split]["curves"].update(_adaptive_curves(evaluator, config, models["waitk"],
                                                                              report))
        with clock(seconds, "ranking_ablation"):
            report["speculation_ranking"][evaluator.split] = _ranking_ablation(evaluator, config,
                                                                               models["waitk"], report)
    report["headline"] = _headline(report, config)
    if run is not None:
        _log_run(run, config, report)
    return report


def grid_methods(path: str, k: int, rankings: tuple[bool, ...], beams: tuple[int, ...],
                 windows: tuple[int, ...]) -> dict[tuple[bool, int, int], Method]:
    """The val grid's cells (ranking, b, w): SBS with beam b and window w; w = 0 is the tail beam at b (SBS
    without speculation), so that every cell beam-searches the tail with b and the cells differ only in what
    speculation adds."""
    return {(ranking, b, w): _waitk_method(path, "sbs", k, (ranking, b, w))
            for ranking in rankings for b in beams for w in windows}


def waitk_methods(path: str, k: int, chosen: tuple[bool, int, int]) -> dict[str, Method]:
    """Greedy, tail beam and SBS wait-k decoding of one model at k, with its (ranking, b, w) from val."""
    return {search: _waitk_method(path, search, k, chosen) for search in SEARCHES}


def _waitk_method(path: str, search: str, k: int, chosen: tuple[bool, int, int]) -> Method:
    """The ranking only matters to SBS (greedy and the tail beam rank no speculation): the others keep the
    default, so that one search is decoded once whichever ranking asks for it. SBS with w = 0 is the tail
    beam, and is decoded as it."""
    normalized, b, w = chosen
    if search == "sbs" and w == 0:
        search = "tail"
    return Method("waitk", path, search=search, k=k, beam=b if search != "greedy" else 1,
                  window=w if search == "sbs" else 0, length_normalized=normalized if search == "sbs" else True)


def _test_set(evaluator: ScoredSet, config: SimultransConfig, models: dict[str, str], full_model: str,
              report: dict[str, Any]) -> dict[str, Any]:
    """Curves (every search at every k, both models), the full-sentence baselines and the decomposition of
    the gain at every k, for one test set or the pooled set."""
    b = report["best"]["waitk"]["beam"]
    seconds = report["seconds"]
    curves: dict[str, list[dict[str, float]]] = {}
    decomposition: dict[str, list[dict[str, Any]]] = {}
    for name, path in models.items():
        with clock(seconds, f"test_curves.{name}"):
            for search in SEARCHES:
                curves[f"{name}_{search}"] = [
                    {"k": k, **evaluator(_waitk_method(path, search, k, _chosen(report, name)))} for k in config.ks]
            decomposition[name] = [{"k": k, **evaluator.decomposition(waitk_methods(path, k, _chosen(report, name)),
                                                                      config.bootstrap_samples)} for k in config.ks]
    with clock(seconds, "full_sentence"):
        baselines = {"full_sentence_greedy": evaluator(Method("full", full_model, beam=1)),
                     "full_sentence_beam": evaluator(Method("full", full_model, beam=b))}
    return {"sentences": len(evaluator.references), "curves": curves, **baselines, "decomposition": decomposition}


def _adaptive_curves(evaluator: ScoredSet, config: SimultransConfig, path: str,
                     report: dict[str, Any]) -> dict[str, list[dict[str, float]]]:
    normalized, b, w = _chosen(report, "waitk")
    curves = {}
    for name in ("greedy", "beam", "sbs"):
        search = "beam" if name == "sbs" and w == 0 else name  # chunk SBS with w = 0 is beam per chunk: decoded once
        curves[f"adaptive_{name}"] = [
            {"threshold": threshold, **evaluator(Method("adaptive", path, search=search, threshold=threshold,
                                                        beam=b if search != "greedy" else 1,
                                                        window=w if search == "sbs" else 0,
                                                        length_normalized=normalized))}
            for threshold in config.thresholds]
    return curves


def _ranking_ablation(evaluator: ScoredSet, config: SimultransConfig, path: str,
                      report: dict[str, Any]) -> dict[str, Any]:
    """The wait-k model's SBS at grid_k ranked the other way (summed log-probability, the seed's eq. 4, or
    per token) beside the chosen ranking and greedy."""
    normalized, b, w = _chosen(report, "waitk")
    methods = waitk_methods(path, config.grid_k, (normalized, b, w))
    # through _waitk_method: with w = 0 both rankings are the one tail beam, decoded once (equal by definition)
    other = evaluator(_waitk_method(path, "sbs", config.grid_k, (not normalized, b, w)))
    per_token, summed = (evaluator(methods["sbs"]), other) if normalized else (other, evaluator(methods["sbs"]))
    return {"per_token": per_token, "sum": summed, "greedy": evaluator(methods["greedy"])}


def _chosen(report: dict[str, Any], name: str) -> tuple[bool, int, int]:
    """(length_normalized, b, w) chosen on val for a model, w = 0 included (SBS without speculation, the tail
    beam: its speculation gain is 0)."""
    best = report["best"][name]
    return best["length_normalized"], best["beam"], best["window"]


def _comparison_scalars(prefix: str, comparison: dict[str, float]) -> dict[str, float]:
    """`<prefix>_gain_bleu` (+ `_low`, `_high`, `_no_win_share`) and `<prefix>_laal_increase`, ..."""
    return {f"{prefix}_gain_bleu": comparison["gain"], f"{prefix}_gain_bleu_low": comparison["low"],
            f"{prefix}_gain_bleu_high": comparison["high"], f"{prefix}_gain_no_win_share": comparison["no_win_share"],
            f"{prefix}_laal_increase": comparison["laal_increase"],
            f"{prefix}_al_ref_increase": comparison["al_ref_increase"]}


def _headline(report: dict[str, Any], config: SimultransConfig) -> dict[str, float]:
    """The scalars at grid_k: pooled without a set prefix, per set with `simul.<split>.`, val with
    `simul.val.`; the full-sentence BLEU pooled; the chosen settings; the ranking ablation (pooled and per
    set, prefixed the same way)."""
    at = config.ks.index(config.grid_k)
    scalars: dict[str, float] = {}
    for name in report["best"]:
        model_prefix = _MODEL_PREFIX[name]
        for comparison, _, _ in COMPARISONS:
            for split, section in report["sets"].items():
                prefix = "simul." if split == POOLED else f"simul.{split}."
                scalars.update(_comparison_scalars(f"{prefix}{model_prefix}{comparison}",
                                                   section["decomposition"][name][at][comparison]))
            scalars.update(_comparison_scalars(f"simul.val.{model_prefix}{comparison}",
                                               report["val"][name][comparison]))
    pooled = report["sets"][POOLED]
    waitk_sbs = pooled["curves"]["waitk_sbs"][at]
    _, b, w = _chosen(report, "waitk")
    scalars.update({
        "simul.bleu_full_pooled": pooled["full_sentence_beam"]["bleu"], "simul.bleu_full_greedy_pooled": pooled["full_sentence_greedy"]["bleu"],
        "simul.sbs_bleu_pooled": waitk_sbs["bleu"], "simul.sbs_laal_pooled": waitk_sbs["laal_words"],
        "simul.best_beam": float(b), "simul.best_window": float(w),
        **{f"simul.{name}_ranking_per_token": float(_chosen(report, name)[0]) for name in report["best"]}})
    for split, ablation in report["speculation_ranking"].items():
        prefix = "simul." if split == POOLED else f"simul.{split}."
        scalars.update({f"{prefix}sbs_gain_bleu_{ranking}_ranking": ablation[ranking]["bleu"] - ablation["greedy"]["bleu"]
                        for ranking in ("per_token", "sum")})
        scalars.update({f"{prefix}sbs_length_ratio_{ranking}_ranking": ablation[ranking]["length_ratio"]
                        for ranking in ("per_token", "sum")})
    return scalars


def _log_grid(run: TrackedRun | None, name: str, default: bool,
              grid: dict[tuple[bool, int, int], dict[str, float]]) -> None:
    if run is None:
        return
    for (ranking, b, w), r in grid.items():
        key = f"simul.val_grid.{name}.b{b}" + _ranking_suffix(ranking, default, ".")
        run.log_metrics({f"{key}.bleu": r["bleu"], f"{key}.al": r["al"], f"{key}.laal_words": r["laal_words"],
                         f"{key}.ended_before_source": r["ended_before_source"]}, step=w)


# per configuration; `al_simuleval` and `ap_simuleval` are AL and AP in tokens with the reference length
# (SimulEval's), `empty_outputs` and `ended_before_source` as `simultrans.experiment` defines them
_CURVE_METRICS = ("bleu", "laal_words", "al_ref_words", "al_words", "al", "al_simuleval", "laal", "dal", "ap",
                  "ap_simuleval", "cw", "length_ratio", "precision_1", "precision_2", "precision_3", "precision_4",
                  "brevity_penalty", "empty_outputs", "ended_before_source")
_COMPARISON_METRICS = ("gain", "low", "high", "laal_increase", "al_ref_increase")


def _log_run(run: TrackedRun, config: SimultransConfig, report: dict[str, Any]) -> None:
    run.log_params({"simul.bleu_signature": report["bleu_signature"], "simul.grid_k": config.grid_k,
                    "simul.ks": list(config.ks), "simul.thresholds": list(config.thresholds),
                    "simul.test_splits": list(config.test_splits),
                    "simul.length_normalized_speculation": config.length_normalized_speculation,
                    "simul.test_time_wait_k": config.test_time_wait_k,
                    "simul.rank_speculations_on_val": config.rank_speculations_on_val})
    for split, section in report["sets"].items():
        for label, points in section["curves"].items():
            for step, point in enumerate(points):
                run.log_metrics({f"simul.{split}.{label}.{m}": point[m] for m in _CURVE_METRICS}, step=step)
        for name, points in section["decomposition"].items():
            for step, point in enumerate(points):
                run.log_metrics({f"simul.{split}.{name}.{comparison}.{m}": point[comparison][m]
                                 for comparison, _, _ in COMPARISONS for m in _COMPARISON_METRICS}, step=step)
        run.log_metrics({f"simul.{split}.{baseline}.{m}": section[baseline][m]
                         for baseline in FULL_SENTENCE for m in _CURVE_METRICS})
    run.log_metrics(report["headline"])
    run.log_metrics({f"simul.seconds.{stage}": s for stage, s in report["seconds"].items()})
    run.log_dict(report, "simultrans_report.json")
    with tempfile.TemporaryDirectory() as tmp:
        for split, section in report["sets"].items():
            plot = Path(tmp) / f"bleu_vs_laal_{split}.png"
            _plot(section, plot, heading=f"{split} ({section['sentences']} sentences)")
            run.log_artifact(plot)


def _plot(section: dict[str, Any], path: Path, heading: str) -> None:
    """BLEU against LAAL (source words): the wait-k curves, and the adaptive policy's."""
    plt = pyplot()
    curves = section["curves"]
    panels = [(("waitk_", "full_"), "wait-k and test-time wait-k"),
              (("adaptive_", "waitk_greedy", "waitk_sbs"), "adaptive policy")]
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 5), squeeze=False)
    for ax, (prefixes, title) in zip(axes[0], panels, strict=True):
        for label, points in curves.items():
            if label.startswith(prefixes):
                ax.plot([p["laal_words"] for p in points], [p["bleu"] for p in points], marker="o", label=label)
        for key, marker in zip(FULL_SENTENCE, ("*", "P"), strict=True):
            ax.scatter([section[key]["laal_words"]], [section[key]["bleu"]], marker=marker, s=120, label=key)
        ax.set_xlabel("LAAL (source words)")
        ax.set_ylabel("BLEU")
        ax.set_title(f"{heading}: {title}", fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _comparison_line(label: str, h: dict[str, float], prefix: str) -> str:
    return (f"{label} {h[f'{prefix}_gain_bleu']:+.2f} BLEU [{h[f'{prefix}_gain_bleu_low']:+.2f}, "
            f"{h[f'{prefix}_gain_bleu_high']:+.2f}], LAAL {h[f'{prefix}_laal_increase']:+.2f}")


def summary(report: dict[str, Any]) -> list[str]:
    h = report["headline"]
    splits = report["test_splits"]
    headline = (f"pooled over {len(splits)} test sets ({report['pooled_sentences']} sentences), wait-k model at "
                f"k = {report['grid_k']}: "
                + _comparison_line("speculation-only gain (SBS - tail beam)", h, "simul.speculation"))
    return [headline,
            "  " + _comparison_line("SBS - greedy", h, "simul.sbs_vs_greedy") + "; "
            + _comparison_line("tail beam - greedy", h, "simul.tail_vs_greedy"),
            *[f"  {split}: " + _comparison_line("speculation", h, f"simul.{split}.speculation") + "; "
              + _comparison_line("SBS - greedy", h, f"simul.{split}.sbs_vs_greedy") for split in splits],
            "  val: " + _comparison_line("speculation", h, "simul.val.speculation"),
            *(["  test-time wait-k (full-sentence model), pooled: "
               + _comparison_line("speculation", h, "simul.testtime_speculation") + "; "
               + _comparison_line("SBS - greedy", h, "simul.testtime_sbs_vs_greedy")]
              if "simul.testtime_speculation_gain_bleu" in h else []),
            "  minutes per stage: " + ", ".join(f"{stage} {s / 60:.1f}" for stage, s in report["seconds"].items()),
            (f"  full-sentence beam BLEU {h['simul.bleu_full_pooled']:.2f} pooled (b={int(h['simul.best_beam'])}); "
             f"BLEU signature {report['bleu_signature']}"),  # the window is the wait-k model's, not the baseline's
            *left_out_lines(report.get("test_splits_left_out", []), "test_splits")]


def execute(config: Any, path: Path, run: TrackedRun | None, opts: RunOptions) -> list[str]:
    """The job's runner (see `experiments.registry`): run it, return the summary lines."""
    return summary(run_simultrans(config, path, run, opts.ray_address))
