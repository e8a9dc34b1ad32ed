"""Train several translation-model candidates side by side on one GPU and rank them on val.

Each candidate is a shipped job file (`jobs/mt_waitk.toml`, `jobs/mt_full.toml`) with a few settings changed
(dropout, weight averaging, seed); the candidates run as parallel `specbench train mt --no-mlflow --device
cuda` processes (the GPU machine has no mlflow), with the same time budget. Job files, checkpoints, cards and
logs go to `.specbench/gpu-mt/`. Afterwards every wait-k candidate, and the shipped wait-k model beside them,
is scored on all 1,014 val sentences by `scripts/compare_mt_models.py` (in parallel CPU processes): greedy
wait-k at k = 1..9 and SBS (b = 5, w = 2) at k = 3. The wait-k candidates are ranked by that SBS BLEU (the
system the simultrans job reports at k = 3), the full-sentence ones by devel loss. For the trip back (every
file that comes back must stay under 16 MiB):

- `OUT/mt_waitk_best.tar`: the checkpoints and cards of the two best wait-k candidates;
- `OUT/mt_full_best.tar`: the best full-sentence candidate's checkpoint and card (when any was trained), and
  every candidate's card, job file and log, the val comparison and the summary.

Usage: `python scripts/gpu_train_mt.py --out DIR [--minutes 5] [--device cuda] [--only NAME ...]`.
A CPU dry run: `--device cpu --minutes 0.2 --only waitk_d01`.
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
# checkpoints must stay a few MB), so the candidates differ in regularization, weight averaging and seed.
# (An earlier run on an H200 tried dropout 0.1-0.3 and label smoothing 0.2 without averaging: lower devel
# loss than the CPU-trained model, but not higher val BLEU; benchmarks/results/mt_training_h200.json at commit 84d82c9.)
WAITK = "jobs/mt_waitk.toml"
CANDIDATES: dict[str, tuple[str, dict[str, dict[str, Any]]]] = {
    "waitk_d01": (WAITK, {"model": {"dropout": 0.1}}),
    "waitk_d01_avg999": (WAITK, {"model": {"dropout": 0.1}, "training": {"weight_average_decay": 0.999}}),
    "waitk_d01_avg999_s1": (WAITK, {"model": {"dropout": 0.1}, "training": {"weight_average_decay": 0.999,
                                                                            "seed": 1}}),
    "waitk_d01_avg999_s2": (WAITK, {"model": {"dropout": 0.1}, "training": {"weight_average_decay": 0.999,
                                                                            "seed": 2}}),
    "waitk_d01_avg9995": (WAITK, {"model": {"dropout": 0.1}, "training": {"weight_average_decay": 0.9995}}),
    "waitk_d015_avg999": (WAITK, {"model": {"dropout": 0.15}, "training": {"weight_average_decay": 0.999}}),
    "waitk_d02_avg999": (WAITK, {"model": {"dropout": 0.2}, "training": {"weight_average_decay": 0.999}}),
    "waitk_d01_ls0_avg999": (WAITK, {"model": {"dropout": 0.1}, "training": {"weight_average_decay": 0.999,
                                                                             "label_smoothing": 0.0}}),
}
SHIPPED_WAITK = ROOT / "models" / "mt_waitk.pt"
COMMON = {"training": {"patience": 10, "max_epochs": 400, "threads": 2, "checkpoint_minutes": 60.0},
          "top": {"bleu_sentences": 0}, "selection": {"metric": "devel_loss"}}
# Per-epoch BLEU, and selecting epochs by SBS BLEU, would decode on the CPU (about 12 s an epoch, against
# 3-5 s of GPU training): the candidates keep their lowest-devel-loss epoch and are ranked on val afterwards.


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
    parser.add_argument("--minutes", type=float, default=5.0, help="training budget of every candidate")
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
            loss = card["best_devel_loss"]
            card["best_devel_loss"] = float("nan" if loss is None else loss)  # JSON null: NaN; "inf": inf
            cards[name] = card
            print(f"{name}: best devel loss {card['best_devel_loss']:.4f} at epoch {card['best_epoch']} of "
                  f"{card['epochs']} ({card['minutes']:.1f} min, {card['stopped_because']}; {card['device']})")
    waitk = [n for n in cards if n.startswith("waitk")]
    val = compare_on_val([WORK / f"{n}.pt" for n in waitk] + [SHIPPED_WAITK], env)
    sbs_key = "sbs_k3_b5w2"
    for name in waitk:
        row = val.get(str(WORK / f"{name}.pt"), {})
        cards[name]["val"] = {k: row.get(k) for k in ("greedy", "greedy_mean", sbs_key)}
    ranked = {"waitk": sorted(waitk, key=lambda n: -(cards[n]["val"][sbs_key] or 0.0)),
              "full": sorted((n for n in cards if n.startswith("full")),
                             key=lambda n: cards[n]["best_devel_loss"])}
    shipped = val.get(str(SHIPPED_WAITK), {})
    print(f"shipped wait-k model on val: greedy mean {shipped.get('greedy_mean')}, "
          f"SBS k=3 {shipped.get(sbs_key)}")
    for name in ranked["waitk"]:
        v = cards[name]["val"]
        print(f"{name}: val greedy mean {v['greedy_mean']}, greedy k=3 {(v['greedy'] or {}).get('3')}, "
              f"SBS k=3 {v[sbs_key]}")
    fields = ("best_devel_loss", "best_epoch", "epochs", "minutes", "stopped_because", "device", "model",
              "training", "val")
    summary = {"device": args.device, "minutes": args.minutes, "failed": failed, "ranked": ranked,
               "shipped_waitk_val": shipped,
               "candidates": {n: {k: c.get(k) for k in fields} for n, c in cards.items()}}
    (WORK / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    with tarfile.open(args.out / "mt_waitk_best.tar", "w") as tar:
        for name in ranked["waitk"][:2]:
            for suffix in (".pt", ".json", ".md"):
                tar.add(WORK / f"{name}{suffix}", arcname=f"{name}{suffix}")
    with tarfile.open(args.out / "mt_full_best.tar", "w") as tar:
        for name in ranked["full"][:1]:
            tar.add(WORK / f"{name}.pt", arcname=f"{name}.pt")
        for name in names:
            for suffix in (".json", ".md", ".toml", ".log", ".val.json"):
                if (WORK / f"{name}{suffix}").is_file():
                    tar.add(WORK / f"{name}{suffix}", arcname=f"{name}{suffix}")
        tar.add(WORK / "summary.json", arcname="summary.json")
        shipped_val = WORK / (SHIPPED_WAITK.stem + ".val.json")
        if shipped_val.is_file():
            tar.add(shipped_val, arcname="shipped_" + shipped_val.name)
    print(json.dumps({"ranked": ranked, "failed": failed}))
    return 1 if failed else 0


def compare_on_val(checkpoints: list[Path], env: dict[str, str]) -> dict[str, dict]:
    """`scripts/compare_mt_models.py` on every checkpoint, one CPU process (2 threads) each, all at once;
    checkpoint path -> its row (missing where the comparison failed)."""
    procs = []
    for path in checkpoints:
        if not path.is_file():
            continue
        out = WORK / (path.stem + ".val.json")
        log = open(WORK / (path.stem + ".val.log"), "w", encoding="utf-8")  # noqa: SIM115
        cmd = [sys.executable, str(ROOT / "scripts" / "compare_mt_models.py"), str(path), "--ks", "1", "3",
               "5", "7", "9", "--sbs-k", "3", "--beam", "5", "--window", "2", "--threads", "2",
               "--output", str(out)]
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        procs.append((path, out, proc, log))
    rows = {}
    for path, out, proc, log in procs:
        proc.wait()
        log.close()
        if proc.returncode == 0 and out.is_file():
            rows[str(path)] = json.loads(out.read_text(encoding="utf-8"))[0]
        else:
            print(f"{path}: the val comparison failed (see {log.name})", flush=True)
    return rows


if __name__ == "__main__":
    sys.exit(main())
