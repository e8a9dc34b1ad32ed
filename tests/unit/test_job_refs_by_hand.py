"""Job names relative to the naming file: a word_confidence -> eval -> graph chain of relative names is
followed from each file's folder; a directory, a job of the wrong kind and a graph of the wrong recipe are
refused with the file, the key and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbench.config import EvalAmConfig
from specbench.errors import ConfigError
from specbench.experiments.job_refs import referenced_job, scores_job_graph_preflight
from specbench.experiments.registry import load_config

pytestmark = pytest.mark.unit
JOBS = Path(__file__).resolve().parents[2] / "jobs"


def test_relative_job_names_and_their_refusals(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    (jobs / "folder.toml").mkdir(parents=True)
    (jobs / "tlg.toml").write_text((JOBS / "graph_slurp.toml").read_text())
    (jobs / "hclg.toml").write_text((JOBS / "graph_sphinx_quick.toml").read_text())
    speech = f'speech_job = "{JOBS / "speech_quick.toml"}"\n'
    (jobs / "eval.toml").write_text(f'kind = "eval_am"\n{speech}graph_job = "tlg.toml"\n')
    (jobs / "eval_hclg.toml").write_text(f'kind = "eval_am"\n{speech}graph_job = "hclg.toml"\n')
    wc = jobs / "wc.toml"
    wc.write_text('kind = "word_confidence"\nscores_job = "eval.toml"\n')
    scores_job_graph_preflight(load_config(wc), wc)  # eval.toml and tlg.toml found beside wc.toml
    wc.write_text('kind = "word_confidence"\nscores_job = "eval_hclg.toml"\n')
    with pytest.raises(ConfigError) as err:
        scores_job_graph_preflight(load_config(wc), wc)
    ev = jobs / "eval_hclg.toml"
    assert str(err.value) == (
        f"{ev}: key 'graph_job' = 'hclg.toml' names a graph job with recipe = \"sphinx_hclg\" (the Sphinx model's "
        "HCLG, which the real_speech job decodes), but this job uses the project's CTC acoustic model, which needs "
        'the TLG, lexicon.txt and tokens.txt of a recipe = "ctc_tlg" graph job. Fix: set graph_job = '
        f'"graph_slurp.toml" (jobs/graph_slurp.toml, relative to this file), then check it with `specbench '
        f"validate {ev}`.")
    fix = 'Fix: name an existing kind = "eval_am" job file (jobs/ has one of each kind), relative to this one.'
    with pytest.raises(ConfigError) as err:
        referenced_job(wc, "scores_job", Path("tlg.toml"), EvalAmConfig)
    assert str(err.value) == f"{wc}: key 'scores_job' = 'tlg.toml' must name a kind = \"eval_am\" job. {fix}"
    with pytest.raises(ConfigError) as err:
        referenced_job(wc, "scores_job", Path("folder.toml"), EvalAmConfig)
    assert str(err.value) == f"{wc}: key 'scores_job' = 'folder.toml': {jobs / 'folder.toml'} does not exist. {fix}"
