"""The simultrans job's choice on the val grid: highest BLEU (to two decimals), then lowest AL, then the
configured speculation ranking; and the grid's report keys."""

from __future__ import annotations

import pytest

from specbench.pipelines.simultrans import _best, _grid_key

pytestmark = pytest.mark.unit


def test_best_takes_bleu_then_al_then_the_default_ranking() -> None:
    grid = {(True, 3, 1): {"bleu": 30.0, "al": 2.0}, (False, 3, 1): {"bleu": 31.0, "al": 2.5},
            (True, 5, 2): {"bleu": 31.004, "al": 2.2}}
    assert _best(grid, default_ranking=True) == (True, 5, 2)  # 31.00 ties 31.00; lower AL wins
    grid[(True, 5, 2)]["al"] = 2.5
    assert _best(grid, default_ranking=True) == (True, 5, 2)  # a full tie goes to the default ranking
    assert _best(grid, default_ranking=False) == (False, 3, 1)
    grid[(False, 7, 3)] = {"bleu": 32.0, "al": 3.0}
    assert _best(grid, default_ranking=True) == (False, 7, 3)


def test_grid_keys_mark_only_the_other_ranking() -> None:
    assert _grid_key(True, 5, 2, default_ranking=True) == "b5_w2"
    assert _grid_key(False, 5, 2, default_ranking=True) == "b5_w2/sum"
    assert _grid_key(True, 5, 2, default_ranking=False) == "b5_w2/per_token"
