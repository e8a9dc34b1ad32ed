"""The `speech` job: plan a synthesized SLURP corpus, synthesize it as Ray tasks over shards (a rerun skips
the WAVs that exist), force-align it when an acoustic model is available, and write the Parquet manifest.

The corpus lives in `.specbench/speech/<name>/` (`manifest.parquet`, `<split>/<voice>/<utt>.wav`). The
manifest is written under a temporary name and renamed, so an interrupted run leaves the previous one.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections import Counter
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from specbench.acoustic.alignment import align_shard
from specbench.config import SpeechConfig
from specbench.data.speech_corpus import (
    CorpusPlan,
    plan_utterances,
    read_manifest,
    sidecar_key,
    synthesize_shard,
    write_manifest,
)
from specbench.errors import DataError
from specbench.experiments.graph_recipe import build_graph
from specbench.experiments.job_refs import ctc_graph_job
from specbench.experiments.registry import RunOptions
from specbench.experiments.stage_clock import job_logger
from specbench.paths import from_root, work_dir
from specbench.runtime import connect, run_tasks
from specbench.stage import STATUS_COLUMN, STATUS_OK

if TYPE_CHECKING:
    from specbench.tracking.runs import TrackedRun


@dataclass(frozen=True)
class Corpus:
    """A synthesized corpus: its root folder and manifest."""

    root: Path
    manifest: pa.Table

    @property
    def manifest_path(self) -> Path:
        return self.root / "manifest.parquet"

    def rows(self, split: str) -> list[dict]:
        return [r for r in self.manifest.to_pylist() if r["split"] == split and r[STATUS_COLUMN] == STATUS_OK]


# the manifest columns `sidecar_key` reads (besides `pitch_cents`, which corpus rows never have)
_AUDIO_COLUMNS = ("normalized_text", "voice", "rate", "snr_db", "noise_seed")


_log = job_logger("speech")


def corpus_root(config: SpeechConfig) -> Path:
    return work_dir() / "speech" / config.name


def corpus_plan(config: SpeechConfig) -> CorpusPlan:
    return config.corpus.plan(config.seed)


def _alignment_key(checkpoint: Path, graph_dir: Path) -> str:
    """sha256 of what word times depend on besides the audio: the model and the lexicon and tokens."""
    h = hashlib.sha256()
    for path in (checkpoint, graph_dir / "lexicon.txt", graph_dir / "tokens.txt"):
        h.update(path.read_bytes())
    return h.hexdigest()


def _previous_word_times(root: Path, rows: list[dict]) -> dict[str, list]:
    """Word times of the existing manifest that still fit: the same utterance id (split, index, voice, rate,
    SNR), the same words, the same audio inputs (`sidecar_key`: the noise seed too, which the id does not
    hold) and a WAV not synthesized again since the manifest was written (as after an engine upgrade,
    `speech_corpus.engine_versions`). A changed seed or plan that gives an id another sentence, or the same
    sentence other noise, drops them."""
    path = root / "manifest.parquet"
    if not path.is_file():
        return {}
    written = path.stat().st_mtime_ns
    new = {r["utt_id"]: r for r in rows}
    try:
        old = read_manifest(path).select(["utt_id", "word_times", *_AUDIO_COLUMNS]).to_pylist()
    except DataError as err:  # damaged on disk: the manifest is written again from the synthesized rows
        _log(f"{path}: the previous manifest cannot be read ({err.__cause__ or 'not a speech manifest'}); "
             "writing it again from the corpus's WAVs, without its old word times")
        return {}
    return {o["utt_id"]: o["word_times"] for o in old
            if o["word_times"] and (r := new.get(o["utt_id"])) is not None
            and [t["word"] for t in o["word_times"]] == r["normalized_text"].split()
            and sidecar_key(o) == sidecar_key(r) and not _synthesized_since(root / r["audio_path"], written)}


def _synthesized_since(wav: Path, written_ns: int) -> bool:
    """Whether `wav` was written after the manifest (modification times, ns); False when it does not exist."""
    try:
        return wav.stat().st_mtime_ns > written_ns
    except OSError:
        return False


def align_corpus(rows: list[dict], root: Path, checkpoint: Path, graph_dir: Path, shard_size: int) -> list[dict]:
    """Word times by forced alignment, reusing the previous manifest's where the audio (`_previous_word_times`),
    the words, the model and the lexicon are unchanged."""
    key = _alignment_key(checkpoint, graph_dir)
    stamped = _stamp_key(root / "alignment.json") == key
    previous = _previous_word_times(root, rows) if stamped else {}
    todo = [r for r in rows if r[STATUS_COLUMN] == STATUS_OK and r["utt_id"] not in previous]
    shards = [todo[i:i + shard_size] for i in range(0, len(todo), shard_size)]
    fn = partial(align_shard, corpus_root=str(root), checkpoint=str(checkpoint), graph_dir=str(graph_dir))
    aligned = {r["utt_id"]: r["word_times"]
               for shard in run_tasks(fn, shards, progress=f"aligning {len(todo)} utterances") for r in shard}
    return [{**r, "word_times": previous.get(r["utt_id"]) or aligned.get(r["utt_id"])} for r in rows]


def _stamp_key(stamp: Path) -> str | None:
    """The alignment key `stamp` records; None when there is none or it cannot be read (logged: the
    alignment is then done again)."""
    if not stamp.is_file():
        return None
    try:
        key = json.loads(stamp.read_text(encoding="utf-8")).get("key")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError) as err:
        _log(f"{stamp}: not a readable alignment record ({err}); aligning the corpus again")
        return None
    return key if isinstance(key, str) else None


def _write_stamp(root: Path, checkpoint: Path, graph_dir: Path) -> None:
    """Record what the manifest's word times came from; written after the manifest, atomically."""
    tmp = root / f"alignment.json.tmp{os.getpid()}"  # this process's own; the rename is atomic
    tmp.write_text(json.dumps({"checkpoint": str(checkpoint), "graph": str(graph_dir),
                               "key": _alignment_key(checkpoint, graph_dir)}) + "\n")
    tmp.replace(root / "alignment.json")


def _keep_word_times(rows: list[dict], root: Path) -> list[dict]:
    """Carry word times over from the existing manifest where they still fit (see `_previous_word_times`)."""
    previous = _previous_word_times(root, rows)
    return [{**r, "word_times": previous.get(r["utt_id"])} for r in rows]


def build_corpus(config: SpeechConfig, run: TrackedRun | None = None, ray_address: str | None = None,
                 job_path: Path | None = None) -> Corpus:
    """Synthesize what is missing, align when the acoustic model exists, write the manifest; log to `run`."""
    root = corpus_root(config)
    planned = plan_utterances(corpus_plan(config)).to_pylist()
    shards = [planned[i:i + config.shard_size] for i in range(0, len(planned), config.shard_size)]
    missing = sum(not (root / r["audio_path"]).is_file() for r in planned)
    checkpoint = from_root(config.align_checkpoint)
    graph_job = None  # read before the synthesis, so that a bad graph_job stops the job before any work
    if checkpoint.is_file() and job_path is not None:
        graph_job = ctc_graph_job(job_path, "graph_job", config.graph_job)
    connect(ray_address)
    start = time.perf_counter()
    done = run_tasks(partial(synthesize_counted, corpus_root=root), shards,
                     progress=f"synthesizing what is missing or stale of {len(planned)} utterances ({missing} "
                              "without a WAV)")
    seconds = time.perf_counter() - start
    rows = [row for shard, _ in done for row in shard]
    synthesized = sum(count for _, count in done)
    graph_dir = None
    if graph_job is not None:
        graph_dir = build_graph(graph_job).directory
        rows = align_corpus(rows, root, checkpoint, graph_dir, config.shard_size)
    else:
        rows = _keep_word_times(rows, root)
    write_manifest(rows, root / "manifest.parquet")
    if graph_dir is not None:
        _write_stamp(root, checkpoint, graph_dir)
    aligned = graph_dir is not None
    corpus = Corpus(root, read_manifest(root / "manifest.parquet"))
    if run is not None:
        run.log_metrics(corpus_metrics(rows, synthesized, seconds))
        run.set_tags({"corpus_dir": str(root), "word_times": "forced alignment" if aligned else "none"})
        ok = [r for r in rows if r[STATUS_COLUMN] == STATUS_OK]
        run.log_metrics({"speech.aligned": float(sum(bool(r.get("word_times")) for r in ok))})
    return corpus


def synthesize_counted(rows: list[dict], corpus_root: Path) -> tuple[list[dict], int]:
    """`synthesize_shard`, and how many of its rows it synthesized now: those whose sidecar it wrote (its
    modification time changed on this node), which counts the rows made again because their inputs or an
    engine's version changed, not only those without a WAV."""
    def stamp(row: dict) -> int | None:
        try:
            return (Path(corpus_root) / row["audio_path"]).with_suffix(".json").stat().st_mtime_ns
        except OSError:
            return None

    before = [stamp(r) for r in rows]
    out = synthesize_shard(rows, corpus_root)
    return out, sum(stamp(r) != b for r, b in zip(rows, before, strict=True))


def corpus_metrics(rows: list[dict], synthesized: int, seconds: float) -> dict[str, float]:
    ok = [r for r in rows if r[STATUS_COLUMN] == STATUS_OK]
    out = {"speech.utterances": float(len(rows)), "speech.failed": float(len(rows) - len(ok)),
           "speech.synthesized": float(synthesized),
           "speech.synth_utts_per_s": synthesized / seconds if synthesized and seconds > 0 else 0.0}
    for split in ("train", "devel", "test"):
        part = [r for r in ok if r["split"] == split]
        out[f"speech.{split}.utterances"] = float(len(part))
        out[f"speech.{split}.hours"] = sum(float(r["duration_s"]) for r in part) / 3600
    for voice, n in Counter(r["voice"] for r in ok).items():
        out[f"speech.voice.{voice.replace(':', '_').replace('+', '_')}.utterances"] = float(n)
    return out


def summary(corpus: Corpus) -> list[str]:
    rows = corpus.manifest.to_pylist()
    failed = [r for r in rows if r[STATUS_COLUMN] != STATUS_OK]
    lines = [f"speech corpus {corpus.root}: {len(rows) - len(failed):,} utterances ok, {len(failed)} failed"]
    for split in ("train", "devel", "test"):
        part = [r for r in rows if r["split"] == split and r[STATUS_COLUMN] == STATUS_OK]
        voices = sorted({r["voice"] for r in part})
        hours = sum(float(r["duration_s"]) for r in part) / 3600
        lines.append(f"  {split}: {len(part):,} utterances, {hours:.2f} h, voices {', '.join(voices)}")
    for r in failed[:5]:
        lines.append(f"  failed {r['utt_id']}: {r[STATUS_COLUMN]}")
    return lines


def execute(config: Any, path: Path, run: TrackedRun | None, opts: RunOptions) -> list[str]:
    """The job's runner (see `experiments.registry`): run it, return the summary lines."""
    return summary(build_corpus(config, run, opts.ray_address, path))
