"""The `word_confidence` job: the seed's confidence-measure task on our lattices.

1. The devel and test scores an `eval_am` job wrote (`.specbench/scores/<its name>/{devel,test}.parquet`,
   adapted where it adapts), its graph (the SLURP TLG) and its corpus's reference texts.
2. Devel, CPU backend: decoded with lattices at each `lattice_beams` value; each 1-best word's posterior
   (`decoder.word_confidence`) at each `posterior_scales` value, labelled correct or not by aligning the
   1-best with the reference (`metrics.confidence_measures`); the (lattice beam, posterior scale) of the
   highest NCE is chosen before test is decoded (ties: the smaller beam, then the smaller scale). A choice
   on an edge of its grid (the smallest or largest value listed, or the only one) is logged, reported
   under `choice_on_grid_edge` and as `confidence.choice_on_grid_edge` (1.0; 0.0 inside both grids): the
   devel optimum may lie beyond the grid, which only a wider grid, fixed before test is decoded, can show.
3. Test, every backend of `backends` (the GPU only where one is usable; otherwise reported unavailable):
   NCE, AUC and a calibration table and plot; each backend's 1-best and posteriors compared with the CPU
   backend's (same lattices give the same posteriors). `confidence.nce` and `confidence.auc` are the CPU
   backend's on test.
4. The lattices' reach, beside the posteriors: the 1-best WER and the lattice oracle WER (the fewest word
   errors of any path through each lattice, `WordLattice.oracle_errors`) on test per backend
   (`confidence.wer.<backend>`, `confidence.lattice_oracle_wer.<backend>`; unsuffixed: the CPU backend's) and
   on devel at each lattice beam (`confidence.devel_lattice_oracle_wer.beam<b>`), a failed utterance counted
   as an empty hypothesis.

An utterance whose lattice gives no posteriors (no lattice, no complete path) is counted under
`confidence.undefined_utterances.<backend>` and contributes no words; nothing becomes NaN.
"""

from __future__ import annotations

import math
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow.parquet as pq

from specbench.config import EvalAmConfig, SpeechConfig, WordConfidenceConfig
from specbench.data.scores import iter_rows, read_parquet_table
from specbench.decoder.backends import GraphFile, make_decoder
from specbench.decoder.options import SearchOptions
from specbench.decoder.word_confidence import WordPosteriors, word_posteriors
from specbench.errors import DataError
from specbench.experiments import scores_record
from specbench.experiments.graph_recipe import build_graph
from specbench.experiments.job_refs import ctc_graph_job, referenced_job
from specbench.experiments.registry import RunOptions
from specbench.experiments.speech import corpus_root
from specbench.experiments.stage_clock import job_logger
from specbench.metrics import confidence_measures as cm
from specbench.metrics.wer import edit_distance, rate
from specbench.paths import from_root, work_dir
from specbench.reports.plots import pyplot
from specbench.wfst.symbols import SymbolTable, first_ids

if TYPE_CHECKING:
    from specbench.decoder.result import DecodeResult
    from specbench.tracking.runs import TrackedRun

Items = list[tuple[str, np.ndarray]]


_log = job_logger("word_confidence")


def _inputs(config: WordConfidenceConfig,
            path: Path) -> tuple[Path, dict[str, list[str]], Items, Items, dict[str, Any]]:
    """The graph, the reference words by utterance id, the devel and test scores, and the scores' record
    (`scores_record`: refused unless the eval job, the speech job it names, its checkpoint and the graph of its
    graph job would write the same scores now)."""
    eval_path = config.scores_job if config.scores_job.is_absolute() else path.parent / config.scores_job
    evaluation = referenced_job(path, "scores_job", config.scores_job, EvalAmConfig)
    speech = referenced_job(eval_path, "speech_job", evaluation.speech_job, SpeechConfig)
    manifest = corpus_root(speech) / "manifest.parquet"
    files = {split: work_dir() / "scores" / evaluation.name / f"{split}.parquet" for split in ("devel", "test")}
    for missing in [f for f in (*files.values(), manifest) if not f.is_file()][:1]:
        raise DataError(f"{missing} does not exist: scores_job = '{config.scores_job}' writes it. Fix: run "
                        f"`specbench run {eval_path}` first (a suite lists it before this job)")
    record = scores_record.check(files["test"].parent, evaluation, from_root(evaluation.checkpoint), eval_path)
    graph = build_graph(ctc_graph_job(eval_path, "graph_job", evaluation.graph_job))
    scores_record.check_graph(files["test"].parent, record, graph, evaluation, eval_path)
    splits = {}
    for split, limit in (("devel", config.devel_utterances), ("test", config.test_utterances)):
        items = [(u, m) for u, m, _ in iter_rows(read_parquet_table(files[split]), str(files[split]))]
        splits[split] = items[:limit] if limit else items
    refs = {r["utt_id"]: r["normalized_text"].split()
            for r in pq.read_table(manifest, columns=["utt_id", "normalized_text"]).to_pylist()}
    missing = [u for items in splits.values() for u, _ in items if u not in refs]
    if missing:
        raise DataError(f"{manifest}: no reference text for {len(missing)} scored utterance(s), e.g. "
                        f"{missing[0]!r}. Fix: run the eval_am job again so that its scores and corpus match")
    return graph.tlg, refs, splits["devel"], splits["test"], record


def decode(graph: GraphFile, backend: str, items: Items, config: WordConfidenceConfig,
           lattice_beam: float) -> tuple[list[DecodeResult], float]:
    """Every utterance decoded with a lattice, and the seconds it took."""
    options = SearchOptions(beam=config.beam, max_active=config.max_active, acoustic_scale=config.acoustic_scale,
                            lattice_beam=lattice_beam)
    decoder = make_decoder(backend, graph.csr, options)
    start = time.perf_counter()
    results = decoder.decode_batch(items)
    return results, time.perf_counter() - start


def confidences(results: list[DecodeResult], refs: dict[str, list[str]], symbols: list[str],
                scale: float) -> tuple[list[float], list[bool], dict[str, WordPosteriors], int]:
    """The 1-best words' posteriors and labels over all utterances, the posteriors by utterance, and how
    many utterances had none (no lattice or no complete path)."""
    values, labels, by_utt, undefined = [], [], {}, 0
    for res in results:
        post = word_posteriors(res.lattice if res.ok else None, scale)
        by_utt[res.utt_id] = post
        if not post.ok:
            undefined += 1
            continue
        words = [symbols[w] for w in post.word_ids]
        values += post.posteriors
        labels += cm.hypothesis_correct(refs[res.utt_id], words)
    return values, labels, by_utt, undefined


def word_errors(results: list[DecodeResult], refs: dict[str, list[str]], symbols: list[str]) -> dict[str, float]:
    """The 1-best WER and the lattice oracle WER over `results` (a reference word the graph cannot output
    matches nothing; a failed utterance, or one without a lattice, counts its 1-best, empty when it failed)."""
    ids = first_ids(symbols)
    words = errors = oracle = 0
    for res in results:
        ref = [ids.get(w, -1) for w in refs[res.utt_id]]
        best = edit_distance(ref, list(res.word_ids) if res.ok else [])
        words, errors = words + len(ref), errors + best
        oracle += res.lattice.oracle_errors(ref) if res.ok and res.lattice is not None else best
    return {"reference_words": words, "wer": rate(errors, words), "lattice_oracle_wer": rate(oracle, words)}


def _measures(values: list[float], labels: list[bool], bins: int) -> dict[str, Any]:
    return {"nce": cm.normalized_cross_entropy(values, labels), "auc": cm.auc(values, labels),
            "words": len(values), "share_correct": float(np.mean(labels)) if labels else None,
            "mean_confidence": float(np.mean(values)) if values else None,
            "calibration": cm.calibration_table(values, labels, bins)}


def choose_on_devel(graph: GraphFile, devel: Items, refs: dict[str, list[str]], symbols: list[str],
                    config: WordConfidenceConfig) -> tuple[float, float, dict[str, float], dict[str, float]]:
    """The (lattice beam, posterior scale) of the highest devel NCE (`best_on_grid`), the NCE of every pair
    (NaN where it is undefined), and the lattice oracle WER at each lattice beam."""
    grid: dict[str, float] = {}
    scores: list[tuple[float, float, float]] = []
    oracles: dict[str, float] = {}
    for beam in config.lattice_beams:
        results, _ = decode(graph, "cpu", devel, config, beam)
        oracles[f"beam{beam:g}"] = word_errors(results, refs, symbols)["lattice_oracle_wer"]
        _log(f"devel: lattice beam {beam:g}: lattice oracle WER {oracles[f'beam{beam:g}']:.4f}")
        for scale in config.posterior_scales:
            values, labels, _, _ = confidences(results, refs, symbols, scale)
            nce = cm.normalized_cross_entropy(values, labels)
            grid[grid_key(beam, scale)] = nce if nce is not None else float("nan")
            _log(f"devel: lattice beam {beam:g}, posterior scale {scale:g}: NCE {nce}")
            if nce is not None:
                scores.append((nce, beam, scale))
    if not scores:
        raise DataError("devel: no NCE could be computed (every devel word is correct, or every one wrong, or "
                        "no lattice gave posteriors). Fix: give the job more devel utterances (devel_utterances)")
    return (*best_on_grid(scores), grid, oracles)


def grid_key(beam: float, scale: float) -> str:
    """The name of a devel grid point in the report and the metrics (`confidence.devel_nce.<key>`)."""
    return f"beam{beam:g}.scale{scale:g}"


def best_on_grid(scores: list[tuple[float, float, float]]) -> tuple[float, float]:
    """The (lattice beam, posterior scale) of the highest NCE among (NCE, beam, scale) triples; ties (equal
    NCE) go to the smaller beam, then to the smaller scale, whatever order the job lists them in."""
    _, beam, scale = max(scores, key=lambda s: (s[0], -s[1], -s[2]))
    return beam, scale


def grid_edges(config: WordConfidenceConfig, beam: float, scale: float) -> dict[str, str]:
    """Which chosen value lies on an edge of its grid: {"lattice_beam"|"posterior_scale": "smallest",
    "largest" or "only"}, empty when both lie inside their grids."""
    edges = {}
    for name, value, grid in (("lattice_beam", beam, config.lattice_beams),
                              ("posterior_scale", scale, config.posterior_scales)):
        if len(grid) == 1:
            edges[name] = "only"
        elif value == min(grid):
            edges[name] = "smallest"
        elif value == max(grid):
            edges[name] = "largest"
    return edges


def edge_warnings(edges: dict[str, str], config: WordConfidenceConfig) -> list[str]:
    """One sentence per chosen value on an edge of its grid."""
    keys = {"lattice_beam": "lattice_beams", "posterior_scale": "posterior_scales"}
    out = []
    for name, edge in edges.items():
        grid = list(getattr(config, keys[name]))
        what = name.replace("_", " ")
        if edge == "only":
            out.append(f"the {what} was not chosen: {keys[name]} = {grid} lists one value")
        else:
            out.append(f"the chosen {what} is the {edge} of {keys[name]} = {grid}: the devel optimum may lie "
                       f"beyond the grid (a wider grid, fixed before test is decoded, would show it)")
    return out


def _agreement(ours: dict[str, WordPosteriors], cpu: dict[str, WordPosteriors]) -> dict[str, Any]:
    """1-best identity with the CPU backend and the largest posterior difference where the 1-best agree."""
    same, diff = 0, 0.0
    for utt, post in cpu.items():
        other = ours.get(utt)
        if other is not None and other.word_ids == post.word_ids and other.status == post.status:
            same += 1
            if post.posteriors:
                diff = max(diff, float(np.max(np.abs(np.subtract(other.posteriors, post.posteriors)))))
    return {"onebest_identical": same / max(len(cpu), 1), "max_posterior_difference": diff}


def _available(backend: str) -> bool:
    if backend != "gpu":
        return True
    from specbench.decoder.gpu import gpu_available

    return gpu_available()


def run_word_confidence(config: WordConfidenceConfig, path: Path, run: TrackedRun | None) -> dict[str, Any]:
    start = time.perf_counter()
    graph_path, refs, devel, test, record = _inputs(config, path)
    graph = GraphFile(graph_path)
    symbols = SymbolTable.read(graph_path.parent / "words.txt").symbols
    _log(f"{len(devel)} devel and {len(test)} test utterances over {graph_path}")
    beam, scale, grid, devel_oracle = choose_on_devel(graph, devel, refs, symbols, config)
    _log(f"chosen on devel: lattice beam {beam:g}, posterior scale {scale:g}")
    edges = grid_edges(config, beam, scale)
    warnings = edge_warnings(edges, config)
    scale_warnings = [] if record["acoustic_scale"] == config.acoustic_scale else [
        f"acoustic_scale = {config.acoustic_scale:g}, but {record['eval_job']} chose {record['acoustic_scale']:g} "
        "on devel for these scores"]
    for warning in scale_warnings:
        _log(f"warning: {warning}")
    for warning in warnings:
        _log(f"warning: {warning}")
    backends: dict[str, Any] = {}
    posteriors: dict[str, dict[str, WordPosteriors]] = {}
    for backend in config.backends:
        if not _available(backend):
            backends[backend] = {"status": "unavailable (no usable CUDA device here)"}
            continue
        results, seconds = decode(graph, backend, test, config, beam)
        values, labels, posteriors[backend], undefined = confidences(results, refs, symbols, scale)
        backends[backend] = {"status": "ok", "decode_seconds": seconds, "undefined_utterances": undefined,
                             **_measures(values, labels, config.calibration_bins),
                             **word_errors(results, refs, symbols)}
        _log(f"test, {backend}: NCE {backends[backend]['nce']}, AUC {backends[backend]['auc']}, "
             f"{undefined} utterances without posteriors")
    for backend, found in posteriors.items():
        if backend != "cpu":
            backends[backend].update(_agreement(found, posteriors["cpu"]))
    result = {"devel_utterances": len(devel), "test_utterances": len(test), "lattice_beam": beam,
              "eval_acoustic_scale": record["acoustic_scale"],
              "posterior_scale": scale, "devel_nce": grid, "devel_lattice_oracle_wer": devel_oracle,
              "choice_on_grid_edge": edges,
              "choice_warnings": warnings, "scale_warnings": scale_warnings, "backends": backends, "seconds": time.perf_counter() - start}
    if run is not None:
        run.log_metrics(metrics(result))
        run.log_dict(result, "word_confidence.json")
        with tempfile.TemporaryDirectory(prefix="specbench-confidence-") as plots:  # the journal copies it
            run.log_artifact(calibration_plot(backends, Path(plots)))
    return result


def metrics(result: dict[str, Any]) -> dict[str, float]:
    out = {"confidence.lattice_beam": result["lattice_beam"], "confidence.posterior_scale": result["posterior_scale"],
           "confidence.test_utterances": float(result["test_utterances"]),
           "confidence.choice_on_grid_edge": 1.0 if result["choice_on_grid_edge"] else 0.0}
    out.update({f"confidence.devel_nce.{k}": v for k, v in result["devel_nce"].items() if math.isfinite(v)})
    out.update({f"confidence.devel_lattice_oracle_wer.{k}": v
                for k, v in result.get("devel_lattice_oracle_wer", {}).items()})
    for backend, b in result["backends"].items():
        if b["status"] != "ok":
            continue
        for key in ("nce", "auc", "words", "share_correct", "mean_confidence", "undefined_utterances",
                    "onebest_identical", "max_posterior_difference", "wer", "lattice_oracle_wer"):
            if b.get(key) is not None:
                out[f"confidence.{key}.{backend}"] = float(b[key])
    cpu = result["backends"]["cpu"]
    for key in ("nce", "auc", "wer", "lattice_oracle_wer"):
        if cpu.get(key) is not None:
            out[f"confidence.{key}"] = float(cpu[key])
    return out


def legend_label(backend: str, b: dict[str, Any]) -> str:
    """A backend's line in the calibration plot: its NCE and AUC, "undefined" where they are (None: e.g. no
    AUC when every word is correct), not a 0 that reads as measured."""
    shown = {key: "undefined" if b.get(key) is None else f"{b[key]:.3f}" for key in ("nce", "auc")}
    return f"{backend} (NCE {shown['nce']}, AUC {shown['auc']})"


def calibration_plot(backends: dict[str, Any], folder: Path) -> Path:
    """Share of correct words against mean posterior per bin, one line per backend, on the diagonal:
    `folder`/calibration.png."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 5))
    ax.plot([0, 1], [0, 1], color="grey", linestyle="--", label="perfectly calibrated")
    for backend, b in backends.items():
        if b["status"] == "ok" and b["calibration"]:
            table = b["calibration"]
            ax.plot([r["mean_confidence"] for r in table], [r["share_correct"] for r in table], marker="o",
                    label=legend_label(backend, b))
    ax.set_xlabel("word posterior (bin mean)")
    ax.set_ylabel("share of words correct")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out = folder / "calibration.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def summary(result: dict[str, Any]) -> list[str]:
    lines = [(f"word confidence: {result['test_utterances']} test utterances, lattice beam "
              f"{result['lattice_beam']:g} and posterior scale {result['posterior_scale']:g} chosen on "
              f"{result['devel_utterances']} devel utterances")]
    lines += [f"  warning: {warning}" for warning in (*result.get("choice_warnings", []),
                                                        *result.get("scale_warnings", []))]
    for backend, b in result["backends"].items():
        if b["status"] != "ok":
            lines.append(f"  {backend}: {b['status']}")
            continue
        nce, auc, share = b["nce"], b["auc"], b["share_correct"]
        correct = "share correct undefined" if share is None else f"{share:.1%} correct"
        line = (f"  {backend}: NCE {nce if nce is None else f'{nce:.3f}'}, AUC {auc if auc is None else f'{auc:.3f}'}"
                f", {b['words']} words ({correct}), {b['undefined_utterances']} utterances without "
                "posteriors")
        if "lattice_oracle_wer" in b:
            line += f"; WER {b['wer']:.2%}, lattice oracle WER {b['lattice_oracle_wer']:.2%}"
        if "max_posterior_difference" in b:
            line += (f"; vs cpu: 1-best identical {b['onebest_identical']:.3f}, max posterior difference "
                     f"{b['max_posterior_difference']:.2e}")
        lines.append(line)
    return lines


def execute(config: Any, path: Path, run: TrackedRun | None, opts: RunOptions) -> list[str]:
    """The job's runner (see `experiments.registry`)."""
    return summary(run_word_confidence(config, path, run))
