"""The simultrans job's choice on the val grid: highest BLEU (to two decimals), then lowest AL, then the
configured speculation ranking; the grid's report keys; the job's further test sets."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbench.errors import ConfigError
from specbench.experiments.registry import load_config
from specbench.experiments.simultrans import (
    _best,
    _chosen,
    _grid_key,
    _ranking_ablation,
    grid_methods,
    waitk_methods,
)

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]


def test_best_takes_bleu_then_al_then_the_default_ranking() -> None:
    grid = {(True, 3, 1): {"bleu": 30.0, "al": 2.0}, (False, 3, 1): {"bleu": 31.0, "al": 2.5},
            (True, 5, 2): {"bleu": 31.004, "al": 2.2}}
    assert _best(grid, default_ranking=True) == (True, 5, 2)  # 31.00 ties 31.00; lower AL wins
    grid[(True, 5, 2)]["al"] = 2.5
    assert _best(grid, default_ranking=True) == (True, 5, 2)  # a full tie goes to the default ranking
    assert _best(grid, default_ranking=False) == (False, 3, 1)
    grid[(False, 7, 3)] = {"bleu": 32.0, "al": 3.0}
    assert _best(grid, default_ranking=True) == (False, 7, 3)


def test_every_grid_cell_beam_searches_the_tail_and_w_zero_is_the_tail_beam() -> None:
    """The cells differ only in what speculation adds: w = 0 is the tail beam at the cell's b (SBS without
    speculation), never greedy search; w >= 1 is SBS with that b and w."""
    grid = grid_methods("m.pt", 3, (True, False), (3, 7), (0, 1, 2))
    assert len(grid) == 12
    for (ranking, b, w), method in grid.items():
        assert (method.kind, method.k, method.beam) == ("waitk", 3, b)
        assert (method.search, method.window) == (("tail", 0) if w == 0 else ("sbs", w))
        assert method.length_normalized == (ranking if w else True)  # the tail beam ranks no speculation
    # the w = 0 cell is the decomposition's tail beam at the same b, whichever the ranking: decoded once
    assert grid[(True, 7, 0)] == grid[(False, 7, 0)] == waitk_methods("m.pt", 3, (False, 7, 2))["tail"]


def test_a_winning_w_zero_is_kept_and_its_speculation_is_nothing() -> None:
    report = {"best": {"waitk": {"length_normalized": True, "beam": 5, "window": 0},
                       "full": {"length_normalized": False, "beam": 3, "window": 2}}}
    assert _chosen(report, "waitk") == (True, 5, 0) and _chosen(report, "full") == (False, 3, 2)
    methods = waitk_methods("m.pt", 3, _chosen(report, "waitk"))
    assert (methods["greedy"].search, methods["greedy"].beam) == ("greedy", 1)
    assert (methods["tail"].beam, methods["sbs"].beam, methods["sbs"].window) == (5, 5, 0)  # SBS = the tail
    asked: list = []  # the job's evaluator decodes each distinct Method once
    _ranking_ablation(lambda method: asked.append(method) or {}, load_config(ROOT / "jobs" / "simultrans.toml"),
                      "m.pt", report)
    assert set(asked) == {methods["tail"], methods["greedy"]}  # both rankings are the one tail beam


def test_grid_keys_mark_only_the_other_ranking() -> None:
    assert _grid_key(True, 5, 2, default_ranking=True) == "b5_w2"
    assert _grid_key(False, 5, 2, default_ranking=True) == "b5_w2/sum"
    assert _grid_key(True, 5, 2, default_ranking=False) == "b5_w2/per_token"


@pytest.mark.parametrize("line, message", [
    ('test_splits = ["test_2017_flickrx"]', "'test_2017_flickrx': not allowed; allowed: 'train'"),
    ('test_splits = ["test_2016_flickr", "test_2016_flickr"]', "is listed twice"),
    ('test_splits = ["test_2016_flickr", "val"]', "none of them the val split 'val'"),
    ("test_splits = []", "at least one split"),
    # the adaptive curves and the ranking ablation are decoded on every test set: the old key is refused
    ('adaptive_split = "test_2016_flickr"', "unknown key; allowed keys here"),
    ("grid_k = 4", "grid_k 4 must be one of ks"),
    ("ks = [5, 1, 3]", "ks = [5, 1, 3]: list them in increasing order"),
    ('extra_test_splits = ["test_2017_flickr"]', "unknown key; allowed keys here"),  # the key before test_splits
])
def test_test_splits_are_checked_naming_the_job_file(tmp_path: Path, line: str, message: str) -> None:
    job = tmp_path / "simultrans.toml"
    job.write_text(f'kind = "simultrans"\n{line}\n', encoding="utf-8")
    with pytest.raises(ConfigError) as error:
        load_config(job)
    assert str(job) in str(error.value) and message in str(error.value)


def test_every_multi30k_test_set_is_decoded_by_default_and_by_the_shipped_jobs() -> None:
    every = ("test_2016_flickr", "test_2017_flickr", "test_2017_mscoco", "test_2018_flickr")
    for name in ("simultrans.toml", "simultrans_quick.toml"):
        config = load_config(ROOT / "jobs" / name)
        assert config.test_splits == every
        # test-time wait-k: in the full job, left out of the quick one for its cost
        assert config.test_time_wait_k == (name == "simultrans.toml")
