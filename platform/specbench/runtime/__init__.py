"""specbench.runtime: the only package that imports ray.

`connect` / `ray_session` start a local Ray bound to 127.0.0.1 (or join a cluster), `cluster_summary`
describes it for logging, and `run_stage` runs a `specbench.stage.Stage` over an Arrow table in a plain loop
(`run_local`) or on Ray Data (`run_ray`: tasks, or an actor pool for stateful and GPU stages), with the same
result either way. `run_tasks` maps a plain function over items as Ray tasks.

Names are resolved lazily, so that `run_local` / `run_stage(backend="local")` import without ray (the GPU
test machine has none). Importing `specbench.runtime.cluster` (any of its names, or any Ray-backed call)
puts `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` and `RAY_AUTH_MODE=token` in `os.environ`, unless already set,
before importing ray, which reads them once (joining a cluster from a machine without a Ray token drops the
token mode again, so a cluster without auth can be joined): see that module.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from specbench.runtime.cluster import (
        ClusterInfo,
        check_cluster,
        cluster_summary,
        connect,
        ensure_connected,
        ray_session,
        require_resources,
        shutdown,
    )
    from specbench.runtime.stages import (
        DEFAULT_BATCH_SIZE,
        TaskFailedError,
        execution_mode,
        run_local,
        run_ray,
        run_stage,
        run_tasks,
        stage_name,
    )

_EXPORTS = {
    "ClusterInfo": "cluster",
    "check_cluster": "cluster",
    "cluster_summary": "cluster",
    "connect": "cluster",
    "ensure_connected": "cluster",
    "ray_session": "cluster",
    "require_resources": "cluster",
    "shutdown": "cluster",
    "DEFAULT_BATCH_SIZE": "stages",
    "TaskFailedError": "stages",
    "execution_mode": "stages",
    "run_local": "stages",
    "run_ray": "stages",
    "run_stage": "stages",
    "run_tasks": "stages",
    "stage_name": "stages",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Import the submodule that defines `name` on first use (PEP 562)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'specbench.runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"specbench.runtime.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
