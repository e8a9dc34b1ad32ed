"""The scores record holds the job name, the checkpoint's sha256, the scale as a float (from numpy too) and each
score file's sha256, written atomically; `forget` removes it; a missing, damaged or graph-less record, a missing
checkpoint, a score file changed since (another split's copied over it) and other scoring code are refused with
the fix."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from specbench.errors import DataError
from specbench.experiments import scores_record as sr
from specbench.experiments.graph_recipe import GraphArtifacts
from specbench.experiments.registry import load_config

pytestmark = pytest.mark.unit


def test_record_and_refusals(tmp_path: Path, checkpoint: Path, tiny_tlg: Callable[..., Path]) -> None:
    (tmp_path / "sp.toml").write_text('kind = "speech"\nname = "q"\n')
    job = tmp_path / "ev.toml"
    job.write_text('kind = "eval_am"\nname = "ev"\nspeech_job = "sp.toml"\ngraph_job = "gr.toml"\n')
    config, out, fix = load_config(job), tmp_path / "s", f"Fix: run `specbench run {job}` again"
    out.mkdir()
    with pytest.raises(DataError, match=f"does not exist.*{fix}"):
        sr.check(out, config, checkpoint, job)
    graph = GraphArtifacts(tiny_tlg("g"), stats=None, reused=True)  # type: ignore[arg-type]
    (out / "devel.parquet").write_bytes(b"devel scores")
    (out / "test.parquet").write_bytes(b"test scores")
    sr.write(out, config, checkpoint, np.float32(0.5), load_config(tmp_path / "sp.toml"), graph)
    record = sr.check(out, config, checkpoint, job)
    assert sorted(p.name for p in out.iterdir()) == ["devel.parquet", "scores.json", "test.parquet"]
    assert record["eval_job"] == "ev" and record["acoustic_scale"] == 0.5
    assert record["checkpoint_sha256"] == hashlib.sha256(checkpoint.read_bytes()).hexdigest()
    assert record["files_sha256"] == {f"{s}.parquet": hashlib.sha256(f"{s} scores".encode()).hexdigest()
                                      for s in ("devel", "test")}
    (out / "test.parquet").write_bytes(b"devel scores")  # the devel file copied over the test file
    with pytest.raises(DataError, match=f"s: test.parquet changed since the eval job wrote it .*{fix}"):
        sr.check(out, config, checkpoint, job)
    (out / "test.parquet").write_bytes(b"test scores")
    (out / "scores.json").write_text(json.dumps({**record, "code_sha256": "0" * 64}))
    with pytest.raises(DataError, match=f"computed by other code than this version's .*{fix}"):
        sr.check(out, config, checkpoint, job)
    (out / "scores.json").write_text(json.dumps(record))
    assert sr.check(out, config, checkpoint, job) == record
    with pytest.raises(DataError, match="another acoustic model"):
        sr.check(out, config, tmp_path / "no.pt", job)
    no_graph = json.dumps({k: v for k, v in record.items() if k != "graph_sha256"})
    for text in [no_graph, "{", "{}", "[]", json.dumps({**record, "acoustic_scale": "high"})]:
        (out / "scores.json").write_text(text)
        with pytest.raises(DataError, match=f"(digests of the speech job|is damaged).*{fix}"):
            sr.check(out, config, checkpoint, job)
    sr.forget(out)
    sr.forget(out)  # nothing to remove: no error
    assert not (out / "scores.json").exists()


def test_only_the_eval_settings_that_shape_the_scores_are_in_the_digest() -> None:
    from dataclasses import replace

    config = load_config(Path(__file__).resolve().parents[2] / "jobs" / "am_eval.toml")
    same = replace(config, update_card=not config.update_card, shard_size=config.shard_size + 1,
                   real_recordings=not config.real_recordings)
    assert sr.config_digest(same) == sr.config_digest(config)  # a card, a shard size: the same scores
    assert sr.config_digest(replace(config, devel_utterances=config.devel_utterances + 1)) != \
        sr.config_digest(config)

