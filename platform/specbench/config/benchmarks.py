"""The benchmark configs: one frozen dataclass per benchmark kind (`kind = "bench_decoder"`, ...).

The `specbench bench ...` verbs and job files share these defaults: a verb builds the config from its
dataclass, replacing only the options given on the command line; a job file names the fields it changes.
Paths marked "project root" are relative to the checkout, except that one beginning with `.specbench/` is in
the work directory (`SPECBENCH_HOME` when set; `paths.from_root`); `graph_job` is relative to the job file
(for a verb: to `jobs/`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import ClassVar

from specbench.config.jobs import (AM_FIX, BPE_FIX, EVAL_AM_JOB_FIX, GRAPH_JOB_FIX, LM_FIX, MT_WAITK_FIX,
                                   TrackingSection)
from specbench.config.loader import config_choices as _choices
from specbench.config.loader import config_input as _input
from specbench.config.loader import config_range as _range

# cpu_scaling: the compiled backend on 1, 2, ..., all cores; cpu_startup: its start-up, cold and cached
DECODER_BACKENDS = ("kaldi", "cpu", "cpu_lattice", "cpu_numpy", "twin", "twin_lattice", "gpu", "gpu_lattice",
                    "cpu_scaling", "cpu_startup", "cpu_partial_posteriors")
# all but twin_lattice (the twin with lattices, a host-cost profile asked for by name)
DEFAULT_DECODER_BACKENDS = tuple(name for name in DECODER_BACKENDS if name != "twin_lattice")
# benchmarks.decoder.workloads.WORKLOADS: the SLURP TLG with held-out-voice scores; the Sphinx HCLG with the
# real_speech job's scores of recorded speech
DECODER_WORKLOADS = ("held_out_test", "real_speech")


@dataclass(frozen=True)
class BenchConfig:
    """What every benchmark config has: its runs go to the `bench` experiment."""

    tracking: TrackingSection = TrackingSection(experiment="bench")


@dataclass(frozen=True)
class BenchGraphConfig(BenchConfig):
    """`kind = "bench_graph"`: the graph build time, and CSR loading against kaldifst arc iteration."""

    KIND: ClassVar[str] = "bench_graph"
    name: str = "graph"
    graph_job: Path = field(default=Path("graph_slurp.toml"), metadata=_input(GRAPH_JOB_FIX, "job", "graph"))
    rebuild: bool = False  # time a full rebuild of the graph too
    # rounds of the loaders timed one after the other (the speedups: medians of the per-round ratios)
    rounds: int = field(default=3, metadata=_range(1, 100))


@dataclass(frozen=True)
class BenchAcousticConfig(BenchConfig):
    """`kind = "bench_acoustic"`: synthesis throughput, and the features + model real-time factor."""

    KIND: ClassVar[str] = "bench_acoustic"
    name: str = "acoustic"
    checkpoint: Path = field(default=Path("models/am_slurp.pt"), metadata=_input(AM_FIX, reads="acoustic model"))  # project root
    utterances: int = field(default=40, metadata=_range(1, 100000))
    audio: Path | None = None  # time inference on the 16 kHz WAV files of this folder instead of synthesizing
    # rounds of the CPU and CUDA inference timed one after the other (the speedup: the median of its ratios)
    rounds: int = field(default=3, metadata=_range(1, 100))


SCORES_FIX = ("Fix: write them first (`specbench run jobs/am_eval.toml`), or set the key to existing scores "
              "(.parquet or .npz).")
REAL_SPEECH_SCORES_FIX = ("Fix: write them first (`specbench run jobs/real_speech.toml`), or set the key to "
                          "that job's score folder.")
GRAPH_FILE_FIX = ("Fix: set it to an OpenFst graph file (`specbench graph build JOB.toml` prints where it writes "
                  "one), or leave it out to build the graph of `graph_job`.")


@dataclass(frozen=True)
class BenchDecoderConfig(BenchConfig):
    """`kind = "bench_decoder"`: Kaldi, the CPU backend, the twin and (with a GPU) the GPU backend side by
    side on held-out-voice test scores (`benchmarks/decoder/`)."""

    KIND: ClassVar[str] = "bench_decoder"
    name: str = "decoder"
    workload: str = field(default="held_out_test", metadata=_choices(*DECODER_WORKLOADS))
    # its graph (TLG or HCLG), unless `graph` names one
    graph_job: Path = field(default=Path("graph_slurp.toml"), metadata=_input(GRAPH_JOB_FIX, "job", "graph", "graph"))
    graph: Path | None = field(default=None, metadata=_input(GRAPH_FILE_FIX))  # an OpenFst const graph (project root)
    # project root, or the work directory for `.specbench/...` (SPECBENCH_HOME when set: where jobs write);
    # .parquet or .npz (workload real_speech: a .parquet or a folder of them)
    scores: Path = field(default=Path(".specbench/scores/am_slurp/test.parquet"),
                         metadata=_input(SCORES_FIX, unless="scores_job",
                                         folder_when=("workload", "real_speech", REAL_SPEECH_SCORES_FIX)))
    # an `eval_am` job (relative to the job file) whose test scores to decode instead of `scores`: the ones
    # it writes to the work directory's scores/<its name>/test.parquet (a suite runs it first)
    scores_job: Path | None = field(default=None, metadata=_input(EVAL_AM_JOB_FIX, "job", "eval_am"))
    utterances: int = field(default=1000, metadata=_range(1, 100000))  # the first N (held-out-voice) ids
    beam: float = field(default=15.0, metadata=_range(1.0, 100.0))
    max_active: int = field(default=10000, metadata=_range(10, 10_000_000))
    min_active: int = field(default=20, metadata=_range(0, 10_000_000))
    lattice_beam: float = field(default=8.0, metadata=_range(0.0, 100.0))
    acoustic_scale: float = field(default=1.0, metadata=_range(0.01, 10.0))
    gpu_decoders: tuple[int, ...] = field(default=(1, 2, 4, 8), metadata=_range(1, 64))
    # lanes of each GPU decoder process (utterances decoded together) and its recombination table: 0, dense
    # (one entry per graph state a lane), or a hash table of that many slots a lane (`LaneSettings.table_slots`)
    gpu_lanes: int = field(default=256, metadata=_range(1, 65536))
    gpu_table_slots: int = field(default=0, metadata=_range(0, 2**30))
    # the GPU processes replay each frame step's kernels as a CUDA graph (`GpuDecoder(cuda_graphs=True)`)
    gpu_cuda_graphs: bool = False
    # each GPU configuration's throughput stream after its first pass: the utterances repeated until the
    # processes have decoded this many (1-best) and this many seconds have passed; 0 and 0: no stream
    stream_utterances: int = field(default=20000, metadata=_range(0, 10_000_000))
    stream_seconds: float = field(default=10.0, metadata=_range(0.0, 3600.0))
    # one GPU process (1-best, with the stream) also on graphs of k disjoint copies of the graph, per k > 1
    graph_copies: tuple[int, ...] = field(default=(1, 10, 40), metadata=_range(1, 1000))
    cpu_cores: tuple[int, ...] = field(default=(1, 2), metadata=_range(1, 4096))  # and all cores
    # rounds of Kaldi and the compiled CPU backend alternating (decoder.cpu_vs_kaldi_median); 0: none
    ratio_rounds: int = field(default=3, metadata=_range(0, 20))
    backends: tuple[str, ...] = field(default=DEFAULT_DECODER_BACKENDS, metadata=_choices(*DECODER_BACKENDS))
    frame_shift_ms: float | None = field(default=None, metadata=_range(0.1, 1000.0))  # .npz without manifest

    def __post_init__(self) -> None:
        if not self.gpu_decoders or not self.backends:
            raise ValueError("gpu_decoders and backends must each list at least one value")
        default = next(f.default for f in fields(self) if f.name == "scores")
        if self.scores_job is not None and self.scores != default:
            raise ValueError(f"scores = '{self.scores}' and scores_job = '{self.scores_job}' both name the scores "
                             "to decode (scores_job's would win). Fix: keep one of them")


@dataclass(frozen=True)
class BenchSimultransConfig(BenchConfig):
    """`kind = "bench_simultrans"`: speculative beam search speed on test_2016_flickr, batched against one
    sentence at a time."""

    KIND: ClassVar[str] = "bench_simultrans"
    name: str = "simultrans"
    model: Path = field(default=Path("models/mt_waitk.pt"),
                        metadata=_input(MT_WAITK_FIX, reads="wait-k translation model"))  # project root
    bpe: Path = field(default=Path("models/mt_bpe.model"), metadata=_input(BPE_FIX, reads="BPE model"))
    k: int = field(default=3, metadata=_range(1, 100))
    beam: int = field(default=5, metadata=_range(1, 100))
    window: int = field(default=2, metadata=_range(0, 20))
    sentences: int = field(default=1000, metadata=_range(1, 100000))
    single: int = field(default=100, metadata=_range(1, 100000))  # of them also decoded one at a time
    # rounds of the runs timed one after the other (the speedup: the median of the per-round ratios)
    rounds: int = field(default=3, metadata=_range(1, 100))


@dataclass(frozen=True)
class BenchCompletionConfig(BenchConfig):
    """`kind = "bench_completion"`: n-best completion of many prefixes batched against one at a time."""

    KIND: ClassVar[str] = "bench_completion"
    name: str = "completion"
    lm: Path = field(default=Path("models/lm_slurp.pt"), metadata=_input(LM_FIX, reads="prediction LM"))  # project root
    prefixes: int = field(default=2000, metadata=_range(1, 1_000_000))  # completed in batches
    single: int = field(default=200, metadata=_range(1, 1_000_000))  # of them also one at a time
    device: str = field(default="auto", metadata=_choices("cpu", "cuda", "auto"))
    # rounds of the searches timed one after the other (the speedups: medians of the per-round ratios)
    rounds: int = field(default=3, metadata=_range(1, 100))
