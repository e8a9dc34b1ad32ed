"""DESIGN.md's layering, checked on the source: only runtime/ imports ray, only tracking/ imports mlflow, only
the decoder/gpu/ package imports cupy; no platform/__init__.py; the algorithm packages import neither `config`
nor the experiment layer (experiments, benchmarks, reports, cli, runtime, tracking); arrows run
`cli -> {experiments, benchmarks} -> {reports, runtime, tracking, config} -> algorithms`; there is no import
cycle between modules or between packages (imports inside functions count); and every module imports on a
CPU-only machine without ray or mlflow being loaded by the algorithms."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "platform" / "specbench"
ALGORITHMS = ("wfst", "decoder", "acoustic", "prediction", "simultrans", "metrics", "data")
BASE = ("stage", "errors", "paths", "hardware", "checkpoint_io", "checks")  # shared by every layer
# what each upper layer may not import (besides the third-party rules)
FORBIDDEN = {
    **{algo: ("config", "experiments", "benchmarks", "reports", "cli", "runtime", "tracking")
       for algo in ALGORITHMS},
    **{base: ("config", "experiments", "benchmarks", "reports", "cli", "runtime", "tracking",
              *ALGORITHMS) for base in BASE},
    "config": ("experiments", "benchmarks", "reports", "cli", "runtime", "tracking"),
    "reports": ("experiments", "benchmarks", "cli", "runtime"),
    "runtime": ("config", "experiments", "benchmarks", "reports", "cli", "tracking"),
    "tracking": ("config", "experiments", "benchmarks", "reports", "cli", "runtime"),
    "experiments": ("benchmarks", "cli"),
    "benchmarks": ("cli"),
}


def module_name(path: Path) -> str:
    return ".".join(("specbench", *path.relative_to(PKG).with_suffix("").parts)).removesuffix(".__init__")


def top_of(name: str) -> str:
    """`specbench.decoder.cpu` -> `decoder`; `specbench.cli` -> `cli`."""
    return name.split(".")[1] if name.count(".") else name


def modules() -> list[Path]:
    return sorted(PKG.rglob("*.py"))


MODULES = {module_name(p): p for p in modules()}


def imported_names(path: Path) -> set[str]:
    """Every imported module name, wherever the import appears (also inside functions); for
    `from a.b import c` both `a.b` and, when it is a module of ours, `a.b.c`."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in MODULES)
    return names


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of ours it imports (a package's own `__init__` left out when a submodule of it
    is named: `from specbench.config import X` counts as importing the config package)."""
    graph = {}
    for name, path in MODULES.items():
        ours = {n for n in imported_names(path) if n in MODULES and n != name}
        graph[name] = {n for n in ours if not any(o.startswith(n + ".") for o in ours)}
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                item = stack.pop()
                on_stack.discard(item)
                component.append(item)
                if item == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_platform_init() -> None:
    assert not (ROOT / "platform" / "__init__.py").exists()


def test_cycle_finder_finds_cycles() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_cycles() -> None:
    assert cycles(import_graph()) == [], "modules import each other in a circle"


def test_no_package_cycles() -> None:
    packages: dict[str, set[str]] = {}
    for name, deps in import_graph().items():
        packages.setdefault(top_of(name), set()).update(top_of(d) for d in deps if top_of(d) != top_of(name))
    assert cycles(packages) == [], "packages import each other in a circle"


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PKG)))
def test_layering(path: Path) -> None:
    rel = path.relative_to(PKG)
    top = top_of(module_name(path))
    names = imported_names(path)
    heads = {n.split(".")[0] for n in names}
    if top != "runtime":
        assert "ray" not in heads, f"{rel} imports ray; only runtime/ may"
    if top != "tracking":
        assert "mlflow" not in heads, f"{rel} imports mlflow; only tracking/ may"
    if rel.parts[:2] != ("decoder", "gpu"):
        assert "cupy" not in heads, f"{rel} imports cupy; only the decoder/gpu/ package may"
    ours = {top_of(n) for n in names if n.startswith("specbench.")}
    bad = ours & set(FORBIDDEN.get(top, ()))
    assert not bad, f"{rel} ({top}) imports {sorted(bad)}; see DESIGN.md's arrows"


def test_every_module_imports_without_ray_or_mlflow_for_algorithms() -> None:
    algos = [p for p in modules() if p.relative_to(PKG).parts[0] in ALGORITHMS]
    code = ("import sys\n" + "".join(f"import {module_name(p)}\n" for p in algos) +
            "bad = [m for m in ('ray', 'mlflow', 'cupy') if m in sys.modules]\n"
            "assert not bad, bad\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT / "platform"), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PKG)))
def test_imports_on_cpu_machine(path: Path) -> None:
    importlib.import_module(module_name(path))
