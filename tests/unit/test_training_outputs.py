"""What a training job may write over: its `output` (and, for the confidence models, each model written beside
it) must be a .pt file in a folder, and a file already there must hold the kind of model the job trains (which
retraining replaces). Anything else, another kind of model above all, is refused before training starts, with
the file, the key and the fix, and is left as it was."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specbench.checkpoint_io import KIND_KEYS, write_checkpoint
from specbench.cli import main
from specbench.config import TrainConfidenceConfig
from specbench.config.loader import check_inputs
from specbench.errors import DataError
from specbench.experiments import train_confidence
from specbench.experiments.registry import load_config

pytestmark = pytest.mark.unit
JOBS = Path(__file__).resolve().parents[2] / "jobs"


def _checkpoint(path: Path, kind: str, **extra: object) -> Path:
    write_checkpoint({key: {} for key in KIND_KEYS[kind]} | extra, path)
    return path


def _job(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "job.toml"
    path.write_text(body)
    return path


@pytest.mark.parametrize(("output", "said"), [
    ("am.pt", "am.pt already holds something this job would replace with a prediction LM (this is an acoustic "
              "model checkpoint (`specbench train am`), but a prediction LM checkpoint is needed here). Fix: give "
              "the job an output of its own, e.g. models/lm_tiny.pt, or move"),
    ("notes.pt", "notes.pt already holds something this job would replace with a prediction LM (not a readable"),
    ("folder", "folder is a folder; it must name the checkpoint file the job writes. Fix: name a file, e.g. "
               "models/lm_tiny.pt."),
    ("lm_tiny.txt", "a checkpoint's name must end in .pt (its model card is written beside it as <name>.json and "
                    "<name>.md). Fix: name a .pt file, e.g. models/lm_tiny.pt."),
    ("am.pt/lm.pt", "am.pt is a file, so nothing can be written in it. Fix: name a file in a folder"),
    ("/proc/lm.pt", "nothing can be written there (No such file or directory: /proc/.write-check."),  # not after
])
def test_a_language_model_job_may_not_write_over_anything_but_a_language_model(
        tmp_path: Path, output: str, said: str, capsys: pytest.CaptureFixture[str]) -> None:
    am = _checkpoint(tmp_path / "am.pt", "acoustic model checkpoint")
    (tmp_path / "notes.pt").write_text("my notes\n")
    (tmp_path / "folder").mkdir()
    before = {p: p.read_bytes() for p in (am, tmp_path / "notes.pt")}
    job = _job(tmp_path, f'kind = "train_lm"\nname = "lm_tiny"\noutput = "{tmp_path / output}"\n')
    for command in (["validate", str(job)], ["train", "lm", str(job)]):  # the run is refused before training
        assert main(command) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert f"job.toml: key 'output' = '{tmp_path / output}'" in err and said in err and "Traceback" not in err
    assert before == {p: p.read_bytes() for p in before} and not (tmp_path / "lm_tiny.json").exists()
    _checkpoint(tmp_path / "lm.pt", "prediction LM")  # retraining replaces a model of its own kind
    assert main(["validate", str(_job(tmp_path, f'kind = "train_lm"\noutput = "{tmp_path / "lm.pt"}"\n'))]) == 0


def test_translation_and_confidence_jobs_check_what_they_write_too(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    full = _checkpoint(tmp_path / "full.pt", "translation model", model_config={"causal_encoder": False})
    waitk = f'kind = "train_mt"\nname = "w"\noutput = "{full}"\n[model]\ncausal_encoder = true\n'
    assert main(["validate", str(_job(tmp_path, waitk))]) == 2
    assert "full.pt already holds something this job would replace with a wait-k translation model (a " \
           "full-sentence translation model" in " ".join(capsys.readouterr().err.split())
    assert main(["validate", str(_job(tmp_path, waitk.replace("true", "false")))]) == 0
    (tmp_path / "graph_slurp.toml").write_text((JOBS / "graph_slurp.toml").read_text())
    _checkpoint(tmp_path / "c_context.pt", "prediction LM")
    conf = f'kind = "train_confidence"\nname = "c"\nlm = "{JOBS.parent / "models" / "lm_slurp.pt"}"\n' \
           f'output = "{tmp_path / "c.pt"}"\n'
    job = _job(tmp_path, conf + 'models = ["personal", "no_personal"]\n')
    check_inputs(job, load_config(job), load_config)  # the checks `validate` makes before its data checks
    job = _job(tmp_path, conf)  # the default models include "context"
    with pytest.raises(DataError, match=re.escape(f"(the model written beside it: {tmp_path / 'c_context.pt'}): "
                                                  f"{tmp_path / 'c_context.pt'} already holds something")):
        check_inputs(job, load_config(job), load_config)


def test_the_confidence_models_are_checked_where_their_trainer_writes_them() -> None:
    config = TrainConfidenceConfig(output=Path("m/c.pt"), models=("personal", "no_personal", "context", "posterior"),
                                   asr=TrainConfidenceConfig().asr.__class__(partial_posteriors=True))
    expected = [path_of(Path("m/c.pt")) for *_, path_of in train_confidence.ROLES.values()]
    assert [path for path, _ in config.written_models()] == expected


def test_the_language_model_card_gives_the_size_of_the_file_beside_it(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from specbench.config import TrainLmConfig
    from specbench.experiments import train_lm
    from specbench.prediction.settings import LmSettings, LmTrainSettings

    words = [["turn", "on", "the", "lights"], ["play", "some", "jazz"], ["what", "time", "is", "it"]]
    monkeypatch.setattr(train_lm, "lm_texts", lambda: {"train": words * 4, "devel": words, "test": words})
    config = TrainLmConfig(output=tmp_path / "lm.pt", model=LmSettings(embed_dim=8, hidden_dim=8, layers=1),
                           training=LmTrainSettings(epochs=1))
    card = train_lm.run_train_lm(config, None)
    assert card["checkpoint_bytes"] == (tmp_path / "lm.pt").stat().st_size  # the second save, with metrics
