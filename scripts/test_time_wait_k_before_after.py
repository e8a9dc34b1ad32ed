"""Test-time wait-k (the full-sentence model under a wait-k schedule) decoded by whichever `specbench` is on
the path, for comparing two versions of the search side by side: BLEU and latency (`simultrans.experiment.score`)
of greedy search and of SBS at one k on Multi30k test sets, and each version's outputs' digest. Run it once with
the version before a change and once after (PYTHONPATH=<checkout>/platform), on the same machine.

    python scripts/test_time_wait_k_before_after.py [--k 3] [--beam 5] [--window 3] [--summed-ranking]
        [--splits test_2016_flickr,test_2017_flickr] [--sentences N] [--label TEXT] [--output FILE]
        [--before FILE [--after FILE]] [--profile] [--threads 2]

With `--profile`, each entry also holds where its seconds went: the encoder (`encode`), the cross-attention
keys and values (`cross_kv`), the target prefix decoded again over a new view (`decoder_prefix`), one-position
decoder steps (`decoder_step`: greedy's next token, the speculation, the tail beam) and the rest (search
bookkeeping, scoring). With `--before FILE` (this script's output for the other version), the output also holds that report and, per
set, model and search, the seconds before over after and whether the outputs are the same. With `--after FILE`
too, nothing is decoded: the two reports are put side by side (for two versions run at once with `--threads 1`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--window", type=int, default=3)
    parser.add_argument("--summed-ranking", action="store_true", help="rank speculations by the summed score")
    parser.add_argument("--splits", default="test_2016_flickr,test_2017_flickr")
    parser.add_argument("--sentences", type=int, default=0, help="the first N of each set (0: all)")
    parser.add_argument("--models", default="full,waitk", help="full (test-time wait-k) and/or waitk")
    parser.add_argument("--label", default="")
    parser.add_argument("--output", type=Path, default=None)
    parser.add_argument("--before", type=Path, default=None, help="this script's output for the other version")
    parser.add_argument("--profile", action="store_true", help="time the model's passes per entry")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (1: run both versions at once, "
                        "one core each, so that both see the same machine)")
    parser.add_argument("--after", type=Path, default=None,
                        help="decode nothing: this script's output for the version after, written with --before's")
    args = parser.parse_args()
    before = json.loads(args.before.read_text()) if args.before else None
    if args.after is not None:
        if before is None:
            parser.error("--after needs --before (the report of the version before to put beside it)")
        return _write(compared(json.loads(args.after.read_text()), before), args.output)

    import torch

    import specbench
    from specbench.data.multi30k import read_pairs
    from specbench.simultrans.experiment import Method, Shard, decode_shard, model_for, score

    torch.set_num_threads(args.threads)
    spent = _time_model_passes() if args.profile else None
    bpe = str(ROOT / "models" / "mt_bpe.model")
    paths = {"full": str(ROOT / "models" / "mt_full.pt"), "waitk": str(ROOT / "models" / "mt_waitk.pt")}
    tok = model_for(paths["full"], bpe).tokenizer
    report = {"label": args.label, "specbench": str(Path(specbench.__file__).parent), "threads": args.threads,
              "k": args.k,
              "beam": args.beam, "window": args.window, "length_normalized": not args.summed_ranking, "sets": {}}
    for split in args.splits.split(","):
        pairs = read_pairs(split)
        pairs = pairs[:args.sentences] if args.sentences else pairs
        sources, refs = [s for s, _ in pairs], [t for _, t in pairs]
        ref_tokens = [len(tok.encode(t)) for t in refs]
        for model in args.models.split(","):
            for search in ("greedy", "sbs"):
                method = Method("waitk", paths[model], search, k=args.k, beam=args.beam if search == "sbs" else 1,
                                window=args.window if search == "sbs" else 0,
                                length_normalized=not args.summed_ranking)
                if spent is not None:
                    spent.clear()
                start = time.perf_counter()
                rows = decode_shard(Shard(method, bpe, sources))
                seconds = time.perf_counter() - start
                scored = score(rows, refs, ref_tokens)
                digest = hashlib.sha256("\n".join(r["hypothesis"] for r in rows).encode()).hexdigest()[:16]
                entry = {"sentences": len(rows), "bleu": round(scored["bleu"], 2),
                         "laal_words": round(scored["laal_words"], 3), "al_words": round(scored["al_words"], 3),
                         "al": round(scored["al"], 3), "seconds": round(seconds, 1), "outputs_sha256": digest}
                if spent is not None:
                    entry["profile_seconds"] = {**{k: round(v, 2) for k, v in sorted(spent.items())},
                                                "other": round(seconds - sum(spent.values()), 2)}
                report["sets"][f"{split}/{model}/{search}"] = entry
                print(split, model, search, entry, file=sys.stderr, flush=True)
    return _write(report if before is None else compared(report, before), args.output)


def compared(report: dict, before: dict) -> dict:
    """`report` with the version before's beside it: per set, model and search, the seconds before over
    after and whether the outputs are the same."""
    return {**report, "before": before, "before_over_after": {
        key: {"seconds_ratio": round(old["seconds"] / max(entry["seconds"], 0.05), 2),
              "same_outputs": old["outputs_sha256"] == entry["outputs_sha256"]}
        for key, entry in report["sets"].items() if (old := before["sets"].get(key))}}


def _write(report: dict, output: Path | None) -> int:
    text = one_key_a_line(report)
    if output:
        output.write_text(text)
    print(text, end="")
    return 0


def one_key_a_line(report: dict) -> str:
    """The report as JSON with one top-level key a line (a results file small enough for the tree)."""
    return "{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in report.items()) + "\n}\n"


def _time_model_passes() -> dict[str, float]:
    """Wrap the translation model's passes with timers; returns the seconds spent per pass (clear it to
    start again). Only the passes themselves are timed, so the rest is the search's own work."""
    from specbench.simultrans.model import MtTransformer

    spent: dict[str, float] = {}

    def timed(name: str, method):  # noqa: ANN001, ANN202
        def run(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
            label = name if name != "decoder_positions" else \
                "decoder_step" if args[0].shape[1] == 1 else "decoder_prefix"
            start = time.perf_counter()
            try:
                return method(self, *args, **kwargs)
            finally:
                spent[label] = spent.get(label, 0.0) + time.perf_counter() - start
        return run

    for name in ("encode", "cross_kv", "decoder_positions"):
        setattr(MtTransformer, name, timed(name, getattr(MtTransformer, name)))
    return spent


if __name__ == "__main__":
    sys.exit(main())
