"""CMU Sphinx's binary trie language models (`*.lm.bin`, e.g. pocketsphinx's `en-us.lm.bin`), read into an
`ArpaModel` without the Sphinx library.

pocketsphinx 5.1.1 can write such a model as ARPA, but not this one: the shipped `en-us.lm.bin` declares
2,051,547 bigrams in its header while its trie holds 2,051,541, and the library's ARPA writer trusts the
header (it aborts, or crashes, on the missing six; cmusphinx/pocketsphinx issue 502, fixed after 5.1.1).
This reader walks the trie itself, so the counts are the trie's.

The format (little-endian): the 19 bytes `Trie Language Model`, the order (uint8), one uint32 count per
order; an int32 (formerly the quantization type) and the quantizer's bin centres (float32: for each middle
order 65,536 probability and 65,536 back-off centres, then 65,536 probability centres for the highest
order); `count[0] + 1` unigrams (float32 log prob, float32 log back-off, uint32 index of the first
bigram); the bit-packed middle orders and the highest order; an int32 byte count and the NUL-terminated
words. Values are logarithms in base 1.0001 (Sphinx's log math).

The trie is reversed (KenLM's layout): the unigram is an n-gram's *last* word, each deeper level the word
before. A middle entry holds its word (`ceil(log2(count[0] + 1))` bits), a 16-bit back-off code, a 16-bit
probability code and the index of its first child; an entry of the highest order holds its word and a
16-bit probability code. An entry's children run up to the next entry's first child. The writer inserted
suffix n-grams that a longer n-gram needs as a path but the source model did not list, with the
back-off-computed probability and back-off 0: they are listed here like the others, which changes no
probability of the model.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from specbench.errors import DataError
from specbench.wfst.arpa import ArpaModel

_MAGIC = b"Trie Language Model"
_BINS = 1 << 16  # 16-bit quantization codes
_LOG10_PER_UNIT = float(np.log(1.0001) / np.log(10.0))
_FIX = "Fix: point the job at a Sphinx trie LM such as pocketsphinx's `get_model_path()/en-us/en-us.lm.bin`."


def _fail(path: Path, what: str) -> DataError:
    return DataError(f"{path}: {what}. {_FIX}")


def _bits(max_value: int) -> int:
    return int(max_value).bit_length()


def _read_field(packed: np.ndarray, index: np.ndarray, entry_bits: int, offset: int, width: int) -> np.ndarray:
    """The `width`-bit field at bit `offset` of each entry `index` of a little-endian bit-packed array."""
    position = index.astype(np.int64) * entry_bits + offset
    first = position >> 3
    word = np.zeros(index.shape[0], dtype=np.uint64)
    for byte in range((width + 7 + 7) // 8):  # enough bytes to cover the field after the bit shift
        word |= packed[first + byte].astype(np.uint64) << np.uint64(8 * byte)
    return ((word >> (position & 7).astype(np.uint64)) & np.uint64((1 << width) - 1)).astype(np.int64)


def read_sphinx_lm(path: Path, top_words: int = 0) -> ArpaModel:
    """The n-gram model of a Sphinx binary trie LM (orders 2 or more), log10 probabilities and back-offs.

    With `top_words`, only the n-grams whose words are all among the `top_words` most probable unigrams
    (or `<s>`, `</s>`) are read, unchanged: the input `arpa_prune.restrict_vocabulary` conditions, read in a
    fraction of the time."""
    path = Path(path)
    data = path.read_bytes()
    if not data.startswith(_MAGIC):
        raise _fail(path, "not a Sphinx trie language model (no `Trie Language Model` header)")
    try:
        return _parse(data, path, top_words)
    except (struct.error, ValueError, IndexError) as err:
        raise _fail(path, f"truncated or damaged trie LM ({err})") from err


def _parse(data: bytes, path: Path, top_words: int) -> ArpaModel:
    offset = len(_MAGIC)
    order = data[offset]
    if order < 2:
        raise _fail(path, f"order {order}: only models of order 2 or more are read")
    counts = struct.unpack_from(f"<{order}I", data, offset + 1)
    offset += 1 + 4 * order + 4  # the counts and the former quantization-type field
    bins = np.frombuffer(data, dtype="<f4", count=(2 * (order - 2) + 1) * _BINS, offset=offset)
    offset += bins.nbytes
    unigrams = np.frombuffer(data, dtype=np.dtype([("prob", "<f4"), ("bo", "<f4"), ("next", "<u4")]),
                             count=counts[0] + 1, offset=offset)
    offset += unigrams.nbytes
    word_bits = _bits(counts[0])
    levels = []  # per order >= 2: (packed bytes, entry bits, next-pointer bits or 0)
    for n in range(2, order + 1):
        next_bits = _bits(counts[n]) if n < order else 0
        entry_bits = word_bits + (32 if n < order else 16) + next_bits
        size = ((1 + counts[n - 1]) * entry_bits + 7) // 8 + 8
        levels.append((np.frombuffer(data, dtype=np.uint8, count=size, offset=offset), entry_bits, next_bits))
        offset += size
    (text_bytes,) = struct.unpack_from("<i", data, offset)
    words = data[offset + 4: offset + 4 + text_bytes].decode("utf-8").split("\0")[:-1]
    if len(words) != counts[0]:
        raise _fail(path, f"{len(words)} word strings for {counts[0]} unigrams")
    keep = np.ones(len(words), dtype=bool)
    if top_words:
        markers = np.isin(np.asarray(words, dtype=object), ["<s>", "</s>"])
        ranked = np.argsort(np.where(markers, np.inf, -unigrams["prob"][:-1]), kind="stable")
        keep = markers.copy()
        keep[ranked[:top_words]] = True
    return _walk(order, unigrams, levels, bins, words, word_bits, keep)


def _walk(order: int, unigrams: np.ndarray, levels: list, bins: np.ndarray, words: list[str],
          word_bits: int, keep: np.ndarray) -> ArpaModel:
    """Every n-gram in the trie whose words are all kept, from the unigrams down (each entry's path holds
    its word ids, last word first)."""
    scale = _LOG10_PER_UNIT
    model = ArpaModel(order=order, ngrams=[{} for _ in range(order)])
    model.ngrams[0] = {(w,): (float(p) * scale, float(b) * scale)
                       for w, p, b, k in zip(words, unigrams["prob"][:-1], unigrams["bo"][:-1], keep) if k}
    first = unigrams["next"].astype(np.int64)
    paths = [np.arange(len(words), dtype=np.int64)]  # the word ids of each entry's path, last word first
    for n, (packed, entry_bits, next_bits) in enumerate(levels, start=2):
        count = int(first[-1])
        index = np.arange(count, dtype=np.int64)
        parent = np.repeat(np.arange(first.shape[0] - 1, dtype=np.int64), np.diff(first))
        if parent.shape[0] != count:
            raise ValueError(f"order {n}: child ranges cover {parent.shape[0]} of {count} entries")
        word = _read_field(packed, index, entry_bits, 0, word_bits)
        paths = [p[parent] for p in paths] + [word]
        if n < order:  # a middle order: back-off, probability, children
            table = bins[2 * (n - 2) * _BINS:]
            backoff = table[_BINS + _read_field(packed, index, entry_bits, word_bits, 16)] * scale
            prob = table[_read_field(packed, index, entry_bits, word_bits + 16, 16)] * scale
            first = _read_field(packed, np.arange(count + 1, dtype=np.int64), entry_bits, word_bits + 32, next_bits)
        else:
            prob = bins[2 * (order - 2) * _BINS + _read_field(packed, index, entry_bits, word_bits, 16)] * scale
            backoff = np.zeros(count)
        kept = np.flatnonzero(np.logical_and.reduce([keep[p] for p in paths]))
        names = [np.asarray(words, dtype=object)[p[kept]] for p in reversed(paths)]  # oldest word first
        model.ngrams[n - 1] = {tuple(key): (float(p), float(b))
                               for *key, p, b in zip(*names, prob[kept].tolist(), backoff[kept].tolist())}
    return model
