"""pocketsphinx's own decoder on the same audio, acoustic model and pruned LM as our HCLG, for comparison.

Its default search (lexicon-tree Viterbi, then the flat-lexicon pass and the lattice best path) and beams
are kept; only the language weight is tuned (on the Asterisk `tune` half, by the job) and the word
insertion penalty set. One decoder serves a chunk of utterances, since loading a large ARPA LM takes
seconds; its cepstral mean is per utterance (`-cmn batch` with whole utterances), as in our scores, but
its noise-removal estimate carries over from one utterance to the next within a chunk. The time reported
covers pocketsphinx's whole recognition (front end, acoustic scoring and search), not the LM loading.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specbench.acoustic.sphinx_scores import default_model_dir
from specbench.data.synthesis import read_wav
from specbench.data.text_norm import normalize


@dataclass(frozen=True)
class SphinxJob:
    """One chunk: (key, wav) pairs, the ARPA LM, the dictionary and the weights."""

    items: tuple[tuple[str, str], ...]
    lm: str
    language_weight: float
    word_insertion_penalty: float


def dictionary_path() -> Path:
    return default_model_dir().parent / "cmudict-en-us.dict"


def decode_chunk(job: SphinxJob) -> list[tuple[str, list[str], float, int]]:
    """(key, normalized words, seconds, frames) per utterance of the chunk."""
    import pocketsphinx

    config = pocketsphinx.Config(hmm=str(default_model_dir()), lm=job.lm, dict=str(dictionary_path()),
                                 lw=job.language_weight, wip=job.word_insertion_penalty, loglevel="ERROR")
    decoder = pocketsphinx.Decoder(config)
    out = []
    for key, wav in job.items:
        samples, _ = read_wav(Path(wav))
        pcm = np.round(samples * 32768.0).clip(-32768, 32767).astype("<i2").tobytes()
        start = time.perf_counter()
        decoder.start_utt()
        decoder.process_raw(pcm, full_utt=True)
        decoder.end_utt()
        hyp = decoder.hyp()
        seconds = time.perf_counter() - start
        words = normalize(hyp.hypstr).split() if hyp is not None and hyp.hypstr else []
        out.append((key, words, seconds, int(decoder.n_frames())))
    return out
