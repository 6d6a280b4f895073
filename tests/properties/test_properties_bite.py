"""The properties bite: pointed at followers broken on purpose, Hypothesis finds each one out.

Each test runs the property search of ``test_properties.py`` (same strategies,
same checks) against one follower of ``tests/properties/broken_followers.py`` and asserts
that Hypothesis fails, on the property that follower breaks: other properties
are not what that follower is about, so their violations do not count as its
counterexample. The counterexample found is then run against the library
itself, which must keep that property: the bite is the broken piece's.
"""

from __future__ import annotations

import sys

import pytest
from hypothesis import Phase, given

from ..support.hypothesis_profiles import property_settings
from .broken_followers import (
    DRAINS_FOREVER,
    END_BEFORE_LAST_CHUNK,
    ENDS_ON_HAND_OFF,
    REREADS_STORED_EVENTS,
    RETRIES_AFTER_STOP,
    WAIT_FOR,
    WRAPS_EXCEPTION,
)
from .properties import find_violations
from .run import LIBRARY, Variant, run_step
from .scripts import StepScript
from .strategies import step_scripts
from .violations import (
    ChunksWrong,
    EndMarkCount,
    EndMarkOrder,
    EndMarkWriter,
    ExitTooLate,
    FollowerOutlivedBlock,
    OutcomeChanged,
    PropertyViolation,
    RetriedAfterStop,
    StoredTwice,
)

Bites = tuple[type[PropertyViolation], ...]
# Examples a search may take. A search stops at its first counterexample (most
# are found within a few dozen examples), so this costs time only when nothing
# is found: the wait_for search on 3.12 and later, which must find nothing.
BUDGET = 1000


class Counterexample(Exception):
    def __init__(self, script: StepScript, violation: PropertyViolation) -> None:
        super().__init__(f"{violation} in {script!r}")
        self.script = script
        self.violation = violation


def search(variant: Variant, backend: str, bites: Bites, ci_examples: int) -> Counterexample | None:
    """Run the property search against ``variant``; the counterexample it fails on, if any."""

    @property_settings(
        ci_examples,
        # Stop at the first counterexample: which one, and its size, do not matter here.
        phases=[Phase.explicit, Phase.generate],
        report_multiple_bugs=False,
        database=None,
    )
    @given(script=step_scripts())
    def properties_hold(script: StepScript) -> None:
        for violation in find_violations(run_step(script, backend, variant)):
            if isinstance(violation, bites):
                raise Counterexample(script, violation)

    try:
        properties_hold()
    except Counterexample as found:
        return found
    return None


def assert_bites(variant: Variant, backend: str, bites: Bites, ci_examples: int) -> None:
    found = search(variant, backend, bites, ci_examples)
    assert found is not None, f"no counterexample for a follower that {variant.name}"
    # The library itself keeps that property on the very same script.
    own = find_violations(run_step(found.script, backend, LIBRARY))
    assert not [v for v in own if isinstance(v, bites)], own


@pytest.mark.parametrize("backend", RETRIES_AFTER_STOP.backends)
def test_a_follower_that_retries_after_stop_is_caught(backend: str) -> None:
    assert_bites(RETRIES_AFTER_STOP, backend, (RetriedAfterStop,), ci_examples=BUDGET)


@pytest.mark.parametrize("backend", DRAINS_FOREVER.backends)
def test_a_drain_without_deadline_is_caught(backend: str) -> None:
    assert_bites(DRAINS_FOREVER, backend, (ExitTooLate,), ci_examples=BUDGET)


@pytest.mark.parametrize("backend", WRAPS_EXCEPTION.backends)
def test_a_wrapped_exception_is_caught(backend: str) -> None:
    assert_bites(WRAPS_EXCEPTION, backend, (OutcomeChanged,), ci_examples=BUDGET)


@pytest.mark.parametrize("backend", END_BEFORE_LAST_CHUNK.backends)
def test_an_end_mark_before_the_last_chunk_is_caught(backend: str) -> None:
    bites = (EndMarkOrder, EndMarkCount, ChunksWrong)
    assert_bites(END_BEFORE_LAST_CHUNK, backend, bites, ci_examples=BUDGET)


@pytest.mark.parametrize("backend", REREADS_STORED_EVENTS.backends)
def test_a_resume_that_reads_stored_events_again_is_caught(backend: str) -> None:
    """Events stored twice across attempts: the store's chunks overlap."""
    assert_bites(REREADS_STORED_EVENTS, backend, (StoredTwice,), ci_examples=BUDGET)


@pytest.mark.parametrize("backend", ENDS_ON_HAND_OFF.backends)
def test_an_end_mark_on_hand_off_is_caught(backend: str) -> None:
    """An end mark by an attempt that handed the turn off: the next attempt cannot resume it."""
    assert_bites(ENDS_ON_HAND_OFF, backend, (EndMarkWriter,), ci_examples=BUDGET)


# A lost cancel shows as a block that exits late, a follower that outlives it,
# or reads after the body ended.
LOST_CANCEL = (ExitTooLate, FollowerOutlivedBlock, RetriedAfterStop)


LOSES_CANCELS = sys.version_info < (3, 12)


def test_wait_for_is_caught_where_it_loses_cancels_only() -> None:
    """Python 3.11: a counterexample. 3.12 and later: NO counterexample.

    Python 3.12 rebuilt ``asyncio.wait_for`` on ``asyncio.timeout``, which never
    loses a cancel: there the same follower is correct, and the same search must
    find nothing (the properties point at the lost cancel, not at ``wait_for``).
    asyncio only: the race lives in ``asyncio.wait_for`` and bare asyncio tasks.
    """
    if LOSES_CANCELS:
        assert_bites(WAIT_FOR, "asyncio", LOST_CANCEL, ci_examples=BUDGET)
    else:
        found = search(WAIT_FOR, "asyncio", LOST_CANCEL, ci_examples=BUDGET)
        assert found is None, found
