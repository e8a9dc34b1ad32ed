"""How often the old partial-hypothesis rule dropped a last word that is complete
(benchmarks/results/partial_last_word_cpu.json).

Until metrics version 4 of the predictive job, `traceback.partial_words` kept a partial path's last word
only when the path's graph state had a finite final weight (the "shipped" rule of the results file, which
was measured before the change). The graph's G (arpa2fst) gives a final weight only to histories with an
explicit `</s>` n-gram; every other word end reaches a final state through back-off epsilon arcs. So a word
whose last token had been emitted was dropped from the partial unless its history may end the sentence
outright. This script decodes held-out test scores with the CPU decoder at the predictive job's search
settings and partial period (`[asr]` of jobs/predictive_asr.toml: beam, max_active, acoustic_scale,
partial_every_ms), and compares for each partial the old rule with the current one
(`traceback.word_end_states`: the last word is kept when a final state is reachable from the path's state
through epsilon arcs that put out no word, back-off and disambiguation arcs). For the partials where the two
differ it counts how often the longer partial is a prefix of the utterance's final hypothesis (the kept
word is the one the decoder settles on). The partial paths are read through
`specbench.decoder.cpu.partial_words`, wrapped to record its inputs; what the decoder returns is unchanged.

    python scripts/partial_last_word.py [--scores .specbench/scores/am_slurp/test.parquet] [--utterances N]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "platform"))
sys.path.insert(0, str(ROOT / "scripts"))

from results_file import rounded, write_results  # noqa: E402

from specbench.acoustic.inference import OUTPUT_FRAME_SHIFT_MS  # noqa: E402
from specbench.config import GraphConfig  # noqa: E402
from specbench.data.scores import iter_rows, read_parquet_table  # noqa: E402
from specbench.decoder import cpu as cpu_decoder  # noqa: E402
from specbench.decoder.backends import make_decoder  # noqa: E402
from specbench.decoder.options import SearchOptions  # noqa: E402
from specbench.decoder.traceback import word_end_states  # noqa: E402
from specbench.experiments.graph_recipe import build_graph  # noqa: E402
from specbench.experiments.job_refs import referenced_job  # noqa: E402
from specbench.experiments.registry import load_config  # noqa: E402
from specbench.hardware import describe  # noqa: E402
from specbench.paths import work_dir  # noqa: E402
from specbench.tracking.runs import git_commit  # noqa: E402
from specbench.wfst.graph import read_graph  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", type=Path, default=ROOT / "jobs" / "predictive_asr.toml",
                        help="the predictive job whose [asr] search settings and graph are used")
    parser.add_argument("--scores", type=Path, default=work_dir() / "scores" / "am_slurp" / "test.parquet")
    parser.add_argument("--utterances", type=int, default=0, help="the first N (0: all)")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "partial_last_word_cpu.json")
    args = parser.parse_args()
    if not args.scores.is_file():
        raise SystemExit(f"{args.scores}: no such file. Fix: run `specbench run jobs/am_eval.toml` (it writes the "
                         "held-out test scores), or pass --scores")
    start = time.perf_counter()
    asr = load_config(args.job).asr
    artifacts = build_graph(referenced_job(args.job, "graph_job", Path(asr.graph_job), GraphConfig))
    every = asr.partial_every_ms / OUTPUT_FRAME_SHIFT_MS
    if every != int(every):
        raise SystemExit(f"{args.job}: [asr] partial_every_ms = {asr.partial_every_ms:g} is not a whole number of "
                         f"{OUTPUT_FRAME_SHIFT_MS:g} ms frames. Fix: a multiple of {OUTPUT_FRAME_SHIFT_MS:g}")
    graph = read_graph(artifacts.tlg)
    finite = np.isfinite(graph.final)
    reach = word_end_states(graph)
    seen: list[tuple[tuple[int, ...], int]] = []
    shipped = cpu_decoder.partial_words

    def recording(word_ids, last_state, final):  # the shipped rule, its inputs recorded
        seen.append((tuple(word_ids), int(last_state)))
        return shipped(word_ids, last_state, final)

    cpu_decoder.partial_words = recording
    items = [(u, m) for u, m, _ in iter_rows(read_parquet_table(args.scores), str(args.scores))]
    items = items[:args.utterances] if args.utterances else items
    options = SearchOptions(beam=asr.beam, max_active=asr.max_active, acoustic_scale=asr.acoustic_scale)
    decoder = make_decoder("cpu", graph, options)
    counts = dict.fromkeys(("utterances", "partials", "partials_with_words", "shipped_keeps_last",
                            "epsilon_rule_keeps_last", "rules_differ", "differing_longer_is_prefix_of_final",
                            "shipped_is_prefix_of_final", "epsilon_rule_is_prefix_of_final"), 0)
    for utt_id, scores in items:
        seen.clear()
        result = decoder.decode(scores, utt_id, partial_every=int(every))
        if not result.ok:
            continue
        final = tuple(result.word_ids)
        counts["utterances"] += 1
        counts["partials"] += len(seen)
        for words, state in seen:
            if not words:
                continue
            kept = words if finite[state] else words[:-1]
            by_eps = words if reach[state] else words[:-1]
            counts["partials_with_words"] += 1
            counts["shipped_keeps_last"] += kept == words
            counts["epsilon_rule_keeps_last"] += by_eps == words
            counts["shipped_is_prefix_of_final"] += final[:len(kept)] == kept
            counts["epsilon_rule_is_prefix_of_final"] += final[:len(by_eps)] == by_eps
            if kept != by_eps:
                counts["rules_differ"] += 1
                counts["differing_longer_is_prefix_of_final"] += final[:len(by_eps)] == by_eps
    cpu_decoder.partial_words = shipped
    with_words = max(counts["partials_with_words"], 1)
    result = {
        "script": "scripts/partial_last_word.py", "command": "python scripts/partial_last_word.py",
        "hardware": describe(), "git_commit": git_commit(ROOT), "wall_minutes": (time.perf_counter() - start) / 60,
        "graph": artifacts.directory.name, "scores": str(args.scores.relative_to(work_dir().parent))
        if args.scores.is_relative_to(work_dir().parent) else str(args.scores),
        "job": str(args.job.resolve().relative_to(ROOT)) if args.job.resolve().is_relative_to(ROOT) else str(args.job),
        "search": {"beam": asr.beam, "max_active": asr.max_active, "acoustic_scale": asr.acoustic_scale,
                   "partial_every_ms": asr.partial_every_ms, "partial_every_frames": int(every)},
        "graph_states": graph.num_states, "final_states": int(finite.sum()),
        "states_final_only_through_wordless_epsilons": int((reach & ~finite).sum()),
        "counts": counts,
        "shares_of_partials_with_words": {
            "shipped_keeps_last": counts["shipped_keeps_last"] / with_words,
            "epsilon_rule_keeps_last": counts["epsilon_rule_keeps_last"] / with_words,
            "rules_differ": counts["rules_differ"] / with_words,
            "dropped_word_confirmed_by_final": counts["differing_longer_is_prefix_of_final"] / with_words},
        "share_of_differing_partials_whose_longer_partial_is_a_prefix_of_final": (
            counts["differing_longer_is_prefix_of_final"] / max(counts["rules_differ"], 1)),
    }
    write_results(args.output, rounded(result))
    print(result["shares_of_partials_with_words"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
