"""The simultrans job end to end on the shipped checkpoints (a few sentences, Ray tasks, MLflow), and the
wait-k model's incremental encoder on real sentences."""

from __future__ import annotations

from pathlib import Path

import mlflow
import pytest
import torch

from specbench.cli import main
from specbench.simultrans.checkpoint import load_mt
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
test_sentences = 16
extra_test_splits = ["test_2017_flickr"]
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
    assert metrics["simul.bleu_full"] > 10
    assert "simul.sbs_gain_bleu" in metrics and "simul.sbs_al_increase" in metrics
    # a percentile interval need not contain the point estimate on 16 sentences; it is ordered
    assert metrics["simul.sbs_gain_bleu_low"] <= metrics["simul.sbs_gain_bleu_high"]
    assert metrics["simul.testtime_sbs_gain_bleu_low"] <= metrics["simul.testtime_sbs_gain_bleu_high"]
    assert 0.0 <= metrics["simul.sbs_gain_no_win_share"] <= 1.0
    # the val grid was decoded with both rankings (per token by default, summed beside it) and each model took
    # the better one; the wait-k model's SBS at grid_k is decoded with the other ranking too
    assert run.data.params["simul.length_normalized_speculation"] == "True"
    assert run.data.params["simul.rank_speculations_on_val"] == "True"
    assert {"simul.val_grid.waitk.b3.bleu", "simul.val_grid.waitk.b3.sum.bleu",
            "simul.val_grid.full.b3.sum.al"} <= set(metrics)
    assert {metrics["simul.waitk_ranking_per_token"], metrics["simul.full_ranking_per_token"]} <= {0.0, 1.0}
    chosen = "per_token" if metrics["simul.waitk_ranking_per_token"] else "sum"
    chosen_gain = metrics[f"simul.sbs_gain_bleu_{chosen}_ranking"]
    assert chosen_gain == pytest.approx(metrics["simul.sbs_gain_bleu"], abs=1e-9)
    # the second test set: curves at every k and the gain at grid_k, and the gain over both sets pooled
    for prefix in ("simul.test_2017_flickr.sbs", "simul.test_2017_flickr.testtime_sbs", "simul.all_test.sbs",
                   "simul.all_test.testtime_sbs"):
        assert metrics[f"{prefix}_gain_bleu_low"] <= metrics[f"{prefix}_gain_bleu_high"]
    history = mlflow.tracking.MlflowClient().get_metric_history(run.info.run_id,
                                                               "simul.test_2017_flickr.waitk_sbs.bleu")
    assert [m.step for m in history] == [0, 1]
    assert metrics["simul.sbs_length_ratio_sum_ranking"] > 0 and "simul.sbs_gain_bleu_sum_ranking" in metrics
    history = mlflow.MlflowClient().get_metric_history(run.info.run_id, "simul.waitk_greedy.al")
    assert [m.step for m in history] == [0, 1] and history[0].value < history[1].value  # k = 1, then 3
    assert "bleu" in run.data.params["simul.bleu_signature"].lower() or "nrefs" in run.data.params[
        "simul.bleu_signature"]
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id)}
    assert {"simultrans_report.json", "bleu_vs_al.png", "bleu_vs_al_test_2017_flickr.png"} <= artifacts
