"""What an `eval_am` job's score files came from (`scores/<name>/scores.json`), so that a job reading them
(`word_confidence`, the decoder benchmark) uses them only while they are what its `scores_job` would write now.

The record is written after the devel and test scores (and removed before they are written again), so its
presence means the scores are whole. It holds digests of the eval job's resolved config (which names its
speech and graph jobs only by path), of the resolved config of the speech job it names (the corpus scored),
of the contents of the graph its graph job builds (`GraphArtifacts.content_digest`: the graph that chose the
acoustic scale, and that `word_confidence` decodes on), of the acoustic model checkpoint, of the code that
computes scores (`SCORING_CODE`, read as code: `code_digest`) and of each score file it wrote, and the acoustic
scale that job chose on devel. The settings digests leave out `[tracking]` (`config.settings_dict`). A
mismatch names the input that changed and the fix: a score file damaged or replaced since (another split's
file copied over it, say) is caught by its digest.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specbench.code_digest import code_digest
from specbench.config import EvalAmConfig, SpeechConfig, settings_dict
from specbench.errors import DataError
from specbench.experiments.job_refs import referenced_job
from specbench.text_files import json_text

if TYPE_CHECKING:
    from specbench.experiments.graph_recipe import GraphArtifacts

RECORD = "scores.json"
_PACKAGE = Path(__file__).resolve().parents[1]
# the modules whose code decides the scores an eval job writes (features, the model and its settings, VTLN,
# the speaker transform and the first pass its targets come from, reading the WAVs, scoring and the score
# files, and the job itself)
SCORING_CODE = tuple(_PACKAGE / rel for rel in (
    "acoustic/features.py", "acoustic/model.py", "acoustic/settings.py", "acoustic/checkpoint.py",
    "acoustic/inference.py", "acoustic/vtln.py", "acoustic/speaker_transform.py", "decoder/kaldi_reference.py",
    "data/synthesis.py", "data/scores.py", "experiments/eval_am.py"))
_NOT_SCORING = ("update_card", "shard_size", "real_recordings")  # eval settings that change no score or scale


def config_digest(config: Any) -> str:
    """sha256 of a job's resolved settings (every key but `[tracking]`, and for an eval job but those that
    change no score file and no chosen scale: every setting that shapes what it writes)."""
    settings = settings_dict(config)
    if isinstance(config, EvalAmConfig):
        settings = {k: v for k, v in settings.items() if k not in _NOT_SCORING}
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()


def checkpoint_digest(checkpoint: Path) -> str:
    with checkpoint.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _score_files(out_dir: Path) -> dict[str, str]:
    """Each score file of `out_dir` (`*.parquet`, `*.ark`, `*.scp`) by name -> its sha256."""
    return {f.name: checkpoint_digest(f) for f in sorted(out_dir.iterdir())
            if f.suffix in (".parquet", ".ark", ".scp") and f.is_file()}


def forget(out_dir: Path) -> None:
    """Remove the record before the scores are written again (a run that stops half-way leaves none)."""
    (out_dir / RECORD).unlink(missing_ok=True)


def write(out_dir: Path, config: EvalAmConfig, checkpoint: Path, acoustic_scale: float, speech: SpeechConfig,
          graph: GraphArtifacts) -> None:
    """The record of scores just written (atomically: a new file renamed over the old); `speech` and `graph`:
    the corpus job the eval job names and the graph its graph job built."""
    record = {"eval_job": config.name, "config_sha256": config_digest(config),
              "speech_config_sha256": config_digest(speech), "graph_sha256": graph.content_digest(),
              "checkpoint_sha256": checkpoint_digest(checkpoint), "acoustic_scale": float(acoustic_scale),
              "code_sha256": code_digest(SCORING_CODE), "files_sha256": _score_files(out_dir)}
    tmp = out_dir / f"{RECORD}.tmp{os.getpid()}"
    tmp.write_text(json_text(record, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, out_dir / RECORD)


def _fix(eval_path: Path) -> str:
    return f"Fix: run `specbench run {eval_path}` again (a suite lists it before this job)"


def check(out_dir: Path, config: EvalAmConfig, checkpoint: Path, eval_path: Path) -> dict[str, Any]:
    """The record of the scores in `out_dir`, after checking that `config` (the eval job `eval_path` as it
    is now), the speech job it names and its `checkpoint` would write the same scores; a DataError naming the
    input that changed and the fix otherwise. The graph is checked apart (`check_graph`), once it is built."""
    path = out_dir / RECORD
    fix = _fix(eval_path)
    if not path.is_file():
        raise DataError(f"{path} does not exist, so where the scores in {out_dir} came from is unknown (an eval "
                        f"run that stopped half-way, or one older than the record). {fix}")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        written = (record["config_sha256"], record["checkpoint_sha256"], float(record["acoustic_scale"]))
    except (ValueError, KeyError, TypeError) as err:
        raise DataError(f"{path} is damaged ({err}). {fix}") from err
    if written[0] != config_digest(config):
        raise DataError(f"{out_dir}: the scores were written by another version of {eval_path} (its settings "
                        f"changed since). {fix}")
    if not {"speech_config_sha256", "graph_sha256", "code_sha256", "files_sha256"} <= set(record):
        raise DataError(f"{path} was written before the record held digests of the speech job, the graph, the "
                        f"scoring code and the score files, so whether the scores in {out_dir} match them now is "
                        f"unknown. {fix}")
    if record["code_sha256"] != code_digest(SCORING_CODE):
        raise DataError(f"{out_dir}: the scores were computed by other code than this version's (the acoustic "
                        f"features, model or scoring changed since). {fix}")
    files = record["files_sha256"]
    changed = [name for name in sorted(files) if not (out_dir / name).is_file()
               or checkpoint_digest(out_dir / name) != files[name]]
    if not files:
        raise DataError(f"{path} names no score file, so the scores in {out_dir} cannot be checked. {fix}")
    if changed:
        raise DataError(f"{out_dir}: {', '.join(changed)} changed since the eval job wrote "
                        f"{'it' if len(changed) == 1 else 'them'} (damaged, or replaced by another file). {fix}")
    speech = referenced_job(eval_path, "speech_job", config.speech_job, SpeechConfig)
    if record["speech_config_sha256"] != config_digest(speech):
        raise DataError(f"{out_dir}: the scores were written from another corpus: the speech job that "
                        f"{eval_path} names (speech_job = '{config.speech_job}') changed since. {fix}")
    if not checkpoint.is_file() or written[1] != checkpoint_digest(checkpoint):
        raise DataError(f"{out_dir}: the scores come from another acoustic model than {checkpoint}. {fix}")
    return record


def check_graph(out_dir: Path, record: dict[str, Any], graph: GraphArtifacts, config: EvalAmConfig,
                eval_path: Path) -> None:
    """A DataError with the fix unless `graph` (built from the eval job's graph job as it is now) has the
    contents of the graph the scores' record names (`check` returned `record`): the acoustic scale was
    chosen on that graph, and a job that decodes the scores on the eval job's graph would decode on another."""
    if record.get("graph_sha256") != graph.content_digest():
        raise DataError(f"{out_dir}: the scores were evaluated on another graph: the graph job that {eval_path} "
                        f"names (graph_job = '{config.graph_job}') builds a graph with other contents now "
                        f"({graph.directory}). {_fix(eval_path)}")
