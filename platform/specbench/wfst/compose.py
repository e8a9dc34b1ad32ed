"""Compose the CTC decoding graph TLG with kaldifst (OpenFst) and kaldilm, as in EESEN and icefall.

G = arpa2fst(ARPA) with `#0` on back-off arcs; LG = minimize_encoded(determinize_star(L o G)) (Kaldi's
mkgraph recipe: determinization is possible because L carries disambiguation symbols); the disambiguation
symbols are then replaced by epsilon (a numpy relabel of the CSR graph, written back as an OpenFst binary);
TLG = T o LG, arc-sorted on input labels, written in OpenFst's const format.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import kaldifst
import kaldilm

from specbench.errors import ToolError
from specbench.wfst.fst_binary import write_vector_fst
from specbench.wfst.graph import read_graph, replace_ilabels


def arpa_to_g(arpa: Path, words_txt: Path, g_path: Path) -> None:
    """G.fst from an ARPA file over the words of `words_txt` (`#0` on back-off arcs)."""
    with native_stderr_captured() as log:
        kaldilm.arpa2fst(input_arpa=str(arpa), output_fst=str(g_path), disambig_symbol="#0",
                         read_symbol_table=str(words_txt), max_arpa_warnings=-1)
        text = log.read_text(errors="replace")
    if not g_path.is_file():
        raise ToolError(f"kaldilm.arpa2fst wrote no {g_path} from {arpa}; check the ARPA file and {words_txt}. "
                        f"Its log:\n{text[-2000:]}")
    missing = sorted(set(re.findall(r"skipped: word '(.*?)' not in symbol table", text)))
    if missing:  # arpa2fst leaves their n-grams out of G with a warning only
        g_path.unlink()
        raise ToolError(f"{arpa}: {len(missing)} word(s) of the LM are not in {words_txt} "
                        f"({', '.join(missing[:10])}), so G would lack their n-grams. Fix: build words.txt from "
                        "the LM's vocabulary, or restrict the LM to the words of words.txt.")


@contextlib.contextmanager
def native_stderr_captured() -> Iterator[Path]:
    """Send file descriptor 2 (where Kaldi's C++ code logs) to a temporary file for the duration."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryDirectory(prefix="specbench-log-") as tmp:
        log = Path(tmp) / "stderr.log"
        with log.open("wb") as fh:
            os.dup2(fh.fileno(), 2)
            try:
                yield log
            finally:
                os.dup2(saved, 2)
                os.close(saved)


def compile_text(text: str, what: str) -> kaldifst.StdVectorFst:
    fst = kaldifst.compile(text, acceptor=False)
    if fst is None or fst.num_states == 0:
        raise ToolError(f"compiling {what} gave an empty FST")
    return fst


def compose_lg(l_text: str, g_path: Path) -> kaldifst.StdVectorFst:
    """min(det(L o G)), arc-sorted on input labels, disambiguation symbols still present."""
    lex = compile_text(l_text, "L")
    kaldifst.arcsort(lex, sort_type="olabel")
    g = kaldifst.StdVectorFst.read(str(g_path))
    kaldifst.arcsort(g, sort_type="ilabel")
    lg = kaldifst.StdVectorFst(kaldifst.compose(lex, g))
    if kaldifst.determinize_star(lg, use_log=True):  # True means it stopped early (kaldifst's convention)
        raise ToolError("determinizing L o G stopped early; the graph is too large for determinize-star")
    kaldifst.minimize_encoded(lg)
    kaldifst.arcsort(lg, sort_type="ilabel")
    return lg


def remove_disambiguation(fst: kaldifst.StdVectorFst, disambig_ids: list[int]) -> kaldifst.StdVectorFst:
    """A copy of `fst` with the given input labels replaced by epsilon."""
    with tempfile.TemporaryDirectory(prefix="specbench-fst-") as tmp:
        src, dst = Path(tmp) / "in.fst", Path(tmp) / "out.fst"
        fst.write(str(src))
        write_vector_fst(dst, replace_ilabels(read_graph(src), disambig_ids, 0))
        return kaldifst.StdVectorFst.read(str(dst))


def compose_tlg(t_text: str, lg: kaldifst.StdVectorFst) -> kaldifst.StdVectorFst:
    """T o LG (LG free of disambiguation symbols), arc-sorted on input labels."""
    topo = compile_text(t_text, "T")
    kaldifst.arcsort(topo, sort_type="olabel")
    kaldifst.arcsort(lg, sort_type="ilabel")
    tlg = kaldifst.StdVectorFst(kaldifst.compose(topo, lg))
    kaldifst.arcsort(tlg, sort_type="ilabel")
    return tlg


def write_const(fst: kaldifst.StdVectorFst, path: Path) -> None:
    """Write `fst` in OpenFst's const format (what Kaldi's HCLG uses; our CSR reader loads it in ms)."""
    if not kaldifst.StdConstFst(fst).write(str(path)):
        raise ToolError(f"writing {path} failed")
