"""Simultrans test sets on Multi30k: a split's first sentences, references, BPE lengths, shards and too-long
source; a pooled set's order, BLEU gains and latency differences (better minus baseline)."""

from __future__ import annotations

from pathlib import Path

import pytest
import sacrebleu
import sentencepiece as spm

from specbench.config import SimultransConfig
from specbench.data.multi30k import read_lines
from specbench.errors import DataError
from specbench.experiments.simultrans_sets import PooledEvaluator, SplitEvaluator
from specbench.simultrans.experiment import Method
from specbench.simultrans.tokenizer import read_model_proto

pytestmark = pytest.mark.unit
BPE = Path(__file__).resolve().parents[2] / "models" / "mt_bpe.model"
SP, CFG = spm.SentencePieceProcessor(model_proto=read_model_proto(BPE)), SimultransConfig(shard_size=2)
GREEDY, TAIL, SBS = (Method("waitk", "m.pt", search=s, k=3) for s in ("greedy", "tail", "sbs"))


def test_a_split_holds_its_first_sentences_target_references_and_shards() -> None:
    de, en = read_lines("val", "de"), read_lines("val", "en")
    ev = SplitEvaluator(CFG, "val", 5, BPE)
    assert ev.references == en[:5] and ev.reference_tokens == [len(SP.encode(t)) for t in en[:5]]  # no </s>
    assert [s.sentences for s in ev.shards(TAIL)] == [de[0:2], de[2:4], de[4:5]]
    assert len(SplitEvaluator(CFG, "val", 0, BPE).pairs) == len(de)  # limit 0: all
    counts = [len(SP.encode(s)) + 1 for s in de[:6]]  # pieces and </s>
    top = max(counts)
    SplitEvaluator(CFG, "val", 6, BPE, longest_source=top)  # fits exactly
    with pytest.raises(DataError, match=rf"val \(de\), line {counts.index(top) + 1}: {top} source tokens"):
        SplitEvaluator(CFG, "val", 6, BPE, longest_source=top - 1)


def test_a_pooled_set_scores_its_parts_in_order_and_decomposes_gains() -> None:
    parts = [SplitEvaluator(CFG, "val", 2, BPE), SplitEvaluator(CFG, "test_2016_flickr", 3, BPE)]
    refs = read_lines("val", "en")[:2] + read_lines("test_2016_flickr", "en")[:3]
    hyps = {SBS: refs, TAIL: [r + " a dog" if i % 2 else r[:-9] for i, r in enumerate(refs)],
            GREEDY: read_lines("val", "de")[:2] + read_lines("test_2016_flickr", "de")[:3]}
    for m, lag in ((SBS, 2), (TAIL, 1), (GREEDY, 4)):
        rows = [{"hypothesis": h, "target_tokens": n, "delays": list(range(lag, lag + n + 1)), "source_tokens": 20,
                 "word_delays": [min(i + lag, 9) for i in range(n)], "source_words": 9}
                for h, n in ((h, len(h.split())) for h in hyps[m])]
        parts[0].rows[m], parts[1].rows[m] = rows[:2], rows[2:]
    pooled = PooledEvaluator(parts)
    assert pooled.references == refs and pooled.hypotheses(TAIL) == hyps[TAIL]
    assert pooled.reference_tokens == [len(SP.encode(t)) for t in refs]
    out, columns = pooled.decomposition({"greedy": GREEDY, "tail": TAIL, "sbs": SBS}, samples=20), []
    for name, a, b in (("speculation", SBS, TAIL), ("sbs_vs_greedy", SBS, GREEDY), ("tail_vs_greedy", TAIL, GREEDY)):
        bleu = [sacrebleu.corpus_bleu(hyps[m], [refs]).score for m in (a, b)]
        assert out[name]["gain"] == pytest.approx(bleu[0] - bleu[1], abs=1e-6)
        columns.append([out[name][f"{m}_increase"] for m in ("laal", "al_ref", "al")])
        assert columns[-1] == [pooled(a)[m] - pooled(b)[m] for m in ("laal_words", "al_ref_words", "al_words")]
    assert len(set(zip(*columns, strict=True))) == 3, columns  # the three latencies differ, so each is checked


def test_a_latency_difference_is_paired_over_the_sentences_both_systems_wrote() -> None:
    """SBS leaves the slow sentence empty: its latency mean alone would look over a word faster, though every
    sentence both systems wrote has the same latency."""
    split = SplitEvaluator(CFG, "val", 4, BPE)
    for m in (SBS, TAIL):
        split.rows[m] = [{"hypothesis": "a dog runs" if m == TAIL or i < 3 else "", "target_tokens": 3,
                          "delays": [1, 2, 3, 4], "source_tokens": 20, "source_words": 9,
                          "word_delays": [] if m == SBS and i == 3 else [8 if i == 3 else 3] * 3} for i in range(4)]
    out = split.compare(SBS, TAIL, samples=10)
    assert out["latency_sentences"] == 3 and out["laal_increase"] == out["al_increase"] == 0.0
    assert split(SBS)["laal_words"] - split(TAIL)["laal_words"] < -1  # the unpaired means
    split.rows[TAIL] = [{**r, "hypothesis": "", "word_delays": []} if i < 3 else r for i, r in enumerate(split.rows[TAIL])]
    out = split.compare(SBS, TAIL, samples=10)  # no sentence both wrote: no latency difference, no crash
    assert out["latency_sentences"] == 0 and all(out[k] != out[k] for k in ("laal_increase", "al_increase"))
