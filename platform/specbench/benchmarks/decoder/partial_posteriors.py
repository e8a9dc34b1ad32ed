"""What partial word posteriors cost the compiled CPU backend: the predictive-ASR job's `asr.partial_posteriors`,
measured side by side on the benchmark's workload.

Four configurations decode every utterance with partial hypotheses every `every_ms` (the job's 120 ms), one
after the other in `rounds` alternating rounds, each decoder built and warmed once, so that a busy machine
slows them alike:

- `partials`: the 1-best with partials (the job without posteriors);
- `partials_lattice`: the same with the final lattice at the benchmark's lattice beam;
- `partial_lattices`: each partial also with the lattice of the audio so far (`SearchOptions.partial_lattices`);
- `partial_posteriors`: that, plus each partial's word posteriors (`decoder.word_confidence`, as
  `DecoderStage(partial_posterior_scale=...)` computes them): what the job pays.

Reported: each configuration's seconds per round, the median ratios to `partials`
(`decoder.partial_lattice_overhead_median` for `partial_lattices`, `decoder.partial_posterior_overhead_median`
for `partial_posteriors`, `partials_lattice_overhead_median` for the final lattice alone), where the
posterior configuration's time goes (decoding against posteriors, first round), and the share of partials
whose posteriors are undefined.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import replace

from specbench.benchmarks import harness
from specbench.benchmarks.decoder.backends import one_best, with_lattice
from specbench.benchmarks.decoder.workloads import Workload
from specbench.decoder.backends import make_decoder
from specbench.decoder.options import SearchOptions
from specbench.decoder.word_confidence import word_posteriors

CPU_PARTIAL_POSTERIORS = "cpu_partial_posteriors"
CONFIGURATIONS = ("partials", "partials_lattice", "partial_lattices", "partial_posteriors")


def partial_posterior_cost(workload: Workload, options: SearchOptions, rounds: int, every_ms: float = 120.0,
                           posterior_scale: float = 0.5) -> dict[str, object]:
    """The four configurations of the module docstring over the workload, `rounds` alternating rounds."""
    every = max(1, round(every_ms / workload.frame_shift_ms))
    lattice = with_lattice(options)
    settings = {"partials": one_best(options), "partials_lattice": lattice,
                "partial_lattices": replace(lattice, partial_lattices=True)}
    settings["partial_posteriors"] = settings["partial_lattices"]
    decoders = {name: make_decoder("cpu", workload.graph, opts) for name, opts in settings.items()}
    items = workload.items
    counts = {"partials": 0, "undefined": 0}
    split = {"decode": 0.0, "posteriors": 0.0}

    def run(name: str, first_round: bool) -> None:
        decoder = decoders[name]
        for utt_id, mat in items:
            start = time.perf_counter()
            result = decoder.decode(mat, utt_id, partial_every=every)
            if name != "partial_posteriors":
                continue
            decoded = time.perf_counter()
            for partial in result.partials:
                post = word_posteriors(partial.lattice, posterior_scale)
                if first_round:
                    counts["partials"] += 1
                    counts["undefined"] += not (post.ok and post.word_ids[:len(partial.word_ids)] == partial.word_ids)
            if first_round:
                split["decode"] += decoded - start
                split["posteriors"] += time.perf_counter() - decoded

    for name in CONFIGURATIONS:  # warm-up: the compiled loops, and the posterior loops' numba cache
        decoders[name].decode(items[0][1], items[0][0], partial_every=every)
    word_posteriors(decoders["partial_lattices"].decode(items[0][1], items[0][0], partial_every=every).lattice,
                    posterior_scale)
    seconds: dict[str, list[float]] = {name: [] for name in CONFIGURATIONS}
    for index in range(rounds):
        for name in CONFIGURATIONS:
            took, _ = harness.timed(lambda n=name, i=index: run(n, i == 0))
            seconds[name].append(took)
    out: dict[str, object] = {"partial_posteriors_every_frames": every, "partial_posteriors_scale": posterior_scale,
                              "partial_posteriors_seconds_rounds": seconds,
                              "partial_posteriors_profile_seconds": dict(split),
                              "partial_posteriors_partials": counts["partials"],
                              "partial_posteriors_undefined_share": counts["undefined"] / max(counts["partials"], 1)}
    for name, metric in (("partials_lattice", "partials_lattice_overhead_median"),
                         ("partial_lattices", "decoder.partial_lattice_overhead_median"),
                         ("partial_posteriors", "decoder.partial_posterior_overhead_median")):
        out[metric] = statistics.median(a / b for a, b in zip(seconds[name], seconds["partials"], strict=True))
    harness.say("decoder", f"partial posteriors: {out['decoder.partial_posterior_overhead_median']:.2f}x the time of "
                f"partials alone (partial lattices {out['decoder.partial_lattice_overhead_median']:.2f}x, final "
                f"lattice {out['partials_lattice_overhead_median']:.2f}x)")
    return out
