"""The simultrans job end to end on the shipped checkpoints (a few sentences, Ray tasks, MLflow), and the
wait-k model's incremental encoder on real sentences."""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import pytest
import torch

from specbench.cli import main
from specbench.data.multi30k import read_pairs
from specbench.data.resolver import data_dir
from specbench.experiments.registry import load_config
from specbench.experiments.simultrans_sets import SplitEvaluator
from specbench.runtime import connect
from specbench.simultrans.checkpoint import load_mt
from specbench.simultrans.experiment import Method
from specbench.simultrans.search import full_sentence, wait_k
from specbench.simultrans.tokenizer import EOS

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
WAITK, FULL, BPE = (ROOT / "models" / n for n in ("mt_waitk.pt", "mt_full.pt", "mt_bpe.model"))

JOB = """kind = "simultrans"
name = "simultrans_test"
waitk_model = "{waitk}"
full_model = "{full}"
bpe_model = "{bpe}"
val_sentences = 16
test_sentences = 6
test_splits = ["test_2016_flickr", "test_2017_mscoco"]
ks = [1, 3]
grid_k = 3
grid_beams = [3]
grid_windows = [0, 1]
thresholds = [0.6]
shard_size = 8
rank_speculations_on_val = true
[tracking]
experiment = "simultrans_test"
"""


def test_shipped_models_translate_and_the_encoder_is_incremental() -> None:
    ckpt = load_mt(WAITK, BPE)
    sentence = "Ein Mann fährt mit dem Fahrrad über eine Brücke."
    src = ckpt.tokenizer.encode(sentence) + [EOS]
    with torch.no_grad():
        full = ckpt.model.encode(torch.tensor([src]))
        cache, parts = None, []
        for token in src:
            out, cache = ckpt.model.encode_step(torch.tensor([[token]]), cache)
            parts.append(out)
    assert torch.allclose(full, torch.cat(parts, 1), atol=1e-4)
    english = ckpt.tokenizer.decode(wait_k(ckpt.model, [src], 3)[0].tokens).lower()
    assert "man" in english and ("bike" in english or "bicycl" in english or "cycl" in english)
    full_model = load_mt(FULL, BPE)
    english = full_model.tokenizer.decode(full_sentence(full_model.model, [src], beam=3)[0].tokens).lower()
    assert "man" in english


def test_simultrans_job_logs_curves_and_headline(tmp_path: Path, ray_cluster: object) -> None:
    job = tmp_path / "simultrans.toml"
    job.write_text(JOB.format(waitk=WAITK, full=FULL, bpe=BPE))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["--tracking-uri", uri, "run", str(job)]) == 0
    mlflow.set_tracking_uri(uri)
    run = mlflow.search_runs(experiment_names=["simultrans_test"], output_format="list")[0]
    metrics = run.data.metrics
    client = mlflow.MlflowClient()
    assert metrics["simul.bleu_full_pooled"] > 10
    # the headline and its decomposition, pooled (no prefix), per test set and on val, for both models
    for prefix in ("simul.", "simul.test_2016_flickr.", "simul.test_2017_mscoco.", "simul.val."):
        for model in ("", "testtime_"):
            for comparison in ("speculation", "sbs_vs_greedy", "tail_vs_greedy"):
                name = f"{prefix}{model}{comparison}"
                # a percentile interval need not contain the point estimate on 12 sentences; it is ordered
                assert metrics[f"{name}_gain_bleu_low"] <= metrics[f"{name}_gain_bleu_high"]
                assert 0.0 <= metrics[f"{name}_gain_no_win_share"] <= 1.0
                assert f"{name}_laal_increase" in metrics and f"{name}_al_ref_increase" in metrics
    # every logged gain is the difference of the logged BLEUs of the two configurations it compares (per set,
    # pooled, each model, every k), with the latency differences likewise, and its interval agrees with the
    # share of resamples without a win (a percentile interval need not contain the point on 12 sentences)
    history: dict[str, list[float]] = {}

    def steps(name: str) -> list[float]:
        if name not in history:
            history[name] = [m.value for m in sorted(client.get_metric_history(run.info.run_id, name),
                                                     key=lambda m: m.step)]
        return history[name]

    searches = {"speculation": ("sbs", "tail"), "sbs_vs_greedy": ("sbs", "greedy"), "tail_vs_greedy": ("tail", "greedy")}
    for split in ("test_2016_flickr", "test_2017_mscoco", "pooled"):
        for model, curve in (("waitk", "waitk"), ("full", "full")):
            for comparison, (better, baseline) in searches.items():
                prefix = f"simul.{split}.{model}.{comparison}"
                for field, metric in (("gain", "bleu"), ("laal_increase", "laal_words"),
                                      ("al_ref_increase", "al_ref_words")):
                    expected = [a - b for a, b in zip(steps(f"simul.{split}.{curve}_{better}.{metric}"),
                                                      steps(f"simul.{split}.{curve}_{baseline}.{metric}"), strict=True)]
                    assert steps(f"{prefix}.{field}") == pytest.approx(expected, abs=1e-6), (prefix, field)
                assert all(low <= high for low, high in zip(steps(f"{prefix}.low"), steps(f"{prefix}.high"),
                                                            strict=True))
                headline = ("simul." if split == "pooled" else f"simul.{split}.") + (
                    "testtime_" if model == "full" else "") + comparison
                assert metrics[f"{headline}_gain_bleu"] == pytest.approx(steps(f"{prefix}.gain")[1], abs=1e-9)
                share = metrics[f"{headline}_gain_no_win_share"]
                if metrics[f"{headline}_gain_bleu_low"] > 0:
                    assert share <= 0.03
                if metrics[f"{headline}_gain_bleu_high"] <= 0:
                    assert share >= 0.97
    # the val grid was decoded with both rankings (per token by default, summed beside it) and each model took
    # the better one; the wait-k model's SBS at grid_k is decoded with the other ranking too
    assert run.data.params["simul.length_normalized_speculation"] == "True"
    assert run.data.params["simul.rank_speculations_on_val"] == "True"
    assert {"simul.val_grid.waitk.b3.bleu", "simul.val_grid.waitk.b3.sum.bleu",
            "simul.val_grid.full.b3.sum.al"} <= set(metrics)
    assert {metrics["simul.waitk_ranking_per_token"], metrics["simul.full_ranking_per_token"]} <= {0.0, 1.0}
    for prefix in ("simul.", "simul.test_2016_flickr.", "simul.test_2017_mscoco."):  # pooled and per set
        assert metrics[f"{prefix}sbs_length_ratio_sum_ranking"] > 0 and f"{prefix}sbs_gain_bleu_sum_ranking" in metrics
    # curves per set with steps (one per k); latency in source words: reading the whole source first lags
    # exactly the source's word count (no </s>), its token count otherwise (</s> included)
    sources = {split: [s for s, _ in read_pairs(split)[:6]] for split in ("test_2016_flickr", "test_2017_mscoco")}
    sources["pooled"] = sources["test_2016_flickr"] + sources["test_2017_mscoco"]
    for split in ("test_2016_flickr", "test_2017_mscoco", "pooled"):
        bleu = client.get_metric_history(run.info.run_id, f"simul.{split}.waitk_sbs.bleu")
        laal = client.get_metric_history(run.info.run_id, f"simul.{split}.waitk_greedy.laal_words")
        assert [m.step for m in bleu] == [0, 1] and laal[0].value < laal[1].value  # k = 1, then 3
        words = sum(len(s.split()) for s in sources[split]) / len(sources[split])
        assert metrics[f"simul.{split}.full_sentence_beam.laal_words"] == pytest.approx(words)
        assert metrics[f"simul.{split}.full_sentence_beam.laal"] > words
        assert 0 < metrics[f"simul.{split}.full_sentence_beam.brevity_penalty"] <= 1
        assert 0 < metrics[f"simul.{split}.waitk_tail.precision_1"] <= 100
        gains = client.get_metric_history(run.info.run_id, f"simul.{split}.waitk.speculation.gain")
        assert [m.step for m in gains] == [0, 1]
    for split in ("test_2016_flickr", "test_2017_mscoco", "pooled"):  # the adaptive curves on every set
        for search in ("greedy", "beam", "sbs"):
            assert {m.step for m in client.get_metric_history(
                run.info.run_id, f"simul.{split}.adaptive_{search}.bleu")} == {0}  # one threshold
    for name in ("full_greedy", "full_sentence_greedy"):  # the test-time wait-k curve and the baseline apart
        assert [m.step for m in client.get_metric_history(run.info.run_id, f"simul.pooled.{name}.bleu")] == (
            [0, 1] if name == "full_greedy" else [0])
    # the pooled set is its sets' sentences: latencies are the mean over both (6 sentences each), and a set
    # decoded alone gives what it gave when decoded in one round with the other
    report = json.loads(Path(client.download_artifacts(run.info.run_id, "simultrans_report.json",
                                                       str(tmp_path))).read_text())
    # where the job's time went: every stage timed, logged as it is in the report, within the run's duration
    stages = {"val_grid.waitk", "val_grid.full", "test_curves.waitk", "test_curves.full", "full_sentence",
              "adaptive", "ranking_ablation"}
    assert set(report["seconds"]) == stages and all(s > 0 for s in report["seconds"].values())
    assert {stage: metrics[f"simul.seconds.{stage}"] for stage in stages} == pytest.approx(report["seconds"])
    assert sum(report["seconds"].values()) <= (run.info.end_time - run.info.start_time) / 1000
    sets = report["sets"]
    for label in ("waitk_sbs", "full_tail", "adaptive_sbs"):
        for point, *parts in zip(sets["pooled"]["curves"][label], sets["test_2016_flickr"]["curves"][label],
                                 sets["test_2017_mscoco"]["curves"][label], strict=True):
            written = [6 - p["empty_outputs"] for p in parts]  # latencies average the outputs with a word
            assert point["laal_words"] == pytest.approx(
                sum(p["laal_words"] * n for p, n in zip(parts, written, strict=True)) / sum(written))
    # the val grid's w = 0 cell is the tail beam at b: val's speculation gain is the chosen cell's BLEU minus
    # the w = 0 cell's (same ranking and beam)
    best = report["best"]["waitk"]
    cell = "simul.val_grid.waitk.b3" + ("" if best["length_normalized"] else ".sum")
    grid_bleu = steps(f"{cell}.bleu")  # step = w (0, 1)
    assert metrics["simul.val.speculation_gain_bleu"] == pytest.approx(grid_bleu[best["window"]] - grid_bleu[0],
                                                                       abs=1e-9)
    # the share of outputs that ended before their source was read, the empty outputs, SimulEval's AL and AP
    for name in ("waitk_greedy", "waitk_tail", "waitk_sbs", "full_sentence_beam"):
        key = f"simul.pooled.{name}"
        assert 0.0 <= metrics[f"{key}.ended_before_source"] <= 1.0 and metrics[f"{key}.empty_outputs"] >= 0
        assert f"{key}.al_simuleval" in metrics and 0 < metrics[f"{key}.ap_simuleval"]
    assert metrics["simul.pooled.full_sentence_beam.ended_before_source"] == 0.0  # it reads the whole source
    method = Method("waitk", str(WAITK), "sbs", k=3, beam=best["beam"], window=best["window"],
                    length_normalized=best["length_normalized"])
    connect(None)
    alone = SplitEvaluator(load_config(job), "test_2017_mscoco", 6, BPE)(method)
    together = {m: v for m, v in sets["test_2017_mscoco"]["curves"]["waitk_sbs"][1].items() if m != "k"}
    assert alone == pytest.approx(together, abs=1e-12)
    assert "bleu" in run.data.params["simul.bleu_signature"].lower() or "nrefs" in run.data.params[
        "simul.bleu_signature"]
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"simultrans_report.json", "bleu_vs_laal_test_2016_flickr.png", "bleu_vs_laal_test_2017_mscoco.png",
            "bleu_vs_laal_pooled.png"} <= artifacts


def _data_copy(tmp_path: Path) -> Path:
    """A data folder of links to the shipped Multi30k files."""
    shipped = data_dir()
    copy = tmp_path / "data"
    for src in (shipped / "multi30k").iterdir():
        (copy / "multi30k").mkdir(parents=True, exist_ok=True)
        (copy / "multi30k" / src.name).symlink_to(src)
    return copy


@pytest.mark.parametrize("side, damage, line, message", [
    ("en", lambda lines: lines[:6] + ["\n"] + lines[7:], 7, "is blank"),
    ("en", lambda lines: lines[:-2], 1070, "has no counterpart"),
    # longer than the models' positions hold (the source and its longest output): refused, not a torch error
    ("de", lambda lines: lines[:2] + [" ".join(["Ein Mann fährt mit dem Fahrrad."] * 30) + "\n"] + lines[3:], 3,
     "more than the 122 the translation models take"),
])
def test_a_damaged_test_set_stops_the_job_before_any_decoding(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], side: str, damage,
        line: int, message: str) -> None:
    import gzip

    data = _data_copy(tmp_path)
    target = data / "multi30k" / f"test_2018_flickr.{side}.gz"
    with gzip.open(target, "rt", encoding="utf-8") as fh:
        lines = fh.readlines()
    target.unlink()
    target.write_bytes(gzip.compress("".join(damage(lines)).encode()))
    monkeypatch.setenv("SPECBENCH_DATA", str(data))
    job = tmp_path / "simultrans.toml"
    job.write_text(JOB.format(waitk=WAITK, full=FULL, bpe=BPE).replace(
        'test_splits = ["test_2016_flickr", "test_2017_mscoco"]',
        'test_splits = ["test_2016_flickr", "test_2018_flickr"]'))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["--tracking-uri", uri, "run", str(job)]) == 2
    err = capsys.readouterr().err
    (error,) = [e for e in err.splitlines() if e.startswith("specbench: error:")]
    assert str(job) in error and "test_2018_flickr" in error and f"line {line}" in error and message in error
    assert "Fix:" in error and "Traceback" not in err
    assert "mt_waitk/waitk" not in err  # nothing was decoded
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=["simultrans_test"], output_format="list")
    assert all(r.info.status != "FINISHED" for r in runs)
