"""`specbench decode`: decode a scores file with a graph and write one JSON line (or Parquet row) per
utterance with the decoder-output fields of `decoder.stage.OUTPUT_SCHEMA` (and partial hypotheses and lattices
when asked for). The `DecoderStage` builds the backend by name (`decoder.backends.make_decoder`) with one
`SearchOptions` from the command-line options. Bad utterances are reported in their rows and counted; they
never stop the others; so are the rows of a Parquet scores file whose scoring failed (status "not
scored: ...", no words). An utterance id the scores hold twice is refused, and so, before decoding, is an
`--out` that cannot be written or is the scores or references file. The lane backends (`twin`, `gpu`) decode
`LANE_CHUNK` utterances together.

The one-utterance-at-a-time backends (`cpu`, `cpu_numpy`, `kaldi`) use every core of the machine: `workers`
decoders (default: one per core for long decodes, see `worker_count`), each a Ray actor with its own
`DecoderStage`, all mapping the same graph arrays (`wfst.mapped`), so the graph is read once and held in
memory once. One worker decodes in this process, without Ray. The workers run on the Ray cluster that
`ray_address` names (`specbench --ray-address`; None: `$RAY_ADDRESS`, else a local Ray); a named cluster that
is not there is refused before any decoding starts, however many workers decode.

With `references` (`--references`: a Kaldi `text` file, one line per utterance, its id, then its words) and `words`, the
summary adds `wer` (the 1-best words against the references) and, when lattices are written,
`lattice_oracle_wer` (the lattice oracle WER: the path through each lattice with the
fewest word errors; the same denominator, and an utterance without a lattice counts its 1-best's errors, so
it is never above `wer`). Words are compared by id (a reference word that `words` lacks matches nothing). The
oracle reads the lattice files back here (`lattice.lattice_file_oracle_errors`), so with Ray workers on
other machines the lattice folder must be one they share with this one."""

from __future__ import annotations

import itertools
import math
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from specbench.data.scores import read_scores, unscored, utterance_ids
from specbench.decoder.backends import LANE_BACKENDS
from specbench.decoder.result import DecodeResult, DecodeStats
from specbench.decoder.stage import OUTPUT_SCHEMA, PARTIAL_TYPE, DecoderStage
from specbench.errors import DataError, SpecbenchError
from specbench.input_files import check_frame_shift
from specbench.text_files import check_output_path, json_text, read_utf8, replacing
from specbench.wfst.symbols import SymbolTable, first_ids

LANE_CHUNK = 256
PARALLEL_MIN_FRAMES = 300_000  # by default, decodes this long use every core (about 20 s on one core)
WORKER_BATCH = 32  # utterances per actor call: small enough that the workers finish together
INPUT_SCHEMA = pa.schema([("utt_id", pa.string()), ("frame_shift_ms", pa.float32()), ("num_frames", pa.int32()),
                          ("num_classes", pa.int32()), ("loglikes", pa.list_(pa.float32()))])


# decode_file's options that SearchOptions and DecoderStage check: their errors start with the field they are
# about ("min_active must be ...", "SearchOptions.beam must be ..."), which names the flag
_SEARCH_FLAGS = frozenset(("backend", "beam", "max_active", "min_active", "acoustic_scale", "lattice_beam",
                           "lattice_dir", "partial_every_ms", "frame_shift_ms"))
_FIELD_OF_ERROR = re.compile(r"(?:SearchOptions\.)?([a-z_]+) must\b")


def option_error(err: ValueError) -> DataError:
    """The DataError of DecoderStage's refusal `err`, naming the flag of the field its message starts with
    (`--min-active` for "min_active must be ..."), else "an option"."""
    problem = str(err).replace("SearchOptions.", "")
    match = _FIELD_OF_ERROR.match(str(err))
    field = match.group(1) if match else ""
    flag = f"--{field.replace('_', '-')}" if field in _SEARCH_FLAGS else "an option"
    return DataError(f"{flag}: {problem}. Fix: change {flag} (`specbench decode --help` shows the defaults)")


def decode_file(graph: Path, scores: Path, out: Path, backend: str = "cpu", beam: float = 15.0,
                max_active: int = 10000, acoustic_scale: float = 1.0, frame_shift_ms: float | None = None,
                words: Path | None = None, lattice_beam: float | None = None, lattice_dir: Path | None = None,
                partial_every_ms: float | None = None, min_active: int = 20,
                workers: int | None = None, ray_address: str | None = None,
                references: Path | None = None) -> dict[str, Any]:
    """Decode every utterance of `scores`; returns a summary (counts, failures by reason, frames/s, workers;
    with lattices their density; with `references` the WER and, with lattices, the lattice oracle WER: see
    the module docstring). workers: decoders in parallel (see the module docstring; None: one per core);
    ray_address: the Ray cluster they run on (`--ray-address`; None: `$RAY_ADDRESS`, else a local Ray)."""
    for what, path, inside in (("graph", graph, "TLG.fst or HCLG.fst"), ("words", words, "words.txt")):
        if path is not None and Path(path).is_dir():
            raise DataError(f"--{what} {path}: a folder, not a file. Fix: give the file in it ({inside})")
        if path is not None and not Path(path).is_file():
            raise DataError(f"--{what} {path}: no such file. Fix: give the path of an existing file (the "
                            "graph folders are under .specbench/graphs/; `specbench graph build` writes "
                            "them)")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise DataError(f"--workers {workers!r}: must be a whole number >= 1. Fix: pass e.g. --workers 1")
    if Path(out).suffix not in (".jsonl", ".parquet"):
        raise DataError(f"--out {out}: unknown output format '{Path(out).suffix}'. Fix: end the file name in "
                        ".jsonl (one JSON line per utterance) or .parquet")
    for option, given in (("--scores", scores), ("--references", references)):  # read, then overwritten
        if given is not None and Path(out).exists() and Path(given).exists() and os.path.samefile(out, given):
            raise DataError(f"--out {out}: the same file as {option} {given}, which the decode reads. Fix: "
                            "name another --out file")
    check_output_path(Path(out), "decode", "--out", "a .jsonl or .parquet file", f"out{Path(out).suffix}")
    if references is not None and not Path(references).is_file():
        what = "a folder, not a file" if Path(references).is_dir() else "no such file"
        raise DataError(f"--references {references}: {what}. Fix: give the path of an existing Kaldi text "
                        "file (one line per utterance: its id, then its words)")
    if references is not None and words is None:
        raise DataError(f"--references {references}: the reference words are compared with the decoded word "
                        "ids through the word list. Fix: give words too (words.txt beside the graph)")
    if frame_shift_ms is not None and not 0 < frame_shift_ms < math.inf:
        raise DataError(f"--frame-shift-ms {frame_shift_ms}: must be a positive number of milliseconds. Fix: "
                        "pass the scores' frame shift, e.g. --frame-shift-ms 40")
    try:
        stage = DecoderStage(graph, backend, beam=beam, max_active=max_active, min_active=min_active,
                             acoustic_scale=acoustic_scale, lattice_beam=lattice_beam, lattice_dir=lattice_dir,
                             partial_every_ms=partial_every_ms, frame_shift_ms=frame_shift_ms)
    except ValueError as err:
        raise option_error(err) from err
    if lattice_dir is not None:  # before decoding: a lattice that cannot be written stops the decode
        try:
            Path(lattice_dir).mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise DataError(f"--lattice-dir {lattice_dir}: cannot be made ({err.strerror}). Fix: name a folder "
                            "you can write") from err
    if lattice_beam is not None and lattice_dir is None:
        raise DataError(f"--lattice-beam {lattice_beam:g}: lattices are kept only to be written to "
                        "--lattice-dir, which is not given. Fix: add --lattice-dir DIR (one lattice file per "
                        "utterance), or leave --lattice-beam out")
    symbols = SymbolTable.read(words).symbols if words else None
    if symbols is not None:
        check_word_list(graph, words, len(symbols), stage.backend)
    texts = read_references(references) if references is not None else None
    if Path(scores).suffix.lower() == ".parquet":
        check_frame_shift(Path(scores), frame_shift_ms, _stored(scores, "frame_shift_ms"))
        check_token_count(Path(graph), Path(scores), _stored(scores, "num_classes"))
    failed = unscored(scores)  # in the output and the WER as failed rows, not left out
    known = [*(utterance_ids(scores) or []), *(u for u, _ in failed)]  # the ids, read without their scores
    check_unique(scores, known)  # before decoding
    if texts is not None:
        check_references(references, texts, known)
    if ray_address is not None:  # asked for: refused if it is not there, even where one worker needs no Ray
        from specbench.runtime import check_cluster

        check_cluster(ray_address)
    start = time.perf_counter()
    if stage.backend in LANE_BACKENDS or workers == 1:
        rows, used = _decode_here(stage, read_scores(scores, frame_shift_ms)), 1
    else:
        items = list(read_scores(scores, frame_shift_ms))
        used = worker_count(sum(len(m) for _, m, _ in items), workers)
        rows = (_decode_here(stage, iter(items)) if used == 1
                else _decode_on_workers(stage, items, used, ray_address, asked=workers is not None))
    seconds = time.perf_counter() - start
    unscored_rows = [{**DecodeResult.failed(u, f"not scored: {status}", 0, DecodeStats()).output_row(),
                      "partials": []} for u, status in failed]  # every field of a decoded row (null: none)
    rows += pa.Table.from_pylist(unscored_rows, schema=OUTPUT_SCHEMA).to_pylist() if failed else []
    check_unique(scores, [r["id"] for r in rows])  # a Kaldi .ark's ids are known only now
    if not rows:
        raise DataError(f"{scores}: no utterances to decode. Fix: give a scores file that holds at least one "
                        "utterance")
    if symbols is not None:
        for row in rows:
            row["words"] = _spell(row["word_ids"], symbols)
            for partial in row["partials"]:
                partial["words"] = _spell(partial["word_ids"], symbols)
    # scored before the output is written: a failure here leaves no output that looks complete
    scored = (reference_scores(rows, texts, symbols, references, lattice_dir is not None)
              if texts is not None and symbols is not None else {})
    _write(rows, out, symbols is not None)
    frames = sum(int(r["num_frames"] or 0) for r in rows)
    failures = Counter(r["status"] for r in rows if r["status"] != "ok")
    summary = {"utterances": len(rows), "failed": sum(failures.values()), "failures": dict(failures),
               "frames": frames, "frames_per_second": frames / seconds if seconds > 0 else 0.0,
               "backend": stage.backend, "workers": used, "out": str(out)}
    if lattice_dir is not None:
        summary["lattice_dir"] = str(lattice_dir)
        arcs = sum(r["lattice_arcs"] or 0 for r in rows)
        summary["lattice_density"] = arcs / frames if frames else 0.0
    summary.update(scored)
    return summary


def check_word_list(graph: Path, words: Path, size: int, backend: str) -> None:
    """A DataError when the word list `words` (`size` symbols) cannot spell every output label of `graph`."""
    from specbench.wfst.graph import read_graph
    from specbench.wfst.mapped import mapped_graph

    csr = read_graph(graph) if backend == "kaldi" else mapped_graph(graph)  # the kaldi backend maps nothing
    top = max((int(arcs.olabel.max()) for arcs in (csr.emitting, csr.epsilon) if arcs.num_arcs), default=0)
    if top >= size:
        raise DataError(f"--words {words}: it lists {size} symbols, but the graph {graph} outputs word ids "
                        f"up to {top} (which needs at least {top + 1}): it is not that graph's word list (a "
                        "tokens.txt, or another graph's words.txt?). Fix: give the words.txt the graph was "
                        "built with (beside it in its folder under .specbench/graphs/)")


def _stored(scores: Path, column: str) -> list[Any]:
    """One column of a Parquet scores file; none where it cannot be read (read_scores names the problem)."""
    try:
        return pq.read_table(scores, columns=[column]).column(0).to_pylist()
    except (OSError, KeyError, pa.ArrowException):
        return []


def check_token_count(graph: Path, scores: Path, columns: list[int | None]) -> None:
    """A DataError when scores hold another number of columns than the graph's tokens (its `tokens.txt`,
    where there is one: every symbol but <eps> and the disambiguation symbols #N): scores of another acoustic
    model, which would decode to nonsense as if nothing were wrong."""
    tokens = graph.with_name("tokens.txt")
    if not tokens.is_file():
        return
    want = sum(1 for s in SymbolTable.read(tokens).symbols if s != "<eps>" and not s.startswith("#"))
    wrong = sorted({c for c in columns if c is not None and c != want})
    if wrong:
        raise DataError(f"--scores {scores}: scores of {wrong[0]} columns, but {tokens} lists {want} tokens "
                        "(column j scores input label j + 1). Fix: decode the scores of the acoustic model this "
                        "graph was built for")


def check_unique(scores: Path, ids: list[str]) -> None:
    """A DataError naming an utterance id that `scores` holds more than once (its output rows, lattice files
    and WER would mix the two)."""
    twice = [(u, n) for u, n in Counter(ids).items() if n > 1]
    if twice:
        raise DataError(f"{scores}: utterance {twice[0][0]!r} appears {twice[0][1]} times ({len(twice)} id(s) "
                        "repeated). Fix: give each utterance of the scores its own id")


def check_references(references: Path, texts: dict[str, list[str]], ids: list[str]) -> None:
    """A DataError naming the utterances of `ids` that `texts` (read from `references`) has no line for."""
    missing = [u for u in ids if u not in texts]
    if missing:
        raise DataError(f"--references {references}: no reference for {len(missing)} of the {len(ids)} "
                        f"utterance(s) of the scores, e.g. {missing[0]!r}. Fix: give a references file with "
                        "a line for every utterance of the scores (its id, then its words)")


def read_references(path: Path) -> dict[str, list[str]]:
    """A Kaldi `text` file (UTF-8): utterance id -> words (blank lines skipped)."""
    texts: dict[str, list[str]] = {}
    text = read_utf8(path, f"--references {path}")
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        if fields[0] in texts:
            raise DataError(f"--references {path}, line {number}: utterance {fields[0]!r} is listed twice. "
                            "Fix: give each utterance one line (its id, then its words)")
        texts[fields[0]] = fields[1:]
    return texts


def reference_scores(rows: list[dict], texts: dict[str, list[str]], symbols: list[str], references: Path,
                     with_lattices: bool) -> dict[str, Any]:
    """`wer` of the rows' 1-best word ids against `texts`, and with lattices `lattice_oracle_wer` (see the
    module docstring); failed rows count as empty hypotheses."""
    from specbench.decoder.lattice import lattice_file_oracle_errors, read_lattice
    from specbench.metrics.wer import edit_distance, rate

    check_references(references, texts, [r["id"] for r in rows])
    ids = first_ids(symbols)
    tokens = errors = oracle = 0
    for row in rows:
        ref = [ids.get(w, -1) for w in texts[row["id"]]]  # -1: a word the graph cannot output
        best = edit_distance(ref, list(row["word_ids"] or []))
        tokens, errors = tokens + len(ref), errors + best
        if with_lattices:
            path = row.get("lattice_path")
            if path is None:
                oracle += best
                continue
            try:
                oracle += lattice_file_oracle_errors(read_lattice(path), ref)
            except DataError as err:
                raise DataError(f"{err}: the lattice oracle WER reads each lattice file back on this "
                                "machine. Fix: give a lattice folder that the workers and this machine "
                                "share") from err
    out: dict[str, Any] = {"reference_words": tokens, "wer": rate(errors, tokens)}
    if with_lattices:
        out["lattice_oracle_wer"] = rate(oracle, tokens)
    return out


def worker_count(frames: int, workers: int | None) -> int:
    """`workers`, else one per core of this process's CPU set when the scores hold at least
    `PARALLEL_MIN_FRAMES` frames, else 1: starting Ray and its actors costs seconds (about 10 s for a local
    Ray on 2 cores, plus each worker's start-up), which a short decode would not win back."""
    if workers is not None:
        return workers
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return cores if frames >= PARALLEL_MIN_FRAMES else 1


def _decode_here(stage: DecoderStage, stream: Iterator[tuple[str, np.ndarray, float | None]]) -> list[dict]:
    """Decode in this process (the lane backends `LANE_CHUNK` utterances at a time), with a progress bar."""
    stage.setup()
    chunk = LANE_CHUNK if stage.backend in LANE_BACKENDS else 1
    rows: list[dict] = []
    stream = iter(tqdm(stream, desc=f"decoding ({stage.backend})", unit="utt", file=sys.stderr,
                       mininterval=2.0))
    while batch := list(itertools.islice(stream, chunk)):
        rows.extend(stage.decode_many(batch))
    return pa.Table.from_pylist(rows, schema=OUTPUT_SCHEMA).to_pylist()  # the workers' rows, field for field


def _decode_on_workers(stage: DecoderStage, items: list[tuple[str, np.ndarray, float | None]],
                       workers: int, ray_address: str | None = None, asked: bool = True) -> list[dict]:
    """Decode on `workers` Ray actors (each its own DecoderStage over the shared mapped graph), in order, on
    the cluster at `ray_address` (joined here, before anything is shared: one that is not there is refused).
    More workers than the cluster holds at once: refused when `asked` (--workers), else as many as it
    holds."""
    from specbench.runtime import connect, require_resources
    from specbench.runtime.stages import run_ray

    connect(ray_address)
    need = stage.resources
    slots = require_resources(need.num_cpus, need.num_gpus, f"decode --workers {workers}")
    if workers > slots and asked:
        raise SpecbenchError(f"--workers {workers}: the Ray cluster holds only {slots} decoder(s) at once "
                             f"({need.num_cpus:g} CPU each), so the others would never start. Fix: --workers "
                             f"{slots} or fewer, or leave --workers out (as many as the cluster holds)")
    workers = min(workers, slots)

    stage.share_graph()
    table = pa.Table.from_pylist([
        {"utt_id": u, "frame_shift_ms": shift, "num_frames": len(m), "num_classes": m.shape[1],
         "loglikes": np.asarray(m, dtype=np.float32).reshape(-1)} for u, m, shift in items], schema=INPUT_SCHEMA)
    batch = max(1, min(WORKER_BATCH, math.ceil(len(items) / (4 * workers))))
    print(f"decoding {len(items)} utterances on {workers} workers ({stage.backend})", file=sys.stderr)
    return run_ray(stage, table, batch_size=batch, mode="actors", num_actors=workers).to_pylist()


def _spell(word_ids: list[int], symbols: list[str]) -> list[str]:
    return [symbols[w] if 0 <= w < len(symbols) else f"<{w}>" for w in word_ids]


def _write(rows: list[dict], out: Path, with_words: bool) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with replacing(out) as tmp:
        if out.suffix == ".parquet":
            schema = OUTPUT_SCHEMA
            if with_words:
                partial = pa.struct(list(PARTIAL_TYPE) + [pa.field("words", pa.list_(pa.string()))])
                where = schema.get_field_index("partials")
                schema = schema.set(where, pa.field("partials", pa.list_(partial)))
                schema = schema.append(pa.field("words", pa.list_(pa.string())))
            pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp)
        else:
            with tmp.open("w", encoding="utf-8") as fh:
                for row in rows:
                    fh.write(json_text(row) + "\n")
