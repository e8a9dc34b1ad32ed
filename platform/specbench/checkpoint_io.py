"""Checkpoint files: one place for how they are written and for the checks every model loader makes first.

Written as an xz stream of a `torch.save` file (`xz -d` gives the plain file back): fp16 and fp32 weights
shrink by a tenth to a seventh, which keeps the shipped models small, and decompressing takes about 0.05 s a MB.
The LZMA2 coder is told that the data comes in 4-byte units (`lc=0, lp=2, pb=2`, as `xz --lzma2=lc=0,lp=2,pb=2`
would): tensors are fp16 or fp32, and modelling literals by their position in a 4-byte word instead of by the
previous byte makes the files about 4% (fp16) to 8% (fp32) smaller than xz's default, at the same speed.
Read with `torch.load(weights_only=True)` (no code from disk runs; plain `torch.save` files are read too),
then the file's format tags, then the keys that
the kind of model asked for needs; each failure is a `DataError` that names the file and says how to get a
good one. A checkpoint of another specbench kind (a translation model given where an acoustic model is
expected) is named as such.
"""

from __future__ import annotations

import io
import lzma
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specbench.errors import DataError
from specbench.text_files import replacing

# The kinds of specbench checkpoint, by the name their loaders give them (`what`): the keys that only that
# kind holds, and how a message names it. `read_checkpoint` uses them to tell one kind from another.
KIND_KEYS: dict[str, frozenset[str]] = {
    "acoustic model checkpoint": frozenset({"phones", "cmvn_mean", "cmvn_inv_std", "model_config",
                                            "state_dict"}),
    "translation model": frozenset({"bpe_sha256", "model_config", "state_dict"}),
    "prediction LM": frozenset({"vocab", "settings", "state_dict"}),
    "confidence model": frozenset({"features", "members", "mean", "std"}),
}
KIND_NAMES: dict[str, str] = {
    "acoustic model checkpoint": "an acoustic model checkpoint (`specbench train am`)",
    "translation model": "a translation model checkpoint (`specbench train mt`)",
    "prediction LM": "a prediction LM checkpoint (`specbench train lm`)",
    "confidence model": "a confidence model checkpoint (`specbench train confidence`)",
}


def checkpoint_kind(blob: Mapping[str, Any]) -> str | None:
    """The kind (a key of KIND_KEYS) whose keys `blob` holds, or None when it holds no kind's keys."""
    for kind, keys in KIND_KEYS.items():
        if keys <= set(blob):
            return kind
    return None


XZ_MAGIC = b"\xfd7zXZ\x00"
XZ_FILTERS = ({"id": lzma.FILTER_LZMA2, "preset": 6, "lc": 0, "lp": 2, "pb": 2},)


def write_checkpoint(blob: Mapping[str, Any], path: Path) -> None:
    """`blob` saved at `path` (parents made) as an xz-compressed `torch.save` file, atomically: a reader
    sees the old file or the whole new one, never a part."""
    import torch

    buffer = io.BytesIO()
    torch.save(dict(blob), buffer)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with replacing(path) as tmp:
        tmp.write_bytes(lzma.compress(buffer.getbuffer(), format=lzma.FORMAT_XZ, filters=XZ_FILTERS))


def load_blob(path: Path) -> Any:
    """What the checkpoint file at `path` holds (xz-compressed or plain), loaded with `weights_only=True`;
    no checks (`read_checkpoint` makes them)."""
    import torch

    data = Path(path).read_bytes()
    if data.startswith(XZ_MAGIC):
        data = lzma.decompress(data)
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)


def read_checkpoint(path: Path, what: str, fix: str, expected: Mapping[str, Any]) -> dict[str, Any]:
    """The checkpoint at `path` as a dict whose `expected` keys hold the expected values (format tags) and,
    when `what` is one of KIND_KEYS, which holds that kind's keys.

    `what` names the kind of file in messages ("acoustic model checkpoint"); `fix` says how to get one."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{what} {path} does not exist. {fix}")
    try:
        blob = load_blob(path)
    except Exception as err:  # noqa: BLE001 - torch and lzma raise many types for a damaged or unsafe file
        raise DataError(f"{path}: not a readable {what}: the file is damaged, truncated or not a PyTorch "
                        f"checkpoint at all (reading it said: {_load_reason(err)}). {fix}") from err
    if not isinstance(blob, dict):
        raise DataError(f"{path}: holds a {type(blob).__name__}, not a specbench {what}. {fix}")
    found = checkpoint_kind(blob)
    if what in KIND_KEYS and found != what:
        if found is not None:
            raise DataError(f"{path}: this is {KIND_NAMES[found]}, but {KIND_NAMES[what].split(' (')[0]} is "
                            f"needed here. {fix}")
        missing = sorted(KIND_KEYS[what] - set(blob))
        raise DataError(f"{path}: not a specbench {what}: it lacks the entries {missing}. {fix}")
    wrong = [k for k, v in expected.items() if blob.get(k) != v]
    if wrong:
        tags = ", ".join(f"{k} {v}" for k, v in expected.items())
        shown = ", ".join(f"{k} {blob.get(k)!r}" for k in wrong)
        raise DataError(f"{path}: not a specbench {what} of {tags} (it has {shown}). {fix}")
    return blob


def _load_reason(err: Exception) -> str:
    """The reader's cause in a few words, without torch's advice to load the file with `weights_only` off
    (which would run code from the file: specbench never unpickles code)."""
    text = str(err)
    if "Weights only load failed" in text:
        cause = (text.partition("WeightsUnpickler error:")[2].strip().split("\n")[0].split(". Please use")[0]
                 or "it holds more than tensors and plain data")
        return f"a weights-only load refused it ({cause[:150]}); specbench never unpickles code"
    first = " ".join(text.split(". ")[0].split()).strip("'\"")[:200]
    return first if first and not first.isdigit() else "its bytes are no PyTorch file's"  # e.g. a bare KeyError
