"""DESIGN.md's layering: only runtime/ imports ray, only tracking/ imports mlflow, only decoder/gpu.py
imports cupy; no platform/__init__.py; algorithm packages import neither the CLI nor the pipelines; and
every module imports on a CPU-only machine without ray or mlflow being loaded by the algorithms."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "platform" / "specbench"
ALGORITHMS = ("wfst", "decoder", "acoustic", "prediction", "simultrans", "metrics", "data")


def imported_roots(path: Path) -> set[str]:
    """Top-level names of every import in a module, wherever it appears (also inside functions)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def modules() -> list[Path]:
    return sorted(PKG.rglob("*.py"))


def test_no_platform_init() -> None:
    assert not (ROOT / "platform" / "__init__.py").exists()


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PKG)))
def test_layering(path: Path) -> None:
    rel = path.relative_to(PKG)
    top = rel.parts[0] if len(rel.parts) > 1 else rel.stem
    roots = imported_roots(path)
    heads = {n.split(".")[0] for n in roots}
    if top != "runtime":
        assert "ray" not in heads, f"{rel} imports ray; only runtime/ may"
    if top != "tracking":
        assert "mlflow" not in heads, f"{rel} imports mlflow; only tracking/ may"
    if rel.as_posix() != "decoder/gpu.py":
        assert "cupy" not in heads, f"{rel} imports cupy; only decoder/gpu.py may"
    if top in ALGORITHMS or top in ("stage", "errors", "paths", "config"):
        bad = {n for n in roots if n.startswith(("specbench.cli", "specbench.pipelines", "specbench.runtime",
                                                   "specbench.tracking"))}
        assert not bad, f"{rel} imports {bad}; arrows run cli -> pipelines -> algorithms"


def test_every_module_imports_without_ray_or_mlflow_for_algorithms() -> None:
    algos = [p for p in modules() if p.relative_to(PKG).parts[0] in ALGORITHMS]
    names = [".".join(("specbench", *p.relative_to(PKG).with_suffix("").parts)).removesuffix(".__init__")
             for p in algos]
    code = ("import sys\n" + "".join(f"import {n}\n" for n in names) +
            "bad = [m for m in ('ray', 'mlflow', 'cupy') if m in sys.modules]\n"
            "assert not bad, bad\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT / "platform"), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PKG)))
def test_imports_on_cpu_machine(path: Path) -> None:
    name = ".".join(("specbench", *path.relative_to(PKG).with_suffix("").parts)).removesuffix(".__init__")
    importlib.import_module(name)
