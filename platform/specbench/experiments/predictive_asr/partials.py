"""Partial and final ASR hypotheses of simulated requests: each user speaks with one held-out voice, and
every request is rendered anew (`request_rendition`): a speaking rate drawn uniformly from `asr.rate_range`,
white noise at an SNR drawn uniformly from `asr.snr_db_range` with its own noise seed, and a pitch shift drawn
uniformly from [-asr.pitch_cents, +asr.pitch_cents], all from a seed of the request (split, usage seed,
user, slot), so no two requests are the same audio and a routine said fifty times is heard fifty ways. A
rendition is synthesized once per (text, voice, rendering draw): a sweep that keeps a request (same slot, same
text) reuses its audio and transcript. Each is scored by the acoustic model (with the voice's VTLN warp and
speaker transform, the ASR headline's adaptation, when `asr.adaptation_job` names its eval job:
`adaptation.py`), force-aligned (word times, end of speech) and decoded by our streaming decoder with
partials every `partial_every_ms`, which must be a whole number of the acoustic model's 40 ms output frames.
With `asr.partial_posteriors`, each partial also carries its words' lattice posteriors, from the lattice of
the audio so far built in the same decoding pass (`decoder.stage`).

Transcripts are cached per utterance in `.specbench/predictive/asr-<key>/transcripts.parquet`, keyed by what
they depend on (mode, acoustic model, graph, decoder settings, adaptation, and the code and audio versions
that make them: `code_key.py`), so a rerun or a second
simulation (the habit sweep) only transcribes the utterances it has not seen. `transcribe_ahead` renders
what several simulated logs need in one pass (the job calls it once before the habit sweep and once before
the headline and the knobs), so the stages start once per pass rather than once per population. In `oracle-asr` mode (ablations only) the
partials are the reference words whose aligned end lies at or before the partial's time, and the final
hypothesis is the reference.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import zlib
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa

from specbench.acoustic.alignment import align_scored_shard
from specbench.config import AsrSection
from specbench.data.speech_corpus import synthesize_shard
from specbench.data.voices import get_voice
from specbench.decoder.stage import DecoderStage
from specbench.errors import DataError, plain_reason
from specbench.experiments.eval_am import score_rows, score_rows_by_voice
from specbench.experiments.graph_recipe import GraphArtifacts, build_graph
from specbench.experiments.job_refs import ctc_graph_job
from specbench.experiments.predictive_asr.adaptation import VoiceAdaptation, adapt_voices
from specbench.experiments.predictive_asr.checks import check_partial_interval
from specbench.experiments.predictive_asr.code_key import code_and_audio_key
from specbench.experiments.stage_clock import clock
from specbench.paths import from_root, work_dir
from specbench.runtime import require_resources, run_ray, run_tasks
from specbench.stage import STATUS_COLUMN, STATUS_OK
from specbench.wfst.symbols import SymbolTable

# posteriors: each word's lattice posterior (`asr.partial_posteriors`), null when not computed or undefined
PARTIAL = pa.struct([("time_ms", pa.float32()), ("words", pa.list_(pa.string())),
                     ("posteriors", pa.list_(pa.float32()))])
TRANSCRIPT_SCHEMA = pa.schema([
    ("utt_id", pa.string()), ("status", pa.string()), ("voice", pa.string()), ("rate", pa.float32()),
    ("snr_db", pa.float32()), ("pitch_cents", pa.float32()), ("audio_sha256", pa.string()),
    ("ref_words", pa.list_(pa.string())), ("final_words", pa.list_(pa.string())),
    ("partials", pa.list_(PARTIAL)), ("end_of_speech_ms", pa.float32()), ("end_source", pa.string()),
    ("duration_ms", pa.float32()),
])
SPEECH_DIR = "usage"
DECODER_GPU_SHARE = 0.25  # of a GPU per decoder actor with asr.backend = "gpu": four share one GPU


def _stable_index(text: str, n: int) -> int:
    return zlib.crc32(text.encode()) % n


def user_voice(user_id: str, asr: AsrSection) -> str:
    """The held-out voice a simulated user speaks with (stable for a user id)."""
    return asr.voices[_stable_index(user_id, len(asr.voices))]


@dataclass(frozen=True)
class Rendition:
    """How one request is spoken: speed multiplier, SNR of the added white noise, pitch shift, noise seed."""

    rate: float
    snr_db: float
    pitch_cents: float
    noise_seed: int


def request_rendition(request_key: str, asr: AsrSection) -> Rendition:
    """The rendition of one request, drawn from a generator seeded by `request_key` (stable for a key).
    Values are rounded (rate to 1e-4, SNR to 0.01 dB, pitch to 0.01 cents) and taken as float32, the type
    the plan and transcript tables store them in, so a value read back from a table is the same number."""
    seed = int.from_bytes(hashlib.sha256(request_key.encode()).digest()[:8], "little")
    u = np.random.default_rng(seed).random(3)
    (rate_lo, rate_hi), (snr_lo, snr_hi) = asr.rate_range, asr.snr_db_range

    def stored(value: float, digits: int) -> float:
        return float(np.float32(round(float(value), digits)))

    return Rendition(rate=stored(rate_lo + u[0] * (rate_hi - rate_lo), 4),
                     snr_db=stored(snr_lo + u[1] * (snr_hi - snr_lo), 2),
                     pitch_cents=stored((2.0 * u[2] - 1.0) * asr.pitch_cents, 2), noise_seed=seed >> 1)


def utterance_id(voice: str, text: str, rendition: Rendition) -> str:
    """``usage-<text hash>-<voice>-<rendition hash>``: one id per (text, voice, rendering draw)."""
    slug = get_voice(voice).slug
    drawn = hashlib.sha1(json.dumps(dataclasses.astuple(rendition)).encode()).hexdigest()[:12]
    return f"usage-{hashlib.sha1(text.encode()).hexdigest()[:12]}-{slug}-{drawn}"


def plan_requests(requests: pa.Table, asr: AsrSection, rendering_key: str) -> tuple[list[str], list[dict]]:
    """(utt_id per request in order, the distinct utterances to synthesize as speech-corpus plan rows).
    `rendering_key` (e.g. ``"test/0"``: split and usage seed), the user and the request's `slot` (stable
    when a sweep moves requests in time) seed each rendition."""
    ids, plan = [], {}
    for r in requests.select(["user_id", "slot", "normalized_text", "sentence", "slurp_id"]).to_pylist():
        voice = user_voice(r["user_id"], asr)
        rendition = request_rendition(f"{rendering_key}/{r['user_id']}/{r['slot']}", asr)
        utt = utterance_id(voice, r["normalized_text"], rendition)
        ids.append(utt)
        if utt not in plan:
            slug = get_voice(voice).slug
            plan[utt] = {"utt_id": utt, "slurp_id": r["slurp_id"], "text": r["sentence"],
                         "normalized_text": r["normalized_text"], "voice": voice, "rate": rendition.rate,
                         "snr_db": rendition.snr_db, "pitch_cents": rendition.pitch_cents,
                         "noise_seed": rendition.noise_seed, "split": SPEECH_DIR,
                         "audio_path": f"{SPEECH_DIR}/{slug}/{utt}.wav"}
    return ids, list(plan.values())


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cache_dir(asr: AsrSection, checkpoint: Path, graph: GraphArtifacts,
              adaptation: VoiceAdaptation | None = None) -> Path:
    """`.specbench/predictive/asr-<key>`: the key hashes the mode, model, graph (its files' contents, not its
    directory's name), decoder settings, the speaker adaptation (its own cache key; none: unadapted), and
    the code and audio versions that decide a transcript (`code_key.code_and_audio_key`)."""
    key = {"mode": asr.mode, "am": _file_digest(checkpoint), "graph": graph.content_digest(),
           "partial_every_ms": asr.partial_every_ms, "beam": asr.beam, "max_active": asr.max_active,
           "acoustic_scale": asr.acoustic_scale, "version": 3, **code_and_audio_key(asr.voices, asr.backend)}
    if adaptation is not None:
        key["adaptation"] = adaptation.key
    if asr.partial_posteriors:  # a cache of its own; the caches without posteriors keep their keys
        key["partial_posteriors"] = {"lattice_beam": asr.lattice_beam, "posterior_scale": asr.posterior_scale}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return work_dir() / "predictive" / f"asr-{digest}"


_READ: dict[Path, tuple[tuple[int, int], dict[str, dict]]] = {}  # path -> (mtime_ns, size), its rows by utt_id


def _stamp(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_mtime_ns, stat.st_size


def _read_cache(path: Path) -> dict[str, dict]:
    """The transcript cache's rows by utterance id (a copy). The rows are kept in memory between calls
    while the file is unchanged (same modification time and size), so the thirty populations of a job read
    the file once rather than thirty times; another process's write changes the stamp and is read anew. A
    file that cannot be read (damaged, truncated) is a `DataError` naming it and the fix."""
    if not path.is_file():
        return {}
    import pyarrow.parquet as pq

    stamp = _stamp(path)
    kept = _READ.get(path)
    if kept is None or kept[0] != stamp:
        try:
            kept = (stamp, {r["utt_id"]: r for r in pq.read_table(path).to_pylist()})
        except (OSError, KeyError, pa.ArrowException) as error:  # damaged, truncated, or not a transcript table
            raise DataError(f"transcript cache {path} cannot be read ({plain_reason(error)}). Fix: "
                            f"delete it (or its folder {path.parent}); the transcripts are rendered again on "
                            "the next run") from error
        _READ[path] = kept
    return dict(kept[1])


def _write_cache(rows: list[dict], path: Path) -> None:
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")  # one writer's temp file; the rename is atomic
    table = pa.Table.from_pylist(rows, schema=TRANSCRIPT_SCHEMA)
    pq.write_table(table, tmp)
    tmp.replace(path)
    _READ[path] = (_stamp(path), {r["utt_id"]: r for r in table.to_pylist()})  # as a read would give them


def _end_of_speech(row: dict) -> tuple[float | None, str]:
    """End of speech in ms: the aligned end of the last word, else the synthesizer's energy end."""
    times = row.get("word_times")
    if times:
        return 1000.0 * float(times[-1]["end_s"]), "alignment"
    if row.get("end_of_speech_s") is not None:
        return 1000.0 * float(row["end_of_speech_s"]), "energy"
    return None, "none"


def oracle_partials(word_times: list[dict], duration_ms: float, every_ms: float) -> list[dict]:
    """Reference partials: at t = every, 2*every, ... up to the end of the audio, the words whose aligned
    end is at or before t (the same rule as the decoder's partials: no word still being spoken)."""
    out, k = [], 1
    while k * every_ms <= duration_ms + 1e-6:
        t = k * every_ms
        out.append({"time_ms": t, "words": [w["word"] for w in word_times if 1000.0 * w["end_s"] <= t + 1e-6]})
        k += 1
    return out


def _spoken(plan: list[dict], asr: AsrSection, checkpoint: Path, graph: GraphArtifacts,
            timings: dict[str, float], adaptation: VoiceAdaptation | None) -> tuple[list[dict], pa.Table]:
    """Synthesize (skipping WAVs that exist), score (with each voice's adaptation, when given) and
    force-align the planned utterances: the rows (with word times) and the scores of the ok ones, computed
    once for the alignment and the decoder."""
    root = work_dir() / "speech"
    with clock(timings, "synthesize"):
        shards = [plan[i:i + asr.shard_size] for i in range(0, len(plan), asr.shard_size)]
        rows = [r for s in run_tasks(partial(synthesize_shard, corpus_root=root), shards,
                                     progress=f"synthesizing {len(plan)} request utterances") for r in s]
    ok = [r for r in rows if r[STATUS_COLUMN] == STATUS_OK]
    with clock(timings, "score"):
        if not ok:
            scores = None
        elif adaptation is None:
            scores = score_rows(checkpoint, root, ok)
        else:
            scores = score_rows_by_voice(adaptation.checkpoints, checkpoint, root, ok, adaptation.warps)
    with clock(timings, "align"):
        loglikes = {} if scores is None else _loglikes_by_utterance(scores)
        items = [(rows[i:i + asr.shard_size], {r["utt_id"]: loglikes[r["utt_id"]] for r in rows[i:i + asr.shard_size]
                                               if r["utt_id"] in loglikes})
                 for i in range(0, len(rows), asr.shard_size)]
        fn = partial(_align_item, graph_dir=str(graph.directory))
        aligned = [r for s in run_tasks(fn, items, progress=f"aligning {len(rows)} utterances") for r in s]
    return aligned, scores


def _loglikes_by_utterance(scores: pa.Table) -> dict[str, np.ndarray]:
    """utt_id -> `(T, P)` float32 scores, views into the table's flat Arrow buffer (no Python floats)."""
    column = scores.column("loglikes").combine_chunks()
    values = column.values.to_numpy(zero_copy_only=False)
    offsets = column.offsets.to_numpy()
    out = {}
    for i, (utt, frames, classes) in enumerate(zip(*(scores.column(c).to_pylist()
                                                     for c in ("utt_id", "num_frames", "num_classes")))):
        out[utt] = values[offsets[i]:offsets[i + 1]].reshape(frames, classes)
    return out


def _align_item(item: tuple[list[dict], dict[str, np.ndarray]], graph_dir: str) -> list[dict]:
    rows, loglikes = item
    return align_scored_shard(rows, loglikes, graph_dir)


def _decode(scores: pa.Table | None, asr: AsrSection, graph: GraphArtifacts,
            timings: dict[str, float]) -> dict[str, dict]:
    """utt_id -> decoder output row (final words and partials as word ids)."""
    if scores is None or scores.num_rows == 0:
        return {}
    with clock(timings, "decode"):
        posteriors = asr.partial_posteriors
        stage = DecoderStage(graph.tlg, backend=asr.backend, beam=asr.beam, max_active=asr.max_active,
                             gpu_fraction=DECODER_GPU_SHARE,
                             acoustic_scale=asr.acoustic_scale, partial_every_ms=asr.partial_every_ms,
                             lattice_beam=asr.lattice_beam if posteriors else None,
                             partial_posterior_scale=asr.posterior_scale if posteriors else None)
        stage.share_graph()
        out = run_ray(stage, scores, batch_size=32)
        return {r["id"]: r for r in out.to_pylist()}


def require_decoder_resources(asr: AsrSection, job_path: Path) -> None:
    """Refuse `asr.backend = "gpu"` on a cluster without a GPU before anything is synthesized (the decoder
    stage would refuse it only after synthesis and scoring). Call it once connected."""
    if asr.mode == "decoder" and asr.backend == "gpu":
        require_resources(1.0, DECODER_GPU_SHARE, f'{job_path}: asr.backend = "gpu" (set it to "cpu" to decode '
                          "on the CPUs instead), whose decoder stage")


def _audio_digest(row: dict) -> str | None:
    path = work_dir() / "speech" / row["audio_path"]
    return _file_digest(path) if row[STATUS_COLUMN] == STATUS_OK and path.is_file() else None


def _transcript(row: dict, decoded: dict | None, asr: AsrSection, words: SymbolTable) -> dict:
    end_ms, source = _end_of_speech(row)
    ref = row["normalized_text"].split()
    out = {"utt_id": row["utt_id"], "voice": row["voice"], "rate": row["rate"], "snr_db": row["snr_db"],
           "pitch_cents": row.get("pitch_cents"), "audio_sha256": _audio_digest(row), "ref_words": ref,
           "end_of_speech_ms": end_ms, "end_source": source, "partials": [], "final_words": [],
           "duration_ms": None if row.get("duration_s") is None else 1000.0 * float(row["duration_s"])}
    if row[STATUS_COLUMN] != STATUS_OK:
        return {**out, "status": f"synthesis: {row[STATUS_COLUMN]}"}
    if end_ms is None:
        return {**out, "status": "no end of speech: alignment and energy both failed"}
    if asr.mode == "oracle-asr":
        if not row.get("word_times"):
            return {**out, "status": f"alignment: {row.get('align_status')}"}
        parts = oracle_partials(row["word_times"], out["duration_ms"], asr.partial_every_ms)
        return {**out, "status": STATUS_OK, "final_words": ref, "partials": parts}
    if decoded is None:
        return {**out, "status": "scoring failed"}
    if decoded["status"] != STATUS_OK:
        return {**out, "status": f"decoding: {decoded['status']}"}
    spell = words.symbols
    parts = [{"time_ms": p["time_ms"], "words": [spell[w] for w in p["word_ids"]], "posteriors": p.get("posteriors")}
             for p in decoded["partials"]]
    return {**out, "status": STATUS_OK, "final_words": [spell[w] for w in decoded["word_ids"]], "partials": parts}


RENDER_CHUNK = 4000  # utterances rendered between two writes of the transcript cache


@dataclass(frozen=True)
class _Setup:
    """What transcribing with one `[asr]` section needs: the model, graph, adaptation and the cache file."""

    checkpoint: Path
    graph: GraphArtifacts
    adaptation: VoiceAdaptation | None
    cache: Path


def _setup(asr: AsrSection, job_path: Path) -> _Setup:
    check_partial_interval(asr, job_path)  # made by the preflight too (`checks.asr_checks`), as is the adaptation's
    checkpoint = from_root(asr.checkpoint)
    if not checkpoint.is_file():
        raise DataError(f"{job_path}: asr.checkpoint {checkpoint} does not exist. Fix: train it with "
                        "`specbench train am jobs/am.toml`, or point asr.checkpoint at an acoustic model")
    graph = build_graph(ctc_graph_job(job_path, "asr.graph_job", asr.graph_job))
    adaptation = adapt_voices(asr, job_path, checkpoint, graph) if asr.mode == "decoder" else None
    return _Setup(checkpoint, graph, adaptation, cache_dir(asr, checkpoint, graph, adaptation) / "transcripts.parquet")


def _render(todo: list[dict], asr: AsrSection, setup: _Setup, cached: dict[str, dict],
            timings: dict[str, float]) -> None:
    """Synthesize, score, align and decode `todo` into `cached`, `RENDER_CHUNK` utterances at a time, writing
    the cache after each chunk (an interrupted run keeps what it rendered)."""
    words = SymbolTable.read(setup.graph.words)
    for i in range(0, len(todo), RENDER_CHUNK):
        chunk = todo[i:i + RENDER_CHUNK]
        timings["rendered"] = timings.get("rendered", 0.0) + len(chunk)
        spoken, scores = _spoken(chunk, asr, setup.checkpoint, setup.graph, timings, setup.adaptation)
        decoded = _decode(scores, asr, setup.graph, timings) if asr.mode == "decoder" else {}
        for row in spoken:
            cached[row["utt_id"]] = _transcript(row, decoded.get(row["utt_id"]), asr, words)
        with clock(timings, "cache"):
            _write_cache(list(cached.values()), setup.cache)


def _missing(plan: list[dict], cached: dict[str, dict]) -> list[dict]:
    return [p for p in plan if cached.get(p["utt_id"], {}).get("status") != STATUS_OK]  # failures retried


def transcribe_ahead(logs: list[tuple[pa.Table, AsrSection, str]], job_path: Path,
                     timings: dict[str, float] | None = None) -> int:
    """Render, in one pass per transcript cache, every utterance that several simulated logs need and the
    cache lacks: (requests, `[asr]` section, rendering key) per log, as `transcribe_requests` takes them.
    One pass runs each stage once over all of them instead of once per log (a sweep's populations share
    most of their fixed cost: actor start-up, model and graph loading, cache writes). Returns how many
    utterances it rendered; `transcribe_requests` then finds them all cached."""
    timings = {} if timings is None else timings
    groups: dict[Path, tuple[AsrSection, _Setup, dict[str, dict]]] = {}
    setups: dict[tuple, _Setup] = {}  # the rendering ranges do not change the setup: once per the rest
    for requests, asr, key in logs:
        same = dataclasses.astuple(dataclasses.replace(asr, rate_range=(1.0, 1.0), snr_db_range=(0.0, 0.0),
                                                       pitch_cents=0.0))
        setup = setups.get(same) or setups.setdefault(same, _setup(asr, job_path))
        wanted = groups.setdefault(setup.cache, (asr, setup, {}))[2]
        for row in plan_requests(requests, asr, key)[1]:
            wanted.setdefault(row["utt_id"], row)
    rendered = 0
    for asr, setup, plan in groups.values():
        with clock(timings, "cache"):
            cached = _read_cache(setup.cache)
        todo = _missing(list(plan.values()), cached)
        if todo:
            _render(todo, asr, setup, cached, timings)
            rendered += len(todo)
    return rendered


def transcribe_requests(requests: pa.Table, asr: AsrSection, job_path: Path, rendering_key: str,
                        timings: dict[str, float] | None = None) -> pa.Table:
    """One transcript row per request, in request order, with `request_id` added (see TRANSCRIPT_SCHEMA).
    Only utterances missing from the cache are synthesized, aligned, scored and decoded; `rendering_key`
    seeds the renditions (`plan_requests`). `timings` (when given) gains each stage's seconds and the
    number of utterances rendered (`rendered`)."""
    timings = {} if timings is None else timings
    setup = _setup(asr, job_path)
    ids, plan = plan_requests(requests, asr, rendering_key)
    with clock(timings, "cache"):
        cached = _read_cache(setup.cache)
    todo = _missing(plan, cached)
    if todo:
        _render(todo, asr, setup, cached, timings)
    table = pa.Table.from_pylist([cached[u] for u in ids], schema=TRANSCRIPT_SCHEMA)
    return table.append_column("request_id", requests.column("request_id"))


def adaptation_metrics(asr: AsrSection, job_path: Path) -> dict[str, float]:
    """`prefetch.asr.adapted` (1 or 0) and, when adapted, each voice's warp and transform figures."""
    if asr.mode != "decoder" or asr.adaptation_job is None:
        return {"prefetch.asr.adapted": 0.0}
    return {"prefetch.asr.adapted": 1.0, **_setup(asr, job_path).adaptation.metrics()}


def rendering_summary(requests: pa.Table, transcripts: pa.Table) -> dict[str, float]:
    """What per-request rendering did to the evaluated requests of a simulated log (rows in time order
    within each user, `transcripts` aligned with `requests`):

    - `asr.audio_identical_share`: share whose audio bytes equal an earlier request's of the same user
      (0 when every request is rendered anew);
    - `asr.repeat_final_differs_share`: of the requests that repeat a text the user said before (both
      transcribed), the share whose final hypothesis differs from the user's previous final hypothesis of
      that text: recognition varies from one rendition to the next, as it does for real users.
    """
    import polars as pl

    frame = pl.DataFrame({
        "user_id": requests.column("user_id").to_pylist(),
        "text": requests.column("normalized_text").to_pylist(),
        "evaluated": requests.column("evaluated").to_pylist(),
        "audio": transcripts.column("audio_sha256").to_pylist(),
        "ok": [s == STATUS_OK for s in transcripts.column("status").to_pylist()],
        "final": [" ".join(w) for w in transcripts.column("final_words").to_pylist()],
    }, schema_overrides={"audio": pl.String}).with_row_index("order")
    seen_audio = pl.int_range(pl.len()).over(["user_id", "audio"]) > 0
    previous = pl.col("final").shift(1).over(["user_id", "text"], order_by="order")
    previous_ok = pl.col("ok").shift(1).over(["user_id", "text"], order_by="order")
    frame = frame.with_columns(identical=seen_audio & pl.col("audio").is_not_null(), previous=previous,
                               previous_ok=previous_ok)
    evaluated = frame.filter(pl.col("evaluated"))
    repeats = evaluated.filter(pl.col("ok") & pl.col("previous_ok").fill_null(False))
    return {
        "asr.audio_identical_share": float(evaluated["identical"].mean()) if evaluated.height else float("nan"),
        "asr.repeat_final_differs_share": float((repeats["final"] != repeats["previous"]).mean())
        if repeats.height else float("nan"),
    }
