"""Jobs that name other jobs (`speech_job = "speech_slurp.toml"`): paths relative to the naming job's file."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from specbench.config import EvalAmConfig, GraphConfig
from specbench.errors import ConfigError
from specbench.experiments.registry import load_config

T = TypeVar("T")
CTC_RECIPE = "ctc_tlg"  # the graph recipe whose TLG, lexicon.txt and tokens.txt the CTC acoustic model uses
SPHINX_RECIPE = "sphinx_hclg"  # the graph recipe whose HCLG the real_speech job decodes with the Sphinx model


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


def graph_job_of_recipe(job_path: Path, key: str, ref: Path, recipe: str) -> GraphConfig:
    """The graph job that `job_path`'s `key` names, refused (`ConfigError` naming the file, the key and the fix)
    unless its recipe is `recipe`. The jobs that score speech with the project's CTC acoustic model (speech
    alignment, train_am, eval_am, word_confidence, the predictive jobs' `[asr]`) read the TLG, `lexicon.txt` and
    `tokens.txt`, which the Sphinx HCLG recipe does not write; the real_speech job decodes the Sphinx model's
    HCLG, which the TLG recipe does not build. Called right after the job is loaded, before any graph is built
    (an HCLG takes minutes and GBs), and by the jobs' preflight, so `specbench validate` refuses it too."""
    graph = referenced_job(job_path, key, ref, GraphConfig)
    if graph.recipe != recipe:
        other, needs, shipped = _RECIPES[recipe]
        raise ConfigError(
            f"{job_path}: key '{key}' = '{ref}' names a graph job with recipe = \"{graph.recipe}\" ({other}), but "
            f"this job {needs} of a recipe = \"{recipe}\" graph job. Fix: set {key} = \"{shipped}\" "
            f"(jobs/{shipped}, relative to this file), then check it with `specbench validate {job_path}`.")
    return graph


# per recipe a job needs: what the other recipe is, what the job reads, the shipped graph job of the recipe
_RECIPES = {
    CTC_RECIPE: ("the Sphinx model's HCLG, which the real_speech job decodes",
                 "uses the project's CTC acoustic model, which needs the TLG, lexicon.txt and tokens.txt",
                 "graph_slurp.toml"),
    SPHINX_RECIPE: ("the CTC model's TLG", "decodes the Sphinx acoustic model, which needs the HCLG",
                    "graph_sphinx.toml"),
}


def ctc_graph_job(job_path: Path, key: str, ref: Path) -> GraphConfig:
    """`graph_job_of_recipe` for the CTC TLG recipe."""
    return graph_job_of_recipe(job_path, key, ref, CTC_RECIPE)


def hclg_graph_preflight(config: Any, job_path: Path) -> None:
    """The preflight of the real_speech job: its `graph_job` must be a Sphinx HCLG job."""
    graph_job_of_recipe(job_path, "graph_job", config.graph_job, SPHINX_RECIPE)


def ctc_graph_preflight(config: Any, job_path: Path) -> None:
    """The preflight (`registry.JobKind.preflight`) of the jobs whose `graph_job` must be a CTC TLG job
    (`ctc_graph_job`): speech, train_am and eval_am."""
    ctc_graph_job(job_path, "graph_job", config.graph_job)


def speech_preflight(config: Any, job_path: Path) -> None:
    """The speech job's preflight: `ctc_graph_preflight`, and `align_checkpoint` must hold an acoustic model
    where it exists; only the default may be missing (the corpus is then not aligned): a mistyped path would
    give a corpus without word times, and another kind of model would fail after the synthesis."""
    from dataclasses import fields

    from specbench.errors import DataError
    from specbench.input_files import problem
    from specbench.paths import from_root

    ctc_graph_preflight(config, job_path)
    value, file = config.align_checkpoint, from_root(config.align_checkpoint)
    default = next(f.default for f in fields(config) if f.name == "align_checkpoint")
    if not file.exists() and value != default:
        raise DataError(f"{job_path}: key 'align_checkpoint' = '{value}': {file} does not exist. Fix: name the "
                        f"acoustic model to align with, or leave the key out ({default}, aligned when it exists)")
    wrong = problem("acoustic model", file) if file.exists() else None
    if wrong is not None:
        raise DataError(f"{job_path}: key 'align_checkpoint' = '{value}': {file} is not an acoustic model: "
                        f"{wrong}. Fix: point it at an acoustic model (`specbench train am`)")


def scores_job_graph_preflight(config: Any, job_path: Path) -> None:
    """The preflight of a job that decodes an eval_am job's scores on that job's graph (word_confidence): the
    eval job's `graph_job` must be a CTC TLG job (`ctc_graph_job`; the error names the eval job's file)."""
    evaluation = referenced_job(job_path, "scores_job", config.scores_job, EvalAmConfig)
    eval_path = config.scores_job if config.scores_job.is_absolute() else job_path.parent / config.scores_job
    ctc_graph_job(eval_path, "graph_job", evaluation.graph_job)


def bpe_model_preflight(config: Any, job_path: Path) -> None:
    """The preflight of train_mt: its `bpe_model`, trained first when missing, is refused where it could not
    be written (a folder, a path under a file) or where the file there is no BPE model: before any training,
    not after the BPE was trained."""
    from specbench.input_files import problem
    from specbench.paths import from_root

    path, where = from_root(config.bpe_model), f"{job_path}: key 'bpe_model' = '{config.bpe_model}'"
    fix = "Fix: name the project's BPE model, models/mt_bpe.model, or a new .model file to train one there."
    wrong = (f"{path.parent} is a file" if path.parent.exists() and not path.parent.is_dir()
             else f"{path} is a folder" if path.is_dir() else problem("BPE model", path) if path.exists() else None)
    if wrong is not None:
        raise ConfigError(f"{where}: {wrong}. {fix}")
