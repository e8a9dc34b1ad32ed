"""The lexicon covers every normalized SLURP word, and espeak-ng's mapped phones agree with CMUdict.

Needs the shared data (SLURP text, CMUdict) and espeak-ng. Run with ``-s`` to see the numbers.
"""

from __future__ import annotations

import re
import shutil
import time
from collections import Counter
from collections.abc import Sequence

import pytest

from specbench.data.resolver import data_file
from specbench.data.slurp import read_split, read_training_text
from specbench.data.text_norm import normalize, normalize_words
from specbench.wfst.lexicon import PHONES, build_lexicon, espeak_pronunciations, read_cmudict

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed"),
]

# Measured with espeak-ng 1.51 (en-us) on the 300 most frequent SLURP training words in CMUdict:
# mean PER 0.011, 281 of 300 exact. The bounds leave room for other espeak-ng versions.
_MAX_MEAN_PER = 0.05
_MIN_EXACT = 0.85
_MAX_ESPEAK_S = 10.0


def _all_sentences() -> list[str]:
    """Deduplicated SLURP training text plus the devel and test texts (raw)."""
    return read_training_text() + [u.sentence for split in ("devel", "test") for u in read_split(split)]


def _edit_distance(a: Sequence[str], b: Sequence[str]) -> int:
    """Levenshtein distance between two phone sequences."""
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        diag, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            diag, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, diag + (x != y))
    return row[-1]


def test_phones_match_cmudict_phone_file() -> None:
    lines = data_file("cmudict/cmudict.phones").read_text(encoding="utf-8").split("\n")
    assert tuple(line.split()[0] for line in lines if line.strip()) == PHONES


def test_slurp_normalization_is_clean() -> None:
    sentences = _all_sentences()
    for sentence in sentences:
        out = normalize(sentence)
        assert re.fullmatch(r"(?:[a-z']+(?: [a-z']+)*)?", out), (sentence, out)
        assert normalize(out) == out
    assert sum(1 for s in sentences if not normalize(s)) == 0


def test_lexicon_covers_slurp() -> None:
    words = {w for sentence in _all_sentences() for w in normalize_words(sentence)}
    cmudict_path = data_file("cmudict/cmudict.dict")
    lexicon = build_lexicon(words, cmudict_path)
    assert lexicon.missing(words) == []
    assert set(lexicon.prons) == words
    oov = sorted(lexicon.from_espeak)
    start = time.perf_counter()
    espeak_pronunciations(oov)
    seconds = time.perf_counter() - start
    print(
        f"\nSLURP vocabulary: {lexicon.num_words} words, {lexicon.num_prons} pronunciations; "
        f"from CMUdict {lexicon.num_words - len(oov)}, from espeak-ng {len(oov)} "
        f"({seconds:.2f} s for espeak-ng on those)"
    )
    assert seconds < _MAX_ESPEAK_S


def test_espeak_mapping_agrees_with_cmudict() -> None:
    cmudict = read_cmudict(data_file("cmudict/cmudict.dict"))
    counts = Counter(w for s in read_training_text(deduplicate=False) for w in normalize_words(s))
    words = [w for w, _ in counts.most_common() if w in cmudict][:300]
    espeak = espeak_pronunciations(words)
    assert set(espeak) == set(words)
    pers = {w: min(_edit_distance(espeak[w], ref) / len(ref) for ref in cmudict[w]) for w in words}
    mean_per = sum(pers.values()) / len(pers)
    exact = sum(1 for per in pers.values() if per == 0) / len(pers)
    worst = sorted(pers, key=lambda w: -pers[w])[:5]
    print(
        f"\nespeak-ng vs CMUdict on {len(words)} frequent words: mean PER {mean_per:.3f}, exact {exact:.1%}; "
        "worst: " + ", ".join(f"{w} {' '.join(espeak[w])} ({pers[w]:.2f})" for w in worst)
    )
    assert mean_per < _MAX_MEAN_PER
    assert exact > _MIN_EXACT
