"""Partial and final ASR hypotheses of simulated requests: each user speaks with one held-out voice, each
request at one of the configured speaking rates (drawn per request, so a routine said many times comes in
several renditions); every distinct (voice, rate, sentence) is synthesized once, force-aligned (word times,
end of speech), scored by the acoustic model and decoded by our streaming decoder with partials every
`partial_every_ms`, which must be a whole number of the acoustic model's 40 ms output frames.

Transcripts are cached per utterance in `.specbench/predictive/asr-<key>/transcripts.parquet`, keyed by what
they depend on (mode, acoustic model, graph, decoder settings), so a rerun or a second simulation (the
sensitivity sweep) only transcribes the utterances it has not seen. In `oracle-asr` mode (ablations only) the
partials are the reference words whose aligned end lies at or before the partial's time, and the final
hypothesis is the reference.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import zlib
from functools import partial
from pathlib import Path

import pyarrow as pa

from specbench.acoustic.alignment import align_shard
from specbench.acoustic.inference import OUTPUT_FRAME_SHIFT_MS
from specbench.config import AsrSection, GraphConfig
from specbench.data.speech_corpus import synthesize_shard
from specbench.data.voices import get_voice
from specbench.decoder.stage import DecoderStage
from specbench.errors import ConfigError, DataError
from specbench.experiments.eval_am import score_rows
from specbench.experiments.graph_recipe import GraphArtifacts, build_graph
from specbench.experiments.job_refs import referenced_job
from specbench.paths import from_root, work_dir
from specbench.runtime import run_ray, run_tasks
from specbench.stage import STATUS_COLUMN, STATUS_OK
from specbench.wfst.symbols import SymbolTable

PARTIAL = pa.struct([("time_ms", pa.float32()), ("words", pa.list_(pa.string()))])
TRANSCRIPT_SCHEMA = pa.schema([
    ("utt_id", pa.string()), ("status", pa.string()), ("voice", pa.string()), ("rate", pa.float32()),
    ("ref_words", pa.list_(pa.string())), ("final_words", pa.list_(pa.string())),
    ("partials", pa.list_(PARTIAL)), ("end_of_speech_ms", pa.float32()), ("end_source", pa.string()),
    ("duration_ms", pa.float32()),
])
SPEECH_DIR = "usage"


def _stable_index(text: str, n: int) -> int:
    return zlib.crc32(text.encode()) % n


def user_voice(user_id: str, asr: AsrSection) -> str:
    """The held-out voice a simulated user speaks with (stable for a user id)."""
    return asr.voices[_stable_index(user_id, len(asr.voices))]


def request_rate(request_id: str, asr: AsrSection) -> float:
    """The speaking rate of one request (stable for a request id)."""
    return asr.rates[_stable_index(request_id + "/rate", len(asr.rates))]


def utterance_id(voice: str, rate: float, text: str) -> str:
    slug = get_voice(voice).slug
    digest = hashlib.sha1(text.encode()).hexdigest()[:12]
    return f"usage-{digest}-{slug}-r{round(rate * 100):03d}"


def plan_requests(requests: pa.Table, asr: AsrSection) -> tuple[list[str], list[dict]]:
    """(utt_id per request in order, the distinct utterances to synthesize as speech-corpus plan rows)."""
    ids, plan = [], {}
    for r in requests.select(["request_id", "user_id", "normalized_text", "sentence", "slurp_id"]).to_pylist():
        voice, rate = user_voice(r["user_id"], asr), request_rate(r["request_id"], asr)
        utt = utterance_id(voice, rate, r["normalized_text"])
        ids.append(utt)
        if utt not in plan:
            slug = get_voice(voice).slug
            plan[utt] = {"utt_id": utt, "slurp_id": r["slurp_id"], "text": r["sentence"],
                         "normalized_text": r["normalized_text"], "voice": voice, "rate": float(rate),
                         "snr_db": math.inf, "noise_seed": zlib.crc32(utt.encode()), "split": SPEECH_DIR,
                         "audio_path": f"{SPEECH_DIR}/{slug}/{utt}.wav"}
    return ids, list(plan.values())


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cache_dir(asr: AsrSection, checkpoint: Path, graph: GraphArtifacts) -> Path:
    """`.specbench/predictive/asr-<key>`: the key hashes the mode, model, graph and decoder settings."""
    key = {"mode": asr.mode, "am": _file_digest(checkpoint), "graph": graph.directory.name,
           "partial_every_ms": asr.partial_every_ms, "beam": asr.beam, "max_active": asr.max_active,
           "acoustic_scale": asr.acoustic_scale, "version": 1}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return work_dir() / "predictive" / f"asr-{digest}"


def _read_cache(path: Path) -> dict[str, dict]:
    if not path.is_file():
        return {}
    import pyarrow.parquet as pq

    return {r["utt_id"]: r for r in pq.read_table(path).to_pylist()}


def _write_cache(rows: list[dict], path: Path) -> None:
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")  # one writer's temp file; the rename is atomic
    pq.write_table(pa.Table.from_pylist(rows, schema=TRANSCRIPT_SCHEMA), tmp)
    tmp.replace(path)


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


def _spoken(plan: list[dict], asr: AsrSection, checkpoint: Path, graph: GraphArtifacts) -> list[dict]:
    """Synthesize (skipping WAVs that exist) and force-align the planned utterances."""
    root = work_dir() / "speech"
    shards = [plan[i:i + asr.shard_size] for i in range(0, len(plan), asr.shard_size)]
    rows = [r for s in run_tasks(partial(synthesize_shard, corpus_root=root), shards,
                                 progress=f"synthesizing {len(plan)} request utterances") for r in s]
    shards = [rows[i:i + asr.shard_size] for i in range(0, len(rows), asr.shard_size)]
    fn = partial(align_shard, corpus_root=str(root), checkpoint=str(checkpoint), graph_dir=str(graph.directory))
    return [r for s in run_tasks(fn, shards, progress=f"aligning {len(rows)} utterances") for r in s]


def _decode(spoken: list[dict], asr: AsrSection, checkpoint: Path, graph: GraphArtifacts) -> dict[str, dict]:
    """utt_id -> decoder output row (final words and partials as word ids)."""
    ok = [r for r in spoken if r[STATUS_COLUMN] == STATUS_OK]
    if not ok:
        return {}
    scores = score_rows(checkpoint, work_dir() / "speech", ok)
    stage = DecoderStage(graph.tlg, backend=asr.backend, beam=asr.beam, max_active=asr.max_active,
                         acoustic_scale=asr.acoustic_scale, partial_every_ms=asr.partial_every_ms)
    stage.share_graph()
    out = run_ray(stage, scores, batch_size=32)
    return {r["id"]: r for r in out.to_pylist()}


def _transcript(row: dict, decoded: dict | None, asr: AsrSection, words: SymbolTable) -> dict:
    end_ms, source = _end_of_speech(row)
    ref = row["normalized_text"].split()
    out = {"utt_id": row["utt_id"], "voice": row["voice"], "rate": row["rate"], "ref_words": ref,
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
    parts = [{"time_ms": p["time_ms"], "words": [spell[w] for w in p["word_ids"]]} for p in decoded["partials"]]
    return {**out, "status": STATUS_OK, "final_words": [spell[w] for w in decoded["word_ids"]], "partials": parts}


def check_partial_interval(asr: AsrSection, job_path: Path) -> None:
    """`ConfigError` unless partials fall on whole output frames of the acoustic model (no silent rounding)."""
    frames = asr.partial_every_ms / OUTPUT_FRAME_SHIFT_MS
    if abs(frames - round(frames)) > 1e-6 or round(frames) < 1:
        nearest = max(1, round(frames)) * OUTPUT_FRAME_SHIFT_MS
        raise ConfigError(f"{job_path}: asr.partial_every_ms = {asr.partial_every_ms:g} is not a whole number of "
                          f"the acoustic model's {OUTPUT_FRAME_SHIFT_MS:g} ms output frames. Fix: use a multiple "
                          f"of {OUTPUT_FRAME_SHIFT_MS:g}, e.g. {nearest:g}.")


def transcribe_requests(requests: pa.Table, asr: AsrSection, job_path: Path) -> pa.Table:
    """One transcript row per request, in request order, with `request_id` added (see TRANSCRIPT_SCHEMA).
    Only utterances missing from the cache are synthesized, aligned, scored and decoded."""
    check_partial_interval(asr, job_path)
    checkpoint = from_root(asr.checkpoint)
    if not checkpoint.is_file():
        raise DataError(f"{job_path}: asr.checkpoint {checkpoint} does not exist. Fix: train it with "
                        "`specbench train am jobs/am.toml`, or point asr.checkpoint at an acoustic model")
    graph = build_graph(referenced_job(job_path, "asr.graph_job", asr.graph_job, GraphConfig))
    ids, plan = plan_requests(requests, asr)
    path = cache_dir(asr, checkpoint, graph) / "transcripts.parquet"
    cached = _read_cache(path)
    todo = [p for p in plan if cached.get(p["utt_id"], {}).get("status") != STATUS_OK]  # failures retried
    if todo:
        spoken = _spoken(todo, asr, checkpoint, graph)
        decoded = _decode(spoken, asr, checkpoint, graph) if asr.mode == "decoder" else {}
        words = SymbolTable.read(graph.words)
        for row in spoken:
            cached[row["utt_id"]] = _transcript(row, decoded.get(row["utt_id"]), asr, words)
        _write_cache(list(cached.values()), path)
    table = pa.Table.from_pylist([cached[u] for u in ids], schema=TRANSCRIPT_SCHEMA)
    return table.append_column("request_id", requests.column("request_id"))
