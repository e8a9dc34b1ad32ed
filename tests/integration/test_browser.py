"""Headless Chromium (Debian's chromium and chromium-driver, through selenium) opens the MLflow UI served by
`specbench server`: a nightly report run and the comparison of two runs show their headline metric names and
values, and the parent run of the quick suite (`jobs/quick.toml`, run here against the server, several
minutes) shows the headline metrics the platform is compared by, its description and its child runs.
Screenshots are kept in `.specbench/test-artifacts/browser/`.

The suite runs as `make run` does on a new machine: in a work directory of its own (every graph, corpus and
score built from the data; only KenLM's binaries and the compiled decoder kernels in ~/.cache are reused) and
on a local Ray of its own, so these tests share no cache with the others and run beside them (`isolated`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_processes import specbench_server

from specbench.tracking.runs import DESCRIPTION_TAG, PARENT_TAG, TrackedRun

pytestmark = [pytest.mark.integration, pytest.mark.isolated]
ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / ".specbench" / "test-artifacts" / "browser"
CHROME_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
                "--disable-dev-shm-usage", "--window-size=1600,1200")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    with specbench_server(tmp_path) as uri:
        yield uri


@pytest.fixture
def browser() -> Iterator[object]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver, "Debian's chromium and chromium-driver are needed (.ci/run installs them)"
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in CHROME_FLAGS:
        options.add_argument(flag)
    web = webdriver.Chrome(service=Service(driver), options=options)
    try:
        yield web
    finally:
        web.quit()


def _page_shows(web, url: str, texts: list[str], shot: str, timeout: float = 60.0) -> str:
    from selenium.webdriver.support.ui import WebDriverWait

    web.get(url)
    SHOTS.mkdir(parents=True, exist_ok=True)
    try:
        WebDriverWait(web, timeout).until(lambda d: all(t in d.find_element("tag name", "body").text for t in texts))
    finally:
        web.save_screenshot(str(SHOTS / shot))
    return web.find_element("tag name", "body").text


def test_ui_shows_a_nightly_run_and_a_comparison(server: str, browser) -> None:
    ids = []
    for name, bleu, gain in (("nightly-a", 34.21, 1.25), ("nightly-b", 35.07, 1.5)):
        with TrackedRun("nightly_ui", name, server, {"suite": "nightly"}) as run:
            run.log_params({"beam": 5})
            run.log_metrics({"simul.bleu_full_pooled": bleu, "simul.speculation_gain_bleu": gain})
            ids.append((run.run_id, run.experiment_id))
    (first, exp), (second, _) = ids
    text = _page_shows(browser, f"{server}/#/experiments/{exp}/runs/{first}",
                       ["simul.bleu_full_pooled", "34.21", "simul.speculation_gain_bleu"], "nightly_run.png")
    assert "nightly-a" in text
    query = urllib.parse.urlencode({"runs": json.dumps([first, second]), "experiments": json.dumps([exp])})
    _page_shows(browser, f"{server}/#/compare-runs?{query}", ["simul.bleu_full_pooled", "34.21", "35.07"],
                "compare_runs.png")
    assert (SHOTS / "nightly_run.png").stat().st_size > 10_000


# What a suite's parent run is for: these side by side, one row per suite (decoder.speedup_vs_kaldi too where
# a GPU ran)
SUITE_HEADLINES = ("prefetch.success_at_fail10", "prefetch.failed_at_fail10", "prefetch.gain_ms_all_at_fail10",
                   "decoder.cpu_vs_kaldi", "asr.real.wer", "confidence.nce")


def _shown(value: float) -> str:
    """A metric value as the MLflow UI prints it (JavaScript's shortest round-trip form)."""
    return str(int(value)) if value.is_integer() else repr(value)


def test_ui_shows_the_quick_suite_parent_run(server: str, browser, tmp_path: Path) -> None:
    from specbench.wfst.kenlm_tools import kenlm_binary

    env = {**os.environ, "SPECBENCH_HOME": str(tmp_path / "home"), "SPECBENCH_LMPLZ": str(kenlm_binary("lmplz"))}
    proc = subprocess.run([sys.executable, "-m", "specbench", "--tracking-uri", server, "run",
                           str(ROOT / "jobs" / "quick.toml")], check=False, cwd=ROOT, capture_output=True,
                          text=True, encoding="utf-8", timeout=1800, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(server)
    exp = client.get_experiment_by_name("quick")
    (parent,) = client.search_runs([exp.experiment_id], filter_string="tags.kind = 'suite'")
    children = client.search_runs([exp.experiment_id], filter_string=f"tags.`{PARENT_TAG}` = '{parent.info.run_id}'")
    assert len(children) == 8 and {c.info.status for c in children} == {"FINISHED"}
    metrics = parent.data.metrics
    wanted = [*SUITE_HEADLINES, *(m for m in ("decoder.speedup_vs_kaldi",) if m in metrics)]
    assert set(wanted) <= set(metrics), sorted(metrics)
    assert all(m in parent.data.tags[DESCRIPTION_TAG] for m in wanted)
    texts = [*wanted, *(_shown(metrics[m]) for m in wanted), "predictive_asr-predictive_asr_quick",
             "bench_decoder-decoder_quick_corpus", "real_speech-real_speech_quick",
             "word_confidence-word_confidence_quick"]  # the metrics table and the child runs
    _page_shows(browser, f"{server}/#/experiments/{exp.experiment_id}/runs/{parent.info.run_id}", texts,
                "quick_suite_parent.png", timeout=120.0)
