"""Where a job's minutes go: the wall time of each of its stages, added up per stage name, for its report
and its MLflow metrics; and the job's progress lines on stderr."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def clock(timings: dict[str, float], stage: str) -> Iterator[None]:
    """Add the wall time of the block to `timings[stage]` (seconds), also when the block raises."""
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[stage] = timings.get(stage, 0.0) + time.perf_counter() - start


def stage_printer(prefix: str) -> Callable[[str], None]:
    """A graph build's `step`: prints each stage's name on stderr with the seconds since it was made, so a
    job that builds the graph it names (minutes for a Sphinx HCLG) shows where the build is."""
    start = time.perf_counter()

    def step(name: str) -> None:
        print(f"[{prefix} {time.perf_counter() - start:6.1f}s] {name}", file=sys.stderr, flush=True)

    return step


def job_logger(prefix: str) -> Callable[[str], None]:
    """A job's progress line on stderr, ``[prefix] message``, flushed at once (Ray workers and CI logs
    interleave it with other output)."""

    def log(message: str) -> None:
        print(f"[{prefix}] {message}", file=sys.stderr, flush=True)

    return log
