"""One decoding configuration over a shard of sentences (a Ray task), and the scoring of a whole run:
sacreBLEU on detokenized output (cased, 13a; plus lower-cased, as some papers report) with its n-gram
precisions and brevity penalty, and the latency metrics of `metrics.latency` averaged over sentences.

Latency is measured in two units. In words (the headline, as SimulEval scores text read and written word by
word): a source word counts as read as soon as any of its BPE pieces is (a word-by-word reader receives the
whole word), `</s>` is not a word, a target word is written when the output shows it complete (with the
first piece of the next word, or with `</s>` for the last), and the reference length |y*| is its number of
words; `laal_words` (LAAL), `al_ref_words` (AL with the reference length, SimulEval's `ALScorer`) and
`al_words` (STACL's AL, with the hypothesis length). In BPE tokens, `</s>` counted on both sides (the source
and the target, whose `</s>` is written at the translation's `end_delay`), so that wait-k with an output as
long as its source has AL = k: `al`, `al_simuleval`, `laal`, `dal`, `ap`, `ap_simuleval`, `cw`.

As SimulEval's latency scorers skip a sentence with no delays, every latency is averaged over the sentences
whose output has at least one word (an empty output has no word written, so nothing to lag); `empty_outputs`
counts the others (their number, not a share; an empty source gives an empty output). `ended_before_source`
is the share of sentences (with a non-empty source) whose output ended, `</s>` written or the length limit
reached, before the whole source was read (`end_delay` < |x|, `</s>` counted): such an output stops waiting
early, which lowers its AL and LAAL without its having translated more (`search.py`, `force_finish`)."""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sacrebleu

from specbench.metrics.latency import (
    average_lagging,
    average_proportion,
    consecutive_wait,
    differentiable_average_lagging,
    length_adaptive_average_lagging,
)
from specbench.simultrans.checkpoint import MtCheckpoint, load_mt
from specbench.simultrans.search import Translation, adaptive, full_sentence, wait_k
from specbench.simultrans.tokenizer import EOS, Tokenizer

_MODELS: dict[tuple[str, str], MtCheckpoint] = {}


@dataclass(frozen=True)
class Method:
    """A decoding configuration. kind: "waitk" (k, search in greedy/tail/sbs), "adaptive" (threshold,
    search in greedy/beam/sbs), "full" (beam). model: path of the checkpoint."""

    kind: str
    model: str
    search: str = "greedy"
    k: int = 0
    threshold: float = 0.0
    beam: int = 1
    window: int = 0
    length_normalized: bool = True  # rank speculations per token (False: by summed log-probability, eq. 4)
    force_finish: bool = False  # no </s> before the whole source is read (search.py); waitk and adaptive only

    def __post_init__(self) -> None:
        if self.force_finish and self.kind == "full":
            raise ValueError(f"Method {self.model}: force_finish applies to kind 'waitk' or 'adaptive', not 'full' "
                             "(the full-sentence search reads the whole source first). Fix: leave it False")

    @property
    def label(self) -> str:
        name = Path(self.model).stem
        if self.kind == "full":
            return f"{name}/full/beam{self.beam}"
        point = f"k{self.k}" if self.kind == "waitk" else f"conf{self.threshold:g}"
        extra = "" if self.search == "greedy" else f"/b{self.beam}" + (f"w{self.window}" if self.search == "sbs" else "")
        ranked = self.search == "sbs" or (self.kind == "adaptive" and self.search == "beam")  # best_speculation
        ranking = "" if self.length_normalized or not ranked else "/sum"
        finish = "/force_finish" if self.force_finish else ""
        return f"{name}/{self.kind}/{point}/{self.search}{extra}{ranking}{finish}"


@dataclass(frozen=True)
class Shard:
    method: Method
    bpe: str
    sentences: list[str]  # source text


def model_for(path: str, bpe: str) -> MtCheckpoint:
    """The checkpoint, loaded once per process."""
    key = (path, bpe)
    if key not in _MODELS:
        _MODELS[key] = load_mt(Path(path), Path(bpe))
    return _MODELS[key]


def decode_shard(shard: Shard) -> list[dict[str, Any]]:
    """Translate a shard: per sentence the detokenized hypothesis, its token count, delays, source length.
    An empty source sentence gets an empty translation (nothing to wait for)."""
    ckpt = model_for(shard.method.model, shard.bpe)
    tok = ckpt.tokenizer
    ids = [tok.encode(s) for s in shard.sentences]
    todo = [i for i, s in enumerate(ids) if s]
    sources = [ids[i] + [EOS] for i in todo]
    out: list[Translation] = _run(ckpt, shard.method, sources) if sources else []
    rows = [{"hypothesis": "", "target_tokens": 0, "delays": [], "source_tokens": 0, "word_delays": [],
             "source_words": 0} for _ in ids]
    for i, t in zip(todo, out, strict=True):
        rows[i] = translation_row(tok, ids[i], t)
    return rows


def translation_row(tok: Tokenizer, source_ids: list[int], t: Translation) -> dict[str, Any]:
    """The row `score` reads for one translation of a non-empty source (its pieces without `</s>`): token
    delays with the target's `</s>` written at `end_delay`, and the word delays."""
    source_starts = word_starts(tok.pieces(source_ids))
    return {"hypothesis": tok.decode(t.tokens), "target_tokens": len(t.tokens),
            "delays": [*t.delays, t.end_delay], "source_tokens": len(source_ids) + 1,
            "source_words": len(source_starts),
            "word_delays": word_delays(t.delays, t.end_delay, source_starts, word_ends(tok.pieces(t.tokens)))}


def _word_spans(pieces: list[str]) -> list[tuple[int, int]]:
    """Per word, its pieces' [start, end): from its first piece that shows a character to its last piece (a
    piece starting with "▁" starts a word; the first piece always does). A run of pieces that shows nothing
    ("▁" alone, before another word or at the end) is no word: the detokenized text has none there."""
    starts = [0] + [i for i in range(1, len(pieces)) if pieces[i].startswith("\u2581")]
    shown = [i for i, piece in enumerate(pieces) if piece.replace("\u2581", "").strip()]
    spans = zip(starts, [*starts[1:], len(pieces)], strict=True)
    return [(shown[bisect_left(shown, start)], end) for start, end in spans
            if bisect_left(shown, start) < bisect_left(shown, end)]


def word_ends(pieces: list[str]) -> list[int]:
    """Per word, the number of pieces up to and including its last one (`_word_spans`)."""
    return [end for _, end in _word_spans(pieces)]


def word_starts(pieces: list[str]) -> list[int]:
    """Per word, the index of its first piece that shows a character (`_word_spans`)."""
    return [start for start, _ in _word_spans(pieces)]


def word_delays(token_delays: tuple[int, ...] | list[int], end_delay: int, source_starts: list[int],
                target_ends: list[int]) -> list[int]:
    """Per target word, the source words read when it was written, as SimulEval counts text read and written
    word by word: a target word is written when the output shows it complete, i.e. with the first piece of
    the next word (or with `</s>`, at `end_delay`, for the last word); and a source word counts as read as soon
    as any of its pieces is (a word-by-word reader gets the whole word at once). `</s>`, the piece after the
    last source word, adds no word."""
    done_at = [token_delays[end] if end < len(token_delays) else end_delay for end in target_ends]
    return [words_touched(source_starts, read) for read in done_at]


def words_touched(source_starts: list[int], pieces_read: int) -> int:
    """How many source words have at least one of their pieces among the first `pieces_read`: those whose
    first piece (`word_starts`) is among them."""
    return bisect_left(source_starts, pieces_read)


def _run(ckpt: MtCheckpoint, m: Method, sources: list[list[int]]) -> list[Translation]:
    if m.kind == "full":
        return full_sentence(ckpt.model, sources, m.beam)
    if m.kind == "waitk":
        return wait_k(ckpt.model, sources, m.k, m.search, m.beam, m.window, m.length_normalized, m.force_finish)
    if m.kind == "adaptive":
        return adaptive(ckpt.model, sources, m.threshold, m.search, m.beam, m.window, m.length_normalized,
                        m.force_finish)
    raise ValueError(f"unknown method kind {m.kind!r}")


LATENCY_METRICS = ("laal_words", "al_ref_words", "al_words", "al", "al_simuleval", "laal", "dal", "ap",
                   "ap_simuleval", "cw")


def score(rows: list[dict[str, Any]], references: list[str], reference_tokens: list[int]) -> dict[str, float]:
    """BLEU (cased and lower-cased, with sacreBLEU's n-gram precisions and brevity penalty), mean latencies
    over the sentences whose output has a word (NaN where none has), `empty_outputs` (how many have none:
    left out of the latency means, as SimulEval skips them) and `ended_before_source` (the module
    docstring). `reference_tokens`: each reference's BPE pieces, `</s>` not counted (it is added here for the
    token latencies)."""
    hyps = [r["hypothesis"] for r in rows]
    bleu = sacrebleu.corpus_bleu(hyps, [references])
    lower = sacrebleu.corpus_bleu(hyps, [references], lowercase=True)
    lat: dict[str, list[float]] = {k: [] for k in LATENCY_METRICS}
    empty = ended_early = with_source = 0
    for r, ref_len, reference in zip(rows, reference_tokens, references, strict=True):
        d, n = r["delays"], r["source_tokens"]
        if n:
            with_source += 1
            ended_early += d[-1] < n  # the last delay is the target's </s>, written at end_delay
        if not n or not r["word_delays"]:
            empty += 1
            continue
        words, source_words, ref_words = r["word_delays"], r["source_words"], max(len(reference.split()), 1)
        lat["laal_words"].append(length_adaptive_average_lagging(words, source_words, ref_words))
        lat["al_ref_words"].append(average_lagging(words, source_words, ref_words))
        lat["al_words"].append(average_lagging(words, source_words))
        ref_len += 1  # </s> counted, as in the hypothesis's delays
        lat["al"].append(average_lagging(d, n))
        lat["al_simuleval"].append(average_lagging(d, n, ref_len))
        lat["laal"].append(length_adaptive_average_lagging(d, n, ref_len))
        lat["dal"].append(differentiable_average_lagging(d, n))
        lat["ap"].append(average_proportion(d, n))
        lat["ap_simuleval"].append(average_proportion(d, n, ref_len))
        lat["cw"].append(consecutive_wait(d, n))
    out = {"bleu": bleu.score, "bleu_lowercase": lower.score,
           "length_ratio": sum(r["target_tokens"] for r in rows) / max(sum(reference_tokens), 1),
           **{f"precision_{n}": p for n, p in enumerate(bleu.precisions, 1)}, "brevity_penalty": bleu.bp,
           "sacrebleu_length_ratio": bleu.sys_len / max(bleu.ref_len, 1)}
    out.update({k: sum(v) / len(v) if v else float("nan") for k, v in lat.items()})
    out["empty_outputs"] = float(empty)
    out["ended_before_source"] = ended_early / max(with_source, 1)
    return out


def bleu_signature() -> str:
    """sacreBLEU's signature of the cased, 13a-tokenized, single-reference BLEU used here."""
    metric = sacrebleu.BLEU(tokenize="13a")
    metric.corpus_score(["a"], [["a"]])  # the signature names the reference count once a score was computed
    return str(metric.get_signature())
