"""A job that scores speech with the project's CTC acoustic model (speech alignment, train_am, eval_am,
word_confidence, the predictive jobs' `[asr]`) refuses a `graph_job` of the Sphinx HCLG recipe as soon as it
reads it: before, the whole HCLG was built (minutes, GBs) and the job then failed on a missing lexicon.txt.
The real_speech job, which decodes the Sphinx model's HCLG, refuses a TLG graph job the same way (before, it
built the TLG first). `specbench validate` refuses both; the message names the job file, the key and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbench.cli import main
from specbench.errors import ConfigError
from specbench.experiments.registry import load_config

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
JOBS = ROOT / "jobs"
SPHINX = JOBS / "graph_sphinx_quick.toml"  # recipe = "sphinx_hclg"
SPEECH = JOBS / "speech_quick.toml"


def _jobs(tmp_path: Path) -> dict[str, Path]:
    """One job of each kind that needs the CTC TLG, each naming the Sphinx graph job."""
    refs = f'speech_job = "{SPEECH}"\ngraph_job = "{SPHINX}"\n'
    texts = {
        "speech": f'kind = "speech"\nname = "quick"\ngraph_job = "{SPHINX}"\n'
                  "[corpus]\ntrain_sentences = 2\ntrain_copies = 1\ndevel_sentences = 2\ntest_sentences = 2\n",
        "train_am": f'kind = "train_am"\nname = "am_x"\noutput = "{tmp_path / "am.pt"}"\n{refs}',
        "eval_am": f'kind = "eval_am"\nname = "ev"\n{refs}',
        "predictive_asr": f'kind = "predictive_asr"\nusers = 2\ntune_users = 2\nrun_habit_sweep = false\n'
                          f'[asr]\ngraph_job = "{SPHINX}"\n',
    }
    paths = {kind: tmp_path / f"{kind}.toml" for kind in texts}
    for kind, text in texts.items():
        paths[kind].write_text(text)
    paths["word_confidence"] = tmp_path / "word_confidence.toml"
    paths["word_confidence"].write_text(f'kind = "word_confidence"\nscores_job = "{paths["eval_am"]}"\n')
    return paths


def _says_what_to_fix(message: str, job: Path, key: str) -> None:
    text = " ".join(message.split())
    assert f"{job}: key '{key}' = '{SPHINX}'" in text, text
    assert 'recipe = "sphinx_hclg"' in text and 'recipe = "ctc_tlg"' in text, text
    assert f'Fix: set {key} = "graph_slurp.toml"' in text and f"`specbench validate {job}`" in text, text


@pytest.mark.parametrize("kind", ["speech", "train_am", "eval_am", "word_confidence", "predictive_asr"])
def test_validate_refuses_a_sphinx_graph_job(kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    jobs = _jobs(tmp_path)
    assert load_config(jobs[kind])  # the file itself loads: the recipe is the referenced job's
    assert main(["validate", str(jobs[kind])]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    # word_confidence: the key to fix is its eval job's graph_job
    job, key = {"word_confidence": (jobs["eval_am"], "graph_job"),
                "predictive_asr": (jobs["predictive_asr"], "asr.graph_job")}.get(kind, (jobs[kind], "graph_job"))
    _says_what_to_fix(err, job, key)


def test_validate_accepts_the_tlg_graph_job(tmp_path: Path) -> None:
    job = tmp_path / "eval.toml"
    job.write_text(f'kind = "eval_am"\nspeech_job = "{SPEECH}"\ngraph_job = "{JOBS / "graph_slurp.toml"}"\n')
    assert main(["validate", str(job)]) == 0


@pytest.mark.parametrize("kind", ["speech", "train_am", "eval_am"])
def test_the_job_refuses_a_sphinx_graph_job_before_building_anything(kind: str, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The runners themselves (a job run from Python, or a suite whose graph job changed after validation):
    the error comes before any graph, corpus or score is written in the work directory."""
    from specbench.experiments.eval_am import run_eval_am
    from specbench.experiments.speech import build_corpus
    from specbench.experiments.train_am import run_train_am

    home = tmp_path / "home"
    monkeypatch.setenv("SPECBENCH_HOME", str(home))
    path = _jobs(tmp_path)[kind]
    config = load_config(path)
    run = {"speech": lambda: build_corpus(config, None, None, path),
           "train_am": lambda: run_train_am(config, path, None),
           "eval_am": lambda: run_eval_am(config, path, None)}[kind]
    with pytest.raises(ConfigError) as err:
        run()
    _says_what_to_fix(str(err.value), path, "graph_job")
    assert not (home / "graphs").exists() and not (home / "speech").exists() and not (home / "scores").exists()


def test_the_real_speech_job_refuses_a_tlg_graph_job_before_building_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from specbench.experiments.real_speech.job import run_real_speech

    home = tmp_path / "home"
    monkeypatch.setenv("SPECBENCH_HOME", str(home))
    shipped = (JOBS / "real_speech_quick.toml").read_text()
    assert 'graph_job = "graph_sphinx_quick.toml"' in shipped
    job = tmp_path / "real_speech.toml"
    job.write_text(shipped.replace('graph_job = "graph_sphinx_quick.toml"', f'graph_job = "{JOBS / "graph_slurp.toml"}"'))
    assert main(["validate", str(job)]) == 2
    text = " ".join(capsys.readouterr().err.split())
    assert f"{job}: key 'graph_job' = '{JOBS / 'graph_slurp.toml'}'" in text and 'recipe = "ctc_tlg"' in text
    assert 'of a recipe = "sphinx_hclg" graph job. Fix: set graph_job = "graph_sphinx.toml"' in text, text
    with pytest.raises(ConfigError, match='recipe = "ctc_tlg"'):
        run_real_speech(load_config(job), job, None)
    assert not (home / "graphs").exists()
    assert main(["validate", str(JOBS / "real_speech_quick.toml")]) == 0
