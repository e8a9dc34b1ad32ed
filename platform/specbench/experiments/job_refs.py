"""Jobs that name other jobs (`speech_job = "speech_slurp.toml"`): paths relative to the naming job's file."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from specbench.config import EvalAmConfig, GraphConfig
from specbench.errors import ConfigError
from specbench.experiments.registry import load_config

T = TypeVar("T")
CTC_RECIPE = "ctc_tlg"  # the graph recipe whose TLG, lexicon.txt and tokens.txt the CTC acoustic model uses


def referenced_job(job_path: Path, key: str, ref: Path, cls: type[T]) -> T:
    """Load the job that `job_path`'s `key` names and check its kind."""
    path = ref if ref.is_absolute() else job_path.parent / ref
    kind = cls.KIND  # type: ignore[attr-defined]
    fix = f'Fix: name an existing kind = "{kind}" job file (jobs/ has one of each kind), relative to this one.'
    if not path.is_file():
        raise ConfigError(f"{job_path}: key '{key}' = '{ref}': {path} does not exist. {fix}")
    config = load_config(path)
    if not isinstance(config, cls):
        raise ConfigError(f"{job_path}: key '{key}' = '{ref}' must name a kind = \"{kind}\" job. {fix}")
    return config


def ctc_graph_job(job_path: Path, key: str, ref: Path) -> GraphConfig:
    """The graph job that `job_path`'s `key` names, refused (`ConfigError` naming the file, the key and the fix)
    unless its recipe is the CTC TLG (`recipe = "ctc_tlg"`): the jobs that score speech with the project's CTC
    acoustic model (speech alignment, train_am, eval_am, word_confidence, the predictive jobs' `[asr]`) read
    its `TLG.fst`, `lexicon.txt` and `tokens.txt`, which the Sphinx HCLG recipe does not write. Called right
    after the job is loaded, before any graph is built (an HCLG takes minutes and GBs), and by the jobs'
    preflight, so `specbench validate` refuses it too."""
    graph = referenced_job(job_path, key, ref, GraphConfig)
    if graph.recipe != CTC_RECIPE:
        raise ConfigError(
            f"{job_path}: key '{key}' = '{ref}' names a graph job with recipe = \"{graph.recipe}\" (the Sphinx "
            "model's HCLG, which the real_speech job decodes), but this job uses the project's CTC acoustic model, "
            f"which needs the TLG, lexicon.txt and tokens.txt of a recipe = \"{CTC_RECIPE}\" graph job. Fix: set "
            f"{key} = \"graph_slurp.toml\" (jobs/graph_slurp.toml, relative to this file), then check it with "
            f"`specbench validate {job_path}`.")
    return graph


def ctc_graph_preflight(config: Any, job_path: Path) -> None:
    """The preflight (`registry.JobKind.preflight`) of the jobs whose `graph_job` must be a CTC TLG job
    (`ctc_graph_job`): speech, train_am and eval_am."""
    ctc_graph_job(job_path, "graph_job", config.graph_job)


def scores_job_graph_preflight(config: Any, job_path: Path) -> None:
    """The preflight of a job that decodes an eval_am job's scores on that job's graph (word_confidence): the
    eval job's `graph_job` must be a CTC TLG job (`ctc_graph_job`; the error names the eval job's file)."""
    evaluation = referenced_job(job_path, "scores_job", config.scores_job, EvalAmConfig)
    eval_path = config.scores_job if config.scores_job.is_absolute() else job_path.parent / config.scores_job
    ctc_graph_job(eval_path, "graph_job", evaluation.graph_job)
