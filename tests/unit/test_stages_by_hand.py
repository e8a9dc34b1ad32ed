"""The parts of `runtime.stages` that need no Ray cluster, by hand: a stage's name, the execution mode "auto"
resolves to, the batch-size and pool-size checks, when an "auto" actor pool runs as tasks instead, the plain
loop of `run_local` (one `setup()`, batches of `batch_size` rows in order, one call on an empty table, the
stage contract checked), the body of a `run_tasks` task, and that the module imports without ray."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from specbench.errors import SpecbenchError
from specbench.runtime.stages import (
    _apply,
    _check_batch_size,
    _one_batch_per_actor,
    _pool_size,
    execution_mode,
    run_local,
    stage_name,
    task_name,
)
from specbench.stage import STATUS_COLUMN, STATUS_OK, Resources, Stage, map_rows

pytestmark = pytest.mark.unit

PLATFORM = Path(__file__).resolve().parents[2] / "platform"


class Doubler(Stage):
    """`twice = 2 * id`; logs its `setup()` calls and the ids of each batch it is called on."""

    schema = pa.schema([("id", pa.int64()), ("twice", pa.int64())])

    def __init__(self) -> None:
        self.setups = 0
        self.batches: list[list[int]] = []

    def setup(self) -> None:
        self.setups += 1

    def __call__(self, batch: pa.Table) -> pa.Table:
        self.batches.append(batch.column("id").to_pylist())
        return map_rows(batch, self._row, self.schema)

    @staticmethod
    def _row(row: Mapping[str, Any]) -> Mapping[str, Any]:
        return {"id": row["id"], "twice": 2 * row["id"]}


class Named(Doubler):
    name = "doubling"


class Stateful(Doubler):
    stateful = True


class OnGpu(Doubler):
    resources = Resources(num_cpus=1, num_gpus=0.25)


class NoStatus(Doubler):
    def __call__(self, batch: pa.Table) -> pa.Table:
        return batch


def _ids(n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(n), pa.int64())})


def test_a_row_whose_output_does_not_fit_the_schema_fails_alone() -> None:
    out = map_rows(_ids(3), lambda row: {"id": row["id"], "twice": "two" if row["id"] == 1 else 2 * row["id"]},
                   Doubler.schema)
    assert out.column("twice").to_pylist() == [0, None, 4]
    status = out.column(STATUS_COLUMN).to_pylist()
    assert status[0] == status[2] == STATUS_OK and status[1].startswith("its output does not fit the stage's schema:")


def test_a_stage_is_named_by_its_name_else_its_class() -> None:
    assert stage_name(Named()) == "doubling"
    assert stage_name(Doubler()) == "Doubler"
    unnamed = Named()
    unnamed.name = ""  # an empty name counts as none
    assert stage_name(unnamed) == "Named"


def test_auto_mode_uses_actors_for_state_or_a_gpu_and_an_explicit_mode_is_kept() -> None:
    assert execution_mode(Doubler()) == "tasks"
    assert execution_mode(Stateful()) == "actors"
    assert execution_mode(OnGpu()) == "actors"
    assert execution_mode(Doubler(), "actors") == "actors"
    assert execution_mode(Stateful(), "tasks") == "tasks"
    with pytest.raises(ValueError, match="'auto', 'actors' or 'tasks'"):
        execution_mode(Doubler(), "threads")  # type: ignore[arg-type]


def test_batch_size_must_be_a_positive_int() -> None:
    _check_batch_size(1)
    for bad in (0, -3, True, 2.0, "4"):
        with pytest.raises(ValueError, match="batch_size must be a positive integer"):
            _check_batch_size(bad)  # type: ignore[arg-type]


def test_an_auto_cpu_actor_pool_with_a_batch_per_slot_runs_as_tasks() -> None:
    # (mode, chosen, num_actors, num_gpus, num_batches, slots)
    assert _one_batch_per_actor("auto", "actors", None, 0, 4, 4)  # 4 batches, 4 slots: one each
    assert _one_batch_per_actor("auto", "actors", None, 0, 1, 4)
    assert not _one_batch_per_actor("auto", "actors", None, 0, 5, 4)  # one actor would take two batches
    assert not _one_batch_per_actor("auto", "actors", 2, 0, 2, 4)  # pool size asked for
    assert not _one_batch_per_actor("auto", "actors", None, 0.25, 2, 4)  # a GPU stage keeps its actors
    assert not _one_batch_per_actor("actors", "actors", None, 0, 2, 4)  # actors asked for
    assert not _one_batch_per_actor("auto", "tasks", None, 0, 2, 4)  # tasks already


def test_the_pool_holds_what_fits_at_most_one_actor_per_batch() -> None:
    assert _pool_size(None, 4, 10, "s") == 4  # min(slots, batches)
    assert _pool_size(None, 4, 3, "s") == 3
    assert _pool_size(None, 4, None, "s") == 4  # a dataset's batch count is unknown: every slot
    assert _pool_size(None, 4, 0, "s") == 1  # never an empty pool
    assert _pool_size(3, 4, 1, "s") == 3  # asked for: kept, even above the batch count
    assert _pool_size(4, 4, 10, "s") == 4
    with pytest.raises(SpecbenchError, match=r"stage s: num_actors=5, but the Ray cluster holds only 4"):
        _pool_size(5, 4, 10, "s")
    for bad in (0, -1, True, 2.0):
        with pytest.raises(ValueError, match="num_actors must be a positive integer"):
            _pool_size(bad, 4, 10, "s")  # type: ignore[arg-type]


def test_run_local_sets_up_once_and_calls_the_stage_per_batch_in_order() -> None:
    stage = Doubler()
    out = run_local(stage, _ids(7), batch_size=3)
    assert stage.setups == 1
    assert stage.batches == [[0, 1, 2], [3, 4, 5], [6]]  # 7 rows by 3: the last batch short
    assert out.column("twice").to_pylist() == [0, 2, 4, 6, 8, 10, 12]
    assert out.column(STATUS_COLUMN).to_pylist() == [STATUS_OK] * 7
    exact = Doubler()
    run_local(exact, _ids(6), batch_size=3)
    assert exact.batches == [[0, 1, 2], [3, 4, 5]]  # no empty third batch
    whole = Doubler()
    run_local(whole, _ids(5))  # the default batch size, 256: one batch
    assert whole.batches == [[0, 1, 2, 3, 4]]


def test_run_local_calls_the_stage_once_on_an_empty_table_for_its_schema() -> None:
    stage = Doubler()
    out = run_local(stage, _ids(0), batch_size=3)
    assert stage.setups == 1 and stage.batches == [[]]
    assert out.num_rows == 0 and out.schema.names == ["id", "twice", STATUS_COLUMN]


def test_run_local_checks_the_contract_and_the_batch_size() -> None:
    with pytest.raises(TypeError, match="stage NoStatus returned a table without a 'status' column"):
        run_local(NoStatus(), _ids(4), batch_size=2)
    with pytest.raises(TypeError, match="without a 'status' column"):
        run_local(NoStatus(), _ids(0))
    stage = Doubler()
    with pytest.raises(ValueError, match="batch_size"):
        run_local(stage, _ids(4), batch_size=0)
    assert stage.setups == 0  # refused before any setup


def test_a_task_returns_its_functions_result_and_hands_it_to_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []

    def metrics(result: int) -> dict[str, float]:
        seen.append(result)
        return {}

    assert _apply(lambda x: x * x, 7) == 49
    assert _apply(lambda x: x * x, 7, metrics) == 49
    assert seen == [49]  # the result, not the item
    # the metrics' stage tag names a partial's function, as the task's name does ("partial" merged them all)
    from specbench.runtime import metrics as runtime_metrics

    tags: list[dict] = []
    monkeypatch.setattr(runtime_metrics, "record", lambda values, **tag: tags.append(tag))
    assert _apply(functools.partial(sorted, reverse=True), [2, 3, 1]) == [3, 2, 1] and tags == [{"stage": "sorted"}]
    assert task_name(functools.partial(sorted, reverse=True)) == task_name(sorted) == "sorted"


def test_the_module_imports_and_runs_locally_without_ray() -> None:
    code = ("import sys; sys.modules['ray'] = None\n"  # any `import ray` now raises ImportError
            "import pyarrow as pa\n"
            "from specbench.runtime.stages import run_local, execution_mode\n"
            "from specbench.runtime import run_stage\n")
    env = {**os.environ, "PYTHONPATH": str(PLATFORM)}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 0, proc.stderr
