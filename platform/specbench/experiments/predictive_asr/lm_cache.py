"""The word LM's answers, computed once: n-best completions by prefix and continuation log-probs by (prefix,
continuation), through the Ray LM stage, kept in memory across passes and on disk across jobs.

The predictive-ASR job, its habit-sweep populations and the confidence training ask the LM about the same
prefixes again and again (the same users' requests, the same partial hypotheses), and each round of the Ray
stage pays for starting its actors. The disk store is a folder of Arrow parts under the work directory
(`lm-cache/<checkpoint sha256>-<settings and code>-<device>`): the key names what the answers depend on (the
checkpoint's bytes, the completion settings batch size included, the source of the LM modules, torch's
version, the device), so a stored answer is what the stage would compute again. Each fill writes one new part under a temporary name and renames it, so
concurrent jobs never read half a part; a part that cannot be read is an error naming it and the fix.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from specbench.code_digest import code_digest
from specbench.errors import DataError
from specbench.paths import work_dir
from specbench.prediction import lm_stage
from specbench.prediction.lm_stage import COMPLETION, LmStage, choose_device
from specbench.prediction.settings import CompletionSettings
from specbench.runtime import run_ray
from specbench.stage import STATUS_OK

Key = tuple[str, ...]
GPU_FRACTION = 0.5  # two LM actors share a GPU
PART_SCHEMA = pa.schema([("prefix", pa.list_(pa.string())), ("continuation", pa.list_(pa.string())),
                         ("completions", pa.list_(COMPLETION)), ("log_prob", pa.float64())])


# the code that computes the answers (lm_training.py: the `collate` that builds the LM's inputs): an edit to any of
# these, or another torch, starts a new store
LM_MODULES = ("lm.py", "completion.py", "lm_stage.py", "vocab.py", "lm_training.py")


def store_dir(checkpoint: Path, settings: CompletionSettings, device: str) -> Path:
    """The disk store of one (checkpoint bytes, settings, device, LM code and torch version) under the work
    directory. The code is read as code (`code_digest`): a comment or docstring edit keeps the store."""
    import torch

    digest = hashlib.sha256(checkpoint.read_bytes()).hexdigest()[:16]
    code = torch.__version__ + code_digest(Path(lm_stage.__file__).with_name(name) for name in LM_MODULES)
    knobs = hashlib.sha256(repr(sorted(asdict(settings).items())).encode() + code.encode()).hexdigest()[:8]
    return work_dir() / "lm-cache" / f"{digest}-{knobs}-{device}"


@dataclass
class LmCache:
    """Completions by prefix and continuation log-probs by (prefix, continuation), kept across passes and,
    with `persist` (the default), across jobs in `store_dir`."""

    checkpoint: Path
    settings: CompletionSettings
    device: str = "cpu"  # resolved here ("auto": CUDA where the driver sees a GPU); the stage asks Ray for it
    persist: bool = True
    completions: dict[Key, list[tuple[Key, float, int]]] = field(default_factory=dict)
    scores: dict[tuple[Key, Key], float] = field(default_factory=dict)
    computed: int = 0  # answers this cache asked the stage for (the rest came from memory or disk)

    def __post_init__(self) -> None:
        if not self.checkpoint.is_file():
            raise DataError(f"prediction LM {self.checkpoint} does not exist. Fix: train it with "
                            "`specbench train lm jobs/lm.toml`")
        self.device = choose_device(self.device)
        self.store = store_dir(self.checkpoint, self.settings, self.device) if self.persist else None
        if self.store is not None and self.store.is_dir():
            for part in sorted(self.store.glob("part-*.parquet")):
                self._absorb(self._read_part(part).to_pylist())

    @staticmethod
    def _read_part(part: Path) -> pa.Table:
        try:
            missing = [name for name in PART_SCHEMA.names if name not in pq.read_schema(part).names]
            if missing:  # read with the schema, the absent columns would come back as nulls
                raise pa.ArrowInvalid(f"it has no column {', '.join(missing)}")
            return pq.read_table(part, schema=PART_SCHEMA)
        except (OSError, pa.ArrowException) as error:
            raise DataError(f"LM cache part {part} cannot be read ({error}). Fix: delete it (or its folder "
                            f"{part.parent}); its answers are computed again") from error

    def _absorb(self, rows: list[dict]) -> None:
        for r in rows:
            key = tuple(r["prefix"])
            if r["continuation"] is None:
                self.completions[key] = [(tuple(c["words"]), c["log_prob"], c["rank"]) for c in r["completions"]]
            else:
                self.scores[(key, tuple(r["continuation"]))] = r["log_prob"]

    def fill(self, prefixes: set[Key], pairs: set[tuple[Key, Key]]) -> None:
        """Compute what is not known yet through the Ray LM stage (one round for both kinds), and store it."""
        todo_p = sorted(p for p in prefixes if p not in self.completions)
        todo_s = sorted(p for p in pairs if p not in self.scores)
        if not todo_p and not todo_s:
            return
        table = pa.table({"prefix": pa.array([list(p) for p in todo_p] + [list(p) for p, _ in todo_s],
                                             pa.list_(pa.string())),
                          "continuation": pa.array([None] * len(todo_p) + [list(c) for _, c in todo_s],
                                                   pa.list_(pa.string()))})
        stage = LmStage(self.checkpoint, self.settings, self.device,
                        gpu_fraction=GPU_FRACTION if self.device == "cuda" else 0.0)
        rows = run_ray(stage, table, batch_size=self.settings.batch_size).to_pylist()
        for r in rows:
            if r["status"] != STATUS_OK:
                raise DataError(f"the word LM failed on prefix {r['prefix']}: {r['status']}")
        self._absorb(rows)
        self.computed += len(rows)
        if self.store is not None:
            self._write_part(rows)

    def _write_part(self, rows: list[dict]) -> None:
        self.store.mkdir(parents=True, exist_ok=True)
        name = f"part-{uuid.uuid4().hex}.parquet"
        temporary = self.store / f".{name}.tmp"
        pq.write_table(pa.Table.from_pylist([{k: r[k] for k in PART_SCHEMA.names} for r in rows],
                                            schema=PART_SCHEMA), temporary)
        os.replace(temporary, self.store / name)
