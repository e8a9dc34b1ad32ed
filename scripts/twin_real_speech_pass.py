"""The real-speech job's twin pass on its own: one DecoderStage over the Sphinx HCLG, the cached score chunks
in order, timed as the job times search (decode calls only), then every utterance's status and word ids
compared with the CPU backend's and the twin's decodes that the job cached. It measures the twin's speed on
every scored recording without rerunning the job.

    SPECBENCH_HOME=<the real_speech job's work directory> python scripts/twin_real_speech_pass.py [JOB_NAME]
"""

from __future__ import annotations

import glob
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "platform"))

from specbench.data.scores import iter_rows, read_parquet_table
from specbench.decoder.stage import DecoderStage

home = Path(os.environ["SPECBENCH_HOME"])
job = sys.argv[1] if len(sys.argv) > 1 else "real_speech"
graph = glob.glob(str(home / "graphs/sphinx-*/HCLG.fst"))[0]
stage = DecoderStage(graph, "twin", beam=13.0, max_active=7000, acoustic_scale=0.08)  # the job's chosen settings
stage.setup()
cached: dict[str, dict[str, tuple]] = {backend: {} for backend in ("cpu", "twin")}
for backend, rows in cached.items():
    for name in glob.glob(str(home / f"real_speech/decodes/{job}/{backend}-0.08-b13-*.jsonl")):
        for line in Path(name).read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            rows[row["id"]] = (row["status"], row["word_ids"])
seconds, frames, decoded = 0.0, 0, []
for path in sorted(glob.glob(str(home / "real_speech/scores/*.parquet"))):
    items = list(iter_rows(read_parquet_table(Path(path)), path))
    start = time.perf_counter()
    decoded += stage.decode_many(items)
    seconds += time.perf_counter() - start
    frames += sum(len(m) for _, m, _ in items)
    print(f"{len(decoded)} utterances, {frames} frames, {seconds:.0f} s, {frames / seconds:.1f} frames/s", flush=True)
equal = {backend: sum(1 for r in decoded if rows.get(r["id"]) == (r["status"], r["word_ids"]))
         for backend, rows in cached.items()}
print(json.dumps({"utterances": len(decoded), "ok": sum(r["status"] == "ok" for r in decoded), "frames": frames,
                  "search_seconds": round(seconds, 1), "frames_per_second": round(frames / seconds, 1),
                  "equal_to_cached": equal, "cached": {b: len(rows) for b, rows in cached.items()}}))
