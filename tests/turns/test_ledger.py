"""The step's ledger driven rule by rule, with no event loop: its plans keep the turns' rules.

``follower/_turns/_ledger.py`` holds every decision of a step's turns (whose turn it
is, its links, hand-off, what each exit writes, the step's last mark) and does
no I/O, so Hypothesis drives it directly: turns opened on what a store may hold,
followed, reported, handed off, lost to another run, linked, exited, and the
step ended, in any order. A model of the documented rules (docs/design.md §6,
§9) says what each transition must plan, and the invariants hold across the
whole step: every turn that followed and ended for good has exactly one planned
end mark, and no other turn has any; a turn another run took is never marked,
nor linked from, nor made the step's last; the step's last mark goes on its
last followed turn, once, and never after a hand-off.

``test_the_machine_catches_each_planted_bug`` runs the same machine against a
ledger with one rule broken, and expects it to fail.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from follower import (
    InvalidArgumentError,
    TrajectoryState,
    TurnConflictError,
    TurnExistsError,
    TurnStateError,
)
from follower._format._layout import EndMark, NextLink, TaskMark, TurnKeys
from follower._storing._stored_turn import StoredTurn
from follower._turns._ledger import EndMarkPlan, Outcome, StepEnd, StepLedger, TurnExit, TurnRecord

from ..support.imports import imports_reached

PREFIX = "step/"
TURN_IDS = ("t0", "t1", "t2", "t3", "t4")
TASK_IDS = ("task-a", "task-b")
TERMINAL = (TrajectoryState.COMPLETED, TrajectoryState.FAILED, TrajectoryState.CANCELED)

MACHINE_SETTINGS = settings(
    max_examples=200,
    stateful_step_count=30,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@st.composite
def stored_turns(draw: Any, turn_id: str) -> StoredTurn:
    """What a store may hold of a turn on entry: nothing, a turn of some task, or debris."""
    keys = TurnKeys(PREFIX, turn_id)
    kind = draw(st.sampled_from(["empty"] * 4 + ["task", "task", "no task", "end only"]))
    if kind == "empty":
        return StoredTurn(keys, (), (), None, None, None, None)
    events = draw(st.integers(0, 3))
    chunks = ((0, events),) if events else ()
    task = TaskMark(draw(st.sampled_from(TASK_IDS)), "http://agent/ext", "2026-01-01T00:00:00Z")
    end = None
    if kind == "end only" or draw(st.booleans()):
        end = EndMark(draw(st.sampled_from(TERMINAL)), events, draw(st.booleans()))
    if kind in ("no task", "end only"):
        task = None
    names = ("task.json",) * (task is not None) + ("c",) * len(chunks) + ("end.json",) * bool(end)
    if kind == "no task" and not names:
        names = ("meta.json",)  # a turn whose only object says its format
    fmt = draw(st.sampled_from([None, "f/v1"]))
    return StoredTurn(keys, names, chunks, task, fmt, end, None)


@attrs.define
class ModelTurn:
    """What the rules say of one turn, kept beside its record."""

    record: TurnRecord
    stored: StoredTurn | None
    task_id: str | None = None
    linked_from: str | None = None
    link_landed: bool = False
    follows: bool = False
    reported: TrajectoryState | None = None
    handed_off: bool = False
    taken_while_open: bool = False
    exit: TurnExit | None = None


class LedgerMachine(RuleBasedStateMachine):
    """One step's ledger, and a model of the rules it must keep."""

    def __init__(self) -> None:
        super().__init__()
        self.ledger = StepLedger()
        self.turns: dict[str, ModelTurn] = {}  # entered, in the order they were
        self.used: set[str] = set()
        self.last_followed: str | None = None
        self.last_task: str | None = None
        self.step_handing_off = False
        self.taken: set[str] = set()
        self.step_ended = False
        self.lone_turn = False
        self.hands_off = False
        self.end_marks: dict[str, int] = {}

    @initialize(
        previous=st.sampled_from([None, None, None, "t0", "before"]),
        hands_off=st.sampled_from([False, False, True]),
    )
    def a_step_or_a_lone_turn(self, previous: str | None, hands_off: bool) -> None:
        # A lone turn's ledger starts at its previous_turn_id (even its own id).
        self.ledger = StepLedger(previous)
        # A hand-off turns off every end mark: most steps are drawn without one,
        # or the rules of steps that end for good would seldom be seen.
        self.hands_off = hands_off
        self.last_followed = previous
        self.lone_turn = previous is not None  # its step has no end of its own

    # --- helpers ---------------------------------------------------------------------

    def _open(self) -> list[str]:
        return [t for t, m in self.turns.items() if m.exit is None]

    def _exited(self) -> list[str]:
        return [t for t, m in self.turns.items() if m.exit is not None]

    def _handing_off(self, turn: ModelTurn) -> bool:
        return turn.handed_off or self.step_handing_off

    # --- rules -----------------------------------------------------------------------

    @rule(data=st.data(), turn_id=st.sampled_from(TURN_IDS), resume=st.booleans())
    def open_a_turn(self, data: st.DataObject, turn_id: str, resume: bool) -> None:
        keys = TurnKeys(PREFIX, turn_id)
        if self.step_ended or turn_id in self.used:
            with pytest.raises(TurnStateError):
                self.ledger.check_opening(turn_id)
            with pytest.raises(TurnStateError):
                self.ledger.open_turn(keys, resume=resume)
            return
        record = self.ledger.open_turn(keys, resume=resume)
        self.used.add(turn_id)
        record.entering()
        stored = data.draw(stored_turns(turn_id))
        if not stored.is_empty and not resume:
            with pytest.raises(TurnExistsError):
                record.found_stored(stored)
            return  # the block raised on entry; its id stays used
        record.found_stored(stored)
        with pytest.raises(TurnStateError):
            record.entering()  # a block is entered once
        self.turns[turn_id] = ModelTurn(record, None if stored.is_empty else stored)

    @precondition(lambda self: self._open())
    @rule(data=st.data(), task_id=st.sampled_from(("", *TASK_IDS)))
    def follow(self, data: st.DataObject, task_id: str) -> None:
        turn_id = data.draw(st.sampled_from(self._open()))
        turn = self.turns[turn_id]
        record, stored = turn.record, turn.stored
        if turn.task_id is not None:
            with pytest.raises(TurnStateError):
                record.follow(task_id)
            return
        if not task_id:
            with pytest.raises(InvalidArgumentError):
                record.follow(task_id)
            return
        if stored is not None and (
            (stored.task is not None and stored.task.task_id != task_id)
            or (stored.task is None and stored.end is None and stored.chunks)
        ):
            with pytest.raises(TurnConflictError):
                record.follow(task_id)
            assert record.task_id is None  # refused: nothing taken on
            return
        plan = record.follow(task_id)
        previous = self.last_followed
        expected_link = None if previous in (turn_id, None) or previous in self.taken else previous
        assert plan.links_from == expected_link
        assert plan.task_id == task_id
        # Resume rules: continue after the stored run of chunks, keep the stored
        # format, write task.json only where none is, read nothing more once ended.
        assert plan.after == (0 if stored is None else stored.contiguous_next)
        assert plan.format == (None if stored is None else stored.format)
        assert plan.marks_task == (stored is None or stored.task is None)
        assert plan.starts_follower == (stored is None or stored.end is None)
        turn.task_id, turn.linked_from, turn.follows = task_id, expected_link, plan.starts_follower
        self.last_followed, self.last_task = turn_id, task_id

    @precondition(lambda self: self._open())
    @rule(data=st.data(), state=st.sampled_from(list(TrajectoryState)))
    def report_the_tasks_state(self, data: st.DataObject, state: TrajectoryState) -> None:
        turn = self.turns[data.draw(st.sampled_from(self._open()))]
        turn.record.ended(state)
        turn.reported = state

    @precondition(lambda self: self.hands_off and self._open())
    @rule(data=st.data())
    def hand_the_turn_off(self, data: st.DataObject) -> None:
        turn = self.turns[data.draw(st.sampled_from(self._open()))]
        turn.record.hand_off()
        turn.handed_off = True

    @precondition(lambda self: self.hands_off and len(self.turns) >= 2)
    @rule()
    def hand_the_step_off(self) -> None:
        self.ledger.hand_off()
        self.step_handing_off = True

    @precondition(lambda self: any(t.follows and t.task_id for t in self.turns.values()))
    @rule(data=st.data())
    def another_run_owns_the_turn(self, data: st.DataObject) -> None:
        # Its sink found another run's task.json: while following, or at the exit's
        # task mark (after the end mark was planned; the sink then refuses to write it).
        followed = [t for t, m in self.turns.items() if m.follows and m.task_id]
        turn_id = data.draw(st.sampled_from(followed))
        turn = self.turns[turn_id]
        turn.record.taken_by_another_run()
        turn.taken_while_open = turn.taken_while_open or turn.exit is None
        self.taken.add(turn_id)

    @precondition(lambda self: any(t.linked_from for t in self.turns.values()))
    @rule(data=st.data(), landed=st.booleans())
    def write_the_link(self, data: st.DataObject, landed: bool) -> None:
        linked = [t for t, m in self.turns.items() if m.linked_from]
        turn = self.turns[data.draw(st.sampled_from(linked))]
        previous = turn.record.link_to_write()
        owed = not turn.link_landed and turn.linked_from not in self.taken
        assert previous == (turn.linked_from if owed else None)
        if previous is not None:
            turn.record.link_written(landed=landed)
            turn.link_landed = turn.link_landed or landed

    @precondition(lambda self: self._open())
    @rule(
        data=st.data(),
        outcome=st.sampled_from(list(Outcome)),
        read_to_end=st.booleans(),
        last_state=st.sampled_from(TERMINAL),
    )
    def exit_the_block(
        self, data: st.DataObject, outcome: Outcome, read_to_end: bool, last_state: TrajectoryState
    ) -> None:
        turn_id = data.draw(st.sampled_from(self._open()))
        turn = self.turns[turn_id]
        turn.record.closing()
        complete = read_to_end and turn.follows  # only a follower reads the last page
        planned = turn.record.body_ended(
            outcome, complete=complete, last_state=last_state if complete else None
        )
        assert turn.record.body_ended(outcome, complete=False, last_state=None) is planned
        turn.exit = planned
        marked_before = turn.stored is not None and turn.stored.end is not None
        if (
            turn.task_id is None
            or self._handing_off(turn)
            or marked_before
            or turn_id in self.taken
        ):
            assert planned.end_mark is None, (turn_id, planned)
            return
        if complete:
            state = last_state
        elif turn.reported is not None:
            state = turn.reported
        elif outcome is Outcome.STOPPED:
            state = TrajectoryState.CANCELED
        else:
            state = TrajectoryState.FAILED
        assert planned.end_mark == EndMarkPlan(state, complete)
        self.end_marks[turn_id] = self.end_marks.get(turn_id, 0) + 1

    @precondition(lambda self: self._exited())
    @rule(data=st.data(), task_id=st.sampled_from(TASK_IDS))
    def follow_after_the_exit(self, data: st.DataObject, task_id: str) -> None:
        turn = self.turns[data.draw(st.sampled_from(self._exited()))]
        with pytest.raises(TurnStateError):
            turn.record.follow(task_id)

    # The step's own exit, after its turns' blocks (a careless caller's end() while a
    # block is open is test_careless_caller.py's).
    @precondition(lambda self: not self.lone_turn and self._exited() and not self._open())
    @rule(outcome=st.sampled_from(list(Outcome)))
    def end_the_step(self, outcome: Outcome) -> None:
        planned = self.ledger.end(outcome)
        if self.step_ended:
            assert planned is None  # once
            return
        self.step_ended = True
        last = self.last_followed
        if (
            last is None
            or last in self.taken
            or self.step_handing_off
            or any(t.handed_off for t in self.turns.values())
        ):
            assert planned is None, planned
            return
        assert planned is not None
        assert (planned.turn_id, planned.task_id) == (last, self.last_task)
        stopped = outcome is Outcome.STOPPED
        assert planned.past_state == (
            TrajectoryState.CANCELED if stopped else TrajectoryState.FAILED
        )

    # --- invariants ------------------------------------------------------------------

    @invariant()
    def at_most_one_end_mark_a_turn(self) -> None:
        assert all(count == 1 for count in self.end_marks.values()), self.end_marks

    @invariant()
    def no_link_from_a_turn_of_another_run(self) -> None:
        for turn_id, turn in self.turns.items():
            previous = turn.record.link_to_write()
            assert previous is None or (previous not in self.taken and previous != turn_id)

    def teardown(self) -> None:
        # Every block exits (as the step's own exit sees to): then each turn that
        # followed and ended for good has exactly one planned end mark, others none.
        for turn_id in self._open():
            self.exit_the_block_of(turn_id)
        for turn_id, turn in self.turns.items():
            assert turn.exit is not None
            owes = (
                turn.task_id is not None
                and not self._handing_off(turn)
                and not (turn.stored is not None and turn.stored.end is not None)
                and not turn.taken_while_open
            )
            assert self.end_marks.get(turn_id, 0) == (1 if owes else 0), (turn_id, turn)

    def exit_the_block_of(self, turn_id: str) -> None:
        turn = self.turns[turn_id]
        planned = turn.record.body_ended(Outcome.RAISED, complete=False, last_state=None)
        turn.exit = planned
        if planned.end_mark is not None:
            self.end_marks[turn_id] = self.end_marks.get(turn_id, 0) + 1


LedgerMachine.TestCase.settings = MACHINE_SETTINGS
TestStepLedger = LedgerMachine.TestCase


# --- the step's walk past turns an earlier attempt linked on to ---------------------------


@given(links=st.dictionaries(st.sampled_from(TURN_IDS), st.sampled_from([None, *TURN_IDS])))
def test_the_walk_past_the_last_turn_ends_and_visits_each_turn_once(
    links: dict[str, str | None],
) -> None:
    end = StepEnd("t0", "task-a", TrajectoryState.CANCELED)
    seen, at = ["t0"], "t0"
    while (nxt := end.past(NextLink(links[at]) if at in links else None)) is not None:
        assert nxt not in seen  # a cycle in the stored links ends the walk
        seen.append(nxt)
        at = nxt
    assert len(seen) <= len(TURN_IDS)


def test_a_turn_walked_past_is_ended_incomplete_unless_it_has_its_mark() -> None:
    end = StepEnd("t0", None, TrajectoryState.FAILED)
    keys = TurnKeys(PREFIX, "t1")
    unmarked = StoredTurn(keys, (), (), None, None, None, None)
    marked = attrs.evolve(unmarked, end=EndMark(TrajectoryState.COMPLETED, 0, True))
    assert end.end_mark_past(unmarked) == EndMarkPlan(TrajectoryState.FAILED, False)
    assert end.end_mark_past(marked) is None


# --- the machine bites ---------------------------------------------------------------------


def _ends_a_handed_off_turn(self: TurnRecord, *args: Any) -> EndMarkPlan | None:
    said, self.handing_off = self.handing_off, False
    try:
        return _REAL_END_MARK(self, *args)
    finally:
        self.handing_off = said


def _marks_a_taken_turn_last(self: StepLedger, outcome: Outcome) -> StepEnd | None:
    taken, self.taken = self.taken, set()
    try:
        return _REAL_END(self, outcome)
    finally:
        self.taken = taken


def _links_from_a_taken_turn(self: TurnRecord) -> str | None:
    return None if self.link_landed else self.linked_from


def _resumes_from_the_first_event(self: TurnRecord, task_id: str) -> Any:
    return attrs.evolve(_REAL_FOLLOW(self, task_id), after=0)


_REAL_END_MARK = TurnRecord._end_mark
_REAL_END = StepLedger.end
_REAL_FOLLOW = TurnRecord.follow

PLANTED = {
    "an end mark on a turn handed off by itself": (
        TurnRecord,
        "_end_mark",
        _ends_a_handed_off_turn,
    ),
    "the null link on a turn another run took": (StepLedger, "end", _marks_a_taken_turn_last),
    "a link from a turn another run took": (TurnRecord, "link_to_write", _links_from_a_taken_turn),
    "a resumed turn read from its first event": (
        TurnRecord,
        "follow",
        _resumes_from_the_first_event,
    ),
}


@pytest.mark.parametrize("bug", PLANTED)
def test_the_machine_catches_each_planted_bug(bug: str, monkeypatch: pytest.MonkeyPatch) -> None:
    owner, name, broken = PLANTED[bug]
    monkeypatch.setattr(owner, name, broken)
    with pytest.raises(AssertionError):
        run_state_machine_as_test(
            LedgerMachine,
            # The first counterexample will do: no shrinking.
            settings=settings(
                MACHINE_SETTINGS, phases=[Phase.generate], report_multiple_bugs=False
            ),
        )


# --- the ledger is sync: no anyio, no I/O ----------------------------------------------------

SYNC_OUTSIDE = {"anyio", "httpx", "asyncio", "trio", "socket", "threading"}


def test_the_ledger_imports_nothing_that_does_io() -> None:
    seen, outside = imports_reached("follower._turns._ledger")
    assert not outside & SYNC_OUTSIDE, sorted(outside & SYNC_OUTSIDE)
    # the walk went down the imports
    assert {"follower._turns._ledger", "follower._format._wire"} <= seen
