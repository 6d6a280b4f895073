"""A LiveTurns step built rule by rule: turns, follows, ends, agent and store failures, cancels,
and workers that stop, hand off and leave the step to be run again.

Rules are synchronous and a step is async, so the machine writes the step's
timeline as it goes (each rule is one action of the open turn's body, or opens
or ends a turn) and runs the whole step at teardown, on a fresh virtual clock,
then checks the six properties. Hypothesis shrinks failing runs rule by rule,
and prints them as the calls that rebuild the step.
"""

from __future__ import annotations

from typing import Any

from hypothesis import event, note
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from ..support.hypothesis_profiles import property_settings, share_seed
from .properties import check_properties, describe
from .run import run_step
from .scripts import (
    Action,
    AgentAnswers,
    Ending,
    Finish,
    Follow,
    Publish,
    ReadScript,
    Report,
    SecondCancel,
    StepScript,
    StoppedAttempt,
    StoreAnswers,
    StoreScript,
    Ticks,
    TurnScript,
)
from .strategies import (
    DRAIN_SECONDS,
    ERRORS,
    POLL_INTERVALS,
    READ_TIMEOUTS,
    REPORTS,
    STOPPED_HOWS,
    answers,
    endings,
    put_ops,
    read_scripts,
    store_scripts,
    terminal_states,
    waits,
)

MAX_TURNS = 4
MAX_STOPPED = 2
SECOND_CANCEL_ANCHORS = ("with_end", "ticks", "after", "drain_deadline", "end_mark")


@share_seed  # inherited by the trio machine
class LiveTurnsStep(RuleBasedStateMachine):
    backend = "asyncio"

    def __init__(self) -> None:
        super().__init__()
        self.done: list[TurnScript] = []
        self.actions: list[Action] | None = None
        self.task: ReadScript | None = None
        self.followed = False
        self.step_over = False
        self.second: SecondCancel | None = None
        self.poll = 1.0
        self.drain = 0.0
        self.read_timeout = 1.0
        self.store = StoreScript()
        self.stopped: list[StoppedAttempt] = []
        self.finished = True

    # --- the step's settings, and its first turn ---------------------------------------

    @initialize(
        poll=st.sampled_from(POLL_INTERVALS),
        drain=st.sampled_from(DRAIN_SECONDS),
        read_timeout=st.sampled_from(READ_TIMEOUTS),
        store=store_scripts(),
        task=read_scripts(),
        follow_at_once=st.booleans(),
    )
    def configure(
        self,
        poll: float,
        drain: float,
        read_timeout: float,
        store: StoreScript,
        task: ReadScript,
        follow_at_once: bool,
    ) -> None:
        self.poll, self.drain, self.read_timeout, self.store = poll, drain, read_timeout, store
        self._open(task, follow_at_once)

    # No rule has a precondition: a rule that no longer applies (the step is over,
    # the turn already follows its task) does nothing, so no draw is ever wasted.

    # --- turns -----------------------------------------------------------------------

    @rule()
    def follow(self) -> None:
        if self.actions is not None and not self.followed:
            self._act(Follow())
            self.followed = True

    @rule(ending=endings(), next_task=read_scripts(), follow_at_once=st.booleans())
    def end_turn(self, ending: Ending, next_task: ReadScript, follow_at_once: bool) -> None:
        """End the open turn; the step goes on with the next one, unless this ended it."""
        if self.actions is None:
            return
        self._close(ending)
        if not self.step_over and len(self.done) < MAX_TURNS:
            self._open(next_task, follow_at_once)

    # --- the body's waits and reports ------------------------------------------------

    @rule(data=st.data())
    def wait(self, data: Any) -> None:
        self._act(data.draw(waits(self.poll)))

    @rule(count=st.integers(1, 3))
    def ticks(self, count: int) -> None:
        self._act(Ticks(count))

    @rule(state=st.sampled_from(REPORTS))
    def report(self, state: str) -> None:
        self._act(Report(state))

    # --- the agent and the store -----------------------------------------------------

    @rule(count=st.integers(1, 5))
    def agent_publishes(self, count: int) -> None:
        self._act(Publish(count))

    @rule(state=terminal_states)
    def agent_finishes(self, state: Any) -> None:
        self._act(Finish(state))

    @rule(next_answers=st.lists(answers(), min_size=1, max_size=3))
    def agent_answers(self, next_answers: list[Any]) -> None:
        """The next reads fail, hang, are slow or answer pages; then the task's script resumes."""
        self._act(AgentAnswers(tuple(next_answers)))

    @rule(
        kind=st.sampled_from(("chunk", "end", "next", "meta", "task")),
        ops=st.lists(put_ops(), min_size=1, max_size=3),
    )
    def store_answers(self, kind: str, ops: list[Any]) -> None:
        self._act(StoreAnswers(kind, tuple(ops)))

    # --- a cancel from outside -------------------------------------------------------

    @rule(
        anchor=st.sampled_from(SECOND_CANCEL_ANCHORS),
        value=st.sampled_from((0.0, 1.0, 2.0, 0.2, 5.0, 12.0)),
    )
    def cancel_from_outside(self, anchor: str, value: float) -> None:
        """Cancel the step around the end of the open turn (once a step)."""
        if self.second is None and self.actions is not None:
            turn = len(self.done)
            ticks = min(value, 3.0)
            self.second = SecondCancel(turn, anchor, value if anchor == "after" else ticks)

    # --- attempts ---------------------------------------------------------------------

    @rule(how=st.sampled_from(STOPPED_HOWS), error=st.sampled_from(ERRORS), by_turn=st.booleans())
    def stop_and_run_again(self, how: str, error: str, by_turn: bool) -> None:
        """A worker stops here: it hands off and the attempt ends; the step is run again."""
        if self.actions is None or len(self.stopped) >= MAX_STOPPED:
            return
        # turn.hand_off() keeps the null link out only once the turn follows.
        whom = "turn" if by_turn and self.followed else "step"
        error = error if how == "raises" else "value"
        self.stopped.append(StoppedAttempt(len(self.done), len(self.actions), how, error, whom))

    @rule()
    def no_worker_comes_back(self) -> None:
        """The step's last attempt hands off too: nothing ends it for good."""
        self.finished = False

    # --- running it ------------------------------------------------------------------

    def _open(self, task: ReadScript, follow_at_once: bool) -> None:
        self.actions, self.task, self.followed = [], task, False
        if follow_at_once:
            self.follow()

    def _act(self, action: Action) -> None:
        if self.actions is not None:
            self.actions.append(action)

    def _close(self, ending: Ending) -> None:
        assert self.actions is not None
        assert self.task is not None
        self.done.append(TurnScript(tuple(self.actions), ending, self.task))
        self.actions = None
        if ending.how != "returns" and ending.escapes:
            self.step_over = True

    def teardown(self) -> None:
        if self.actions is not None:
            self._close(Ending("returns"))
        if not self.done:
            return  # the run stopped before its first turn was set up
        finished = self.finished or not self.stopped
        second = self.second
        if second is not None and (second.turn >= len(self.done) or not finished):
            second = None
        script = StepScript(
            turns=tuple(self.done),
            poll_interval_seconds=self.poll,
            drain_seconds=self.drain,
            read_timeout_seconds=self.read_timeout,
            store=self.store,
            second_cancel=second,
            stopped=tuple(self.stopped),
            finished=finished,
        )
        note(repr(script))
        world = run_step(script, self.backend)
        note(world.timeline())
        for label in describe(world):
            event(label)
        check_properties(world)


class LiveTurnsStepOnTrio(LiveTurnsStep):
    backend = "trio"


# Shared across the Pythons of one make test: together they run the 500.
STATEFUL_SETTINGS = property_settings(500, shared=True, stateful_step_count=25)

TestLiveTurnsStepOnAsyncio = LiveTurnsStep.TestCase
TestLiveTurnsStepOnAsyncio.settings = STATEFUL_SETTINGS
TestLiveTurnsStepOnTrio = LiveTurnsStepOnTrio.TestCase
TestLiveTurnsStepOnTrio.settings = STATEFUL_SETTINGS
