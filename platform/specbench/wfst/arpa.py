"""ARPA back-off language models: read, score, write, and spread the unknown-word mass.

Log probabilities are log10, as in the ARPA format. The back-off rule (Katz/KenLM):
p(w | h) = p*(w | h) if the n-gram (h, w) is listed, else bow(h) * p(w | h'), h' = h without its
oldest word; bow of an unlisted context is 1 (log10 0).

`spread_unknown` removes `<unk>` and lists each known-but-unseen vocabulary word as a unigram: with an equal
share of p(<unk>) when p(<unk>) is the mass of all unseen words together (lmplz `--interpolate_unigrams 0`), or
with p(<unk>) itself when it is one word's share of a uniform distribution (lmplz's unigram interpolation over
a padded vocabulary). The graph can then recognize words that the training text never had (an assistant knows
its entity lists) while every context's distribution still sums to one (to within that one share).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from specbench.errors import ArpaFormatError

BOS, EOS, UNK = "<s>", "</s>", "<unk>"
_COUNT = re.compile(r"^ngram (\d+)=(\d+)$")
_SECTION = re.compile(r"^\\(\d+)-grams:$")
_FIX = ("Fix: rebuild the LM with `specbench graph build JOB.toml --force` (a cached graph is otherwise reused as "
        "it is), or check that the file is an ARPA model.")


@dataclass
class ArpaModel:
    """An n-gram model: `ngrams[n-1][words] = (log10 p, log10 bow)`, words a tuple of length n."""

    order: int
    ngrams: list[dict[tuple[str, ...], tuple[float, float]]] = field(default_factory=list)

    @property
    def counts(self) -> list[int]:
        return [len(level) for level in self.ngrams]

    @property
    def vocabulary(self) -> set[str]:
        return {w[0] for w in self.ngrams[0]}

    def log10_prob(self, word: str, context: Sequence[str]) -> float:
        """log10 p(word | context), backing off; `context` oldest first. Unknown words score as <unk> and
        are <unk> in the context (as in KenLM and SRILM)."""
        known = self.ngrams[0]
        if (word,) not in known:
            word = UNK
            if (UNK,) not in known:
                return -math.inf
        context = tuple(w if (w,) in known else UNK for w in context[max(0, len(context) - self.order + 1):])
        penalty = 0.0
        while True:
            hit = self.ngrams[len(context)].get(context + (word,))
            if hit is not None:
                return penalty + hit[0]
            bow = self.ngrams[len(context) - 1].get(context) if context else None
            penalty += bow[1] if bow is not None else 0.0
            context = context[1:]

    def sentence_log10(self, words: Sequence[str]) -> float:
        """log10 p(words </s> | <s>)."""
        history = [BOS]
        total = 0.0
        for w in [*words, EOS]:
            total += self.log10_prob(w, history)
            history.append(w)
        return total

    def perplexity(self, sentences: Iterable[Sequence[str]]) -> float:
        """Perplexity over all tokens including `</s>` (not `<s>`), unknown words scored as `<unk>`; without
        `<unk>` they are left out (`oov_count`), as in KenLM's and SRILM's perplexity without OOVs."""
        total, count, known = 0.0, 0, self.ngrams[0]
        for words in sentences:
            history = [BOS]
            for w in [*words, EOS]:
                if (w,) in known or (UNK,) in known:
                    total, count = total + self.log10_prob(w, history), count + 1
                history.append(w)
        return 10 ** (-total / max(count, 1))

    def oov_count(self, sentences: Iterable[Sequence[str]]) -> int:
        """Tokens that `perplexity` leaves out."""
        known = self.ngrams[0]
        return 0 if (UNK,) in known else sum((w,) not in known for s in sentences for w in [*s, EOS])


def _at(path: Path, lines: list[str], i: int) -> tuple[str, str]:
    if i >= len(lines):
        return f"{path}, at its end (after line {len(lines)})", "nothing"
    return f"{path}, line {i + 1}", repr(lines[i].strip()[:80])


def _parse_header(lines: list[str], path: Path) -> tuple[list[int], int]:
    i = 0
    while i < len(lines) and (not lines[i].strip() or lines[i].startswith("#")):
        i += 1
    if i >= len(lines) or lines[i].strip() != "\\data\\":
        where, found = _at(path, lines, i)
        raise ArpaFormatError(f"{where}: expected the ARPA header '\\data\\', found {found}; only blank "
                              f"lines and lines starting with '#' may come before it (as in KenLM). {_FIX}")
    counts: list[int] = []
    i += 1
    while i < len(lines) and lines[i].strip():
        m = _COUNT.match(lines[i].strip())
        if not m or int(m.group(1)) != len(counts) + 1:
            raise ArpaFormatError(f"{path}, line {i + 1}: expected 'ngram {len(counts) + 1}=COUNT', "
                                  f"found {lines[i].strip()!r}. {_FIX}")
        counts.append(int(m.group(2)))
        i += 1
    if not counts:
        raise ArpaFormatError(f"{path}: the header lists no 'ngram N=COUNT' lines. {_FIX}")
    return counts, i


def _parse_entry(line: str, n: int, path: Path, lineno: int) -> tuple[tuple[str, ...], float, float]:
    parts = line.split()
    if len(parts) not in (n + 1, n + 2):
        raise ArpaFormatError(f"{path}, line {lineno}: a {n}-gram line needs a log10 probability, {n} words "
                              f"and an optional back-off weight; found {line.strip()!r}. {_FIX}")
    try:
        logp = float(parts[0])
        bow = float(parts[n + 1]) if len(parts) == n + 2 else 0.0
    except ValueError as err:
        raise ArpaFormatError(f"{path}, line {lineno}: not a number in {line.strip()!r}. {_FIX}") from err
    if not logp <= 0.0 or math.isnan(bow) or bow == math.inf:  # NaN fails every comparison
        raise ArpaFormatError(f"{path}, line {lineno}: {line.strip()!r} holds no valid log10 probability "
                              f"(a number <= 0) and back-off weight (a finite number). {_FIX}")
    return tuple(parts[1:n + 1]), max(logp, ZERO_LOG10), max(bow, ZERO_LOG10)


# A probability of zero (lmplz writes -inf for a word its discounting left nothing, which Kaldi's arpa2fst
# refuses by aborting the process) is read as SRILM writes it, -99: finite, and never on a best path.
ZERO_LOG10 = -99.0


def read_arpa(path: Path) -> ArpaModel:
    """Parse an ARPA file (-inf read as `ZERO_LOG10`); any malformed line raises `ArpaFormatError` naming the
    file and line: a value that is no log10 probability (NaN, > 0) or back-off weight, an n-gram listed twice, or one whose first n - 1
    words are not listed as an (n - 1)-gram (KenLM refuses those, and G could never reach them). As KenLM,
    it skips blank lines and, before `\\data\\`, lines starting with '#'."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise ArpaFormatError(f"{path}: cannot read the ARPA file ({err}). {_FIX}") from err
    counts, i = _parse_header(lines, path)
    model = ArpaModel(order=len(counts))
    for n in range(1, len(counts) + 1):
        while i < len(lines) and not lines[i].strip():
            i += 1
        m = _SECTION.match(lines[i].strip()) if i < len(lines) else None
        if not m or int(m.group(1)) != n:
            where, found = _at(path, lines, i)
            raise ArpaFormatError(f"{where}: expected '\\{n}-grams:', found {found}. {_FIX}")
        i += 1
        level: dict[tuple[str, ...], tuple[float, float]] = {}
        first = i
        while i < len(lines) and not lines[i].startswith("\\"):
            if not lines[i].strip():  # as KenLM and Kaldi read them
                i += 1
                continue
            words, logp, bow = _parse_entry(lines[i], n, path, i + 1)
            where, gram = f"{path}, line {i + 1}: the {n}-gram {' '.join(words)!r}", " ".join(words[:-1])
            if words in level:
                again = next(j for j in range(first, i) if tuple(lines[j].split()[1:n + 1]) == words)
                raise ArpaFormatError(f"{where} is listed again (first on line {again + 1}). {_FIX}")
            if n > 1 and (words[-1],) not in model.ngrams[0]:
                raise ArpaFormatError(f"{where} ends in a word that is not among the 1-grams. {_FIX}")
            if n > 1 and words[:-1] not in model.ngrams[n - 2]:
                # G never reaches such an n-gram (arpa2fst gives its context a state no arc leads to) and
                # KenLM refuses it: scoring it here would make the model and its graph disagree
                raise ArpaFormatError(f"{where} has no {n - 1}-gram {gram!r} listed; every n-gram's first "
                                      f"n - 1 words must be, as lmplz and SRILM write them. {_FIX}")
            level[words] = (logp, bow)
            i += 1
        if len(level) != counts[n - 1]:
            raise ArpaFormatError(f"{path}, line {first}: the header promises {counts[n - 1]} {n}-grams but "
                                  f"this section has {len(level)} (truncated?). {_FIX}")
        model.ngrams.append(level)
    while i < len(lines) and not lines[i].strip():
        i += 1
    if i >= len(lines) or lines[i].strip() != "\\end\\":
        where, found = _at(path, lines, i)
        raise ArpaFormatError(f"{where}: expected the closing '\\end\\', found {found} "
                              f"(truncated, or a section not in the header?). {_FIX}")
    return model


def write_arpa(model: ArpaModel, path: Path) -> None:
    """Write `model` in ARPA format (n-grams in insertion order)."""
    out = ["\\data\\", *(f"ngram {n}={c}" for n, c in enumerate(model.counts, 1)), ""]
    for n, level in enumerate(model.ngrams, 1):
        out.append(f"\\{n}-grams:")
        for words, (logp, bow) in level.items():
            has_bow = n < model.order and bow != 0.0
            out.append(f"{logp:.7g}\t{' '.join(words)}" + (f"\t{bow:.7g}" if has_bow else ""))
        out.append("")
    out.append("\\end\\")
    Path(path).write_text("\n".join(out) + "\n", encoding="utf-8")


def spread_unknown(model: ArpaModel, unseen_words: Iterable[str], *, unk_is_one_word: bool = False) -> ArpaModel:
    """A copy of `model` with `<unk>` replaced by the given words, each with p(<unk>) / count, or, with
    `unk_is_one_word`, each with p(<unk>): lmplz's unigram interpolation over a vocabulary padded to the
    graph's gives `<unk>` one padded word's uniform share, which is what each unseen word is due.

    Words already in the model are ignored. Without unseen words, `<unk>` is simply dropped (the graph has
    no unknown-word token). Higher-order n-grams never contain `<unk>` (lmplz sees no `<unk>` in text).
    """
    words = sorted(set(unseen_words) - model.vocabulary)
    unigrams = dict(model.ngrams[0])
    unk = unigrams.pop((UNK,), None)
    if words:
        if unk is None:
            raise ArpaFormatError("the ARPA model has no <unk> unigram to spread over unseen words. "
                                  "Fix: estimate it with lmplz (which always writes <unk>).")
        share = unk[0] if unk_is_one_word else unk[0] - math.log10(len(words))
        unigrams.update({(w,): (share, 0.0) for w in words})
    return ArpaModel(order=model.order, ngrams=[unigrams, *model.ngrams[1:]])
