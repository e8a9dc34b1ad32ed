"""The job configs: one frozen dataclass per job kind, composed from the algorithm packages' own settings.

A job file has a top-level `kind` (`graph`, ...) and the sections its dataclass defines. The field metadata
(`_range`, `_choices`) is what the loader (`loader.py`) checks values against; `_input` marks a file the job
reads, which `loader.check_inputs` checks exists before the job runs.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from specbench.acoustic.settings import ModelConfig, TrainSettings
from specbench.config.loader import config_choices as _choices
from specbench.config.loader import config_input as _input
from specbench.config.loader import config_range as _range
from specbench.data.multi30k import SPLITS as MULTI30K_SPLITS
from specbench.data.multi30k import TEST_SPLITS as MULTI30K_TEST_SPLITS
from specbench.data.usage import UsageSettings
from specbench.prediction.settings import CompletionSettings, ConfidenceSettings, LmSettings, LmTrainSettings
from specbench.simultrans.settings import MtModelConfig, MtSelection, MtTrainSettings

if TYPE_CHECKING:
    from specbench.data.speech_corpus import CorpusPlan

# How to make each kind of input file a job names (the `_input` fixes).
AM_FIX = ("Fix: train one with `specbench train am jobs/am.toml`, or set the key to an existing acoustic "
          "model (the project ships models/am_slurp.pt).")
MT_WAITK_FIX = ("Fix: train it with `specbench train mt jobs/mt_waitk.toml`, or set the key to an existing "
                "model.")
MT_FULL_FIX = ("Fix: train it with `specbench train mt jobs/mt_full.toml`, or set the key to an existing "
               "model.")
BPE_FIX = ("Fix: `specbench train mt jobs/mt_waitk.toml` trains the BPE model first when it is missing; or "
           "set the key to an existing one.")
LM_FIX = "Fix: train it with `specbench train lm jobs/lm.toml`, or set the key to an existing LM."
CONFIDENCE_FIX = ("Fix: train the confidence models with `specbench train confidence jobs/confidence.toml`, "
                  "or set the key to an existing one.")
SPEECH_JOB_FIX = ('Fix: name an existing kind = "speech" job file, relative to this one (e.g. '
                  "speech_slurp.toml).")
GRAPH_JOB_FIX = ('Fix: name an existing kind = "graph" job file, relative to this one (e.g. '
                 "graph_slurp.toml).")


def check_job_name(name: object) -> None:
    """`ValueError` naming the key `name` unless it is letters, digits, '-' or '_': the name of a job of the
    kinds that call this becomes a file or folder name under the work directory (`graphs/<name>-<hash>`,
    `speech/<name>`, `scores/<name>`, `checkpoints/<name>...`, `real_speech/decodes/<name>`), so '', '.',
    a '/' or '..' would write somewhere else."""
    if not isinstance(name, str) or not name.replace("-", "").replace("_", "").isalnum() or len(name.encode()) > 100:
        raise ValueError(f"name must be letters, digits, '-' or '_', got {name!r} (at most 100): the job's name becomes "
                         "a file or folder name under the work directory (.specbench/), and a name that is empty, "
                         "holds '/' or '..' or is longer than a file name may be would write elsewhere or not at all. "
                         "Fix: set name to letters, digits, '-' and '_' only, e.g. name = \"slurp\"")


@dataclass(frozen=True)
class TrackingSection:
    """Where the run is logged. The tracking URI comes from the command line or MLFLOW_TRACKING_URI."""

    experiment: str = "specbench"

    def __post_init__(self) -> None:
        # MLflow refuses an empty name only once the run opens; say so when the job file is read
        name = self.experiment
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"experiment = {name!r}: an empty experiment name. Fix: set experiment to a "
                             'name, e.g. experiment = "bench", or remove the key to use the default')
        if name != name.strip():
            raise ValueError(f"experiment = {name!r}: spaces around the name (MLflow would keep them, making "
                             f"another experiment). Fix: write experiment = {name.strip()!r}")


@dataclass(frozen=True)
class LmSection:
    """The n-gram LM of the decoding graph, estimated with KenLM's lmplz (modified Kneser-Ney)."""

    order: int = field(default=3, metadata=_range(1, 6))
    deduplicate: bool = True
    extra_vocabulary: tuple[str, ...] = field(default=("devel", "test"), metadata=_choices("devel", "test"))
    discount_fallback: bool = True
    interpolate_unigrams: bool = False
    memory: str = "10%"  # lmplz -S: a share of the machine's memory, or a size

    def __post_init__(self) -> None:
        size = re.fullmatch(r"(\d+)([%bKMGTPE]?)", self.memory)
        if size is None or (size[2] == "%" and not 0 < int(size[1]) <= 100):
            raise ValueError(f"memory = {self.memory!r} is not a size lmplz reads (its -S option). Fix: a whole "
                             'number followed by % of the machine\'s memory (1 to 100, e.g. "10%") or by b, K, M, '
                             'G, T, P or E (e.g. "2G"; a bare number is in K)')
        if size[2] != "%" and not 2**26 <= int(size[1]) * 1024 ** "bKMGTPE".find(size[2] or "K") <= 2**50:
            raise ValueError(f"memory = {self.memory!r}: lmplz needs at least 64M (its vocabulary hash alone takes "
                             'tens of MB), and more than 1P is a typo. Fix: e.g. "2G", or a share, "10%"')


@dataclass(frozen=True)
class LexiconSection:
    """The pronunciation lexicon: CMUdict, then espeak-ng for the words CMUdict lacks."""

    espeak_voice: str = "en-us"


@dataclass(frozen=True)
class SphinxGraphSection:
    """The HCLG of CMU Sphinx's en-us model (`recipe = "sphinx_hclg"`): its trigram pruned by relative entropy
    (Stolcke), L with optional silence and noise, H from the model's HMMs."""

    prune_threshold: float = field(default=1e-7, metadata=_range(0.0, 1.0))  # SRILM's -prune; 0: unpruned
    silence_prob: float = field(default=0.5, metadata=_range(0.01, 0.99))    # between words (Kaldi's default)
    noise_share: float = field(default=0.1, metadata=_range(0.0, 0.9))       # of the silence slot: noise fillers
    self_loop_scale: float = field(default=0.1, metadata=_range(0.01, 1.0))  # Kaldi's mkgraph default
    vocabulary: int = field(default=0, metadata=_range(0, 1_000_000))        # 0: all LM words; else the most
                                                                             # probable unigrams (quick graphs)


@dataclass(frozen=True)
class GraphConfig:
    """`kind = "graph"`: compile a decoding graph: the CTC TLG from SLURP text, CMUdict and an n-gram LM
    (`recipe = "ctc_tlg"`), or the HCLG of CMU Sphinx's en-us acoustic model (`recipe = "sphinx_hclg"`)."""

    KIND: ClassVar[str] = "graph"
    name: str = "slurp"
    recipe: str = field(default="ctc_tlg", metadata=_choices("ctc_tlg", "sphinx_hclg"))
    lm: LmSection = LmSection()
    lexicon: LexiconSection = LexiconSection()
    sphinx: SphinxGraphSection = SphinxGraphSection()
    tracking: TrackingSection = TrackingSection(experiment="graph")

    def __post_init__(self) -> None:
        check_job_name(self.name)


@dataclass(frozen=True)
class CorpusSection:
    """What to synthesize (`[corpus]`): sentences per split, voices, speaking rates and noise."""

    train_sentences: int = field(default=5000, metadata=_range(0, 20000))  # 0: all
    train_copies: int = field(default=2, metadata=_range(1, 10))
    devel_sentences: int = field(default=400, metadata=_range(0, 5000))  # 0: all
    test_sentences: int = field(default=1000, metadata=_range(0, 5000))  # 0: all
    train_voices: tuple[str, ...] = ("espeak:en-us", "espeak:en-us+m3", "espeak:en-us+f3", "espeak:en-gb-x-rp",
                                     "flite:kal16", "flite:awb", "flite:slt", "festival:slt-hts",
                                     "festival:ked-diphone")
    eval_voices: tuple[str, ...] = ("flite:rms", "espeak:en-us+f4")
    rates: tuple[float, ...] = (0.85, 1.0, 1.15)
    snr_db: tuple[float, ...] = (float("inf"), 30.0, 20.0)

    def plan(self, seed: int = 0) -> CorpusPlan:
        """What the speech job synthesizes from this section, with `seed`."""
        from specbench.data.speech_corpus import CorpusPlan

        return CorpusPlan(seed=seed, train_sentences=self.train_sentences, train_voices=self.train_voices,
                          eval_voices=self.eval_voices, devel_sentences=self.devel_sentences,
                          test_sentences=self.test_sentences, rates=self.rates, snr_db=self.snr_db,
                          train_copies_per_sentence=self.train_copies)

    def __post_init__(self) -> None:
        """The voices, rates and SNRs checked as the synthesis will check them, when the job file is read."""
        from specbench.errors import ConfigError

        try:
            self.plan()
        except ConfigError as err:  # the plan's field names are this section's keys
            raise ValueError(str(err).replace("CorpusPlan.", "").replace("train_copies_per_sentence",
                                                                          "train_copies")) from None


@dataclass(frozen=True)
class SpeechConfig:
    """`kind = "speech"`: synthesize SLURP sentences with several voices into a corpus with a manifest."""

    KIND: ClassVar[str] = "speech"
    name: str = "slurp"
    seed: int = field(default=0, metadata=_range(0, 2**32 - 1))  # numpy's and torch's seeds
    shard_size: int = field(default=64, metadata=_range(1, 10000))
    align_checkpoint: Path = Path("models/am_slurp.pt")  # forced alignment when it exists (project root)
    # relative to this job file: lexicon and tokens to align with
    graph_job: Path = field(default=Path("graph_slurp.toml"), metadata=_input(GRAPH_JOB_FIX, "job", "graph"))
    corpus: CorpusSection = CorpusSection()
    tracking: TrackingSection = TrackingSection(experiment="speech")

    def __post_init__(self) -> None:
        check_job_name(self.name)  # speech/<name>


@dataclass(frozen=True)
class TrainAmConfig:
    """`kind = "train_am"`: train the causal CTC acoustic model on a synthesized corpus."""

    KIND: ClassVar[str] = "train_am"
    name: str = "am_slurp"
    # relative to this job file
    speech_job: Path = field(default=Path("speech_slurp.toml"), metadata=_input(SPEECH_JOB_FIX, "job", "speech"))
    graph_job: Path = field(default=Path("graph_slurp.toml"), metadata=_input(GRAPH_JOB_FIX, "job", "graph"))
    output: Path = Path("models/am_slurp.pt")  # relative to the project root
    devel_utterances: int = field(default=400, metadata=_range(1, 100000))
    model: ModelConfig = ModelConfig()
    training: TrainSettings = TrainSettings()
    tracking: TrackingSection = TrackingSection(experiment="acoustic")

    def __post_init__(self) -> None:
        check_job_name(self.name)  # checkpoints/<name>.last.pt

    def written_models(self) -> list[tuple[Path, str]]:
        """(checkpoint path, the kind of model it holds: a key of `input_files.KINDS`) of what the job writes."""
        return [(self.output, "acoustic model")]


@dataclass(frozen=True)
class DecodeSection:
    """Kaldi FasterDecoder settings for evaluation (`[decode]`); the acoustic scale is tuned on devel (the
    lowest devel WER; ties: the smaller scale)."""

    beam: float = field(default=15.0, metadata=_range(1.0, 100.0))
    max_active: int = field(default=10000, metadata=_range(10, 10_000_000))
    acoustic_scales: tuple[float, ...] = field(default=(0.6, 0.8, 1.0, 1.2, 1.5), metadata=_range(0.01, 10.0))

    def __post_init__(self) -> None:
        if not self.acoustic_scales:
            raise ValueError("acoustic_scales must list at least one value")


@dataclass(frozen=True)
class VtlnSection:
    """`[vtln]`: one mel-axis warp per test voice (`acoustic.vtln`), chosen without transcripts from up to
    `utterances` of that voice's devel utterances over the grid low..high in steps of `step`."""

    enabled: bool = False
    low: float = field(default=0.9, metadata=_range(0.5, 1.0))
    high: float = field(default=1.15, metadata=_range(1.0, 2.0))
    step: float = field(default=0.01, metadata=_range(0.001, 0.5))
    utterances: int = field(default=100, metadata=_range(1, 10000))


@dataclass(frozen=True)
class SpeakerTransformSection:
    """`[speaker_transform]`: per test voice, an affine feature transform fitted by CTC on the first-pass
    best paths of up to `utterances` of its devel utterances (`acoustic.speaker_transform`; no transcripts),
    applied after VTLN when that is on."""

    enabled: bool = False
    utterances: int = field(default=100, metadata=_range(1, 10000))
    epochs: int = field(default=10, metadata=_range(1, 1000))
    learning_rate: float = field(default=1e-3, metadata=_range(1e-6, 1.0))
    l2: float = field(default=0.1, metadata=_range(0.0, 1e6))
    batch_size: int = field(default=16, metadata=_range(1, 4096))


@dataclass(frozen=True)
class EvalAmConfig:
    """`kind = "eval_am"`: score a corpus with the acoustic model, decode it with the TLG, report WER/PER."""

    KIND: ClassVar[str] = "eval_am"
    name: str = "am_slurp"
    checkpoint: Path = field(default=Path("models/am_slurp.pt"), metadata=_input(AM_FIX, reads="acoustic model"))  # project root
    # relative to this job file
    speech_job: Path = field(default=Path("speech_slurp.toml"), metadata=_input(SPEECH_JOB_FIX, "job", "speech"))
    graph_job: Path = field(default=Path("graph_slurp.toml"), metadata=_input(GRAPH_JOB_FIX, "job", "graph"))
    devel_utterances: int = field(default=400, metadata=_range(1, 100000))
    test_utterances: int = field(default=0, metadata=_range(0, 100000))  # 0: all
    real_recordings: bool = True
    update_card: bool = False  # write the metrics into the checkpoint's model card
    shard_size: int = field(default=50, metadata=_range(1, 10000))
    decode: DecodeSection = DecodeSection()
    vtln: VtlnSection = VtlnSection()
    speaker_transform: SpeakerTransformSection = SpeakerTransformSection()
    tracking: TrackingSection = TrackingSection(experiment="acoustic")

    def __post_init__(self) -> None:
        check_job_name(self.name)  # scores/<name>/, which word_confidence and the decoder benchmark read


REAL_SPEECH_SETS = ("asterisk", "librivox", "cards", "recordings")


@dataclass(frozen=True)
class RealSearchSection:
    """`[search]` of the real-speech job: our decoders' beams. On the Asterisk `tune` half the acoustic scale
    is tuned from `acoustic_scales` at `beam`, then the beam from `beams` (when listed) at that scale: the
    lowest WER, ties to the smaller scale and the narrower beam (pocketsphinx's weight: to the smaller)."""

    backends: tuple[str, ...] = field(default=("cpu", "twin", "kaldi"), metadata=_choices("cpu", "twin", "kaldi", "gpu"))
    beam: float = field(default=13.0, metadata=_range(1.0, 100.0))
    beams: tuple[float, ...] = field(default=(), metadata=_range(1.0, 100.0))  # empty: `beam`, not tuned
    max_active: int = field(default=7000, metadata=_range(10, 10_000_000))
    acoustic_scales: tuple[float, ...] = field(default=(0.06, 0.08, 0.1, 0.12), metadata=_range(0.001, 10.0))

    def __post_init__(self) -> None:
        if not self.acoustic_scales or not self.backends:
            raise ValueError("acoustic_scales and backends must list at least one value")


@dataclass(frozen=True)
class PocketsphinxSection:
    """`[pocketsphinx]`: its own decoder on the same audio, model and pruned LM; the language weight is tuned
    on the Asterisk `tune` half from `language_weights` (its default is 6.5). `enabled = false` leaves it out
    (a rerun of our decoders alone; the report then has no comparison with it)."""

    enabled: bool = True
    language_weights: tuple[float, ...] = field(default=(6.5, 8.0, 10.0), metadata=_range(0.1, 50.0))
    word_insertion_penalty: float = field(default=0.65, metadata=_range(1e-6, 10.0))

    def __post_init__(self) -> None:
        if not self.language_weights:
            raise ValueError("language_weights must list at least one value")


@dataclass(frozen=True)
class RealSpeechConfig:
    """`kind = "real_speech"`: recorded speech (Asterisk prompts, pocketsphinx's LibriVox and card clips, the
    shared recordings) scored by the Sphinx en-us model and decoded over its HCLG by our decoders and Kaldi's,
    side by side with pocketsphinx's own decoder; WER per set with bootstrap intervals, and decode speed."""

    KIND: ClassVar[str] = "real_speech"
    name: str = "real_speech"
    graph_job: Path = field(default=Path("graph_sphinx.toml"), metadata=_input(GRAPH_JOB_FIX, "job", "graph"))
    sets: tuple[str, ...] = field(default=REAL_SPEECH_SETS, metadata=_choices(*REAL_SPEECH_SETS))
    max_per_set: int = field(default=0, metadata=_range(0, 100000))  # 0: all (the quick job decodes a few)
    sample_min_words: int = field(default=0, metadata=_range(0, 100))  # with max_per_set: words a sampled clip has
    chunk_utterances: int = field(default=64, metadata=_range(1, 10000))  # scored and decoded together
    tune_utterances: int = field(default=0, metadata=_range(0, 100000))  # of the Asterisk tune half; 0: all
    bootstrap_samples: int = field(default=1000, metadata=_range(10, 100000))
    search: RealSearchSection = RealSearchSection()
    pocketsphinx: PocketsphinxSection = PocketsphinxSection()
    tracking: TrackingSection = TrackingSection(experiment="real_speech")

    def __post_init__(self) -> None:
        check_job_name(self.name)  # decodes/<name> in its cache
        if not self.sets:  # nothing would be decoded, and the report would hold no set
            raise ValueError(f"sets = []: no recordings to decode. Fix: name at least one of "
                             f"{list(REAL_SPEECH_SETS)}, or remove the key to decode them all")
        if self.sample_min_words and not self.max_per_set:
            raise ValueError("sample_min_words only chooses the clips of a sample: set max_per_set too "
                             "(e.g. 2), or leave sample_min_words at 0 to decode every clip")


EVAL_AM_JOB_FIX = ('Fix: name an existing kind = "eval_am" job file, relative to this one (e.g. '
                   "am_eval.toml), and run it first: it writes the devel and test scores.")
CONFIDENCE_BACKENDS = ("cpu", "twin", "gpu")


@dataclass(frozen=True)
class WordConfidenceConfig:
    """`kind = "word_confidence"`: the seed's confidence-measure task. The devel and test scores of an
    `eval_am` job decoded with lattices by each backend, each 1-best word's lattice posterior
    (`decoder.word_confidence`) labelled correct or not against the reference: NCE, AUC and calibration;
    the lattice beam and posterior scale chosen on devel (highest NCE, CPU backend; ties: the smaller beam,
    then the smaller scale, whatever order the lists give). `lattice_beams` and `posterior_scales` are the
    devel grid: each a non-empty list of distinct positive finite numbers (distinct also as the metric names
    print them, `beam{b:g}.scale{s:g}`)."""

    KIND: ClassVar[str] = "word_confidence"
    name: str = "word_confidence"
    scores_job: Path = field(default=Path("am_eval.toml"), metadata=_input(EVAL_AM_JOB_FIX, "job", "eval_am"))
    backends: tuple[str, ...] = field(default=CONFIDENCE_BACKENDS, metadata=_choices(*CONFIDENCE_BACKENDS))
    beam: float = field(default=15.0, metadata=_range(1.0, 100.0))
    max_active: int = field(default=10000, metadata=_range(10, 10_000_000))
    acoustic_scale: float = field(default=1.2, metadata=_range(0.01, 10.0))  # the decoding scale
    lattice_beams: tuple[float, ...] = field(default=(4.0, 6.0, 8.0), metadata=_range(0.1, 100.0))
    posterior_scales: tuple[float, ...] = field(default=(0.1, 0.2, 0.35, 0.5, 0.75, 1.0), metadata=_range(0.01, 10.0))
    devel_utterances: int = field(default=0, metadata=_range(0, 100000))  # 0: all
    test_utterances: int = field(default=0, metadata=_range(0, 100000))  # 0: all
    calibration_bins: int = field(default=10, metadata=_range(2, 100))
    tracking: TrackingSection = TrackingSection(experiment="confidence")

    def __post_init__(self) -> None:
        if "cpu" not in self.backends:
            raise ValueError(f"backends = {list(self.backends)}: cpu is missing, and the cpu backend chooses "
                             'the lattice beam and posterior scale on devel. Fix: add "cpu" to backends')
        for key, example in (("lattice_beams", "[4.0, 6.0, 8.0]"), ("posterior_scales", "[0.2, 0.5, 1.0]")):
            problem = _devel_grid_problem(key, getattr(self, key))
            if problem is not None:
                raise ValueError(f"{problem}. Fix: list distinct numbers > 0 as {key}, e.g. "
                                 f"{key} = {example}")


def _devel_grid_problem(key: str, values: tuple[float, ...]) -> str | None:
    """What is wrong with a devel grid of `WordConfidenceConfig` (None: nothing)."""
    shown = f"{key} = {list(values)}"
    if not values:
        return f"{shown}: no value, so devel has nothing to choose from"
    seen: dict[str, float] = {}
    for value in values:
        if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                and value > 0):
            return f"{shown}: {value!r} is not a finite number > 0"
        name = f"{value:g}"
        if name in seen and seen[name] == value:
            return f"{shown}: {value!r} is listed twice (each grid point is decoded and logged once)"
        if name in seen:
            return (f"{shown}: {seen[name]!r} and {value!r} are one grid point in the metric names, which "
                    f"write values with 6 significant digits ({name})")
        seen[name] = value
    return None


@dataclass(frozen=True)
class TrainMtConfig:
    """`kind = "train_mt"`: train a translation model (wait-k with a causal encoder, or full-sentence) on
    Multi30k, with the project's joint BPE (trained first when missing)."""

    KIND: ClassVar[str] = "train_mt"
    name: str = "mt_waitk"
    output: Path = Path("models/mt_waitk.pt")  # relative to the project root
    bpe_model: Path = Path("models/mt_bpe.model")  # relative to the project root; shared by the MT jobs
    source: str = "de"
    target: str = "en"
    # the first N training pairs (0: all 29,000); a smaller set trains in minutes, for smoke runs and tests
    train_sentences: int = field(default=0, metadata=_range(0, 10_000_000))
    devel_sentences: int = field(default=1014, metadata=_range(1, 100000))  # from val, for devel loss
    bleu_sentences: int = field(default=300, metadata=_range(0, 100000))  # from val, greedy BLEU per epoch
    model: MtModelConfig = MtModelConfig()
    training: MtTrainSettings = MtTrainSettings()
    selection: MtSelection = MtSelection()
    tracking: TrackingSection = TrackingSection(experiment="simultrans")

    def written_models(self) -> list[tuple[Path, str]]:
        kind = "wait-k" if self.model.causal_encoder else "full-sentence"
        return [(self.output, f"{kind} translation model")]

    def __post_init__(self) -> None:
        check_job_name(self.name)  # checkpoints/<name>/last.pt
        if {self.source, self.target} != {"de", "en"}:
            raise ValueError(f"source and target must be 'de' and 'en' (either way), got {self.source!r} -> "
                             f"{self.target!r}")
        if self.selection.metric == "sbs_bleu" and not self.model.causal_encoder:
            raise ValueError("selection.metric = 'sbs_bleu' needs a wait-k model (model.causal_encoder = "
                             "true); keep a full-sentence model by 'devel_loss'")


@dataclass(frozen=True)
class SimultransConfig:
    """`kind = "simultrans"`: wait-k, test-time wait-k and adaptive simultaneous translation with greedy,
    tail-beam and speculative beam search; the (b, w) grid on val, the curves on test (from checkpoints)."""

    KIND: ClassVar[str] = "simultrans"
    name: str = "simultrans"
    # relative to the project root
    waitk_model: Path = field(default=Path("models/mt_waitk.pt"),
                              metadata=_input(MT_WAITK_FIX, reads="wait-k translation model"))
    full_model: Path = field(default=Path("models/mt_full.pt"),
                             metadata=_input(MT_FULL_FIX, reads="full-sentence translation model"))
    bpe_model: Path = field(default=Path("models/mt_bpe.model"), metadata=_input(BPE_FIX, reads="BPE model"))
    source: str = "de"
    target: str = "en"
    val_split: str = field(default="val", metadata=_choices(*MULTI30K_SPLITS))
    # every test set is decoded the same way (greedy, tail beam and SBS at every k for both models, the
    # full-sentence baselines, the adaptive policy's curves and the ranking ablation); the headline pools them
    test_splits: tuple[str, ...] = field(default=MULTI30K_TEST_SPLITS, metadata=_choices(*MULTI30K_SPLITS))
    val_sentences: int = field(default=0, metadata=_range(0, 100000))  # 0: all
    test_sentences: int = field(default=0, metadata=_range(0, 100000))  # per test set; 0: all
    ks: tuple[int, ...] = field(default=(1, 3, 5, 7, 9), metadata=_range(1, 100))
    grid_k: int = field(default=3, metadata=_range(1, 100))  # the k of the (b, w) grid and of the headline gain
    grid_beams: tuple[int, ...] = field(default=(3, 5, 7, 10), metadata=_range(1, 100))
    grid_windows: tuple[int, ...] = field(default=(0, 1, 2, 3, 4, 5), metadata=_range(0, 20))
    thresholds: tuple[float, ...] = field(default=(0.2, 0.4, 0.6, 0.8, 0.9), metadata=_range(0.0, 1.0))
    shard_size: int = field(default=100, metadata=_range(1, 100000))
    bootstrap_samples: int = field(default=1000, metadata=_range(1, 100000))  # paired bootstrap of the SBS gain
    # rank speculations (SBS, chunk SBS, chunk beam) by log-probability per token, so that one that ended
    # early does not win by paying for fewer tokens; false: by the summed log-probability (the seed's eq. 4)
    length_normalized_speculation: bool = True
    # decode the val grid with both rankings and let each model use its better (ranking, b, w); ties go to
    # length_normalized_speculation
    rank_speculations_on_val: bool = False
    # the full-sentence model under test-time wait-k too (its own val grid, curves and decomposition): the
    # bidirectional encoder is re-run on every source prefix, so this costs several times the wait-k model
    test_time_wait_k: bool = True
    tracking: TrackingSection = TrackingSection(experiment="simultrans")

    def __post_init__(self) -> None:
        if not self.ks or not self.grid_beams or not self.grid_windows or not self.thresholds:
            raise ValueError("ks, grid_beams, grid_windows and thresholds must each list at least one value")
        for name in ("ks", "grid_beams", "grid_windows", "thresholds"):  # curves and steps follow the lists
            if list(getattr(self, name)) != sorted(getattr(self, name)):
                raise ValueError(f"{name} = {list(getattr(self, name))}: list them in increasing order (the curves, "
                                 f"their MLflow steps and plots follow it). Fix: {name} = {sorted(getattr(self, name))}")
        if {self.source, self.target} != {"de", "en"}:
            raise ValueError(f"source and target must be 'de' and 'en', got {self.source!r} -> {self.target!r}")
        if self.val_split != "val":  # train: what the models learned; a test set: one the report must hold
            raise ValueError(f"val_split = {self.val_split!r}: settings are chosen on val only (the models "
                             "trained on train, and every test set is reported). Fix: use 'val'")
        splits = self.test_splits
        if not splits or len(set(splits)) != len(splits) or self.val_split in splits or "train" in splits:
            raise ValueError(f"test_splits must name at least one split, each once, none of them the val split "
                             f"{self.val_split!r} or train; got {list(splits)}")
        if self.grid_k not in self.ks:
            raise ValueError(f"grid_k {self.grid_k} must be one of ks {list(self.ks)} (the headline is read at "
                             "grid_k)")


@dataclass(frozen=True)
class TrainLmConfig:
    """`kind = "train_lm"`: train the word LSTM LM of prediction on SLURP's training text; perplexity on the
    devel and test texts."""

    KIND: ClassVar[str] = "train_lm"
    name: str = "lm_slurp"
    output: Path = Path("models/lm_slurp.pt")  # relative to the project root
    model: LmSettings = LmSettings()
    training: LmTrainSettings = LmTrainSettings()
    tracking: TrackingSection = TrackingSection(experiment="prediction")

    def written_models(self) -> list[tuple[Path, str]]:
        return [(self.output, "prediction LM")]


@dataclass(frozen=True)
class AsrSection:
    """Where partial and final hypotheses come from (`[asr]`): `decoder` synthesizes each request with the
    user's held-out voice, rendered anew per request (a speaking rate drawn from `rate_range`, white noise at
    an SNR drawn from `snr_db_range`, a pitch shift drawn from [-pitch_cents, +pitch_cents]), scores it with
    the acoustic model (with the ASR headline's speaker adaptation when `adaptation_job` names its eval job)
    and decodes it with our streaming decoder (partials every `partial_every_ms`); `oracle-asr` (ablations
    only) takes the reference words and their forced-alignment times instead."""

    mode: str = field(default="decoder", metadata=_choices("decoder", "oracle-asr"))
    checkpoint: Path = field(default=Path("models/am_slurp.pt"), metadata=_input(AM_FIX, reads="acoustic model"))  # project root
    graph_job: Path = field(default=Path("graph_slurp.toml"), metadata=_input(GRAPH_JOB_FIX, "job", "graph"))
    voices: tuple[str, ...] = ("flite:rms", "espeak:en-us+f4")  # held out of acoustic training
    rate_range: tuple[float, float] = field(default=(0.85, 1.15), metadata=_range(0.5, 2.0))
    snr_db_range: tuple[float, float] = field(default=(15.0, 35.0), metadata=_range(-10.0, 100.0))
    pitch_cents: float = field(default=80.0, metadata=_range(0.0, 1200.0))
    partial_every_ms: float = field(default=120.0, metadata=_range(10.0, 5000.0))
    backend: str = field(default="cpu", metadata=_choices("cpu", "cpu_numpy", "twin", "gpu", "auto"))
    beam: float = field(default=15.0, metadata=_range(1.0, 100.0))
    max_active: int = field(default=10000, metadata=_range(10, 10_000_000))
    acoustic_scale: float = field(default=1.0, metadata=_range(0.01, 10.0))
    shard_size: int = field(default=64, metadata=_range(1, 10000))
    # the eval_am job of the ASR headline: its per-voice VTLN and speaker transform are applied to the requests
    # (`experiments/predictive_asr/adaptation.py`); relative to this job file; unset: the unadapted model
    adaptation_job: Path | None = field(default=None, metadata=_input(EVAL_AM_JOB_FIX, "job", "eval_am"))
    # each partial also carries its words' posteriors from the lattice of the audio so far (the decoder's
    # partial lattices at `lattice_beam`, posteriors at `posterior_scale`; the word-confidence job's devel
    # choice is 8 and 0.5); a confidence model with the posterior features needs them (cpu backends only)
    partial_posteriors: bool = False
    lattice_beam: float = field(default=8.0, metadata=_range(0.0, 100.0))
    posterior_scale: float = field(default=0.5, metadata=_range(0.01, 10.0))

    def __post_init__(self) -> None:
        if not self.voices:
            raise ValueError("asr.voices must list at least one held-out voice (e.g. flite:rms, espeak:en-us+f4)")
        for name in ("rate_range", "snr_db_range"):
            pair = tuple(getattr(self, name))
            if len(pair) != 2 or pair[0] > pair[1]:
                raise ValueError(f"asr.{name} must be [low, high] with low <= high, got {list(pair)}")
        if self.partial_posteriors and self.mode == "oracle-asr":
            raise ValueError("asr.partial_posteriors = true with asr.mode = \"oracle-asr\": oracle partials are the "
                             "reference words, with no lattice and so no posteriors. Fix: set "
                             "asr.partial_posteriors = false (and use no posterior confidence model), or "
                             "asr.mode = \"decoder\"")
        if self.partial_posteriors and self.backend not in ("cpu", "cpu_numpy"):
            raise ValueError(f"asr.partial_posteriors needs partial lattices, which the {self.backend} backend "
                             "does not make yet: set asr.backend = \"cpu\"")
        from specbench.data.voices import get_voice

        trained = [v for v in self.voices if not get_voice(v).held_out]
        if trained:
            raise ValueError(f"asr.voices {trained} are used in acoustic training; requests must be spoken by "
                             "held-out voices only (e.g. flite:rms, espeak:en-us+f4)")


@dataclass(frozen=True)
class HabitSection:
    """Success against habit (`[habit]`, `experiments/predictive_asr/habit.py`): the sweep of the routine
    share (each point with its own devel-chosen thresholds), the calibration of the headline population to
    `target_oracle` (the devel users' LM + personal oracle rate; the seed's real users gave 0.57), and the
    rendering knobs, each at one lower and one higher setting, at the calibrated share, on `knob_users` users."""

    routine_shares: tuple[float, ...] = field(default=(0.2, 0.35, 0.5, 0.65, 0.8, 0.9), metadata=_range(0.0, 1.0))
    target_oracle: float = field(default=0.57, metadata=_range(0.0, 1.0))
    rate_ranges: tuple[tuple[float, float], ...] = field(default=((0.95, 1.05), (0.7, 1.3)),
                                                         metadata=_range(0.5, 2.0))
    snr_db_ranges: tuple[tuple[float, float], ...] = field(default=((25.0, 45.0), (5.0, 25.0)),
                                                           metadata=_range(-10.0, 100.0))
    pitch_cents: tuple[float, ...] = field(default=(20.0, 200.0), metadata=_range(0.0, 1200.0))
    # the knob variants render every request of their users anew: they run on the first knob_users devel and
    # test users (0: all), beside the headline settings on the same users, so each knob is compared paired
    knob_users: int = field(default=0, metadata=_range(0, 100000))

    def __post_init__(self) -> None:
        if len(set(self.routine_shares)) < 2:
            raise ValueError(f"habit.routine_shares needs at least two distinct values to calibrate between, got "
                             f"{list(self.routine_shares)}")
        for name in ("rate_ranges", "snr_db_ranges"):
            for pair in getattr(self, name):
                if len(pair) != 2 or pair[0] > pair[1]:
                    raise ValueError(f"habit.{name}: each must be [low, high] with low <= high, got {list(pair)}")


@dataclass(frozen=True)
class TrainConfidenceConfig:
    """`kind = "train_confidence"`: the confidence models (with and without the personal feature), trained
    on every prediction of the training users and early-stopped on the devel users."""

    KIND: ClassVar[str] = "train_confidence"
    name: str = "confidence_slurp"
    lm: Path = field(default=Path("models/lm_slurp.pt"), metadata=_input(LM_FIX, reads="prediction LM"))  # project root
    output: Path = Path("models/confidence_slurp.pt")  # the others beside it: *_nopersonal.pt, *_context.pt
    # which to train: "personal" (output), "no_personal" (*_nopersonal.pt), "context" (*_context.pt: personal
    # and context features)
    # and "posterior" (*_posterior.pt: personal and the partial's lattice posteriors; needs asr.partial_posteriors)
    models: tuple[str, ...] = field(default=("personal", "no_personal", "context"),
                                    metadata=_choices("personal", "no_personal", "context", "posterior"))
    train_users: int = field(default=80, metadata=_range(0, 100000))  # 0: all
    devel_users: int = field(default=0, metadata=_range(0, 100000))  # 0: all
    usage: UsageSettings = UsageSettings()
    calibrate_routine_share: bool = True  # simulate at the predictive job's calibrated share (its [habit])
    habit: HabitSection = HabitSection()
    asr: AsrSection = AsrSection()
    completion: CompletionSettings = CompletionSettings()
    model: ConfidenceSettings = ConfidenceSettings()
    half_precision_file: bool = False  # members' weights stored as fp16 (half the file; read back as fp32)
    tracking: TrackingSection = TrackingSection(experiment="prediction")

    def __post_init__(self) -> None:
        if not self.models or len(set(self.models)) != len(self.models):
            raise ValueError(f"models: name each model to train once, at least one, got {list(self.models)}")
        if "posterior" in self.models and self.asr.mode == "oracle-asr":
            raise ValueError("models lists \"posterior\", whose features are the partials' lattice posteriors, but "
                             "asr.mode = \"oracle-asr\" gives partials without them (the reference words). Fix: "
                             "drop \"posterior\" from models, or set asr.mode = \"decoder\" with "
                             "asr.partial_posteriors = true")
        if "posterior" in self.models and not self.asr.partial_posteriors:
            raise ValueError("models lists \"posterior\", whose features are the partials' lattice posteriors: "
                             "set asr.partial_posteriors = true")

    # the file of each model beside `output`, by role (as experiments/train_confidence.py writes them)
    MODEL_SUFFIXES: ClassVar[dict[str, str]] = {"personal": "", "no_personal": "_nopersonal", "context": "_context",
                                                "posterior": "_posterior"}

    def written_models(self) -> list[tuple[Path, str]]:
        out = self.output
        return [(out.with_name(out.stem + self.MODEL_SUFFIXES[role] + out.suffix), "confidence model")
                for role in self.models]


@dataclass(frozen=True)
class PredictiveAsrConfig:
    """`kind = "predictive_asr"`: evaluate prefetching on the simulated requests of the test users from
    trained checkpoints: LM only, personal only, LM + personal; decided by the LM score or by the
    confidence models; single and multiple prefetch attempts; threshold sweeps, figures, headline scalars.
    Each configuration's operating threshold (failed rate at most 10%) is chosen on the devel users, so
    `split` must be "test" (devel is refused: it would measure on the users that chose the thresholds)."""

    KIND: ClassVar[str] = "predictive_asr"
    name: str = "predictive_asr"
    lm: Path = field(default=Path("models/lm_slurp.pt"), metadata=_input(LM_FIX, reads="prediction LM"))  # project root
    confidence: Path = field(default=Path("models/confidence_slurp.pt"),
                             metadata=_input(CONFIDENCE_FIX, reads="confidence model"))
    confidence_no_personal: Path = field(default=Path("models/confidence_slurp_nopersonal.pt"),
                                         metadata=_input(CONFIDENCE_FIX, reads="confidence model"))
    # with the context features too (time of day, hours since the candidate was said, gap to its usual hour)
    confidence_context: Path = field(default=Path("models/confidence_slurp_context.pt"),
                                     metadata=_input(CONFIDENCE_FIX, reads="confidence model"))
    # with the personal and the partial's lattice posterior features (needs asr.partial_posteriors); unset:
    # no posterior configuration
    confidence_posterior: Path | None = field(default=None, metadata=_input(
        "Fix: train it with `specbench train confidence jobs/confidence_posterior.toml`, or leave the key unset.",
        reads="confidence model"))
    # "devel" is a known value, refused in __post_init__ with the reason (the devel users tune the job)
    split: str = field(default="test", metadata=_choices("devel", "test"))
    users: int = field(default=0, metadata=_range(0, 100000))  # 0: all
    tune_users: int = field(default=0, metadata=_range(0, 100000))  # devel users that choose thresholds; 0: all
    usage: UsageSettings = UsageSettings()
    asr: AsrSection = AsrSection()
    completion: CompletionSettings = CompletionSettings()
    thresholds: tuple[float, ...] = field(default=tuple(round(0.05 * i, 2) for i in range(1, 20)) + (0.97, 0.99),
                                          metadata=_range(0.0, 1.0))
    lm_thresholds: tuple[float, ...] = field(default=tuple(float(x) for x in range(-14, -3))
                                             + tuple(-3.0 + 0.25 * i for i in range(12)),
                                             metadata=_range(-1000.0, 0.0))
    max_attempts: tuple[int, ...] = field(default=(1, 2, 3), metadata=_range(1, 20))
    # the net-benefit policy's costs of a discarded response, lambda in ms: prefetch when
    # P * E[gain] - (1 - P) * lambda >= 0, i.e. P >= lambda / (E[gain] + lambda); up to 100 s, P near 0.99
    cost_lambdas_ms: tuple[float, ...] = field(default=(0.0, 50.0, 100.0, 200.0, 300.0, 500.0, 750.0, 1000.0,
                                                        1500.0, 2000.0, 3000.0, 4000.0, 5000.0, 7500.0, 10000.0,
                                                        15000.0, 20000.0, 30000.0, 50000.0, 100000.0),
                                               metadata=_range(0.0, 1000000.0))
    # the personal cache model (prediction/cache_lm.py): interpolation weights, one chosen on devel, and the
    # thresholds on its log probability (finer than the LM's near 0: a habitual request's mixture is near 1)
    cache_weights: tuple[float, ...] = field(default=(0.05, 0.1, 0.2, 0.35, 0.5, 0.7, 0.9),
                                             metadata=_range(0.0, 1.0))
    cache_thresholds: tuple[float, ...] = field(default=tuple(float(x) for x in range(-14, -3))
                                                + tuple(-3.0 + 0.25 * i for i in range(12))
                                                + (-0.2, -0.15, -0.1, -0.05, -0.02), metadata=_range(-1000.0, 0.0))
    # per-source thresholds (prediction/by_source.py): the LM-only candidates' threshold lies this much below
    # the history's; one offset chosen on devel (0: a single threshold)
    source_offsets: tuple[float, ...] = field(default=(0.0, 0.1, 0.2, 0.3, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7),
                                              metadata=_range(0.0, 1.0))
    habit: HabitSection = HabitSection()
    run_habit_sweep: bool = True  # the sweep, the calibration of the headline share and the rendering knobs
    bootstrap_samples: int = field(default=1000, metadata=_range(1, 100000))  # user-level intervals
    tracking: TrackingSection = TrackingSection(experiment="prediction")

    def __post_init__(self) -> None:
        if self.split != "test":
            raise ValueError(f"split = {self.split!r}: the devel users (tune_users) choose every threshold, the "
                             "cache weight, the source offset and the calibrated routine share, so measuring on "
                             "them would report in-sample figures (and the devel population would go unchecked). "
                             "Fix: set split = \"test\"")
        if self.confidence_posterior is not None and self.asr.mode == "oracle-asr":
            raise ValueError(f"confidence_posterior = '{self.confidence_posterior}' with asr.mode = \"oracle-asr\": "
                             "its features are the partials' lattice posteriors, which oracle partials (the "
                             "reference words) do not have. Fix: leave confidence_posterior unset in an oracle-asr "
                             "job, or set asr.mode = \"decoder\" with asr.partial_posteriors = true")
        if not self.cache_weights:
            raise ValueError("cache_weights: give at least one weight of the personal cache model, e.g. [0.2, 0.5]")
        for name in ("thresholds", "lm_thresholds", "cost_lambdas_ms", "cache_thresholds", "source_offsets"):
            values = getattr(self, name)
            if not values or any(b <= a for a, b in zip(values, values[1:])):
                raise ValueError(f"{name} must be strictly increasing and non-empty, got {list(values)}")
        if 1 not in self.max_attempts:
            raise ValueError(f"max_attempts must include 1 (the paper's single attempt), got {self.max_attempts}")


@dataclass(frozen=True)
class ToleranceRule:
    """How far a headline metric may move against the baseline before the nightly calls it a regression.
    `max_drop`: higher is better, the new value may be at most this much lower; `max_rise`: lower is
    better, at most this much higher; `min` / `max`: absolute bounds for the new value."""

    metric: str
    max_drop: float | None = None
    max_rise: float | None = None
    min: float | None = None
    max: float | None = None

    def __post_init__(self) -> None:
        bounds = {"max_drop": self.max_drop, "max_rise": self.max_rise, "min": self.min, "max": self.max}
        if all(v is None for v in bounds.values()):
            raise ValueError(f"tolerance for {self.metric!r} sets none of max_drop, max_rise, min, max")
        for name, value in bounds.items():
            if value is not None and not math.isfinite(value):
                raise ValueError(f"tolerance for {self.metric!r}: {name} = {value} is not a finite number (it "
                                 f"would never, or always, flag a regression). Fix: give a finite {name}, or "
                                 "leave it out")
        for name in ("max_drop", "max_rise"):
            if (bounds[name] or 0.0) < 0:
                raise ValueError(f"tolerance for {self.metric!r}: {name} = {bounds[name]} is negative (how far the "
                                 f"metric may move, so 0 or more). Fix: give {name} >= 0")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"tolerance for {self.metric!r}: min = {self.min} is above max = {self.max}, so every "
                             "value would be flagged. Fix: swap them, or give min <= max")


@dataclass(frozen=True)
class NightlyConfig:
    """`kind = "nightly"`: the jobs of the nightly regression suite and a tolerance for every headline
    metric they produce (`[[tolerance]]` tables)."""

    KIND: ClassVar[str] = "nightly"
    name: str = "nightly"
    jobs: tuple[Path, ...] = ()
    tolerance: tuple[ToleranceRule, ...] = ()
    tracking: TrackingSection = TrackingSection(experiment="nightly")

    def __post_init__(self) -> None:
        if not self.name.strip() or self.name != self.name.strip():  # as a suite's: it names the parent run
            raise ValueError(f"name = {self.name!r}: an empty name or spaces around it. Fix: write name = "
                             f"{(self.name.strip() or 'nightly')!r}, or remove the key")
        if not self.jobs:
            raise ValueError("jobs must list at least one job file")
        names = [r.metric for r in self.tolerance]
        if len(names) != len(set(names)):
            raise ValueError("each metric may have one [[tolerance]] only")
