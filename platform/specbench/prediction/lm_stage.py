"""`LmStage`: the word LM as a batch stage (a Ray actor keeps the model loaded; a plain loop runs it too).

Input columns: `prefix: list<string>` and `continuation: list<string>` (null for a row that asks for the
n-best completions of its prefix; a list for a row that asks for log P(continuation, </s> | prefix)).
Output: `prefix`, `continuation`, `completions: list<struct<words: list<string>, log_prob: float64,
rank: int32>>` (empty for scoring rows), `log_prob: float64` (null for completion rows) and `status`.
Completions are batched across all the prefixes of a batch; `device` is "cpu", "cuda" or "auto".
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from specbench.prediction.settings import CompletionSettings
from specbench.stage import STATUS_OK, Resources, Stage, failure_status

COMPLETION = pa.struct([("words", pa.list_(pa.string())), ("log_prob", pa.float64()), ("rank", pa.int32())])
LM_OUTPUT_SCHEMA = pa.schema([
    ("prefix", pa.list_(pa.string())), ("continuation", pa.list_(pa.string())),
    ("completions", pa.list_(COMPLETION)), ("log_prob", pa.float64()), ("status", pa.string()),
])


def choose_device(device: str) -> str:
    """The device name a stage is built with: "auto" -> "cuda" where torch sees a GPU, else "cpu"; other names
    unchanged (`prediction.lm.resolve_device` checks them when the model loads)."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class LmStage(Stage):
    """Stateful: `setup()` loads the checkpoint once per worker; `gpu_fraction` > 0 asks Ray for a GPU share."""

    stateful = True

    def __init__(self, checkpoint: Path, settings: CompletionSettings, device: str = "cpu",
                 gpu_fraction: float = 0.0) -> None:
        self.checkpoint, self.settings, self.device = Path(checkpoint), settings, device
        self.resources = Resources(num_cpus=1.0, num_gpus=gpu_fraction)
        self._completer = None

    def setup(self) -> None:
        from specbench.prediction.completion import Completer
        from specbench.prediction.lm import load_lm

        device = choose_device(self.device)
        self._completer = Completer(load_lm(self.checkpoint, device=device), self.settings, device=device)

    def __call__(self, batch: pa.Table) -> pa.Table:
        if self._completer is None:
            self.setup()
        rows = batch.select(["prefix", "continuation"]).to_pylist()
        out = [{**r, "completions": [], "log_prob": None, "status": STATUS_OK} for r in rows]
        try:
            self._fill(rows, out)
        except Exception:  # noqa: BLE001 - a batch that cannot be searched: rows say why, one by one
            for i, row in enumerate(rows):
                try:
                    self._fill([row], out[i:i + 1])
                except Exception as row_err:  # noqa: BLE001
                    out[i]["status"] = failure_status(row_err, "completion failed")
            if all(r["status"] == STATUS_OK for r in out):
                raise
        return pa.Table.from_pylist(out, schema=LM_OUTPUT_SCHEMA)

    def _fill(self, rows: list[dict], out: list[dict]) -> None:
        """Completions of the rows without a continuation, log-probs of the others, written into `out`."""
        complete = [i for i, r in enumerate(rows) if r["continuation"] is None]
        score = [i for i, r in enumerate(rows) if r["continuation"] is not None]
        for i, nbest in zip(complete, self._completer.complete([rows[i]["prefix"] for i in complete])):
            out[i]["completions"] = [{"words": list(c.words), "log_prob": c.log_prob, "rank": c.rank} for c in nbest]
        pairs = [(rows[i]["prefix"], rows[i]["continuation"]) for i in score]
        for i, lp in zip(score, self._completer.score(pairs) if pairs else []):
            out[i]["log_prob"] = lp
