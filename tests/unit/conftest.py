"""Fixtures shared by unit tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from specbench.acoustic.checkpoint import AcousticCheckpoint, save_checkpoint
from specbench.acoustic.features import Cmvn, fbank
from specbench.acoustic.inference import score_samples
from specbench.acoustic.model import CausalCtcModel, lookahead_ms
from specbench.acoustic.settings import ModelConfig
from specbench.wfst.lexicon import PHONES


@pytest.fixture(scope="session")
def assert_causal() -> Callable[[AcousticCheckpoint, float], None]:
    """A check that changing the audio after 1 s leaves the scores before 1 s minus the lookahead unchanged
    (and changes later ones), for a checkpoint scored with a VTLN warp."""

    def check(ckpt: AcousticCheckpoint, warp: float) -> None:
        rng = np.random.default_rng(11)
        audio = rng.normal(0, 0.1, 32000).astype(np.float32)
        changed = audio.copy()
        changed[16000:] = rng.normal(0, 0.3, 16000)
        a, b = score_samples(ckpt, audio, warp=warp), score_samples(ckpt, changed, warp=warp)
        safe = int((1000 - lookahead_ms()) // 40.0) + 1
        assert np.array_equal(a[:safe], b[:safe]) and not np.allclose(a[safe + 1:], b[safe + 1:])

    return check


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


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small acoustic-model checkpoint with random weights and CMVN from random audio."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    model = CausalCtcModel(ModelConfig(hidden=64, layers=2)).eval()
    feats = [fbank(rng.normal(0, 0.1, 16000).astype(np.float32)) for _ in range(3)]
    path = tmp_path_factory.mktemp("ckpt") / "am.pt"
    save_checkpoint(path, model, Cmvn.estimate(feats), PHONES, {"note": "random weights"})
    return path


@pytest.fixture
def tiny_mt_job(tmp_path: Path) -> Callable[..., Path]:
    """A writer of `train_mt` job files for a tiny model (d 32, one layer a side) on Multi30k with the shipped
    BPE: `write(name, output, body)` puts `body` (the top-level keys and sections that differ: devel and BLEU
    sentences, `[training]`, `[selection]`, `causal`) around the shared `[model]` table."""

    def write(name: str, output: Path, body: str, causal: bool = True) -> Path:
        path = tmp_path / f"{name}.toml"
        head, _, sections = body.partition("\n[")
        model = ("[model]\nvocab_size = 4000\nd_model = 32\nheads = 2\nffn = 64\nencoder_layers = 1\n"
                 f"decoder_layers = 1\ncausal_encoder = {str(causal).lower()}\n")
        rest = f"\n[{sections}" if sections else ""
        path.write_text(f'kind = "train_mt"\nname = "{name}"\noutput = "{output}"\n'
                        f'bpe_model = "models/mt_bpe.model"\n{head}\n\n{model}{rest}')
        return path

    return write
