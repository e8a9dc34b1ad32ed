"""A nightly tolerance must bound the direction in which its metric gets worse (`headline.BETTER`): a rule
that bounds only improvements is refused before anything runs, naming the file, the metric and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbench.errors import ConfigError
from specbench.experiments.nightly import validate
from specbench.experiments.registry import load_config

ROOT = Path(__file__).resolve().parents[2]
RULES = {"graph.states": "max_rise = 0\nmax_drop = 0", "graph.arcs": "max_drop = 0",
         "graph.ppl_test": "max_rise = 0.5", "graph.test_unseen_rate": "max_rise = 0.001"}


def _nightly(tmp_path: Path, **changed: str) -> Path:
    rules = {**RULES, **{k.replace("__", "."): v for k, v in changed.items()}}
    body = "".join(f'[[tolerance]]\nmetric = "{m}"\n{r}\n' for m, r in rules.items())
    path = tmp_path / "nightly.toml"
    path.write_text(f'kind = "nightly"\njobs = ["{ROOT / "jobs" / "graph_slurp.toml"}"]\n{body}', encoding="utf-8")
    return path


@pytest.mark.parametrize("metric, rule, fix", [
    ("graph.ppl_test", "max_drop = 0.5", "use max_rise = 0.5"),  # lower is better: a drop is an improvement
    ("decoder.cpu_vs_kaldi_median", "max_rise = 0.25", "use max_drop = 0.25"),  # higher is better
    ("graph.ppl_test", "min = 100", "use max = 100"),  # an absolute bound on the improving side only
    ("decoder.cpu_vs_kaldi_median", "max = 9", "use min = 9"),
])
def test_a_rule_bounding_only_improvements_is_refused(tmp_path: Path, metric: str, rule: str, fix: str) -> None:
    path = _nightly(tmp_path, **{metric.replace(".", "__"): rule})
    with pytest.raises(ConfigError) as error:
        validate(path, load_config(path))
    message = str(error.value)
    assert str(path) in message and f'metric = "{metric}"' in message and fix in message


@pytest.mark.parametrize("metric, rule", [
    ("graph.ppl_test", "max_rise = 0.5\nmax_drop = 3"),  # both sides: a metric that must not move
    ("graph.arcs", "max_drop = 0"),  # a size: neither way is better
    ("graph.ppl_test", "max = 200"),  # absolute bounds only
])
def test_rules_that_bound_the_worse_direction_or_a_neutral_metric_pass(tmp_path: Path, metric: str, rule: str) -> None:
    path = _nightly(tmp_path, **{metric.replace(".", "__"): rule})
    assert [job.name for job, _ in validate(path, load_config(path))] == ["graph_slurp.toml"]


def test_the_shipped_nightly_bounds_every_metric_the_right_way() -> None:
    path = ROOT / "jobs" / "nightly.toml"
    assert len(validate(path, load_config(path))) == 4


def test_a_job_name_no_mlflow_search_can_hold_is_refused_before_anything_runs(tmp_path: Path) -> None:
    """A name with both kinds of quote (a simultrans job may be named freely) cannot be searched for its
    baseline: refused here, not after the job has run."""
    job = tmp_path / "simultrans.toml"
    job.write_text('kind = "simultrans"\nname = "bob\'s \\"best\\""\n', encoding="utf-8")
    assert load_config(job).name == 'bob\'s "best"'
    path = _nightly(tmp_path).with_name("nightly.toml")
    body = path.read_text(encoding="utf-8").replace(str(ROOT / "jobs" / "graph_slurp.toml"), str(job))
    path.write_text(body + '[[tolerance]]\nmetric = "simul.bleu_full_pooled"\nmax_drop = 1\n'
                    '[[tolerance]]\nmetric = "simul.speculation_gain_bleu"\nmax_drop = 1\n', encoding="utf-8")
    with pytest.raises(ConfigError) as error:
        validate(path, load_config(path))
    message = str(error.value)
    assert str(path) in message and str(job) in message and "both kinds of quote" in message and "Fix:" in message
