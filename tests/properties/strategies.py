"""Hypothesis strategies for step scripts: the agent, the store, the step's body, its attempts.

Every strategy draws plain values (:mod:`tests.properties.scripts`), so a
falsifying example prints as a readable script. Times are drawn partly from
the instants where races live (the poll interval, a backoff's end, the pause
after stop, the drain deadline) and partly at random. About half the steps
are run more than once: attempts that stop, hand off and are run again.
"""

from __future__ import annotations

import functools
from typing import Any

from hypothesis import strategies as st

from follower._backoff import BACKOFF_STEP_SECONDS
from follower._reading._follow import AFTER_STOP_PAUSE_SECONDS

from ..support import hypothesis_profiles as hypothesis_profiles  # registers the profiles
from .scripts import (
    FORMAT,
    TERMINAL_STATES,
    Action,
    Answer,
    Ending,
    Follow,
    PutOp,
    ReadScript,
    Report,
    SecondCancel,
    Sleep,
    StepScript,
    StoppedAttempt,
    StoreScript,
    Ticks,
    TurnScript,
    Until,
    ends_the_step,
)

POLL_INTERVALS = (0.5, 1.0, 2.0)
DRAIN_SECONDS = (0.0, 0.5, 3.0, 7.0)
READ_TIMEOUTS = (1.0, 4.0)

terminal_states = st.sampled_from(TERMINAL_STATES)

# --- the agent ---------------------------------------------------------------------------

# Listed first is what Hypothesis shrinks towards: a healthy page.
ANSWER_KINDS = ("page", "page", "page", "page", "5xx", "transport", "hang", "404", "4xx")


@functools.cache
def answers() -> st.SearchStrategy[Answer]:
    """One read's answer: a page (growing or ending the log first), or a failure."""
    return st.builds(
        Answer,
        kind=st.sampled_from(ANSWER_KINDS),
        grow=st.integers(0, 3),
        finish=st.sampled_from((None, None, None, *TERMINAL_STATES)),
        delay=st.sampled_from((0.0, 0.0, 0.1, 1.0, 2.5)),
    )


@functools.cache
def read_scripts() -> st.SearchStrategy[ReadScript]:
    """An agent's behaviour over time for one task: answers, then a tail forever."""
    return st.builds(
        ReadScript,
        answers=st.lists(answers(), max_size=6).map(tuple),
        # An agent that fails for good is the case the post-stop rules are about.
        tail=st.sampled_from(
            ("terminal", "running", "failing", "terminal", "failing", "hanging", "gone")
        ),
        tail_state=terminal_states,
        page_limit=st.integers(1, 4),
        format=st.sampled_from((FORMAT, FORMAT, None)),
    )


# --- the store ---------------------------------------------------------------------------

PUT_OPS = (
    PutOp(),
    PutOp(),
    PutOp(),
    PutOp(),
    PutOp(),
    PutOp("fail"),
    PutOp("slow", 0.25),
    PutOp("slow", 1.0),
    PutOp("slow", 4.0),
    PutOp("slow", 6.0),
    PutOp("slow", 11.0),
    PutOp("hang"),
)


@functools.cache
def put_ops() -> st.SearchStrategy[PutOp]:
    """One write's answer: succeeds, fails, is slow (below and above the 5 s bound), hangs."""
    return st.sampled_from(PUT_OPS)


@functools.cache
def store_scripts() -> st.SearchStrategy[StoreScript]:
    """The store's answers to successive writes of each kind of object (then success)."""
    return st.builds(
        StoreScript,
        chunk=st.lists(put_ops(), max_size=4).map(tuple),
        task=st.lists(put_ops(), max_size=1).map(tuple),
        meta=st.lists(put_ops(), max_size=1).map(tuple),
        end=st.lists(put_ops(), max_size=2).map(tuple),
        next=st.lists(put_ops(), max_size=2).map(tuple),
    )


# --- the step ----------------------------------------------------------------------------


@functools.cache
def waits(poll: float) -> st.SearchStrategy[Action]:
    """Where the body ends: after a time, or when something happened to its task."""
    times = st.one_of(
        st.sampled_from(
            (
                0.0,
                AFTER_STOP_PAUSE_SECONDS,
                poll,
                2 * poll,
                poll + BACKOFF_STEP_SECONDS,
                2 * poll + BACKOFF_STEP_SECONDS,
            )
        ),
        st.floats(0.0, 40.0, allow_nan=False).map(lambda t: round(t, 3)),
    )
    return st.one_of(
        times.map(Sleep),
        st.builds(
            Until,
            anchor=st.sampled_from(
                ("reads", "chunk_landed", "failed_reads", "retry", "chunk_started", "follower_done")
            ),
            count=st.integers(1, 4),
            max_wait=st.sampled_from((5.0, 30.0, 90.0)),
        ),
    )


ERRORS = ("value", "custom", "group", "base", "library")
REPORTS = ("completed", "Cancelled", "failed", "rejected", "COMPLETED", "canceled")
_REPORTS = st.one_of(st.none(), st.sampled_from(REPORTS))
_FOLLOWS = st.sampled_from((True, True, True, False))
_FOLLOW_DELAYS = st.sampled_from((0.0, 0.0, 0.1, 1.0, 5.0))
_TICKS = st.integers(0, 3)


@functools.cache
def endings() -> st.SearchStrategy[Ending]:
    return st.builds(
        Ending,
        # Returns twice as often: the drain after stop is where most of the rules live.
        how=st.sampled_from(("returns", "returns", "raises", "cancelled")),
        error=st.sampled_from(ERRORS),
        escapes=st.booleans(),
    )


@functools.cache
def _wait_lists(poll: float) -> st.SearchStrategy[list[Action]]:
    return st.lists(waits(poll), max_size=2)


@st.composite
def turn_scripts(draw: Any, poll: float) -> TurnScript:
    """A turn's body: maybe follow (after a while), wait, maybe report, then end."""
    actions: list[Action] = []
    if draw(_FOLLOWS):
        delay = draw(_FOLLOW_DELAYS)
        if delay:
            actions.append(Sleep(delay))
        actions.append(Follow())
    actions.extend(draw(_wait_lists(poll)))
    ticks = draw(_TICKS)
    if ticks:
        actions.append(Ticks(ticks))
    report = draw(_REPORTS)
    if report is not None:
        actions.append(Report(report))
    return TurnScript(tuple(actions), draw(endings()), draw(read_scripts()))


@functools.cache
def second_cancels(turns: int, drain: float) -> st.SearchStrategy[SecondCancel]:
    """A cancel from outside the step, placed around one turn's end."""
    turn = st.integers(0, turns - 1)
    ticks = st.integers(0, 3).map(float)
    return st.one_of(
        st.builds(SecondCancel, turn, st.just("with_end")),
        st.builds(SecondCancel, turn, st.just("ticks"), ticks),
        st.builds(
            SecondCancel,
            turn,
            st.just("after"),
            st.sampled_from((AFTER_STOP_PAUSE_SECONDS, drain + AFTER_STOP_PAUSE_SECONDS, 5.0, 12.0))
            | st.floats(0.0, 20.0, allow_nan=False).map(lambda t: round(t, 3)),
        ),
        st.builds(SecondCancel, turn, st.just("drain_deadline")),
        st.builds(SecondCancel, turn, st.just("end_mark"), ticks),
    )


# How a stopped attempt ends after it hands off: the worker is cancelled, a failure
# that will be retried, or a worker that shuts down after the turn.
STOPPED_HOWS = ("cancelled", "raises", "returns")
_STOPPED_COUNTS = st.sampled_from((0, 0, 1, 2))
_FINISHED = st.sampled_from((True, True, True, False))


@st.composite
def stopped_attempts(draw: Any, turns: tuple[TurnScript, ...], plain: bool) -> StoppedAttempt:
    """An attempt that hands off and stops in a turn the step reaches, after some of its actions."""
    reached = next((k for k, t in enumerate(turns) if ends_the_step(t)), len(turns) - 1)
    turn = draw(st.integers(0, reached))
    actions = turns[turn].actions
    # Most often after every action: the body's work is done, and it hands off at its end.
    cut = draw(st.one_of(st.just(len(actions)), st.integers(0, len(actions))))
    # turn.hand_off() leaves the step's null link out only for the last turn that
    # followed: a LiveTurns step hands a turn off by itself once that turn follows.
    if plain:
        whom = "turn"
    elif Follow() in actions[:cut]:
        whom = draw(st.sampled_from(("step", "turn")))
    else:
        whom = "step"
    how = draw(st.sampled_from(STOPPED_HOWS))
    error = draw(st.sampled_from(ERRORS)) if how == "raises" else "value"
    return StoppedAttempt(turn, cut, how, error, whom)


_POLLS = st.sampled_from(POLL_INTERVALS)
_DRAINS = st.sampled_from(DRAIN_SECONDS)
_READ_TIMEOUTS = st.sampled_from(READ_TIMEOUTS)


@functools.cache
def _turn_scripts(poll: float) -> st.SearchStrategy[TurnScript]:
    return turn_scripts(poll)


@functools.cache
def _maybe_second_cancels(turns: int, drain: float) -> st.SearchStrategy[SecondCancel | None]:
    return st.one_of(st.none(), st.none(), second_cancels(turns, drain))


@st.composite
def step_scripts(draw: Any, max_turns: int = 3) -> StepScript:
    """A step: several turns in a row, each followed (or not) and ended somehow; maybe retried."""
    poll = draw(_POLLS)
    drain = draw(_DRAINS)
    count = draw(st.integers(1, max_turns))
    turns = tuple(draw(_turn_scripts(poll)) for _ in range(count))
    plain = count == 1 and draw(st.booleans())
    stopped = tuple(draw(stopped_attempts(turns, plain)) for _ in range(draw(_STOPPED_COUNTS)))
    finished = draw(_FINISHED) if stopped else True
    second = draw(_maybe_second_cancels(count, drain)) if finished else None
    return StepScript(
        turns=turns,
        poll_interval_seconds=poll,
        drain_seconds=drain,
        read_timeout_seconds=draw(_READ_TIMEOUTS),
        store=draw(store_scripts()),
        second_cancel=second,
        plain=plain,
        stopped=stopped,
        finished=finished,
    )
