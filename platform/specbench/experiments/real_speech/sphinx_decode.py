"""pocketsphinx's own decoder on the same audio, acoustic model and pruned LM as our HCLG, for comparison.

Its default search (lexicon-tree Viterbi, then the flat-lexicon pass and the lattice best path) and beams
are kept; the language weight is tuned (on the Asterisk `tune` half, by the job) and the word insertion
penalty set. pocketsphinx weighs the LM of each pass by its own setting (`lw` for the tree pass,
`fwdflatlw` for the flat pass, `bestpathlw` for the lattice best path; defaults 6.5, 8.5 and 9.5). The weight
being tuned is the tree pass's, and the other two move with it in pocketsphinx's own ratios
(`pass_weights_for`: w, w x 8.5/6.5, w x 9.5/6.5), so the tuning reaches the pass whose hypothesis is
reported and the weight 6.5 is pocketsphinx's defaults. (One value in all three passes was tried: on the
job's 100 tune prompts it gave 38.1% at best, against 36.8% for the defaults,
`benchmarks/results/real_speech_pocketsphinx_one_weight_cpu.json` at commit b627b5a; see docs/real_speech.md.)

Each utterance gets a fresh decoder: pocketsphinx's front end carries state from one utterance to the next
(the noise-removal estimate of the model's `-remove_noise yes`), so a decoder that served another utterance
first scores the same audio differently. The LM is read once per chunk (reading a large ARPA file takes
seconds) and handed to each utterance's decoder (`add_lm`), which reads nothing else from it. The seconds
reported per utterance cover pocketsphinx's whole recognition (front end, acoustic scoring and search); the
decoder's construction is timed apart (`setup_seconds`), and the reading of the LM is in neither."""

from __future__ import annotations

import hashlib
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specbench.acoustic.sphinx_scores import default_model_dir, pcm16
from specbench.data.synthesis import read_wav
from specbench.data.text_norm import normalize
from specbench.wfst.arpa import ArpaModel, read_arpa, write_arpa

LM_WEIGHTS = ("lw", "fwdflatlw", "bestpathlw")  # pocketsphinx's LM weight of each pass
DEFAULT_PASS_WEIGHTS = (6.5, 8.5, 9.5)  # pocketsphinx 5.1.1's defaults of LM_WEIGHTS
_SEARCH = "lm"


@dataclass(frozen=True)
class SphinxJob:
    """One chunk: (key, wav) pairs, the ARPA LM, the weights. `pass_weights`, when given, sets the LM weight of
    each pass apart (`LM_WEIGHTS` order; pocketsphinx's defaults are 6.5, 8.5, 9.5); else `language_weight`
    is the tree pass's and the others follow in pocketsphinx's ratios (`pass_weights_for`)."""

    items: tuple[tuple[str, str], ...]
    lm: str
    language_weight: float
    word_insertion_penalty: float
    pass_weights: tuple[float, float, float] | None = None

    def __post_init__(self) -> None:
        if self.pass_weights is not None and len(self.pass_weights) != len(LM_WEIGHTS):
            raise ValueError(f"SphinxJob.pass_weights: one weight per pass {LM_WEIGHTS}, got {self.pass_weights!r}")


@dataclass(frozen=True)
class SphinxResult:
    """One utterance: normalized words, pocketsphinx's path score of its hypothesis (`ps_get_hyp`'s, in
    its own scaled integer log units: for comparing hypotheses of one utterance, not a log probability; None
    without one), the seconds of recognition, the frames, the seconds spent constructing its fresh decoder,
    the text."""

    key: str
    words: list[str]
    score: float | None
    seconds: float
    frames: int
    setup_seconds: float
    text: str = ""


def dictionary_path() -> Path:
    return default_model_dir().parent / "cmudict-en-us.dict"


def pass_weights_for(weight: float) -> tuple[float, float, float]:
    """The LM weight of each pass (`LM_WEIGHTS`) for a tree-pass weight `weight`: pocketsphinx's defaults
    scaled by weight / 6.5, so 6.5 gives them unchanged."""
    return tuple(weight * default / DEFAULT_PASS_WEIGHTS[0] for default in DEFAULT_PASS_WEIGHTS)


def decoder_settings(job: SphinxJob) -> dict[str, Any]:
    """pocketsphinx's configuration for `job`: the model, dictionary, the weight of each pass, the penalty.
    No LM file: the chunk's LM is read once and added to each decoder."""
    weights = job.pass_weights or pass_weights_for(job.language_weight)
    return {"hmm": str(default_model_dir()), "lm": None, "dict": str(dictionary_path()),
            **dict(zip(LM_WEIGHTS, weights)), "wip": job.word_insertion_penalty, "loglevel": "ERROR"}


def fresh_decoder(job: SphinxJob, lm: Any) -> Any:
    import pocketsphinx

    decoder = pocketsphinx.Decoder(**decoder_settings(job))
    decoder.add_lm(_SEARCH, lm)
    decoder.activate_search(_SEARCH)
    return decoder


def hypothesis_words(text: str) -> list[str]:
    """pocketsphinx's words normalized as the references: `to(3)` as `to`, no `<s>`, `<sil>`, `[NOISE]`."""
    return normalize(" ".join(re.sub(r"\(\d+\)$", "", w) for w in text.split() if w[0] not in "<[+")).split()


def with_suffixes(model: ArpaModel) -> ArpaModel:
    """`model` with each missing suffix of an n-gram listed at its back-off probability: the same model
    (pocketsphinx 5.1.1 adds one at a value quantized among the listed ones: 0.01 off in log10)."""
    levels = [dict(level) for level in model.ngrams]
    for n in range(model.order, 1, -1):
        for words in list(levels[n - 1]):
            if words[1:] not in levels[n - 2]:
                levels[n - 2][words[1:]] = (model.log10_prob(words[-1], words[1:-1]), 0.0)
    return ArpaModel(model.order, levels)


def sphinx_lm(arpa: Path, cache: Path) -> Path:
    """The LM pocketsphinx reads for `arpa` (`with_suffixes`), written once under `cache` by its content."""
    path = cache / f"{hashlib.sha256(arpa.read_bytes()).hexdigest()[:20]}.arpa"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        write_arpa(with_suffixes(read_arpa(arpa)), tmp)
        tmp.replace(path)
    return path


def decode_chunk(job: SphinxJob) -> list[SphinxResult]:
    """One result per utterance of the chunk, each decoded by a fresh decoder."""
    import pocketsphinx

    config = pocketsphinx.Config(**decoder_settings(job))
    lm = pocketsphinx.NGramModel(config, pocketsphinx.LogMath(float(config["logbase"])), job.lm)
    out = []
    for key, wav in job.items:
        samples, _ = read_wav(Path(wav))
        pcm = pcm16(samples).astype("<i2").tobytes()
        start = time.perf_counter()
        decoder = fresh_decoder(job, lm)
        setup = time.perf_counter() - start
        start = time.perf_counter()
        decoder.start_utt()
        decoder.process_raw(pcm, full_utt=True)
        decoder.end_utt()
        hyp = decoder.hyp()
        seconds = time.perf_counter() - start
        text = (hyp.hypstr if hyp is not None else "") or ""
        # n_frames() counts one frame more than were searched (output_frame + 1)
        out.append(SphinxResult(key, hypothesis_words(text), float(hyp.score) if hyp is not None else None,
                                seconds, int(decoder.n_frames()) - 1, setup, text))
    return out
