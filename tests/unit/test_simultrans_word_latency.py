"""Latency in words, as SimulEval scores text read and written word by word: a source word is read as soon
as any of its BPE pieces is, `</s>` is no word, a target word is written when the output shows it complete
(the next word's first piece, or `</s>`), and LAAL / AL use the reference's word count; in tokens `</s>` counts
on both sides, so wait-k whose output is as long as its source has AL = k; the job's scores carry sacreBLEU's
n-gram precisions and brevity penalty."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import sacrebleu

from specbench.data.multi30k import read_pairs
from specbench.metrics.latency import average_lagging, length_adaptive_average_lagging
from specbench.simultrans.experiment import (
    LATENCY_METRICS,
    score,
    translation_row,
    word_delays,
    word_ends,
    word_starts,
    words_touched,
)
from specbench.simultrans.search import Translation
from specbench.simultrans.tokenizer import Tokenizer

pytestmark = pytest.mark.unit
BPE = Path(__file__).resolve().parents[2] / "models" / "mt_bpe.model"
W = "\u2581"  # sentencepiece's word-start mark


def test_word_ends_count_pieces_up_to_each_words_last() -> None:
    assert word_ends([f"{W}Ein", f"{W}Mann", f"{W}fähr", "t", "."]) == [1, 2, 5]
    assert word_ends([f"{W}Hund"]) == [1] and word_ends([]) == []
    assert word_ends(["t", f"{W}a"]) == [1, 2]  # the first piece starts a word, marked or not
    # "▁" alone shows no word: before another word, at the end, or the whole output (then it is empty)
    assert word_ends([W, f"{W}Mann"]) == [2] and word_ends([f"{W}Mann", W]) == [1] and word_ends([W]) == []
    assert word_ends([W, "3", f"{W}a"]) == [2, 3]  # "▁" then a piece without it: one word, " 3"


def test_word_delays_read_a_word_with_any_piece_and_write_one_when_the_next_begins() -> None:
    source = word_starts([f"{W}Ein", f"{W}Mann", f"{W}fähr", "t", "."])  # 3 words, 5 pieces, then </s>
    target = word_ends([f"{W}A", f"{W}man", f"{W}ri", "des", "."])  # 3 words
    # token delays per target piece: pieces read (</s> is the 6th); then the delay of the target's </s>
    assert word_delays([1, 2, 3, 4, 6], 6, source, target) == [2, 3, 3]  # "A" is known whole with "man"
    assert word_delays([1, 3, 4, 4, 4], 4, source, target) == [3, 3, 3]  # "fähr" without "t." reads word 3
    assert word_delays([1, 1, 2, 2, 2], 2, source, target) == [1, 2, 2]  # </s> decides the last word
    assert word_delays([], 6, source, []) == []


def test_words_touched_by_a_read_never_count_eos() -> None:
    source = word_starts([f"{W}Ein", f"{W}Mann", f"{W}fähr", "t", "."])  # [0, 1, 2]
    assert [words_touched(source, g) for g in range(7)] == [0, 1, 2, 3, 3, 3, 3]


def test_words_touched_equal_a_count_of_words_with_a_piece_read() -> None:
    """Against brute force on random piece sequences, lone "▁" pieces among them: a lone "▁" read before a
    word does not read it (it is no piece of any word)."""
    assert [words_touched(word_starts([f"{W}a", W, f"{W}b"]), g) for g in range(4)] == [0, 1, 1, 2]
    rng = random.Random(7)
    for _ in range(2000):
        pieces = [rng.choice([W, f"{W}x", "y", f"{W}z", ".", f"{W} "]) for _ in range(rng.randint(0, 7))]
        text = "".join(pieces).replace(W, " ")
        word_of_char = [None if c.isspace() else len(text[:i + 1].split()) - 1 for i, c in enumerate(text)]
        owner, at = [], 0  # per piece, the words its characters fall in
        for piece in pieces:
            owner.append({word_of_char[i] for i in range(at, at + len(piece))} - {None})
            at += len(piece)
        for read in range(len(pieces) + 2):
            assert words_touched(word_starts(pieces), read) == len(set().union(*owner[:read])), (pieces, read)
        assert len(word_starts(pieces)) == len(word_ends(pieces)) == len(text.split()), pieces
        assert len(word_starts(pieces)) == len(text.split())


def test_token_latency_counts_eos_on_both_sides_so_wait_k_lags_k() -> None:
    m = 12  # source pieces; </s> makes |x| = 13; an output of 12 pieces and its </s>
    for k in (1, 3, 5):
        delays = [min(k + i, m + 1) for i in range(m + 1)]
        assert average_lagging(delays, m + 1) == pytest.approx(k)
        assert length_adaptive_average_lagging(delays, m + 1, m + 1) == pytest.approx(k)


def test_a_wait_k_row_of_a_real_sentence_lags_k_tokens() -> None:
    """The row a decoded shard makes (`translation_row`): with a wait-k schedule (delays min(k + i, |x|) and
    </s> on the same schedule, as `wait_k` records them, tested in test_simultrans_search) and an output as
    long as the source, the token AL and LAAL are exactly k; the word delays follow the word rules."""
    tok = Tokenizer(BPE)
    source, target = read_pairs("test_2016_flickr")[0]
    src = tok.encode(source)
    out = (tok.encode(target) * 3)[:len(src)]  # as many pieces as the source
    n = len(src) + 1  # </s> counted
    for k in (1, 2, 3):
        t = Translation(tuple(out), tuple(min(k + i, n) for i in range(len(out))), min(k + len(out), n))
        row = translation_row(tok, src, t)
        assert row["delays"] == [*t.delays, t.end_delay] and row["source_tokens"] == n
        assert row["word_delays"] == word_delays(t.delays, t.end_delay, word_starts(tok.pieces(src)),
                                                 word_ends(tok.pieces(out)))
        got = score([row], [target], [len(out)])
        assert got["al"] == pytest.approx(k) and got["laal"] == pytest.approx(k)


def test_real_sentences_have_as_many_words_as_whitespace_says() -> None:
    tok = Tokenizer(BPE)
    pairs = read_pairs("test_2017_mscoco")[:200]
    for source, target in pairs:
        assert len(word_ends(tok.pieces(tok.encode(source)))) == len(source.split())
        assert len(word_ends(tok.pieces(tok.encode(target)))) == len(target.split())


def test_score_reports_word_latency_against_the_reference_word_count_and_bleu_statistics() -> None:
    # one sentence: 3 source words (5 pieces + </s>), a 3-word hypothesis of 5 pieces and its </s> (the
    # delays hold all 6), whose words are written after 1, 2 and 3 source words; a 4-word reference
    rows = [{"hypothesis": "A man rides.", "target_tokens": 5, "delays": [1, 2, 3, 4, 6, 6], "source_tokens": 6,
             "word_delays": [1, 2, 3], "source_words": 3}]
    references = ["A man rides bikes."]
    out = score(rows, references, [6])
    assert out["laal_words"] == pytest.approx(length_adaptive_average_lagging([1, 2, 3], 3, 4))
    assert out["al_ref_words"] == pytest.approx(average_lagging([1, 2, 3], 3, 4))
    assert out["al_words"] == pytest.approx(1.0)  # |y| = |x|: wait-1
    assert out["al"] == pytest.approx(average_lagging([1, 2, 3, 4, 6, 6], 6))  # tokens, </s> counted
    assert out["laal"] == pytest.approx(length_adaptive_average_lagging([1, 2, 3, 4, 6, 6], 6, 7))  # 6 + </s>
    # AP by hand: the delays' sum over |x| |y|, and over |x| |y*| with the reference's 6 pieces and </s>
    assert out["ap"] == pytest.approx(22 / (6 * 6)) and out["ap_simuleval"] == pytest.approx(22 / (6 * 7))
    assert out["length_ratio"] == pytest.approx(5 / 6)  # target pieces over reference pieces, </s> not counted
    bleu = sacrebleu.corpus_bleu(["A man rides."], [references])
    assert [out[f"precision_{n}"] for n in range(1, 5)] == pytest.approx(bleu.precisions)
    assert out["brevity_penalty"] == pytest.approx(bleu.bp) and out["brevity_penalty"] < 1


def test_empty_outputs_are_counted_and_left_out_of_every_latency_mean() -> None:
    """As SimulEval skips a sentence with no delays: an empty output (here with its </s> written after 2 of
    6 source pieces, or for an empty source) adds nothing to the latency means, and `empty_outputs` counts
    it; `ended_before_source` is the share of sentences with a source whose </s> came before it was read."""
    full = {"hypothesis": "A man rides.", "target_tokens": 5, "delays": [1, 2, 3, 4, 6, 6], "source_tokens": 6,
            "word_delays": [1, 2, 3], "source_words": 3}
    early_empty = {"hypothesis": "", "target_tokens": 0, "delays": [2], "source_tokens": 6, "word_delays": [],
                   "source_words": 3}
    no_source = {"hypothesis": "", "target_tokens": 0, "delays": [], "source_tokens": 0, "word_delays": [],
                 "source_words": 0}
    alone = score([full], ["A man rides bikes."], [6])
    mixed = score([full, early_empty, no_source], ["A man rides bikes.", "A dog runs.", "x"], [6, 4, 1])
    for metric in LATENCY_METRICS:
        assert mixed[metric] == pytest.approx(alone[metric]), metric
    assert alone["empty_outputs"] == 0 and mixed["empty_outputs"] == 2
    assert alone["ended_before_source"] == 0.0 and mixed["ended_before_source"] == pytest.approx(0.5)
    nothing = score([no_source], ["x"], [1])
    assert nothing["empty_outputs"] == 1 and all(math.isnan(nothing[m]) for m in LATENCY_METRICS)


def test_ended_before_source_reads_the_delay_of_the_targets_eos() -> None:
    tok = Tokenizer(BPE)
    source, target = read_pairs("test_2016_flickr")[1]
    src = tok.encode(source)
    out = tok.encode(target)[:3]
    n = len(src) + 1  # </s> counted
    rows = [translation_row(tok, src, Translation(tuple(out), (1, 2, 3), end)) for end in (3, n - 1, n)]
    assert [score([r], [target], [len(out)])["ended_before_source"] for r in rows] == [1.0, 1.0, 0.0]


def _event_log_word_delays(source_pieces: list[str], target_pieces: list[str], token_delays: list[int],
                           end_delay: int) -> list[int]:
    """Word delays by replaying the piece-level READ/WRITE events through a word-by-word reader and writer:
    before each target piece (and before </s>) the agent READs pieces until it has read its delay; the reader
    hands over a source word whole the moment any of its pieces is asked for (the piece after the last one,
    </s>, is no word); the writer emits a target word once the next word starts or </s> is written, with
    the source words handed over by then."""
    starts = [i == 0 or p.startswith(W) for i, p in enumerate(source_pieces)]
    read = words_given = 0
    pending = False  # a target word started and not emitted yet
    emitted: list[int] = []
    for piece, delay in [*zip(target_pieces, token_delays), (None, end_delay)]:
        while read < delay:  # READ one piece
            read += 1
            if read <= len(source_pieces) and (starts[read - 1] or words_given == 0):
                words_given += 1
        new_word = piece is None or not emitted and not pending or piece.startswith(W)
        if new_word and pending:
            emitted.append(words_given)
            pending = False
        if piece is not None:  # WRITE
            pending = True
    return emitted


def test_word_delays_equal_an_event_log_replay_on_random_segmentations() -> None:
    rng = random.Random(5)
    for _ in range(500):
        source = [(W if rng.random() < 0.6 else "") + rng.choice("abcdef") for _ in range(rng.randint(1, 9))]
        target = [(W if rng.random() < 0.6 else "") + rng.choice("uvwxyz") for _ in range(rng.randint(0, 9))]
        n = len(source) + 1  # </s> counted
        delays = sorted(rng.randint(0, n) for _ in target)
        end = rng.randint(delays[-1] if delays else 0, n)
        expected = _event_log_word_delays(source, target, delays, end)
        assert word_delays(delays, end, word_starts(source), word_ends(target)) == expected, (source, target, delays)
