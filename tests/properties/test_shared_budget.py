"""A shared example budget: each run its share, from a seed of its own.

The budget and the seed are tests/support/hypothesis_profiles.py's.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ..support import hypothesis_profiles
from ..support.hypothesis_profiles import SHARE_VARIABLE, property_settings, share_seed


def drawn(budget: int) -> list[int]:
    """The integers a shared test of ``budget`` examples draws under this run's share."""
    seen: list[int] = []

    @share_seed
    @property_settings(budget, shared=True)
    @given(st.integers())
    def record(n: int) -> None:
        seen.append(n)

    record()
    return seen


@pytest.fixture(autouse=True)
def ci_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(hypothesis_profiles.PROFILE_VARIABLE, "ci")


def test_each_of_three_runs_tries_a_third_of_the_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SHARE_VARIABLE, "2/3")
    assert property_settings(2500, shared=True).max_examples == 834
    # Not shared: the whole budget whatever the run.
    assert property_settings(2500).max_examples == 2500


def test_unshared_runs_the_whole_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SHARE_VARIABLE, raising=False)
    assert property_settings(2500, shared=True).max_examples == 2500
    monkeypatch.setenv(hypothesis_profiles.PROFILE_VARIABLE, "stress")
    monkeypatch.setenv(SHARE_VARIABLE, "1/3")
    assert property_settings(2500, shared=True).max_examples == 25000


def test_the_shares_try_different_examples_each_the_same_every_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runs = []
    for k in (1, 2, 3):
        monkeypatch.setenv(SHARE_VARIABLE, f"{k}/3")
        runs.append(drawn(60))
        assert drawn(60) == runs[-1], "a share is replayed by running it again"
    first, second, third = (set(run) for run in runs)
    # Apart from the few simplest values every search starts with, the shares differ.
    assert len(first & second) < 10, runs
    assert len(second & third) < 10, runs


@pytest.mark.parametrize("bad", ["0/3", "4/3", "3", "a/b", "1/0"])
def test_a_malformed_share_is_refused(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    monkeypatch.setenv(SHARE_VARIABLE, bad)
    with pytest.raises(ValueError, match=SHARE_VARIABLE):
        property_settings(10, shared=True)
