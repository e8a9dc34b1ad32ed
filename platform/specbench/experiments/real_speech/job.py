"""The `real_speech` job: recorded speech, CMU Sphinx's en-us acoustic model, its HCLG, our decoders.

1. The sets (`audio.gather`) as 16 kHz WAVs; unusable files are flagged rows, reported and skipped.
2. Senone scores (`acoustic.sphinx_scores.SphinxSenoneScorer`, a Ray stage), `chunk_utterances` at a time,
   cached per utterance in `.specbench/real_speech/scores/` (`score_cache`: keyed by pocketsphinx's version,
   the model's files, the scoring code and the WAV reader it uses, `data/synthesis.py`, and the audio file).
3. The acoustic scale is chosen on the Asterisk `tune` half (its first `tune_utterances` prompts by name)
   with our CPU backend (lowest WER) at `[search] beam`, then the beam from `[search] beams` at that scale
   (lowest WER, ties to the narrower), and pocketsphinx's language weight (its tree pass's, the other two passes' in its default ratios) on
   the same prompts with its own decoder, before the other prompts count. A job with several candidates
   and no usable tune prompt is refused before anything is decoded.
4. Every usable utterance is decoded by each backend of `[search] backends` (our `cpu`, the `twin`,
   Kaldi's `FasterDecoder` as `kaldi`) at that scale over the HCLG, one core each, and by pocketsphinx
   (a fresh decoder per utterance).
5. WER per set and system with a bootstrap interval (text normalized the same way for every system), the
   paired difference of our CPU backend and pocketsphinx on the Asterisk test half (the target), 1-best
   identity of the CPU backend and the twin, and decode speed (frames per second of search on one core:
   one decoder per backend, its setup and the reading of the scores left out; pocketsphinx's includes its
   front end and scoring, not the construction of its decoders); the decoder benchmark's `real_speech`
   workload measures it side by side. An utterance a backend could not decode (a row whose status is not
   `ok`, such as `queue overflow`) has no hypothesis: it counts as all deletions in that backend's WER and
   is counted beside it (`decode_failed`, `asr.real.decode_failed.<backend>`), and it is never counted as
   identical. `asr.real.wer` is the CPU backend's WER on the Asterisk test half. Per set, the share of
   reference words outside the graph's vocabulary (`asr.real.oov_rate.<set>`), which no system can recognize.
"""

from __future__ import annotations

import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specbench.config import RealSpeechConfig
from specbench.config.jobs import REAL_SPEECH_SETS
from specbench.data.scores import iter_rows, read_parquet_table
from specbench.data.text_norm import normalize
from specbench.decoder.stage import DecoderStage
from specbench.errors import ConfigError
from specbench.experiments.graph_recipe import GraphArtifacts, build_graph
from specbench.experiments.job_refs import SPHINX_RECIPE, graph_job_of_recipe
from specbench.experiments.real_speech.audio import STATUS_OK, RealUtterance, gather
from specbench.experiments.real_speech.score_cache import score_chunks
from specbench.experiments.real_speech.sphinx_decode import (
    LM_WEIGHTS,
    SphinxJob,
    decode_chunk,
    pass_weights_for,
    sphinx_lm,
)
from specbench.experiments.registry import RunOptions
from specbench.experiments.stage_clock import job_logger, stage_printer
from specbench.metrics.wer_bootstrap import paired_wer_bootstrap, utterance_errors
from specbench.paths import work_dir
from specbench.reports.coverage import left_out, left_out_lines
from specbench.runtime import run_tasks
from specbench.text_files import json_text
from specbench.wfst.symbols import EPS, SymbolTable

if TYPE_CHECKING:
    from specbench.tracking.runs import TrackedRun

SPHINX = "pocketsphinx"
NO_OUTPUT = "no decoder output for this utterance"
RESERVED = frozenset({EPS, "#0", "<s>", "</s>"})  # words.txt symbols that are not words


_log = job_logger("real_speech")


def _chunks(rows: list[RealUtterance], size: int) -> list[list[RealUtterance]]:
    return [rows[i:i + size] for i in range(0, len(rows), size)]


def decode_ours(score_files: list[list[Path]], graph: GraphArtifacts, backend: str, scale: float,
                config: RealSpeechConfig, out_dir: Path) -> tuple[dict[str, list[str]], float, int, dict]:
    """Words per key, search seconds and frames, and the rows' other fields, for one backend and scale;
    `score_files` holds each chunk's scores files (`score_cache.score_chunks`). One decoder over the graph
    serves every chunk; its setup (reading and mapping the graph) and the reading of the scores are not in
    the seconds, which time the search alone. Each chunk's rows are also written to
    `out_dir/<backend>-<scale>-b<beam>-<chunk>.jsonl`."""
    stage = DecoderStage(graph.fst, backend, beam=config.search.beam, max_active=config.search.max_active,
                         acoustic_scale=scale)
    stage.setup()
    symbols = SymbolTable.read(graph.directory / "words.txt").symbols
    words, extra, seconds, frames = {}, {}, 0.0, 0
    out_dir.mkdir(parents=True, exist_ok=True)
    for k, paths in enumerate(score_files):
        items = [item for path in paths for item in iter_rows(read_parquet_table(path), str(path))]  # ok rows
        start = time.perf_counter()
        rows = stage.decode_many(items) if items else []
        seconds += time.perf_counter() - start
        frames += sum(len(m) for _, m, _ in items)
        with open(out_dir / f"{backend}-{scale:g}-b{config.search.beam:g}-{k}.jsonl", "w") as out:
            for line in collect_rows(rows, symbols, words, extra):
                out.write(json_text(line) + "\n")
        _log(f"{backend} (scale {scale:g}): chunk {k + 1}/{len(score_files)}, {frames:,} frames in "
             f"{seconds:.1f} s of search")
    return words, seconds, frames, extra


def collect_rows(rows: list[dict], symbols: list[str], words: dict[str, list[str]], extra: dict[str, dict]
                 ) -> list[dict]:
    """Decoder output rows into `words` (normalized; none for a row that is not ok) and `extra` (status and
    word ids) by id; returns the lines written per row (id, status, word ids, spelled words)."""
    lines = []
    for row in rows:
        spelled = [symbols[w] if 0 <= w < len(symbols) else f"<{w}>" for w in row["word_ids"] or []]
        lines.append({"id": row["id"], "status": row["status"], "word_ids": row["word_ids"], "words": spelled})
        words[row["id"]] = normalize(" ".join(spelled)).split()
        extra[row["id"]] = {"status": row["status"], "word_ids": row["word_ids"]}
    return lines


def decode_failures(rows: list[RealUtterance], extra: dict[str, dict]) -> dict[str, str]:
    """The utterances of `rows` that a backend did not decode, with the reason: its row's status when not
    `ok` (`queue overflow`, `no final state reached`, ...), or `NO_OUTPUT` when it returned no row."""
    out = {}
    for u in rows:
        row = extra.get(u.key)
        if row is None:
            out[u.key] = NO_OUTPUT
        elif row["status"] != STATUS_OK:
            out[u.key] = row["status"]
    return out


def identical_onebest(rows: list[RealUtterance], a: dict[str, dict], b: dict[str, dict]) -> int:
    """Utterances that both backends decoded (status `ok`) to the same word ids: two failed rows, whose word
    ids are both empty, are not identical 1-bests."""
    def ok(row: dict | None) -> bool:
        return row is not None and row["status"] == STATUS_OK

    return sum(ok(a.get(u.key)) and ok(b.get(u.key)) and a[u.key]["word_ids"] == b[u.key]["word_ids"]
               for u in rows)


def decode_sphinx(rows: list[RealUtterance], lm: Path, weight: float, config: RealSpeechConfig,
                  pass_weights: tuple[float, float, float] | None = None, out_dir: Path | None = None
                  ) -> tuple[dict[str, list[str]], float, int, float]:
    """pocketsphinx's words per key at tree-pass weight `weight` (the others in pocketsphinx's ratios,
    `pass_weights_for`; or each pass's own from `pass_weights`), its recognition seconds and frames, and the
    seconds spent constructing its per-utterance decoders; each chunk's rows go to `out_dir` if given."""
    lm = sphinx_lm(lm, work_dir() / "real_speech" / "lm")
    jobs = [SphinxJob(tuple((u.key, str(u.wav)) for u in chunk), str(lm), weight,
                      config.pocketsphinx.word_insertion_penalty, pass_weights)
            for chunk in _chunks(rows, config.chunk_utterances)]
    shown = [f"{w:.3g}" for w in pass_weights or pass_weights_for(weight)]
    results = run_tasks(decode_chunk, jobs,
                        progress=f"pocketsphinx ({', '.join(LM_WEIGHTS)} {'/'.join(shown)})")
    words, seconds, frames, setup = {}, 0.0, 0, 0.0
    for k, chunk in enumerate(results):
        for r in chunk:
            words[r.key] = r.words
            seconds, frames, setup = seconds + r.seconds, frames + r.frames, setup + r.setup_seconds
        if out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            (out_dir / f"{SPHINX}-{'_'.join(shown)}-{k}.jsonl").write_text("".join(json_text(
                {"id": r.key, "text": r.text, "words": r.words, "score": r.score, "frames": r.frames}) + "\n"
                for r in chunk))
    return words, seconds, frames, setup


def tune_language_weight(tune: list[RealUtterance], lm: Path, config: RealSpeechConfig,
                         out_dir: Path | None = None) -> tuple[float, dict[str, float]]:
    """pocketsphinx's language weight (the tree pass's; the other passes follow in its ratios) with the lowest WER on `tune` (ties: the smaller), and the WER of
    each candidate; the one weight listed when there is nothing to choose (`check_tune_prompts` refuses a job
    with several candidates and no tune prompt)."""
    weights, tuning = config.pocketsphinx.language_weights, {}
    if config.pocketsphinx.enabled and len(weights) > 1:
        if not tune:
            raise ValueError("no tune prompts to choose pocketsphinx's language weight on")
        for weight in weights:
            tuning[f"{weight:g}"] = _wer(tune, decode_sphinx(tune, lm, weight, config, out_dir=out_dir)[0])
    return min(weights, key=lambda w: (tuning.get(f"{w:g}", 0.0), w)), tuning  # ties: the smaller weight


def tuning_candidates(config: RealSpeechConfig) -> dict[str, tuple[float, ...]]:
    """The settings the tune half chooses among, where there is more than one candidate."""
    lists = {"[search] acoustic_scales": config.search.acoustic_scales, "[search] beams": config.search.beams,
             "[pocketsphinx] language_weights": (config.pocketsphinx.language_weights
                                                 if config.pocketsphinx.enabled else ())}
    return {name: values for name, values in lists.items() if len(values) > 1}


def _one_each() -> str:
    return ("or give one candidate each (acoustic_scales = [0.08], beams = [], language_weights = [6.5]) so "
            "that nothing is tuned")


def check_tune_sets(config: RealSpeechConfig, path: Path) -> None:
    """Refuse, before any work, a job that lists several candidates but no set with tune prompts."""
    several = tuning_candidates(config)
    if several and "asterisk" not in config.sets:
        listed = "; ".join(f"{name} = {list(values)}" for name, values in several.items())
        raise ConfigError(f"{path}: sets = {list(config.sets)} has no tune prompts (only the Asterisk prompts "
                          f"have a `tune` half), but {listed} list several candidates to choose among. Fix: "
                          f"add \"asterisk\" to sets, {_one_each()}.")


def check_tune_prompts(config: RealSpeechConfig, path: Path, tune: list[RealUtterance],
                       flagged: dict[str, str]) -> None:
    """Refuse, before decoding, a job with several candidates and no usable tune prompt (none kept, or every
    one flagged): otherwise the first candidate would be taken as if chosen."""
    several = tuning_candidates(config)
    if not several or tune:
        return
    bad = sorted((k, v) for k, v in flagged.items() if k.startswith("asterisk/"))
    why = f"; {len(bad)} Asterisk prompts flagged, e.g. {bad[0][0]}: {bad[0][1]}" if bad else ""
    raise ConfigError(f"{path}: no usable prompt of the Asterisk tune half to choose {', '.join(several)} "
                      f"(tune_utterances = {config.tune_utterances}, max_per_set = {config.max_per_set}, "
                      f"sample_min_words = {config.sample_min_words}{why}). Fix: make tune prompts usable "
                      f"(tune_utterances = 0 takes them all), {_one_each()}.")


def _wer(rows: list[RealUtterance], words: dict[str, list[str]]) -> float:
    errors, n = utterance_errors([u.text.split() for u in rows], [words.get(u.key, []) for u in rows])
    return float(errors.sum() / max(n.sum(), 1.0))


def _tune_wer(tune: list[RealUtterance], words: dict[str, list[str]], extra: dict[str, dict], what: str) -> float:
    """The tune WER of one candidate; utterances it failed to decode count as all deletions and are logged."""
    failed = decode_failures(tune, extra)
    if failed:
        _log(f"tuning at {what}: {len(failed)} of {len(tune)} tune prompts not decoded (all deletions), e.g. "
             f"{next(iter(failed.items()))}")
    return _wer(tune, words)


def set_groups(rows: list[RealUtterance]) -> dict[str, list[RealUtterance]]:
    out: dict[str, list[RealUtterance]] = {}
    for u in rows:
        name = f"asterisk_{u.half}" if u.set == "asterisk" else u.set
        out.setdefault(name, []).append(u)
    return out


def _report(rows: list[RealUtterance], systems: dict[str, dict[str, list[str]]], samples: int,
            failed: dict[str, dict[str, str]] | None = None) -> dict[str, Any]:
    """WER with intervals per set and system, each system against pocketsphinx (paired), and beside each WER
    the utterances the system failed to decode (`decode_failed`; counted in the WER as all deletions)."""
    report: dict[str, Any] = {}
    failed = failed or {}
    for group, members in sorted(set_groups(rows).items()):
        refs = [u.text.split() for u in members]
        base = utterance_errors(refs, [systems[SPHINX].get(u.key, []) for u in members])[0] if SPHINX in systems else None
        for name, words in systems.items():
            errors, n = utterance_errors(refs, [words.get(u.key, []) for u in members])
            other = base if base is not None else errors
            cmp = paired_wer_bootstrap(errors, other, n, samples=samples)
            report[f"{group}.{name}"] = asdict(cmp) | {
                "decode_failed": sum(u.key in failed.get(name, {}) for u in members)}
    return report


def oov_rates(rows: list[RealUtterance], graph: GraphArtifacts) -> dict[str, float]:
    """Per set, the share of reference words that the graph cannot put out (spelled as the hypotheses are
    normalized): a floor under every system's WER, since each such word is at least one error."""
    symbols = SymbolTable.read(graph.directory / "words.txt").symbols
    # not the table's <eps>, <s>, </s> and #0 (which normalizes to "hashtag zero"): no path writes them
    vocabulary = {w for s in symbols if s not in RESERVED for w in normalize(s).split()}
    out = {}
    for group, members in sorted(set_groups(rows).items()):
        words = [w for u in members for w in u.text.split()]
        out[group] = sum(w not in vocabulary for w in words) / max(len(words), 1)
    return out


def run_real_speech(config: RealSpeechConfig, path: Path, run: TrackedRun | None) -> dict[str, Any]:
    start = time.perf_counter()
    check_tune_sets(config, path)
    graph_config = graph_job_of_recipe(path, "graph_job", config.graph_job, SPHINX_RECIPE)  # checked first
    graph = build_graph(graph_config, step=stage_printer(f"graph {graph_config.name}"))
    cache = work_dir() / "real_speech"
    rows = gather(config.sets, config.max_per_set, cache / "audio", config.sample_min_words)
    flagged = {u.key: u.status for u in rows if u.status != STATUS_OK}
    usable = [u for u in rows if u.status == STATUS_OK]
    _log(f"{len(usable)} usable utterances, {len(flagged)} flagged")
    tune = [u for u in usable if u.set == "asterisk" and u.half == "tune"][:config.tune_utterances or None]
    check_tune_prompts(config, path, tune, flagged)  # before scoring; again below, once scoring has flagged some
    tune_chunks = _chunks(tune, config.chunk_utterances)  # the tune half in chunks of its own, scored first
    score_files, failed = score_chunks(tune_chunks + _chunks([u for u in usable if u not in tune],
                                                             config.chunk_utterances), cache / "scores")
    flagged.update(failed)
    usable = [u for u in usable if u.key not in failed]
    tune = [u for u in tune if u.key not in failed]
    check_tune_prompts(config, path, tune, flagged)
    tune_files = score_files[:len(tune_chunks)]
    out_dir = cache / "decodes" / config.name
    tuning: dict[str, dict[str, float]] = {"acoustic_scale": {}, "beam": {}, "language_weight": {}}
    scales = config.search.acoustic_scales
    for scale in scales if len(scales) > 1 else ():
        words, _, _, extra = decode_ours(tune_files, graph, "cpu", scale, config, out_dir / "tune")
        tuning["acoustic_scale"][f"{scale:g}"] = _tune_wer(tune, words, extra, f"scale {scale:g}")
    scale = min(scales, key=lambda s: (tuning["acoustic_scale"].get(f"{s:g}", 0.0), s))  # ties: the smaller
    beams = config.search.beams
    for beam in beams if len(beams) > 1 else ():
        at_beam = replace(config, search=replace(config.search, beam=beam))
        words, _, _, extra = decode_ours(tune_files, graph, "cpu", scale, at_beam, out_dir / "tune")
        tuning["beam"][f"{beam:g}"] = _tune_wer(tune, words, extra, f"beam {beam:g}")
    if beams:
        beam = min(beams, key=lambda b: (tuning["beam"].get(f"{b:g}", 0.0), b))  # ties: the narrower
        config = replace(config, search=replace(config.search, beam=beam))
    lm = graph.directory / "lm.arpa"
    weight, tuning["language_weight"] = tune_language_weight(tune, lm, config, out_dir / "tune")
    _log(f"acoustic scale {scale:g}, beam {config.search.beam:g}, pocketsphinx LM weights "
         f"{', '.join(f'{n} {w:.3g}' for n, w in zip(LM_WEIGHTS, pass_weights_for(weight)))}")
    systems, speed, extras, decode_failed = {}, {}, {}, {}
    for backend in config.search.backends:
        words, seconds, frames, extra = decode_ours(score_files, graph, backend, scale, config, out_dir)
        systems[backend], extras[backend] = words, extra
        decode_failed[backend] = decode_failures(usable, extra)
        if decode_failed[backend]:
            _log(f"{backend}: {len(decode_failed[backend])} utterances not decoded (counted as all deletions), "
                 f"e.g. {next(iter(decode_failed[backend].items()))}")
        speed[backend] = {"seconds": seconds, "frames": frames, "frames_per_second": frames / max(seconds, 1e-9)}
    if config.pocketsphinx.enabled:
        words, seconds, frames, setup = decode_sphinx(usable, lm, weight, config, out_dir=out_dir)
        systems[SPHINX] = words
        speed[SPHINX] = {"seconds": seconds, "frames": frames, "frames_per_second": frames / max(seconds, 1e-9),
                         "setup_seconds": setup}
    report = _report(usable, systems, config.bootstrap_samples, decode_failed)
    identical = None
    if "cpu" in extras and "twin" in extras:
        identical = identical_onebest(usable, extras["cpu"], extras["twin"])
    result = {"utterances": len(usable), "flagged": flagged, "acoustic_scale": scale, "beam": config.search.beam,
              "language_weight": weight,
              "pocketsphinx_weights": (dict(zip(LM_WEIGHTS, pass_weights_for(weight)))
                                       if config.pocketsphinx.enabled else {}),
              "tuning": tuning, "wer": report, "oov_rate": oov_rates(usable, graph), "speed": speed,
              "cpu_twin_identical": identical, "decode_failed": decode_failed,
              "sets_left_out": left_out(config.sets, REAL_SPEECH_SETS),
              "graph": {"directory": str(graph.directory), "states": graph.stats.states, "arcs": graph.stats.arcs},
              "seconds": time.perf_counter() - start}
    if run is not None:
        run.log_metrics(_metrics(result))
        run.log_dict(result, "real_speech.json")
    return result


def _metrics(result: dict[str, Any]) -> dict[str, float]:
    out = {"asr.real.utterances": float(result["utterances"]), "asr.real.flagged": float(len(result["flagged"])),
           "asr.real.acoustic_scale": result["acoustic_scale"], "asr.real.beam": result.get("beam", 0.0),
           "asr.real.seconds": result["seconds"]}
    for name, value in result.get("pocketsphinx_weights", {}).items():  # the LM weight of each of its passes
        out[f"asr.real.pocketsphinx_{name}"] = value
    for backend, failed in result.get("decode_failed", {}).items():
        out[f"asr.real.decode_failed.{backend}"] = float(len(failed))
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
              + (f", pocketsphinx LM weights {result['language_weight']:g} (lw; fwdflatlw and bestpathlw in "
                 "its default ratios)"
                 if compared else ""))]
    for key, cmp in sorted(result["wer"].items()):
        failed = cmp.get("decode_failed", 0)
        lines.append(f"  {key:<28} WER {cmp['wer_a']:6.1%} [{cmp['low_a']:.1%}, {cmp['high_a']:.1%}]"
                     + (f"  ({failed} of {cmp['utterances']} not decoded: all deletions)" if failed else "")
                     + ("" if key.endswith(SPHINX) or not compared else
                        f"  vs pocketsphinx {cmp['difference']:+.1%} [{cmp['low']:+.1%}, {cmp['high']:+.1%}]"))
    lines.append("  out of the graph's vocabulary: " + ", ".join(f"{group} {rate:.1%}" for group, rate
                                                                  in result["oov_rate"].items()))
    for name, s in result["speed"].items():
        lines.append(f"  speed {name:<13} {s['frames_per_second']:8.0f} frames/s ({s['frames']:,} frames)")
    if result["cpu_twin_identical"] is not None:
        lines.append(f"  1-best identical cpu/twin: {result['cpu_twin_identical']} of {result['utterances']} "
                     "(both decoded, same words)")
    for backend, failed in result.get("decode_failed", {}).items():
        if failed:
            lines.append(f"  not decoded by {backend}: {len(failed)} ({', '.join(sorted(set(failed.values())))})")
    return lines + left_out_lines(result.get("sets_left_out", []), "sets")


def execute(config: Any, path: Path, run: TrackedRun | None, opts: RunOptions) -> list[str]:
    """The job's runner (see `experiments.registry`)."""
    return summary(run_real_speech(config, path, run))
