"""The word LM's answers stored on disk (`experiments/predictive_asr/lm_cache.py`): a second cache of the
same checkpoint, settings and device starts with every answer the first computed through the Ray LM stage,
equal to them, and asks the stage for nothing it already has; other settings have their own store; an
unreadable part is an error naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbench.errors import DataError
from specbench.experiments.predictive_asr.lm_cache import LmCache
from specbench.prediction.settings import CompletionSettings

pytestmark = pytest.mark.integration
LM = Path(__file__).resolve().parents[2] / "models" / "lm_slurp.pt"
SETTINGS = CompletionSettings(n_best=2, beam=2, max_new_words=4)
PREFIXES = {("play",), ("set", "an"), ("what",)}
PAIRS = {(("play",), ("my", "music")), (("what",), ("time", "is", "it"))}


def test_answers_are_kept_on_disk_per_checkpoint_and_settings(ray_cluster: object, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path))
    first = LmCache(LM, SETTINGS)
    first.fill(PREFIXES, PAIRS)
    assert first.computed == len(PREFIXES) + len(PAIRS) and len(list(first.store.glob("part-*.parquet"))) == 1
    second = LmCache(LM, SETTINGS)
    assert second.completions == first.completions and second.scores == first.scores
    second.fill(PREFIXES, PAIRS)
    assert second.computed == 0  # nothing asked of the stage
    assert all(len(c) == 2 for c in second.completions.values())
    other = LmCache(LM, CompletionSettings(n_best=3, beam=3, max_new_words=4))
    assert other.store != first.store and not other.completions
    in_memory = LmCache(LM, SETTINGS, persist=False)
    assert in_memory.store is None and not in_memory.completions
    (first.store / "part-broken.parquet").write_bytes(b"not parquet")
    with pytest.raises(DataError, match="part-broken.parquet cannot be read.*Fix: delete it"):
        LmCache(LM, SETTINGS)
