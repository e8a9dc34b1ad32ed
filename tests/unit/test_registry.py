"""The one registry keyed by job kind, and the benchmark verbs that share their configs' defaults."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import re
from pathlib import Path

import pytest

from specbench import config as cfg
from specbench.cli.options import BENCHES, add_config_options, config_from_args
from specbench.cli.parser import build_parser
from specbench.errors import ConfigError
from specbench.experiments.registry import JOBS, OPTIONAL_NIGHTLY_METRICS, load_config
from specbench.reports.headline import BETTER, HEADLINE_METRICS, TIMED_METRICS

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]


def test_every_config_class_has_one_entry() -> None:
    classes = {c for c in vars(cfg).values()
               if isinstance(c, type) and hasattr(c, "KIND") and c is not cfg.SuiteConfig}
    assert {job.config for job in JOBS.values()} == classes
    assert all(kind == job.config.KIND for kind, job in JOBS.items())


@pytest.mark.parametrize("kind", sorted(JOBS))
def test_every_runner_resolves(kind: str) -> None:
    module, function = JOBS[kind].runner.split(":")
    assert callable(getattr(importlib.import_module(module), function))


def test_nightly_metrics_are_defined_headlines() -> None:
    compared = {m for job in JOBS.values() for m in job.nightly_metrics} | set(OPTIONAL_NIGHTLY_METRICS)
    assert compared <= set(HEADLINE_METRICS), sorted(compared - set(HEADLINE_METRICS))


def test_the_timed_metrics_are_the_headline_metrics_defined_by_a_clock() -> None:
    """Every headline metric defined by seconds, or named a speed-up or a real-time factor, is timed (the
    nightly compares it only on the same hardware, compare warns across machines), and every timed metric is
    a defined headline (a misspelt name would silently match nothing); the nightly compares some of them."""
    clocked = {m for m, definition in HEADLINE_METRICS.items()
               if "second" in definition or any(word in m for word in ("speedup", "_vs_kaldi", "rtf"))}
    assert clocked == set(TIMED_METRICS), sorted(clocked ^ set(TIMED_METRICS))
    compared = {m for job in JOBS.values() for m in job.nightly_metrics} | set(OPTIONAL_NIGHTLY_METRICS)
    assert {"decoder.cpu_vs_kaldi_median", "decoder.speedup_vs_kaldi"} <= compared & TIMED_METRICS


@pytest.mark.parametrize("path", sorted((ROOT / "jobs").glob("*.toml")), ids=lambda p: p.name)
def test_every_shipped_job_loads(path: Path) -> None:
    load_config(path)


def test_every_bench_verb_has_a_job_kind() -> None:
    assert {kind for kind, _ in BENCHES.values()} == {k for k in JOBS if k.startswith("bench_")}


def _namespace(cls: type, argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_config_options(parser, cls)
    return parser.parse_args(argv)


@pytest.mark.parametrize("kind", sorted(k for k in JOBS if k.startswith("bench_")))
def test_bench_verb_defaults_are_the_config_defaults(kind: str) -> None:
    cls = JOBS[kind].config
    assert config_from_args(cls, _namespace(cls, []), "specbench bench") == cls()


def test_bench_verb_options_replace_defaults_and_resolve_paths(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.chdir(tmp_path)
    args = _namespace(cfg.BenchDecoderConfig, ["--utterances", "7", "--gpu-decoders", "1,3", "--backends",
                                               "cpu,cpu-lattice", "--scores", "s.npz", "--gpu-cuda-graphs"])
    config = config_from_args(cfg.BenchDecoderConfig, args, "specbench bench decoder")
    assert config == dataclasses.replace(cfg.BenchDecoderConfig(), utterances=7, gpu_decoders=(1, 3),
                                         backends=("cpu", "cpu_lattice"), scores=tmp_path / "s.npz",
                                         gpu_cuda_graphs=True)


@pytest.mark.parametrize(("argv", "words"), [
    (["--utterances", "0"], ["specbench bench decoder: option --utterances = 0", "out of range"]),
    (["--backends", "cpu,bogus"], ["option --backends[1] = 'bogus'", "not allowed"]),
])
def test_bench_verb_bad_option_names_the_field(argv: list[str], words: list[str]) -> None:
    with pytest.raises(ConfigError) as err:
        args = _namespace(cfg.BenchDecoderConfig, argv)
        config_from_args(cfg.BenchDecoderConfig, args, "specbench bench decoder")
    assert all(w in str(err.value) for w in words), str(err.value)


def test_bench_job_file_shares_the_verb_defaults(tmp_path: Path) -> None:
    job = tmp_path / "bench.toml"
    job.write_text('kind = "bench_completion"\nprefixes = 10\n')
    assert load_config(job) == dataclasses.replace(cfg.BenchCompletionConfig(), prefixes=10)


def test_every_verb_has_a_handler() -> None:
    parser = build_parser()
    for argv in (["run", "x.toml"], ["validate", "x.toml"], ["nightly", "x.toml"], ["runs"], ["sync"],
                 ["data", "check"], ["data", "speech", "x.toml"], ["train", "mt", "x.toml"],
                 ["graph", "build", "x"],
                 ["compare", "a"], ["baseline", "set", "a"], ["ui"], ["server"], ["jobs", "--address", "a"],
                 ["logs", "j", "--address", "a"], *(["bench", name] for name in BENCHES),
                 ["decode", "--graph", "g", "--scores", "s", "--out", "o"]):
        assert callable(parser.parse_args(argv).handler), argv


def test_every_headline_metric_says_which_way_it_improves_as_the_nightly_judges_it() -> None:
    from specbench.reports import headline

    sets = (headline._HIGHER_IS_BETTER, headline._LOWER_IS_BETTER, headline._NEITHER)
    assert sum(len(x) for x in sets) == len(set().union(*sets))  # each metric in one set only
    assert set().union(*sets) == set(HEADLINE_METRICS) == set(BETTER)  # every one placed, no misspelt name
    nightly = load_config(ROOT / "jobs" / "nightly.toml")
    for rule in nightly.tolerance:
        if (rule.max_drop is None) != (rule.max_rise is None):  # one-sided: the nightly knows the direction
            assert BETTER[rule.metric] == ("higher" if rule.max_drop is not None else "lower"), rule.metric
        elif rule.max_drop is not None:  # both ways: a size, not a grade
            assert BETTER[rule.metric] is None, rule.metric


def _readme_headline_names() -> set[str]:
    """The metric names in the first column of README.md's headline table."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Headline metrics", 1)[1].split("\n## ", 1)[0]
    return {name for line in section.splitlines() if line.startswith("| `")
            for name in re.findall(r"`([^`]+)`", line.split(" | ", 1)[0])}


def test_the_readme_lists_exactly_the_headline_metrics() -> None:
    listed = _readme_headline_names()
    assert listed == set(HEADLINE_METRICS), (sorted(listed - set(HEADLINE_METRICS)),
                                             sorted(set(HEADLINE_METRICS) - listed))


def test_a_global_option_after_the_command_is_named_with_where_it_goes(capsys: pytest.CaptureFixture[str]) -> None:
    from specbench.cli import main

    assert main(["runs", "--tracking-uri", "sqlite:///x.db"]) == 2
    err = capsys.readouterr().err
    assert "--tracking-uri is a global option: it goes before the command" in err
    assert "Fix: specbench --tracking-uri VALUE runs" in err
    assert main(["runs", "--bogus"]) == 2
    assert "global option" not in capsys.readouterr().err  # other mistakes get argparse's message alone
