"""The real-speech job's cache of senone scores: one Parquet file per utterance.

A file's name is the utterance's key: pocketsphinx's version, the acoustic model's files (mdef,
feat.params, the Gaussians), the scoring code, read as code (`acoustic/sphinx_scores.py` and the WAV reader
its samples go through, `data/synthesis.py`), and the utterance's key and audio file (size and modification
time). pocketsphinx's front end starts afresh for each utterance (`SphinxSenoneScorer`), so an utterance's
scores do not depend on the utterances scored with it: a chunk scores only its utterances that are not
cached, and regrouping the utterances (`chunk_utterances`, `tune_utterances`, `sets`, `max_per_set`)
rescores nothing. An utterance whose scoring failed is not cached (a full /tmp fails pocketsphinx as a bad
file does, and a cached failure would last): the next run scores it again, alone.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from specbench.acoustic import sphinx_scores
from specbench.acoustic.sphinx_scores import SphinxSenoneScorer, default_model_dir
from specbench.code_digest import code_digest, files_digest
from specbench.data import synthesis
from specbench.data.scores import read_parquet_table
from specbench.errors import DataError
from specbench.experiments.real_speech.audio import STATUS_OK, RealUtterance
from specbench.experiments.stage_clock import job_logger
from specbench.runtime import run_stage

PREFIX = "utt-"  # per-utterance files; the 20-hex-digit names without it are an earlier layout's chunks
NOT_SCORED = "not scored: the scoring stage returned no row for it"


_log = job_logger("real_speech")


def scorer_digest(model_dir: Path | None = None, scorer_source: Path | None = None,
                  reader_source: Path | None = None) -> str:
    """What every utterance's key shares: pocketsphinx's version, the model's files (`model_dir`, by default
    pocketsphinx's en-us) and the scoring code (`scorer_source`, by default `acoustic/sphinx_scores.py`;
    `reader_source`, by default `data/synthesis.py`, whose `read_wav` the scorer calls)."""
    h = hashlib.sha256(importlib.metadata.version("pocketsphinx").encode())
    h.update(files_digest(model_dir or default_model_dir(), exclude=("README",)).encode())
    h.update(code_digest([scorer_source or Path(sphinx_scores.__file__),
                          reader_source or Path(synthesis.__file__)]).encode())
    return h.hexdigest()


def score_key(utterance: RealUtterance, scorer: str) -> str:
    """The cache key of one utterance's scores under `scorer` (`scorer_digest`)."""
    stat = utterance.wav.stat()
    text = f"{scorer}\0{utterance.key}\0{stat.st_size}\0{stat.st_mtime_ns}"
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def score_chunks(chunks: list[list[RealUtterance]], cache: Path
                 ) -> tuple[list[list[Path]], dict[str, str]]:
    """Per chunk, the scores files of its utterances that were scored (now or before), and the utterances
    whose scoring failed, with the reason, by key."""
    _note_earlier_layout(cache)
    scorer = scorer_digest()
    paths: list[list[Path]] = []
    failed: dict[str, str] = {}
    for k, chunk in enumerate(chunks):
        files = {u.key: cache / f"{PREFIX}{score_key(u, scorer)}.parquet" for u in chunk}
        missing = [u for u in chunk if not cached(files[u.key])]
        if missing:
            cached_count = len(chunk) - len(missing)
            _log(f"scoring chunk {k + 1}/{len(chunks)} with pocketsphinx: {len(missing)} of {len(chunk)} "
                 f"utterances ({cached_count} cached)" if cached_count else
                 f"scoring chunk {k + 1}/{len(chunks)} with pocketsphinx: {len(chunk)} "
                 f"utterance{'' if len(chunk) == 1 else 's'}")
            failed.update(_score(missing, files))
        paths.append([files[u.key] for u in chunk if u.key not in failed])
    return paths, failed


def _score(rows: list[RealUtterance], files: dict[str, Path]) -> dict[str, str]:
    """Score `rows`, write each ok row to its file (through a file of this process's own, renamed
    atomically); the failures by key."""
    table = pa.table({"utt_id": [u.key for u in rows], "audio_path": [str(u.wav) for u in rows]})
    scored = run_stage(SphinxSenoneScorer(), table, backend="ray", batch_size=8)
    failed = {u.key: NOT_SCORED for u in rows}
    for i, (key, status) in enumerate(zip(scored.column("utt_id").to_pylist(),
                                          scored.column("status").to_pylist())):
        if status != STATUS_OK:
            failed[key] = status
            continue
        path = files[key]
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        pq.write_table(scored.slice(i, 1), tmp, compression="none")
        tmp.replace(path)
        del failed[key]
    return failed


def cached(path: Path) -> bool:
    """Whether `path` holds an utterance's scores: it exists, reads as scores and its one row is ok. A file
    damaged on disk is logged and counts as missing (its utterance is scored again)."""
    if not path.is_file():
        return False
    try:
        rows = read_parquet_table(path).select(["utt_id", "status"]).to_pylist()
    except (DataError, KeyError) as err:
        reason = err.__cause__ or err  # the reader's own words, without the fix for the eval_am scores
        _log(f"{path}: cached scores that cannot be read ({reason}); scoring the utterance again")
        return False
    if len(rows) == 1 and rows[0]["status"] == STATUS_OK:
        return True
    _log(f"{path}: not the one ok row of an utterance's scores ({len(rows)} rows, statuses "
         f"{sorted({r['status'][:80] for r in rows})}); scoring the utterance again")
    return False


def _note_earlier_layout(cache: Path) -> None:
    """Say once a run that score files of the earlier per-chunk layout are no longer read, and how much they
    hold, so that their space can be freed (they are left in place: deleting is the user's call)."""
    if not cache.is_dir():
        return
    old = [p for p in cache.glob("*.parquet") if not p.name.startswith(PREFIX)]
    if old:
        size = sum(p.stat().st_size for p in old) / 2**30
        _log(f"{cache}: {len(old)} scores files of the earlier per-chunk layout ({size:.1f} GiB) are no longer "
             f"read (the cache now holds one file per utterance, {PREFIX}*.parquet). Fix: delete them to free "
             "the space.")
