"""What `specbench validate` (and every run, before its MLflow run opens) refuses: a nightly's tolerances that
could never work, suites and nightlies that list the wrong kind of file, model files of the wrong kind, and
the predictive-ASR settings that only the data or the models can refute. Each refusal names the file, the key
and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbench.cli import main
from specbench.config.loader import check_inputs
from specbench.errors import DataError
from specbench.experiments.registry import load_config

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
JOBS = ROOT / "jobs"


def _refused(path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """The one-line error `specbench validate` gives for `path` (which must be refused)."""
    assert main(["validate", str(path)]) != 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and str(path.name) in err and "Fix:" in err, err
    return " ".join(err.split())


def _nightly(tmp_path: Path, extra: str, *more_jobs: str) -> Path:
    """A nightly of the graph job (and `more_jobs`) with the graph's tolerances and `extra`."""
    graph_rules = "".join(f'[[tolerance]]\nmetric = "graph.{m}"\nmax_rise = 0\nmax_drop = 0\n'
                          for m in ("states", "arcs", "ppl_test", "test_unseen_rate"))
    jobs = ", ".join(f'"{j}"' for j in (JOBS / "graph_slurp.toml", *more_jobs))
    path = tmp_path / "nightly.toml"
    path.write_text(f'kind = "nightly"\njobs = [{jobs}]\n{graph_rules}{extra}')
    return path


@pytest.mark.parametrize(("rule", "expected"), [
    ('metric = "graph.sates"\nmax_rise = 0', 'metric = "graph.sates" is not a metric the nightly compares'),
    ('metric = "asr.wer"\nmax_rise = -0.5', "max_rise = -0.5 is negative"),
    ('metric = "asr.wer"\nmin = 0.9\nmax = 0.1', "min = 0.9 is above max = 0.1"),
    ('metric = "asr.wer"\nmax_rise = nan', "max_rise = nan is not a finite number"),
    ('metric = "asr.wer"\nmax_drop = inf', "max_drop = inf is not a finite number"),
])
def test_a_tolerance_that_could_never_judge_is_refused(tmp_path: Path, rule: str, expected: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(_nightly(tmp_path, ""))]) == 0  # the base file is fine
    capsys.readouterr()
    assert expected in _refused(_nightly(tmp_path, f"[[tolerance]]\n{rule}\n"), capsys)


def test_a_nightly_or_suite_lists_jobs_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "quick.toml', which is itself a suite" in _refused(_nightly(tmp_path, "", str(JOBS / "quick.toml")), capsys)
    (tmp_path / "sub").mkdir()
    assert "is a directory, not a job file" in _refused(_nightly(tmp_path, "", "sub"), capsys)
    _nightly(tmp_path, "")
    suite = tmp_path / "suite.toml"
    suite.write_text(f'kind = "suite"\njobs = ["{JOBS / "graph_slurp.toml"}", "nightly.toml"]\n')
    assert "is itself a nightly; a suite lists jobs only" in _refused(suite, capsys)
    suite.write_text('kind = "suite"\njobs = ["sub"]\n')
    assert "is a directory, not a job file" in _refused(suite, capsys)
    (tmp_path / "graph_copy.toml").write_text((JOBS / "graph_slurp.toml").read_text())  # the same run name
    assert "whose runs are both named 'graph-slurp'" in _refused(_nightly(tmp_path, "", "graph_copy.toml"), capsys)
    suite.write_text(f'kind = "suite"\njobs = ["{JOBS / "graph_slurp.toml"}", "{JOBS}/../jobs/graph_slurp.toml"]\n')
    assert "a job file is listed twice. Fix: list each job file once" in _refused(suite, capsys)


def test_a_bpe_model_train_mt_could_not_write_or_read_is_refused(tmp_path: Path, capsys) -> None:
    job = tmp_path / "mt.toml"
    for value, expected in ((str(tmp_path), "is a folder"), ("models/am_slurp.pt", "not a SentencePiece (BPE) model"),
                            (f"{job}/x.model", f"{job} is a file")):
        job.write_text(f'kind = "train_mt"\noutput = "{tmp_path}/mt.pt"\nbpe_model = "{value}"\n')
        assert f"key 'bpe_model' = '{value}': " in _refused(job, capsys) and expected in _refused(job, capsys)


def test_settings_are_never_chosen_on_training_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = tmp_path / "st.toml"
    job.write_text('kind = "simultrans"\nval_split = "train"\n')
    assert "val_split = 'train': settings are chosen on val only (the models trained on train" in _refused(job, capsys)
    job.write_text('kind = "predictive_asr"\nmax_attempts = [1, 1, 2]\n')
    assert "key 'max_attempts' = [1, 1, 2]: 1 is listed twice" in _refused(job, capsys)


@pytest.mark.parametrize(("kind", "line", "expected"), [
    ("simultrans", 'bpe_model = "models/mt_waitk.pt"', "key 'bpe_model' = 'models/mt_waitk.pt'"
                                                        ": .* is not a BPE model: not a SentencePiece"),
    ("simultrans", 'waitk_model = "models/mt_full.pt"', "is not a wait-k translation model: a full-sentence"),
    ("simultrans", 'full_model = "models/mt_waitk.pt"', "is not a full-sentence translation model: a wait-k"),
    ("predictive_asr", 'lm = "models/confidence_slurp.pt"', "is not a prediction LM: this is a confidence model"),
    ("predictive_asr", 'confidence = "models/lm_slurp.pt"', "is not a confidence model: this is a prediction LM"),
    ("eval_am", 'checkpoint = "models/lm_slurp.pt"', "is not an acoustic model: this is a prediction LM"),
])
def test_a_model_of_the_wrong_kind_is_refused_by_its_key(tmp_path: Path, kind: str, line: str, expected: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    import re

    job = tmp_path / "job.toml"
    job.write_text(f'kind = "{kind}"\n{line}\n')
    if kind == "eval_am":
        job.write_text(f'kind = "eval_am"\n{line}\nspeech_job = "{JOBS / "speech_quick.toml"}"\n'
                       f'graph_job = "{JOBS / "graph_slurp.toml"}"\n')
    assert re.search(expected, _refused(job, capsys))


def test_the_shipped_models_pass_their_checks() -> None:
    from specbench.input_files import problem

    for reads, file in (("BPE model", "mt_bpe.model"), ("wait-k translation model", "mt_waitk.pt"),
                        ("full-sentence translation model", "mt_full.pt"), ("prediction LM", "lm_slurp.pt"),
                        ("confidence model", "confidence_slurp.pt"), ("acoustic model", "am_slurp.pt")):
        assert problem(reads, ROOT / "models" / file) is None, file


def test_a_file_that_is_not_a_bpe_model_is_named_wherever_it_is_read(tmp_path: Path) -> None:
    from specbench.input_files import problem
    from specbench.simultrans.tokenizer import Tokenizer

    with pytest.raises(DataError, match=r"mt_waitk.pt: not a SentencePiece \(BPE\) model .* Fix: point the BPE"):
        Tokenizer(ROOT / "models" / "mt_waitk.pt")
    (tmp_path / "empty.model").write_bytes(b"")  # sentencepiece itself loads it without a word
    with pytest.raises(DataError, match=r"empty.model: an empty SentencePiece \(BPE\) model, .* Fix: point"):
        Tokenizer(tmp_path / "empty.model")
    assert problem("BPE model", tmp_path / "empty.model") == "an empty SentencePiece (BPE) model, with no pieces"


@pytest.mark.parametrize(("line", "expected"), [
    ("[asr]\ngraph_job = \"nope.toml\"", "key 'asr.graph_job' = 'nope.toml': .*nope.toml does not exist"),
    (f"[asr]\nadaptation_job = \"{JOBS / 'graph_slurp.toml'}\"",
     "key 'asr.adaptation_job' = .* names a kind = \"graph\" job; it must name a kind = \"eval_am\" job"),
    ("[usage]\nroutine_size = [500, 600]", r"\[usage\] usage.routine_size = \[500, 600\]: user .* has only"),
    ("[usage]\nrequests_per_day = 400.0", r"usage.requests_per_day = 400 .* Fix: usage.requests_per_day <="),
    ('confidence_context = "models/confidence_slurp.pt"',
     "key 'confidence_context' = 'models/confidence_slurp.pt' was trained with .* "
     r"Fix: point 'confidence_context' at the model of that role \(models/confidence_slurp_context.pt\)"),
    ('confidence_posterior = "models/confidence_slurp_posterior.pt"',
     "key 'confidence_posterior' = .* but asr.partial_posteriors is false"),
])
def test_a_predictive_job_is_checked_against_its_data_and_models_before_it_runs(
        tmp_path: Path, line: str, expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    import re

    (tmp_path / "graph_slurp.toml").write_text((JOBS / "graph_slurp.toml").read_text())  # [asr]'s graph job
    job = tmp_path / "pa.toml"
    job.write_text(f'kind = "predictive_asr"\nusers = 4\ntune_users = 4\nrun_habit_sweep = false\n{line}\n')
    assert re.search(expected, _refused(job, capsys))
    assert load_config(job)  # the file itself loads: these are the checks that need data or models


def test_a_benchmark_verb_names_its_own_argument_or_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "graph", str(tmp_path / "missing.toml"), "--no-mlflow"]) != 0
    err = capsys.readouterr().err
    assert "specbench bench graph: argument graph_job = " in err and "missing.toml does not exist" in err, err
    assert "relative to this one" not in err, err  # an option's path is not relative to a job file
    assert "job file, by its path from the working directory or its name in jobs/ (e.g." in err, err
    assert main(["bench", "simultrans", "--bpe", str(ROOT / "models" / "mt_waitk.pt"), "--no-mlflow"]) != 0
    err = capsys.readouterr().err
    assert "specbench bench simultrans: option --bpe = " in err and "is not a BPE model" in err, err
    assert "bench_simultrans.toml" not in err  # no job file was given, so none is named
    assert main(["bench", "decoder", "--utterances", "0", "--no-mlflow"]) == 2
    assert "specbench bench decoder: option --utterances = 0: out of range; allowed: 1 <= utterances <= 100000. " \
           "Fix: set option --utterances to an allowed value." in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    for output, said in ((tmp_path, "is a folder"), (tmp_path / "file" / "b.json", "cannot be written")):
        assert main(["bench", "completion", "--no-mlflow", "--output", str(output)]) == 2  # before measuring
        err = capsys.readouterr().err
        assert f"bench completion: option --output = {output} {said}" in err and "Fix: name a JSON file" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # no temporary file left
    assert main(["bench", "decoder", "--backends", ",", "--no-mlflow"]) == 2
    assert "bench decoder: options: gpu_decoders and backends must each list at least one value. Fix: change " \
           "those options." in capsys.readouterr().err
    assert main(["bench", "decoder", "--backends", "foo", "--no-mlflow"]) == 2
    assert "Fix: set option --backends to" in capsys.readouterr().err
    assert main(["bench", "graph", "", "--no-mlflow"]) == 2
    assert "argument graph_job = '': an empty path" in capsys.readouterr().err


def test_link_loops_and_deep_nesting_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    loop, said = tmp_path / "a.pt", "a symbolic link loop. Fix:"
    loop.symlink_to("b.pt")
    (tmp_path / "b.pt").symlink_to("a.pt")
    (tmp_path / "c.toml").symlink_to("none")
    (tmp_path / "d.toml").write_text("x = " + "[" * 5000 + "]" * 5000)
    graph = JOBS / "graph_slurp.toml"
    texts = ['suite"\njobs = ["a.pt"]', 'nightly"\njobs = ["a.pt"]', 'speech"\ngraph_job = "a.pt"',
             f'predictive_asr"\nlm = "{loop}"', f'train_lm"\noutput = "{loop}"',  # output: a model, then not
             f'train_confidence"\nmodels = ["no_personal"]\noutput = "{loop}"\nasr.graph_job = "{graph}"']
    for i, text in enumerate(texts):
        (tmp_path / f"{i}.toml").write_text(f'kind = "{text}\n')
        assert said in _refused(tmp_path / f"{i}.toml", capsys)
    for name, why in (("a.pt", "link that loops"), ("c.toml", "leads nowhere"), ("d.toml", "too deep")):
        assert why in _refused(tmp_path / name, capsys)
    for argv in (["bench", "graph"], ["server", "--store"]):
        assert main([*argv, str(loop)]) == 2 and f"{loop}: {said}" in capsys.readouterr().err


def test_a_job_file_option_is_found_in_jobs_when_the_working_directory_has_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from specbench.cli.options import config_from_args
    from specbench.cli.parser import build_parser
    from specbench.config.benchmarks import BenchDecoderConfig

    monkeypatch.chdir(tmp_path)  # the name as --help shows its default, typed out: the shipped job
    args = build_parser().parse_args(["bench", "decoder", "--graph-job", "graph_slurp.toml"])
    assert config_from_args(BenchDecoderConfig, args, "bench").graph_job == JOBS / "graph_slurp.toml"
    (tmp_path / "graph_slurp.toml").write_text("")  # one in the working directory comes first
    assert config_from_args(BenchDecoderConfig, args, "bench").graph_job == tmp_path / "graph_slurp.toml"


def test_every_shipped_job_passes_validate_with_its_inputs_and_preflight(capsys: pytest.CaptureFixture[str]) -> None:
    """The whole check `run` makes before its MLflow run opens (about 20 s for all of jobs/). A job whose
    input another job generates (scores under the work directory) may find it missing in a fresh clone: that,
    and only that, is allowed."""
    from specbench.paths import work_dir

    for path in sorted(JOBS.glob("*.toml")):
        if main(["validate", str(path)]) != 0:
            err = capsys.readouterr().err
            assert "key 'scores' = '.specbench/" in err and f"{work_dir()}/" in err, err
            assert "does not exist. Fix: write them first" in err, err


def test_a_confidence_model_an_earlier_job_of_the_suite_writes_need_not_exist_yet(tmp_path: Path) -> None:
    graph = JOBS / "graph_slurp.toml"
    model = tmp_path / "new" / "conf.pt"
    (tmp_path / "conf.toml").write_text(f'kind = "train_confidence"\noutput = "{model}"\ntrain_users = 2\n'
                                        f'devel_users = 2\ncalibrate_routine_share = false\n[asr]\ngraph_job = "{graph}"\n')
    (tmp_path / "pa.toml").write_text(f'kind = "predictive_asr"\nusers = 2\ntune_users = 2\nrun_habit_sweep = false\n'
                                      f'confidence = "{model}"\n[asr]\ngraph_job = "{graph}"\n')
    suite = tmp_path / "suite.toml"
    suite.write_text('kind = "suite"\njobs = ["conf.toml", "pa.toml"]\n')
    assert main(["validate", str(suite)]) == 0
    assert not model.exists()
    (tmp_path / "lm.toml").write_text(f'kind = "train_lm"\noutput = "{tmp_path / "new" / "lm.pt"}"\n')
    for lm, said in (("lm_old.pt", "lm_old.pt does not exist"), ("conf.pt", "writes .*conf.pt as a confidence "
                     "model; this key reads a prediction LM")):  # a name like an output's, a model of another kind
        (tmp_path / "conf2.toml").write_text((tmp_path / "conf.toml").read_text().replace("conf.pt", "conf2.pt")
                                             .replace("train_users", f'lm = "{tmp_path / "new" / lm}"\ntrain_users'))
        suite.write_text('kind = "suite"\njobs = ["conf.toml", "lm.toml", "conf2.toml"]\n')
        with pytest.raises(DataError, match=said):
            check_inputs(suite, load_config(suite), load_config)
