"""Where a job's minutes go: the wall time of each of its stages, added up per stage name, for its report
and its MLflow metrics."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def clock(timings: dict[str, float], stage: str) -> Iterator[None]:
    """Add the wall time of the block to `timings[stage]` (seconds), also when the block raises."""
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[stage] = timings.get(stage, 0.0) + time.perf_counter() - start
