"""The usage simulation (`data/usage.py`) at its edges: a pool of exactly enough
new texts, one text short at any routine share, which requests get the first new texts, the `min_sentences`
boundary, `usage_summary` on a log small enough to count by hand, and the rate an exhausted pool's error names."""

from __future__ import annotations

import math

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from specbench.data import usage
from specbench.data.usage import Population, UsageSettings, User, UserSentence, population, simulate_usage
from specbench.errors import DataError

pytestmark = pytest.mark.unit


def _sentence(sid: int, text: str, scenario: str) -> UserSentence:
    return UserSentence(sid, text, text, scenario, f"{scenario}_query")


OWN = tuple(_sentence(i, f"own text {i}", "alarm") for i in range(5))
USER = User("T-1", OWN)


def _others(count: int, scenario: str = "music", start: int = 0) -> tuple[UserSentence, ...]:
    return tuple(_sentence(1000 + start + i, f"{scenario} text {start + i}", scenario) for i in range(count))


def _requests() -> int:
    """How many requests T-1 makes at the default settings (the pool plays no part in it)."""
    return simulate_usage(Population((USER,), 0, "test", pool=OWN + _others(500)), UsageSettings()).num_rows


@pytest.mark.parametrize("share", [0.0, 0.9])
def test_exactly_enough_new_texts_suffice_and_one_fewer_is_a_data_error(share: float) -> None:
    """Every request is given a never-said text whatever the share, so T-1's n requests need n texts that
    are not its own: a pool of its own 5 sentences and n others works (at share 0 each other text is said
    exactly once), n - 1 others is the documented `DataError` (naming a supply of n - 1), not a crash."""
    n = _requests()
    assert n > 20
    log = simulate_usage(Population((USER,), 0, "test", pool=OWN + _others(n)), UsageSettings(routine_share=share))
    one_offs = [r["normalized_text"] for r in log.to_pylist() if not r["routine"]]
    assert len(one_offs) == len(set(one_offs)) and not set(one_offs) & {s.normalized_text for s in OWN}
    if share == 0.0:
        assert sorted(one_offs) == sorted(s.normalized_text for s in _others(n))
    short = Population((USER,), 0, "test", pool=OWN + _others(n - 1))
    with pytest.raises(DataError, match=rf"T-1 of the test split makes {n} requests.* holds {n - 1}\. Fix"):
        simulate_usage(short, UsageSettings(routine_share=share))


def test_the_first_new_texts_go_to_the_requests_that_stay_one_offs_longest() -> None:
    """T-1's sentences are all "alarm" and the pool holds 3 other alarm texts: the first three texts handed
    out are the scenario-matched ones. They go to the requests with the highest kind draws, which are the
    one-offs at every share, so at any share the m one-offs hold min(3, m) matched texts."""
    pool = OWN + _others(3, "alarm") + _others(_requests())
    seen_few = False
    for share in (0.0, 0.2, 0.5, 0.8, 0.9, 0.95, 0.97, 0.99):
        log = simulate_usage(Population((USER,), 0, "test", pool=pool), UsageSettings(routine_share=share))
        one_offs = [r for r in log.to_pylist() if not r["routine"]]
        matched = [r for r in one_offs if r["scenario_matched"]]
        assert len(matched) == min(3, len(one_offs)), share
        assert all(r["scenario"] == "alarm" for r in matched)
        assert all(r["scenario"] == "music" for r in one_offs if not r["scenario_matched"])
        seen_few |= 0 < len(one_offs) < 3
    assert seen_few  # some share leaves fewer one-offs than matched texts


def test_min_sentences_keeps_exactly_the_users_with_at_least_that_many() -> None:
    """Users with exactly `min_sentences` sentences are kept (the default 5 and a middle count, each the
    sentence count of some test user, so the boundary is exercised)."""
    every = population("test", min_sentences=1)
    counts = sorted({len(u.sentences) for u in every.users})
    for m in (min(c for c in counts if c >= 5), counts[len(counts) // 2]):
        kept = population("test", min_sentences=m)
        assert [u.user_id for u in kept.users] == [u.user_id for u in every.users if len(u.sentences) >= m]
        assert kept.dropped_users == every.dropped_users + sum(len(u.sentences) < m for u in every.users)


def test_usage_summary_counted_by_hand() -> None:
    """Two users; week 1 is history. u1 evaluated: "a" (said in week 1: repeat, routine), "b" (first time,
    one-off, matched), "a" (repeat, routine), "c" (one-off, not matched). u2 evaluated: "a" (u1's text does
    not count: no repeat, one-off, matched). So 5 evaluated, 2 repeats, 2 routine, 3 one-offs (all other
    speakers'), 2 of them in the wanted scenario."""
    rows = [  # user, text, evaluated, source, matched, time
        ("u1", "a", False, "routine", False, 10), ("u1", "a", True, "routine", False, 700_000),
        ("u1", "b", True, "other_speaker", True, 700_100), ("u1", "a", True, "routine", False, 700_200),
        ("u1", "c", True, "other_speaker", False, 700_300), ("u2", "a", True, "other_speaker", True, 700_000),
    ]
    log = pa.table({name: [r[i] for r in rows] for i, name in enumerate(
        ("user_id", "normalized_text", "evaluated", "text_source", "scenario_matched", "timestamp_s"))})
    got = usage.usage_summary(log)
    assert got == {"usage.repeat_rate": 2 / 5, "usage.routine_request_share": 2 / 5,
                   "usage.one_off_other_speaker_share": 1.0, "usage.other_speaker_same_scenario_share": 2 / 3}
    routine_only = usage.usage_summary(log.filter(pc.equal(log["text_source"], "routine")))
    assert routine_only["usage.routine_request_share"] == 1.0
    assert math.isnan(routine_only["usage.one_off_other_speaker_share"])


def test_an_exhausted_pool_names_the_largest_fitting_step_below_an_off_grid_rate() -> None:
    """At 3.45 requests a day T-1 needs more texts than a pool of 56 others holds. The error is to name the
    largest `requests_per_day` in steps of 0.1 at which T-1's requests fit: found here by brute force,
    simulating 3.4, 3.3, .. with that pool until one runs."""
    short = Population((USER,), 0, "test", pool=OWN + _others(56))
    with pytest.raises(DataError, match="requests_per_day <= ") as error:
        simulate_usage(short, UsageSettings(routine_share=0.0, requests_per_day=3.45))
    fits = None
    for tenths in range(34, 0, -1):
        try:
            simulate_usage(short, UsageSettings(routine_share=0.0, requests_per_day=tenths / 10))
        except DataError:
            continue
        fits = tenths / 10
        break
    assert fits is not None and f"requests_per_day <= {fits:g} " in str(error.value)


@pytest.mark.parametrize(("line", "what"), [("FE-1,12", "fewer"), ("FE-1,12,f,3,extra", "more")])
def test_a_speaker_row_with_the_wrong_number_of_fields_is_named_not_filled(tmp_path, line: str, what: str) -> None:
    import gzip

    path = tmp_path / "speakers.csv.gz"
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.write(f"speaker,age,gender,count\nFE-2,30,m,4\n{line}\n")
    with pytest.raises(DataError, match=rf"speakers.csv.gz, line 3: {what} fields than the header's 4. Fix"):
        usage._read_rows_at(path, ("speaker", "age", "gender", "count"))

