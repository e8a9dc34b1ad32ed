"""The adaptive policy's decoding as the simultrans job runs it (the wait-k model, shards of 100 sentences, one
thread each, every chunk method at every threshold), by whichever `specbench` is on the path, for comparing
two versions of the search side by side: seconds, BLEU and latency (`simultrans.experiment.score`) and each
configuration's outputs' digest (tokens and delays). Run it once with the version before a change and once
after (PYTHONPATH=<checkout>/platform), on the same machine.

    python scripts/adaptive_before_after.py [--splits test_2016_flickr,...] [--thresholds 0.3,0.5,0.7,0.9]
        [--beam 7] [--window 2] [--summed-ranking] [--sentences N] [--label TEXT] [--output FILE]
        [--before FILE [--after FILE]] [--profile]

With `--profile`, each entry also holds where its seconds went, by the part of the search that ran the
decoder: `decide` (the next token's confidence, READ or WRITE), `greedy_chunk` (the chunk found greedily),
`chunk_search` (beam search over the chunk and its window), `cache_rebuild` (a committed chunk decoded again
into the row's cache, where a version does that) and `other` (search bookkeeping, scoring). With `--before
FILE` (this script's output for the other version), the output also holds that report and, per
configuration, the seconds before over after and whether the outputs are the same; `--after FILE` takes this
version's report from a file too (two versions run at once, side by side, then compared).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

from test_time_wait_k_before_after import one_key_a_line

ROOT = Path(__file__).resolve().parents[1]
SHARD = 100  # the job's shard_size
SEARCH_PARTS = {"adaptive": "decide", "_greedy_chunk": "greedy_chunk", "beam_steps": "chunk_search",
                "_extend": "chunk_search", "_write_chunks": "cache_rebuild"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", default="test_2016_flickr,test_2017_flickr,test_2017_mscoco,test_2018_flickr")
    parser.add_argument("--thresholds", default="0.3,0.5,0.7,0.9")
    parser.add_argument("--beam", type=int, default=7)
    parser.add_argument("--window", type=int, default=2)
    parser.add_argument("--summed-ranking", action="store_true", help="rank speculations by the summed score")
    parser.add_argument("--sentences", type=int, default=0, help="the first N of each set (0: all)")
    parser.add_argument("--label", default="")
    parser.add_argument("--output", type=Path, default=None)
    parser.add_argument("--before", type=Path, default=None, help="this script's output for the other version")
    parser.add_argument("--profile", action="store_true", help="time the decoder per part of the search")
    parser.add_argument("--after", type=Path, default=None,
                        help="with --before: this script's output for this version, read instead of decoding")
    args = parser.parse_args()
    before = _compact(json.loads(args.before.read_text())) if args.before else None
    report = _compact(json.loads(args.after.read_text()) if args.after else _decode(args))
    if before is not None:
        report["before"] = before
        pairs = [(key, before["sets"][key], entry) for key, entry in report["sets"].items() if key in before["sets"]]
        report["seconds_before_over_after"] = {key: round(old["seconds"] / max(new["seconds"], 0.01), 2)
                                               for key, old, new in pairs}
        report["total_before_over_after"] = round(before["total_seconds"] / report["total_seconds"], 2)
        report["changed_outputs"] = [key for key, old, new in pairs if old["outputs_sha256"] != new["outputs_sha256"]]
    text = one_key_a_line(report)
    if args.output:
        args.output.write_text(text)
    print(text, end="")
    return 0


def _decode(args: argparse.Namespace) -> dict:
    """Decode every configuration with the `specbench` on the path; the report without comparison."""
    import torch

    import specbench
    from specbench.data.multi30k import read_pairs
    from specbench.simultrans.experiment import Method, Shard, decode_shard, model_for, score

    torch.set_num_threads(1)
    spent = _time_decoder_by_search_part() if args.profile else None
    bpe, path = str(ROOT / "models" / "mt_bpe.model"), str(ROOT / "models" / "mt_waitk.pt")
    tok = model_for(path, bpe).tokenizer
    report = {"label": args.label, "specbench": str(Path(specbench.__file__).parent), "model": "mt_waitk.pt",
              "beam": args.beam, "window": args.window, "length_normalized": not args.summed_ranking,
              "shard_sentences": SHARD, "torch_threads": 1, "sentences": {}, "sets": {}}
    total = 0.0
    for split in args.splits.split(","):
        pairs = read_pairs(split)
        pairs = pairs[:args.sentences] if args.sentences else pairs
        sources, refs = [s for s, _ in pairs], [t for _, t in pairs]
        ref_tokens = [len(tok.encode(t)) for t in refs]
        for search in ("greedy", "beam", "sbs"):
            for threshold in (float(t) for t in args.thresholds.split(",")):
                method = Method("adaptive", path, search=search, threshold=threshold,
                                beam=args.beam if search != "greedy" else 1,
                                window=args.window if search == "sbs" else 0,
                                length_normalized=not args.summed_ranking)
                if spent is not None:
                    spent.clear()
                start = time.perf_counter()
                rows = [row for i in range(0, len(sources), SHARD)
                        for row in decode_shard(Shard(method, bpe, sources[i:i + SHARD]))]
                seconds = time.perf_counter() - start
                total += seconds
                scored = score(rows, refs, ref_tokens)
                digest = hashlib.sha256("\n".join(f"{r['hypothesis']}\t{r['delays']}" for r in rows)
                                        .encode()).hexdigest()[:16]
                report["sentences"][split] = len(rows)
                entry = {"bleu": round(scored["bleu"], 2), "laal_words": round(scored["laal_words"], 3),
                         "seconds": round(seconds, 2), "outputs_sha256": digest}
                if spent is not None:
                    entry["profile_seconds"] = {**dict(sorted(spent.items())), "other": seconds - sum(spent.values())}
                report["sets"][f"{split}/{search}/{threshold:g}"] = entry
                print(split, search, threshold, entry, file=sys.stderr, flush=True)
    report["total_seconds"] = round(total, 1)
    return report


def _compact(report: dict) -> dict:
    """The report as the results file keeps it: per configuration BLEU, LAAL, seconds, the outputs' digest and
    the profile to 0.1 s, and each part's total over all configurations (`profile_totals_seconds`)."""
    sets = {key: {k: v for k, v in entry.items() if k in ("bleu", "laal_words", "seconds", "outputs_sha256")}
            | ({"profile_seconds": {part: round(s, 1) for part, s in entry["profile_seconds"].items()}}
               if "profile_seconds" in entry else {})
            for key, entry in report["sets"].items()}
    totals: dict[str, float] = {}
    for entry in report["sets"].values():  # summed before rounding (a compact report keeps its own)
        for part, seconds in entry.get("profile_seconds", {}).items():
            totals[part] = totals.get(part, 0.0) + seconds
    sentences = report.get("sentences") or {key.split("/")[0]: entry["sentences"]
                                            for key, entry in report["sets"].items()}
    totals_kept = report.get("profile_totals_seconds") or \
        {part: round(s, 1) for part, s in sorted(totals.items())}
    return {**{k: v for k, v in report.items() if k not in ("sets", "sentences", "profile_totals_seconds")},
            "sentences": sentences, "sets": sets, **({"profile_totals_seconds": totals_kept} if totals_kept else {})}


def _time_decoder_by_search_part() -> dict[str, float]:
    """Wrap the decoder's pass with a timer that books its seconds to the part of the search that called it
    (the nearest caller named in SEARCH_PARTS); returns the seconds per part (clear it to start again)."""
    from specbench.simultrans.model import MtTransformer

    spent: dict[str, float] = {}
    passes = MtTransformer.decoder_positions

    def timed(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        frame, part = sys._getframe(1), "elsewhere"
        while frame is not None:
            if frame.f_code.co_name in SEARCH_PARTS:
                part = SEARCH_PARTS[frame.f_code.co_name]
                break
            frame = frame.f_back
        start = time.perf_counter()
        try:
            return passes(self, *args, **kwargs)
        finally:
            spent[part] = spent.get(part, 0.0) + time.perf_counter() - start

    MtTransformer.decoder_positions = timed
    return spent


if __name__ == "__main__":
    sys.exit(main())
