"""Small stages and task functions for the runtime tests.

They live in a module of their own (not in a test module) so that Ray workers can import them by name:
the `ray_cluster` fixture puts this directory on the workers' `PYTHONPATH`.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from specbench.stage import Resources, Stage, map_rows

VOCAB = ("turn", "on", "the", "lights", "play", "some", "jazz", "what", "time", "is", "it", "wake", "me")
UNKNOWN_WORDS = ("zyzzyva", "qwxl")


def word_table(num_rows: int) -> pa.Table:
    """`num_rows` rows of (`id: int64`, `word: string`); every 37th word is not in `VOCAB`."""
    words = [
        UNKNOWN_WORDS[i % len(UNKNOWN_WORDS)] if i % 37 == 5 else VOCAB[(i * 7) % len(VOCAB)]
        for i in range(num_rows)
    ]
    return pa.table({"id": pa.array(range(num_rows), pa.int64()), "word": pa.array(words, pa.string())})


def _log_setup(path: str | None) -> None:
    """Append this process's pid to `path`, and "actor" where the call runs in a Ray actor (one line per
    `setup()` call, across processes)."""
    if path is not None:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(f"{os.getpid()}{' actor' if _in_actor() else ''}\n")


def _in_actor() -> bool:
    """Whether this code runs inside a Ray actor (a task or the driver is not one)."""
    try:
        import ray
    except ImportError:
        return False
    return ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None


def _jitter(batch: pa.Table, max_s: float) -> None:
    """Sleep a pseudo-random time that depends on the batch, so that batches finish out of order."""
    if max_s > 0 and batch.num_rows:
        time.sleep(random.Random(batch.column("id")[0].as_py()).random() * max_s)


class LookupStage(Stage):
    """Stateful: maps `word` to its index in a lookup table that `setup()` builds.

    Output: `id: int64`, `word_id: int32`, `features: list<float32>` (word index, word length), `status`.
    An unknown word fails its row (`status` = "failed: no entry for ..."); the row stays, with nulls.
    """

    stateful = True
    schema = pa.schema(
        [("id", pa.int64()), ("word_id", pa.int32()), ("features", pa.list_(pa.float32()))]
    )

    def __init__(self, setup_log: str | None = None, jitter_s: float = 0.0, batch_log: str | None = None) -> None:
        self.setup_log = setup_log
        self.jitter_s = jitter_s
        self.batch_log = batch_log  # where each batch's start is logged ("pid first-id"), if anywhere
        self.setup_calls = 0
        self._lookup: dict[str, int] | None = None

    def setup(self) -> None:
        self.setup_calls += 1
        self._lookup = {word: index for index, word in enumerate(VOCAB)}
        _log_setup(self.setup_log)

    def __call__(self, batch: pa.Table) -> pa.Table:
        if self._lookup is None:
            raise RuntimeError("LookupStage.setup() was not called")
        if self.batch_log is not None and batch.num_rows:
            with open(self.batch_log, "a", encoding="utf-8") as handle:
                handle.write(f"{os.getpid()} {batch.column('id')[0].as_py()}\n")
        _jitter(batch, self.jitter_s)
        return map_rows(batch, self._row, self.schema)

    def _row(self, row: Mapping[str, Any]) -> Mapping[str, Any]:
        assert self._lookup is not None
        index = self._lookup[row["word"]]
        return {"id": row["id"], "word_id": index, "features": [float(index), float(len(row["word"]))]}


class SquareStage(Stage):
    """Stateless: `square = id * id` and `digits: list<string>`; ids that are multiples of 13 fail."""

    schema = pa.schema([("id", pa.int64()), ("square", pa.int64()), ("digits", pa.list_(pa.string()))])

    def __init__(self, setup_log: str | None = None, jitter_s: float = 0.0) -> None:
        self.setup_log = setup_log
        self.jitter_s = jitter_s

    def setup(self) -> None:
        _log_setup(self.setup_log)

    def __call__(self, batch: pa.Table) -> pa.Table:
        _jitter(batch, self.jitter_s)
        return map_rows(batch, self._row, self.schema)

    @staticmethod
    def _row(row: Mapping[str, Any]) -> Mapping[str, Any]:
        value = row["id"]
        if value % 13 == 0:
            raise ValueError(f"{value} is a multiple of 13")
        return {"id": value, "square": value * value, "digits": list(str(value))}


class FailingStage(SquareStage):
    """Like `SquareStage`, but the batch holding id `bad` raises (`how` = "raise") or kills its worker
    process (`how` = "exit", as a segfault or the OOM killer would)."""

    def __init__(self, bad: int, how: str) -> None:
        super().__init__()
        self.bad, self.how = bad, how

    def __call__(self, batch: pa.Table) -> pa.Table:
        if self.bad in batch.column("id").to_pylist():
            if self.how == "exit":
                os._exit(1)
            raise RuntimeError("kaput")
        return super().__call__(batch)


class QuarterGpuStage(SquareStage):
    """Like `SquareStage`, but asks for a quarter of a GPU per instance."""

    resources = Resources(num_cpus=1, num_gpus=0.25)


def slow_square(item: int) -> int:
    """`item ** 2` after a pseudo-random pause (so tasks finish out of order)."""
    time.sleep(random.Random(item).random() * 0.05)
    return item * item


def fail_on_bad(item: str) -> str:
    """Upper-case `item`; raise for items that start with 'bad'."""
    if item.startswith("bad"):
        raise ValueError(f"cannot process {item}")
    return item.upper()


def translated_metrics(rows: list) -> dict[str, float]:
    """A run_tasks metrics callback for tests: one translated sentence per item."""
    return {"sentences_translated": float(len(rows))}
