"""Shared fixtures. Heavy imports (ray via specbench.runtime) happen inside fixtures only, so that the
GPU machine, which has no ray, can still collect tests/gpu."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

TESTS_DIR = Path(__file__).resolve().parent

# Whichever test starts the session's local Ray first (a fixture, or a pipeline that connects on its
# own), its workers must import the test stages: they inherit PYTHONPATH from this process.
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(TESTS_DIR), os.environ.get("PYTHONPATH", "")) if p
)


def pytest_configure(config: pytest.Config) -> None:
    """A RayDeprecationWarning raised from specbench's own code fails the test that raised it (Ray's
    internals may still warn on their own). Added here, not in pyproject.toml, because the category must
    be importable and the GPU machine has no ray."""
    try:
        import specbench.runtime.cluster  # noqa: F401 - sets Ray's environment, then imports ray
        import ray.util.annotations  # noqa: F401 - the warning category
    except ImportError:
        return
    config.addinivalue_line("filterwarnings", "error::ray.util.annotations.RayDeprecationWarning:specbench")


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    """A new local Ray with 2 CPUs and no GPU, bound to 127.0.0.1, for the whole session ($RAY_ADDRESS is
    ignored).

    Workers get this directory on their `PYTHONPATH`, so stages from `stages_for_tests` unpickle there.
    Yields `specbench.runtime.ClusterInfo`; shuts Ray down at the end if it started it.
    """
    from specbench.runtime import ray_session

    with ray_session("local", num_cpus=2, num_gpus=0, python_path=[TESTS_DIR]) as info:
        yield info


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/unit and tests/property is a unit test (`make test-unit`, `-m unit`), whether or
    not its module says so."""
    fast = (TESTS_DIR / "unit", TESTS_DIR / "property")
    for item in items:
        if any(d in item.path.parents for d in fast) and item.get_closest_marker("unit") is None:
            item.add_marker(pytest.mark.unit)
