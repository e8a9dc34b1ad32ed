"""Forced alignment against brute force: on random scores over a few frames, every labelling of the frames
with the blank and the utterance's phones is tried, the best one whose CTC reading (repeats merged, blanks
dropped) spells the words in some pronunciation is kept, and its word times are read off by hand."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from specbench.acoustic.alignment import ForcedAligner
from specbench.wfst.lexicon import PHONES
from specbench.wfst.symbols import token_table
from specbench.wfst.topology import ctc_topology_text

pytestmark = pytest.mark.unit
PRONS = {"a": [("AH",), ("EY",)], "at": [("AE", "T")], "cat": [("K", "AE", "T"), ("K", "T")]}
COLUMNS = {"<blk>": 0, **{p: i + 1 for i, p in enumerate(PHONES)}}
SHIFT = 0.04


@pytest.fixture(scope="module")
def aligner() -> ForcedAligner:
    tokens = token_table(PHONES, 0)
    return ForcedAligner(ctc_topology_text(tokens, PHONES), PRONS, tokens.ids)


def brute_force_times(words: list[str], loglikes: np.ndarray) -> list[tuple[str, float, float]]:
    """The best frame labelling that reads as `words`: a word starts at the frame that emits its first phone
    (a non-blank frame whose label differs from the previous frame's) and ends after the last non-blank
    frame before the next word starts (the last word: before the end of the utterance)."""
    spellings = {}
    for prons in itertools.product(*(PRONS[w] for w in words)):
        spellings.setdefault(tuple(p for pron in prons for p in pron), [len(pron) for pron in prons])
    labels = ["<blk>", *sorted({p for w in words for pron in PRONS[w] for p in pron})]
    best, best_score = None, -np.inf
    frames = len(loglikes)
    for path in itertools.product(labels, repeat=frames):
        emitted = [t for t in range(frames) if path[t] != "<blk>" and (t == 0 or path[t] != path[t - 1])]
        spelled = tuple(path[t] for t in emitted)
        if spelled not in spellings:
            continue
        score = sum(loglikes[t, COLUMNS[label]] for t, label in enumerate(path))
        if score > best_score:
            best, best_score = (path, emitted, spellings[spelled]), score
    assert best is not None
    path, emitted, lengths = best
    first_phone = np.cumsum([0, *lengths[:-1]])
    starts = [emitted[k] for k in first_phone] + [frames]
    out = []
    for i, word in enumerate(words):
        last = max(t for t in range(starts[i], starts[i + 1]) if path[t] != "<blk>")
        out.append((word, round(starts[i] * SHIFT, 3), round((last + 1) * SHIFT, 3)))
    return out


@pytest.mark.parametrize(("words", "frames", "seed"), [
    (["a", "at"], 6, 0), (["a", "at"], 7, 1), (["at", "a"], 6, 2), (["cat"], 7, 3), (["a", "a"], 5, 4),
    (["a", "cat"], 6, 5),
])
def test_word_times_match_the_brute_force_best_labelling(aligner: ForcedAligner, words: list[str], frames: int,
                                                         seed: int) -> None:
    """Random log-scores (not one dominant class a frame), so the best labelling often runs words together
    without a blank between them, ends a word on the last frame, and picks either pronunciation."""
    rng = np.random.default_rng(seed)
    loglikes = rng.normal(0.0, 2.0, (frames, 40)).astype(np.float32)
    got = [(t.word, t.start_s, t.end_s) for t in aligner.align(words, loglikes)]
    assert got == brute_force_times(words, loglikes)


def test_second_pronunciation_is_aligned_where_the_scores_put_it(aligner: ForcedAligner) -> None:
    """Scores that spell 'K T' for 'cat' (its shorter second pronunciation): the word ends after the T on
    frame 2, where brute force over both pronunciations puts it (not a frame later, as 'K AE T' would need)."""
    path = ["<blk>", "K", "T", "<blk>", "<blk>"]
    loglikes = np.full((len(path), 40), -12.0, dtype=np.float32)
    for t, token in enumerate(path):
        loglikes[t, COLUMNS[token]] = -0.01
    times = aligner.align(["cat"], loglikes)
    assert [(t.word, t.start_s, t.end_s) for t in times] == [("cat", 0.04, 0.12)]
    assert brute_force_times(["cat"], loglikes) == [("cat", 0.04, 0.12)]
