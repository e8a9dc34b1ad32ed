"""Bad input, everywhere: every command that reads files, given a damaged, mistyped or missing one, ends with
one message that names the file and says how to fix it ("Fix: ..."), a non-zero exit code, no traceback, and
no FINISHED MLflow run. Per-utterance statuses are plain sentences, never exception class names.

Each case writes its bad file into a fresh folder and runs the real command line in-process (`cli.main`)."""

from __future__ import annotations

import json
import re
import wave
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import kaldiio
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specbench.cli import main
from specbench.experiments.graph_recipe import GraphArtifacts

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
JOBS = ROOT / "jobs"
MODELS = ROOT / "models"
RATE = 16000
HELD_OUT = "x-flite-rms-0001"  # an utterance id of a held-out voice (what `bench decoder` selects)
EXCEPTION_NAME = re.compile(r"\b[A-Z][A-Za-z]*(Error|Exception)\b")


@dataclass(frozen=True)
class Env:
    """What a case writes into and runs against."""

    tmp: Path
    tlg: Path
    uri: str


# a case: (env) -> (argv, the bad file the message must name, further fragments it must hold)
Make = Callable[[Env], tuple[list[str], Path, tuple[str, ...]]]


def loglikes(frames: int = 20, columns: int = 40, seed: int = 0) -> np.ndarray:
    """(frames, columns) float32 log-probabilities."""
    logits = np.random.default_rng(seed).normal(0, 1, (frames, columns)).astype(np.float32)
    return (logits - np.log(np.exp(logits).sum(1, keepdims=True))).astype(np.float32)


def speech(seconds: float = 0.5) -> np.ndarray:
    """A voiced-sounding int16 signal (a 150 Hz pulse train through noise) of `seconds`."""
    t = np.arange(int(seconds * RATE)) / RATE
    signal = 0.3 * np.sin(2 * np.pi * 150 * t) * (1 + np.sin(2 * np.pi * 3 * t))
    signal += np.random.default_rng(1).normal(0, 0.02, t.size)
    return (signal * 20000).astype("<i2")


def write_wav(path: Path, samples: np.ndarray, rate: int = RATE, channels: int = 1, width: int = 2) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(samples.tobytes())
    return path


def scores_table(**columns: object) -> pa.Table:
    """A one-utterance scores table of DESIGN.md's format, with `columns` replaced (None: left out)."""
    mat = loglikes()
    base = {"utt_id": pa.array([HELD_OUT]), "frame_shift_ms": pa.array([40.0], pa.float32()),
            "num_frames": pa.array([len(mat)], pa.int32()), "num_classes": pa.array([40], pa.int32()),
            "loglikes": pa.array([mat.reshape(-1)], pa.list_(pa.float32())), "status": pa.array(["ok"])}
    base.update(columns)
    return pa.table({k: v for k, v in base.items() if v is not None})


def parquet(env: Env, name: str, **columns: object) -> Path:
    path = env.tmp / name
    pq.write_table(scores_table(**columns), path)
    return path


def npz(env: Env, name: str, **arrays: np.ndarray) -> Path:
    path = env.tmp / name
    np.savez(path, **arrays)
    return path


def good_ark(env: Env) -> tuple[Path, Path]:
    ark, scp = env.tmp / "good.ark", env.tmp / "good.scp"
    with kaldiio.WriteHelper(f"ark,scp:{ark},{scp}") as writer:
        writer("utt1", loglikes(seed=1))
        writer("utt2", loglikes(seed=2))
    return ark, scp


def written(path: Path, data: bytes | str) -> Path:
    if isinstance(data, str):
        path.write_text(data)
    else:
        path.write_bytes(data)
    return path


def truncated(path: Path, keep: float = 0.5) -> Path:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    return path


# ---- specbench decode --------------------------------------------------------------------------------------

def decode(scores: Path, *fragments: str) -> Make:
    def make(env: Env) -> tuple[list[str], Path, tuple[str, ...]]:
        path = scores if scores.is_absolute() else env.tmp / scores
        return (["decode", "--graph", str(env.tlg), "--scores", str(path), "--frame-shift-ms", "40", "--out",
                 str(env.tmp / "out.jsonl")], path, fragments)
    return make


def decode_of(build: Callable[[Env], Path], *fragments: str) -> Make:
    def make(env: Env) -> tuple[list[str], Path, tuple[str, ...]]:
        path = build(env)
        return decode(path, *fragments)(env)
    return make


def _ark_with_vector(env: Env) -> Path:
    ark = env.tmp / "vector.ark"
    with kaldiio.WriteHelper(f"ark:{ark}") as writer:
        writer("utt1", np.arange(5, dtype=np.float32))
    return ark


def _scp_to(env: Env, line: str) -> Path:
    ark, _ = good_ark(env)
    return written(env.tmp / "bad.scp", line.format(ark=ark))


def _npz_object(env: Env) -> Path:
    path = env.tmp / "object.npz"
    np.savez(path, utt1=np.array([{"frames": 3}], dtype=object))
    return path


def _npy(env: Env) -> Path:
    path = env.tmp / "u.npy"
    np.save(path, loglikes())
    return path


def _words_malformed(env: Env) -> tuple[list[str], Path, tuple[str, ...]]:
    words = written(env.tmp / "words.txt", "<eps> 0\nhello\n")
    argv, _, _ = decode(Path("ok.npz"))(env)
    return [*argv, "--words", str(words)], words, ("line 2",)


DECODE_CASES: dict[str, Make] = {
    "decode-ark-garbage": decode_of(lambda e: written(e.tmp / "bad.ark", b"utt1 \x00B\x07garbage"),
                                    "not a readable Kaldi ark", "utterance"),
    "decode-ark-truncated": decode_of(lambda e: truncated(good_ark(e)[0], 0.7), "not a readable Kaldi ark",
                                      "after utterance 'utt1'"),
    "decode-ark-vector": decode_of(_ark_with_vector, "utterance 'utt1'", "2-D float array"),
    "decode-scp-missing-ark": decode_of(lambda e: written(e.tmp / "s.scp", f"utt1 {e.tmp / 'gone.ark'}:6\n"),
                                        "gone.ark", "does not exist"),
    "decode-scp-offset-past-end": decode_of(lambda e: _scp_to(e, "utt1 {ark}:999999\n"),
                                            "not a readable Kaldi scp"),
    "decode-scp-line-without-ark": decode_of(lambda e: written(e.tmp / "s.scp", "utt1\n"),
                                             "not a readable Kaldi scp"),
    "decode-scp-binary": decode_of(lambda e: written(e.tmp / "s.scp", b"\xff\xfe\x00\x01garbage\n"),
                                   "Kaldi scp"),
    "decode-npz-truncated": decode_of(lambda e: truncated(npz(e, "t.npz", a=loglikes(), b=loglikes())),
                                      "not a readable .npz archive"),
    "decode-npz-not-numpy": decode_of(lambda e: written(e.tmp / "text.npz", "utt1 0.5 0.5\n"),
                                      "not a readable .npz archive", "never unpickles"),
    "decode-npz-object-array": decode_of(_npz_object, "utterance 'utt1'", "never unpickles"),
    "decode-npz-strings": decode_of(lambda e: npz(e, "s.npz", utt1=np.array(["a", "b"])),
                                    "utterance 'utt1'", "2-D float array"),
    "decode-npz-3d": decode_of(lambda e: npz(e, "d.npz", utt1=np.zeros((2, 3, 4), np.float32)),
                               "shape (2, 3, 4)"),
    "decode-npy-truncated": decode_of(lambda e: truncated(_npy(e), 0.8), "not a readable .npy"),
    "decode-parquet-missing-column": decode_of(lambda e: parquet(e, "m.parquet", loglikes=None),
                                               "['loglikes']"),
    "decode-parquet-num-frames-string": decode_of(
        lambda e: parquet(e, "t.parquet", num_frames=pa.array(["20"])), "column 'num_frames'", "string"),
    "decode-parquet-loglikes-strings": decode_of(
        lambda e: parquet(e, "l.parquet", loglikes=pa.array([["a"] * 800])), "column 'loglikes'"),
    "decode-parquet-size-mismatch": decode_of(
        lambda e: parquet(e, "z.parquet", num_frames=pa.array([21], pa.int32())), "holds 800 scores",
        "21 x 40"),
    "decode-parquet-null-frames": decode_of(
        lambda e: parquet(e, "n.parquet", num_frames=pa.array([None], pa.int32())), "has no value"),
    "decode-parquet-garbage": decode_of(lambda e: written(e.tmp / "g.parquet", b"PAR1 not really"),
                                        "not a readable scores Parquet file"),
    "decode-unknown-suffix": decode_of(lambda e: written(e.tmp / "scores.txt", "utt1 1 2 3\n"),
                                       "unknown scores format"),
    "decode-missing-scores": decode(Path("nothing-here.npz"), "does not exist"),
    "decode-words-malformed": _words_malformed,
    "decode-scp-empty": decode_of(lambda e: written(e.tmp / "empty.scp", ""), "no utterances to decode"),
    "decode-graph-not-an-fst": lambda e: _with_graph(e, written(e.tmp / "g.fst", "0 1 1 1\n1\n"), "magic"),
    "decode-graph-missing": lambda e: _with_graph(e, e.tmp / "TLG.fst", "--graph", "no such file"),
}


def _with_graph(env: Env, graph: Path, *fragments: str) -> tuple[list[str], Path, tuple[str, ...]]:
    """`decode` of good scores with `graph` as the graph."""
    argv, _, _ = decode(Path("ok.npz"))(env)
    argv[argv.index("--graph") + 1] = str(graph)
    return argv, graph, ("specbench graph build", *fragments)


# ---- specbench bench acoustic --audio ----------------------------------------------------------------------

def acoustic(write: Callable[[Path], Path], *fragments: str, checkpoint: Callable[[Env], Path] | None = None,
             folder: str = "audio") -> Make:
    """`bench acoustic --audio DIR` over one good WAV and the bad one `write` puts into DIR."""
    def make(env: Env) -> tuple[list[str], Path, tuple[str, ...]]:
        audio = env.tmp / folder
        write_wav(env.tmp / "audio" / "a-good.wav", speech())
        bad = write(env.tmp / "audio")
        argv = ["bench", "acoustic", "--audio", str(audio), "--utterances", "4", "--no-mlflow"]
        if checkpoint is not None:
            bad = checkpoint(env)
            argv += ["--checkpoint", str(bad)]
        return argv, bad, fragments
    return make


def _mt_checkpoint(env: Env) -> Path:
    return MODELS / "mt_full.pt"


ACOUSTIC_CASES: dict[str, Make] = {
    "acoustic-empty-wav": acoustic(lambda d: write_wav(d / "b-empty.wav", np.zeros(0, "<i2")), "no samples"),
    "acoustic-silent-wav": acoustic(lambda d: write_wav(d / "b-silent.wav", np.zeros(RATE, "<i2")),
                                    "digital silence"),
    "acoustic-too-short-wav": acoustic(lambda d: write_wav(d / "b-short.wav", speech()[:100]),
                                       "only 100 samples"),
    "acoustic-8khz-wav": acoustic(lambda d: write_wav(d / "b-8k.wav", speech()[::2], rate=8000),
                                  "8000 Hz", "sox"),
    "acoustic-stereo-wav": acoustic(
        lambda d: write_wav(d / "b-stereo.wav", np.repeat(speech(), 2), channels=2), "2 channel(s)"),
    "acoustic-8bit-wav": acoustic(
        lambda d: write_wav(d / "b-8bit.wav", (speech() // 256 + 128).astype(np.uint8), width=1), "8-bit"),
    "acoustic-truncated-wav": acoustic(lambda d: truncated(write_wav(d / "b-cut.wav", speech())),
                                       "truncated"),
    "acoustic-not-a-wav": acoustic(lambda d: written(d / "b-text.wav", "this is not audio\n" * 20),
                                   "not a readable PCM WAV file"),
    "acoustic-mt-checkpoint": acoustic(lambda d: d, "translation model checkpoint",
                                       "acoustic model checkpoint is needed", checkpoint=_mt_checkpoint),
    "acoustic-garbage-checkpoint": acoustic(
        lambda d: d, "not a readable acoustic model checkpoint",
        checkpoint=lambda e: written(e.tmp / "am.pt", b"\x80\x02junk" * 50)),
    "acoustic-missing-checkpoint": acoustic(lambda d: d, "does not exist", "specbench train am",
                                            checkpoint=lambda e: e.tmp / "no-such-am.pt"),
    "acoustic-missing-folder": acoustic(lambda d: d / "nowhere", "no such folder", folder="audio/nowhere"),
}


# ---- specbench bench decoder --scores ----------------------------------------------------------------------

def bench_decoder(build: Callable[[Env], Path], *fragments: str) -> Make:
    def make(env: Env) -> tuple[list[str], Path, tuple[str, ...]]:
        path = build(env)
        return (["bench", "decoder", "--graph", str(env.tlg), "--scores", str(path), "--backends", "cpu",
                 "--utterances", "2", "--ratio-rounds", "0", "--frame-shift-ms", "40", "--no-mlflow"],
                path, fragments)
    return make


BENCH_DECODER_CASES: dict[str, Make] = {
    "bench-decoder-npz-truncated": bench_decoder(
        lambda e: truncated(npz(e, "t.npz", **{HELD_OUT: loglikes(200)})), "not a readable .npz archive"),
    "bench-decoder-npz-1d": bench_decoder(lambda e: npz(e, "v.npz", **{HELD_OUT: np.zeros(5, np.float32)}),
                                          "2-D float array"),
    "bench-decoder-parquet-missing-column": bench_decoder(
        lambda e: parquet(e, "m.parquet", num_classes=None), "['num_classes']"),
    "bench-decoder-parquet-loglikes-strings": bench_decoder(
        lambda e: parquet(e, "l.parquet", loglikes=pa.array([["x"] * 800])), "column 'loglikes'"),
    "bench-decoder-parquet-size-mismatch": bench_decoder(
        lambda e: parquet(e, "z.parquet", num_classes=pa.array([41], pa.int32())), "20 x 41"),
    "bench-decoder-kaldi-scores": bench_decoder(lambda e: good_ark(e)[1], "reads .parquet or .npz"),
    "bench-decoder-no-held-out-voice": bench_decoder(lambda e: npz(e, "o.npz", other=loglikes()),
                                                     "no held-out-voice utterances"),
}


# ---- job files: run, validate, train, graph build ---------------------------------------------------------

def job(text: str, argv: Callable[[Path], list[str]], *fragments: str, bad: str | None = None) -> Make:
    """A job file holding `text` ({tmp}, {jobs}, {models} filled in) run with `argv(job file)`; the message
    must name `bad` ({tmp} filled in), else the job file."""
    def make(env: Env) -> tuple[list[str], Path, tuple[str, ...]]:
        fill = {"tmp": env.tmp, "jobs": JOBS, "models": MODELS}
        path = written(env.tmp / "job.toml", text.format(**fill))
        named = Path(bad.format(**fill)) if bad else path
        return ["--tracking-uri", env.uri, *argv(path)], named, fragments
    return make


def run(path: Path) -> list[str]:
    return ["run", str(path)]


def validate(path: Path) -> list[str]:
    return ["validate", str(path)]


EVAL_MISSING_AM = ('kind = "eval_am"\ncheckpoint = "{tmp}/am-never-trained.pt"\n'
                   'speech_job = "{jobs}/speech_quick.toml"\ngraph_job = "{jobs}/graph_slurp.toml"\n')
SIMULTRANS_MISSING_FULL = 'kind = "simultrans"\nfull_model = "{tmp}/mt_full_missing.pt"\n'


def _suite(env: Env) -> tuple[list[str], Path, tuple[str, ...]]:
    written(env.tmp / "eval.toml", EVAL_MISSING_AM.format(tmp=env.tmp, jobs=JOBS))
    suite = written(env.tmp / "suite.toml",
                    f'kind = "suite"\njobs = ["{JOBS}/graph_slurp.toml", "eval.toml"]\n')
    return ["--tracking-uri", env.uri, "run", str(suite)], env.tmp / "eval.toml", ("key 'checkpoint'",)


def _nightly(env: Env) -> tuple[list[str], Path, tuple[str, ...]]:
    written(env.tmp / "simul.toml", SIMULTRANS_MISSING_FULL.format(tmp=env.tmp))
    nightly = written(env.tmp / "nightly.toml", 'kind = "nightly"\njobs = ["simul.toml"]\n'
                      '[[tolerance]]\nmetric = "simul.bleu_full_pooled"\nmax_drop = 1.0\n'
                      '[[tolerance]]\nmetric = "simul.speculation_gain_bleu"\nmax_drop = 1.0\n')
    argv = ["--tracking-uri", env.uri, "validate", str(nightly)]
    return argv, env.tmp / "simul.toml", ("key 'full_model'",)


def _bench_job_with_mt_checkpoint(env: Env) -> tuple[list[str], Path, tuple[str, ...]]:
    """A job whose model is of the wrong kind: refused with its key before its MLflow run opens."""
    write_wav(env.tmp / "audio" / "a.wav", speech())
    path = written(env.tmp / "bench.toml", f'kind = "bench_acoustic"\ncheckpoint = "{MODELS}/mt_full.pt"\n'
                   f'audio = "{env.tmp / "audio"}"\nutterances = 1\n')
    return ["--tracking-uri", env.uri, "run", str(path)], MODELS / "mt_full.pt", (
        "key 'checkpoint'", "is not an acoustic model", "translation model")


def _bench_job_with_broken_audio(env: Env) -> tuple[list[str], Path, tuple[str, ...]]:
    """A job that reaches its runner (an MLflow run is opened) and fails there, on a WAV file that is not
    one: the run must end FAILED."""
    broken = env.tmp / "broken_audio" / "a.wav"
    broken.parent.mkdir(parents=True, exist_ok=True)
    broken.write_text("not a wav")
    path = written(env.tmp / "bench.toml", f'kind = "bench_acoustic"\naudio = "{broken.parent}"\nutterances = 1\n')
    return ["--tracking-uri", env.uri, "run", str(path)], broken, ("not a readable PCM WAV file",)


PREDICTIVE_TWO_USERS = ('kind = "predictive_asr"\nusers = 2\ntune_users = 2\nrun_habit_sweep = false\n'
                        '[asr]\ngraph_job = "{jobs}/graph_slurp.toml"\n[usage]\n')

JOB_CASES: dict[str, Make] = {
    "validate-eval-am-missing-checkpoint": job(EVAL_MISSING_AM, validate, "key 'checkpoint'",
                                               "does not exist", "specbench train am"),
    "run-eval-am-missing-checkpoint": job(EVAL_MISSING_AM, run, "key 'checkpoint'", "specbench train am"),
    "run-eval-am-missing-graph-job": job('kind = "eval_am"\nspeech_job = "{jobs}/speech_quick.toml"\n'
                                         'graph_job = "no_graph.toml"\n', run, "key 'graph_job'",
                                         "no_graph.toml"),
    "run-simultrans-missing-model": job(SIMULTRANS_MISSING_FULL, run, "key 'full_model'", "train mt"),
    "validate-predictive-asr-missing-confidence": job(
        'kind = "predictive_asr"\nconfidence_no_personal = "{tmp}/conf_nopersonal.pt"\n', validate,
        "key 'confidence_no_personal'", "train confidence"),
    "validate-predictive-asr-impossible-routine-share": job(
        'kind = "predictive_asr"\n[usage]\nroutine_share = 1.5\n', validate, "routine_share", "1.5"),
    # stopped before anything is synthesized: the users' requests are simulated first
    "run-predictive-asr-routine-larger-than-sentences": job(
        PREDICTIVE_TWO_USERS + "routine_size = [400, 500]\n", run, "[usage]", "usage.routine_size",
        "Fix: routine_size[0] <="),
    "run-predictive-asr-new-texts-run-out": job(
        PREDICTIVE_TWO_USERS + "requests_per_day = 400.0\n", run, "[usage]", "never said",
        "Fix: usage.requests_per_day <="),
    "run-bench-simultrans-missing-bpe": job('kind = "bench_simultrans"\nbpe = "{tmp}/gone.model"\n', run,
                                            "key 'bpe'"),
    "train-confidence-missing-lm": job('kind = "train_confidence"\nlm = "{tmp}/lm_missing.pt"\n',
                                       lambda p: ["train", "confidence", str(p)], "key 'lm'", "train lm"),
    "train-am-missing-speech-job": job('kind = "train_am"\nspeech_job = "{tmp}/speech_gone.toml"\n'
                                       'graph_job = "{jobs}/graph_slurp.toml"\n',
                                       lambda p: ["train", "am", str(p)], "key 'speech_job'"),
    "train-am-wrong-kind": job('kind = "graph"\n', lambda p: ["train", "am", str(p)], 'kind = "train_am"'),
    "train-mt-no-mlflow-wrong-kind": job('kind = "eval_am"\n',
                                         lambda p: ["train", "mt", "--no-mlflow", str(p)],
                                         'kind = "train_mt"', 'not "eval_am"'),
    "train-mt-bad-value": job('kind = "train_mt"\ndevel_sentences = -3\n',
                              lambda p: ["train", "mt", "--no-mlflow", str(p)], "'devel_sentences'",
                              "out of range"),
    "graph-build-wrong-kind": job('kind = "simultrans"\n', lambda p: ["graph", "build", str(p)],
                                  'kind = "graph"'),
    "graph-build-not-toml": job('kind = "graph"\n[lm\norder = 3\n', lambda p: ["graph", "build", str(p)],
                                "not valid TOML"),
    "graph-build-missing-job-file": job("", lambda p: ["graph", "build", str(p.with_name("nothere.toml"))],
                                        "no such job file", bad="{tmp}/nothere.toml"),
    "run-suite-member-missing-model": _suite,
    "validate-nightly-member-missing-model": _nightly,
    "run-bench-acoustic-job-mt-checkpoint": _bench_job_with_mt_checkpoint,
    "run-bench-acoustic-job-broken-audio": _bench_job_with_broken_audio,
}

CASES = {**DECODE_CASES, **ACOUSTIC_CASES, **BENCH_DECODER_CASES, **JOB_CASES}


@pytest.fixture()
def env(slurp_graph: GraphArtifacts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Env:
    """A fresh folder, the built graph, and a private MLflow store (also for the commands that are not
    given --tracking-uri)."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    work = tmp_path / "case"
    work.mkdir()
    np.savez(work / "ok.npz", utt1=loglikes())
    return Env(work, slurp_graph.tlg, uri)


def finished_runs(db: Path) -> list[str]:
    """The ids of the FINISHED runs in the SQLite store `db` (none when the store was never created)."""
    if not db.exists():
        return []
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{db}")
    experiments = [e.experiment_id for e in client.search_experiments()]
    return [r.info.run_id for r in client.search_runs(experiments) if r.info.status == "FINISHED"]


def test_there_are_at_least_thirty_cases() -> None:
    assert len(CASES) >= 30


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_gives_one_message_with_the_file_and_the_fix(case: str, env: Env, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    if case.startswith(("run-", "validate-", "train-", "graph-")):
        monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "home"))  # the runner's artifacts stay here
    argv, bad, fragments = CASES[case](env)
    code = main(argv)
    out, err = capsys.readouterr()
    messages = [line for line in err.splitlines() if line.startswith("specbench: error:")]
    assert code == 2, f"exit code {code}\nstdout: {out}\nstderr: {err}"
    assert len(messages) == 1, err
    message = messages[0]
    assert "Traceback" not in out + err
    assert str(bad) in message, message
    assert "Fix:" in message, message
    for fragment in fragments:
        assert fragment in message, message
    assert not EXCEPTION_NAME.search(message), message
    assert not (env.tmp / "out.jsonl").exists()  # decode wrote nothing
    assert finished_runs(tmp_path / "mlflow.db") == []


def test_a_failing_job_leaves_a_failed_run(env: Env, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The one case above that gets as far as opening an MLflow run closes it as FAILED."""
    import mlflow

    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "home"))
    argv, _, _ = _bench_job_with_broken_audio(env)
    assert main(argv) == 2
    capsys.readouterr()
    client = mlflow.MlflowClient(env.uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert [r.info.status for r in runs] == ["FAILED"]


def test_a_model_written_by_an_earlier_job_of_the_suite_counts_as_present(
        env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    """`validate` of a suite that trains a model and then evaluates it: the model need not exist yet."""
    ckpt = env.tmp / "am_new.pt"
    written(env.tmp / "train.toml", f'kind = "train_am"\noutput = "{ckpt}"\n'
                                    f'speech_job = "{JOBS}/speech_quick.toml"\n'
                                    f'graph_job = "{JOBS}/graph_slurp.toml"\n')
    eval_job = EVAL_MISSING_AM.replace("{tmp}/am-never-trained.pt", str(ckpt)).format(jobs=JOBS)
    written(env.tmp / "eval.toml", eval_job)
    suite = written(env.tmp / "suite.toml", 'kind = "suite"\njobs = ["train.toml", "eval.toml"]\n')
    assert main(["validate", str(suite)]) == 0, capsys.readouterr().err
    reversed_suite = written(env.tmp / "reversed.toml",
                             'kind = "suite"\njobs = ["eval.toml", "train.toml"]\n')
    assert main(["validate", str(reversed_suite)]) == 2
    assert "key 'checkpoint'" in capsys.readouterr().err


def test_statuses_of_bad_utterances_are_plain_sentences(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    """`decode` of an npz with good and bad utterances: the good ones decode, each bad one gets a sentence."""
    nan, inf = loglikes(seed=3), loglikes(seed=4)
    nan[3, 0] = np.nan
    inf[5, 2] = -np.inf
    path = npz(env, "mixed.npz", good=loglikes(seed=5), nan=nan, inf=inf, narrow=loglikes(columns=3),
               empty=np.zeros((0, 40), np.float32))
    for backend in ("cpu", "twin"):
        out = env.tmp / f"{backend}.jsonl"
        assert main(["decode", "--graph", str(env.tlg), "--scores", str(path), "--frame-shift-ms", "40",
                     "--backend", backend, "--out", str(out)]) == 0
        summary = json.loads(capsys.readouterr().out)
        rows = {r["id"]: r["status"] for r in map(json.loads, out.read_text().splitlines())}
        assert rows["nan"] == ("bad scores: utterance 'nan' has NaN at frame 3, column 0; scores must be "
                               "finite log-likelihoods"), backend
        assert rows["inf"].startswith("bad scores: utterance 'inf' has -inf at frame 5, column 2"), backend
        assert rows["narrow"].startswith("bad scores: utterance 'narrow' has scores of 3 columns"), backend
        assert rows["empty"] == "empty utterance", backend
        assert rows["good"] in ("ok", "no final state reached"), backend
        for status in list(rows.values()) + list(summary["failures"]):
            assert not EXCEPTION_NAME.search(status), status


def test_malformed_rows_and_missing_frame_shift_are_sentences(env: Env) -> None:
    """The decoder stage on a table: a row whose size is not T x P, and partials without a frame shift."""
    from specbench.decoder.stage import DecoderStage

    mat = loglikes()
    table = pa.table({"utt_id": ["short", "fine"], "num_frames": [21, 20], "num_classes": [40, 40],
                      "loglikes": [mat.reshape(-1).tolist(), mat.reshape(-1).tolist()]})
    rows = DecoderStage(env.tlg, "cpu", beam=10.0)(table).to_pylist()
    assert rows[0]["status"] == ("malformed scores: 800 loglikes do not fill num_frames x num_classes = "
                                 "21 x 40")
    assert rows[1]["status"] in ("ok", "no final state reached")
    partials = DecoderStage(env.tlg, "cpu", beam=10.0, partial_every_ms=120.0).decode_one("p", mat)
    assert partials["status"].startswith("partials need the frame shift")
    for row in [*rows, partials]:
        assert not EXCEPTION_NAME.search(row["status"]), row["status"]


def test_acoustic_scorer_statuses_name_the_file_without_exception_names(env: Env) -> None:
    from specbench.acoustic.inference import AcousticScorer
    from specbench.wfst.lexicon import PHONES

    write_wav(env.tmp / "good.wav", speech())
    write_wav(env.tmp / "eight.wav", speech()[::2], rate=8000)
    written(env.tmp / "junk.wav", "not audio\n" * 10)
    table = pa.table({"utt_id": ["g", "e", "j", "m"], "audio_path": ["good.wav", "eight.wav", "junk.wav",
                                                                      "missing.wav"]})
    status = AcousticScorer(MODELS / "am_slurp.pt", env.tmp, expected_phones=PHONES)(table).column("status")
    status = status.to_pylist()
    assert status[0] == "ok"
    for name, text in zip(["eight.wav", "junk.wav", "missing.wav"], status[1:]):
        assert name in text and "Fix:" in text and not EXCEPTION_NAME.search(text), text
