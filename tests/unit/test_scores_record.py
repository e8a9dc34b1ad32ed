"""The record of an eval_am job's scores (`experiments/scores_record.py`) names what they came from: the eval
job's settings, the speech job it names, the graph its graph job builds (by contents) and the checkpoint. A
job that reads the scores (word_confidence) is refused, with the input that changed and the fix, when any of
them changed since: before, an edit to the graph job (the LM order) left the record matching while the
scores would be decoded on another graph."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from specbench.errors import DataError
from specbench.experiments import scores_record
from specbench.experiments.graph_recipe import GraphArtifacts
from specbench.experiments.registry import load_config
from specbench.wfst.graph import read_graph

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
GRAPH_JOB = ROOT / "jobs" / "graph_slurp.toml"


def _jobs(tmp_path: Path) -> Path:
    """An eval job naming a speech job of its own (so that the test can edit it) and the shipped graph job."""
    (tmp_path / "speech.toml").write_text('kind = "speech"\nname = "quick"\n[corpus]\ntrain_sentences = 8\n')
    (tmp_path / "eval.toml").write_text(f'kind = "eval_am"\nname = "ev"\nspeech_job = "speech.toml"\n'
                                        f'graph_job = "{GRAPH_JOB}"\n')
    return tmp_path / "eval.toml"


def _graph(directory: Path) -> GraphArtifacts:
    read_graph(directory / "TLG.fst")  # a real graph
    return GraphArtifacts(directory, stats=None, reused=True)  # type: ignore[arg-type]  # no stats needed


def _written(tmp_path: Path, checkpoint: Path, graph: GraphArtifacts) -> tuple[Path, Path]:
    eval_path = _jobs(tmp_path)
    out = tmp_path / "scores"
    out.mkdir()
    (out / "test.parquet").write_bytes(b"scores")
    config = load_config(eval_path)
    speech = load_config(tmp_path / "speech.toml")
    scores_record.write(out, config, checkpoint, 0.8, speech, graph)
    return eval_path, out


def test_a_changed_graph_job_is_named_with_the_fix(tmp_path: Path, checkpoint: Path,
                                                   tiny_tlg: Callable[..., Path]) -> None:
    """The eval job's graph job builds a graph with other contents now (here: a unigram LM instead of a bigram
    one, as after editing its order): the scores are refused; the same contents under another directory
    (a rebuild whose inputs' hash moved, the graph did not) are not."""
    written, unigram = _graph(tiny_tlg("bigram", order=2)), _graph(tiny_tlg("unigram", order=1))
    assert written.content_digest() != unigram.content_digest()
    eval_path, out = _written(tmp_path, checkpoint, written)
    config = load_config(eval_path)
    record = scores_record.check(out, config, checkpoint, eval_path)
    assert record["acoustic_scale"] == 0.8
    scores_record.check_graph(out, record, written, config, eval_path)
    scores_record.check_graph(out, record, _graph(tiny_tlg("bigram_again", order=2)), config, eval_path)
    with pytest.raises(DataError) as err:
        scores_record.check_graph(out, record, unigram, config, eval_path)
    message = str(err.value)
    assert "evaluated on another graph" in message and f"graph_job = '{GRAPH_JOB}'" in message, message
    assert str(eval_path) in message and f"Fix: run `specbench run {eval_path}` again" in message, message


def test_a_changed_speech_job_settings_or_checkpoint_are_named(tmp_path: Path, checkpoint: Path,
                                                                tiny_tlg: Callable[..., Path]) -> None:
    eval_path, out = _written(tmp_path, checkpoint, _graph(tiny_tlg("g")))
    fix = f"Fix: run `specbench run {eval_path}` again"
    speech = tmp_path / "speech.toml"
    speech.write_text(speech.read_text().replace("train_sentences = 8", "train_sentences = 9"))
    with pytest.raises(DataError, match="written from another corpus: the speech job") as err:
        scores_record.check(out, load_config(eval_path), checkpoint, eval_path)
    assert "speech_job = 'speech.toml'" in str(err.value) and fix in str(err.value)
    speech.write_text(speech.read_text().replace("train_sentences = 9", "train_sentences = 8"))
    scores_record.check(out, load_config(eval_path), checkpoint, eval_path)  # back as it was: accepted
    eval_path.write_text(eval_path.read_text() + "devel_utterances = 6\n")
    with pytest.raises(DataError, match="written by another version of"):
        scores_record.check(out, load_config(eval_path), checkpoint, eval_path)
    eval_path.write_text(eval_path.read_text().replace("devel_utterances = 6\n", ""))
    other = tmp_path / "other.pt"
    other.write_bytes(checkpoint.read_bytes() + b"\0")
    with pytest.raises(DataError, match="another acoustic model"):
        scores_record.check(out, load_config(eval_path), other, eval_path)


def test_a_record_without_the_speech_and_graph_digests_is_refused_with_the_fix(
        tmp_path: Path, checkpoint: Path, tiny_tlg: Callable[..., Path]) -> None:
    """A record an older version wrote cannot say which graph and corpus the scores came from."""
    import json

    eval_path, out = _written(tmp_path, checkpoint, _graph(tiny_tlg("g")))
    record = json.loads((out / "scores.json").read_text())
    for key in ("graph_sha256", "speech_config_sha256"):
        record.pop(key)
    (out / "scores.json").write_text(json.dumps(record))
    with pytest.raises(DataError, match="digests of the speech job, the graph, the scoring code") as err:
        scores_record.check(out, load_config(eval_path), checkpoint, eval_path)
    assert f"`specbench run {eval_path}`" in str(err.value)
