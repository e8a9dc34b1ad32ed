"""Compose HCLG as Kaldi's `mkgraph.sh` does, with kaldifst (OpenFst and Kaldi's fstext):

    LG    = minimize_encoded(determinize_star(L o G))          (log semiring, disambiguation symbols kept)
    CLG   = compose_context(LG)                                 (triphone windows, Kaldi's ComposeContext)
    HCLGa = minimize_encoded(rm_disambig(determinize_star(Ha o CLG)))
    HCLG  = nonnegative_epsilons(add_self_loops(HCLGa))         (then arc-sorted, written as a const FST)

Ha, the self-loops and the label mapping are `hmm_transducer`'s; L is `sphinx_lexicon`'s; the last step
(`wfst.reweight`) moves weight so that no epsilon arc costs less than 0 (every complete path keeps its
cost), which the lane decoders' epsilon closure needs. Each step is
timed and sized for the build's statistics.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import kaldifst
import numpy as np

from specbench.errors import ToolError
from specbench.wfst.compose import compile_text, compose_lg, remove_disambiguation
from specbench.wfst.fst_binary import write_vector_fst
from specbench.wfst.graph import CsrGraph, read_graph
from specbench.wfst.hmm_transducer import HmmTransducer, add_self_loops, hmm_transducer
from specbench.wfst.reweight import nonnegative_epsilons
from specbench.wfst.sphinx_lexicon import LexiconGraph
from specbench.wfst.sphinx_mdef import SphinxMdef


@dataclass
class HclgReport:
    """Seconds and sizes of each stage (`stage -> (seconds, states, arcs)`), H's window counts."""

    stages: dict[str, tuple[float, int, int]] = field(default_factory=dict)
    windows: int = 0
    windows_backed_off: int = 0
    entry_labels: int = 0


def _size(fst: kaldifst.StdVectorFst) -> tuple[int, int]:
    arcs = sum(fst.num_arcs(s) for s in range(fst.num_states))
    return fst.num_states, arcs


def _to_csr(fst: kaldifst.StdVectorFst) -> CsrGraph:
    with tempfile.TemporaryDirectory(prefix="specbench-fst-") as tmp:
        path = Path(tmp) / "g.fst"
        fst.write(str(path))
        return read_graph(path)


def _to_const(graph: CsrGraph, path: Path) -> None:
    """Write `graph` arc-sorted on input labels in OpenFst's const format."""
    with tempfile.TemporaryDirectory(prefix="specbench-fst-") as tmp:
        vector = Path(tmp) / "g.fst"
        write_vector_fst(vector, graph)
        fst = kaldifst.StdVectorFst.read(str(vector))
    kaldifst.arcsort(fst, sort_type="ilabel")
    if not kaldifst.StdConstFst(fst).write(str(path)):
        raise ToolError(f"writing {path} failed")


def compose_hclg(lexicon: LexiconGraph, g_path: Path, model: SphinxMdef, tmat: np.ndarray, out: Path,
                 self_loop_scale: float = 0.1, step: Callable[[str], None] = lambda _: None,
                 ) -> tuple[CsrGraph, HclgReport, HmmTransducer]:
    """Build HCLG into `out` (`HCLG.fst`, const); return it as a CSR graph, the report and H."""
    report = HclgReport()
    clock = time.perf_counter()

    def done(stage: str, states: int, arcs: int) -> None:
        nonlocal clock
        now = time.perf_counter()
        report.stages[stage] = (now - clock, states, arcs)
        clock = now

    step("composing L o G, determinizing and minimizing")
    lg = compose_lg(lexicon.text, g_path)
    done("LG", *_size(lg))
    step("composing the triphone context C o LG")
    clg, ilabels = kaldifst.compose_context(disambig_syms=list(lexicon.disambig_ids), context_width=3,
                                            central_position=1, ifst=lg)
    del lg
    done("CLG", *_size(clg))
    step(f"building H for {len(ilabels) - 1} context windows")
    h = hmm_transducer(ilabels, lexicon.phones, model, tmat)
    report.windows, report.windows_backed_off, report.entry_labels = h.windows, h.backed_off, h.num_entries
    ha = compile_text(h.text, "Ha")
    kaldifst.arcsort(ha, sort_type="olabel")
    kaldifst.arcsort(clg, sort_type="ilabel")
    done("Ha", *_size(ha))
    step("composing Ha o CLG and determinizing")
    hclga = kaldifst.StdVectorFst(kaldifst.compose(ha, clg))
    del clg, ha
    if kaldifst.determinize_star(hclga, use_log=True):  # True: stopped early (kaldifst's convention)
        raise ToolError("determinizing Ha o CLG stopped early; the graph is too large for determinize-star")
    done("HCLGa_det", *_size(hclga))
    step("removing disambiguation symbols and minimizing")
    hclga = remove_disambiguation(hclga, list(h.disambig_labels))
    kaldifst.minimize_encoded(hclga)
    done("HCLGa", *_size(hclga))
    step("adding self-loops")
    graph = nonnegative_epsilons(add_self_loops(_to_csr(hclga), h.senone, h.loop_prob, self_loop_scale))
    del hclga
    _to_const(graph, out / "HCLG.fst")
    done("HCLG", graph.num_states, graph.num_arcs)
    return graph, report, h
