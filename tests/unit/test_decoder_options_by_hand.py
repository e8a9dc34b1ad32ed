"""`SearchOptions` by hand: which values each field accepts (at the edges: a zero lattice beam is allowed, a
zero acoustic scale or partial interval is not), the pruning part it hands to the search, the refusals of
backends without lattices, partials or partial lattices, and which partial interval a decode call uses."""

from __future__ import annotations

import math

import pytest

from specbench.decoder.options import (
    SearchOptions,
    call_partial_every,
    require_options,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("changes", "says"), [
    ({"acoustic_scale": 0.0}, "acoustic_scale must be a positive finite number"),
    ({"acoustic_scale": math.inf}, "acoustic_scale must be a positive finite number"),
    ({"lattice_beam": -0.5}, "lattice_beam must be a number >= 0"),
    ({"partial_every": 0}, "partial_every must be an int >= 1"),
    ({"partial_every": 1.0}, "partial_every must be an int >= 1"),
    ({"partial_lattices": True}, "partial_lattices needs a lattice"),
])
def test_out_of_range_options_are_refused_naming_the_field(changes: dict, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        SearchOptions(**changes)


def test_the_smallest_allowed_values_are_accepted() -> None:
    options = SearchOptions(acoustic_scale=1e-3, lattice_beam=0.0, partial_every=1)
    assert (options.acoustic_scale, options.lattice_beam, options.partial_every) == (1e-3, 0.0, 1)
    assert SearchOptions(lattice_beam=math.inf, partial_lattices=True).partial_lattices


def test_the_pruning_part_carries_every_pruning_field() -> None:
    pruning = SearchOptions(beam=7.5, max_active=300, min_active=4, beam_delta=0.25).pruning
    assert (pruning.beam, pruning.max_active, pruning.min_active, pruning.beam_delta) == (7.5, 300, 4, 0.25)


def test_a_one_best_backend_refuses_lattices_and_partials() -> None:
    SearchOptions().require_one_best("kaldi")  # nothing asked: no error
    for options, partials in ((SearchOptions(lattice_beam=0.0), False), (SearchOptions(partial_every=2), False),
                              (SearchOptions(), True)):
        with pytest.raises(ValueError, match="the kaldi backend gives 1-best only"):
            options.require_one_best("kaldi", partials)


def test_a_backend_without_partial_lattices_refuses_them() -> None:
    SearchOptions(lattice_beam=2.0).require_no_partial_lattices("twin")
    with pytest.raises(ValueError, match="the twin backend has no partial lattices"):
        SearchOptions(lattice_beam=2.0, partial_lattices=True).require_no_partial_lattices("twin")


def test_a_call_interval_overrides_the_options_interval() -> None:
    assert call_partial_every(SearchOptions(partial_every=3), 5) == 5
    assert call_partial_every(SearchOptions(partial_every=3), None) == 3
    assert call_partial_every(SearchOptions(), 2) == 2
    assert call_partial_every(SearchOptions(), None) is None


def test_options_must_be_search_options() -> None:
    options = SearchOptions(beam=4.0)
    assert require_options("Decoder", options) is options
    with pytest.raises(TypeError, match="Decoder.options must be a specbench.decoder.options.SearchOptions, got dict"):
        require_options("Decoder", {"beam": 4.0})
