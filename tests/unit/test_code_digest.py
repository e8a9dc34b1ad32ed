"""Cache keys follow what decides a cached artifact: code read as code, a built graph by its files."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

from specbench.code_digest import code_digest, files_digest
from specbench.wfst import kenlm_tools

ROOT = Path(__file__).resolve().parents[2]

MODULE = '''"""A module."""

RATE = 3


def scale(x):
    """Scale x."""
    return RATE * x  # by the rate


class Box:
    """A box."""

    def size(self):
        return 1
'''


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_comments_docstrings_and_layout_do_not_move_the_digest(tmp_path: Path) -> None:
    base = code_digest([_write(tmp_path, "a/m.py", MODULE)])
    edited = (MODULE.replace('"""A module."""', '"""A module, described at length.\n\nSecond paragraph."""')
              .replace("# by the rate", "# scaled by the rate, see the docs").replace('"""Scale x."""', "# no docstring")
              .replace("RATE = 3\n", "\n\nRATE = 3  # the rate\n"))
    assert code_digest([_write(tmp_path, "b/m.py", edited)]) == base


def test_a_change_to_what_the_code_does_moves_the_digest(tmp_path: Path) -> None:
    def digest(text: str, sub: str) -> str:
        return code_digest([_write(tmp_path, f"{sub}/m.py", text)])

    base = digest(MODULE, "base")
    changes = [MODULE.replace("RATE = 3", "RATE = 4"), MODULE.replace("RATE * x", "x * RATE"),
               MODULE.replace("return 1", "return 2"),
               MODULE.replace("return RATE * x", '"""Scale x."""\n    "a string that is not the docstring"\n    return RATE * x')]
    digests = {digest(text, f"c{i}") for i, text in enumerate(changes)}
    assert base not in digests and len(digests) == len(changes)


def test_a_real_graph_module_keeps_its_digest_through_a_docstring_edit(tmp_path: Path) -> None:
    """The edit that once rebuilt an identical SLURP graph (and threw away every transcript computed from
    it): kenlm_tools' module docstring reworded."""
    source = Path(kenlm_tools.__file__).read_text()
    reworded = source.replace('"""KenLM', '"""The KenLM tools,', 1) + "\n# a closing comment\n"
    assert reworded != source
    copy = _write(tmp_path, "kenlm_tools.py", reworded)
    assert code_digest([copy]) == code_digest([kenlm_tools.__file__])
    changed = _write(tmp_path, "x/kenlm_tools.py", source.replace("KENLM_VERSION =", "KENLM_VERSION = 'x' or", 1))
    assert code_digest([changed]) != code_digest([kenlm_tools.__file__])


def test_files_digest_follows_contents_not_the_directory(tmp_path: Path) -> None:
    for name in ("graph-aaa", "graph-bbb"):
        _write(tmp_path / name, "TLG.fst", "arcs")
        _write(tmp_path / name, "words.txt", "<eps> 0\n")
    _write(tmp_path / "graph-aaa", "stats.json", '{"build_seconds": 5.0}')
    _write(tmp_path / "graph-bbb", "stats.json", '{"build_seconds": 7.5}')
    a, b = tmp_path / "graph-aaa", tmp_path / "graph-bbb"
    assert files_digest(a, exclude=("stats.json",)) == files_digest(b, exclude=("stats.json",))
    assert files_digest(a) != files_digest(b)
    tlg = b / "TLG.fst"
    tlg.write_text("arcz")
    os.utime(tlg, ns=(tlg.stat().st_atime_ns, tlg.stat().st_mtime_ns + 1_000_000))  # a new stamp, not a cached answer
    assert files_digest(a, exclude=("stats.json",)) != files_digest(b, exclude=("stats.json",))


def test_the_transcript_and_adaptation_caches_follow_the_graph_contents(tmp_path: Path) -> None:
    """Two graph folders with the same files give the same cache folders; other files, other folders."""
    from specbench.config import AsrSection, PredictiveAsrConfig
    from specbench.config.loader import load_job_file
    from specbench.experiments.graph_recipe import GraphArtifacts
    from specbench.experiments.predictive_asr import partials
    from specbench.experiments.predictive_asr.adaptation import adaptation_dir

    checkpoint = _write(tmp_path, "am.pt", "model")
    graphs = []
    for name, arcs in (("slurp-1111", "arcs"), ("slurp-2222", "arcs"), ("slurp-3333", "other arcs")):
        _write(tmp_path / name, "TLG.fst", arcs)
        _write(tmp_path / name, "stats.json", name)
        graphs.append(GraphArtifacts(directory=tmp_path / name, stats=None, reused=True))
    asr = AsrSection()
    keys = [partials.cache_dir(asr, checkpoint, g).name for g in graphs]
    assert keys[0] == keys[1] != keys[2]
    assert partials.cache_dir(dataclasses.replace(asr, beam=asr.beam + 1), checkpoint, graphs[0]).name != keys[0]
    job = ROOT / "jobs" / "predictive_asr.toml"  # its [asr] names the ASR headline's adaptation job
    config = load_job_file(job, {"predictive_asr": PredictiveAsrConfig})
    keys = [adaptation_dir(config.asr, job, checkpoint, g).name for g in graphs]
    assert keys[0] == keys[1] != keys[2]


RAISING = '''def check(x):
    if x < 0:
        raise ValueError(f"x is {x}, below 0. " + "Fix: give a positive x")
    if x > 9:
        raise KeyError("too large", x) from None
    return x
'''


def test_the_wording_of_a_raised_message_does_not_move_the_digest(tmp_path: Path) -> None:
    def digest(text: str, sub: str) -> str:
        return code_digest([_write(tmp_path, f"{sub}/m.py", text)])

    base = digest(RAISING, "base")
    reworded = RAISING.replace('f"x is {x}, below 0. " + "Fix: give a positive x"',
                               '"x must not be negative. Fix: pass x >= 0"').replace('"too large"', 'f"{x} > 9"')
    assert digest(reworded, "reworded") == base
    # the class raised, an argument that is not text, the cause and the code around it still count
    changes = [RAISING.replace("ValueError", "TypeError"), RAISING.replace('"too large", x)', '"too large", -x)'),
               RAISING.replace(" from None", ""), RAISING.replace("x > 9", "x > 8"),
               RAISING.replace("return x", 'return "x"')]
    digests = {digest(text, f"c{i}") for i, text in enumerate(changes)}
    assert base not in digests and len(digests) == len(changes)


def test_the_transcript_caches_key_on_every_module_a_cpu_transcript_runs() -> None:
    """Every acoustic and decoder module that rendering a request loads (the CPU decoders' lazily imported
    modules too) is in the transcript caches' code key; the GPU decoder's only for the gpu backend."""
    script = ("import sys, json\nimport specbench.experiments.predictive_asr.partials\n"
              "import specbench.decoder.cpu, specbench.decoder.cpu_compiled, specbench.decoder.kaldi_reference\n"
              "from specbench.experiments.predictive_asr.code_key import asr_code\n"
              "loaded = {m.__file__ for n, m in list(sys.modules.items()) if n.split('.')[:2] in (\n"
              "    ['specbench', 'acoustic'], ['specbench', 'decoder']) and getattr(m, '__file__', None)}\n"
              "print(json.dumps([sorted(loaded), [str(p) for p in asr_code('cpu')], "
              "[str(p) for p in asr_code('gpu')]]))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT / "platform")}).stdout
    loaded, cpu, gpu = json.loads(out)
    assert set(loaded) <= set(cpu) and all(Path(p).is_file() for p in gpu)
    assert not any("/decoder/gpu/" in p for p in cpu) and any(p.endswith("/decoder/gpu/backend.py") for p in gpu)
    assert any(p.endswith("/decoder/compiled_kernels.py") for p in cpu)  # loaded by the compiled decoder
