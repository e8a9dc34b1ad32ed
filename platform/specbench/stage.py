"""The stage contract that algorithms and the runtime share.

A stage is a plain class: `setup()` loads what is heavy once (a graph, a model), `__call__(batch)` maps a
`pyarrow.Table` to a `pyarrow.Table`, and `resources` says what one instance needs. Every output row has a
`status` column: `"ok"`, or the reason that row failed, so one bad row never stops a batch and is never
silently dropped. Variable-length values are Arrow list columns.

This module is pure Python + pyarrow: algorithm packages import it, and so does `runtime/`, which maps a
stage onto Ray Data (an actor pool when the stage has state or asks for a GPU, tasks otherwise) or runs it
in a plain loop.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

STATUS_COLUMN = "status"
STATUS_OK = "ok"


@dataclass(frozen=True)
class Resources:
    """What one instance of a stage needs. `num_gpus` may be a fraction (0.25: four share one GPU)."""

    num_cpus: float = 1.0
    num_gpus: float = 0.0

    def __post_init__(self) -> None:
        if not self.num_cpus >= 0:
            raise ValueError(f"Resources.num_cpus must be >= 0, got {self.num_cpus!r}")
        if not 0 <= self.num_gpus <= 1 and not (self.num_gpus > 1 and float(self.num_gpus).is_integer()):
            raise ValueError(
                f"Resources.num_gpus must be a fraction in [0, 1] or a whole number, got {self.num_gpus!r}"
            )


class Stage(abc.ABC):
    """Base class of every batch stage.

    Subclasses set `resources`, and `stateful = True` when `setup()` loads something worth keeping between
    batches (the runtime then uses a pool of long-lived actors instead of tasks).
    """

    resources: Resources = Resources()
    stateful: bool = False

    def metrics(self, out: pa.Table, seconds: float) -> dict[str, float]:
        """Numbers for the job's Prometheus metrics after a batch (names of runtime.metrics: counters are
        added, gauges set); `out` is the batch's output, `seconds` the time it took. Default: none."""
        return {}

    def setup(self) -> None:
        """Load heavy state once per worker. Called before the first batch."""

    @abc.abstractmethod
    def __call__(self, batch: pa.Table) -> pa.Table:
        """Map one batch to its output; the output has a `status` column."""

    @property
    def uses_actors(self) -> bool:
        """True when the runtime should run this stage in a pool of actors."""
        return self.stateful or self.resources.num_gpus > 0


def failure_status(err: BaseException, what: str = "failed") -> str:
    """A failed row's status: the plain sentence `what: reason`, the reason in the error's own words, never
    its class name (a KeyError's words are the missing key, said as such)."""
    if isinstance(err, KeyError):
        reason = f"no entry for {err.args[0]!r}" if err.args else "a missing entry"
    else:
        reason = str(err).strip() or "no reason given"
    return f"{what}: {reason}"


def map_rows(
    batch: pa.Table,
    fn: Callable[[Mapping[str, Any]], Mapping[str, Any]],
    output_schema: pa.Schema,
) -> pa.Table:
    """Apply `fn` to each row of `batch`; a row whose `fn` raises, or whose output does not fit
    `output_schema`, gets its error in `status` (the other rows of the batch are kept).

    The output has the columns of `output_schema` plus `status`; a failed row keeps nulls in the other
    columns. Rows keep their order and their count.
    """
    rows: list[dict[str, Any]] = []
    schema = output_schema.append(pa.field(STATUS_COLUMN, pa.string(), nullable=False))
    for row in batch.to_pylist():
        what = "failed"
        try:
            out = dict(fn(row))
            out[STATUS_COLUMN] = STATUS_OK
            what = "its output does not fit the stage's schema"
            pa.RecordBatch.from_pylist([out], schema=schema)
        except Exception as err:  # noqa: BLE001 - the reason is kept in the row
            out = {name: None for name in output_schema.names}
            out[STATUS_COLUMN] = failure_status(err, what)
        rows.append(out)
    return pa.Table.from_pylist(rows, schema=schema)


def check_output(table: pa.Table, stage_name: str) -> pa.Table:
    """Raise if a stage broke the contract (no `status` column, or nulls in it)."""
    if STATUS_COLUMN not in table.column_names:
        raise TypeError(f"stage {stage_name} returned a table without a '{STATUS_COLUMN}' column")
    if table.column(STATUS_COLUMN).null_count:
        raise TypeError(f"stage {stage_name} returned rows whose '{STATUS_COLUMN}' is null")
    return table


def concat(tables: Iterable[pa.Table]) -> pa.Table:
    """Concatenate stage outputs, unifying schemas (list columns may differ in nullability)."""
    tables = list(tables)
    if not tables:
        raise ValueError("no tables to concatenate")
    return pa.concat_tables(tables, promote_options="default")
