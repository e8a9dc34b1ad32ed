"""The one plot setup: matplotlib with the non-interactive Agg backend (jobs run headless, on Ray workers
and in CI), imported only when a job draws."""

from __future__ import annotations

from typing import Any


def pyplot() -> Any:
    """`matplotlib.pyplot`, on the Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
