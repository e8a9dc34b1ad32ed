"""What `wfst.hclg.compose_hclg` writes and reports, beyond the path costs of test_hclg.py: the graph on disk
is `HCLG.fst` in OpenFst's const format, arc-sorted on input labels, with the returned graph's arcs; no
epsilon arc costs less than 0, also for an LM whose back-off weights exceed 1 (where determinization leaves
negative epsilon weights to move), and there every path still costs what the model says; the graph is
minimal (OpenFst's encoded minimization of a copy leaves its size); the default self-loop scale is Kaldi's
0.1 (path costs then match the model computed by hand with 0.1); each stage's (states, arcs) equals that
stage's FST counted with kaldifst, the report's window counts are H's, and the stage seconds add up to no
more than the call's wall time."""

from __future__ import annotations

import math
import random
import time
from pathlib import Path

import kaldifst
import numpy as np
import pytest
from test_hclg import ARPA, MODEL, NOISE_SHARE, SCALE, SIL_PROB, WORDS, _best_cost, _expected, _lm_cost

from specbench.wfst.arpa import read_arpa
from specbench.wfst.compose import arpa_to_g, compose_lg
from specbench.wfst.fst_binary import write_vector_fst
from specbench.wfst.hclg import compose_hclg
from specbench.wfst.lexicon import read_cmudict
from specbench.wfst.sphinx_lexicon import lexicon_graph
from specbench.wfst.sphinx_mdef import read_mdef, read_transition_matrices
from specbench.wfst.symbols import word_table

pytestmark = pytest.mark.unit


# Three words whose back-off weights exceed 1 (log10 bow > 0, as real LMs have): G's back-off arcs cost less
# than 0, and HCLG comes out of determinization with negative epsilon weights to move.
POSITIVE_BACKOFF_WORDS = ["yes", "no", "go"]
POSITIVE_BACKOFF_ARPA = """\\data\\
ngram 1=5
ngram 2=3

\\1-grams:
-0.5 </s>
-99 <s> 0.2
-0.6 yes 0.3
-0.7 no -0.1
-0.9 go

\\2-grams:
-0.1 <s> yes
-0.2 yes no
-0.3 no </s>

\\end\\
"""


@pytest.fixture(scope="module")
def sphinx(tmp_path_factory) -> dict:
    """The en-us model's mdef and transition matrices, and the dictionary's entries for the words used here
    (their lines copied to a small file, which reads faster than the whole dictionary)."""
    wanted = {*WORDS, *POSITIVE_BACKOFF_WORDS}
    lines = (MODEL / "cmudict-en-us.dict").read_text().splitlines()
    small = tmp_path_factory.mktemp("dict") / "words.dict"
    small.write_text("".join(f"{line}\n" for line in lines if line.split(maxsplit=1)[:1] and
                             line.split(maxsplit=1)[0].split("(")[0] in wanted))  # "word" and "word(2)"
    return {"model": read_mdef(MODEL / "en-us" / "mdef"),
            "tmat": read_transition_matrices(MODEL / "en-us" / "transition_matrices"),
            "dictionary": read_cmudict(small)}


def _build(sphinx: dict, out: Path, arpa: str, vocabulary: list[str]) -> dict:
    """HCLG over `vocabulary` and the bigram LM `arpa`, built with the default self-loop scale."""
    model, tmat, dictionary = sphinx["model"], sphinx["tmat"], sphinx["dictionary"]
    (out / "lm.arpa").write_text(arpa)
    words = word_table(vocabulary)
    words.write(out / "words.txt")
    arpa_to_g(out / "lm.arpa", out / "words.txt", out / "G.fst")
    prons = {w: dictionary[w][:1] for w in vocabulary}
    fillers = [model.ci_phones[i] for i in sorted(model.fillers) if i != model.silence]
    base = [p for i, p in enumerate(model.ci_phones) if i not in model.fillers]
    lexicon = lexicon_graph(prons, words, base, "SIL", fillers, SIL_PROB, NOISE_SHARE)
    start = time.perf_counter()
    graph, report, h = compose_hclg(lexicon, out / "G.fst", model, tmat, out)  # self_loop_scale left out
    wall = time.perf_counter() - start
    write_vector_fst(out / "HCLG.vector.fst", graph)
    return {"out": out, "model": model, "tmat": tmat, "prons": prons, "words": words, "fillers": fillers,
            "graph": graph, "report": report, "h": h, "wall": wall, "lexicon": lexicon,
            "fst": kaldifst.StdVectorFst.read(str(out / "HCLG.vector.fst")), "lm": read_arpa(out / "lm.arpa")}


@pytest.fixture(scope="module")
def default_build(sphinx, tmp_path_factory):
    """HCLG over test_hclg.py's seven words and bigram LM."""
    return _build(sphinx, tmp_path_factory.mktemp("hclg_default"), ARPA, WORDS)


@pytest.fixture(scope="module")
def positive_backoff_build(sphinx, tmp_path_factory):
    out = tmp_path_factory.mktemp("hclg_positive")
    return _build(sphinx, out, POSITIVE_BACKOFF_ARPA, POSITIVE_BACKOFF_WORDS)


def _arcs(fst) -> list[list[tuple[int, int, float, int]]]:
    """Per state, its arcs as (ilabel, olabel, weight, nextstate) in stored order."""
    return [[(a.ilabel, a.olabel, round(a.weight.value, 5), a.nextstate)
             for a in kaldifst.ArcIterator(fst, s)] for s in range(fst.num_states)]


def _size(fst) -> tuple[int, int]:
    arcs = _arcs(fst)
    return len(arcs), sum(len(a) for a in arcs)


def test_the_default_self_loop_scale_is_kaldis_one_tenth(default_build) -> None:
    # _expected prices each HMM state's self-loops and exit at SCALE * (-ln p): Kaldi's default 0.1
    assert SCALE == 0.1
    # (the paths of test_hclg.py's first seeds; OpenFst's weight quantization leaves up to ~2e-3 on a path)
    for seed in range(4):
        rng = random.Random(seed)
        words = [rng.choice(WORDS) for _ in range(rng.randint(1, 3))]
        silences = [rng.choice([None, None, "SIL", *default_build["fillers"]]) for _ in range(len(words) + 1)]
        senones, expected = _expected(default_build, words, silences, rng)
        found = _best_cost(default_build["fst"], senones, [default_build["words"][w] for w in words])
        assert found == pytest.approx(expected, abs=2e-3), (words, silences)


def test_hclg_fst_on_disk_is_const_ilabel_sorted_and_holds_the_returned_graph(default_build) -> None:
    const = kaldifst.StdConstFst.read(str(default_build["out"] / "HCLG.fst"))
    assert const is not None
    on_disk = _arcs(const)
    for arcs in on_disk:
        labels = [a[0] for a in arcs]
        assert labels == sorted(labels)  # arc-sorted on input labels, as the decoders' matchers need
    returned = _arcs(default_build["fst"])
    assert len(on_disk) == len(returned) == default_build["graph"].num_states
    assert [sorted(a) for a in on_disk] == [sorted(a) for a in returned]
    assert const.start == default_build["fst"].start


def test_no_epsilon_arc_costs_less_than_zero(default_build, positive_backoff_build) -> None:
    for build in (default_build, positive_backoff_build):
        arrays = build["graph"].to_arrays()
        epsilon = arrays.ilabel == 0
        assert epsilon.any()  # the graph has epsilon arcs (word ends, silence choices) to check
        assert float(arrays.weight[epsilon].min()) >= 0.0


def test_back_off_weights_above_one_keep_every_path_cost(positive_backoff_build) -> None:
    build = positive_backoff_build
    # "yes go": <s> yes listed (-0.1); "yes go" not listed: bow(yes) 0.3 + p(go) -0.9; "go </s>" not listed,
    # go lists no bow (0): p(</s>) -0.5. log10 p = -0.1 + 0.3 - 0.9 - 0.5 = -1.2, cost 1.2 ln 10
    assert _lm_cost(build["lm"], ["yes", "go"]) == pytest.approx(1.2 * math.log(10))
    for seed in range(6):
        rng = random.Random(seed)
        words = [rng.choice(POSITIVE_BACKOFF_WORDS) for _ in range(rng.randint(1, 3))]
        silences = [rng.choice([None, None, "SIL", *build["fillers"]]) for _ in range(len(words) + 1)]
        senones, expected = _expected(build, words, silences, rng)
        found = _best_cost(build["fst"], senones, [build["words"][w] for w in words])
        assert found == pytest.approx(expected, abs=2e-3), (words, silences)


def test_the_graph_is_already_minimal(default_build) -> None:
    copy = kaldifst.StdVectorFst.read(str(default_build["out"] / "HCLG.vector.fst"))
    before = _size(copy)
    kaldifst.minimize_encoded(copy)
    assert _size(copy) == before


def test_stage_sizes_are_the_sizes_of_each_stages_fst(default_build) -> None:
    stages, lexicon = default_build["report"].stages, default_build["lexicon"]
    lg = compose_lg(lexicon.text, default_build["out"] / "G.fst")
    assert stages["LG"][1:] == _size(lg)
    clg, _ = kaldifst.compose_context(disambig_syms=list(lexicon.disambig_ids), context_width=3,
                                      central_position=1, ifst=lg)
    assert stages["CLG"][1:] == _size(clg)
    # Ha from its OpenFst text: an arc line has 4 or 5 fields, a final state 1 or 2
    lines = [line.split() for line in default_build["h"].text.splitlines() if line.strip()]
    states = {int(f[0]) for f in lines} | {int(f[1]) for f in lines if len(f) >= 4}
    assert stages["Ha"][1:] == (max(states) + 1, sum(len(f) >= 4 for f in lines))
    const = kaldifst.StdConstFst.read(str(default_build["out"] / "HCLG.fst"))
    assert stages["HCLG"][1:] == _size(const)
    for name, (_, n_states, n_arcs) in stages.items():
        # each stage is trim: every state but the start is reached by an arc
        assert n_states > 1 and n_arcs >= n_states - 1, name
    assert stages["HCLGa"][1] <= stages["HCLGa_det"][1]  # minimizing never adds states


def test_report_counts_are_hs_and_seconds_add_up_to_the_call(default_build) -> None:
    report, h = default_build["report"], default_build["h"]
    assert (report.windows, report.windows_backed_off, report.entry_labels) == (h.windows, h.backed_off,
                                                                                h.num_entries)
    assert report.windows != report.entry_labels  # the check above tells the two apart
    seconds = np.array([s for s, _, _ in report.stages.values()])
    assert (seconds >= 0).all()
    assert seconds.sum() <= default_build["wall"]  # each stage timed from the end of the one before
