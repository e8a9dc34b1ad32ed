"""Every decoder backend built from its name: `make_decoder(name, graph, options, **backend_args)`.

Backends: `cpu` (`cpu_compiled.CompiledCpuDecoder`, ours, its frame loop compiled by numba), `cpu_numpy`
(`cpu.CpuDecoder`, the same search in numpy: the readable reference the compiled loop and the twin are
checked against), `kaldi` (`kaldi_reference.KaldiFasterDecoder`, kaldi-decoder's C++
FasterDecoder), `twin` (`twin.TwinDecoder`, the GPU algorithm in numpy) and `gpu` (`gpu.GpuDecoder`); `auto`
is `gpu` where this process sees a usable CUDA device, else `cpu`. Each takes the whole `SearchOptions` and
answers the same calls: `decode(loglikes (T, P) float32, utt_id, partial_every=None) -> DecodeResult` and
`decode_batch([(utt_id, loglikes)], partial_every=None) -> [DecodeResult]`. The lane backends (`twin`,
`gpu`) decode a batch together.

The graph is a path (or a `GraphFile`, which reads it into a `CsrGraph` at most once) or an already read
`CsrGraph`; the kaldi backend reads the file itself (kaldifst), so it needs a path. Backend modules are
imported only when built: kaldi-decoder and cupy are needed only by the backends that use them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Protocol

import numpy as np

from specbench.decoder.options import DEFAULT_OPTIONS, SearchOptions
from specbench.decoder.result import DecodeResult
from specbench.wfst.graph import CsrGraph, read_graph
from specbench.wfst.mapped import mapped_graph

BACKENDS = ("cpu", "cpu_numpy", "kaldi", "twin", "gpu", "auto")
LANE_BACKENDS = ("twin", "gpu")
LANE_ARGS = ("max_lanes", "refill", "lattice_workers", "token_capacity", "arc_capacity", "arena_capacity",
             "lattice_capacity", "table_slots", "arena_window", "lattice_window")
BACKEND_ARGS: dict[str, tuple[str, ...]] = {
    "cpu": ("epsilon_mode",), "cpu_numpy": ("epsilon_mode",), "kaldi": (), "twin": LANE_ARGS,
    "gpu": ("device", "timing", "cuda_graphs", *LANE_ARGS),
}


class Decoder(Protocol):
    """What every backend answers (see the module docstring)."""

    options: SearchOptions

    def decode(self, loglikes: np.ndarray, utt_id: str = "",
               partial_every: int | None = None) -> DecodeResult:
        ...

    def decode_batch(self, items: Sequence[tuple[str, np.ndarray]],
                     partial_every: int | None = None) -> list[DecodeResult]:
        ...


@dataclass(frozen=True)
class GraphFile:
    """A graph file (OpenFst const or vector format), read into a CsrGraph at most once (`csr`). `mapped`:
    over memory-mapped arrays that every process of the machine shares (`wfst.mapped`), for workers that
    each load the same graph."""

    path: Path
    mapped: bool = False

    @cached_property
    def csr(self) -> CsrGraph:
        return mapped_graph(self.path) if self.mapped else read_graph(self.path)


def resolve_backend(backend: str) -> str:
    """`auto` -> `gpu` when a CUDA device is usable here, else `cpu`; the others unchanged (checked)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend != "auto":
        return backend
    from specbench.decoder.gpu import gpu_available

    return "gpu" if gpu_available() else "cpu"


def make_decoder(name: str, graph: str | Path | GraphFile | CsrGraph,
                 options: SearchOptions = DEFAULT_OPTIONS, **backend_args) -> Decoder:
    """The backend `name` (see BACKENDS; `auto` resolved) over `graph` with `options`; `backend_args` are
    the backend's own keywords (BACKEND_ARGS: the CPU epsilon mode, the lane count and queue capacities,
    the CUDA device). Raises ValueError naming what is wrong (an unknown backend or keyword, a CsrGraph for
    kaldi); GpuUnavailableError where `gpu` cannot run."""
    name = resolve_backend(name)
    unknown = sorted(set(backend_args) - set(BACKEND_ARGS[name]))
    if unknown:
        allowed = ", ".join(BACKEND_ARGS[name]) or "none"
        raise ValueError(f"the {name} backend takes no argument {', '.join(unknown)} (its own: {allowed})")
    source = GraphFile(Path(graph)) if isinstance(graph, (str, Path)) else graph
    if name == "kaldi":
        if not isinstance(source, GraphFile):
            raise ValueError("the kaldi backend reads the graph file itself (kaldifst): pass its path, not a "
                             f"{type(graph).__name__}")
        from specbench.decoder.kaldi_reference import KaldiFasterDecoder

        return KaldiFasterDecoder(source.path, options)
    csr = source.csr if isinstance(source, GraphFile) else source
    if name == "cpu":
        try:
            from specbench.decoder.cpu_compiled import CompiledCpuDecoder
        except ImportError as err:  # numba missing (a machine with the project's source tree only)
            raise ImportError(f"the cpu backend needs numba ({err}). Fix: pip install numba, or use the "
                              "cpu_numpy backend (same results, slower)") from err
        return CompiledCpuDecoder(csr, options, **backend_args)
    if name == "cpu_numpy":
        from specbench.decoder.cpu import CpuDecoder

        return CpuDecoder(csr, options, **backend_args)
    if name == "twin":
        from specbench.decoder.twin import TwinDecoder

        return TwinDecoder(csr, options, **backend_args)
    from specbench.decoder.gpu import GpuDecoder

    return GpuDecoder(csr, options, **backend_args)
