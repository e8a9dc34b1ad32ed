"""Write the out-of-vocabulary rates of the real-speech job's recorded sets against the Sphinx graphs
(benchmarks/results/real_speech_oov_cpu.json): per set, the share of the usable utterances' reference words
that each graph cannot put out, as the job logs them (`asr.real.oov_rate.<set>`), and the same for the few
clips the quick job (jobs/real_speech_quick.toml) samples, over its graph. Builds the graphs if they
are not built yet (jobs/graph_sphinx.toml: 4.6 minutes on 2 cores when last built, 6.7 before).

    python scripts/write_real_speech_oov.py [--output FILE]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "platform"))

from specbench.config import GraphConfig
from specbench.experiments.graph_recipe import build_graph
from specbench.experiments.job_refs import referenced_job
from specbench.experiments.real_speech.audio import STATUS_OK, gather
from specbench.experiments.real_speech.job import oov_rates, set_groups
from specbench.experiments.registry import load_config
from specbench.paths import work_dir
from specbench.text_files import json_text

SETS = ("asterisk", "librivox", "cards", "recordings")
GRAPH_JOBS = ("graph_sphinx.toml", "graph_sphinx_quick.toml")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "real_speech_oov_cpu.json")
    args = parser.parse_args()
    rows = [u for u in gather(SETS, 0, work_dir() / "real_speech" / "audio") if u.status == STATUS_OK]
    groups = set_groups(rows)
    graphs = {}
    for job in GRAPH_JOBS:
        graph = build_graph(referenced_job(ROOT / "jobs" / "real_speech.toml", "graph_job", Path(job), GraphConfig))
        graphs[f"jobs/{job}"] = {"directory": graph.directory.name,
                                 "oov_rate": {g: round(r, 4) for g, r in oov_rates(rows, graph).items()}}
    quick = load_config(ROOT / "jobs" / "real_speech_quick.toml")
    sample = gather(quick.sets, quick.max_per_set, work_dir() / "real_speech" / "audio", quick.sample_min_words)
    sample = [u for u in sample if u.status == STATUS_OK]
    quick_graph = build_graph(referenced_job(ROOT / "jobs" / "real_speech_quick.toml", "graph_job",
                                             Path(quick.graph_job), GraphConfig))
    quick_sample = {"job": "jobs/real_speech_quick.toml", "graph": quick_graph.directory.name,
                    "utterances": {g: [u.utt_id for u in m] for g, m in sorted(set_groups(sample).items())},
                    "oov_rate": {g: round(r, 4) for g, r in oov_rates(sample, quick_graph).items()}}
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    result = {"command": "python scripts/write_real_speech_oov.py", "git_commit": commit,
              "conditions": "the usable utterances of every recorded set (flagged rows left out, as the job "
                            "leaves them out); reference words normalized as the job normalizes them, the "
                            "graph's word symbols spelled the same way",
              "utterances": {g: len(m) for g, m in sorted(groups.items())},
              "reference_words": {g: sum(len(u.text.split()) for u in m) for g, m in sorted(groups.items())},
              "graphs": graphs, "quick_job_sample": quick_sample}
    args.output.write_text(json_text(result, indent=1) + "\n")
    print(json_text({"graphs": graphs, "quick_job_sample": quick_sample}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
