"""Train several translation-model candidates side by side on one GPU and keep the best by devel loss.

Each candidate is a shipped job file (`jobs/mt_waitk.toml`, `jobs/mt_full.toml`) with a few settings changed
(dropout, patience); the candidates run as parallel `specbench train mt --no-mlflow --device cuda` processes
(the GPU machine has no mlflow), with the same time budget. Job files, checkpoints, cards and logs go to
`.specbench/gpu-mt/`. Afterwards, per model kind, the candidates are ranked by their best devel loss and
packed for the trip back (every file that comes back must stay under 16 MiB):

- `OUT/mt_waitk_best.tar`: the checkpoints and cards of the two best wait-k candidates;
- `OUT/mt_full_best.tar`: the best full-sentence candidate's checkpoint and card, and every candidate's card,
  job file and log.

Usage: `python scripts/gpu_train_mt.py --out DIR [--minutes 6.5] [--device cuda] [--only NAME ...]`.
A CPU dry run: `--device cpu --minutes 0.2 --only waitk_d03`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import time
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / ".specbench" / "gpu-mt"

# name -> (base job, {section: {key: value}}); the model sizes stay those of the shipped jobs (the
# checkpoints must stay a few MB), so the candidates differ in regularization and stopping only.
CANDIDATES: dict[str, tuple[str, dict[str, dict[str, Any]]]] = {
    "waitk_d01": ("jobs/mt_waitk.toml", {"model": {"dropout": 0.1}}),
    "waitk_d02": ("jobs/mt_waitk.toml", {"model": {"dropout": 0.2}}),
    "waitk_d03": ("jobs/mt_waitk.toml", {"model": {"dropout": 0.3}}),
    "waitk_d03_ls02": ("jobs/mt_waitk.toml", {"model": {"dropout": 0.3}, "training": {"label_smoothing": 0.2}}),
    "full_d02": ("jobs/mt_full.toml", {"model": {"dropout": 0.2}}),
    "full_d03": ("jobs/mt_full.toml", {"model": {"dropout": 0.3}}),
}
COMMON = {"training": {"patience": 10, "max_epochs": 400, "threads": 2, "checkpoint_minutes": 60.0},
          "top": {"bleu_sentences": 0}}  # per-epoch BLEU would be decoded on the CPU: the kept models are
# scored afterwards by the simultrans job


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    raise TypeError(f"cannot write {value!r} to TOML")


def to_toml(job: dict[str, Any]) -> str:
    """A job dict of scalars and one level of tables as TOML."""
    lines = [f"{k} = {toml_value(v)}" for k, v in job.items() if not isinstance(v, dict)]
    for section, table in job.items():
        if isinstance(table, dict):
            lines += ["", f"[{section}]"] + [f"{k} = {toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


def candidate_job(name: str, minutes: float) -> dict[str, Any]:
    base, changes = CANDIDATES[name]
    job = tomllib.loads((ROOT / base).read_text(encoding="utf-8"))
    job["name"] = f"gpu_{name}"
    job["output"] = str((WORK / f"{name}.pt").relative_to(ROOT))
    for section, table in [*changes.items(), *COMMON.items(), ("training", {"max_minutes": minutes})]:
        target = job if section == "top" else job.setdefault(section, {})
        target.update(table)
    return job


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--minutes", type=float, default=6.5, help="training budget of every candidate")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--only", nargs="*", choices=sorted(CANDIDATES), help="train only these candidates")
    args = parser.parse_args(argv)
    WORK.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    names = args.only or list(CANDIDATES)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "platform"), os.environ.get("PYTHONPATH", "")]),
           "PYTHONUNBUFFERED": "1"}
    procs = {}
    start = time.monotonic()
    for name in names:
        job_path = WORK / f"{name}.toml"
        job_path.write_text(to_toml(candidate_job(name, args.minutes)), encoding="utf-8")
        log = open(WORK / f"{name}.log", "w", encoding="utf-8")  # noqa: SIM115 (closed with the process)
        procs[name] = (subprocess.Popen([sys.executable, "-m", "specbench", "train", "mt", str(job_path),
                                         "--no-mlflow", "--device", args.device], cwd=ROOT, env=env,
                                        stdout=log, stderr=subprocess.STDOUT), log)
    print(f"training {len(procs)} candidates on {args.device}: {', '.join(procs)}", flush=True)
    failed = []
    for name, (proc, log) in procs.items():
        if proc.wait():
            failed.append(name)
        log.close()
        print(f"{name}: exit {proc.returncode} after {time.monotonic() - start:.0f} s", flush=True)
    cards = {}
    for name in names:
        card_path = WORK / f"{name}.json"
        if card_path.is_file():
            card = json.loads(card_path.read_text(encoding="utf-8"))
            cards[name] = card
            print(f"{name}: best devel loss {card['best_devel_loss']:.4f} at epoch {card['best_epoch']} of "
                  f"{card['epochs']} ({card['minutes']:.1f} min, {card['stopped_because']}; {card['device']})")
    ranked = {kind: sorted((n for n in cards if n.startswith(kind)), key=lambda n: cards[n]["best_devel_loss"])
              for kind in ("waitk", "full")}
    summary = {"device": args.device, "minutes": args.minutes, "failed": failed, "ranked": ranked,
               "candidates": {n: {k: c.get(k) for k in ("best_devel_loss", "best_epoch", "epochs", "minutes",
                                                        "stopped_because", "device", "model", "training")}
                              for n, c in cards.items()}}
    (WORK / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    with tarfile.open(args.out / "mt_waitk_best.tar", "w") as tar:
        for name in ranked["waitk"][:2]:
            for suffix in (".pt", ".json", ".md"):
                tar.add(WORK / f"{name}{suffix}", arcname=f"{name}{suffix}")
    with tarfile.open(args.out / "mt_full_best.tar", "w") as tar:
        for name in ranked["full"][:1]:
            tar.add(WORK / f"{name}.pt", arcname=f"{name}.pt")
        for name in names:
            for suffix in (".json", ".md", ".toml", ".log"):
                if (WORK / f"{name}{suffix}").is_file():
                    tar.add(WORK / f"{name}{suffix}", arcname=f"{name}{suffix}")
        tar.add(WORK / "summary.json", arcname="summary.json")
    print(json.dumps({"ranked": ranked, "failed": failed}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
