"""Translation checkpoints side by side on Multi30k val: sacreBLEU of greedy wait-k at several k, and of SBS
at one k (wait-k models), or of full-sentence greedy and beam search (full-sentence models). For choosing
among trained candidates on val, where devel loss and BLEU disagree.

Usage: `python scripts/compare_mt_models.py CKPT [CKPT ...] [--sentences N] [--ks 1 3 5 7 9] [--sbs-k 3]
[--beam 5] [--window 2] [--output FILE.json]`; prints one JSON object per checkpoint.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "platform") not in sys.path:
    sys.path.insert(0, str(ROOT / "platform"))


def main(argv: list[str] | None = None) -> int:
    import sacrebleu
    import torch

    from specbench.data.multi30k import read_pairs
    from specbench.simultrans.checkpoint import load_mt
    from specbench.simultrans.search import full_sentence, wait_k
    from specbench.simultrans.tokenizer import EOS
    from specbench.text_files import json_text

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoints", nargs="+", type=Path)
    parser.add_argument("--bpe", type=Path, default=ROOT / "models" / "mt_bpe.model")
    parser.add_argument("--sentences", type=int, default=1014, help="the first N val sentences")
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 3, 5, 7, 9])
    parser.add_argument("--sbs-k", type=int, default=3)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--window", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    pairs = read_pairs("val")[:args.sentences]
    refs = [t for _, t in pairs]
    results = []
    for path in args.checkpoints:
        ckpt = load_mt(path, args.bpe)
        sources = [ckpt.tokenizer.encode(s) + [EOS] for s, _ in pairs]

        def bleu(decode) -> float:  # noqa: ANN001
            hyps = []
            for i in range(0, len(sources), 100):
                hyps += [ckpt.tokenizer.decode(t.tokens) for t in decode(sources[i:i + 100])]
            return round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2)

        start = time.monotonic()
        row: dict = {"checkpoint": str(path), "sentences": len(pairs),
                     "best_devel_loss": ckpt.metadata.get("devel_loss")}
        if ckpt.model.config.causal_encoder:
            row["greedy"] = {k: bleu(lambda s, k=k: wait_k(ckpt.model, s, k)) for k in args.ks}
            row["greedy_mean"] = round(sum(row["greedy"].values()) / len(args.ks), 2)
            row[f"sbs_k{args.sbs_k}_b{args.beam}w{args.window}"] = bleu(
                lambda s: wait_k(ckpt.model, s, args.sbs_k, "sbs", args.beam, args.window))
        else:
            row["full_greedy"] = bleu(lambda s: full_sentence(ckpt.model, s))
            row[f"full_beam{args.beam}"] = bleu(lambda s: full_sentence(ckpt.model, s, args.beam))
            row[f"test_time_wait{args.sbs_k}_greedy"] = bleu(lambda s: wait_k(ckpt.model, s, args.sbs_k))
        row["seconds"] = round(time.monotonic() - start, 1)
        print(json_text(row), flush=True)
        results.append(row)
    if args.output:
        args.output.write_text(json_text(results, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
