"""A step's turns as a sync ledger: whose turn it is, its links, hand-offs, what each exit writes.

Kept the way h11 keeps HTTP's state machine (its ``_state.py``): every state of
a step's turns and every decision about them lives here, with no I/O and no
anyio. A turn's block (``_block``) and the step (``_step``) call a transition
and carry out what it returns (start a follower, write a link, an end mark,
the null link), each under its bound, then say what happened that the ledger
must know (a link landed, another run owns the turn). So the rules can be
driven and checked with no event loop (``tests/turns/test_ledger.py``).
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

import attrs

from .._errors import InvalidArgumentError, TurnConflictError, TurnExistsError, TurnStateError
from .._format._wire import TrajectoryState
from ._chain import EndedTurn

if TYPE_CHECKING:
    from collections.abc import Set as AbstractSet

    from .._errors import ErrorContext
    from .._format._layout import NextLink, TurnKeys
    from .._storing._stored_turn import StoredTurn
    from ._chain import TurnView


class Outcome(enum.Enum):
    """How a turn's body, or a step, ended."""

    RETURNED = "returned"
    RAISED = "raised"
    STOPPED = "stopped"
    """Cancelled, or interrupted with Ctrl-C: stopped from outside, not failed."""


@attrs.frozen
class EndMarkPlan:
    """An ``end.json`` to write: the turn's state, and whether every event of its task is stored."""

    state: TrajectoryState
    complete: bool


@attrs.frozen
class FollowPlan:
    """What ``follow(task_id)`` sets going: the sink, maybe a follower, maybe a link."""

    task_id: str
    after: int
    """Events stored already: the follower reads, and the sink stores, from here."""
    format: str | None
    """The stored format the sink keeps (a resumed turn's ``meta.json``)."""
    marks_task: bool
    """Whether the sink writes ``task.json`` before anything else (not when it is stored)."""
    starts_follower: bool
    """False for a resumed turn with its end mark: it is done, nothing more is read."""
    links_from: str | None
    """The previous turn, whose ``next.json`` is now to name this one."""


@attrs.frozen
class TurnExit:
    """What a turn's exit writes, besides the link it may still owe (``link_to_write``)."""

    end_mark: EndMarkPlan | None
    """None: no task followed, handed off, marked by an earlier attempt, or another run's."""


@attrs.define(eq=False)
class TurnRecord:
    """One turn's state, from entering its block to its exit, and the rules of each step."""

    ledger: StepLedger = attrs.field(repr=False)
    keys: TurnKeys
    resume: bool = False
    task_id: str | None = attrs.field(default=None, init=False)
    reported_state: TrajectoryState | None = attrs.field(default=None, init=False)
    handing_off: bool = attrs.field(default=False, init=False)
    stored: StoredTurn | None = attrs.field(default=None, init=False)
    """What the store held of the turn on entry; None when it held nothing."""
    starts_follower: bool = attrs.field(default=False, init=False)
    linked_from: str | None = attrs.field(default=None, init=False)
    link_landed: bool = attrs.field(default=False, init=False)
    entered: bool = attrs.field(default=False, init=False)
    closed: bool = attrs.field(default=False, init=False)
    planned_exit: TurnExit | None = attrs.field(default=None, init=False)

    @property
    def turn_id(self) -> str:
        return self.keys.turn_id

    # --- entering the block ----------------------------------------------------------

    def entering(self) -> None:
        """Refuse a second entry, before anything is read."""
        if self.entered:
            raise TurnStateError(
                f"turn {self.turn_id!r}: its block can be entered once", turn_id=self.turn_id
            )

    def found_stored(self, stored: StoredTurn) -> None:
        """Enter the turn, knowing what the store holds of it: refused unless empty or resumed."""
        self.entering()
        if not stored.is_empty:
            if not self.resume:
                raise TurnExistsError(
                    f"turn {self.turn_id!r} under {self.keys.prefix_key!r} already holds "
                    f"{stored.describe()}; pass resume=True to continue it, or use another "
                    "prefix or turn id (nothing stored was touched)",
                    turn_id=self.turn_id,
                    key=self.keys.live,
                )
            self.stored = stored
        self.entered = True

    # --- the body's side -------------------------------------------------------------

    def follow(self, task_id: str) -> FollowPlan:
        """Take ``task_id`` as the turn's task; what to start. Refusals write nothing."""
        if not self.entered or self.closed:
            raise TurnStateError(
                f"turn {self.turn_id!r}: follow() after the turn's block ended",
                turn_id=self.turn_id,
                task_id=self.task_id,
            )
        if self.task_id is not None:
            raise TurnStateError(
                f"turn {self.turn_id!r} already follows task {self.task_id!r}; one task per turn",
                turn_id=self.turn_id,
                task_id=self.task_id,
            )
        if not isinstance(task_id, str) or not task_id:
            raise InvalidArgumentError(
                f"turn {self.turn_id!r}: task_id must be a non-empty string, not {task_id!r:.100}",
                turn_id=self.turn_id,
            )
        stored = self.stored
        if stored is not None:
            self._check_resumable(stored, task_id)
        self.task_id = task_id
        self.linked_from = self.ledger.followed(self.turn_id, task_id)
        # A resumed turn that has its end mark is done: nothing more is read.
        self.starts_follower = stored is None or stored.end is None
        return FollowPlan(
            task_id=task_id,
            after=0 if stored is None else stored.contiguous_next,
            format=None if stored is None else stored.format,
            # A stored turn with no task.json holds no event either (else it was refused).
            marks_task=stored is None or stored.task is None,
            starts_follower=self.starts_follower,
            links_from=self.linked_from,
        )

    def _check_resumable(self, stored: StoredTurn, task_id: str) -> None:
        where = f"turn {self.turn_id!r} under {self.keys.prefix_key!r}"
        context: ErrorContext = {"turn_id": self.turn_id, "task_id": task_id, "key": self.keys.live}
        if stored.task is not None and stored.task.task_id != task_id:
            raise TurnConflictError(
                f"{where} is stored for task {stored.task.task_id!r}, not {task_id!r}; "
                "nothing was written",
                **context,
            )
        if stored.task is None and stored.end is None and stored.chunks:
            raise TurnConflictError(
                f"{where} holds {stored.describe()} but no task.json: whose turn it is "
                "cannot be told, so it is not resumed",
                **context,
            )

    def ended(self, state: TrajectoryState) -> None:
        """The state the body says its task ended in."""
        self.reported_state = state

    def hand_off(self) -> None:
        """Leave the turn for a later attempt: no end mark, and no null link for the step."""
        self.handing_off = True
        self.ledger.handed_off = _with(self.ledger.handed_off, self.turn_id)

    # --- what the block learns as it goes ---------------------------------------------

    def taken_by_another_run(self) -> None:
        """Another run's ``task.json`` was there first: the turn is that run's to mark and link."""
        self.ledger.taken = _with(self.ledger.taken, self.turn_id)

    @property
    def is_taken(self) -> bool:
        return self.turn_id in self.ledger.taken

    def link_to_write(self) -> str | None:
        """The previous turn whose ``next.json`` is to name this one now, if still owed."""
        previous = self.linked_from
        if previous is None or self.link_landed or previous in self.ledger.taken:
            return None  # lost to another run since follow(): its links are that run's
        return previous

    def link_written(self, *, landed: bool) -> None:
        self.link_landed = self.link_landed or landed

    # --- the exit ---------------------------------------------------------------------

    def closing(self) -> None:
        """The block exits: no more ``follow()``."""
        self.closed = True

    def body_ended(
        self, outcome: Outcome, *, complete: bool, last_state: TrajectoryState | None
    ) -> TurnExit:
        """What the exit writes, once the follower is done; planned once.

        ``complete``: the follower read the last page, whose state was ``last_state``.
        """
        self.closed = True
        if self.planned_exit is None:
            self.planned_exit = TurnExit(self._end_mark(outcome, complete, last_state))
        return self.planned_exit

    def _end_mark(
        self, outcome: Outcome, complete: bool, last_state: TrajectoryState | None
    ) -> EndMarkPlan | None:
        if self.task_id is None or self.handing_off or self.ledger.handing_off or self.is_taken:
            return None
        if self.stored is not None and self.stored.end is not None:
            return None  # an earlier attempt marked it
        if complete and last_state is not None:
            state = last_state
        elif self.reported_state is not None:
            state = self.reported_state
        elif outcome is Outcome.STOPPED:
            state = TrajectoryState.CANCELED
        else:
            state = TrajectoryState.FAILED
        return EndMarkPlan(state, complete)

    # --- what the step reads of it ----------------------------------------------------

    @property
    def stored_events(self) -> int:
        """Events stored in contiguous chunks from 0 when the block was entered."""
        return 0 if self.stored is None else self.stored.contiguous_next

    def complete(self, *, read_to_end: bool) -> bool:
        """Whether every event is stored: read to the end here, or by an earlier attempt."""
        end = None if self.stored is None else self.stored.end
        return read_to_end or bool(end and end.complete)


@attrs.define(eq=False)
class StepEnd:
    """The step's last mark: the null link, and where the stored chain really ends.

    A resumed step may stop before the turns an earlier attempt linked on to:
    the walk goes past them, each gets its end mark (incomplete) if it has
    none, and the null link goes on the last.
    """

    turn_id: str
    task_id: str | None
    past_state: TrajectoryState
    """The end mark's state for turns past the last one that have none."""
    _seen: set[str] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._seen = {self.turn_id}

    def past(self, link: NextLink | None) -> str | None:
        """The turn an earlier attempt linked on to, or None: the chain ends here."""
        if link is None or link.turn is None or link.turn in self._seen:
            return None
        self._seen.add(link.turn)
        return link.turn

    def end_mark_past(self, stored: StoredTurn) -> EndMarkPlan | None:
        """A turn walked past is ended here, an empty one too: readers need its end mark."""
        return EndMarkPlan(self.past_state, False) if stored.end is None else None


_NONE: frozenset[str] = frozenset()


def _with(turn_ids: AbstractSet[str], turn_id: str) -> AbstractSet[str]:
    """``turn_ids`` with ``turn_id`` added: a set of the step's own from the first one."""
    if isinstance(turn_ids, set):
        turn_ids.add(turn_id)
        return turn_ids
    return {*turn_ids, turn_id}


@attrs.define(eq=False)
class StepLedger:
    """The state of a step's turns: their order and ids, hand-offs, turns another run took.

    Owned by one step (:class:`~follower.LiveTurns`, or a lone turn's block).
    "Previous" is the last turn that followed a task. ``handing_off`` is the
    step's word that its turns have not ended for good (no end marks, no null
    link); ``handed_off`` names the turns that said so of themselves; ``taken``
    the turns another run had claimed (its ``task.json`` was there first),
    which this step never marks nor links. The ledger also keeps what the step
    reports of each turn (``progress()``, ``statistics()``): the block while it
    is open, its final values once it closed, so a step of 10,000 turns does
    not hold 10,000 task groups, sinks and events.
    """

    last_followed: str | None = None
    handing_off: bool = attrs.field(default=False, init=False)
    # Empty in nearly every step: one shared empty set until a turn is named, not two
    # sets a step (a lone turn's block is a step of its own, thousands in a process).
    handed_off: AbstractSet[str] = attrs.field(default=_NONE, init=False)
    taken: AbstractSet[str] = attrs.field(default=_NONE, init=False)
    ended: bool = attrs.field(default=False, init=False)
    _last_task: str | None = attrs.field(default=None, init=False)
    _turn_ids: set[str] = attrs.field(factory=set, init=False)
    _views: list[TurnView] = attrs.field(factory=list, init=False, repr=False)  # in order
    _open: dict[int, int] = attrs.field(factory=dict, init=False, repr=False)  # id -> place

    def check_opening(self, turn_id: str) -> None:
        """Refuse a turn after the step's end, or a turn id used already in this step."""
        if self.ended:
            raise TurnStateError(
                f"these turns have ended; turn {turn_id!r:.100} cannot follow",
                turn_id=turn_id if isinstance(turn_id, str) else None,
            )
        if turn_id in self._turn_ids:
            raise TurnStateError(f"turn {turn_id!r} was already used in this step", turn_id=turn_id)

    def open_turn(self, keys: TurnKeys, *, resume: bool = False) -> TurnRecord:
        """The record of the step's next turn (its id used, from now on)."""
        self.check_opening(keys.turn_id)
        self._turn_ids.add(keys.turn_id)
        return TurnRecord(self, keys, resume)

    def followed(self, turn_id: str, task_id: str) -> str | None:
        """Record that ``turn_id`` follows a task; the turn it links from, if any."""
        previous, self.last_followed = self.last_followed, turn_id
        self._last_task = task_id
        if previous == turn_id or previous in self.taken:
            return None  # another run's turn: its links are that run's to write
        return previous

    def hand_off(self) -> None:
        self.handing_off = True

    @property
    def ends_for_good(self) -> bool:
        """Whether the step has ended for good: no turn of it was handed off.

        A turn left for a later attempt has no end mark yet; a null link now
        would end the chain before it, and readers would wait there for ever.
        """
        return not self.handing_off and not self.handed_off

    def end(self, outcome: Outcome) -> StepEnd | None:
        """End the step (once); its last mark, or None when there is none to write."""
        if self.ended:
            return None
        self.ended = True
        last = self.last_followed
        if last is None or last in self.taken or not self.ends_for_good:
            return None
        stopped = outcome is Outcome.STOPPED
        state = TrajectoryState.CANCELED if stopped else TrajectoryState.FAILED
        return StepEnd(last, self._last_task, state)

    # --- what the step reports of its turns --------------------------------------------

    def opened(self, view: TurnView) -> None:
        """Keep ``view`` (an open block) as the record of the next turn, until it closes."""
        self._open[id(view)] = len(self._views)
        self._views.append(view)

    def closed(self, view: TurnView) -> None:
        """Keep only ``view``'s final values: nothing of it changes after its block closed."""
        place = self._open.pop(id(view), None)
        if place is not None:
            self._views[place] = EndedTurn(view.turn_progress(), view.statistics())

    @property
    def views(self) -> tuple[TurnView, ...]:
        return tuple(self._views)
