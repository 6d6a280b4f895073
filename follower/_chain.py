"""A step's shared record of its turns: their order, their hand-offs, where each stands.

Sync values with no I/O: the step (``_step``) owns one :class:`TurnChain`, each
turn's block (``_turns``) asks it who came before and reports a :class:`TurnProgress`.
The chain also keeps each turn's record for the step's ``progress()`` and
``statistics()``: the block while it is open, its final values once it closed,
so a step of 10,000 turns does not hold 10,000 task groups, sinks and events.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import attrs

if TYPE_CHECKING:
    from ._statistics import LiveTurnStatistics


@attrs.frozen
class TurnProgress:
    """Where one turn of a step stands now: its task, and how many of its events are stored."""

    turn_id: str
    task_id: str | None
    """The task the turn follows; None until ``follow()``."""
    events_stored: int
    """Events stored in contiguous chunks from position 0 (a resumed turn's included)."""
    complete: bool
    """Whether every event of the task is stored: the terminal page was read."""


class TurnChain:
    """The order of a step's turns: who followed last, so the next one can link from it.

    Sync and owned by one step (:class:`LiveTurns`, or a lone turn's block). A
    turn that follows a task asks :meth:`followed`, and is the previous turn of
    whichever turn follows next. ``handing_off`` is the step's word that its
    turns have not ended for good (no end marks, no null link); ``handed_off``
    names the turns that said so of themselves; ``taken`` the turns another run
    had claimed (its ``task.json`` was there first), which this step never marks.
    """

    def __init__(self, last_followed: str | None = None) -> None:
        self.last_followed = last_followed
        self.handing_off = False
        self.handed_off: set[str] = set()
        self.taken: set[str] = set()
        self._turns: list[TurnRecord] = []  # in the order they were opened
        self._open: dict[int, int] = {}  # id of an open turn's record -> its place in _turns

    @property
    def ends_for_good(self) -> bool:
        """Whether the step has ended for good: no turn of it was handed off.

        A turn left for a later attempt has no end mark yet; a null link now
        would end the chain before it, and readers would wait there for ever.
        """
        return not self.handing_off and not self.handed_off

    def followed(self, turn_id: str) -> str | None:
        """Record that ``turn_id`` follows a task; the turn it links from, if any."""
        previous, self.last_followed = self.last_followed, turn_id
        return previous if previous != turn_id else None

    # --- each turn's record, for the step's progress() and statistics() ---------------

    def opened(self, turn: TurnRecord) -> None:
        """Keep ``turn`` (an open block) as the record of the next turn, until it closes."""
        self._open[id(turn)] = len(self._turns)
        self._turns.append(turn)

    def closed(self, turn: TurnRecord) -> None:
        """Keep only ``turn``'s final values: nothing of it changes after its block closed."""
        place = self._open.pop(id(turn), None)
        if place is not None:
            self._turns[place] = EndedTurn(turn.turn_progress(), turn.statistics())

    @property
    def turns(self) -> tuple[TurnRecord, ...]:
        return tuple(self._turns)


class TurnRecord(Protocol):
    """What the step reads of a turn: an open block, or an :class:`EndedTurn`."""

    @property
    def running(self) -> bool: ...

    def turn_progress(self) -> TurnProgress: ...

    def statistics(self, now: float | None = None) -> LiveTurnStatistics: ...


@attrs.frozen
class EndedTurn:
    """A closed turn's final values: two frozen snapshots, and nothing that holds its block."""

    progress: TurnProgress
    final: LiveTurnStatistics

    @property
    def running(self) -> bool:
        return False

    def turn_progress(self) -> TurnProgress:
        return self.progress

    def statistics(self, now: float | None = None) -> LiveTurnStatistics:
        return self.final
