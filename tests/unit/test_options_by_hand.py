"""The command line by hand: the comma lists a `bench` option takes (positive integers; names with '-' read as
'_'), the options a config makes (none for `name`; the default shown, `none` for an unset one), the bounds of
`runs --limit`, and the parser's documented defaults."""

from __future__ import annotations

import argparse

import pytest

from specbench.cli.options import add_config_options, int_list, name_list
from specbench.cli.parser import build_parser
from specbench.config import BenchDecoderConfig

pytestmark = pytest.mark.unit


def test_int_list_reads_positive_integers() -> None:
    assert int_list("1,2, 4") == [1, 2, 4]
    assert int_list("1,") == [1]


@pytest.mark.parametrize("text", ["0", "1,0", "-1", "", ",", "a,1"])
def test_int_list_refuses_anything_but_positive_integers(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=f"expected positive integers separated by commas, got "
                                                        f"{text!r}"):
        int_list(text)


def test_name_list_reads_dashes_as_underscores() -> None:
    assert name_list("cpu-lattice, twin ,") == ["cpu_lattice", "twin"]


def test_a_config_makes_no_name_option_and_shows_each_default() -> None:
    parser = argparse.ArgumentParser()
    add_config_options(parser, BenchDecoderConfig)
    flags = {flag: action for action in parser._actions for flag in action.option_strings}
    assert "--name" not in flags and "--tracking" not in flags
    assert flags["--graph"].help == "default: none"
    assert flags["--utterances"].help == "default: 1000"
    assert flags["--gpu-decoders"].help == "comma-separated (default: 1,2,4,8)"


def test_runs_limit_is_at_least_one(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    assert parser.parse_args(["runs", "--limit", "1"]).limit == 1
    with pytest.raises(SystemExit):
        parser.parse_args(["runs", "--limit", "0"])
    assert "'0' is not a whole number >= 1" in capsys.readouterr().err
    assert parser.parse_args(["runs", "--limit", "50000"]).limit == 50000
    with pytest.raises(SystemExit):
        parser.parse_args(["runs", "--limit", "50001"])
    assert "--limit: '50001' is more than 50000, the most runs MLflow lists" in capsys.readouterr().err


def test_the_parser_defaults_are_the_documented_ones() -> None:
    parser = build_parser()
    assert parser.parse_args(["runs"]).limit == 20
    decode = parser.parse_args(["decode", "--graph", "g.fst", "--scores", "s.npz", "--out", "o.jsonl"])
    assert (decode.backend, decode.beam, decode.max_active, decode.min_active, decode.acoustic_scale) == (
        "cpu", 15.0, 10000, 20, 1.0)
    assert parser.parse_args(["server"]).port == 5000 and parser.parse_args(["ui"]).port == 5000
    assert parser.parse_args(["train", "mt", "job.toml"]).device == "auto"
