"""The scores record holds the job name, the checkpoint's sha256 and the scale as a float (from numpy too),
written atomically; `forget` removes it; a missing, damaged or graph-less record and a missing checkpoint are
refused with the fix."""

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
    sr.write(out, config, checkpoint, np.float32(0.5), load_config(tmp_path / "sp.toml"), graph)
    record = sr.check(out, config, checkpoint, job)
    assert [p.name for p in out.iterdir()] == ["scores.json"] and record["eval_job"] == "ev"
    assert record["checkpoint_sha256"] == hashlib.sha256(checkpoint.read_bytes()).hexdigest()
    assert record["acoustic_scale"] == 0.5
    with pytest.raises(DataError, match="another acoustic model"):
        sr.check(out, config, tmp_path / "no.pt", job)
    no_graph = json.dumps({k: v for k, v in record.items() if k != "graph_sha256"})
    for text in [no_graph, "{", "{}", "[]", json.dumps({**record, "acoustic_scale": "high"})]:
        (out / "scores.json").write_text(text)
        with pytest.raises(DataError, match=f"(digests of the speech job|is damaged).*{fix}"):
            sr.check(out, config, checkpoint, job)
    sr.forget(out)
    sr.forget(out)  # nothing to remove: no error
    assert not list(out.iterdir())
