"""Reading a text file the user gives (references, symbol tables) as UTF-8, with a clear error otherwise."""

from __future__ import annotations

from pathlib import Path

from specbench.errors import DataError


def read_utf8(path: Path, name: str, fix: str = "Fix: save it as UTF-8") -> str:
    """The text of `path`; a DataError naming `name` (how the message calls the file), the line and the byte
    that is not UTF-8, and `fix`, when it is not UTF-8."""
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1
        raise DataError(f"{name}, line {line}: not UTF-8 text (byte {data[err.start]:#04x} at offset "
                        f"{err.start}). {fix}") from err
