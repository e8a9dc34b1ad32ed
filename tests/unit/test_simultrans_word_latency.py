"""Latency in words, as SimulEval scores text: a source word is read once its last BPE piece is read, `</s>`
is no word, a target word is written with its last piece, and LAAL / AL use the reference's word count; the
job's scores carry sacreBLEU's n-gram precisions and brevity penalty."""

from __future__ import annotations

from pathlib import Path

import pytest
import sacrebleu

from specbench.data.multi30k import read_pairs
from specbench.metrics.latency import average_lagging, length_adaptive_average_lagging
from specbench.simultrans.experiment import score, word_delays, word_ends
from specbench.simultrans.tokenizer import Tokenizer

pytestmark = pytest.mark.unit
BPE = Path(__file__).resolve().parents[2] / "models" / "mt_bpe.model"
W = "\u2581"  # sentencepiece's word-start mark


def test_word_ends_count_pieces_up_to_each_words_last() -> None:
    assert word_ends([f"{W}Ein", f"{W}Mann", f"{W}fähr", "t", "."]) == [1, 2, 5]
    assert word_ends([f"{W}Hund"]) == [1] and word_ends([]) == []
    assert word_ends(["t", f"{W}a"]) == [1, 2]  # the first piece starts a word, marked or not


def test_word_delays_read_a_word_with_its_last_piece_and_never_count_eos() -> None:
    source = word_ends([f"{W}Ein", f"{W}Mann", f"{W}fähr", "t", "."])  # 3 words, 5 pieces, then </s>
    target = word_ends([f"{W}A", f"{W}man", f"{W}ri", "des", "."])  # 3 words
    # token delays per target piece: pieces read (</s> is the 6th)
    assert word_delays([1, 2, 3, 4, 6], source, target) == [1, 2, 3]
    assert word_delays([1, 3, 4, 4, 4], source, target) == [1, 2, 2]  # "fähr" without "t." is not read
    assert word_delays([], source, []) == []


def test_real_sentences_have_as_many_words_as_whitespace_says() -> None:
    tok = Tokenizer(BPE)
    pairs = read_pairs("test_2017_mscoco")[:200]
    for source, target in pairs:
        assert len(word_ends(tok.pieces(tok.encode(source)))) == len(source.split())
        assert len(word_ends(tok.pieces(tok.encode(target)))) == len(target.split())


def test_score_reports_word_latency_against_the_reference_word_count_and_bleu_statistics() -> None:
    # one sentence: 3 source words (5 pieces + </s>), a 3-word hypothesis whose words are written after
    # 1, 2 and 3 source words; a 4-word reference
    rows = [{"hypothesis": "A man rides.", "target_tokens": 5, "delays": [1, 2, 3, 4, 6], "source_tokens": 6,
             "word_delays": [1, 2, 3], "source_words": 3}]
    references = ["A man rides bikes."]
    out = score(rows, references, [6])
    assert out["laal_words"] == pytest.approx(length_adaptive_average_lagging([1, 2, 3], 3, 4))
    assert out["al_ref_words"] == pytest.approx(average_lagging([1, 2, 3], 3, 4))
    assert out["al_words"] == pytest.approx(1.0)  # |y| = |x|: wait-1
    assert out["al"] == pytest.approx(average_lagging([1, 2, 3, 4, 6], 6))  # tokens, </s> counted
    bleu = sacrebleu.corpus_bleu(["A man rides."], [references])
    assert [out[f"precision_{n}"] for n in range(1, 5)] == pytest.approx(bleu.precisions)
    assert out["brevity_penalty"] == pytest.approx(bleu.bp) and out["brevity_penalty"] < 1
    empty = {"hypothesis": "", "target_tokens": 0, "delays": [], "source_tokens": 0, "word_delays": [],
             "source_words": 0}
    assert score([empty], ["x"], [1])["laal_words"] == 0.0
