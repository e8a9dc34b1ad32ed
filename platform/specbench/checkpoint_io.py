"""Reading a checkpoint file safely: one place for the checks every model loader makes first.

`torch.load(weights_only=True)` (no code from disk runs), then the file's format tags; each failure is a
`DataError` that names the file and says how to get a good one.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specbench.errors import DataError


def read_checkpoint(path: Path, what: str, fix: str, expected: Mapping[str, Any]) -> dict[str, Any]:
    """The checkpoint at `path` as a dict whose `expected` keys hold the expected values (format tags).

    `what` names the kind of file in messages ("acoustic model checkpoint"); `fix` says how to get one."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise DataError(f"{what} {path} does not exist. {fix}")
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - torch raises many types for a damaged or unsafe file
        raise DataError(f"{path}: not a readable {what} ({err}). {fix}") from err
    if not isinstance(blob, dict) or any(blob.get(k) != v for k, v in expected.items()):
        tags = ", ".join(f"{k} {v}" for k, v in expected.items())
        raise DataError(f"{path}: not a specbench {what} of {tags}. {fix}")
    return blob
