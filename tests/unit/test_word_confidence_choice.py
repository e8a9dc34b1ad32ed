"""The `word_confidence` job's devel choice, its report and its config (experiments/word_confidence.py,
WordConfidenceConfig): ties go to the smaller beam, then the smaller scale, whatever order the job lists
them in; a choice on an edge of its grid is reported; a test set without words still prints; and a bad
devel grid is refused naming the file, the key, the value and the fix."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from specbench.config import WordConfidenceConfig
from specbench.errors import ConfigError
from specbench.experiments import word_confidence as job
from specbench.experiments.registry import load_config

pytestmark = pytest.mark.unit


def test_ties_go_to_the_smaller_beam_then_the_smaller_scale_in_any_listed_order() -> None:
    scores = [(0.30, 8.0, 0.5), (0.35, 8.0, 1.0), (0.35, 4.0, 1.0), (0.35, 4.0, 0.2), (0.35, 6.0, 0.1),
              (-0.1, 2.0, 0.1)]
    for order in itertools.permutations(scores):
        assert job.best_on_grid(list(order)) == (4.0, 0.2)
    assert job.best_on_grid([(0.1, 4.0, 0.5), (0.2, 8.0, 1.0)]) == (8.0, 1.0)  # the highest NCE first
    assert job.best_on_grid([(-0.5, 8.0, 1.0)]) == (8.0, 1.0)


def test_a_choice_on_an_edge_of_its_grid_is_named() -> None:
    config = WordConfidenceConfig(lattice_beams=(8.0, 4.0, 6.0), posterior_scales=(0.5, 0.2, 1.0))
    assert job.grid_edges(config, 6.0, 0.5) == {}
    assert job.grid_edges(config, 8.0, 0.5) == {"lattice_beam": "largest"}
    assert job.grid_edges(config, 4.0, 0.2) == {"lattice_beam": "smallest", "posterior_scale": "smallest"}
    assert job.grid_edges(config, 6.0, 1.0) == {"posterior_scale": "largest"}
    single = WordConfidenceConfig(lattice_beams=(8.0,), posterior_scales=(0.5, 0.2, 1.0))
    assert job.grid_edges(single, 8.0, 0.5) == {"lattice_beam": "only"}
    (warning,) = job.edge_warnings(job.grid_edges(config, 8.0, 0.5), config)
    assert "largest of lattice_beams = [8.0, 4.0, 6.0]" in warning and "beyond the grid" in warning


def report(edges: dict[str, str], cpu: dict) -> dict:
    config = WordConfidenceConfig()
    return {"devel_utterances": 8, "test_utterances": 3, "lattice_beam": 8.0, "posterior_scale": 0.5,
            "devel_nce": {"beam8.scale0.5": 0.2, "beam4.scale0.5": float("nan")},
            "choice_on_grid_edge": edges, "choice_warnings": job.edge_warnings(edges, config),
            "backends": {"cpu": cpu, "gpu": {"status": "unavailable (no usable CUDA device here)"}},
            "seconds": 1.0}


def test_the_edge_is_a_metric_and_a_line_of_the_summary() -> None:
    cpu = {"status": "ok", "decode_seconds": 1.0, "undefined_utterances": 0, "nce": 0.3, "auc": 0.9,
           "words": 10, "share_correct": 0.9, "mean_confidence": 0.8, "calibration": []}
    on_edge = report({"lattice_beam": "largest"}, cpu)
    assert job.metrics(on_edge)["confidence.choice_on_grid_edge"] == 1.0
    assert job.metrics(report({}, cpu))["confidence.choice_on_grid_edge"] == 0.0
    lines = job.summary(on_edge)
    assert any(line.startswith("  warning: the chosen lattice beam is the largest of lattice_beams")
               for line in lines)
    assert not any("warning" in line for line in job.summary(report({}, cpu)))


def test_a_test_set_without_words_still_prints() -> None:
    """No test word (every utterance without posteriors): no NCE, AUC, share correct or mean confidence."""
    cpu = {"status": "ok", "decode_seconds": 1.0, "undefined_utterances": 3, "nce": None, "auc": None,
           "words": 0, "share_correct": None, "mean_confidence": None, "calibration": []}
    lines = job.summary(report({}, cpu))
    expected = "cpu: NCE None, AUC None, 0 words (share correct undefined), 3 utterances without posteriors"
    assert expected in lines[1]
    metrics = job.metrics(report({}, cpu))
    assert "confidence.share_correct.cpu" not in metrics and metrics["confidence.words.cpu"] == 0.0
    assert job.legend_label("cpu", cpu) == "cpu (NCE undefined, AUC undefined)"
    assert job.legend_label("cpu", {**cpu, "nce": 0.0, "auc": 0.5}) == "cpu (NCE 0.000, AUC 0.500)"


@pytest.mark.parametrize(("lines", "expected"), [
    ("lattice_beams = []", "lattice_beams = []: no value"),
    ("lattice_beams = [4.0, 8.0, 4.0]", "key 'lattice_beams' = [4.0, 8.0, 4.0]: 4.0 is listed twice"),
    ("posterior_scales = [0.1234567, 0.1234568]", "0.1234567 and 0.1234568 are one grid point"),
    ("posterior_scales = []", "posterior_scales = []: no value"),
    ("lattice_beams = [0.0]", "key 'lattice_beams[0]' = 0.0: out of range"),
    ("posterior_scales = [nan]", "key 'posterior_scales[0]' = nan: out of range"),
    ('backends = ["twin"]', "backends = ['twin']: cpu is missing"),
])
def test_a_bad_devel_grid_names_the_file_the_key_the_value_and_the_fix(tmp_path: Path, lines: str,
                                                                        expected: str) -> None:
    path = tmp_path / "confidence.toml"
    path.write_text(f'kind = "word_confidence"\n{lines}\n')
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert str(path) in message and expected in message and "Fix:" in message


def test_a_devel_grid_built_in_code_is_checked_too() -> None:
    for bad in ((), (4.0, float("inf")), (4.0, -1.0), (True,), (4.0, 4.0)):
        with pytest.raises(ValueError, match="lattice_beams = .*Fix: list distinct numbers > 0"):
            WordConfidenceConfig(lattice_beams=bad)
    assert WordConfidenceConfig(lattice_beams=(8.0, 4.0)).lattice_beams == (8.0, 4.0)  # any order
