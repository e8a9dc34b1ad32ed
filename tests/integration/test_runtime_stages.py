"""specbench.runtime on a real local Ray (2 CPUs, no GPU): the three ways of running a stage agree, GPU
stages are refused up front on a machine without GPU, `run_tasks` keeps order and names failures, and
every socket Ray listens on is a loopback one."""

from __future__ import annotations

import functools
import ipaddress
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
from stages_for_tests import (
    FailingStage,
    LookupStage,
    QuarterGpuStage,
    SquareStage,
    fail_on_bad,
    slow_square,
    word_table,
)

from specbench.errors import SpecbenchError
from specbench.runtime import (
    TaskFailedError,
    cluster_summary,
    execution_mode,
    ray_session,
    run_local,
    run_ray,
    run_stage,
    run_tasks,
)
from specbench.stage import STATUS_COLUMN, STATUS_OK

pytestmark = pytest.mark.integration

NUM_ROWS = 1000
BATCH = 128  # 8 batches, the last one short
NUM_BATCHES = -(-NUM_ROWS // BATCH)


def setup_count(path: Path) -> int:
    """Lines in a stage's setup log: one per `setup()` call, in any process."""
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_execution_mode_follows_the_stage() -> None:
    assert execution_mode(LookupStage()) == "actors"
    assert execution_mode(SquareStage()) == "tasks"
    assert execution_mode(QuarterGpuStage()) == "actors"
    assert execution_mode(LookupStage(), "tasks") == "tasks"
    with pytest.raises(ValueError, match="mode"):
        execution_mode(SquareStage(), "threads")  # type: ignore[arg-type]


def test_local_runner_imports_without_ray() -> None:
    """The GPU machine has no ray: `run_stage(backend="local")` must work there."""
    code = (
        "import sys; sys.modules['ray'] = None\n"  # any `import ray` now raises ImportError
        "import pyarrow as pa\n"
        "from specbench.runtime import run_stage\n"
        "from stages_for_tests import SquareStage\n"
        "out = run_stage(SquareStage(), pa.table({'id': pa.array(range(5), pa.int64())}), backend='local',"
        " batch_size=2)\n"
        "assert out.num_rows == 5, out\n"
    )
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "platform"), str(root / "tests")])}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_stateful_stage_same_table_three_ways(ray_cluster: object, tmp_path: Path) -> None:
    table = word_table(NUM_ROWS)
    logs = {name: tmp_path / f"{name}.log" for name in ("local", "actors", "tasks")}
    local = run_local(LookupStage(str(logs["local"])), table, BATCH)
    actors_stage = LookupStage(str(logs["actors"]), jitter_s=0.03, batch_log=str(tmp_path / "batches.log"))
    actors = run_ray(actors_stage, table, BATCH, mode="actors", num_actors=2)
    tasks = run_ray(LookupStage(str(logs["tasks"]), jitter_s=0.03), table, BATCH, mode="tasks")

    assert local.num_rows == NUM_ROWS
    assert local.column("features").type == pa.list_(pa.float32())
    assert actors.equals(local)
    assert tasks.equals(local)
    failed = [s for s in local.column(STATUS_COLUMN).to_pylist() if s != STATUS_OK]
    assert len(failed) == len([i for i in range(NUM_ROWS) if i % 37 == 5])
    assert all(s.startswith("failed: no entry for ") for s in failed)
    assert setup_count(logs["local"]) == 1
    # once per actor, never per batch: each process of the pool (two at most) set up once, before its
    # batches; one actor may take every batch while the other is still starting on a busy machine
    setups = logs["actors"].read_text().split("\n")[:-1]
    assert 1 <= len(setups) <= 2 and all(line.endswith(" actor") for line in setups), setups
    pids = [line.split()[0] for line in setups]
    batch_pids = {line.split()[0] for line in (tmp_path / "batches.log").read_text().splitlines()}
    assert len(set(pids)) == len(pids) and batch_pids <= set(pids), (pids, batch_pids)
    assert setup_count(logs["tasks"]) == NUM_BATCHES  # once per batch: the batches are the local ones


def test_stateless_stage_same_table_three_ways(ray_cluster: object) -> None:
    table = pa.table({"id": pa.array(range(NUM_ROWS), pa.int64())})
    local = run_stage(SquareStage(), table, backend="local", batch_size=BATCH)
    auto = run_stage(SquareStage(jitter_s=0.03), table, backend="ray", batch_size=BATCH)
    # up to 0.3 s per batch: without preserve_order, Ray Data returns these actor outputs out of order
    actors = run_ray(SquareStage(jitter_s=0.3), table, BATCH, mode="actors")

    assert auto.equals(local)
    assert actors.equals(local)
    assert local.column("id").to_pylist()[:3] == [None, 1, 2]  # row 0 failed, kept in place
    statuses = local.column(STATUS_COLUMN).to_pylist()
    assert statuses[13] == "failed: 13 is a multiple of 13"
    assert sum(s != STATUS_OK for s in statuses) == len(range(0, NUM_ROWS, 13))


def test_dataset_input_and_empty_input(ray_cluster: object) -> None:
    ray_data = pytest.importorskip("ray.data")
    table = word_table(300)
    dataset = ray_data.from_arrow([table.slice(0, 100), table.slice(100, 100), table.slice(200, 100)])
    assert run_ray(LookupStage(), dataset, 50).equals(run_local(LookupStage(), table, 50))

    empty = word_table(0)
    local = run_local(SquareStage(), pa.table({"id": pa.array([], pa.int64())}))
    remote = run_ray(SquareStage(), pa.table({"id": pa.array([], pa.int64())}))
    assert local.num_rows == remote.num_rows == 0
    assert remote.schema.equals(local.schema)
    empty_out = run_ray(LookupStage(), empty, 10, mode="actors")
    assert empty_out.num_rows == 0
    assert empty_out.schema.names == [*LookupStage.schema.names, STATUS_COLUMN]


def test_gpu_stage_is_refused_without_gpu(ray_cluster: object) -> None:
    if cluster_summary()["gpus"] > 0:
        pytest.skip("this machine has a GPU")
    table = pa.table({"id": pa.array(range(10), pa.int64())})
    for mode in ("auto", "actors", "tasks"):
        with pytest.raises(SpecbenchError, match=r"needs 0\.25 GPU .* has no GPU"):
            run_ray(QuarterGpuStage(), table, 5, mode=mode)  # type: ignore[arg-type]
    with pytest.raises(SpecbenchError, match="GPU"):
        run_tasks(slow_square, [1, 2], num_gpus=1)


def test_oversized_requests_are_refused(ray_cluster: object) -> None:
    table = pa.table({"id": pa.array(range(10), pa.int64())})
    with pytest.raises(SpecbenchError, match="num_actors=3"):
        run_ray(LookupStage(), table, 5, mode="actors", num_actors=3)
    with pytest.raises(SpecbenchError, match="64 CPU"):
        run_tasks(slow_square, [1], num_cpus=64)
    with pytest.raises(ValueError, match="batch_size"):
        run_local(SquareStage(), table, 0)


def test_run_tasks_keeps_input_order(ray_cluster: object) -> None:
    items = list(range(24))
    assert run_tasks(slow_square, items, progress="squares", max_in_flight=5) == [i * i for i in items]
    assert run_tasks(slow_square, []) == []


@pytest.mark.parametrize("mode", ["tasks", "actors"])
def test_a_batch_that_raises_is_named_and_one_that_kills_its_worker_fails_in_bounded_time(
        ray_cluster: object, mode: str) -> None:
    import ray

    table = pa.table({"id": pa.array(range(4), pa.int64())})
    with pytest.raises(ray.exceptions.RayError, match=r"stage FailingStage failed on the batch of id 2 to 2: "
                                                      "RuntimeError: kaput"):
        run_ray(FailingStage(2, "raise"), table, 1, mode=mode, num_actors=1)
    start = time.monotonic()
    with pytest.raises(ray.exceptions.RayError):  # retried STAGE_RETRIES times, then the job fails
        run_ray(FailingStage(2, "exit"), table, 1, mode=mode, num_actors=1)
    assert time.monotonic() - start < 150


def test_run_tasks_names_the_failing_item(ray_cluster: object) -> None:
    items = [f"item-{i}" for i in range(7)] + ["bad-7"] + [f"item-{i}" for i in range(8, 12)]
    with pytest.raises(TaskFailedError, match=r"run_tasks\(fail_on_bad\) failed on item #7 'bad-7': ValueError: "
                                              "cannot process bad-7") as info:
        run_tasks(functools.partial(fail_on_bad), items)  # a partial is named after its function
    assert info.value.index == 7
    assert info.value.item == "bad-7"


def test_nested_session_leaves_ray_running(ray_cluster: object) -> None:
    with ray_session() as info:
        assert not info.initialized_here
        assert info.local
    assert cluster_summary()["nodes"] == 1  # still connected


def test_local_start_refused_when_ray_was_imported_first() -> None:
    """Ray reads the loopback switch at import: a Ray imported without it must not start a local cluster."""
    code = (
        "import ray\n"
        "from specbench.errors import SpecbenchError\n"
        "from specbench.runtime import connect\n"
        "try:\n"
        "    connect('local', num_cpus=1)\n"
        "except SpecbenchError as err:\n"
        "    assert 'every network interface' in str(err), err\n"
        "    assert not ray.is_initialized()\n"
        "else:\n"
        "    raise SystemExit('connect() started Ray')\n"
    )
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}
    env["PYTHONPATH"] = str(root / "platform")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_every_runtime_module_imports_ray_with_the_loopback_switch_set() -> None:
    """Whichever runtime module comes first (run_tasks imports the metrics module before the cluster one),
    Ray is imported with its loopback switch in place, so a later local start is allowed."""
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}
    env["PYTHONPATH"] = str(root / "platform")
    for module in ("metrics", "stages", "cluster", "jobs"):
        code = (f"import sys, specbench.runtime.{module}\n"
                "if 'ray' in sys.modules:  # this module imported ray: with the switch?\n"
                "    from ray._private import ray_constants\n"
                "    assert not ray_constants.ENABLE_RAY_CLUSTER\n")
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=False)
        assert proc.returncode == 0, (module, proc.stderr)


def test_cluster_summary(ray_cluster: object) -> None:
    summary = cluster_summary()
    assert summary["nodes"] == 1
    assert summary["cpus"] == 2.0
    assert summary["gpus"] == 0.0
    assert summary["address"].startswith("127.0.0.1:")


# --- loopback binding -------------------------------------------------------------------------------


def _descendants(root: int) -> set[int]:
    """`root` and every process below it, from /proc/*/stat."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, []))
    return found


def _socket_inodes(pids: set[int]) -> set[int]:
    """Inodes of the sockets that `pids` hold open."""
    inodes: set[int] = set()
    for pid in pids:
        fd_dir = Path(f"/proc/{pid}/fd")
        try:
            targets = [os.readlink(fd) for fd in fd_dir.iterdir()]
        except OSError:
            continue
        inodes.update(int(t[8:-1]) for t in targets if t.startswith("socket:["))
    return inodes


def _listening(inodes: set[int]) -> list[tuple[str, int]]:
    """(address, port) of the TCP sockets in LISTEN state (0A) among `inodes`, IPv4 and IPv6."""
    found = []
    for name in ("tcp", "tcp6"):
        path = Path(f"/proc/self/net/{name}")
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A" or int(fields[9]) not in inodes:
                continue
            hex_addr, hex_port = fields[1].split(":")
            raw = bytes.fromhex(hex_addr)
            raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))  # host-order words
            found.append((str(ipaddress.ip_address(raw)), int(hex_port, 16)))
    return found


def _is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def test_ray_listens_on_loopback_only(ray_cluster: object) -> None:
    run_tasks(slow_square, [1, 2, 3])  # make sure workers are up
    sockets = _listening(_socket_inodes(_descendants(os.getpid())))
    assert len(sockets) >= 3, f"expected the GCS, raylet and driver to listen, found {sockets}"
    public = [s for s in sockets if not _is_loopback(s[0])]
    assert not public, f"Ray listens on non-loopback addresses: {public}"



def test_auto_mode_runs_a_batch_per_worker_as_tasks(ray_cluster: object, tmp_path: Path) -> None:
    """"auto": a stateful CPU stage with no more batches than worker slots (2 here) runs as tasks, one
    `setup()` per batch and none in an actor; with more batches (8), as the actor pool, one `setup()` per
    actor: 2, or 1 when, on a loaded machine, the first actor took every batch before the second had logged
    its setup (seen once in CI), never one per batch."""
    small, large = word_table(2 * BATCH), word_table(NUM_ROWS)
    logs = {name: tmp_path / f"{name}.log" for name in ("small", "large")}
    assert run_ray(LookupStage(str(logs["small"])), small, BATCH).equals(run_local(LookupStage(), small, BATCH))
    assert run_ray(LookupStage(str(logs["large"])), large, BATCH).equals(run_local(LookupStage(), large, BATCH))
    in_actor = {name: [line.endswith(" actor") for line in log.read_text().splitlines()] for name, log in logs.items()}
    assert in_actor["small"] == [False, False]
    assert in_actor["large"] in ([True], [True, True]), in_actor
