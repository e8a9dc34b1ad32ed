"""Build the SLURP decoding graph: normalized text -> lexicon -> trigram LM -> L, G, T -> TLG (a job with
`recipe = "sphinx_hclg"` builds the Sphinx model's HCLG instead: `sphinx_graph_recipe`).

The output directory `.specbench/graphs/<name>-<hash>/` is keyed by the hash of everything that decides its
contents (the config, the data files, the source of the modules that build it), written under a temporary
name and renamed only when complete, so a half-built graph is never taken for a finished one and a rerun
reuses a graph only when its inputs match.

Files: `TLG.fst` (const), `G.fst`, `L_disambig.fst`, `words.txt`, `tokens.txt`, `lexicon.txt`, `lm.arpa`
(the ARPA with the unknown-word mass spread), `lm.raw.arpa` (lmplz's output), `train.txt` (the LM
text), `stats.json`.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np

from specbench.code_digest import code_digest, files_digest
from specbench.config import GraphConfig, settings_dict
from specbench.data import slurp, text_norm
from specbench.data.resolver import data_file
from specbench.errors import ConfigError, DataError
from specbench.experiments import sphinx_graph_recipe
from specbench.experiments.sphinx_graph_recipe import SphinxGraphStats
from specbench.paths import work_dir
from specbench.text_files import json_number, json_text, read_utf8
from specbench.tool_versions import tool_version
from specbench.wfst import arpa as arpa_mod
from specbench.wfst import compose, fst_binary, kenlm_tools, lexicon, symbols, topology
from specbench.wfst import graph as graph_mod
from specbench.wfst.graph import read_graph

RECIPE_VERSION = 2
_SOURCES = (text_norm, slurp, lexicon, topology, symbols, arpa_mod, compose, kenlm_tools, graph_mod, fst_binary)
_PACKAGES = ("kaldifst", "kaldilm")
_DATA = ("slurp/lm.txt.gz", "slurp/devel.jsonl.gz", "slurp/test.jsonl.gz", "cmudict/cmudict.dict")


@dataclass(frozen=True)
class GraphStats:
    """What `stats.json` holds; logged to MLflow as `graph.*` metrics."""

    states: int
    arcs: int
    epsilon_arcs: int
    vocabulary: int
    vocabulary_train: int
    lexicon_prons: int
    lexicon_from_espeak: int
    disambig_symbols: int
    ngrams: tuple[int, ...]
    train_sentences: int
    ppl_devel: float
    ppl_test: float
    ppl_test_kenlm: float
    test_tokens: int
    test_tokens_unseen: int
    build_seconds: float
    devel_tokens_oov: int = 0  # tokens outside the vocabulary, left out of `ppl_*`
    test_tokens_oov: int = 0

    @property
    def test_unseen_rate(self) -> float:
        return self.test_tokens_unseen / max(self.test_tokens, 1)

    def metrics(self) -> dict[str, float]:
        out = {k: float(v) for k, v in asdict(self).items() if not isinstance(v, tuple)}
        out.update({f"ngrams_order{n}": float(c) for n, c in enumerate(self.ngrams, 1)})
        out["test_unseen_rate"] = self.test_unseen_rate
        return out


@dataclass(frozen=True)
class GraphArtifacts:
    """A built graph directory and its statistics."""

    directory: Path
    stats: GraphStats | SphinxGraphStats
    reused: bool

    @property
    def tlg(self) -> Path:
        """The CTC TLG; a graph job of another recipe is a ConfigError naming the fix."""
        if (self.directory / "HCLG.fst").is_file():
            raise ConfigError(f"{self.directory} holds the HCLG of the Sphinx model (recipe \"sphinx_hclg\"); "
                              "this job decodes the project's CTC acoustic model and needs the TLG. Fix: point "
                              "its graph_job at a recipe = \"ctc_tlg\" job such as graph_slurp.toml.")
        return self.directory / "TLG.fst"

    @property
    def fst(self) -> Path:
        """The decoding graph, whichever the recipe: `HCLG.fst` or `TLG.fst`."""
        hclg = self.directory / "HCLG.fst"
        return hclg if hclg.is_file() else self.directory / "TLG.fst"

    @property
    def words(self) -> Path:
        return self.directory / "words.txt"

    def content_digest(self) -> str:
        """sha256 over the built files (not `stats.json`, which holds the build's duration): what caches of
        results computed from this graph key on, so that a graph rebuilt with the same contents under a new
        directory name (its inputs' hash moved, the graph did not) keeps them."""
        return files_digest(self.directory, exclude=UNDIGESTED)

    @property
    def tokens(self) -> Path:
        return self.directory / "tokens.txt"


def inputs_hash(config: GraphConfig) -> str:
    """sha256 over the config, the data files and the code of every module that shapes the graph (read as
    code: an edit to a comment or a docstring keeps the graph, `code_digest`)."""
    settings = settings_dict(config)
    settings["lm"] = {k: v for k, v in settings["lm"].items() if k != "memory"}  # lmplz's sort memory only
    h = hashlib.sha256()
    h.update(json.dumps({"recipe": RECIPE_VERSION, "config": settings}, sort_keys=True).encode())
    for rel in _DATA:
        h.update(rel.encode())
        h.update(data_file(rel).read_bytes())
    h.update(code_digest(module.__file__ for module in (*_SOURCES, sys.modules[__name__])).encode())
    h.update(json.dumps(_tool_versions(), sort_keys=True).encode())
    return h.hexdigest()


def _tool_versions() -> dict[str, str]:
    """Versions of the outside tools that shape the graph (espeak-ng's pronunciations, KenLM, OpenFst)."""
    versions = {name: importlib.metadata.version(name) for name in _PACKAGES}
    versions["kenlm"] = kenlm_tools.KENLM_VERSION
    espeak = tool_version("espeak-ng")  # as the speech corpus's sidecars record it (`data.speech_corpus`)
    versions["espeak-ng"] = "missing" if espeak is None else espeak
    return versions


def graph_dir(config: GraphConfig) -> Path:
    digest = sphinx_graph_recipe.inputs_hash(config) if _is_sphinx(config) else inputs_hash(config)
    return work_dir() / "graphs" / f"{config.name}-{digest[:16]}"


def _is_sphinx(config: GraphConfig) -> bool:
    return config.recipe == "sphinx_hclg"


# The files of a graph directory its content digest leaves out (`GraphArtifacts.content_digest`)
UNDIGESTED = ("stats.json",)
# Every other file the TLG recipe writes (`_build_into`): the reuse check requires exactly these, as the
# content digest covers every file but `UNDIGESTED`
REUSED_FILES = ("TLG.fst", "G.fst", "L_disambig.fst", "lm.arpa", "lm.raw.arpa", "words.txt", "tokens.txt",
                "lexicon.txt", "train.txt")


def verify_graph(directory: Path) -> None:
    """Check a cached graph before reuse: it holds the files of `REUSED_FILES` and no other file the content
    digest would cover, the FSTs parse, the ARPA parses, the symbol tables and the lexicon read, the LM text
    is UTF-8.

    A missing, foreign or damaged file raises `DataError` (`FstFormatError`, `ArpaFormatError`) naming it;
    the fix is `specbench graph build JOB.toml --force`.
    """
    missing = [name for name in REUSED_FILES if not (directory / name).is_file()]
    if missing:
        raise DataError(f"{directory}: this cached graph lacks {', '.join(missing)} (removed since it was built, or "
                        f"a copy in part). {lexicon.REBUILD_FIX}")
    digested = {p.name for p in directory.iterdir() if p.is_file() and p.name not in UNDIGESTED}
    foreign = sorted(digested - set(REUSED_FILES))
    if foreign:
        raise DataError(f"{directory}: this cached graph holds {', '.join(foreign)}, which the recipe does "
                        f"not write (it would change the graph's content digest). {lexicon.REBUILD_FIX}")
    tlg = read_graph(directory / "TLG.fst")
    read_graph(directory / "G.fst")
    arpa_mod.read_arpa(directory / "lm.arpa")
    words = symbols.SymbolTable.read(directory / "words.txt")
    tokens = symbols.SymbolTable.read(directory / "tokens.txt")
    labels = np.concatenate([tlg.emitting.olabel, tlg.epsilon.olabel])
    short = [f"{name} has {len(table)} symbols, but TLG.fst's {side} labels go up to {top}"
             for name, table, side, top in (("words.txt", words, "output", int(labels.max(initial=0))),
                                           ("tokens.txt", tokens, "input", tlg.max_ilabel)) if len(table) <= top]
    short += [f"{name} is empty" for name in ("lexicon.txt", "train.txt") if not (directory / name).stat().st_size]
    if short or not len(words):
        raise DataError(f"{directory}: this cached graph's files do not fit together ("
                        f"{'; '.join(short) or 'words.txt is empty'}). {lexicon.REBUILD_FIX}")
    lexicon.read_lexicon(directory / "lexicon.txt")
    read_utf8(directory / "train.txt", str(directory / "train.txt"), lexicon.REBUILD_FIX)


def load_stats(directory: Path) -> GraphStats:
    """The statistics of a built graph; a damaged or foreign `stats.json` is a DataError with the fix."""
    path = directory / "stats.json"
    try:
        data = json.loads(path.read_text())
        data["ngrams"] = tuple(data["ngrams"])
        data |= {f.name: json_number(data[f.name]) for f in fields(GraphStats) if f.type == "float"}
        return GraphStats(**data)
    except (OSError, ValueError, TypeError, KeyError) as err:
        raise DataError(f"{path}: not the statistics of a graph built by this version ({err}). Fix: "
                        "`specbench graph build JOB.toml --force`.") from err


Step = Callable[[str], None]


def build_graph(config: GraphConfig, step: Step = lambda _: None, force: bool = False) -> GraphArtifacts:
    """Build (or reuse) the graph of `config`; `step(name)` is called as each stage starts."""
    final = graph_dir(config)
    sphinx = _is_sphinx(config)
    if (final / "stats.json").is_file() and not force:
        (sphinx_graph_recipe.verify if sphinx else verify_graph)(final)
        return GraphArtifacts(final, (sphinx_graph_recipe.load_stats if sphinx else load_stats)(final), reused=True)
    remove_abandoned_builds(final)
    tmp, old = (final.with_name(f"{final.name}.{kind}-{socket.gethostname()}-{os.getpid()}")
                for kind in ("partial", "old"))
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        stats = (sphinx_graph_recipe.build_into if sphinx else _build_into)(config, tmp, step)
        (tmp / "stats.json").write_text(json_text(asdict(stats), indent=2))
        if final.exists():  # a forced rebuild: the old graph is renamed aside whole, never seen half deleted
            os.replace(final, old)
        try:
            os.replace(tmp, final)
        except OSError:  # another process put the same graph (the same key) there since: theirs stands
            if not (final / "stats.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    return GraphArtifacts(final, stats, reused=False)


def remove_abandoned_builds(final: Path) -> None:
    """Remove the `<final>.partial-<host>-<pid>` and `<final>.old-<host>-<pid>` folders that builds on this
    host left when killed (their process no longer runs); a running build's folders, and those of builds on
    other hosts (a work directory shared between machines), are left alone."""
    for kind in ("partial", "old"):
        for folder in final.parent.glob(f"{final.name}.{kind}-*"):
            host, _, pid = folder.name.removeprefix(f"{final.name}.{kind}-").rpartition("-")
            if host not in ("", socket.gethostname()) or not pid.isdigit() or int(pid) == os.getpid():
                continue  # "": a folder named before the host was (`partial-<pid>`)
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                shutil.rmtree(folder, ignore_errors=True)
            except (OSError, OverflowError):  # another user's running process, or not a pid
                pass


def texts(config: GraphConfig) -> tuple[list[list[str]], dict[str, list[list[str]]]]:
    """SLURP's training sentences (unique ones with `[lm] deduplicate`) and its devel and test sentences,
    normalized, empty ones left out."""
    train = [text_norm.normalize_words(s) for s in slurp.read_training_text(config.lm.deduplicate)]
    train = [w for w in train if w]
    if config.lm.deduplicate:
        train = [list(t) for t in dict.fromkeys(tuple(w) for w in train)]
    evals = {split: [w for w in (text_norm.normalize_words(u.sentence) for u in slurp.read_split(split)) if w]
             for split in ("devel", "test")}
    return train, evals


def graph_vocabulary(config: GraphConfig, train: list[list[str]], evals: dict[str, list[list[str]]]) -> set[str]:
    """The graph's words: the training text's and those of the `[lm] extra_vocabulary` splits."""
    vocab = {w for s in train for w in s}
    for split in config.lm.extra_vocabulary:
        vocab.update(w for s in evals[split] for w in s)
    return vocab


def estimate_lm(config: GraphConfig, train: list[list[str]], vocab: set[str], out: Path) -> arpa_mod.ArpaModel:
    """The graph's LM: lmplz on the training sentences (`out/train.txt`, raw model `out/lm.raw.arpa`), then
    <unk>'s probability given to the graph's words the training text lacks (`arpa.spread_unknown`)."""
    (out / "train.txt").write_text("".join(" ".join(s) + "\n" for s in train), encoding="utf-8")
    # with unigram interpolation, the uniform distribution spans the graph's words, </s> and <unk> (not <s>)
    kenlm_tools.estimate_arpa(out / "train.txt", out / "lm.raw.arpa", config.lm.order,
                              vocab_pad=len(vocab) + 2, memory=config.lm.memory,
                              discount_fallback=config.lm.discount_fallback,
                              interpolate_unigrams=config.lm.interpolate_unigrams)
    seen = {w for s in train for w in s}
    return arpa_mod.spread_unknown(arpa_mod.read_arpa(out / "lm.raw.arpa"), vocab - seen,
                                   unk_is_one_word=config.lm.interpolate_unigrams)


def _build_into(config: GraphConfig, out: Path, step: Step) -> GraphStats:
    start = time.perf_counter()
    step("normalizing SLURP text")
    train, evals = texts(config)
    vocab_train = {w for s in train for w in s}
    vocab = graph_vocabulary(config, train, evals)
    step(f"building the lexicon of {len(vocab)} words (CMUdict, espeak-ng for the rest)")
    lex = lexicon.build_lexicon(sorted(vocab), data_file("cmudict/cmudict.dict"), voice=config.lexicon.espeak_voice)
    lexicon.write_lexicon(lex, out / "lexicon.txt")
    step(f"estimating a {config.lm.order}-gram LM with lmplz")
    model = estimate_lm(config, train, vocab, out)
    arpa_mod.write_arpa(model, out / "lm.arpa")
    step("composing L, G and T into TLG")
    entries, max_k = topology.add_disambiguation(lex.prons)
    tokens = symbols.token_table(lexicon.PHONES, max_k)
    words = symbols.word_table(vocab)
    tokens.write(out / "tokens.txt")
    words.write(out / "words.txt")
    compose.arpa_to_g(out / "lm.arpa", out / "words.txt", out / "G.fst")
    l_text = topology.lexicon_fst_text(entries, tokens, words)
    compose.compile_text(l_text, "L").write(str(out / "L_disambig.fst"))
    lg = compose.compose_lg(l_text, out / "G.fst")
    lg = compose.remove_disambiguation(lg, [tokens[f"#{k}"] for k in range(max_k + 1)])
    compose.write_const(compose.compose_tlg(topology.ctc_topology_text(tokens, lexicon.PHONES), lg),
                        out / "TLG.fst")
    step("measuring the graph and the LM")
    csr = read_graph(out / "TLG.fst")
    test_tokens = [w for s in evals["test"] for w in s]
    return GraphStats(
        states=csr.num_states, arcs=csr.num_arcs, epsilon_arcs=csr.num_epsilon_arcs,
        vocabulary=len(vocab), vocabulary_train=len(vocab_train), lexicon_prons=lex.num_prons,
        lexicon_from_espeak=len(lex.from_espeak), disambig_symbols=max_k + 1,
        ngrams=tuple(model.counts), train_sentences=len(train),
        ppl_devel=model.perplexity(evals["devel"]), ppl_test=model.perplexity(evals["test"]),
        ppl_test_kenlm=kenlm_tools.query_perplexity(out / "lm.arpa", [" ".join(s) for s in evals["test"]],
                                                    oovs=False),
        test_tokens=len(test_tokens), test_tokens_unseen=sum(w not in vocab_train for w in test_tokens),
        build_seconds=time.perf_counter() - start,
        devel_tokens_oov=model.oov_count(evals["devel"]), test_tokens_oov=model.oov_count(evals["test"]),
    )
