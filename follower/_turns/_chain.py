"""What a step reports of its turns: where each stands, open or ended.

Sync values with no I/O. The step's ledger (``_ledger.StepLedger``) keeps one
:class:`TurnView` a turn, in order: the turn's block while it is open, an
:class:`EndedTurn` of its final values once it closed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, final

import attrs

if TYPE_CHECKING:
    from .._statistics import LiveTurnStatistics


@final
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


class TurnView(Protocol):
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
