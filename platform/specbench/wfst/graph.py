"""Decoding graphs as CSR arrays, split into emitting and epsilon arcs, for the WFST decoders.

A decoder consumes one frame of acoustic scores per step along *emitting* arcs (input label != 0, the
transition-id / pdf index) and then closes over *epsilon* arcs (input label 0) without consuming a frame.
`CsrGraph` keeps the two kinds in separate CSR sets so both passes read contiguous arrays. Weights are
tropical costs (negated natural-log probabilities; +inf = impossible), float32.

`read_graph` is the single entry point for OpenFst files (`vector` or `const` StdArc, see
`specbench.wfst.fst_binary`); `save_npz`/`load_npz` cache a graph as plain arrays.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from specbench.errors import DataError, FstFormatError
from specbench.wfst.fst_binary import FIX_HINT, FstArrays, read_fst

NPZ_FORMAT_VERSION = 1
_ARC_FIELDS = {"dest": np.int32, "ilabel": np.int32, "olabel": np.int32, "weight": np.float32}


def _check_array(owner: str, name: str, value: object, dtype: type) -> np.ndarray:
    """`value` if it is a 1-D array of `dtype`; otherwise ValueError naming `owner.name`."""
    if not isinstance(value, np.ndarray) or value.ndim != 1 or value.dtype != dtype:
        got = f"{value.dtype} array of shape {value.shape}" if isinstance(value, np.ndarray) else type(value)
        raise ValueError(f"{owner}.{name} must be a 1-D {np.dtype(dtype)} array, got {got}")
    return value


@dataclass(frozen=True)
class ArcSet:
    """One CSR set of arcs: the arcs of state s are [offsets[s], offsets[s + 1]), in file order.

    offsets: (num_states + 1,) int64, non-decreasing from 0 to num_arcs.
    dest: (num_arcs,) int32 destination state.
    ilabel, olabel: (num_arcs,) int32 input / output labels (0 = epsilon).
    weight: (num_arcs,) float32 tropical cost.
    """

    offsets: np.ndarray
    dest: np.ndarray
    ilabel: np.ndarray
    olabel: np.ndarray
    weight: np.ndarray

    def __post_init__(self) -> None:
        offsets = _check_array("ArcSet", "offsets", self.offsets, np.int64)
        num_arcs = _check_array("ArcSet", "dest", self.dest, np.int32).shape[0]
        for name, dtype in _ARC_FIELDS.items():
            if _check_array("ArcSet", name, getattr(self, name), dtype).shape[0] != num_arcs:
                raise ValueError(f"ArcSet.{name} has {getattr(self, name).shape[0]} entries, dest {num_arcs}")
        if offsets.shape[0] < 1 or offsets[0] != 0 or offsets[-1] != num_arcs:
            raise ValueError(f"ArcSet.offsets must run from 0 to the number of arcs ({num_arcs})")
        if np.any(offsets[1:] < offsets[:-1]):
            raise ValueError("ArcSet.offsets must be non-decreasing")

    @property
    def num_states(self) -> int:
        """Number of states the offsets cover."""
        return int(self.offsets.shape[0] - 1)

    @property
    def num_arcs(self) -> int:
        """Number of arcs in this set."""
        return int(self.dest.shape[0])

    @cached_property
    def out_degree(self) -> np.ndarray:
        """(num_states,) int64 number of arcs of each state in this set (computed once)."""
        return np.diff(self.offsets)

    def state_arcs(self, state: int) -> slice:
        """The slice of the arc arrays that holds the arcs of `state`."""
        return slice(int(self.offsets[state]), int(self.offsets[state + 1]))


@dataclass(frozen=True)
class CsrGraph:
    """A StdArc FST as two CSR arc sets.

    start: start state, -1 for an FST without one (e.g. the empty FST).
    final: (num_states,) float32 final cost per state, +inf for non-final states.
    emitting: the arcs with ilabel != 0.
    epsilon: the arcs with ilabel == 0.
    """

    start: int
    final: np.ndarray
    emitting: ArcSet
    epsilon: ArcSet

    def __post_init__(self) -> None:
        num_states = _check_array("CsrGraph", "final", self.final, np.float32).shape[0]
        if not isinstance(self.start, (int, np.integer)) or not (-1 <= self.start < num_states):
            raise ValueError(f"CsrGraph.start must be -1 or in [0, {num_states}), got {self.start!r}")
        object.__setattr__(self, "start", int(self.start))  # a plain int, also when given a numpy integer
        for name in ("emitting", "epsilon"):
            arcs = getattr(self, name)
            if not isinstance(arcs, ArcSet):
                raise ValueError(f"CsrGraph.{name} must be an ArcSet, got {type(arcs).__name__}")
            if arcs.num_states != num_states:
                raise ValueError(f"CsrGraph.{name}.offsets covers {arcs.num_states} states, not {num_states}")
            if arcs.num_arcs and (arcs.dest.min() < 0 or arcs.dest.max() >= num_states):
                raise ValueError(f"CsrGraph.{name}.dest has a state outside [0, {num_states})")
        if np.any(self.emitting.ilabel == 0):
            raise ValueError("CsrGraph.emitting.ilabel must not contain 0 (epsilon arcs belong in .epsilon)")
        if np.any(self.epsilon.ilabel != 0):
            raise ValueError("CsrGraph.epsilon.ilabel must be all 0")

    @property
    def num_states(self) -> int:
        """Number of states."""
        return int(self.final.shape[0])

    @property
    def num_arcs(self) -> int:
        """Number of arcs, emitting and epsilon."""
        return self.emitting.num_arcs + self.epsilon.num_arcs

    @property
    def num_emitting_arcs(self) -> int:
        """Number of arcs with ilabel != 0."""
        return self.emitting.num_arcs

    @property
    def num_epsilon_arcs(self) -> int:
        """Number of arcs with ilabel == 0."""
        return self.epsilon.num_arcs

    @property
    def max_ilabel(self) -> int:
        """Largest input label (0 when there are no emitting arcs); sizes per-label score tables."""
        return int(self.emitting.ilabel.max()) if self.emitting.num_arcs else 0

    @property
    def out_degree(self) -> np.ndarray:
        """(num_states,) int64 number of arcs (emitting + epsilon) leaving each state."""
        return self.emitting.out_degree + self.epsilon.out_degree

    def to_arrays(self) -> FstArrays:
        """All arcs in state order, for `fst_binary.write_vector_fst`.

        Per state, the epsilon arcs come first, then the emitting arcs, each in their stored order; so an
        ilabel-sorted graph (labels >= 0) stays sorted, though other graphs may not keep their file order.
        """
        eps, emit = self.epsilon, self.emitting
        offsets = eps.offsets + emit.offsets
        at_eps = np.arange(eps.num_arcs, dtype=np.int64) + np.repeat(emit.offsets[:-1], eps.out_degree)
        at_emit = np.arange(emit.num_arcs, dtype=np.int64) + np.repeat(eps.offsets[1:], emit.out_degree)
        merged = {}
        for name, dtype in _ARC_FIELDS.items():
            out = np.empty(self.num_arcs, dtype=dtype)
            out[at_eps] = getattr(eps, name)
            out[at_emit] = getattr(emit, name)
            merged[name] = out
        return FstArrays(
            start=self.start, final=self.final, offsets=offsets, ilabel=merged["ilabel"],
            olabel=merged["olabel"], weight=merged["weight"], nextstate=merged["dest"],
        )


def _convert(name: str, value: np.ndarray, dtype: type) -> np.ndarray:
    """`value` as `dtype`; ValueError naming `name` when integers do not fit in it."""
    if np.issubdtype(dtype, np.integer):
        if not (np.issubdtype(value.dtype, np.integer) or value.size == 0):
            raise ValueError(f"from_arrays: {name} must hold integers, got {value.dtype}")
        limits = np.iinfo(dtype)
        if value.size and (value.min() < limits.min or value.max() > limits.max):
            raise ValueError(f"from_arrays: {name} has values outside the {np.dtype(dtype)} range")
    return value.astype(dtype, copy=False)


def _select(num_states: int, src: np.ndarray, keep: np.ndarray, arcs: dict[str, np.ndarray]) -> ArcSet:
    """The ArcSet of the arcs where `keep` is true; `src` (num_arcs,) is sorted by state."""
    index = np.flatnonzero(keep)  # integer take is several times faster than boolean indexing
    counts = np.bincount(src.take(index), minlength=num_states)
    offsets = np.zeros(num_states + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return ArcSet(offsets=offsets, **{name: arcs[name].take(index) for name in _ARC_FIELDS})


def _source_states(num_states: int, num_arcs: int, src: object, offsets: object) -> np.ndarray:
    """(num_arcs,) int64 source state of each arc, from exactly one of `src` or CSR `offsets`."""
    if (src is None) == (offsets is None):
        raise ValueError("from_arrays: give exactly one of src= or offsets=")
    if offsets is not None:
        offsets = np.asarray(offsets, dtype=np.int64)
        if offsets.shape != (num_states + 1,) or offsets[0] != 0 or offsets[-1] != num_arcs:
            raise ValueError(f"from_arrays: offsets must have {num_states + 1} entries from 0 to {num_arcs}")
        if np.any(offsets[1:] < offsets[:-1]):
            raise ValueError("from_arrays: offsets must be non-decreasing")
        return np.repeat(np.arange(num_states, dtype=np.int64), np.diff(offsets))
    src = np.asarray(src, dtype=np.int64)
    if src.shape != (num_arcs,) or (num_arcs and (src.min() < 0 or src.max() >= num_states)):
        raise ValueError(f"from_arrays: src must have {num_arcs} states in [0, {num_states})")
    return src


def from_arrays(
    start: int,
    final: np.ndarray,
    *,
    src: np.ndarray | None = None,
    offsets: np.ndarray | None = None,
    dest: np.ndarray,
    ilabel: np.ndarray,
    olabel: np.ndarray,
    weight: np.ndarray,
) -> CsrGraph:
    """Build a CsrGraph from flat arc arrays; give exactly one of `src` or `offsets`.

    final: (num_states,) final costs (+inf = not final). src: (num_arcs,) source state of each arc, in any
    order (arcs of one state keep their relative order). offsets: (num_states + 1,) CSR offsets of arcs
    already grouped by state. dest, ilabel, olabel: (num_arcs,) integers; weight: (num_arcs,) costs.
    Arrays are converted to the CsrGraph dtypes; inconsistent input raises ValueError naming the argument.
    """
    final = np.ascontiguousarray(final, dtype=np.float32)
    if final.ndim != 1:
        raise ValueError(f"from_arrays: final must be 1-D, got shape {final.shape}")
    arcs = {
        "dest": np.asarray(dest), "ilabel": np.asarray(ilabel), "olabel": np.asarray(olabel),
        "weight": np.asarray(weight),
    }
    for name, value in arcs.items():
        if value.ndim != 1 or value.shape[0] != arcs["dest"].shape[0]:
            raise ValueError(f"from_arrays: {name} must be 1-D with as many entries as dest")
        arcs[name] = _convert(name, value, _ARC_FIELDS[name])
    num_states = final.shape[0]
    src = _source_states(num_states, arcs["dest"].shape[0], src, offsets)
    if np.any(src[1:] < src[:-1]):
        order = np.argsort(src, kind="stable")
        src, arcs = src[order], {name: value[order] for name, value in arcs.items()}
    is_eps = arcs["ilabel"] == 0
    return CsrGraph(
        start=int(start), final=final, emitting=_select(num_states, src, ~is_eps, arcs),
        epsilon=_select(num_states, src, is_eps, arcs),
    )


def from_fst_arrays(fst: FstArrays) -> CsrGraph:
    """The CsrGraph of arrays read by `fst_binary.read_fst`."""
    return from_arrays(
        fst.start, fst.final, offsets=fst.offsets, dest=fst.nextstate, ilabel=fst.ilabel,
        olabel=fst.olabel, weight=fst.weight,
    )


def read_graph(path: Path | str) -> CsrGraph:
    """Read an OpenFst `vector` or `const` StdArc binary file (type taken from its header).

    Raises FstFormatError (naming the file, the problem and the fix) for malformed files and DataError
    for files that cannot be read.
    """
    fst = read_fst(path)
    try:
        return from_fst_arrays(fst)
    except ValueError as err:  # read_fst checks everything from_arrays does; kept as a safety net
        raise FstFormatError(f"{path}: {err}; {FIX_HINT}") from err


def replace_ilabels(graph: CsrGraph, labels: Iterable[int], new_label: int = 0) -> CsrGraph:
    """A copy of `graph` whose arcs with an input label in `labels` have input label `new_label`.

    With new_label 0 (the default) this turns disambiguation symbols into epsilons: those arcs move from
    the emitting set to the epsilon set, after the state's original epsilon arcs. Output labels, weights
    and destinations are unchanged.
    """
    targets = np.fromiter((int(label) for label in labels), dtype=np.int64)
    if not np.iinfo(np.int32).min <= new_label <= np.iinfo(np.int32).max:
        raise ValueError(f"replace_ilabels: new_label {new_label} does not fit in int32")
    if targets.size == 0:
        return graph
    fst = graph.to_arrays()
    ilabel = np.where(np.isin(fst.ilabel, targets), np.int32(new_label), fst.ilabel).astype(np.int32)
    return from_arrays(
        fst.start, fst.final, offsets=fst.offsets, dest=fst.nextstate, ilabel=ilabel, olabel=fst.olabel,
        weight=fst.weight,
    )


def save_npz(path: Path | str, graph: CsrGraph) -> None:
    """Cache `graph` as an uncompressed .npz of plain arrays (no pickled objects)."""
    arrays = {"format_version": np.int64(NPZ_FORMAT_VERSION), "start": np.int64(graph.start)}
    arrays["final"] = graph.final
    for set_name in ("emitting", "epsilon"):
        arcs = getattr(graph, set_name)
        arrays[f"{set_name}_offsets"] = arcs.offsets
        for name in _ARC_FIELDS:
            arrays[f"{set_name}_{name}"] = getattr(arcs, name)
    with open(path, "wb") as fh:  # a file object keeps numpy from appending ".npz" to the name
        np.savez(fh, **arrays)


def load_npz(path: Path | str) -> CsrGraph:
    """Load a graph cached by `save_npz`; a missing, corrupt or outdated cache is a DataError naming it."""
    fix = "delete it so that it is rebuilt from the graph file"
    try:
        with np.load(path, allow_pickle=False) as npz:
            if int(npz["format_version"]) != NPZ_FORMAT_VERSION:
                version = int(npz["format_version"])
                raise ValueError(f"format version {version}, expected {NPZ_FORMAT_VERSION}")
            sets = {
                name: ArcSet(offsets=npz[f"{name}_offsets"], **{f: npz[f"{name}_{f}"] for f in _ARC_FIELDS})
                for name in ("emitting", "epsilon")
            }
            return CsrGraph(start=int(npz["start"]), final=npz["final"], **sets)
    except FileNotFoundError as err:
        raise DataError(f"{path}: graph cache not found") from err
    except (OSError, KeyError, ValueError, TypeError, zipfile.BadZipFile) as err:
        raise DataError(f"{path}: unreadable graph cache ({err}); {fix}") from err


def disjoint_copies(graph: CsrGraph, copies: int) -> CsrGraph:
    """`copies` disjoint copies of `graph` side by side (state s of copy c is c * num_states + s), started in
    copy 0: a graph `copies` times the size on which every search is the one on `graph`, with the same
    state ids (the decoder benchmark's graph-size sweep)."""
    if not isinstance(copies, int) or copies < 1:
        raise ValueError(f"disjoint_copies: copies must be a positive int, got {copies!r}")
    states = graph.num_states
    if copies * states >= 2**31:
        raise ValueError(f"disjoint_copies: {copies} copies of {states} states overflow the int32 state ids")

    def tiled(arcs: ArcSet) -> ArcSet:
        shift = np.arange(copies, dtype=np.int64)
        offsets = (arcs.offsets[:-1][None, :] + (shift * arcs.num_arcs)[:, None]).ravel()
        dest = (arcs.dest[None, :].astype(np.int64) + (shift * states)[:, None]).ravel().astype(np.int32)
        return ArcSet(offsets=np.append(offsets, copies * arcs.num_arcs), dest=dest,
                      **{name: np.tile(getattr(arcs, name), copies) for name in ("ilabel", "olabel", "weight")})

    return CsrGraph(start=graph.start, final=np.tile(graph.final, copies), emitting=tiled(graph.emitting),
                    epsilon=tiled(graph.epsilon))
