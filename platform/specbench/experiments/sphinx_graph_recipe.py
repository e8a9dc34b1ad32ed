"""Build the HCLG of CMU Sphinx's en-us acoustic model (`recipe = "sphinx_hclg"` in a `graph` job).

Inputs, all from the pocketsphinx package (PyPI, BSD-2): the model (`en-us/en-us`: mdef, transition
matrices, noisedict), its dictionary (`cmudict-en-us.dict`) and its general English trigram
(`en-us.lm.bin`, read by `wfst.sphinx_lm`). The trigram is pruned by relative entropy (`[sphinx]
prune_threshold`, Stolcke 1998, `wfst.arpa_prune`), optionally restricted to its most probable words
(`vocabulary`, for quick graphs), and compiled with `wfst.hclg` as Kaldi's `mkgraph.sh` does.

The output directory `.specbench/graphs/<name>-<hash>/` is keyed like the TLG's (config, source of the
modules that build it, package versions) and written under a temporary name first. Files: `HCLG.fst`
(const; input label j = senone j - 1), `G.fst`, `lm.arpa` (the pruned LM), `words.txt`, `phones.txt`,
`stats.json`. No LM is trained or tuned on the recorded speech; its transcripts only measure perplexity.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import resource
import sys
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from specbench.code_digest import code_digest
from specbench.config import GraphConfig, settings_dict
from specbench.data import recorded_speech
from specbench.errors import DataError, ToolError
from specbench.text_files import json_number
from specbench.wfst import arpa as arpa_mod
from specbench.wfst import (
    arpa_prune,
    compose,
    fst_binary,
    graph,
    hclg,
    hmm_transducer,
    lexicon,
    ngram_arrays,
    reweight,
    sphinx_lexicon,
    sphinx_lm,
    sphinx_mdef,
    symbols,
    topology,
)
from specbench.wfst.lexicon import read_cmudict
from specbench.wfst.symbols import SymbolTable, word_table

RECIPE_VERSION = 1
# every specbench.wfst module the build imports, directly or through another (a test walks the imports)
_SOURCES = (arpa_mod, arpa_prune, compose, fst_binary, graph, hclg, hmm_transducer, lexicon, ngram_arrays, reweight,
            sphinx_lexicon, sphinx_lm, sphinx_mdef, symbols, topology)
_PACKAGES = ("kaldifst", "kaldilm", "pocketsphinx")
_MARKERS = {"<s>", "</s>", "<unk>"}


def sphinx_model_dir() -> Path:
    """pocketsphinx's `model/en-us` folder (the acoustic model, dictionary and LM)."""
    try:
        import pocketsphinx
    except ImportError as err:
        raise ToolError("the sphinx_hclg recipe needs pocketsphinx. Fix: pip install -e . (pyproject pins "
                        "pocketsphinx==5.1.1)") from err
    return Path(pocketsphinx.get_model_path()) / "en-us"


@dataclass(frozen=True)
class SphinxGraphStats:
    """What `stats.json` holds for an HCLG; logged to MLflow as `graph.*` metrics."""

    states: int
    arcs: int
    epsilon_arcs: int
    vocabulary: int
    lexicon_prons: int
    words_without_pronunciation: int
    ngrams_before: tuple[int, ...]
    ngrams: tuple[int, ...]
    kept_as_context: tuple[int, ...]
    context_windows: int
    context_windows_backed_off: int
    entry_labels: int
    ppl_asterisk: float
    ppl_librivox: float
    oov_rate_asterisk: float
    oov_rate_librivox: float
    stage_seconds: dict[str, float]
    build_seconds: float
    peak_rss_gb: float

    def metrics(self) -> dict[str, float]:
        out = {k: float(v) for k, v in asdict(self).items() if isinstance(v, (int, float))}
        out.update({f"ngrams_order{n}": float(c) for n, c in enumerate(self.ngrams, 1)})
        out.update({f"ngrams_before_order{n}": float(c) for n, c in enumerate(self.ngrams_before, 1)})
        out.update({f"stage_seconds.{k}": v for k, v in self.stage_seconds.items()})
        return out


def inputs_hash(config: GraphConfig) -> str:
    h = hashlib.sha256()
    h.update(json.dumps({"recipe": RECIPE_VERSION, "config": settings_dict(config)}, sort_keys=True).encode())
    h.update(code_digest(module.__file__ for module in (*_SOURCES, sys.modules[__name__])).encode())
    h.update(json.dumps({p: importlib.metadata.version(p) for p in _PACKAGES}, sort_keys=True).encode())
    return h.hexdigest()


def verify(directory: Path) -> None:
    """Check a cached HCLG before reuse (the FST and symbol tables are there and read); DataError naming the
    file and the fix otherwise."""
    missing = [name for name in ("HCLG.fst", "G.fst", "lm.arpa", "words.txt", "phones.txt")  # the job reads lm.arpa
               if not (directory / name).is_file()]
    if missing:
        raise DataError(f"{directory}: this cached graph lacks {', '.join(missing)} (removed since it was built, or "
                        f"a copy in part). {lexicon.REBUILD_FIX}")
    graph.read_graph(directory / "HCLG.fst")
    for name in ("words.txt", "phones.txt"):
        SymbolTable.read(directory / name)


def load_stats(directory: Path) -> SphinxGraphStats:
    path = directory / "stats.json"
    try:
        data = json.loads(path.read_text())
        for key in ("ngrams_before", "ngrams", "kept_as_context"):
            data[key] = tuple(data[key])
        data |= {f.name: json_number(data[f.name]) for f in fields(SphinxGraphStats) if f.type == "float"}
        return SphinxGraphStats(**data)
    except (OSError, ValueError, TypeError, KeyError) as err:
        raise DataError(f"{path}: not the statistics of an HCLG built by this version ({err}). Fix: "
                        "`specbench graph build JOB.toml --force`.") from err


def eval_sentences(utterances: list[recorded_speech.RecordedUtterance]) -> dict[str, list[list[str]]]:
    """The words of each usable (status `ok`) Asterisk and LibriVox transcript, by set."""
    ok = [u for u in utterances if u.status == recorded_speech.STATUS_OK]
    return {name: [u.text.split() for u in ok if u.set == name] for name in ("asterisk", "librivox")}


def _eval_texts() -> dict[str, list[list[str]]]:
    """The recorded sets' transcripts (words), only to measure the LM; empty when not installed."""
    try:
        return eval_sentences(recorded_speech.asterisk_prompts() + recorded_speech.sphinx_testdata())
    except ToolError:
        return {"asterisk": [], "librivox": []}


def _perplexity(model: arpa_mod.ArpaModel, sentences: list[list[str]]) -> tuple[float, float]:
    """Perplexity (`ArpaModel.perplexity`: the LM has no `<unk>`, so OOV words are left out and the next
    word's context starts after one, as KenLM's) and OOV rate."""
    tokens = [w for s in sentences for w in s]
    if not tokens:
        return float("nan"), float("nan")
    vocab = model.vocabulary
    return model.perplexity(sentences), sum(w not in vocab for w in tokens) / len(tokens)


def pruned_lm(config: GraphConfig, step) -> tuple[arpa_mod.ArpaModel, tuple[int, ...], arpa_prune.PruneReport]:
    """The graph's LM (`lm.arpa`): pocketsphinx's en-us trigram, restricted to `[sphinx] vocabulary` words
    when set, then pruned at `[sphinx] prune_threshold`; with the n-gram counts before pruning and the report."""
    settings = config.sphinx
    step("reading pocketsphinx's en-us trigram")
    full = sphinx_lm.read_sphinx_lm(sphinx_model_dir() / "en-us.lm.bin", top_words=settings.vocabulary)
    before = tuple(full.counts)  # with a vocabulary limit: the n-grams over those words
    if settings.vocabulary:
        step(f"restricting the LM to its {settings.vocabulary:,} most probable words")
        full = arpa_prune.restrict_vocabulary(full, settings.vocabulary)
    step(f"pruning the LM (relative entropy, threshold {settings.prune_threshold:g})")
    pruned, report = arpa_prune.prune(full, settings.prune_threshold)
    return pruned, before, report


def build_into(config: GraphConfig, out: Path, step) -> SphinxGraphStats:
    """Build the HCLG of `config` into `out` (see the module docstring)."""
    settings = config.sphinx
    start = time.perf_counter()
    root = sphinx_model_dir()
    model = sphinx_mdef.read_mdef(root / "en-us" / "mdef")
    tmat = sphinx_mdef.read_transition_matrices(root / "en-us" / "transition_matrices")
    pruned, before, report = pruned_lm(config, step)
    arpa_mod.write_arpa(pruned, out / "lm.arpa")
    texts = _eval_texts()
    (ppl_a, oov_a), (ppl_l, oov_l) = _perplexity(pruned, texts["asterisk"]), _perplexity(pruned, texts["librivox"])
    vocab = sorted(w for (w,) in pruned.ngrams[0] if w not in _MARKERS)
    del pruned
    words = word_table(vocab)
    words.write(out / "words.txt")
    compose.arpa_to_g(out / "lm.arpa", out / "words.txt", out / "G.fst")
    dictionary = read_cmudict(root / "cmudict-en-us.dict")
    prons = {w: dictionary[w] for w in vocab if w in dictionary}
    noises = sorted(set(sphinx_lexicon.read_noise_dict(root / "en-us" / "noisedict").values()) - {"SIL"})
    base = [p for i, p in enumerate(model.ci_phones) if i not in model.fillers]
    lexicon = sphinx_lexicon.lexicon_graph(prons, words, base, model.ci_phones[model.silence], noises,
                                           settings.silence_prob, settings.noise_share)
    lexicon.phones.write(out / "phones.txt")
    built, stages, _ = hclg.compose_hclg(lexicon, out / "G.fst", model, tmat, out, settings.self_loop_scale, step)
    return SphinxGraphStats(
        states=built.num_states, arcs=built.num_arcs, epsilon_arcs=built.num_epsilon_arcs, vocabulary=len(vocab),
        lexicon_prons=lexicon.prons, words_without_pronunciation=len(vocab) - len(prons), ngrams_before=before,
        ngrams=tuple(report.after), kept_as_context=tuple(report.kept_as_context),
        context_windows=stages.windows, context_windows_backed_off=stages.windows_backed_off,
        entry_labels=stages.entry_labels, ppl_asterisk=ppl_a, ppl_librivox=ppl_l, oov_rate_asterisk=oov_a,
        oov_rate_librivox=oov_l, stage_seconds={k: v[0] for k, v in stages.stages.items()},
        build_seconds=time.perf_counter() - start,
        peak_rss_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6)
