"""Digests by hand: code_digest over version, names and trees in order; files_digest over sorted files."""

from __future__ import annotations

import ast
import hashlib
import os
import sys
from pathlib import Path

import pytest

from specbench.code_digest import code_digest, files_digest

pytestmark = pytest.mark.unit


def test_code_digest_by_hand(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "b.py").write_text("y = x + 2  # sum\n")
    h = hashlib.sha256(f"python {sys.version_info.major}.{sys.version_info.minor}".encode())
    for name, code in (("b.py", "y = x + 2"), ("a.py", "x = 1")):
        h.update(name.encode() + b"\0" + ast.dump(ast.parse(code)).encode() + b"\0")
    assert code_digest([tmp_path / "b.py", tmp_path / "a.py"]) == h.hexdigest()
    assert code_digest([tmp_path / "a.py", tmp_path / "b.py"]) != h.hexdigest()  # the order counts


@pytest.mark.parametrize("template", ['class A:\n    """{}"""\n    n = 1', 'async def f():\n    """{}"""\n    pass'])
def test_class_and_async_function_docstrings_do_not_count(tmp_path: Path, template: str) -> None:
    paths = [tmp_path / "a" / "m.py", tmp_path / "b" / "m.py"]
    for path, doc in zip(paths, ("A.", "A, at length.")):
        path.parent.mkdir()
        path.write_text(template.format(doc))
    assert code_digest(paths[:1]) == code_digest(paths[1:])


def test_files_digest_by_hand(tmp_path: Path) -> None:
    for folder, text in (("g1", b"ab"), ("g2", b"cd")):
        (tmp_path / folder / "sub").mkdir(parents=True)  # not a file: left out
        for name, data in (("z.fst", text), ("a.txt", b"words")):
            (tmp_path / folder / name).write_bytes(data)
            os.utime(tmp_path / folder / name, ns=(10**18, 10**18))  # the same stamps in g1 and g2
        h = hashlib.sha256()
        for name, data in (("a.txt", b"words"), ("z.fst", text)):  # sorted by name
            h.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
        assert files_digest(tmp_path / folder) == h.hexdigest()
