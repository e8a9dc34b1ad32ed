"""The TOML loader: valid jobs load; unknown keys, wrong types and out-of-range values are rejected."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbench.config import GraphConfig, SuiteConfig, config_to_dict, flatten
from specbench.errors import ConfigError
from specbench.experiments.registry import load_config, preflight

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str, name: str = "job.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_shipped_jobs_load() -> None:
    config = load_config(ROOT / "jobs/graph_slurp.toml")
    assert isinstance(config, GraphConfig)
    assert config.lm.order == 3 and config.lm.deduplicate and config.lm.extra_vocabulary == ("devel", "test")
    suite = load_config(ROOT / "jobs/quick.toml")
    assert isinstance(suite, SuiteConfig)
    assert suite.jobs[0] == (ROOT / "jobs/graph_slurp.toml").resolve()


def test_defaults_fill_missing_sections(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, 'kind = "graph"\n'))
    assert config == GraphConfig()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('kind = "graph"\nbogus = 1\n', ["'bogus'", "unknown key", "allowed keys here", "lm"]),
        ('kind = "graph"\n[lm]\nordr = 3\n', ["'lm.ordr'", "unknown key", "order"]),
        ('kind = "graph"\n[lm]\norder = "3"\n', ["'lm.order'", "'3'", "wrong type str", "allowed: int"]),
        ('kind = "graph"\n[lm]\norder = 3.0\n', ["'lm.order'", "wrong type float"]),
        ('kind = "graph"\n[lm]\norder = true\n', ["'lm.order'", "wrong type bool"]),
        ('kind = "graph"\n[lm]\norder = 9\n', ["'lm.order'", "= 9", "out of range", "allowed: 1 <= lm.order <= 6"]),
        ('kind = "graph"\n[lm]\norder = 0\n', ["'lm.order'", "out of range"]),
        ('kind = "graph"\n[lm]\nextra_vocabulary = ["train"]\n', ["'lm.extra_vocabulary[0]'", "'devel'"]),
        ('kind = "graph"\n[lm]\nextra_vocabulary = "test"\n', ["'lm.extra_vocabulary'", "a list"]),
        ('kind = "graph"\nlm = 3\n', ["'lm'", "must be a table"]),
        ('kind = "graph"\nname = "a b"\n', ["name must be letters"]),
        ('kind = "graf"\n', ["'kind'", "unknown job kind", "'graph'", "'suite'"]),
        ('name = "x"\n', ["required key 'kind'"]),
        ('kind = "graph"\n[lm\n', ["not valid TOML"]),
        ('\ufeffkind = "graph"\n', ["starts with a byte-order mark", "UTF-8 without a BOM"]),
        ('kind = "graph"\n[lm]\nmemory = "lots"\n', ["section [lm]: memory = 'lots' is not a size lmplz reads"]),
        ('kind = "graph"\n[lm]\nmemory = "0%"\n', ["memory = '0%'", 'Fix: a whole number followed by %']),
        ('kind = "graph"\n[lm]\nmemory = "1.5G"\n', ["memory = '1.5G'"]),
        ('kind = "graph"\n[lm]\nmemory = "1b"\n', ["memory = '1b': lmplz needs at least 64M"]),
        ('kind = "eval_am"\ncheckpoint = "am\\u0000.pt"\n', ["key 'checkpoint'", "a path with a NUL character"]),
        ('kind = "bench_decoder"\nscores = "x.parquet"\nscores_job = "e.toml"\n', ["both name the scores to decode"]),
        ('kind = "nightly"\njobs = ["a.toml", "a.toml"]\n', ["key 'jobs' = ['a.toml', 'a.toml']: 'a.toml' is listed"]),
        ('kind = "nightly"\nname = " "\njobs = ["a.toml"]\n', ["name = ' ': an empty name or spaces around it"]),
        ('kind = "graph"\n[lm]\nmemory = "99999999999999999999G"\n', ["more than 1P is a typo"]),
        ('kind = "predictive_asr"\n[usage]\nrouting_share = 1\n', ["'usage.routing_share'", "unknown key"]),
        ('kind = "predictive_asr"\n[usage]\nroutine_share = 1.5\n',
         ["section [usage]: routine_share = 1.5: out of range; allowed: 0.0 <= routine_share <= 1.0"]),
        (f'kind = "suite"\nname = ""\njobs = ["{ROOT}/jobs/graph_slurp.toml"]\n', ["key 'name' = ''", "name = 'job'"]),
        (f'kind = "suite"\nname = " a"\njobs = ["{ROOT}/jobs/graph_slurp.toml"]\n', ["spaces around", "name = 'a'"]),
    ],
)
def test_rejections_name_file_key_value_and_allowed(tmp_path: Path, text: str, expected: list[str]) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert str(path) in message
    for fragment in expected:
        assert fragment in message, message


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such job file"):
        load_config(tmp_path / "nope.toml")
    with pytest.raises(ConfigError, match="a folder, not a job file. Fix: give the path of a .toml job or suite in"):
        load_config(tmp_path)


def test_lmplz_sizes_are_accepted_as_lmplz_reads_them(tmp_path: Path) -> None:
    for memory in ("10%", "100%", "2G", "800M", "65536"):  # a bare number is in K, as lmplz's -S reads it
        assert load_config(write(tmp_path, f'kind = "graph"\n[lm]\nmemory = "{memory}"\n')).lm.memory == memory


@pytest.mark.parametrize(("voice", "said"), [
    ("en-uss", "espeak-ng has no language 'en-uss' (espeak-ng would silently fall back to its default"),
    ("en-us+zz", "espeak-ng has no variant 'zz' (espeak-ng would silently fall back to 'en-us'"),
    ("de", "not an English voice (the lexicon maps espeak-ng's English phonemes to CMUdict's)"),
    ("en-gb-x-rp", None), ("en-us+f4", None),
])
def test_the_graph_lexicon_voice_is_one_espeak_ng_has_and_english(tmp_path: Path, voice: str, said: str | None) -> None:
    path = write(tmp_path, f'kind = "graph"\n[lexicon]\nespeak_voice = "{voice}"\n')
    if said is None:
        preflight(path, load_config(path))
        return
    with pytest.raises(ConfigError) as err:
        preflight(path, load_config(path))
    assert str(err.value) == f"{path}: key 'lexicon.espeak_voice' = '{voice}': {said}" + str(err.value).split(said)[1]
    assert str(err.value).endswith('Fix: name an English espeak-ng voice, e.g. "en-us" (`espeak-ng --voices=en` '
                                   "lists them).")


def test_suite_rejects_missing_job_and_unknown_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(write(tmp_path, 'kind = "suite"\njobs = ["missing.toml"]\n'))
    with pytest.raises(ConfigError, match="unknown key"):
        load_config(write(tmp_path, 'kind = "suite"\njobs = ["x.toml"]\nextra = 1\n'))
    with pytest.raises(ConfigError, match="non-empty list"):
        load_config(write(tmp_path, 'kind = "suite"\njobs = []\n'))


def test_resolved_config_round_trips_to_params() -> None:
    data = config_to_dict(GraphConfig())
    assert data["kind"] == "graph" and data["lm"]["order"] == 3
    params = flatten(data)
    assert params["lm.order"] == "3"
    assert params["lm.extra_vocabulary"] == "devel,test"
    assert params["tracking.experiment"] == "graph"


def test_suite_may_not_nest_and_scales_may_not_be_empty(tmp_path: Path) -> None:
    write(tmp_path, 'kind = "suite"\njobs = ["graph.toml"]\n', "inner.toml")
    write(tmp_path, 'kind = "graph"\n', "graph.toml")
    with pytest.raises(ConfigError, match="is itself a suite"):
        load_config(write(tmp_path, 'kind = "suite"\njobs = ["inner.toml"]\n', "outer.toml"))
    with pytest.raises(ConfigError, match="acoustic_scales must list at least one value"):
        load_config(write(tmp_path, 'kind = "eval_am"\n[decode]\nacoustic_scales = []\n'))


def test_a_word_floor_without_a_sample_is_refused_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"top-level keys: sample_min_words .* set max_per_set too"):
        load_config(write(tmp_path, 'kind = "real_speech"\nsample_min_words = 3\n'))
    with pytest.raises(ConfigError, match=r"section \[decode\]: acoustic_scales"):
        load_config(write(tmp_path, 'kind = "eval_am"\n[decode]\nacoustic_scales = []\n'))


def test_a_real_speech_job_without_sets_is_refused_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"sets = \[\]: no recordings to decode. Fix: name at least one of"):
        load_config(write(tmp_path, 'kind = "real_speech"\nsets = []\n'))


def test_a_file_that_is_not_utf8_is_refused_with_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "bin.toml"
    path.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match=r"bin.toml: not a UTF-8 text file .* Fix: save the job file as UTF-8"):
        load_config(path)
    with pytest.raises(ConfigError, match=r"/proc/self/mem: cannot be read \(.*\)\. Fix: give a job file this user"):
        load_config(Path("/proc/self/mem"))  # a file whose reading fails (EIO), as an unreadable one does


@pytest.mark.parametrize(("corpus", "expected"), [
    ('eval_voices = ["flite:rms"]', r"section \[corpus\]: eval_voices: must include the held-out voices"),
    ("rates = []", r"section \[corpus\]: len\(rates\) = 0: out of range"),
    ('train_voices = ["nosuch:v"]', r"section \[corpus\]: train_voices: unknown voice 'nosuch:v'"),
    ('train_voices = ["flite:rms"]', r"train_voices: \['flite:rms'\] are held out .* Fix: remove them"),
])
def test_a_speech_corpus_is_checked_when_the_job_is_read(tmp_path: Path, corpus: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected) as err:
        load_config(write(tmp_path, f'kind = "speech"\n[corpus]\n{corpus}\n'))
    assert str(err.value).count("Fix:") == 1 and "CorpusPlan" not in str(err.value)


def test_a_referenced_job_must_exist_and_be_of_its_kind(tmp_path: Path) -> None:
    from specbench.config.loader import check_inputs
    from specbench.errors import DataError

    wrong = write(tmp_path, f'kind = "train_am"\nspeech_job = "{ROOT / "jobs/speech_quick.toml"}"\n'
                            f'graph_job = "{ROOT / "jobs/speech_quick.toml"}"\n')
    with pytest.raises(ConfigError, match=r"key 'graph_job' = .* names a kind = \"speech\" job; it must name a "
                                          r"kind = \"graph\" job. Fix:"):
        check_inputs(wrong, load_config(wrong), load_config)
    missing = write(tmp_path, 'kind = "speech"\ngraph_job = "nosuch_graph.toml"\n', "speech.toml")
    with pytest.raises(DataError, match=r"speech.toml: key 'graph_job' = 'nosuch_graph.toml': .* does not exist"):
        check_inputs(missing, load_config(missing), load_config)
    bench = write(tmp_path, f'kind = "bench_decoder"\ngraph_job = "{ROOT / "jobs/graph_slurp.toml"}"\n'
                            'scores_job = "nosuch.toml"\n', "bench.toml")
    with pytest.raises(DataError, match=r"bench.toml: key 'scores_job' = 'nosuch.toml'"):
        check_inputs(bench, load_config(bench), load_config)


def test_a_benchmark_job_names_missing_scores_and_graphs_before_it_runs(tmp_path: Path) -> None:
    from specbench.config.loader import check_inputs
    from specbench.errors import DataError

    graph_job = ROOT / "jobs/graph_slurp.toml"
    scores = write(tmp_path, f'kind = "bench_decoder"\ngraph_job = "{graph_job}"\nscores = "/nonexistent.parquet"\n')
    with pytest.raises(DataError, match=r"key 'scores' = '/nonexistent.parquet': .* Fix: write them first"):
        check_inputs(scores, load_config(scores), load_config)
    graph = write(tmp_path, 'kind = "bench_decoder"\ngraph = "/nonexistent.fst"\nscores_job = "e.toml"\n', "g.toml")
    write(tmp_path, 'kind = "eval_am"\n', "e.toml")  # scores_job replaces scores; graph replaces graph_job
    with pytest.raises(DataError, match=r"key 'graph' = '/nonexistent.fst'"):
        check_inputs(graph, load_config(graph), load_config)


def test_a_speech_jobs_align_checkpoint_is_an_acoustic_model_or_the_missing_default(tmp_path: Path) -> None:
    """Checked before the synthesis: another model failed after it, a mistyped path gave no word times."""
    from specbench.errors import DataError

    head = f'kind = "speech"\ngraph_job = "{ROOT / "jobs" / "graph_slurp.toml"}"\n'
    for value, says in (("models/lm_slurp.pt", "is not an acoustic model: this is a prediction LM checkpoint"),
                        ("models/am_slrup.pt", "does not exist. Fix: name the acoustic model to align with")):
        path = write(tmp_path, head + f'align_checkpoint = "{value}"\n')
        with pytest.raises(DataError, match=f"key 'align_checkpoint' = '{value}': .*{says}"):
            preflight(path, load_config(path))
    preflight(path := write(tmp_path, head), load_config(path))


def test_a_work_directory_that_cannot_be_made_is_an_error_with_the_fix(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from specbench.paths import work_dir

    (tmp_path / "file").write_text("")
    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "file"))
    with pytest.raises(ConfigError, match=r"work directory .*file .* cannot be made \(File exists.*Fix: point"):
        work_dir()
