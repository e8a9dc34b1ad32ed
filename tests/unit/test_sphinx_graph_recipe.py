"""The Sphinx HCLG recipe's cache key (`experiments.sphinx_graph_recipe`): every `specbench.wfst` module that
the build imports, directly or through another, is among the sources whose code keys the graph, so an edit
to any of them builds the graph again."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from specbench.experiments import sphinx_graph_recipe

pytestmark = pytest.mark.unit
PACKAGE = "specbench.wfst"


def _wfst_imports(path: Path) -> set[str]:
    """The `specbench.wfst` modules a source file imports (at the top or inside a function)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == PACKAGE:  # `from specbench.wfst import hclg, ...`: submodules
                found.update(f"{PACKAGE}.{alias.name}" for alias in node.names)
            elif node.module.startswith(PACKAGE + "."):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith(PACKAGE + "."))
    return found


def _reachable(start: Path) -> set[str]:
    seen: set[str] = set()
    todo = list(_wfst_imports(start))
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin, f"{name} is imported but cannot be found"
        todo.extend(_wfst_imports(Path(spec.origin)) - seen)
    return seen


def test_every_wfst_module_the_build_imports_keys_the_graph() -> None:
    reachable = _reachable(Path(sphinx_graph_recipe.__file__))
    sources = {module.__name__ for module in sphinx_graph_recipe._SOURCES}
    assert {"specbench.wfst.hclg", "specbench.wfst.topology", "specbench.wfst.fst_binary"} <= reachable
    assert sorted(reachable - sources) == []
