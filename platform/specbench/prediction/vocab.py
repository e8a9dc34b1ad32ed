"""The word vocabulary of the prediction LM.

Ids 0-3 are the specials `<pad>` (padding, never predicted), `<s>` (start of sentence), `</s>` (end of
sentence) and `<unk>` (any word outside the vocabulary); the words follow, most frequent first (ties
alphabetically), so a vocabulary built from the same sentences is always the same.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from specbench.errors import ConfigError, DataError

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIALS: tuple[str, ...] = ("<pad>", "<s>", "</s>", "<unk>")
RETRAIN_FIX = "Fix: retrain the model with `specbench train lm jobs/lm.toml`."


@dataclass(frozen=True)
class WordVocab:
    """Token strings by id: `tokens[:4] == SPECIALS`, then the words (no duplicates)."""

    tokens: tuple[str, ...]
    _index: dict[str, int] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        tokens = tuple(self.tokens)
        object.__setattr__(self, "tokens", tokens)
        if tokens[:len(SPECIALS)] != SPECIALS:
            raise DataError(f"vocabulary starts with {list(tokens[:len(SPECIALS)])}, not the special tokens "
                            f"{list(SPECIALS)}. {RETRAIN_FIX}")
        bad = [t for t in tokens if not isinstance(t, str) or t.split() != [t]]  # empty, or any white space
        if bad:
            raise DataError(f"vocabulary entry {bad[0]!r} is not a single word (non-empty, no white space). "
                            f"{RETRAIN_FIX}")
        counts = Counter(tokens)
        duplicates = sorted(t for t, n in counts.items() if n > 1)
        if duplicates:
            raise DataError(f"vocabulary lists {duplicates[:5]} more than once. {RETRAIN_FIX}")
        object.__setattr__(self, "_index", {t: i for i, t in enumerate(tokens)})

    @classmethod
    def from_sentences(cls, sentences: Iterable[Sequence[str]], min_count: int = 1) -> WordVocab:
        """The words seen at least `min_count` times, by descending count then alphabetically. Words spelled
        like a special token are not words (they encode as `<unk>`)."""
        if isinstance(min_count, bool) or not isinstance(min_count, int) or min_count < 1:
            raise ConfigError(f"min_count = {min_count!r}: must be an integer >= 1. Fix: set min_count to 1 "
                              "(keep every word) or more (rarer words become <unk>).")
        counts: Counter[str] = Counter()
        for i, sentence in enumerate(sentences):
            if isinstance(sentence, str):
                raise DataError(f"sentence {i} is a string, not a list of words. Fix: pass text.split().")
            counts.update(sentence)
        for special in SPECIALS:
            counts.pop(special, None)
        words = sorted((w for w, n in counts.items() if n >= min_count), key=lambda w: (-counts[w], w))
        return cls(SPECIALS + tuple(words))

    def encode(self, words: Sequence[str]) -> list[int]:
        """Ids of `words`; words outside the vocabulary (and special-token spellings) become `UNK`."""
        if isinstance(words, str):
            raise DataError(f"encode got the string {words[:40]!r}, not a list of words. "
                            "Fix: pass text.split().")
        index = self._index
        return [i if (i := index.get(w, UNK)) >= len(SPECIALS) else UNK for w in words]

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Token strings of `ids` (specials included as their spelling)."""
        out = []
        for i in ids:
            i = int(i)
            if not 0 <= i < len(self.tokens):
                raise IndexError(f"token id {i} is outside the vocabulary of {len(self.tokens)} tokens")
            out.append(self.tokens[i])
        return out

    def __len__(self) -> int:
        return len(self.tokens)

    def __contains__(self, word: object) -> bool:
        """True for the vocabulary's words (not for the special tokens)."""
        return isinstance(word, str) and self._index.get(word, 0) >= len(SPECIALS)

    def to_list(self) -> list[str]:
        """Plain list for a checkpoint."""
        return list(self.tokens)

    @classmethod
    def from_list(cls, tokens: Sequence[str]) -> WordVocab:
        """Inverse of `to_list`; a malformed list raises `DataError`."""
        if isinstance(tokens, str) or not isinstance(tokens, Sequence):
            raise DataError(f"vocabulary must be a list of strings, got {type(tokens).__name__}. "
                            f"{RETRAIN_FIX}")
        return cls(tuple(tokens))
