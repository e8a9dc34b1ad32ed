"""The `real_speech` job: recorded speech, CMU Sphinx's en-us acoustic model, its HCLG, our decoders.

1. The sets (`audio.gather`) as 16 kHz WAVs; unusable files are flagged rows, reported and skipped.
2. Senone scores (`acoustic.sphinx_scores.SphinxSenoneScorer`, a Ray stage), `chunk_utterances` at a time,
   cached in `.specbench/real_speech/scores/` (keyed by pocketsphinx's version and the audio files).
3. The acoustic scale is chosen on the Asterisk `tune` half (its first `tune_utterances` prompts by name)
   with our CPU backend (lowest WER) at `[search] beam`, then the beam from `[search] beams` at that scale
   (lowest WER, ties to the narrower), and pocketsphinx's language weight on the same prompts with its own
   decoder, before the other prompts count.
4. Every usable utterance is decoded by each backend of `[search] backends` (our `cpu`, the `twin`,
   Kaldi's `FasterDecoder` as `kaldi`) at that scale over the HCLG, one core each, and by pocketsphinx.
5. WER per set and system with a bootstrap interval (text normalized the same way for every system), the
   paired difference of our CPU backend and pocketsphinx on the Asterisk test half (the target), 1-best
   identity of the CPU backend and the twin, and decode speed (frames per second of search on one core:
   one decoder per backend, its setup and the reading of the scores left out; pocketsphinx's includes its
   front end and scoring); the decoder benchmark's `real_speech` workload measures it side by side.
   `asr.real.wer` is the CPU backend's WER on the Asterisk test half. Per set, the share of reference words
   outside the graph's vocabulary (`asr.real.oov_rate.<set>`), which no system can recognize.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from specbench.acoustic.sphinx_scores import SphinxSenoneScorer
from specbench.config import GraphConfig, RealSpeechConfig
from specbench.data.scores import iter_rows, read_parquet_table
from specbench.data.text_norm import normalize
from specbench.decoder.stage import DecoderStage
from specbench.errors import ConfigError
from specbench.experiments.graph_recipe import GraphArtifacts, build_graph
from specbench.experiments.job_refs import referenced_job
from specbench.experiments.real_speech.audio import STATUS_OK, RealUtterance, gather
from specbench.experiments.real_speech.sphinx_decode import SphinxJob, decode_chunk
from specbench.experiments.registry import RunOptions
from specbench.metrics.wer_bootstrap import paired_wer_bootstrap, utterance_errors
from specbench.paths import work_dir
from specbench.runtime import run_stage, run_tasks
from specbench.wfst.symbols import SymbolTable

if TYPE_CHECKING:
    from specbench.tracking.runs import TrackedRun

SPHINX = "pocketsphinx"


def _log(message: str) -> None:
    print(f"[real_speech] {message}", file=sys.stderr, flush=True)


def _chunks(rows: list[RealUtterance], size: int) -> list[list[RealUtterance]]:
    return [rows[i:i + size] for i in range(0, len(rows), size)]


def _chunk_key(chunk: list[RealUtterance]) -> str:
    h = hashlib.sha256(importlib.metadata.version("pocketsphinx").encode())
    for u in chunk:
        stat = u.wav.stat()
        h.update(f"{u.key}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    return h.hexdigest()[:20]


def score_chunks(chunks: list[list[RealUtterance]], cache: Path) -> tuple[list[Path], dict[str, str]]:
    """Each chunk's scores file (scored now or read from the cache) and the failures by key."""
    paths, failed = [], {}
    for k, chunk in enumerate(chunks):
        path = cache / f"{_chunk_key(chunk)}.parquet"
        if not path.is_file():
            _log(f"scoring chunk {k + 1}/{len(chunks)} ({len(chunk)} utterances) with pocketsphinx")
            table = pa.table({"utt_id": [u.key for u in chunk], "audio_path": [str(u.wav) for u in chunk]})
            scored = run_stage(SphinxSenoneScorer(), table, backend="ray", batch_size=8)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            pq.write_table(scored, tmp, compression="none")
            tmp.replace(path)
        status = pq.read_table(path, columns=["utt_id", "status"]).to_pylist()
        failed.update({r["utt_id"]: r["status"] for r in status if r["status"] != STATUS_OK})
        paths.append(path)
    return paths, failed


def decode_ours(score_files: list[Path], graph: GraphArtifacts, backend: str, scale: float,
                config: RealSpeechConfig, out_dir: Path) -> tuple[dict[str, list[str]], float, int, dict]:
    """Words per key, search seconds and frames, and the rows' other fields, for one backend and scale.
    One decoder over the graph serves every chunk; its setup (reading and mapping the graph) and the reading
    of the scores are not in the seconds, which time the search alone. Each chunk's rows are also written
    to `out_dir/<backend>-<scale>-b<beam>-<chunk>.jsonl`."""
    stage = DecoderStage(graph.fst, backend, beam=config.search.beam, max_active=config.search.max_active,
                         acoustic_scale=scale)
    stage.setup()
    symbols = SymbolTable.read(graph.directory / "words.txt").symbols
    words, extra, seconds, frames = {}, {}, 0.0, 0
    out_dir.mkdir(parents=True, exist_ok=True)
    for k, path in enumerate(score_files):
        items = list(iter_rows(read_parquet_table(path), str(path)))  # the ok rows only
        start = time.perf_counter()
        rows = stage.decode_many(items) if items else []
        seconds += time.perf_counter() - start
        frames += sum(len(m) for _, m, _ in items)
        with open(out_dir / f"{backend}-{scale:g}-b{config.search.beam:g}-{k}.jsonl", "w") as out:
            for row in rows:
                spelled = [symbols[w] if 0 <= w < len(symbols) else f"<{w}>" for w in row["word_ids"] or []]
                out.write(json.dumps({"id": row["id"], "status": row["status"], "word_ids": row["word_ids"],
                                      "words": spelled}) + "\n")
                words[row["id"]] = normalize(" ".join(spelled)).split()
                extra[row["id"]] = {"status": row["status"], "word_ids": row["word_ids"]}
        _log(f"{backend} (scale {scale:g}): chunk {k + 1}/{len(score_files)}, {frames:,} frames in "
             f"{seconds:.1f} s of search")
    return words, seconds, frames, extra


def decode_sphinx(rows: list[RealUtterance], lm: Path, weight: float, config: RealSpeechConfig
                  ) -> tuple[dict[str, list[str]], float, int]:
    jobs = [SphinxJob(tuple((u.key, str(u.wav)) for u in chunk), str(lm), weight,
                      config.pocketsphinx.word_insertion_penalty)
            for chunk in _chunks(rows, config.chunk_utterances)]
    results = run_tasks(decode_chunk, jobs, progress=f"pocketsphinx (lw {weight:g})")
    words, seconds, frames = {}, 0.0, 0
    for chunk in results:
        for key, hyp, secs, n in chunk:
            words[key], seconds, frames = hyp, seconds + secs, frames + n
    return words, seconds, frames


def _wer(rows: list[RealUtterance], words: dict[str, list[str]]) -> float:
    errors, n = utterance_errors([u.text.split() for u in rows], [words.get(u.key, []) for u in rows])
    return float(errors.sum() / max(n.sum(), 1.0))


def set_groups(rows: list[RealUtterance]) -> dict[str, list[RealUtterance]]:
    out: dict[str, list[RealUtterance]] = {}
    for u in rows:
        name = f"asterisk_{u.half}" if u.set == "asterisk" else u.set
        out.setdefault(name, []).append(u)
    return out


def _report(rows: list[RealUtterance], systems: dict[str, dict[str, list[str]]], samples: int) -> dict[str, Any]:
    """WER with intervals per set and system, and each system against pocketsphinx (paired)."""
    report: dict[str, Any] = {}
    for group, members in sorted(set_groups(rows).items()):
        refs = [u.text.split() for u in members]
        base = utterance_errors(refs, [systems[SPHINX].get(u.key, []) for u in members])[0] if SPHINX in systems else None
        for name, words in systems.items():
            errors, n = utterance_errors(refs, [words.get(u.key, []) for u in members])
            other = base if base is not None else errors
            cmp = paired_wer_bootstrap(errors, other, n, samples=samples)
            report[f"{group}.{name}"] = asdict(cmp)
    return report


def oov_rates(rows: list[RealUtterance], graph: GraphArtifacts) -> dict[str, float]:
    """Per set, the share of reference words that the graph cannot put out (spelled as the hypotheses are
    normalized): a floor under every system's WER, since each such word is at least one error."""
    symbols = SymbolTable.read(graph.directory / "words.txt").symbols
    vocabulary = {w for s in symbols for w in normalize(s).split()}
    out = {}
    for group, members in sorted(set_groups(rows).items()):
        words = [w for u in members for w in u.text.split()]
        out[group] = sum(w not in vocabulary for w in words) / max(len(words), 1)
    return out


def _check_graph(graph: GraphArtifacts, path: Path) -> None:
    if not (graph.directory / "HCLG.fst").is_file():
        raise ConfigError(f"{path}: graph_job names a graph without HCLG.fst ({graph.directory}); the real-speech "
                          "job decodes the Sphinx model's HCLG. Fix: graph_job = \"graph_sphinx.toml\" (recipe "
                          "= \"sphinx_hclg\").")


def run_real_speech(config: RealSpeechConfig, path: Path, run: TrackedRun | None) -> dict[str, Any]:
    start = time.perf_counter()
    graph = build_graph(referenced_job(path, "graph_job", config.graph_job, GraphConfig))
    _check_graph(graph, path)
    cache = work_dir() / "real_speech"
    rows = gather(config.sets, config.max_per_set, cache / "audio", config.sample_min_words)
    flagged = {u.key: u.status for u in rows if u.status != STATUS_OK}
    usable = [u for u in rows if u.status == STATUS_OK]
    _log(f"{len(usable)} usable utterances, {len(flagged)} flagged")
    tune = [u for u in usable if u.set == "asterisk" and u.half == "tune"][:config.tune_utterances or None]
    tune_chunks = _chunks(tune, config.chunk_utterances)  # the tune half in chunks of its own, scored first
    score_files, failed = score_chunks(tune_chunks + _chunks([u for u in usable if u not in tune],
                                                             config.chunk_utterances), cache / "scores")
    flagged.update(failed)
    usable = [u for u in usable if u.key not in failed]
    tune = [u for u in tune if u.key not in failed]
    tune_files = score_files[:len(tune_chunks)]
    out_dir = cache / "decodes" / config.name
    tuning: dict[str, dict[str, float]] = {"acoustic_scale": {}, "beam": {}, "language_weight": {}}
    scales = config.search.acoustic_scales
    for scale in scales if len(scales) > 1 and tune else ():
        words = decode_ours(tune_files, graph, "cpu", scale, config, out_dir / "tune")[0]
        tuning["acoustic_scale"][f"{scale:g}"] = _wer(tune, words)
    scale = min(scales, key=lambda s: tuning["acoustic_scale"].get(f"{s:g}", 0.0))
    beams = config.search.beams
    for beam in beams if len(beams) > 1 and tune else ():
        at_beam = replace(config, search=replace(config.search, beam=beam))
        tuning["beam"][f"{beam:g}"] = _wer(tune, decode_ours(tune_files, graph, "cpu", scale, at_beam,
                                                            out_dir / "tune")[0])
    if beams:
        beam = min(beams, key=lambda b: (tuning["beam"].get(f"{b:g}", 0.0), b))  # ties: the narrower
        config = replace(config, search=replace(config.search, beam=beam))
    lm = graph.directory / "lm.arpa"
    weights = config.pocketsphinx.language_weights
    for weight in weights if config.pocketsphinx.enabled and len(weights) > 1 and tune else ():
        tuning["language_weight"][f"{weight:g}"] = _wer(tune, decode_sphinx(tune, lm, weight, config)[0])
    weight = min(weights, key=lambda w: tuning["language_weight"].get(f"{w:g}", 0.0))
    _log(f"acoustic scale {scale:g}, beam {config.search.beam:g}, pocketsphinx language weight {weight:g}")
    systems, speed, extras = {}, {}, {}
    for backend in config.search.backends:
        words, seconds, frames, extra = decode_ours(score_files, graph, backend, scale, config, out_dir)
        systems[backend], extras[backend] = words, extra
        speed[backend] = {"seconds": seconds, "frames": frames, "frames_per_second": frames / max(seconds, 1e-9)}
    if config.pocketsphinx.enabled:
        words, seconds, frames = decode_sphinx(usable, lm, weight, config)
        systems[SPHINX] = words
        speed[SPHINX] = {"seconds": seconds, "frames": frames, "frames_per_second": frames / max(seconds, 1e-9)}
    report = _report(usable, systems, config.bootstrap_samples)
    identical = None
    if "cpu" in extras and "twin" in extras:
        identical = sum(extras["cpu"][k]["word_ids"] == extras["twin"].get(k, {}).get("word_ids") for k in extras["cpu"])
    result = {"utterances": len(usable), "flagged": flagged, "acoustic_scale": scale, "beam": config.search.beam,
              "language_weight": weight,
              "tuning": tuning, "wer": report, "oov_rate": oov_rates(usable, graph), "speed": speed,
              "cpu_twin_identical": identical,
              "graph": {"directory": str(graph.directory), "states": graph.stats.states, "arcs": graph.stats.arcs},
              "seconds": time.perf_counter() - start}
    if run is not None:
        run.log_metrics(_metrics(result))
        run.log_dict(result, "real_speech.json")
    return result


def _metrics(result: dict[str, Any]) -> dict[str, float]:
    out = {"asr.real.utterances": float(result["utterances"]), "asr.real.flagged": float(len(result["flagged"])),
           "asr.real.acoustic_scale": result["acoustic_scale"], "asr.real.beam": result.get("beam", 0.0),
           "asr.real.language_weight": result["language_weight"],
           "asr.real.seconds": result["seconds"]}
    headline = result["wer"].get("asterisk_test.cpu")
    if headline is not None:
        out["asr.real.wer"] = headline["wer_a"]
    compared = _with_pocketsphinx(result)
    for key, cmp in result["wer"].items():
        out[f"asr.real.wer.{key}"] = cmp["wer_a"]
        out[f"asr.real.wer_low.{key}"], out[f"asr.real.wer_high.{key}"] = cmp["low_a"], cmp["high_a"]
        if compared and not key.endswith(SPHINX):
            out[f"asr.real.vs_pocketsphinx.{key}"] = cmp["difference"]
            out[f"asr.real.vs_pocketsphinx_low.{key}"], out[f"asr.real.vs_pocketsphinx_high.{key}"] = cmp["low"], cmp["high"]
    if "asterisk_test" in result["oov_rate"]:
        out["asr.real.oov_rate"] = result["oov_rate"]["asterisk_test"]
    for group, rate in result["oov_rate"].items():
        out[f"asr.real.oov_rate.{group}"] = rate
    for name, s in result["speed"].items():
        out[f"asr.real.frames_per_second.{name}"] = s["frames_per_second"]
    if "cpu" in result["speed"] and "kaldi" in result["speed"]:
        out["asr.real.cpu_vs_kaldi"] = result["speed"]["cpu"]["frames_per_second"] / result["speed"]["kaldi"]["frames_per_second"]
    if result["cpu_twin_identical"] is not None:
        out["asr.real.cpu_twin_identical"] = float(result["cpu_twin_identical"])
    return out


def _with_pocketsphinx(result: dict[str, Any]) -> bool:
    """Whether pocketsphinx decoded (`[pocketsphinx] enabled`): else there is nothing to compare with."""
    return any(key.endswith(f".{SPHINX}") for key in result["wer"])


def summary(result: dict[str, Any]) -> list[str]:
    compared = _with_pocketsphinx(result)
    lines = [(f"real speech: {result['utterances']} utterances ({len(result['flagged'])} flagged as unusable), "
              f"acoustic scale {result['acoustic_scale']:g}"
              + (f", pocketsphinx lw {result['language_weight']:g}" if compared else ""))]
    for key, cmp in sorted(result["wer"].items()):
        lines.append(f"  {key:<28} WER {cmp['wer_a']:6.1%} [{cmp['low_a']:.1%}, {cmp['high_a']:.1%}]"
                     + ("" if key.endswith(SPHINX) or not compared else
                        f"  vs pocketsphinx {cmp['difference']:+.1%} [{cmp['low']:+.1%}, {cmp['high']:+.1%}]"))
    lines.append("  out of the graph's vocabulary: " + ", ".join(f"{group} {rate:.1%}" for group, rate
                                                                  in result["oov_rate"].items()))
    for name, s in result["speed"].items():
        lines.append(f"  speed {name:<13} {s['frames_per_second']:8.0f} frames/s ({s['frames']:,} frames)")
    if result["cpu_twin_identical"] is not None:
        lines.append(f"  1-best identical cpu/twin: {result['cpu_twin_identical']} of {result['utterances']}")
    return lines


def execute(config: Any, path: Path, run: TrackedRun | None, opts: RunOptions) -> list[str]:
    """The job's runner (see `experiments.registry`)."""
    return summary(run_real_speech(config, path, run))
