"""What a job's report says when its job file evaluates only some of the data's test sets. The project reports
every test set (the committed job files name them all); a user's job file may name fewer, for a quick look, and
then its headline covers those sets only: the report lists the others (`left_out`) and the summary says so
(`left_out_lines`), so that a figure from a subset is not read as the whole."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def left_out(chosen: Iterable[str], every: Sequence[str]) -> list[str]:
    """The sets of `every` (in its order) that `chosen` does not name."""
    named = set(chosen)
    return [name for name in every if name not in named]


def left_out_lines(left: Sequence[str], key: str) -> list[str]:
    """The summary's line about the sets left out (none when every set was evaluated)."""
    if not left:
        return []
    return [f"  not evaluated: {', '.join(left)} (not in the job file's {key}; the figures above cover "
            "only the sets it names)"]
