"""`reports.model_card`: how a card's cells are written (floats to 4 significant digits, lists comma-separated),
the exact Markdown of the renderer and of the word-LM/confidence and translation cards (which keys become
the Model table, which nested dicts become tables and under which titles, which optional fields are left out,
settings unrounded, the per-epoch losses to 3 decimals and BLEU to 2 with greedy before SBS), and what
`write_card` and `update` write beside a checkpoint (JSON values as plain numbers and strings, the evaluation
sorted in the Markdown, a checkpoint without a card left alone). Every expected text is written out by hand."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from specbench.reports.model_card import (
    Fields,
    Table,
    Text,
    acoustic_markdown,
    format_value,
    prediction_markdown,
    render,
    translation_markdown,
    update,
    write_card,
)

pytestmark = pytest.mark.unit


def test_cells_round_floats_to_four_significant_digits_and_join_lists() -> None:
    assert format_value(0.123456) == "0.1235" and format_value(1234567.0) == "1.235e+06"
    assert format_value([1, 2]) == "1, 2" and format_value(("a",)) == "a"
    assert format_value(3) == "3" and format_value("x") == "x" and format_value(None) == "None"


def test_render_lays_out_titled_and_untitled_sections() -> None:
    text = render("T", "Intro.", [Fields([("a", 0.5), ("b", [1, 2])], "F"), Text("hello"),
                                  Table(["x", "y"], [[1, 2.25]], "Tab")])
    assert text == ("# T\n\nIntro.\n"
                    "\n## F\n\n| field | value |\n| --- | --- |\n| a | 0.5 |\n| b | 1, 2 |\n"
                    "\nhello\n"
                    "\n## Tab\n\n| x | y |\n| --- | --- |\n| 1 | 2.25 |\n")


def test_prediction_card_markdown() -> None:
    card = {"name": "lm1", "data": "SLURP text.", "licence": "CC", "vocab": 5000, "ppl": 123.456789,
            "model": {"hidden": 256}, "devel_report": {"auc": 0.8}, "empty_one": {},
            "history": [{"epoch": 1, "loss": 2.5}, {"epoch": 2, "loss": 2.125}]}
    assert prediction_markdown(card, "Word LM", "`specbench train lm`") == (
        "# Word LM `lm1`\n\nTrained by `specbench train lm`.\n"
        "\n## Data\n\nSLURP text.\n"
        "\n## Model\n\n| field | value |\n| --- | --- |\n| vocab | 5000 |\n| ppl | 123.5 |\n"  # name, data, licence
        "\n## Settings\n\n| field | value |\n| --- | --- |\n| hidden | 256 |\n"  # and history are not rows
        "\n## Devel report\n\n| field | value |\n| --- | --- |\n| auc | 0.8 |\n"  # the empty dict: no table
        "\n## Training history\n\n| epoch | loss |\n| --- | --- |\n| 1 | 2.5 |\n| 2 | 2.125 |\n"
        "\n## Licence\n\nCC\n")
    plain = prediction_markdown({"name": "c", "history": ["not a dict"]}, "M", "x")
    assert "Training history" not in plain and plain.endswith("\n## Licence\n\n\n")


def test_translation_card_markdown() -> None:
    card = {"name": "mt1", "kind": "wait-k", "direction": "De->En", "train_pairs": 29000,
            "bpe_model": "models/mt_bpe.model", "parameters": 1234567, "device": "cpu", "trained_by": None,
            "best_epoch": 2, "best_devel_loss": 2.34567, "best_devel_bleu": 30.123456,
            "best_selection_sbs_bleu": 31.5, "best_selection_greedy_bleu": None, "epochs": 2, "minutes": 1.5,
            "stopped_because": None, "bpe_sha256": "abc", "model": {"d_model": 32},
            "training": {"lr": 0.000123456}, "selection": {},
            "history": [{"epoch": 1, "train_loss": 3.14159, "devel_loss": 2.71828},
                        {"epoch": 2, "train_loss": 2.5, "devel_loss": 2.34567, "devel_bleu": 30.123456,
                         "selection_greedy_bleu": 29.994, "selection_sbs_bleu": 31.5}],
            "licence": "CC BY"}
    assert translation_markdown(card) == (
        "# Translation model `mt1`\n\nA wait-k Transformer for Multi30k De->En, trained by `specbench train mt` "
        "on the 29,000 training pairs with the project's joint BPE (`models/mt_bpe.model`).\n"
        # trained_by and best_selection_greedy_bleu are None and optional: left out; stopped_because is not
        "\n| field | value |\n| --- | --- |\n| parameters | 1234567 |\n| device | cpu |\n| best_epoch | 2 |\n"
        "| best_devel_loss | 2.346 |\n| best_devel_bleu | 30.12 |\n| best_selection_sbs_bleu | 31.5 |\n"
        "| epochs | 2 |\n| minutes | 1.5 |\n| stopped_because | None |\n| bpe_sha256 | abc |\n"
        "| model.d_model | 32 |\n| training.lr | 0.000123456 |\n"  # settings as written (4 digits: 0.0001235)
        "\n## Per epoch\n\n"
        "| epoch | train loss | devel loss | devel BLEU | devel greedy / SBS BLEU at the selection point |\n"
        "| --- | --- | --- | --- | --- |\n"
        "| 1 | 3.142 | 2.718 | nan | nan / nan |\n"  # one epoch with the selection BLEU: the column for all
        "| 2 | 2.500 | 2.346 | 30.12 | 29.99 / 31.50 |\n"
        "\n## Licence\n\nCC BY\n")


def _acoustic_card() -> dict:
    return {"name": "am1", "train_utterances": 100, "train_hours": 0.25, "train_voices": ["v1", "v2"],
            "devel_utterances": 10, "devel_voices": ["v3"], "corpus": Path("speech/c1"), "parameters": 5000,
            "lookahead_ms": 40, "frame_shift_ms": 40, "model": {"layers": 2}, "training": {"lr": 0.001},
            "best_epoch": 3, "best_devel_per": 0.3456789, "stopped_because": "patience", "licence": "CC0"}


def test_acoustic_card_is_written_and_updated_with_its_evaluation(tmp_path: Path) -> None:
    checkpoint = tmp_path / "am1.pt"
    assert update(checkpoint, {"wer": 0.5}) is None and not checkpoint.with_suffix(".md").exists()  # no card
    card = _acoustic_card()
    write_card(checkpoint, card, acoustic_markdown(card))
    written = json.loads(checkpoint.with_suffix(".json").read_text())
    assert written["corpus"] == "speech/c1" and written["train_voices"] == ["v1", "v2"]  # a Path as its text
    md = checkpoint.with_suffix(".md").read_text()
    assert "| devel/test voices (held out of training) | v3 |\n" in md and "| training voices | v1, v2 |\n" in md
    assert "| model.layers | 2 |\n| training.lr | 0.001 |\n| best epoch | 3 |\n" in md
    assert "| best devel PER (greedy) | 0.3457 |\n" in md and "Evaluation" not in md
    assert md.endswith("\n## Licence\n\nCC0\n")

    assert update(checkpoint, {"wer": np.float32(0.25), "per": 0.125}) == checkpoint.with_suffix(".md")
    written = json.loads(checkpoint.with_suffix(".json").read_text())
    assert written["evaluation"] == {"wer": 0.25, "per": 0.125}  # numbers, not strings
    md = checkpoint.with_suffix(".md").read_text()
    assert ("\n## Evaluation (`specbench run jobs/am_eval.toml`)\n\n| field | value |\n| --- | --- |\n"
            "| per | 0.125 |\n| wer | 0.25 |\n\n## Licence\n") in md  # sorted by name

    checkpoint.with_suffix(".md").write_text("stale")
    before = checkpoint.with_suffix(".json").read_text()
    update(checkpoint)  # re-render only
    assert checkpoint.with_suffix(".md").read_text() == md and checkpoint.with_suffix(".json").read_text() == before


def test_acoustic_card_rerendered_from_its_json_shows_nan_not_none(tmp_path: Path) -> None:
    checkpoint = tmp_path / "am1.pt"
    card = {**_acoustic_card(), "best_devel_per": float("nan")}
    write_card(checkpoint, card, acoustic_markdown(card))
    update(checkpoint, {"wer": float("nan")})
    update(checkpoint)  # re-rendered from the JSON, where each NaN is null
    md = checkpoint.with_suffix(".md").read_text()
    assert "| best devel PER (greedy) | nan |\n" in md and "| wer | nan |\n" in md and "None" not in md


def test_a_card_that_cannot_be_written_leaves_the_old_one_whole(tmp_path: Path) -> None:
    checkpoint = tmp_path / "am1.pt"
    card = _acoustic_card()
    write_card(checkpoint, card, acoustic_markdown(card))
    before = {p.name: p.read_text() for p in tmp_path.iterdir()}
    with pytest.raises(UnicodeEncodeError):  # fails halfway through writing the text
        write_card(checkpoint, card, "x" * 100_000 + "\ud800")
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == before  # no half card, no temporary file
    mask = os.umask(0)
    os.umask(mask)
    assert (checkpoint.with_suffix(".md").stat().st_mode & 0o777) == 0o666 & ~mask  # readable as write_text's



def test_markdown_keeps_angle_brackets_and_bars_and_a_share_short_of_all_is_not_1() -> None:
    """`<unk>` was read as an HTML tag and vanished; a `|` in a value split its cell; 0.99996 printed as 1."""
    text = render("T", "Intro.", [Text("every other word is <unk> & so on"), Fields([("x", "a | b")])])
    assert "every other word is &lt;unk&gt; &amp; so on" in text and "| x | a \\| b |" in text
    assert format_value(0.99996) == "0.99996" and format_value(1.0) == "1" and format_value(0.5) == "0.5"
