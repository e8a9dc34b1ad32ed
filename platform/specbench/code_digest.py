"""Digests of what decides a cached artifact: the code that builds it, read as code, and the files it holds.

Caches keyed by the raw bytes of their building modules are thrown away by an edit to a comment, a
docstring or an error message. `code_digest` hashes each module's syntax tree instead, with docstrings
dropped, the text of the messages that `raise` statements give blanked (the exception's class and any other
argument kept: a raise ends the build, so its wording never shapes what is built) and without line numbers,
so only a change to what the code does (or a new Python, whose trees may print differently) gives a new key. `files_digest` hashes a built directory's files, so that what is computed from a graph
follows the graph's contents, not the name of the directory it was built in.
"""

from __future__ import annotations

import ast
import hashlib
import sys
from collections.abc import Iterable
from pathlib import Path

_DEFINITIONS = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _without_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if not isinstance(node, _DEFINITIONS) or not node.body:
            continue
        first = node.body[0]
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
            node.body = node.body[1:] or [ast.Pass()]
    return tree


def _is_text(node: ast.expr) -> bool:
    """A string literal, an f-string, or a concatenation of them: the wording of a message."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _is_text(node.left) and _is_text(node.right)
    return isinstance(node, ast.JoinedStr)


def _without_raise_messages(tree: ast.AST) -> ast.AST:
    """Each `raise E(<text>, ...)` with its text arguments blanked; the class, the other arguments and the
    `from` cause stay."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            node.exc.args = [ast.Constant("") if _is_text(arg) else arg for arg in node.exc.args]
    return tree


def code_digest(paths: Iterable[Path | str]) -> str:
    """sha256 over the Python version and each source file's syntax tree, docstrings, comments and the
    wording of raised messages left out (layout too: line numbers are not part of the dump). The order of
    `paths` counts."""
    h = hashlib.sha256(f"python {sys.version_info.major}.{sys.version_info.minor}".encode())
    for path in paths:
        path = Path(path)
        tree = _without_docstrings(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        tree = _without_raise_messages(tree)
        h.update(path.name.encode() + b"\0" + ast.dump(tree, include_attributes=False).encode() + b"\0")
    return h.hexdigest()


_FILES: dict[tuple, str] = {}  # (directory, (name, size, mtime_ns) of each file) -> digest


def files_digest(directory: Path, exclude: Iterable[str] = ()) -> str:
    """sha256 over the names and bytes of the files directly in `directory` (sorted by name), those named in
    `exclude` left out. Remembered in the process while no file's size or modification time changes."""
    skip = set(exclude)
    files = sorted(p for p in directory.iterdir() if p.is_file() and p.name not in skip)
    stamp = (str(directory.resolve()), tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files))
    if stamp not in _FILES:
        h = hashlib.sha256()
        for path in files:
            h.update(path.name.encode() + b"\0")
            with path.open("rb") as f:
                h.update(hashlib.file_digest(f, "sha256").digest())
        _FILES[stamp] = h.hexdigest()
    return _FILES[stamp]
