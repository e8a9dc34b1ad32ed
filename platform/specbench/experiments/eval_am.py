"""The `eval_am` job: score held-out speech with the acoustic model (a Ray actor-pool stage), decode it with
the SLURP TLG (Kaldi's FasterDecoder as Ray tasks over shards), and report WER and PER.

The acoustic scale is tuned on devel (never on test). Test WER is reported overall, per voice, and split
by whether an utterance holds a word that the LM's training text never had; the real recordings' WER is
reported as it is. With `[vtln] enabled`, each test voice gets a mel-axis warp chosen without transcripts
from its devel utterances (`acoustic.vtln`); the headline figures are then the adapted ones and the
unadapted ones are reported beside them as `asr.no_vtln.*`. With `[speaker_transform] enabled`, each test
voice also gets a feature transform fitted on the first-pass best paths of its devel utterances
(`acoustic.speaker_transform`, no transcripts; after VTLN); the headline figures are then those of the
transformed model and the figures before it are reported as `asr.no_speaker_transform.*`. Scores (adapted,
where adaptation is on) are kept as Parquet and Kaldi ark/scp in `.specbench/scores/<name>/`, the adapted
per-voice checkpoints in its `speaker/` folder.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from specbench.acoustic.checkpoint import AcousticCheckpoint, load_checkpoint, save_checkpoint
from specbench.acoustic.features import fbank
from specbench.acoustic.inference import SCORES_SCHEMA, AcousticScorer, score_features, scores_table
from specbench.acoustic.speaker_transform import ctc_targets, fit_speaker_transform, install
from specbench.acoustic.training import greedy_ctc
from specbench.acoustic.vtln import IDENTITY, NoPhoneFrames, choose_warp, warp_grid
from specbench.config import EvalAmConfig, SpeechConfig
from specbench.data import scores as scores_io
from specbench.data.real_speech import load_audio, real_recordings
from specbench.data.synthesis import read_wav
from specbench.decoder.kaldi_reference import KaldiFasterDecoder, decode_rows
from specbench.decoder.options import SearchOptions
from specbench.errors import DataError
from specbench.experiments import scores_record
from specbench.experiments.graph_recipe import build_graph
from specbench.experiments.job_refs import ctc_graph_job, referenced_job
from specbench.experiments.registry import RunOptions
from specbench.experiments.speech import build_corpus
from specbench.metrics.wer import error_rate, wer
from specbench.metrics.wer_bootstrap import paired_wer_bootstrap, utterance_errors
from specbench.paths import from_root, work_dir
from specbench.reports import model_card
from specbench.runtime import connect, run_ray, run_tasks
from specbench.stage import STATUS_COLUMN, STATUS_OK
from specbench.wfst.lexicon import PHONES, Lexicon, read_lexicon
from specbench.wfst.symbols import SymbolTable

if TYPE_CHECKING:
    from specbench.tracking.runs import TrackedRun


def score_rows(checkpoint: Path, audio_root: Path, rows: list[dict], batch_size: int = 32,
               warps: Mapping[str, float] | None = None) -> pa.Table:
    """Acoustic scores of manifest rows through the Ray actor-pool stage; only ok rows are returned.
    `warps` maps a voice to its VTLN warp factor (voices not in it are not warped)."""
    table = pa.table({"utt_id": [r["utt_id"] for r in rows], "audio_path": [r["audio_path"] for r in rows],
                      "vtln_warp": pa.array([(warps or {}).get(r.get("voice"), IDENTITY) for r in rows],
                                            pa.float64())})
    out = run_ray(AcousticScorer(checkpoint, audio_root, expected_phones=PHONES), table, batch_size=batch_size)
    return out.filter(pa.compute.equal(out[STATUS_COLUMN], STATUS_OK))


def decode_scores(tlg: Path, table: pa.Table, scale: float, config: EvalAmConfig,
                  words: SymbolTable) -> dict[str, list[str]]:
    """utt_id -> decoded words, for the utterances the decoder found a path for (the rest are missing and
    count as all deletions in the WER; `_failures` counts them)."""
    rows = table.to_pylist()
    shards = [rows[i:i + config.shard_size] for i in range(0, len(rows), config.shard_size)]
    fn = partial(decode_rows, str(tlg), options=_search_options(config, scale))
    results = [r for shard in run_tasks(fn, shards, progress=None) for r in shard]
    return {r["utt_id"]: [words.symbols[w] for w in r["word_ids"]] for r in results if r["status"] == "ok"}


def _search_options(config: EvalAmConfig, scale: float) -> SearchOptions:
    """The Kaldi decoder's search options: the job's beam and max_active at acoustic scale `scale`."""
    return SearchOptions(beam=config.decode.beam, max_active=config.decode.max_active, acoustic_scale=float(scale))


def _wer_of(rows: list[dict], hyps: dict[str, list[str]]) -> float:
    """The pooled WER of `rows`; NaN for no rows (no utterance is not a perfect score)."""
    if not rows:
        return float("nan")
    return wer([r["normalized_text"].split() for r in rows], [hyps.get(r["utt_id"], []) for r in rows])


def check_pronounced(rows: list[dict], lexicon: Lexicon, path: Path, job_path: Path) -> None:
    """The greedy PER spells each test reference in the graph's lexicon (`path`): refuse, before anything is
    scored, a graph whose lexicon lacks a test word."""
    missing = lexicon.missing(w for r in rows for w in r["normalized_text"].split())
    if missing:
        raise DataError(f"{job_path}: graph_job's lexicon {path} has no pronunciation of {len(missing)} test "
                        f"word(s) ({', '.join(missing[:5])}{', ...' if len(missing) > 5 else ''}), and the greedy "
                        "phone error rate spells every test reference in it. Fix: build the graph with \"test\" in "
                        "its [lm] extra_vocabulary (as graph_slurp.toml does), or point graph_job at such a graph.")


def _greedy_per(table: pa.Table, rows: list[dict], prons: dict) -> float:
    """Greedy CTC PER; an utterance without scores counts as all deletions (like its WER)."""
    index = {p: i + 1 for i, p in enumerate(PHONES)}
    mats = dict(scores_io.iter_matrices(table))
    pairs = []
    for r in rows:
        ref = [index[p] for w in r["normalized_text"].split() for p in prons[w][0]]
        pairs.append((ref, greedy_ctc_np(mats[r["utt_id"]]) if r["utt_id"] in mats else []))
    return error_rate(pairs)


def greedy_ctc_np(mat: np.ndarray) -> list[int]:
    return greedy_ctc(torch.from_numpy(mat), len(mat))


def score_in_batches(ckpt: AcousticCheckpoint, feats: list[np.ndarray], warp: float,
                     batch_size: int) -> list[np.ndarray]:
    """`score_features` on the CPU, `batch_size` utterances at a time, in the order of `feats` (sort them by
    length first for little padding)."""
    return [m for i in range(0, len(feats), batch_size)
            for m in score_features(ckpt, feats[i:i + batch_size], "cpu", warp)]


def choose_voice_warps(checkpoint: Path, audio_root: Path, adaptation: list[dict], voices: list[str],
                       config: EvalAmConfig, batch_size: int = 16) -> dict[str, dict[str, float]]:
    """Per voice: the warp chosen from up to `config.vtln.utterances` of its readable rows in `adaptation`
    (no transcripts used), and how many utterances it was chosen from. A voice without readable adaptation
    audio keeps the identity (and 0 utterances); an unreadable file is skipped, as the scoring stage skips
    it. Scored on the CPU in batches of similar length."""
    ckpt = load_checkpoint(checkpoint, PHONES)
    factors = warp_grid(config.vtln.low, config.vtln.high, config.vtln.step)

    def score(feats: list[np.ndarray], warp: float) -> list[np.ndarray]:
        return score_in_batches(ckpt, sorted(feats, key=len), warp, batch_size)

    out = {}
    for voice in voices:
        feats = voice_features(audio_root, adaptation, voice, config.vtln.utterances)
        try:
            choice = choose_warp(score, feats, factors) if feats else None
        except NoPhoneFrames as err:  # the model hears no phone in this voice's audio: nothing to choose by
            print(f"VTLN for {voice}: {err}; its warp stays {IDENTITY}", file=sys.stderr)
            choice = None
        out[voice] = {"warp": choice.factor if choice else IDENTITY, "utterances": float(len(feats))}
    return out


def voice_features(audio_root: Path, rows: list[dict], voice: str, limit: int) -> list[np.ndarray]:
    """The fbank of the first `limit` readable rows of `voice` (an unreadable file is skipped, as the scoring
    stage skips it)."""
    feats: list[np.ndarray] = []
    for r in (r for r in rows if r["voice"] == voice):
        if len(feats) == limit:
            break
        try:
            feats.append(fbank(read_wav(audio_root / r["audio_path"])[0]))
        except DataError:
            continue
    return feats


def fit_voice_transforms(checkpoint: Path, audio_root: Path, adaptation: list[dict], voices: list[str],
                         warps: Mapping[str, float], scale: float, tlg: Path, config: EvalAmConfig,
                         out_dir: Path, batch_size: int = 16) -> dict[str, dict[str, Any]]:
    """Per voice with readable adaptation audio: a copy of the checkpoint with a speaker transform
    (`acoustic.speaker_transform`) fitted on the first-pass best paths of up to
    `config.speaker_transform.utterances` of its rows in `adaptation` (decoded with the TLG at `scale`,
    after the voice's VTLN warp), saved as `out_dir/<voice>.pt`; with how many utterances it was fitted on
    and the CTC loss before and after. A voice without readable audio or without a phone in its first-pass
    paths gets no transform (`checkpoint` None, 0 utterances)."""
    settings = config.speaker_transform
    decoder = KaldiFasterDecoder(tlg, _search_options(config, scale))
    out: dict[str, dict[str, Any]] = {}
    for voice in voices:
        out[voice] = {"checkpoint": None, "utterances": 0}
        feats = sorted(voice_features(audio_root, adaptation, voice, settings.utterances), key=len)
        if not feats:
            continue
        ckpt = load_checkpoint(checkpoint, PHONES)
        warp = warps.get(voice, IDENTITY)
        mats = score_in_batches(ckpt, feats, warp, batch_size)
        paths = [decoder.linear_path(m) for m in mats]
        targets = [ctc_targets(p.ilabels) if p is not None else [] for p in paths]
        if not any(targets):
            print(f"speaker transform for {voice}: no first-pass path holds a phone; the voice is scored "
                  "without one", file=sys.stderr)
            continue
        fit = fit_speaker_transform(ckpt, feats, targets, warp, settings.epochs, settings.learning_rate,
                                    settings.l2, settings.batch_size)
        install(ckpt, fit)
        path = out_dir / f"{_voice_key(voice)}.pt"
        info = {"utterances": sum(1 for t in targets if t), "loss_before": fit.losses[0],
                "loss_after": fit.losses[-1]}
        metadata = {**ckpt.metadata, "speaker_transform": {"voice": voice, "warp": warp, **info}}
        save_checkpoint(path, ckpt.model, ckpt.cmvn, ckpt.phones, metadata, fp16=False)
        out[voice] = {"checkpoint": path, **info}
    return out


def score_rows_by_voice(checkpoints: Mapping[str, Path], default: Path, audio_root: Path, rows: list[dict],
                        warps: Mapping[str, float]) -> pa.Table:
    """`score_rows` with each voice's own checkpoint (`default` for voices without one), in the order of
    `rows`."""
    groups: dict[Path, list[dict]] = defaultdict(list)
    for r in rows:
        groups[checkpoints.get(r["voice"], default)].append(r)
    tables = [score_rows(path, audio_root, group, warps=warps) for path, group in groups.items()]
    if not tables:
        return SCORES_SCHEMA.empty_table()
    table = pa.concat_tables(tables)
    position = {r["utt_id"]: i for i, r in enumerate(rows)}
    ids = table.column("utt_id").to_pylist()
    return table.take(sorted(range(len(ids)), key=lambda i: position[ids[i]]))


def score_devel_and_test(score: Callable[[list[dict]], pa.Table], devel: list[dict],
                         test: list[dict]) -> tuple[pa.Table, pa.Table]:
    """`score(rows)` (`score_rows` or `score_rows_by_voice` with their other arguments bound) over devel and
    test in one pass, so that one actor pool (one model load per actor) serves both; the result split again
    by utterance. Rows that share an utt_id across the two splits are scored apart."""
    devel_ids = {r["utt_id"] for r in devel}
    if devel_ids & {r["utt_id"] for r in test}:
        return score(devel), score(test)
    table = score(devel + test)
    in_devel = pc.is_in(table.column("utt_id"), value_set=pa.array(sorted(devel_ids), pa.string()))
    return table.filter(in_devel), table.filter(pc.invert(in_devel))


def _voice_key(voice: str) -> str:
    return voice.replace(":", "_").replace("+", "_")


def _has_unseen_word(row: dict, train_vocab: set[str]) -> bool:
    """Whether a test utterance holds a word the LM's training text never had."""
    return not all(w in train_vocab for w in row["normalized_text"].split())


def _scored_metrics(tlg: Path, devel: list[dict], test: list[dict], devel_scores: pa.Table,
                    test_scores: pa.Table, config: EvalAmConfig, words: SymbolTable, prons: dict,
                    train_vocab: set[str]) -> tuple[dict[str, float], dict, dict]:
    """WER (devel-tuned acoustic scale), PER, per-voice WER and WER by whether an utterance holds a word the
    LM text never had, of one set of scores; also the devel WER per scale and the test hypotheses."""
    if not devel:  # min() below would pick the first scale listed, as if devel had chosen it
        raise DataError("eval_am: no devel utterance was scored (each is flagged in the scores' status), "
                        "so no acoustic scale can be chosen on devel. Fix: see why they failed, then run "
                        "the job again; test is not decoded at a scale devel did not choose")
    tuning = {s: _wer_of(devel, decode_scores(tlg, devel_scores, s, config, words))
              for s in config.decode.acoustic_scales}
    scale = min(tuning, key=lambda s: (tuning[s], s))
    hyps = decode_scores(tlg, test_scores, scale, config, words)
    metrics = {"asr.wer": _wer_of(test, hyps), "asr.per_greedy": _greedy_per(test_scores, test, prons),
               "asr.acoustic_scale": scale, "asr.devel_wer": tuning[scale]}
    by_voice: dict[str, list[dict]] = defaultdict(list)
    for r in test:
        by_voice[r["voice"]].append(r)
    for voice, rows in sorted(by_voice.items()):
        metrics[f"asr.wer.{_voice_key(voice)}"] = _wer_of(rows, hyps)
    unseen = [r for r in test if _has_unseen_word(r, train_vocab)]
    seen = [r for r in test if not _has_unseen_word(r, train_vocab)]
    metrics["asr.wer_all_words_in_lm_text"] = _wer_of(seen, hyps)
    metrics["asr.wer_with_unseen_words"] = _wer_of(unseen, hyps)
    return metrics, tuning, hyps


def run_eval_am(config: EvalAmConfig, job_path: Path, run: TrackedRun | None,
                ray_address: str | None = None) -> dict[str, Any]:
    """Evaluate; returns the metrics (also logged to `run`)."""
    speech_cfg = referenced_job(job_path, "speech_job", config.speech_job, SpeechConfig)
    graph_cfg = ctc_graph_job(job_path, "graph_job", config.graph_job)  # before any build
    graph = build_graph(graph_cfg)
    corpus = build_corpus(speech_cfg, None, ray_address)
    connect(ray_address)
    checkpoint = from_root(config.checkpoint)
    words = SymbolTable.read(graph.words)
    lexicon = read_lexicon(graph.directory / "lexicon.txt")
    prons = dict(lexicon.prons)
    train_vocab = {w for line in (graph.directory / "train.txt").read_text().splitlines() for w in line.split()}
    out_dir = work_dir() / "scores" / config.name
    all_devel = corpus.rows("devel")
    devel = all_devel[: config.devel_utterances]
    test = corpus.rows("test")
    test = test[: config.test_utterances] if config.test_utterances else test
    check_pronounced(test, lexicon, graph.directory / "lexicon.txt", job_path)
    metrics: dict[str, float] = {}
    warps: dict[str, float] = {}
    if config.vtln.enabled:
        plain_devel, plain_test = score_devel_and_test(partial(score_rows, checkpoint, corpus.root), devel, test)
        plain, plain_tuning, unadapted = _scored_metrics(graph.tlg, devel, test, plain_devel, plain_test, config,
                                                         words, prons, train_vocab)
        metrics.update({k.replace("asr.", "asr.no_vtln.", 1): v for k, v in plain.items()})
        voices = sorted({r["voice"] for r in test} | {r["voice"] for r in devel})
        chosen = choose_voice_warps(checkpoint, corpus.root, all_devel, voices, config)
        warps = {v: c["warp"] for v, c in chosen.items()}
        for voice, c in chosen.items():
            metrics[f"asr.vtln_warp.{_voice_key(voice)}"] = c["warp"]
            metrics[f"asr.vtln_utterances.{_voice_key(voice)}"] = c["utterances"]
    devel_scores, test_scores = score_devel_and_test(partial(score_rows, checkpoint, corpus.root, warps=warps),
                                                     devel, test)
    if config.speaker_transform.enabled:
        before, before_tuning, first_pass = _scored_metrics(graph.tlg, devel, test, devel_scores, test_scores,
                                                            config, words, prons, train_vocab)
        unadapted = unadapted if config.vtln.enabled else first_pass
        metrics.update({k.replace("asr.", "asr.no_speaker_transform.", 1): v for k, v in before.items()})
        voices = sorted({r["voice"] for r in test} | {r["voice"] for r in devel})
        fitted = fit_voice_transforms(checkpoint, corpus.root, all_devel, voices, warps,
                                      before["asr.acoustic_scale"], graph.tlg, config, out_dir / "speaker")
        for voice, info in fitted.items():
            for key in ("utterances", "loss_before", "loss_after"):
                if key in info:
                    metrics[f"asr.speaker_transform_{key}.{_voice_key(voice)}"] = float(info[key])
        adapted = {voice: info["checkpoint"] for voice, info in fitted.items() if info["checkpoint"]}
        devel_scores, test_scores = score_devel_and_test(
            lambda rows: score_rows_by_voice(adapted, checkpoint, corpus.root, rows, warps), devel, test)
    scores_record.forget(out_dir)
    for split, table in (("devel", devel_scores), ("test", test_scores)):
        scores_io.write_parquet(table, out_dir / f"{split}.parquet")
        scores_io.write_kaldi(table, out_dir / f"{split}.ark")
    scored, tuning, hyps = _scored_metrics(graph.tlg, devel, test, devel_scores, test_scores, config, words,
                                           prons, train_vocab)
    scores_record.write(out_dir, config, checkpoint, scored["asr.acoustic_scale"], speech_cfg, graph)
    metrics.update(scored)
    if config.vtln.enabled or config.speaker_transform.enabled:
        metrics.update(adaptation_gain(test, unadapted, hyps))
    metrics["asr.test_utterances"] = float(len(test))
    metrics["asr.score_failed"] = float(len(test) - test_scores.num_rows)
    metrics["asr.decode_failed"] = float(sum(r["utt_id"] not in hyps for r in test) - metrics["asr.score_failed"])
    metrics["asr.utterances_with_unseen_words"] = float(sum(_has_unseen_word(r, train_vocab) for r in test))
    if config.real_recordings:  # never adapted (no earlier utterances of their speakers): the unadapted scale
        unadapted = [f"asr.{prefix}acoustic_scale" for prefix in ("no_vtln.", "no_speaker_transform.", "")]
        real_scale = metrics[next(key for key in unadapted if key in metrics)]
        metrics.update(_real_wer(checkpoint, graph.tlg, real_scale, config, words))
    if config.update_card:
        model_card.update(checkpoint, metrics)
    if run is not None:
        run.log_metrics(metrics)
        for i, s in enumerate(sorted(tuning)):
            run.log_metrics({"asr.devel_wer_by_scale": tuning[s]}, step=i)
            if config.vtln.enabled:
                run.log_metrics({"asr.no_vtln.devel_wer_by_scale": plain_tuning[s]}, step=i)
            if config.speaker_transform.enabled:
                run.log_metrics({"asr.no_speaker_transform.devel_wer_by_scale": before_tuning[s]}, step=i)
        run.set_tags({"asr_decoder": "kaldi", "scores_dir": str(out_dir),
                      "vtln": str(config.vtln.enabled).lower(),
                      "speaker_transform": str(config.speaker_transform.enabled).lower()})
    return metrics


def adaptation_gain(test: list[dict], unadapted: dict[str, list[str]], adapted: dict[str, list[str]]) -> dict:
    """The test WER without adaptation less the WER with it (`asr.adaptation_gain`: > 0, adaptation helps)
    and its paired bootstrap 95% interval over the test utterances (`_low`, `_high`)."""
    refs = [r["normalized_text"].split() for r in test]
    (before, words), (after, _) = (utterance_errors(refs, [hyps.get(r["utt_id"], []) for r in test])
                                   for hyps in (unadapted, adapted))
    gain = paired_wer_bootstrap(before, after, words)
    return {"asr.adaptation_gain": gain.difference, "asr.adaptation_gain_low": gain.low,
            "asr.adaptation_gain_high": gain.high}


def _real_wer(checkpoint: Path, tlg: Path, scale: float, config: EvalAmConfig, words: SymbolTable) -> dict:
    recordings = real_recordings()
    if not recordings:
        return {}
    ckpt = load_checkpoint(checkpoint, PHONES)
    mats = score_features(ckpt, [fbank(load_audio(r.path)) for r in recordings])
    table = scores_table([(r.utt_id, m) for r, m in zip(recordings, mats)])
    return recordings_metrics(recordings, decode_scores(tlg, table, scale, config, words), set(words.symbols))


def recordings_metrics(recordings: list, hyps: dict[str, list[str]], vocab: set[str]) -> dict[str, float]:
    """WER and OOV rate of the real recordings; a recording the decoder found no path for (absent from
    `hyps`) counts as all deletions, as a test utterance does (`_wer_of`), and is counted."""
    refs = [r.text.split() for r in recordings]
    oov = sum(w not in vocab for ref in refs for w in ref) / max(1, sum(map(len, refs)))
    return {"asr.real_recordings_wer": wer(refs, [hyps.get(r.utt_id, []) for r in recordings]),
            "asr.real_recordings_oov_rate": oov, "asr.real_recordings": float(len(recordings)),
            "asr.real_recordings_decode_failed": float(sum(r.utt_id not in hyps for r in recordings))}


def execute(config: Any, path: Path, run: TrackedRun | None, opts: RunOptions) -> list[str]:
    """The job's runner (see `experiments.registry`): run it, return the summary lines."""
    m = run_eval_am(config, path, run, opts.ray_address)
    lines = [f"acoustic model {config.checkpoint}: test WER {m['asr.wer']:.3f} (acoustic scale "
             f"{m['asr.acoustic_scale']}, devel WER {m['asr.devel_wer']:.3f}), greedy PER {m['asr.per_greedy']:.3f}"]
    for prefix, without in (("asr.no_speaker_transform", "speaker transform"), ("asr.no_vtln", "VTLN")):
        if f"{prefix}.wer" in m:
            lines.append(f"  without {without}: test WER {m[f'{prefix}.wer']:.3f}, "
                         f"greedy PER {m[f'{prefix}.per_greedy']:.3f}")
    shown = ("asr.wer.", "asr.no_vtln.wer.", "asr.no_speaker_transform.wer.", "asr.vtln_warp.")
    lines += [f"  {k}: {v:.4g}" for k, v in sorted(m.items())
              if k.startswith(shown) or "real" in k or "unseen" in k or "in_lm_text" in k]
    return lines
