"""Run a `Stage` over an Arrow table: in a plain loop, or on Ray Data as tasks or as an actor pool.

All three ways give the same table (same rows, same order, same values), because:

- batches are the same: the local loop slices the table every `batch_size` rows, and the Ray path cuts
  its input blocks at multiples of `batch_size`, so Ray Data's `map_batches(batch_size=...)` sees the very
  same slices;
- order is kept by Ray Data itself: the dataset's `DataContext.execution_options.preserve_order` is set,
  so output blocks come back in input order. (We chose this over an index column plus a final sort: a
  stage's output need not keep its input columns, nor even one output row per input row.)

A stage whose `uses_actors` is true (state loaded in `setup()`, or a GPU) runs in a fixed pool of actors
that call `setup()` once each; any other runs as Ray tasks that call `setup()` before every batch. In
"auto" mode a CPU stage with no more batches than worker slots runs as tasks: the same `setup()` calls (one
per batch), without starting actor processes (about 3 s each on 2 cores). Every
batch's output is checked against the stage contract (`check_output`) where it is produced. Stages travel to
the workers through Ray's own serialization (cloudpickle), in flight only.

`run_tasks` maps a plain function over a list of items as Ray tasks, with a tqdm bar at the driver.

This module imports ray only inside the functions that use it, so `run_local` (and `run_stage(...,
backend="local")`) work where ray is not installed, such as the GPU test machine.
"""

from __future__ import annotations

import functools
import math
import time
import warnings
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import pyarrow as pa

from specbench.errors import SpecbenchError
from specbench.stage import Stage, check_output, concat

if TYPE_CHECKING:
    import ray.data

Mode = Literal["auto", "actors", "tasks"]
Backend = Literal["local", "ray"]
T = TypeVar("T")
R = TypeVar("R")

DEFAULT_BATCH_SIZE = 256
_BLOCKS_PER_SLOT = 4  # input blocks per worker slot: enough to balance uneven batches
_MAX_BLOCK_BYTES = 64 * 2**20  # so that a huge table is not one huge object
_ITEM_REPR_CHARS = 200
STAGE_RETRIES = 3  # restarts of a dead stage actor, retries of a batch whose worker died
WAIT_POLL_S = 2.0  # a wait that sees nothing finish in this long checks that the cluster is still there
# the cluster's GCS refusing connections this long mid-stage means it is gone: said as an error before Ray
# ends the process on its own (after 60 s, `gcs_rpc_server_reconnect_timeout_s`) and leaves the run RUNNING
CLUSTER_LOST_S = 20.0


class TaskFailedError(SpecbenchError):
    """A `run_tasks` item failed; `index` and `item` say which, `__cause__` holds the worker's error."""

    def __init__(self, message: str, index: int, item: Any) -> None:
        super().__init__(message)
        self.index = index
        self.item = item


def stage_name(stage: Stage) -> str:
    """The name errors and logs use for `stage`: its `name` attribute, else its class name."""
    return str(getattr(stage, "name", None) or type(stage).__name__)


def execution_mode(stage: Stage, mode: Mode = "auto") -> Literal["actors", "tasks"]:
    """Resolve `mode`: "auto" means actors when `stage.uses_actors` (state or GPU), tasks otherwise."""
    if mode == "auto":
        return "actors" if stage.uses_actors else "tasks"
    if mode not in ("actors", "tasks"):
        raise ValueError(f"mode must be 'auto', 'actors' or 'tasks', got {mode!r}")
    return mode


def run_local(stage: Stage, table: pa.Table, batch_size: int = DEFAULT_BATCH_SIZE) -> pa.Table:
    """Run `stage` over `table` in this process: `setup()` once, then one call per `batch_size` rows.

    An empty table still goes through the stage once, so the output has the stage's schema.
    """
    _check_batch_size(batch_size)
    stage.setup()
    name = stage_name(stage)
    if table.num_rows == 0:
        return check_output(stage(table), name)
    outputs = [
        check_output(stage(table.slice(start, batch_size)), name)
        for start in range(0, table.num_rows, batch_size)
    ]
    return concat(outputs)


def run_ray(
    stage: Stage,
    data: pa.Table | ray.data.Dataset,
    batch_size: int = DEFAULT_BATCH_SIZE,
    mode: Mode = "auto",
    num_actors: int | None = None,
) -> pa.Table:
    """Run `stage` over `data` with Ray Data `map_batches(batch_format="pyarrow")` and collect the result.

    Args:
        stage: the stage; shipped to the workers by Ray's serialization.
        data: an Arrow table (cut into blocks here), or a Ray Dataset (its blocks are used as they are).
        batch_size: rows per stage call.
        mode: "actors" (a pool of `num_actors` actors, `setup()` once each), "tasks" (`setup()` per batch),
            or "auto" (`execution_mode`; tasks for a CPU stage with no more batches than worker slots).
        num_actors: pool size; default: as many as the cluster holds at once, at most one per batch.

    Raises:
        SpecbenchError: the cluster cannot hold one worker of `stage.resources` (e.g. a GPU stage on a
            machine without GPU), or `num_actors` exceeds what it holds. Checked before any work starts.
        ray.exceptions.RayError: a stage raised instead of marking rows (a bug, a failing `setup()`, a
            broken contract: its message names the stage and the batch's first and last ids), or a worker
            died `STAGE_RETRIES` + 1 times; Ray's error carries the worker's traceback. Row failures belong
            in `status`.
    """
    _check_batch_size(batch_size)
    from specbench.runtime.cluster import ensure_connected, require_resources

    ray = _import_ray()
    ensure_connected()
    name = stage_name(stage)
    resources = stage.resources
    slots = require_resources(resources.num_cpus, resources.num_gpus, f"stage {name}")
    chosen = execution_mode(stage, mode)
    if isinstance(data, pa.Table):
        if data.num_rows == 0:
            return _run_empty(stage, data.schema)
        dataset = _dataset_from_table(data, batch_size, slots)
        num_batches: int | None = math.ceil(data.num_rows / batch_size)
        if _one_batch_per_actor(mode, chosen, num_actors, resources.num_gpus, num_batches, slots):
            chosen = "tasks"
    else:
        dataset, num_batches = data, None
    dataset.context.execution_options.preserve_order = True
    mapped = _map_stage(dataset, stage, batch_size, chosen, _pool_size(num_actors, slots, num_batches, name))
    tables = [t for t in ray.get(mapped.to_arrow_refs()) if t.num_rows > 0]
    if not tables:
        return _run_empty(stage, _dataset_schema(data))
    return concat(tables)


def run_stage(
    stage: Stage,
    table: pa.Table,
    *,
    backend: Backend,
    batch_size: int = DEFAULT_BATCH_SIZE,
    mode: Mode = "auto",
    num_actors: int | None = None,
) -> pa.Table:
    """Run `stage` over `table` with `backend` "local" (`run_local`) or "ray" (`run_ray`)."""
    if backend == "local":
        return run_local(stage, table, batch_size)
    if backend == "ray":
        return run_ray(stage, table, batch_size, mode=mode, num_actors=num_actors)
    raise ValueError(f"backend must be 'local' or 'ray', got {backend!r}")


def run_tasks(
    fn: Callable[[T], R],
    items: Iterable[T],
    *,
    num_cpus: float = 1,
    num_gpus: float = 0,
    progress: str | None = None,
    max_in_flight: int | None = None,
    metrics: Callable[[R], dict[str, float]] | None = None,
) -> list[R]:
    """`[fn(item) for item in items]`, each call a Ray task; results in input order.

    At most `max_in_flight` tasks are queued at once (default: twice what the cluster runs at once), and
    a tqdm bar titled `progress` counts finished items at the driver (no bar when `progress` is None).
    `metrics(result)` (optional) gives numbers that the task records as Prometheus metrics
    (runtime.metrics); the driver records the queue depth.

    Raises:
        TaskFailedError: an item's task failed; the message names the item and the error, the first
            failure to come back wins and the other queued tasks are cancelled.
        SpecbenchError: the cluster cannot hold one task of (`num_cpus`, `num_gpus`).
    """
    work = list(items)
    from tqdm import tqdm

    from specbench.runtime.metrics import record

    from specbench.runtime.cluster import ensure_connected, require_resources

    ray = _import_ray()
    ensure_connected()
    fn_name = task_name(fn)
    slots = require_resources(num_cpus, num_gpus, f"run_tasks({fn_name})")
    window = max_in_flight if max_in_flight is not None else max(2, 2 * slots)
    if window < 1:
        raise ValueError(f"max_in_flight must be >= 1, got {window}")
    remote = _apply_remote().options(num_cpus=num_cpus, num_gpus=num_gpus, name=f"run_tasks:{fn_name}")
    fn_ref = ray.put(fn)
    results: list[Any] = [None] * len(work)
    pending: dict[Any, int] = {}  # ObjectRef -> item index
    watch = _ClusterWatch(f"run_tasks({fn_name})" + (f" ({progress})" if progress else ""))
    next_index = 0
    with tqdm(total=len(work), desc=progress, disable=progress is None, unit="item") as bar:
        try:
            while next_index < len(work) or pending:
                while next_index < len(work) and len(pending) < window:
                    pending[remote.remote(fn_ref, work[next_index], metrics)] = next_index
                    next_index += 1
                record({"queue_depth": float(len(pending))}, stage=fn_name)
                done, _ = ray.wait(list(pending), num_returns=1, timeout=WAIT_POLL_S)
                if not done:
                    watch.check(len(work) - bar.n)
                    continue
                watch.check_passed()
                index = pending.pop(done[0])
                results[index] = _get_item_result(done[0], index, work[index], fn_name, pending)
                bar.update(1)
        finally:  # nothing queued any more, whether it ended or failed
            record({"queue_depth": 0.0}, stage=fn_name)
    return results


class _ClusterWatch:
    """Whether the cluster's GCS still accepts connections while a stage waits on it: one that has refused
    them for `CLUSTER_LOST_S` seconds is a SpecbenchError naming the stage, instead of a silent wait."""

    def __init__(self, what: str) -> None:
        from specbench.runtime.cluster import gcs_address

        self.what, self.address, self.lost_since = what, gcs_address(), None

    def check_passed(self) -> None:
        self.lost_since = None

    def check(self, unfinished: int) -> None:
        from specbench.runtime.cluster import cluster_lost, gcs_accepts

        if not self.address or gcs_accepts(self.address):
            self.lost_since = None
            return
        now = time.monotonic()
        self.lost_since = self.lost_since if self.lost_since is not None else now
        if now - self.lost_since >= CLUSTER_LOST_S:
            raise cluster_lost(self.what, self.address, CLUSTER_LOST_S, unfinished)


def _import_ray() -> Any:
    """The ray module, imported via `specbench.runtime.cluster`, which must set Ray's environment first."""
    from specbench.runtime import cluster

    return cluster.ray


def _check_batch_size(batch_size: int) -> None:
    """Reject batch sizes that are not positive integers."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")


def _dataset_from_table(table: pa.Table, batch_size: int, slots: int) -> ray.data.Dataset:
    """Cut `table` into blocks whose lengths are multiples of `batch_size` and hand them to Ray Data.

    About `_BLOCKS_PER_SLOT` blocks per worker slot, each at most `_MAX_BLOCK_BYTES` where the batch size
    allows. The slices are zero-copy; `ray.data.from_arrow` puts each in the object store.
    """
    import ray.data

    num_batches = math.ceil(table.num_rows / batch_size)
    by_bytes = math.ceil(table.nbytes / _MAX_BLOCK_BYTES)
    target_blocks = max(_BLOCKS_PER_SLOT * max(slots, 1), by_bytes)
    block_rows = batch_size * max(1, math.ceil(num_batches / target_blocks))
    blocks = [table.slice(start, block_rows) for start in range(0, table.num_rows, block_rows)]
    return ray.data.from_arrow(blocks)


def _one_batch_per_actor(mode: Mode, chosen: str, num_actors: int | None, num_gpus: float, num_batches: int,
                         slots: int) -> bool:
    """Whether an "auto" actor pool of a CPU stage would give every actor one batch (no more batches than
    the cluster runs at once, pool size not asked for): then tasks do the same `setup()` calls without
    starting actor processes. GPU stages keep their actors (a decoder pinned to its GPU share)."""
    return mode == "auto" and chosen == "actors" and num_actors is None and num_gpus == 0 and num_batches <= slots


def _pool_size(num_actors: int | None, slots: int, num_batches: int | None, name: str) -> int:
    """Actors in the pool: `num_actors` if given (and it fits), else what fits, at most one per batch."""
    if num_actors is None:
        return max(1, min(slots, num_batches if num_batches is not None else slots))
    if isinstance(num_actors, bool) or not isinstance(num_actors, int) or num_actors < 1:
        raise ValueError(f"num_actors must be a positive integer, got {num_actors!r}")
    if num_actors > slots:
        raise SpecbenchError(
            f"stage {name}: num_actors={num_actors}, but the Ray cluster holds only {slots} such actor(s) "
            "at once; the rest would wait forever. Lower num_actors or the stage's Resources."
        )
    return num_actors


def _map_stage(
    dataset: ray.data.Dataset, stage: Stage, batch_size: int, mode: str, pool_size: int
) -> ray.data.Dataset:
    """The lazy `map_batches` of `stage` over `dataset`, as an actor pool or as tasks."""
    import ray.data

    common: dict[str, Any] = {
        "batch_size": batch_size,
        "batch_format": "pyarrow",
        "num_cpus": stage.resources.num_cpus,
        "num_gpus": stage.resources.num_gpus,
    }
    # Bounded retries: a dead actor (a killed process, a lost node) is restarted and its batches retried, a
    # task whose worker died is retried, each up to STAGE_RETRIES times; then the job fails. Ray Data's own
    # defaults retry for ever, so a batch that kills its worker (a segfault, the OOM killer) or an actor that
    # dies in setup() hung the job. Ray 2.60 takes these only as its deprecated extra remote arguments.
    retries = ({"max_restarts": STAGE_RETRIES, "max_task_retries": STAGE_RETRIES} if mode == "actors"
               else {"max_retries": STAGE_RETRIES})
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="`ray_remote_args` is deprecated")
        if mode == "actors":
            return dataset.map_batches(
                _StageActor,
                fn_constructor_kwargs={"stage": stage},
                compute=ray.data.ActorPoolStrategy(size=pool_size),
                **common,
                **retries,
            )
        return dataset.map_batches(_call_stage_in_task, fn_kwargs={"stage": stage}, **common, **retries)


class _StageActor:
    """Ray Data callable class: one per actor; `setup()` once, then the stage on each batch."""

    def __init__(self, stage: Stage) -> None:
        self._stage = stage
        self._name = stage_name(stage)
        stage.setup()

    def __call__(self, batch: pa.Table) -> pa.Table:
        return _timed_call(self._stage, batch, self._name)


def _timed_call(stage: Stage, batch: pa.Table, name: str) -> pa.Table:
    """The stage on one batch, checked, with the batch's metrics recorded (runtime.metrics)."""
    from specbench.runtime.metrics import record

    start = time.perf_counter()
    try:
        out = check_output(stage(batch), name)
    except SpecbenchError:
        raise
    except Exception as err:  # a stage raised instead of marking rows: say which stage and which batch
        column = next((c for c in ("utt_id", "id", "request_id") if c in batch.column_names), None)
        ids = batch.column(column).to_pylist() if column and batch.num_rows else []
        rows = f"{column} {ids[0]!r} to {ids[-1]!r}" if ids else f"{batch.num_rows} rows"
        raise SpecbenchError(f"stage {name} failed on the batch of {rows}: {type(err).__name__}: {err}") from err
    record(stage.metrics(out, time.perf_counter() - start), stage=name)
    return out


def _call_stage_in_task(batch: pa.Table, stage: Stage) -> pa.Table:
    """Ray Data task function: `setup()` then the stage, for one batch (no state survives the batch)."""
    stage.setup()
    return _timed_call(stage, batch, stage_name(stage))


def _run_empty(stage: Stage, schema: pa.Schema) -> pa.Table:
    """Run `stage` once on an empty table of `schema` in a worker, for the output schema of empty input."""
    import ray

    resources = stage.resources
    remote = ray.remote(_setup_and_call).options(num_cpus=resources.num_cpus, num_gpus=resources.num_gpus)
    return ray.get(remote.remote(stage, schema.empty_table()))


def _setup_and_call(stage: Stage, table: pa.Table) -> pa.Table:
    """`setup()` and one call of `stage` on `table`, checked."""
    stage.setup()
    return check_output(stage(table), stage_name(stage))


def _dataset_schema(data: pa.Table | ray.data.Dataset) -> pa.Schema:
    """The Arrow schema of the input (a Dataset's schema is fetched from Ray Data)."""
    if isinstance(data, pa.Table):
        return data.schema
    schema = data.schema(fetch_if_missing=True)
    base = getattr(schema, "base_schema", schema)
    if not isinstance(base, pa.Schema):
        raise SpecbenchError(f"the input dataset has no Arrow schema ({schema!r}); pass Arrow data")
    return base


def task_name(fn: Callable[..., Any]) -> str:
    """The name tasks of `fn` carry (task names, errors and the metrics' `stage` tag): a partial's function's."""
    inner = fn.func if isinstance(fn, functools.partial) else fn
    return getattr(inner, "__qualname__", None) or type(inner).__name__


def _apply(fn: Callable[[Any], Any], item: Any, metrics: Callable[[Any], dict[str, float]] | None = None) -> Any:
    """Body of one `run_tasks` task (its metrics recorded in the worker)."""
    from specbench.runtime.metrics import record

    result = fn(item)
    record({"tasks_finished": 1.0, **(metrics(result) if metrics else {})}, stage=task_name(fn))
    return result


_APPLY_REMOTE: Any = None


def _apply_remote() -> Any:
    """`_apply` as a Ray remote function, made once per process (after Ray is connected)."""
    global _APPLY_REMOTE
    import ray

    if _APPLY_REMOTE is None:
        _APPLY_REMOTE = ray.remote(_apply)
    return _APPLY_REMOTE


def _get_item_result(ref: Any, index: int, item: Any, fn_name: str, pending: dict[Any, int]) -> Any:
    """`ray.get(ref)`; on failure cancel the `pending` tasks and raise `TaskFailedError` naming the item."""
    import ray

    try:
        return ray.get(ref)
    except ray.exceptions.RayError as err:
        for other in pending:
            try:
                ray.cancel(other)
            except Exception:  # noqa: BLE001 - best effort, the error below is what matters
                pass
        cause = getattr(err, "cause", None) or err
        shown = repr(item)
        if len(shown) > _ITEM_REPR_CHARS:
            shown = shown[: _ITEM_REPR_CHARS - 3] + "..."
        message = f"run_tasks({fn_name}) failed on item #{index} {shown}: {type(cause).__name__}: {cause}"
        raise TaskFailedError(message, index, item) from err

