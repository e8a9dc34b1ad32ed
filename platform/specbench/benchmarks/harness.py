"""What every benchmark shares: progress on stderr, timing, pinning to one core, the JSON output (with the
hardware, the commit and the settings it was measured with: `provenance`) and the MLflow run.

A benchmark module defines `measure(config, job_path) -> dict` (the JSON-able result, with `"bench": NAME`)
(`job_path`: the job file, which relative `graph_job` paths are read against) and `summary(result) -> list[str]`; `execute` below turns the pair into the runner of its job kind
(`specbench run jobs/bench_*.toml`), and the `specbench bench NAME` verb calls `measure` on the config built
from the same dataclass defaults. Numeric results are logged as `bench.<NAME>.<key>`, except keys already
named `<NAME>.<metric>` (DESIGN.md's names, such as `decoder.rtfx`), which keep their name. This module
imports no tracking code at import time: the GPU machine has no mlflow.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from specbench.errors import SpecbenchError
from specbench.hardware import describe, git_commit
from specbench.text_files import json_text, replace_text

T = TypeVar("T")


def say(bench: str, message: str) -> None:
    """One progress line on stderr: `bench NAME: message`."""
    print(f"bench {bench}: {message}", file=sys.stderr, flush=True)


def progress(items: Sequence[T], desc: str) -> Iterator[T]:
    """tqdm on stderr when it is installed (the GPU machine may lack it), else a line every 10%."""
    try:
        from tqdm import tqdm
    except ImportError:
        step = max(1, len(items) // 10)
        for i, item in enumerate(items):
            if i % step == 0:
                say(desc, f"{i}/{len(items)}")
            yield item
        say(desc, f"{len(items)}/{len(items)}")
        return
    yield from tqdm(items, desc=desc, unit="utt", file=sys.stderr, mininterval=2.0)


def timed(fn: Callable[[], T], repeats: int = 1) -> tuple[float, T]:
    """(median seconds over `repeats` calls, the last call's value), timed with `time.perf_counter`."""
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result  # type: ignore[return-value]


@contextmanager
def one_core() -> Iterator[int | None]:
    """Pin this process to one of its cores for the block (then restore); yields the core, or None where
    affinity cannot be set."""
    if not hasattr(os, "sched_getaffinity"):
        yield None
        return
    before = os.sched_getaffinity(0)
    core = min(before)
    try:
        os.sched_setaffinity(0, {core})
    except OSError:
        yield None
        return
    try:
        yield core
    finally:
        os.sched_setaffinity(0, before)


def provenance(result: dict[str, Any], config: Any) -> dict[str, Any]:
    """`result` with what it was measured on and with: `hardware` (kept where the benchmark wrote its own),
    `git_commit` (the checkout's, `-dirty` with uncommitted changes, `unknown` outside a checkout),
    `settings` (the benchmark's config, paths as text) and `metrics_version` (its job kind's, what its
    figures mean: `experiments.registry`), so that a results file says how to reproduce it; and the host
    memory it took: `peak_rss_bytes` of this process and `children_peak_rss_bytes` of its largest child
    process that ended (decoder processes, Kaldi), each since the command started."""
    import resource

    from specbench.experiments.registry import JOBS

    settings = dataclasses.asdict(config) if dataclasses.is_dataclass(config) else dict(config or {})
    job = JOBS.get(getattr(config, "KIND", f"bench_{result.get('bench')}"))
    rss = {"peak_rss_bytes": _own_peak_rss_bytes(),  # Linux counts KiB
           "children_peak_rss_bytes": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024}
    return {**result, **rss, "hardware": result.get("hardware") or describe(), "git_commit": git_commit(),
            "settings": json.loads(json.dumps(settings, default=str)),
            "metrics_version": str(job.metrics_version if job else 1)}


def profiled(model: Any, stages: Mapping[str, str], fn: Callable[[], Any],
             sync: Callable[[], None] | None = None) -> dict[str, float]:
    """Seconds of `fn()` split by stage: the calls of `model`'s methods named in `stages` (method -> the
    stage it counts towards) and the search's own bookkeeping (beams, caches, choices: the rest). The methods
    are wrapped on the instance for the call only; a call made inside another counts once, in the outer.
    `sync` (e.g. `torch.cuda.synchronize`) runs before each clock read, so a device's queued work counts
    where it was launched."""
    spent = dict.fromkeys(stages.values(), 0.0)
    depth = [0]
    clock = (lambda: (sync(), time.perf_counter())[1]) if sync else time.perf_counter

    def wrap(name: str) -> Callable[..., Any]:
        method = getattr(model, name)

        def timed_call(*args: Any, **kwargs: Any) -> Any:
            depth[0] += 1
            start = clock()
            try:
                return method(*args, **kwargs)
            finally:
                depth[0] -= 1
                if not depth[0]:
                    spent[stages[name]] += clock() - start
        return timed_call

    for name in stages:
        object.__setattr__(model, name, wrap(name))
    start = clock()
    try:
        fn()
    finally:
        total = clock() - start
        for name in stages:
            del model.__dict__[name]
    return {**spent, "search_bookkeeping": total - sum(spent.values()), "total": total}


def _own_peak_rss_bytes() -> int:
    """This process's peak resident memory: Linux's VmHWM, which counts the pages held now too (getrusage's
    ru_maxrss can lag them); ru_maxrss where /proc is not there."""
    import resource

    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def metric_names(result: dict[str, Any]) -> dict[str, float]:
    """The numeric values of a result under their MLflow names (see the module docstring)."""
    bench = result["bench"]
    return {k if k.startswith(f"{bench}.") else f"bench.{bench}.{k}": float(v) for k, v in result.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


def record(result: dict[str, Any], run: Any) -> None:
    """Log a result to an open `TrackedRun`: its metrics and the whole JSON as `bench_<NAME>.json`."""
    run.log_metrics(metric_names(result))
    run.log_dict(result, f"bench_{result['bench']}.json")


def log_bench(result: dict[str, Any], tracking_uri: str | None) -> str:
    """Log a result as its own run of the `bench` experiment (the `bench` verbs); returns the run id. A result
    whose backends failed (`failed_backends_message`) is logged whole, and its run ends FAILED naming them."""
    from specbench.tracking.runs import TrackedRun

    tags = {"kind": f"bench_{result['bench']}", "metrics.version": result.get("metrics_version", "1")}
    run = TrackedRun("bench", f"bench-{result['bench']}", tracking_uri, tags)
    try:
        record(result, run)
    except BaseException as err:
        run.fail(err)
        raise
    failed = failed_backends_message(result)
    if failed is None:
        run.finish()
    else:
        run.fail(BackendsFailed(failed))
    return run.run_id


def emit(result: dict[str, Any], output: Path | None) -> None:
    """Print the JSON; with `output`, also write it there atomically (temp file + rename)."""
    text = json_text(result, indent=2)
    print(text)
    if output:
        output.parent.mkdir(parents=True, exist_ok=True)
        replace_text(output, text + "\n")


def failed_backends_message(result: dict[str, Any], job_path: Path | None = None) -> str | None:
    """None when the result lists no failed backends (`errors`), else the message that names them, their
    reasons and the fix."""
    errors = list(result.get("errors") or [])
    if not errors:
        return None
    backends = result.get("backends") or {}
    failed = "; ".join(f"{name} ({str((backends.get(name) or {}).get('reason', 'no reason recorded'))[:300]})"
                       for name in errors)
    option = _OptionNames(job_path)
    plain = [name for name in errors if not (backends.get(name) or {}).get("fix")]
    fixes = [f"leave {'those backends' if len(plain) == len(errors) else ', '.join(plain)} out of "
             f"{option['backends']}"] if plain else []
    fixes += [f"for {name}, {str(backends[name]['fix']).format_map(option)}" for name in errors
              if name not in plain]
    what = "backends" if len(plain) == len(errors) else "backends and measurement steps"
    return (f"bench {result.get('bench', '?')}: these {what} failed: {failed}; what the "
            f"others measured is logged, and each failure's traceback is under `backends` in the result's JSON "
            f"(the run's artifact bench_{result.get('bench', '?')}.json). Fix: repair what failed, or "
            f"{'; '.join(fixes)}.")


class _OptionNames(dict):
    """`{field}` of a failed step's `fix` (in `backends`): the verb's option `--field`, or the job's key."""

    def __init__(self, job_path: Path | None) -> None:
        super().__init__()
        self.job_path = job_path

    def __missing__(self, field: str) -> str:
        if self.job_path is not None:
            return f"`{field}` in {self.job_path}"
        return f"--{field.replace('_', '-')}"


class BackendsFailed(SpecbenchError):
    """A benchmark ran, but some of its backends failed (`result["errors"]`): the run ends FAILED."""


def runner(measure: Callable[[Any, Path], dict[str, Any]],
           summary: Callable[[dict[str, Any]], list[str]]) -> Callable[..., list[str]]:
    """The job runner of a benchmark (the registry's `execute`): measure, log to the job's run, summarize.
    When backends failed (`result["errors"]`), everything measured is logged first (metrics, the JSON, the
    summary as the run's description), then BackendsFailed ends the run FAILED, naming them."""

    def execute(config: Any, path: Path, run: Any, opts: Any) -> list[str]:
        result = provenance(measure(config, Path(path)), config)
        if run is not None:
            record(result, run)
        lines = summary(result)
        failed = failed_backends_message(result, Path(path))
        if failed is None:
            return lines
        if run is not None:
            run.set_description([*lines, f"  FAILED: {failed}"])
        for line in lines:  # what was measured still reaches the console
            print(line, file=sys.stderr, flush=True)
        raise BackendsFailed(failed)

    return execute
