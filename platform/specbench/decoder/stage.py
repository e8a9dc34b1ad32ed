"""`DecoderStage`: decode a table of scores with one decoder per worker (a Ray actor, or a plain loop); the
workers of a machine map one copy of the graph (`wfst.mapped`; `share_graph` writes it before they start).

Input columns: `utt_id`, `num_frames`, `num_classes`, `loglikes` (row-major T x P), optionally
`frame_shift_ms`. Output columns follow DESIGN.md's decoder output: `id`, `status`, `word_ids`,
`graph_cost`, `acoustic_cost`, `num_frames`, `word_end_frames`, `partials` (a list of {frame, time_ms,
word_ids, posteriors}, empty unless asked for), `lattice_arcs` and `lattice_path` (when lattices are written),
`tokens_created` and `beam_narrowings` (search counters; 0 for the kaldi backend).

With `partial_posterior_scale`, each partial also carries the posterior of each of its words
(`decoder.word_confidence`, at that posterior scale) from the lattice of the audio so far, built in the same
pass (`SearchOptions.partial_lattices`; the cpu backends only); `posteriors` is null where they are
undefined (no lattice, no complete path, or a lattice whose best path does not start with the partial's
words), never NaN, and null for every partial without the option.

Backends (`backends.make_decoder`): `cpu` (ours), `kaldi` (kaldi-decoder's FasterDecoder), `twin` (the GPU
algorithm in numpy) and `gpu`, all given one `SearchOptions` and all returning `DecodeResult`, which one row
builder turns into rows. The lane backends (`twin`, `gpu`) decode a whole batch together. `gpu` asks Ray
for `gpu_fraction` of a GPU per actor (0.25: four decoders share one GPU, the sequence parallelism that
stands in for MPS); `auto` is `gpu` where this process sees a CUDA device, else `cpu`. One bad utterance
gets its reason in `status`, a plain sentence (`result.py`'s STATUS_* texts: "bad scores: utterance 'x' has
NaN at frame 3, column 0; ...", "malformed scores: ...", "no final state reached"); the others are decoded.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401 - pa.compute

from specbench.decoder.backends import LANE_BACKENDS, GraphFile, make_decoder, resolve_backend
from specbench.decoder.inputs import ScoresError
from specbench.decoder.options import SearchOptions
from specbench.decoder.result import (
    STATUS_BAD_SCORES,
    STATUS_DECODER_ERROR,
    STATUS_MALFORMED,
    DecodeResult,
    PartialHypothesis,
)
from specbench.decoder.word_confidence import word_posteriors
from specbench.stage import Resources, Stage, failure_status
from specbench.wfst.mapped import mapped_graph

PARTIAL_TYPE = pa.struct([("frame", pa.int32()), ("time_ms", pa.float32()), ("word_ids", pa.list_(pa.int32())),
                          ("posteriors", pa.list_(pa.float32()))])
OUTPUT_SCHEMA = pa.schema([
    ("id", pa.string()), ("status", pa.string()), ("word_ids", pa.list_(pa.int32())),
    ("graph_cost", pa.float64()), ("acoustic_cost", pa.float64()), ("num_frames", pa.int32()),
    ("word_end_frames", pa.list_(pa.int32())), ("partials", pa.list_(PARTIAL_TYPE)),
    ("lattice_arcs", pa.int64()), ("lattice_path", pa.string()), ("tokens_created", pa.int64()),
    ("beam_narrowings", pa.int64()),
])
_MAX_PARTIAL_EVERY = 2**31 - 1  # frames: an interval longer than any utterance gives no partials


class DecoderStage(Stage):
    """Stateful: `setup()` loads the graph once (and, for `gpu`, uploads it to the device).

    graph_path: the graph file. backend: see `backends.BACKENDS` (`auto` resolved here). beam, max_active,
    min_active, acoustic_scale, lattice_beam: `SearchOptions`' (lattice_beam 8.0 when a `lattice_dir` is
    given without one; the kaldi backend refuses lattice_dir, lattice_beam and partial_every_ms).
    partial_every_ms: a positive finite number: partial hypotheses every that many ms (converted to frames
    with each row's frame shift, else `frame_shift_ms`). gpu_fraction: the GPU share a `gpu` actor asks Ray
    for.
    max_lanes: utterances decoded together by the lane backends. partial_posterior_scale: when set (> 0),
    each partial carries its words' posteriors at that scale from the lattice of the audio so far (needs a
    lattice_beam and the cpu or cpu_numpy backend).
    """

    stateful = True

    def __init__(self, graph_path: Path, backend: str = "cpu", beam: float = 15.0, max_active: int = 10000,
                 min_active: int = 20, acoustic_scale: float = 1.0, lattice_beam: float | None = None,
                 lattice_dir: Path | None = None, partial_every_ms: float | None = None,
                 frame_shift_ms: float | None = None, gpu_fraction: float = 0.25, max_lanes: int = 256,
                 partial_posterior_scale: float | None = None) -> None:
        self.graph_path, self.backend = Path(graph_path), resolve_backend(backend)
        if self.backend == "kaldi":
            asked = [name for name, value in (("lattice_dir", lattice_dir), ("lattice_beam", lattice_beam),
                                              ("partial_every_ms", partial_every_ms)) if value is not None]
            if asked:
                raise ValueError(f"{asked[0]} must be left unset with the kaldi backend, which gives "
                                 f"1-best only (asked for: {', '.join(asked)}): lattices and partials need "
                                 "cpu, twin or gpu")
        if lattice_dir is not None and lattice_beam is None:
            lattice_beam = 8.0
        if partial_every_ms is not None and not 0 < partial_every_ms < math.inf:
            raise ValueError(f"partial_every_ms must be a positive finite number of milliseconds, got "
                             f"{partial_every_ms!r}")
        if partial_posterior_scale is not None and not partial_posterior_scale > 0:
            raise ValueError(f"partial_posterior_scale must be > 0 (1.0: the decoder's own weighting), got "
                             f"{partial_posterior_scale!r}")
        self.options = SearchOptions(beam=beam, max_active=max_active, min_active=min_active,
                                     acoustic_scale=acoustic_scale, lattice_beam=lattice_beam,
                                     partial_lattices=partial_posterior_scale is not None)
        self.partial_posterior_scale = partial_posterior_scale
        if self.backend == "kaldi":
            self.options.require_one_best("kaldi")
        if self.backend in LANE_BACKENDS:
            self.options.require_no_partial_lattices(self.backend)
        self.backend_args = {"max_lanes": max_lanes} if self.backend in LANE_BACKENDS else {}
        self.lattice_dir = Path(lattice_dir) if lattice_dir else None
        self.partial_every_ms, self.frame_shift_ms = partial_every_ms, frame_shift_ms
        self.resources = Resources(num_cpus=1.0, num_gpus=gpu_fraction if self.backend == "gpu" else 0.0)
        self._decoder = None

    def share_graph(self) -> None:
        """Write the graph's memory-mapped arrays (`wfst.mapped`) before the workers start, so that they map
        them instead of each reading the graph file (the kaldi backend reads the file itself)."""
        if self.backend != "kaldi":
            mapped_graph(self.graph_path)

    def setup(self) -> None:
        """The decoder, over the graph's memory-mapped arrays: the workers of one machine share one copy."""
        graph = GraphFile(self.graph_path, mapped=True)
        self._decoder = make_decoder(self.backend, graph, self.options, **self.backend_args)

    # ---- decoding -------------------------------------------------------------------------------------

    def _partial_every(self, shift_ms: float | None) -> int | None:
        """The partial interval in frames: at least one frame, at most 2^31 - 1 (longer than any
        utterance)."""
        if not self.partial_every_ms:
            return None
        if not shift_ms:
            raise ValueError("partials need the frame shift: scores without one need --frame-shift-ms")
        if not 0 < shift_ms < math.inf:
            raise ValueError(f"partials need a positive finite frame shift, got {shift_ms!r} ms")
        return max(1, round(min(self.partial_every_ms / shift_ms, _MAX_PARTIAL_EVERY)))

    def decode_many(self, items: list[tuple[str, np.ndarray, float | None]]) -> list[dict]:
        """(utt_id, loglikes (T, P), frame shift ms or None) -> output rows, in order. The lane backends
        decode the rows that share a partial interval (in frames: with partials, rows of one frame shift) as
        one batch, so that each row gets its partials at its own frame shift."""
        if self._decoder is None:
            self.setup()
        shifts = [shift or self.frame_shift_ms for _, _, shift in items]
        if self.backend not in LANE_BACKENDS:
            return [self._one(u, m, shift) for (u, m, _), shift in zip(items, shifts, strict=True)]
        rows: list[dict | None] = [None] * len(items)
        groups: dict[int | None, list[int]] = {}
        for i, ((utt_id, mat, _), shift) in enumerate(zip(items, shifts, strict=True)):
            try:
                groups.setdefault(self._partial_every(shift), []).append(i)
            except ValueError as err:
                rows[i] = _failed_row(utt_id, mat, str(err))
        for every, members in groups.items():
            batch = [items[i] for i in members]
            # bad scores fail their own rows; an error of the batch as a whole is the decoder's: it raises
            results = self._decoder.decode_batch([(u, m) for u, m, _ in batch], every)
            for i, result in zip(members, results, strict=True):
                rows[i] = self._row(result, shifts[i])
        return [row for row in rows if row is not None]

    def decode_one(self, utt_id: str, loglikes: np.ndarray, frame_shift_ms: float | None = None) -> dict:
        """One utterance to an output row (errors become the row's status)."""
        return self.decode_many([(utt_id, loglikes, frame_shift_ms)])[0]

    def _one(self, utt_id: str, mat: np.ndarray, shift: float | None) -> dict:
        try:
            every = self._partial_every(shift)
        except ValueError as err:
            return _failed_row(utt_id, mat, str(err))
        try:
            result = self._decoder.decode(mat, utt_id, every)
        except ScoresError as err:  # `inputs.checked_scores` rejected the scores
            return _failed_row(utt_id, mat, _reason(STATUS_BAD_SCORES, err))
        except Exception as err:  # noqa: BLE001 - one bad utterance never stops the batch
            return _failed_row(utt_id, mat, _reason(STATUS_DECODER_ERROR, err))
        return self._row(result, shift)  # a lattice file that cannot be written stops the stage

    def _row(self, res: DecodeResult, shift: float | None) -> dict:
        """The output row of any backend's result (the kaldi backend's search counters are 0)."""
        row = res.output_row()
        row.update(partials=[{"frame": p.frame, "time_ms": (p.frame + 1) * shift if shift else None,
                              "word_ids": list(p.word_ids), "posteriors": self._posteriors(p)} for p in res.partials],
                   lattice_arcs=res.lattice.num_arcs if res.lattice is not None else None, lattice_path=None,
                   tokens_created=res.stats.tokens_created, beam_narrowings=res.stats.beam_narrowings)
        if res.lattice is not None and self.lattice_dir is not None:
            path = self.lattice_dir / f"{_safe_name(res.utt_id)}.fst"
            res.lattice.write(path, self.options.acoustic_scale)
            row["lattice_path"] = str(path)
        return row

    def _posteriors(self, partial: PartialHypothesis) -> list[float] | None:
        """The posterior of each word of `partial` from its lattice; None when not asked for or undefined."""
        if self.partial_posterior_scale is None:
            return None
        post = word_posteriors(partial.lattice, self.partial_posterior_scale)
        words = len(partial.word_ids)
        if not post.ok or post.word_ids[:words] != partial.word_ids:
            return None
        return list(post.posteriors[:words])

    def metrics(self, out: pa.Table, seconds: float) -> dict[str, float]:
        """Utterances and frames decoded, frames per second, beam narrowings, and `active_tokens`: despite its
        name (kept: the dashboards query it), the batch's tokens_created per frame decoded, i.e. the candidate
        tokens per frame that passed the beam before recombination (`DecodeStats.tokens_created`), not the
        tokens still active after it, which can be several times fewer; 0 for the kaldi backend, which
        counts no tokens."""
        frames = float(pa.compute.sum(out.column("num_frames")).as_py() or 0)
        tokens = float(pa.compute.sum(out.column("tokens_created")).as_py() or 0)
        values = {"utterances_decoded": float(out.num_rows), "frames_decoded": frames,
                  "beam_narrowings": float(pa.compute.sum(out.column("beam_narrowings")).as_py() or 0)}
        if frames:
            values["active_tokens"] = tokens / frames
            if seconds > 0:
                values["frames_per_second"] = frames / seconds
        return values

    def __call__(self, batch: pa.Table) -> pa.Table:
        rows: list[dict | None] = []
        items: list[tuple[str, np.ndarray, float | None]] = []
        for r in batch.to_pylist():
            try:
                mat = _row_matrix(r)
            except ValueError as err:  # a malformed row fails alone
                rows.append({"id": r["utt_id"], "status": _reason(STATUS_MALFORMED, err),
                             "num_frames": r.get("num_frames"), "word_ids": [], "word_end_frames": [],
                             "partials": []})
                continue
            rows.append(None)
            items.append((r["utt_id"], mat, r.get("frame_shift_ms")))
        decoded = iter(self.decode_many(items))
        return pa.Table.from_pylist([row if row is not None else next(decoded) for row in rows],
                                    schema=OUTPUT_SCHEMA)


def _row_matrix(row: dict) -> np.ndarray:
    """The (T, P) float32 scores of an input row; ValueError with a plain reason when they do not fit."""
    frames, classes, flat = row.get("num_frames"), row.get("num_classes"), row.get("loglikes")
    if frames is None or classes is None or flat is None:
        raise ValueError("the row has no num_frames, num_classes or loglikes")
    try:
        values = np.asarray(flat, dtype=np.float32)
    except (TypeError, ValueError) as err:
        raise ValueError(f"loglikes are not numbers ({err})") from err
    if values.size != int(frames) * int(classes) or int(frames) < 0 or int(classes) < 0:
        raise ValueError(f"{values.size} loglikes do not fill num_frames x num_classes = {frames} x "
                         f"{classes}")
    return values.reshape(int(frames), int(classes))


def _reason(status: str, err: Exception) -> str:
    """`status: reason`, the reason being the error's own words (never its class name)."""
    return failure_status(err, status)


def _safe_name(utt_id: str) -> str:
    """A file name for an utterance id: the id itself when it is one (letters, digits, `-`, `_`, `.`), else
    the id with path separators and odd characters replaced by `_`, then `-` and 8 hex digits of the raw
    id's sha1, so that ids which differ only in those characters (`spk/a b`, `spk_a_b`, `spk:a b`) never
    share a lattice file."""
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in utt_id)
    if name == utt_id and name:
        return name
    return f"{name}-{hashlib.sha1(utt_id.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"


def _failed_row(utt_id: str, mat: np.ndarray, status: str) -> dict:
    return {"id": utt_id, "status": status, "num_frames": len(mat), "word_ids": [], "word_end_frames": [],
            "graph_cost": None, "acoustic_cost": None, "partials": []}
