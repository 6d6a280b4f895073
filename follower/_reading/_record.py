"""A follower's record, kept as it runs, and what it hands back when it ends.

Every way of following (cursor reads, a stream, polls) keeps a :class:`FollowProgress`,
which the turn's statistics read at any time, and returns a :class:`FollowOutcome`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol, final

import anyio
import attrs

if TYPE_CHECKING:
    from .._format._wire import TrajectoryBatch, TrajectoryState
    from .._telemetry import ReadObserver

Sink = Callable[["TrajectoryBatch"], Awaitable[None]]
"""Where a follower hands each batch: an async callable (a turn's is ``LiveTrajectoryChunks``)."""


class Beats(Protocol):
    """A turn's heartbeats, which its follower writes between reads (``_turns._beats``)."""

    @property
    def by_follower(self) -> bool:
        """Whether the follower writes them still; once False, a task of the turn does."""

    @property
    def due(self) -> float:
        """When the next beat is due (``anyio.current_time()``)."""

    def late_at(self) -> float:
        """The latest the beat due may be written: past it, a read in flight is cut short."""

    async def beat(self) -> None:
        """Write the beat due; one that took too long moves the beats to a task."""

    def to_task(self) -> None:
        """Move the beats to a task of the turn, for good."""


@final
@attrs.frozen
class FollowOutcome:
    """What one follower did: where it got to, and whether it read every event.

    ``complete`` is true when the last page (terminal state, nothing more) was
    handed to the sink; ``state`` is the state of the last page read. ``reads``
    counts every read sent to the agent, answered or not; ``failed_reads`` those
    that brought no valid page.
    """

    state: TrajectoryState | None
    cursor: int
    complete: bool
    reads: int
    failed_reads: int
    events: int


@attrs.define
class FollowProgress:
    """A follower's running record, kept up to date as it reads; its owner may look at any time.

    Only plain fields, set by the follower's own task between checkpoints, so a
    look at it (``statistics()``) is cheap and sees one consistent moment.
    """

    cursor: int = 0
    state: TrajectoryState | None = None
    complete: bool = False
    reads: int = 0
    failed_reads: int = 0
    events: int = 0
    pool_waits: int = 0
    """Reads that found our own pool full (``PoolBusyError``); never sent, never failed."""
    running: bool = False
    """From the follower's start (its lane's lease included) until it returns or is cancelled."""
    caught_up_at: float | None = None
    """``anyio.current_time()`` of the last page that was not ``has_more``."""
    stopped_at: float | None = None
    """``anyio.current_time()`` when the follower stopped running."""
    poll_lag_seconds: float | None = None
    """How much later than scheduled the follower's latest scheduled read began: the
    event loop's lag as this follower saw it (None before it waited for a read)."""
    reconnects: int = 0
    """Streams opened again after the first (a stream follower's; 0 for the others)."""
    ending: str | None = None
    """How the follower's run ended, in ``run_follower``'s words; None while it runs."""
    observer: ReadObserver | None = None
    """Told each read's latency and each scheduled read's lateness when the step is
    measured (``_telemetry``); None, and not a call more, when it is not."""

    def lag_seconds(self, now: float | None = None) -> float | None:
        """Seconds since the follower was last caught up, up to now or to when it stopped.

        ``now`` is only read while the follower runs (``anyio.current_time()``
        if not given), so a stopped follower's lag is known outside the loop too.
        """
        if self.caught_up_at is None:
            return None
        if self.stopped_at is not None and not self.running:
            until = self.stopped_at
        else:
            until = anyio.current_time() if now is None else now
        return max(0.0, until - self.caught_up_at)

    def outcome(self) -> FollowOutcome:
        return FollowOutcome(
            state=self.state,
            cursor=self.cursor,
            complete=self.complete,
            reads=self.reads,
            failed_reads=self.failed_reads,
            events=self.events,
        )
