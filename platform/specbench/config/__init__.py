"""Job, benchmark and suite configs (frozen dataclasses composed from the algorithm packages' own settings)
and the strict TOML loader. Algorithm packages never import this package; it imports their settings."""

from specbench.config.benchmarks import (
    DECODER_BACKENDS,
    BenchAcousticConfig,
    BenchCompletionConfig,
    BenchDecoderConfig,
    BenchGraphConfig,
    BenchSimultransConfig,
)
from specbench.config.jobs import (
    AsrSection,
    CorpusSection,
    DecodeSection,
    EvalAmConfig,
    GraphConfig,
    LexiconSection,
    LmSection,
    NightlyConfig,
    PredictiveAsrConfig,
    SensitivitySection,
    SimultransConfig,
    SpeakerTransformSection,
    SpeechConfig,
    ToleranceRule,
    TrackingSection,
    TrainAmConfig,
    TrainConfidenceConfig,
    TrainLmConfig,
    TrainMtConfig,
    VtlnSection,
)
from specbench.config.loader import (
    SuiteConfig,
    build_config,
    config_choices,
    config_kind,
    config_range,
    config_to_dict,
    flatten,
    load_job_file,
    read_toml,
)

__all__ = [
    "DECODER_BACKENDS", "AsrSection", "BenchAcousticConfig", "BenchCompletionConfig", "BenchDecoderConfig",
    "BenchGraphConfig", "BenchSimultransConfig", "CorpusSection", "DecodeSection", "EvalAmConfig",
    "GraphConfig", "LexiconSection", "LmSection", "NightlyConfig", "PredictiveAsrConfig", "SensitivitySection",
    "SimultransConfig", "SpeakerTransformSection", "SpeechConfig", "SuiteConfig", "ToleranceRule",
    "TrackingSection", "TrainAmConfig", "TrainConfidenceConfig", "TrainLmConfig", "TrainMtConfig",
    "VtlnSection", "build_config", "config_choices", "config_kind", "config_range", "config_to_dict", "flatten",
    "load_job_file", "read_toml",
]
