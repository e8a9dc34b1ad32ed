"""Prometheus metrics of running jobs, through Ray's metrics API (`ray.util.metrics`).

Ray exports them from every node's metrics agent (the `metrics_export_port`, scraped by Prometheus; Ray
prefixes each name with `ray_`). Stages and task functions stay free of ray: a stage reports what a batch
did through `Stage.metrics(out, seconds)` and a task through a `metrics=` callback of `run_tasks`; this
module turns those numbers into counters and gauges. The names (with their `ray_` prefix) are what the
Grafana dashboards in dashboards/ query:

counters: specbench_utterances_decoded, specbench_frames_decoded, specbench_beam_narrowings,
          specbench_prefetch_outcomes (tag `outcome`), specbench_sentences_translated, specbench_tasks_finished
gauges:   specbench_frames_per_second, specbench_active_tokens, specbench_queue_depth

specbench_active_tokens keeps its name for the dashboards but is the decoders' `tokens_created` per frame:
candidate tokens that passed the beam, counted before recombination, not the tokens active after it.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from specbench.runtime.cluster import ray  # cluster puts Ray's environment in place before importing it

ray_metrics = importlib.import_module("ray.util.metrics")  # only once ray is imported, by cluster

COUNTERS = {
    "utterances_decoded": "utterances decoded",
    "frames_decoded": "acoustic frames decoded",
    "beam_narrowings": "frames whose adaptive beam came out below the configured beam",
    "prefetch_outcomes": "prefetch decisions by outcome (tag outcome)",
    "sentences_translated": "source sentences translated",
    "tasks_finished": "Ray tasks of specbench finished",
}
GAUGES = {
    "frames_per_second": "frames decoded per second in the latest batch",
    "active_tokens": "candidate tokens per frame that passed the beam before recombination (tokens_created / "
                     "frames) in the latest batch, not the tokens left active after recombination",
    "queue_depth": "tasks queued or running at the driver",
}
TAG_KEYS = ("job", "stage", "outcome")
_MADE: dict[str, Any] = {}


def metric_names() -> list[str]:
    """The exported names, as Prometheus sees them."""
    return sorted(f"ray_specbench_{n}" for n in (*COUNTERS, *GAUGES))


def _metric(name: str) -> Any:
    if name not in _MADE:
        if name in COUNTERS:
            _MADE[name] = ray_metrics.Counter(f"specbench_{name}", COUNTERS[name], tag_keys=TAG_KEYS)
        elif name in GAUGES:
            _MADE[name] = ray_metrics.Gauge(f"specbench_{name}", GAUGES[name], tag_keys=TAG_KEYS)
        else:
            raise ValueError(f"unknown metric {name!r}; known: {', '.join(sorted((*COUNTERS, *GAUGES)))}")
    return _MADE[name]


def record(values: Mapping[str, float], **tags: str) -> None:
    """Add counters and set gauges (no-op outside Ray, e.g. a plain-loop run)."""
    if not values or not ray.is_initialized():
        return
    full = {k: str(tags.get(k, "")) for k in TAG_KEYS}
    for name, value in values.items():
        metric = _metric(name)
        if name in COUNTERS:
            if value > 0:
                metric.inc(float(value), tags=full)
        else:
            metric.set(float(value), tags=full)
