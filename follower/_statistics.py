"""What a turn's follower and sink have done so far, as frozen values an operator can poll.

Modelled on trio's ``statistics()`` (``trio.Lock.statistics()``,
``MemoryChannelStatistics``): taking one costs a few attribute reads and no I/O,
and a value never changes after it was taken. Sync values with no I/O; the turn's
block (``_turns``) and the step (``_step``) build them from their own records.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, final

import attrs

if TYPE_CHECKING:
    from collections.abc import Sequence


@final
@attrs.frozen(kw_only=True)
class LiveTurnStatistics:
    """A snapshot of one turn: its follower's reads and its sink's writes.

    Returned by :meth:`LiveTurn.statistics <follower.LiveTurn.statistics>`.
    Counts cover this block only: a resumed turn's earlier attempts are not in
    them (:meth:`LiveTurns.progress <follower.LiveTurns.progress>` has its stored events).
    """

    turn_id: str
    task_id: str | None
    """The task the turn follows; None until ``follow()``."""
    reads: int
    """Reads sent to the agent, answered or not (a pool wait is no read)."""
    failed_reads: int
    """Reads that brought no valid page: the agent unavailable (5xx, transport error,
    timeout; the one after stop that ends following too), a 404, a refusal, a malformed page."""
    pool_waits: int
    """Reads that found no free connection in our own pool in time (``PoolBusyError``)
    and were made again; they never reached the agent."""
    pages_stored: int
    """Chunks written to the store: one per page that had events."""
    events_stored: int
    """Events in those chunks."""
    bytes_stored: int
    """Bytes of those chunks (the marks and links are not counted)."""
    followers_alive: int
    """1 while the turn's follower runs (leasing its lane, reading, waiting), else 0."""
    lag_seconds: float | None
    """Seconds since the follower was last caught up (its last page that was not
    ``has_more``), counted to now while it runs and to when it stopped after; None
    until it is first caught up."""
    complete: bool
    """Whether the last page (terminal state, nothing more) was read and stored."""
    poll_lag_seconds: float | None = None
    """How much later than scheduled the follower's latest scheduled read began
    (after its poll interval, a backoff, or its first read's slot): the event
    loop's lag as this follower saw it. Near 0 while the process keeps up; about
    as long as the interval, or longer, when it runs more followers than it can
    serve (a warning then says so, once). None before the follower waited for a read."""


@final
@attrs.frozen(kw_only=True)
class LiveTurnsStatistics:
    """A snapshot of a step's turns: each turn's value, and their sums.

    Returned by :meth:`LiveTurns.statistics <follower.LiveTurns.statistics>`.
    The counts are sums over :attr:`turns`; ``lag_seconds`` is the largest of
    theirs, and ``complete`` says every turn that followed a task was read to its
    last page.
    """

    turns: tuple[LiveTurnStatistics, ...]
    """One value per turn, in the order the turns were opened."""
    reads: int
    failed_reads: int
    pool_waits: int
    pages_stored: int
    events_stored: int
    bytes_stored: int
    followers_alive: int
    lag_seconds: float | None
    """The largest lag of the turns (the one furthest behind), or None if none has one."""
    complete: bool
    """Whether at least one turn followed a task and every such turn is complete."""
    poll_lag_seconds: float | None = None
    """The largest poll lag of the turns, or None if none has one."""

    @classmethod
    def of_turns(cls, turns: Sequence[LiveTurnStatistics]) -> LiveTurnsStatistics:
        """The step's value: each turn's, summed."""
        lags = [t.lag_seconds for t in turns if t.lag_seconds is not None]
        poll_lags = [t.poll_lag_seconds for t in turns if t.poll_lag_seconds is not None]
        followed = [t for t in turns if t.task_id is not None]
        return cls(
            turns=tuple(turns),
            reads=sum(t.reads for t in turns),
            failed_reads=sum(t.failed_reads for t in turns),
            pool_waits=sum(t.pool_waits for t in turns),
            pages_stored=sum(t.pages_stored for t in turns),
            events_stored=sum(t.events_stored for t in turns),
            bytes_stored=sum(t.bytes_stored for t in turns),
            followers_alive=sum(t.followers_alive for t in turns),
            lag_seconds=max(lags) if lags else None,
            complete=bool(followed) and all(t.complete for t in followed),
            poll_lag_seconds=max(poll_lags) if poll_lags else None,
        )
