"""Shared fixtures. Heavy imports (ray via specbench.runtime) happen inside fixtures only, so that the
GPU machine, which has no ray, can still collect tests/gpu."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

TESTS_DIR = Path(__file__).resolve().parent

# Whichever test starts the session's local Ray first (a fixture, or a pipeline that connects on its
# own), its workers must import the test stages: they inherit PYTHONPATH from this process.
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(TESTS_DIR), os.environ.get("PYTHONPATH", "")) if p
)


def pytest_configure(config: pytest.Config) -> None:
    """A RayDeprecationWarning raised from specbench's own code fails the test that raised it (Ray's
    internals may still warn on their own). Added here, not in pyproject.toml, because the category must
    be importable and the GPU machine has no ray."""
    try:
        import specbench.runtime.cluster  # noqa: F401 - sets Ray's environment, then imports ray
        import ray.util.annotations  # noqa: F401 - the warning category
    except ImportError:
        return
    config.addinivalue_line("filterwarnings", "error::ray.util.annotations.RayDeprecationWarning:specbench")


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    """A new local Ray with 2 CPUs and no GPU, bound to 127.0.0.1, for the whole session ($RAY_ADDRESS is
    ignored).

    Workers get this directory on their `PYTHONPATH`, so stages from `stages_for_tests` unpickle there.
    Yields `specbench.runtime.ClusterInfo`; shuts Ray down at the end if it started it.
    """
    from specbench.runtime import ray_session

    with ray_session("local", num_cpus=2, num_gpus=0, python_path=[TESTS_DIR]) as info:
        yield info


# A three-word lexicon for `tiny_tlg` (CMUdict phones)
TINY_PRONS = {"jazz": (("JH", "AE", "Z"),), "play": (("P", "L", "EY"),), "stop": (("S", "T", "AA", "P"),)}
# (log10 p, word, log10 back-off): the back-off only where a bigram LM has bigrams after the word
_UNIGRAMS = ((-0.7, "</s>", None), (-0.5, "<s>", -0.3), (-0.5, "jazz", None), (-0.5, "play", -0.2),
             (-0.6, "stop", None))


@pytest.fixture
def tiny_tlg(tmp_path: Path) -> Callable[..., Path]:
    """A builder of small real CTC graph directories laid out as `graph_recipe` writes them (TLG.fst, G.fst,
    L_disambig.fst, words.txt, tokens.txt, lexicon.txt, lm.arpa, train.txt) over `TINY_PRONS`, composed with
    the recipe's own kaldifst steps: `build(name, order)` with a unigram (order 1) or bigram (order 2) LM."""
    from specbench.wfst import compose, lexicon, symbols, topology
    from specbench.wfst.lexicon import PHONES

    def build(name: str, order: int = 2) -> Path:
        out = tmp_path / name
        out.mkdir()
        lexicon.write_lexicon(lexicon.Lexicon(TINY_PRONS), out / "lexicon.txt")
        (out / "train.txt").write_text("play jazz\nstop\n", encoding="utf-8")
        unigrams = "".join(f"{p} {w}" + (f" {b}" if b is not None and order == 2 else "") + "\n"
                           for p, w, b in _UNIGRAMS)
        sections = ["\\data\\\nngram 1=5\n" + ("ngram 2=2\n" if order == 2 else ""), f"\\1-grams:\n{unigrams}"]
        if order == 2:
            sections.append("\\2-grams:\n-0.2 <s> play\n-0.1 play jazz\n")
        (out / "lm.arpa").write_text("\n".join([*sections, "\\end\\\n"]), encoding="utf-8")
        entries, max_k = topology.add_disambiguation(TINY_PRONS)
        tokens, words = symbols.token_table(PHONES, max_k), symbols.word_table(TINY_PRONS)
        tokens.write(out / "tokens.txt")
        words.write(out / "words.txt")
        compose.arpa_to_g(out / "lm.arpa", out / "words.txt", out / "G.fst")
        l_text = topology.lexicon_fst_text(entries, tokens, words)
        compose.compile_text(l_text, "L").write(str(out / "L_disambig.fst"))
        lg = compose.remove_disambiguation(compose.compose_lg(l_text, out / "G.fst"),
                                           [tokens[f"#{k}"] for k in range(max_k + 1)])
        compose.write_const(compose.compose_tlg(topology.ctc_topology_text(tokens, PHONES), lg), out / "TLG.fst")
        return out

    return build


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/unit and tests/property is a unit test (`make test-unit`, `-m unit`), whether or
    not its module says so."""
    fast = (TESTS_DIR / "unit", TESTS_DIR / "property")
    for item in items:
        if any(d in item.path.parents for d in fast) and item.get_closest_marker("unit") is None:
            item.add_marker(pytest.mark.unit)
