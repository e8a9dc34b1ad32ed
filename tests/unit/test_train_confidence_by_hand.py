"""The `train_confidence` job's parts by hand: where each model is written beside `output` and which features
each model role uses, the training rows (predictions that add at least one word), the card's plain report
with what each member ran, and the summary lines."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from specbench.experiments.train_confidence import (
    ROLES,
    _plain_report,
    _rows,
    context_path,
    no_personal_path,
    posterior_path,
    summary,
)
from specbench.prediction.confidence import ConfidenceReport, MemberReport

pytestmark = pytest.mark.unit


def test_each_model_role_has_its_features_and_its_file_beside_the_output() -> None:
    out = Path("models/conf.pt")
    assert no_personal_path(out) == Path("models/conf_nopersonal.pt")
    assert context_path(out) == Path("models/conf_context.pt")
    assert posterior_path(out) == Path("models/conf_posterior.pt")
    got = {role: (personal, context, posterior, path_of(out))
           for role, (personal, context, posterior, path_of) in ROLES.items()}
    assert got == {"personal": (True, False, False, out),
                   "no_personal": (False, False, False, Path("models/conf_nopersonal.pt")),
                   "context": (True, True, False, Path("models/conf_context.pt")),
                   "posterior": (True, False, True, Path("models/conf_posterior.pt"))}


def test_the_training_rows_are_the_predictions_that_add_a_word() -> None:
    predictions = pl.DataFrame({"request_id": ["a", "b", "c", "d"], "added_words": [0, 1, 3, 0]})
    assert _rows(predictions)["request_id"].to_list() == ["b", "c"]


def _report() -> ConfidenceReport:
    members = (MemberReport(0, 7, best_epoch=3, epochs_run=6, devel_log_loss=0.41, devel_auc=0.80,
                            stopped="patience", seconds=1.5),
               MemberReport(1, 8, best_epoch=5, epochs_run=5, devel_log_loss=0.40, devel_auc=0.81,
                            stopped="epochs", seconds=1.25))
    return ConfidenceReport(train_rows=900, devel_rows=300, train_positive_rate=0.25, devel_positive_rate=0.5,
                            devel_log_loss=0.375, devel_auc=0.8125, features=("lm_log_prob", "lm_rank"),
                            members=members, seconds=3.0)


def test_the_cards_report_lists_what_each_member_ran() -> None:
    plain = _plain_report(_report())
    assert plain == {"train_rows": 900, "devel_rows": 300, "train_positive_rate": 0.25, "devel_positive_rate": 0.5,
                     "devel_log_loss": 0.375, "devel_auc": 0.8125, "seconds": 3.0,
                     "members_epochs_run": "6, 5", "members_best_epoch": "3, 5",
                     "members_stopped": "patience, epochs"}


def test_the_summary_names_the_rows_the_rates_and_each_models_figures() -> None:
    data = {"train_predictions": 12345, "devel_predictions": 678, "train_positive_rate": 0.25,
            "devel_positive_rate": 0.3125, "asr_wer_train_users": 0.1, "asr_wer_devel_users": 0.125}
    result = {"output": Path("models/conf.pt"), "data": data,
              "cards": {"personal": {"report": {"devel_auc": 0.8125, "devel_rows": 300, "members_stopped": "x"}},
                        "no_personal": {"report": {"devel_auc": 0.75}}}}
    assert summary(result) == [
        ("confidence models personal, no_personal (models/conf.pt and beside it): 12,345 training and 678 devel "
        "predictions (positive 0.250 / 0.312); ASR WER train users 0.100, devel users 0.125"),
        "  personal: devel_auc 0.8125", "  no_personal: devel_auc 0.75"]
